//! The connection flow of `examples/echo_server.rs`, shared with the
//! network benchmark.

use futoin_asyncsteps::io::mio::net::TcpStream;
use futoin_asyncsteps::io::net::{self, Then};
use futoin_asyncsteps::{AsyncSteps, TakeOnce};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One connection: read what arrives, write it back, until end of stream
/// (one step per round trip: `serve_stream`).
pub fn connection(conn: TcpStream, served: Arc<AtomicU64>) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            let c = s.stack(conn.take()?);
            net::serve_stream(s, c, 16 * 1024, |input, output| {
                output.append(input);
                Ok(Then::Read)
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
