//! I/O readiness as a step: readable and writable waits on real loopback
//! sockets, re-waiting, timeout and cancel (deregistered, nothing delivered
//! later), and the errors of bad use.

use crate::common::*;
use crate::tcp::{conn_flow, pair};
use futoin_asyncsteps::io::{mio::Interest, Ready};
use futoin_asyncsteps::{
    error::codes, AsyncSteps, AsyncTool, Error, StackRef, Step, StepResult, TakeOnce, TestTool,
};
use mio::net::TcpStream;
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

/// Runs [`conn_flow`] on the server side of a fresh pair; returns the error
/// the flow failed with.
fn error_of<F>(tool: &mut AsyncTool, body: F) -> Error
where
    F: FnOnce(&mut Step<'_>, StackRef<TcpStream>) -> StepResult + Clone + Send + 'static,
{
    let (_client, server) = pair();
    let p = conn_flow(server, body).promise::<()>(tool);
    tool.block_on(p).unwrap_err()
}

/// Runs turns until one has handled an event: here, the edge of data just
/// sent while no step waits on the socket.
fn run_until_an_event(tool: &mut AsyncTool) {
    while tool.iterate(Some(Duration::from_millis(50))).unwrap() == 0 {}
}

/// Reads what is there until `WouldBlock` (edge-triggered readiness).
fn drain(s: &mut Step<'_>, conn: StackRef<TcpStream>) -> Result<Vec<u8>, Error> {
    let c = s.stack_get(conn)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(out),
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn readable_then_read_then_wait_again() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let r = Log::default();
    let r2 = r.clone();
    let root = conn_flow(server, move |s, conn| {
        for _ in 0..2 {
            let r = r2.clone();
            s.add(move |s, ()| s.wait_io(conn, Interest::READABLE));
            s.add(move |s, (ready,): (Ready,)| {
                assert!(ready.readable);
                r.push(String::from_utf8(drain(s, conn)?).unwrap());
                Ok(())
            });
        }
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client.write_all(b"one").unwrap();
    // Run until the first read happened, then send the second part.
    while r.get().is_empty() {
        tool.iterate(Some(Duration::from_millis(100))).unwrap();
    }
    assert_eq!(tool.stats().io, 1, "the second wait is registered");
    client.write_all(b"two").unwrap();
    tool.block_on(p).unwrap();
    assert_eq!(r.get(), ["one", "two"]);
    assert_eq!(tool.stats().io, 0);
}

#[test]
fn writable_on_a_fresh_connection() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    // The source lives in the waiting step's own frame.
    let mut root = conn_flow(server, |s, conn| s.wait_io(conn, Interest::WRITABLE));
    root.add(|s, (ready,): (Ready,)| s.success((ready.writable,)));
    let p = root.promise::<(bool,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (true,));
    assert_eq!(tool.stats().io, 0);
    // The server side was dropped with its step: the client sees EOF.
    let mut buf = [0u8; 4];
    assert_eq!(client.read(&mut buf).unwrap(), 0);
}

#[test]
fn a_timeout_deregisters_and_the_source_can_wait_again() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let r = Log::default();
    let r2 = r.clone();
    let root = conn_flow(server, move |s, conn| {
        let r = r2.clone();
        s.add_catch(
            move |s, ()| {
                s.set_timeout(Duration::from_millis(20));
                s.wait_io(conn, Interest::READABLE)
            },
            move |s, e| {
                r.push(e.code().to_string());
                s.success((Ready::default(),))
            },
        );
        s.add(move |s, (_,): (Ready,)| s.wait_io(conn, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            let text = String::from_utf8(drain(s, conn)?).unwrap();
            s.success((text,))
        });
        Ok(())
    });
    let p = root.promise::<(String,)>(&mut tool);
    while r.get().is_empty() {
        tool.iterate(Some(Duration::from_millis(100))).unwrap();
    }
    assert_eq!(r.get(), [codes::TIMEOUT]);
    client.write_all(b"late").unwrap();
    assert_eq!(tool.block_on(p).unwrap().0, "late");
    assert_eq!(tool.stats().io, 0);
}

#[test]
fn cancel_while_waiting_deregisters_and_later_data_is_harmless() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let cancelled = Log::default();
    let c2 = cancelled.clone();
    let root = conn_flow(server, move |s, conn| {
        let c = c2.clone();
        s.add(move |s, ()| {
            s.set_cancel(move || c.push("cancel callback"));
            s.wait_io(conn, Interest::READABLE)
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(tool.stats().io, 1);
    p.cancel();
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(cancelled.get(), ["cancel callback"]);
    assert_eq!(tool.stats().io, 0);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::CANCELED);
    assert_eq!(tool.stats().flows, 0);
    // A new flow waits on a new socket (its registration may reuse the
    // cancelled one's slot). Data for the old socket, whose flow closed
    // it, does not wake the new one; data for the new one does.
    let (mut client2, server2) = pair();
    let root2 = conn_flow(server2, |s, conn| s.wait_io(conn, Interest::READABLE));
    let p2 = root2.promise::<(Ready,)>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(tool.stats().io, 1);
    let _ = client.write_all(b"after");
    tool.iterate(Some(Duration::from_millis(10))).unwrap();
    assert!(!p2.is_done());
    assert_eq!((tool.stats().flows, tool.stats().io), (1, 1));
    client2.write_all(b"now").unwrap();
    let (ready,) = tool.block_on(p2).unwrap();
    assert!(ready.readable);
}

#[test]
fn bad_use_is_an_internal_error() {
    // No reactor on the virtual-time tool.
    let mut vt = TestTool::new();
    let (_client, server) = pair();
    let root = conn_flow(server, |s, conn| s.wait_io(conn, Interest::READABLE));
    let p = root.promise::<()>(&mut vt);
    vt.run_all();
    let e = vt.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some(
                "wait_io(): this loop has no I/O reactor (TestTool); \
                 run the flow on an AsyncTool or a Runtime"
            )
        )
    );

    // Two waits in one step.
    let mut tool = AsyncTool::new().unwrap();
    let e = error_of(&mut tool, |s, conn| {
        s.wait_io(conn, Interest::READABLE)?;
        s.wait_io(conn, Interest::READABLE)
    });
    assert_eq!(e.info(), Some("wait_io(): this step already waits for I/O"));
    assert_eq!(tool.stats().io, 0);

    // A reference from another flow.
    let slot: Slot<StackRef<TcpStream>> = slot();
    let (_client, server) = pair();
    let mut a = AsyncSteps::new();
    let s1 = slot.clone();
    a.add(move |s, ()| {
        *s1.lock().unwrap() = Some(s.stack(server.take()?));
        s.wait_external(); // keep the flow (and its stack) alive
        Ok(())
    });
    let _pa = a.promise::<()>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    let foreign = slot.lock().unwrap().take().unwrap();
    let mut b = AsyncSteps::new();
    b.add(move |s, ()| s.wait_io(foreign, Interest::READABLE));
    let pb = b.promise::<()>(&mut tool);
    let e = tool.block_on(pb).unwrap_err();
    assert_eq!(
        e.info(),
        Some("wait_io(): the source belongs to another flow")
    );
}

#[test]
fn a_flow_on_a_runtime_loop_accepts_a_connection() {
    let rt = futoin_asyncsteps::runtime::Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .build()
        .unwrap();
    let listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = TakeOnce::new(listener);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let l = s.stack(listener.take()?);
        s.add(move |s, ()| s.wait_io(l, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            let (_conn, peer) = s.stack_get(l)?.accept().expect("a pending connection");
            s.success((peer.port(),))
        });
        Ok(())
    });
    let p = rt.spawn::<(u16,)>(root);
    let client = std::net::TcpStream::connect(addr).unwrap();
    let (port,) = p.wait().unwrap();
    assert_eq!(port, client.local_addr().unwrap().port());
}

#[test]
fn readiness_between_two_waits_is_kept_for_the_next_wait() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let r = Log::default();
    let gate: Slot<futoin_asyncsteps::ExternalHandle> = slot();
    let (r2, g2) = (r.clone(), gate.clone());
    let root = conn_flow(server, move |s, conn| {
        let (r, g, r3) = (r2.clone(), g2.clone(), r2.clone());
        s.add(move |s, ()| s.wait_io(conn, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            r.push(String::from_utf8(drain(s, conn)?).unwrap());
            // Not waiting on the socket now: park until the test says so.
            *g.lock().unwrap() = Some(s.wait_external());
            Ok(())
        });
        s.add(move |s, ()| s.wait_io(conn, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            r3.push(String::from_utf8(drain(s, conn)?).unwrap());
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client.write_all(b"a").unwrap();
    while gate.lock().unwrap().is_none() {
        tool.iterate(Some(Duration::from_millis(100))).unwrap();
    }
    // The edge for "b" comes while no step waits on the socket.
    client.write_all(b"b").unwrap();
    run_until_an_event(&mut tool);
    assert_eq!(tool.stats().io, 1, "still registered, nobody waiting");
    gate.lock().unwrap().take().unwrap().success(()).unwrap();
    tool.block_on(p).unwrap();
    assert_eq!(r.get(), ["a", "b"]);
    assert_eq!(tool.stats().io, 0);
}

#[test]
fn two_steps_cannot_wait_on_one_source_at_once() {
    let mut tool = AsyncTool::new().unwrap();
    let e = error_of(&mut tool, |s, conn| {
        s.parallel()
            .add(move |s, ()| s.wait_io(conn, Interest::READABLE))
            .add(move |s, ()| s.wait_io(conn, Interest::READABLE));
        Ok(())
    });
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some("wait_io(): another step already waits on this source")
        )
    );
    assert_eq!(tool.stats().io, 0);
}

#[test]
fn a_readable_wait_does_not_use_up_a_writable_edge() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let root = conn_flow(server, move |s, conn| {
        s.add(move |s, ()| s.wait_io(conn, Interest::WRITABLE));
        // Widens the registration to readable + writable.
        s.add(move |s, (_,): (Ready,)| s.wait_io(conn, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| {
            drain(s, conn)?;
            Ok(())
        });
        s.add(move |s, ()| {
            timed_wait_ok(s, conn, Interest::WRITABLE);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(bool,)>(&mut tool);
    for _ in 0..5 {
        tool.iterate(Some(Duration::from_millis(20))).unwrap();
    }
    client.write_all(b"x").unwrap();
    // The socket stays writable: the last wait completes, no timeout.
    assert_eq!(tool.block_on(p).unwrap(), (true,));
}

/// `timed_wait` reduced to "did it complete without a timeout".
fn timed_wait_ok(s: &mut Step<'_>, conn: StackRef<TcpStream>, i: Interest) {
    s.add_catch(
        move |s, ()| {
            s.set_timeout(Duration::from_millis(500));
            s.wait_io(conn, i)
        },
        |s, _| s.success((Ready::default(),)),
    );
    s.add(|s, (r,): (Ready,)| s.success((r != Ready::default(),)));
}

#[test]
fn kept_readiness_survives_a_wait_cancelled_before_it_was_delivered() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let gate: Slot<futoin_asyncsteps::ExternalHandle> = slot();
    let g2 = gate.clone();
    let root = conn_flow(server, move |s, conn| {
        // Register the source, then stop waiting on it.
        s.add_catch(
            move |s, ()| {
                s.set_timeout(Duration::from_millis(10));
                s.wait_io(conn, Interest::READABLE)
            },
            |s, _| s.success(()),
        );
        let g = g2.clone();
        s.add(move |s, ()| {
            *g.lock().unwrap() = Some(s.wait_external());
            Ok(())
        });
        // This wait finds the kept edge, but a sibling fails in the same
        // turn and cancels it before the edge is handed over.
        s.add_catch(
            move |s, ()| {
                s.parallel()
                    .add(move |s, ()| s.wait_io(conn, Interest::READABLE))
                    .add(|s, ()| s.error("Boom", "sibling failed"));
                Ok(())
            },
            |s, _| s.success(()),
        );
        s.add(move |s, ()| {
            timed_wait_ok(s, conn, Interest::READABLE);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(bool,)>(&mut tool);
    while gate.lock().unwrap().is_none() {
        tool.iterate(Some(Duration::from_millis(50))).unwrap();
    }
    client.write_all(b"data").unwrap();
    run_until_an_event(&mut tool); // the edge is kept
    gate.lock().unwrap().take().unwrap().success(()).unwrap();
    assert_eq!(tool.block_on(p).unwrap(), (true,));
}

/// A step body given the socket.
type Body = fn(&mut Step<'_>, StackRef<TcpStream>) -> StepResult;

#[test]
fn wait_io_with_sub_steps_or_success_in_one_step_is_refused() {
    let mut tool = AsyncTool::new().unwrap();
    let cases: [(Body, &str); 3] = [
        (
            |s, c| {
                s.wait_io(c, Interest::READABLE)?;
                s.add(|_, ()| Ok(()));
                Ok(())
            },
            "add() after wait_io(): the readiness completes this step",
        ),
        (
            |s, c| {
                s.wait_io(c, Interest::READABLE)?;
                s.success(())
            },
            "success() after wait_io(): the readiness completes this step",
        ),
        (
            |s, c| {
                s.add(|_, ()| Ok(()));
                s.wait_io(c, Interest::READABLE)
            },
            "wait_io() after add() or success() in the same step",
        ),
    ];
    for (body, info) in cases {
        let e = error_of(&mut tool, move |s, conn| {
            s.add(move |s, ()| body(s, conn));
            Ok(())
        });
        assert_eq!((e.code(), e.info()), (codes::INTERNAL_ERROR, Some(info)));
        assert_eq!(tool.stats().io, 0);
    }
}

#[test]
fn release_io_is_refused_while_a_step_waits_on_the_source() {
    let mut tool = AsyncTool::new().unwrap();
    let e = error_of(&mut tool, |s, conn| {
        s.parallel()
            .add(move |s, ()| s.wait_io(conn, Interest::READABLE))
            .add(move |s, ()| {
                // Runs after the sibling started waiting.
                s.add(move |s, ()| s.release_io(conn));
                Ok(())
            });
        Ok(())
    });
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some("release_io(): a step is waiting on this source")
        )
    );
    assert_eq!(tool.stats().io, 0);
}

/// A `wait_io` refused after the step was marked waiting (here: another
/// step already waits on the source) leaves the step as it was: a
/// callback that ignores the error ends its step, which used to wait for
/// good with nothing to wake it. (The outer timeout only fires on that
/// failure.)
#[test]
fn an_ignored_wait_io_error_leaves_the_step_not_waiting() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = pair();
    let r = Log::default();
    let r2 = r.clone();
    let root = conn_flow(server, move |s, conn| {
        s.set_timeout(Duration::from_secs(5));
        let r = r2.clone();
        s.parallel()
            .add(move |s, ()| s.wait_io(conn, Interest::READABLE))
            .add(move |s, ()| {
                let e = s.wait_io(conn, Interest::READABLE).unwrap_err();
                r.push(e.info().unwrap_or_default());
                Ok(())
            });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client.write_all(b"x").unwrap();
    tool.block_on(p).unwrap();
    assert_eq!(
        r.get(),
        ["wait_io(): another step already waits on this source"]
    );
    assert_eq!(tool.stats().io, 0);
}

/// A user source that panics when registered or deregistered.
struct Touchy {
    inner: TcpStream,
    on_register: bool,
    on_deregister: bool,
}

impl mio::event::Source for Touchy {
    fn register(
        &mut self,
        r: &mio::Registry,
        t: mio::Token,
        i: mio::Interest,
    ) -> std::io::Result<()> {
        if self.on_register {
            panic!("touchy register");
        }
        self.inner.register(r, t, i)
    }
    fn reregister(
        &mut self,
        r: &mio::Registry,
        t: mio::Token,
        i: mio::Interest,
    ) -> std::io::Result<()> {
        self.inner.reregister(r, t, i)
    }
    fn deregister(&mut self, r: &mio::Registry) -> std::io::Result<()> {
        if self.on_deregister {
            panic!("touchy deregister");
        }
        self.inner.deregister(r)
    }
}

/// A source whose `register` panics fails its flow with `InternalError`
/// and leaves no registration behind (its slot was kept, so the loop
/// counted a source for good).
#[test]
fn a_panicking_register_leaves_no_registration() {
    hide_panics("touchy");
    let mut tool = AsyncTool::new().unwrap();
    let (_client, server) = pair();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let src = s.stack(Touchy {
            inner: server.take()?,
            on_register: true,
            on_deregister: false,
        });
        s.wait_io(src, Interest::READABLE)
    });
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some("panic in step: touchy register")
        )
    );
    assert_eq!(tool.stats().io, 0);
}

/// Two sources registered by one step, the first of which panics when
/// deregistered: the second is deregistered all the same.
#[test]
fn a_panicking_deregister_does_not_keep_the_other_sources() {
    hide_panics("touchy");
    let mut tool = AsyncTool::new().unwrap();
    let (mut client_a, server_a) = pair();
    let (mut client_b, server_b) = pair();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let a = s.stack(Touchy {
            inner: server_a.take()?,
            on_register: false,
            on_deregister: true,
        });
        let b = s.stack(server_b.take()?);
        s.add(move |s, ()| s.wait_io(a, Interest::READABLE));
        s.add(move |s, (_,): (Ready,)| s.wait_io(b, Interest::READABLE));
        s.add(|_, (_,): (Ready,)| Ok(()));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client_a.write_all(b"a").unwrap();
    client_b.write_all(b"b").unwrap();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(tool.stats().io, 0);
}

/// A wait for priority data alone completes when the peer sends urgent
/// (out-of-band) data; mio reports that as readable, which such a wait
/// used to leave pending for good.
#[cfg(target_os = "linux")]
#[test]
fn a_priority_wait_completes_on_urgent_data() {
    let mut tool = AsyncTool::new().unwrap();
    let (client, server) = pair();
    let mut root = conn_flow(server, |s, conn| {
        s.set_timeout(Duration::from_secs(5));
        s.wait_io(conn, Interest::PRIORITY)
    });
    root.add(|s, (ready,): (Ready,)| s.success((ready.readable,)));
    let p = root.promise::<(bool,)>(&mut tool);
    socket2::SockRef::from(&client)
        .send_out_of_band(b"!")
        .unwrap();
    assert_eq!(tool.block_on(p).unwrap(), (true,));
    assert_eq!(tool.stats().io, 0);
}
