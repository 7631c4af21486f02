//! Shared by the server examples: accepting on a listener and handing
//! each connection to a flow of its own, and stopping on a signal.

use futoin_asyncsteps::io::{net, Interest, Ready};
use futoin_asyncsteps::{AsyncSteps, RuntimeHandle, TakeOnce};
use mio::net::{TcpListener, TcpStream};
use signal_hook::consts::SIGINT;
use signal_hook_mio::v1_0::Signals;
use std::net::SocketAddr;

/// Accepts forever; each connection becomes the flow `serve(conn)` on the
/// least busy loop. A failed accept (out of file descriptors, say) is
/// reported on stderr and retried after 100 ms: the server never stops
/// accepting on its own.
pub fn acceptor(
    listener: TcpListener,
    rt: RuntimeHandle,
    serve: impl Fn(TcpStream) -> AsyncSteps + Clone + Send + 'static,
) -> AsyncSteps {
    let listener = TakeOnce::new(listener);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let l = s.stack(listener.take()?);
        let (rt, serve) = (rt.clone(), serve.clone());
        s.loop_(move |s| {
            s.add_catch(
                move |s, ()| {
                    net::accept(s, l);
                    Ok(())
                },
                |s, e| {
                    if e.code() != futoin_asyncsteps::codes::COMM_ERROR {
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
            let (rt, serve) = (rt.clone(), serve.clone());
            s.add(move |_, (conn, _peer): (TcpStream, SocketAddr)| {
                rt.execute_balanced(serve(conn));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    root
}

/// Error handler for a connection's flow: a peer that resets or breaks
/// the connection ends that flow quietly; anything else goes on.
pub fn end_quietly_on_comm_error(
    s: &mut futoin_asyncsteps::Step<'_>,
    e: &futoin_asyncsteps::Error,
) -> futoin_asyncsteps::StepResult {
    if e.code() == futoin_asyncsteps::codes::COMM_ERROR {
        s.success(())
    } else {
        Ok(())
    }
}

/// Completes with the number of the first of `signals` to arrive.
#[allow(dead_code)] // the benchmark includes this file without it
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
