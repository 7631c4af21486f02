//! The connection flow of `examples/echo_server.rs`, shared with the
//! network benchmark.

use futoin_asyncsteps::io::mio::net::TcpStream;
use futoin_asyncsteps::io::net::{self, ServeOptions, Then};
use futoin_asyncsteps::{AsyncSteps, TakeOnce};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One connection: read what arrives, write it back, until end of stream
/// (one step per round trip: `serve_stream`); with an `idle` limit, closed
/// quietly when the client sends nothing (or reads nothing of a blocked
/// reply) for that long.
pub fn connection(conn: TcpStream, served: Arc<AtomicU64>, idle: Option<Duration>) -> AsyncSteps {
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
