//! A TCP echo server on all loops: each connection is a root flow of its
//! own, placed on the least busy loop; it reads what arrives and writes it
//! back until the client closes.
//!
//! ```sh
//! cargo run --release --example echo_server            # 127.0.0.1:7007
//! cargo run --release --example echo_server 0.0.0.0:9000
//! ```
//!
//! Ctrl-C (SIGINT) or SIGTERM stops it cleanly: a flow waiting on the
//! signals (a mio source, like a socket) cancels the acceptor, the runtime
//! shuts down (open connections are cancelled on their own loops and their
//! sockets closed), and the process exits with status 0.

use futoin_asyncsteps::io::{net, Interest, Ready};
use futoin_asyncsteps::{AsyncSteps, Runtime, RuntimeHandle, TakeOnce};
use mio::net::{TcpListener, TcpStream};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One connection: read some, write it back, until end of stream.
fn connection(conn: TcpStream, served: Arc<AtomicU64>) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
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
    });
    root.add(move |_, ()| {
        served.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    root
}

/// Accepts forever, handing each connection to a flow on the least busy
/// loop.
fn acceptor(listener: TcpListener, rt: RuntimeHandle, served: Arc<AtomicU64>) -> AsyncSteps {
    let listener = TakeOnce::new(listener);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let l = s.stack(listener.take()?);
        let (rt, served) = (rt.clone(), served.clone());
        s.loop_(move |s| {
            net::accept(s, l);
            let (rt, served) = (rt.clone(), served.clone());
            s.add(move |_, (conn, _peer): (TcpStream, SocketAddr)| {
                rt.execute_balanced(connection(conn, served));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    root
}

/// Completes when SIGINT or SIGTERM arrives.
fn until_signal(signals: Signals) -> AsyncSteps {
    let signals = TakeOnce::new(signals);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let sig = s.stack(signals.take()?);
        s.add(move |s, ()| s.wait_io(sig, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            let got: Vec<i32> = s.stack_get(sig)?.pending().collect();
            s.success((got.first().copied().unwrap_or(SIGINT),))
        });
        Ok(())
    });
    root
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7007".to_owned())
        .parse()?;
    let rt = Runtime::new()?;
    let listener = TcpListener::bind(addr)?;
    println!(
        "echo server on {} with {} loops; Ctrl-C to stop",
        listener.local_addr()?,
        rt.loops()
    );
    let served = Arc::new(AtomicU64::new(0));
    let signals = Signals::new([SIGINT, SIGTERM])?;
    let stop = rt.spawn::<(i32,)>(until_signal(signals));
    let accepting = rt.spawn::<()>(acceptor(listener, rt.handle(), served.clone()));

    let (sig,) = stop.wait()?;
    println!("signal {sig}: stopping");
    accepting.cancel();
    let _ = accepting.wait(); // Canceled
    rt.shutdown(); // cancels open connections on their loops, joins the loops
    println!(
        "served {} connections to the end",
        served.load(Ordering::Relaxed)
    );
    Ok(())
}
