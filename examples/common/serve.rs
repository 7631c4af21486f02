//! Shared by the server examples: accepting on a listener and handing
//! each connection to a flow of its own (on the least busy loop, or with
//! one `SO_REUSEPORT` listener per loop on that loop), and stopping on a
//! signal. `docs/net.md` compares the two ways with numbers.

#![allow(dead_code)] // each including crate uses a part of it

use futoin_asyncsteps::io::mio::net::{TcpListener, TcpStream};
use futoin_asyncsteps::io::{mio::Interest, net, Ready};
use futoin_asyncsteps::{
    runtime::Runtime, runtime::RuntimeHandle, AsyncSteps, Promise, Step, TakeOnce,
};
use signal_hook::consts::SIGINT;
use signal_hook_mio::v1_0::Signals;
use std::net::SocketAddr;
use std::time::Duration;

/// How a server spreads its connections over the loops.
///
/// Both give the same throughput on the benchmarks (`cargo bench --bench
/// net`, figures in `docs/net.md`); `Accept` is the default because it
/// spreads by load whatever the number of connections (the kernel's
/// `SO_REUSEPORT` hash put 4 connections all on one of two listeners in 5
/// of 20 trials), behaves the same on every platform, and needs no socket
/// option outside std and mio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// One listener; its acceptor flow hands each connection to a new
    /// root flow on the loop with the fewest flows (the default).
    Accept,
    /// One `SO_REUSEPORT` listener per loop, each with an acceptor flow on
    /// its loop; the kernel spreads the connections over the listeners
    /// (by a hash of the addresses) and each connection's flow starts on
    /// the loop that accepted it.
    ReusePort,
}

impl Spread {
    /// `--reuseport` among the command line arguments selects
    /// [`Spread::ReusePort`].
    pub fn from_args() -> Self {
        if std::env::args().any(|a| a == "--reuseport") {
            Spread::ReusePort
        } else {
            Spread::Accept
        }
    }
}

/// The servers' runtime: one loop per core, pinned to its core unless
/// `--no-pin` is among the command line arguments. Pinning keeps a loop's
/// caches warm on a machine the server has to itself; when a load
/// generator or other busy processes share the cores (`wrk` on the same
/// 2-core machine, say), a pinned loop cannot move off a busy core and
/// `--no-pin` serves more (see `docs/net.md`).
pub fn runtime_from_args() -> std::io::Result<Runtime> {
    let pin = !std::env::args().any(|a| a == "--no-pin");
    Runtime::builder().pin_threads(pin).build()
}

/// Listens on `addr` and serves every connection with the flow
/// `serve(conn)` on `rt`, spread as `spread` says. Returns the bound
/// address (useful with port 0) and the acceptor flows: cancel them to
/// stop accepting.
pub fn listen(
    rt: &Runtime,
    addr: SocketAddr,
    spread: Spread,
    serve: impl Fn(TcpStream) -> AsyncSteps + Clone + Send + 'static,
) -> std::io::Result<(SocketAddr, Vec<Promise<()>>)> {
    match spread {
        Spread::Accept => {
            let l = TcpListener::bind(addr)?;
            let addr = l.local_addr()?;
            Ok((addr, vec![rt.spawn(acceptor(l, rt.handle(), serve))]))
        }
        Spread::ReusePort => {
            let first = reuseport_listener(addr)?;
            let addr = first.local_addr()?; // the port, when `addr` had 0
            let mut ls = vec![first];
            for _ in 1..rt.loops() {
                ls.push(reuseport_listener(addr)?);
            }
            let mut accepting = Vec::new();
            for (i, l) in ls.into_iter().enumerate() {
                let on = rt.loop_handle(i).expect("one listener per loop");
                let serve = serve.clone();
                accepting.push(on.promise(accept_loop(l, move |s, conn| {
                    // Started here, on the accepting loop: no hand-over.
                    serve(conn).execute(s.tool());
                })));
            }
            Ok((addr, accepting))
        }
    }
}

/// A non-blocking listener on `addr` with `SO_REUSEPORT` (and
/// `SO_REUSEADDR`) set before binding, so that several can share the
/// address.
pub fn reuseport_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(TcpListener::from_std(s.into()))
}

/// Accepts forever; each connection becomes the flow `serve(conn)` on the
/// least busy loop. A failed accept (out of file descriptors, say) is
/// reported on stderr and retried after 100 ms: the server never stops
/// accepting on its own.
pub fn acceptor(
    listener: TcpListener,
    rt: RuntimeHandle,
    serve: impl Fn(TcpStream) -> AsyncSteps + Clone + Send + 'static,
) -> AsyncSteps {
    accept_loop(listener, move |_, conn| rt.execute_balanced(serve(conn)))
}

/// Accepts forever on `listener`, calling `start(step, conn)` for each
/// connection (see [`acceptor`] for failed accepts).
pub fn accept_loop(
    listener: TcpListener,
    start: impl Fn(&mut Step<'_>, TcpStream) + Clone + Send + 'static,
) -> AsyncSteps {
    let listener = TakeOnce::new(listener);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let l = s.stack(listener.take()?);
        let start = start.clone();
        s.loop_(move |s| {
            s.add_catch(
                move |s, ()| {
                    net::accept(s, l);
                    Ok(())
                },
                |s, e| {
                    if e.code() != futoin_asyncsteps::error::codes::COMM_ERROR {
                        return Ok(()); // not an accept failure: let it go on
                    }
                    // Out of descriptors or buffers, say: back off, retry.
                    eprintln!(
                        "accept failed ({}); retrying in 100 ms",
                        e.info().unwrap_or("?")
                    );
                    s.add_catch(
                        |s, ()| {
                            s.set_timeout(std::time::Duration::from_millis(100));
                            Ok(())
                        },
                        |s, _| s.continue_loop(),
                    );
                    Ok(())
                },
            );
            let start = start.clone();
            s.add(move |s, (conn, _peer): (TcpStream, SocketAddr)| {
                start(s, conn);
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    root
}

/// Error handler for a connection's flow: a peer that resets or breaks
/// the connection, or stays idle past the server's limit (`Timeout`), ends
/// that flow quietly; anything else goes on.
pub fn end_quietly_on_peer_error(
    s: &mut futoin_asyncsteps::Step<'_>,
    e: &futoin_asyncsteps::Error,
) -> futoin_asyncsteps::StepResult {
    use futoin_asyncsteps::error::codes;
    if e.code() == codes::COMM_ERROR || e.code() == codes::TIMEOUT {
        s.success(())
    } else {
        Ok(())
    }
}

/// The idle limit of a served connection: `--idle-timeout=SECS` on the
/// command line (fractions allowed); none without it. A client that sends
/// nothing, or stops reading its replies, for that long is let go; without
/// a limit it holds its connection (a socket, its buffers) for good. Each
/// wait then has a timer, which the benchmarks leave out as their tokio
/// peers have no limit either.
pub fn idle_from_args() -> Result<Option<Duration>, String> {
    let value = std::env::args().find_map(|a| a.strip_prefix("--idle-timeout=").map(str::to_owned));
    value.map(|v| parse_idle(&v)).transpose()
}

/// The value of `--idle-timeout=SECS`: seconds, at least a nanosecond
/// (a smaller one would be a zero limit, failing every wait at once) and
/// at most a day.
pub fn parse_idle(v: &str) -> Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(secs) if (1e-9..=86_400.0).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "--idle-timeout wants seconds, from 0.000000001 to 86400; got {v:?}"
        )),
    }
}

/// Completes with the number of the first of `signals` to arrive.
pub fn until_signal(signals: Signals) -> AsyncSteps {
    let signals = TakeOnce::new(signals);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let sig = s.stack(signals.take()?);
        s.add(move |s, ()| s.wait_io(sig, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            let first = s.stack_get(sig)?.pending().next().unwrap_or(SIGINT);
            s.success((first,))
        });
        Ok(())
    });
    root
}
