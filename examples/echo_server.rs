//! A TCP echo server on all loops: each connection is a root flow of its
//! own, placed on the least busy loop (or, with `--reuseport`, on the loop
//! whose `SO_REUSEPORT` listener accepted it; see `docs/net.md`); it reads
//! what arrives and writes it back until the client closes.
//!
//! ```sh
//! cargo run --release --example echo_server            # 127.0.0.1:7007
//! cargo run --release --example echo_server 0.0.0.0:9000
//! cargo run --release --example echo_server -- --reuseport
//! cargo run --release --example echo_server -- --no-pin  # loops not pinned to cores
//! cargo run --release --example echo_server -- --idle-timeout=60
//! ```
//!
//! `--idle-timeout=SECS` closes a connection whose client sends nothing,
//! or reads nothing of a blocked reply, for that long (see
//! `http_server`); off by default.
//!
//! Ctrl-C (SIGINT) or SIGTERM stops it cleanly: a flow waiting on the
//! signals (a mio source, like a socket) cancels the acceptor, the runtime
//! shuts down (open connections are cancelled on their own loops and their
//! sockets closed), and the process exits with status 0.

#[path = "common/echo.rs"]
mod echo;
#[path = "common/serve.rs"]
mod serve;

use serve::Spread;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_else(|| "127.0.0.1:7007".to_owned())
        .parse()?;
    let spread = Spread::from_args();
    let rt = serve::runtime_from_args()?;
    let idle = serve::idle_from_args().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let served = Arc::new(AtomicU64::new(0));
    let signals = Signals::new([SIGINT, SIGTERM])?;
    let stop = rt.spawn::<(i32,)>(serve::until_signal(signals));
    let served2 = served.clone();
    let (addr, accepting) = serve::listen(&rt, addr, spread, move |conn| {
        echo::connection(conn, served2.clone(), idle)
    })?;
    println!(
        "echo server on {addr} with {} loops ({spread:?}); Ctrl-C to stop",
        rt.loops()
    );

    let (sig,) = stop.wait()?;
    println!("signal {sig}: stopping");
    for a in accepting {
        a.cancel();
        let _ = a.wait(); // Canceled
    }
    rt.shutdown(); // cancels open connections on their loops, joins the loops
    println!(
        "served {} connections to the end",
        served.load(Ordering::Relaxed)
    );
    Ok(())
}
