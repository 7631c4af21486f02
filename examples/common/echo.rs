//! The connection flow of `examples/echo_server.rs`, shared with the
//! network benchmark.

use futoin_asyncsteps::io::mio::net::TcpStream;
use futoin_asyncsteps::io::net::{self, ServeOptions, Then};
use futoin_asyncsteps::{AsyncSteps, TakeOnce};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One connection: read what arrives, write it back, until end of stream
/// (one step per round trip: `serve_stream`).
#[allow(dead_code)] // the echo server itself passes its idle limit
pub fn connection(conn: TcpStream, served: Arc<AtomicU64>) -> AsyncSteps {
    connection_idle(conn, served, None)
}

/// [`connection`], closed quietly when the client sends nothing (or reads
/// nothing of a blocked reply) for `idle`.
pub fn connection_idle(
    conn: TcpStream,
    served: Arc<AtomicU64>,
    idle: Option<Duration>,
) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            let c = s.stack(conn.take()?);
            let mut opts = ServeOptions::default();
            opts.idle_timeout = idle;
            net::serve_stream_with(s, c, opts, |input, output| {
                output.append(input);
                Ok(Then::Read)
            });
            Ok(())
        },
        crate::serve::end_quietly_on_peer_error,
    );
    root.add(move |_, ()| {
        served.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    root
}
