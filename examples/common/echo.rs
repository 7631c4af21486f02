//! The connection flow of `examples/echo_server.rs`, shared with the
//! network benchmark.

use futoin_asyncsteps::io::net;
use futoin_asyncsteps::{AsyncSteps, TakeOnce};
use mio::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One connection: read some, write it back, until end of stream.
pub fn connection(conn: TcpStream, served: Arc<AtomicU64>) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            let c = s.stack(conn.take()?);
            s.loop_(move |s| {
                net::read_some(s, c, 16 * 1024);
                s.add(move |s, (data,): (Vec<u8>,)| {
                    if data.is_empty() {
                        return s.break_loop(); // the client closed
                    }
                    net::write_all(s, c, data);
                    Ok(())
                });
                Ok(())
            });
            Ok(())
        },
        crate::serve::end_quietly_on_comm_error,
    );
    root.add(move |_, ()| {
        served.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    root
}
