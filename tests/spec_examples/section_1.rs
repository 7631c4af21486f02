//! The examples of the spec's section 1: levels, error handling
//! (also steps added by a handler), waiting for an external resource, and
//! aborting a parallel step (by an error, or by the time limit of the step
//! around it).

use crate::common::Log;
use futoin_asyncsteps::{error::codes, AsyncSteps, Error, ExternalHandle, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// 1.1. Levels
// ---------------------------------------------------------------------------

#[test]
fn spec_1_1_levels_execution_order() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let l0 = l.clone();
    // add() -> Level 0 #1
    root.add(move |s, ()| {
        l0.push("Level 0 add #1");
        let l1 = l0.clone();
        // add() -> Level 1 #1
        s.add(move |s, ()| {
            l1.push("Level 1 add #1");
            let (a, b, c) = (l1.clone(), l1.clone(), l1.clone());
            // add() -> Level 2 #1
            s.add(move |_, ()| {
                a.push("Level 2 add #1");
                Ok(())
            });
            // parallel() -> Level 2 #2
            s.parallel().add(move |_, ()| {
                b.push("Level 2 parallel #2");
                Ok(())
            });
            // add() -> Level 2 #3
            s.add(move |_, ()| {
                c.push("Level 2 add #3");
                Ok(())
            });
            Ok(())
        });
        let (b, c) = (l0.clone(), l0.clone());
        // parallel() -> Level 1 #2
        s.parallel().add(move |_, ()| {
            b.push("Level 1 parallel #2");
            Ok(())
        });
        // add() -> Level 1 #3
        s.add(move |_, ()| {
            c.push("Level 1 add #3");
            Ok(())
        });
        Ok(())
    });
    let (b, c) = (l.clone(), l.clone());
    // parallel() -> Level 0 #2
    root.parallel().add(move |_, ()| {
        b.push("Level 0 parallel #2");
        Ok(())
    });
    // add() -> Level 0 #3
    root.add(move |_, ()| {
        c.push("Level 0 add #3");
        Ok(())
    });

    let p = root.promise::<()>(&mut tool);
    // Nothing runs before the loop turns.
    assert!(l.get().is_empty());
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "Level 0 add #1",
            "Level 1 add #1",
            "Level 2 add #1",
            "Level 2 parallel #2",
            "Level 2 add #3",
            "Level 1 parallel #2",
            "Level 1 add #3",
            "Level 0 parallel #2",
            "Level 0 add #3",
        ]
    );
    assert_eq!(tool.pending().flows, 0);
}

// ---------------------------------------------------------------------------
// 1.2. Error handling
// ---------------------------------------------------------------------------

#[test]
fn spec_1_2_error_handling_output() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            a.push("Level 0 func");
            let (c, d) = (a.clone(), a.clone());
            s.add_catch(
                move |_, ()| {
                    c.push("Level 1 func");
                    Err(Error::new("myerror"))
                },
                move |_, e| {
                    d.push(format!("Level 1 onerror: {}", e.code()));
                    Err(Error::new("newerror"))
                },
            );
            Ok(())
        },
        move |s, e| {
            b.push(format!("Level 0 onerror: {}", e.code()));
            s.success(("Prm".to_string(),))
        },
    );
    let c = l.clone();
    root.add(move |s, (param,): (String,)| {
        c.push(format!("Level 0 func2: {param}"));
        s.success(())
    });

    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "Level 0 func",
            "Level 1 func",
            "Level 1 onerror: myerror",
            "Level 0 onerror: newerror",
            "Level 0 func2: Prm",
        ]
    );
}

// ---------------------------------------------------------------------------
// 1.2.1. Steps in error handler
// ---------------------------------------------------------------------------

#[test]
fn spec_1_2_1_steps_in_error_handler() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            a.push("Level 0 func");
            let (c, d) = (a.clone(), a.clone());
            s.add_catch(
                move |_, ()| {
                    c.push("Level 1 func");
                    Err(Error::new("first"))
                },
                move |s, e| {
                    d.push(format!("Level 1 onerror: {}", e.code()));
                    let (f, g) = (d.clone(), d.clone());
                    // add() in an error handler is an implicit success of the
                    // handler; the added step stays on the same level.
                    s.add_catch(
                        move |_, ()| {
                            f.push("Level 2 func");
                            Err(Error::new("second"))
                        },
                        move |_, e| {
                            g.push(format!("Level 2 onerror: {}", e.code()));
                            Ok(())
                        },
                    );
                    Ok(())
                },
            );
            Ok(())
        },
        move |_, e| {
            b.push(format!("Level 0 onerror: {}", e.code()));
            Ok(())
        },
    );
    let c = l.clone();
    root.add(move |_, ()| {
        c.push("never: the error is not handled");
        Ok(())
    });

    let p = root.promise::<()>(&mut tool);
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), "second");
    // "Level 1 onerror" is not executed a second time.
    assert_eq!(
        l.get(),
        [
            "Level 0 func",
            "Level 1 func",
            "Level 1 onerror: first",
            "Level 2 func",
            "Level 2 onerror: second",
            "Level 0 onerror: second",
        ]
    );
}

// ---------------------------------------------------------------------------
// 1.3. Wait for external resources
// ---------------------------------------------------------------------------

/// A fake socket: `read` registers the step's external handle; the test plays
/// the network and delivers data (or an error) whenever it wants.
#[derive(Clone, Default)]
struct FakeSocket {
    pending: Arc<Mutex<Option<ExternalHandle>>>,
}

impl FakeSocket {
    fn read(&self, h: ExternalHandle) {
        *self.pending.lock().unwrap() = Some(h);
    }
    fn cancel_read(&self) {
        self.pending.lock().unwrap().take();
    }
    fn has_pending_read(&self) -> bool {
        self.pending.lock().unwrap().is_some()
    }
    fn deliver(&self, data: &str) -> Result<(), Error> {
        let h = self.pending.lock().unwrap().take().expect("a pending read");
        h.success((data.to_string(),))
    }
    fn fail(&self, why: &'static str) -> Result<(), Error> {
        let h = self.pending.lock().unwrap().take().expect("a pending read");
        h.error("ReadError", why)
    }
}

/// The 1.3 example: read with a cancel handler and a 30 s time limit; the
/// next step consumes the data.
fn spec_1_3_flow(sock: &FakeSocket, l: &Log) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let (sock, a, b) = (sock.clone(), l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            a.push("socket.read");
            sock.read(s.wait_external());
            let (sock2, a2) = (sock.clone(), a.clone());
            s.set_cancel(move || {
                a2.push("socket.cancel_read");
                sock2.cancel_read();
            });
            s.set_timeout(Duration::from_secs(30));
            Ok(())
        },
        move |_, e| {
            if e.is(codes::TIMEOUT) {
                b.push("Timeout");
            } else {
                b.push(format!("Read Error: {}", e));
            }
            Ok(())
        },
    );
    let c = l.clone();
    root.add(move |_, (data,): (String,)| {
        c.push(format!("got data: {data}"));
        Ok(())
    });
    root
}

#[test]
fn spec_1_3_wait_external_timeout_path() {
    let l = Log::default();
    let sock = FakeSocket::default();
    let mut tool = TestTool::new();
    let mut p = spec_1_3_flow(&sock, &l).promise::<()>(&mut tool);

    tool.run_all_ready();
    assert_eq!(l.get(), ["socket.read"]);
    assert!(sock.has_pending_read());

    // One millisecond before the limit nothing has happened.
    tool.advance(Duration::from_millis(29_999));
    assert!(p.try_take().is_none());
    assert_eq!(l.get(), ["socket.read"]);

    tool.advance(Duration::from_millis(1));
    let err = p.try_take().expect("flow ended").unwrap_err();
    assert_eq!(err.code(), codes::TIMEOUT);
    // The cancel handler runs before the error handler sees the timeout; the
    // handler returns silently, so the error goes on and the next step never runs.
    assert_eq!(l.get(), ["socket.read", "socket.cancel_read", "Timeout"]);
    assert!(!sock.has_pending_read());
    assert_eq!(tool.elapsed(), Duration::from_secs(30));
    assert_eq!(tool.pending().flows, 0);
    assert_eq!(tool.pending().timers, 0);
}

#[test]
fn spec_1_3_wait_external_success_path() {
    let l = Log::default();
    let sock = FakeSocket::default();
    let mut tool = TestTool::new();
    let p = spec_1_3_flow(&sock, &l).promise::<()>(&mut tool);

    tool.run_all_ready();
    tool.advance(Duration::from_secs(10));
    assert_eq!(l.get(), ["socket.read"]);
    sock.deliver("hello").unwrap();
    tool.block_on(p).unwrap();

    // No cancel, no timeout: the data reaches the next step.
    assert_eq!(l.get(), ["socket.read", "got data: hello"]);
    assert_eq!(tool.elapsed(), Duration::from_secs(10));
    // The 30 s timer was cleared with the step.
    assert_eq!(tool.pending().timers, 0);
    assert_eq!(tool.pending().flows, 0);
    // And nothing happens later.
    tool.advance(Duration::from_secs(60));
    assert_eq!(l.get(), ["socket.read", "got data: hello"]);
}

#[test]
fn spec_1_3_wait_external_read_error_path() {
    let l = Log::default();
    let sock = FakeSocket::default();
    let mut tool = TestTool::new();
    let p = spec_1_3_flow(&sock, &l).promise::<()>(&mut tool);

    tool.run_all_ready();
    tool.advance(Duration::from_secs(1));
    sock.fail("connection reset").unwrap();
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), "ReadError");
    assert_eq!(err.info(), Some("connection reset"));
    // The error comes from the awaited operation itself (raised at this very
    // step): the engine runs only the handler, not this step's own cancel
    // callback (which runs on out-of-order cancel: timeout, root cancel,
    // sibling failure, or an error unwinding from deeper levels).
    assert_eq!(
        l.get(),
        ["socket.read", "Read Error: ReadError: connection reset"]
    );
    assert_eq!(tool.pending().timers, 0);
    assert_eq!(tool.elapsed(), Duration::from_secs(1));
}

// ---------------------------------------------------------------------------
// 1.4. Parallel execution abort
// ---------------------------------------------------------------------------

#[test]
fn spec_1_4_parallel_abort_cancels_siblings() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, h) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let (j1, j2, j3) = (a.clone(), a.clone(), a.clone());
            s.parallel()
                .add(move |s, ()| {
                    j1.push("job #1 start");
                    let c = j1.clone();
                    s.set_cancel(move || c.push("job #1 cancel"));
                    s.state().set("result1", 1i32);
                    Ok(())
                })
                .add(move |s, ()| {
                    j2.push("job #2 start");
                    let c = j2.clone();
                    s.set_cancel(move || c.push("job #2 cancel"));
                    s.state().set("result2", 2i32);
                    Ok(())
                })
                .add(move |s, ()| {
                    j3.push("job #3 error");
                    s.error("Some Error", "job #3 failed")
                });
            let n = a.clone();
            s.add(move |s, ()| {
                let st = s.state();
                let sum = st.get::<i32>("result1").unwrap() + st.get::<i32>("result2").unwrap();
                n.push(format!("never: {sum}"));
                s.success(())
            });
            Ok(())
        },
        move |s, e| {
            let st = s.state();
            h.push(format!(
                "handler: {} / {} (result1={:?}, result2={:?})",
                e.code(),
                st.error_info().unwrap_or("-"),
                st.get::<i32>("result1"),
                st.get::<i32>("result2"),
            ));
            Ok(())
        },
    );

    let p = root.promise::<()>(&mut tool);
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), "Some Error");
    assert_eq!(err.info(), Some("job #3 failed"));
    assert_eq!(
        l.get(),
        [
            "job #1 start",
            "job #2 start",
            "job #3 error",
            "job #1 cancel",
            "job #2 cancel",
            "handler: Some Error / job #3 failed (result1=Some(1), result2=Some(2))",
        ]
    );
    assert_eq!(tool.pending().flows, 0);
}

/// 1.4 with time: a branch that already finished is not cancelled; only the
/// one still waiting is. The parallel step's own handler recovers, so the
/// step after it runs.
#[test]
fn spec_1_4_parallel_abort_later_error_only_cancels_running_branches() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (j1, j2, j3, hd) = (l.clone(), l.clone(), l.clone(), l.clone());
    root.parallel_catch(move |s, e| {
        hd.push(format!("parallel onerror: {}", e.code()));
        s.success(())
    })
    .add(move |s, ()| {
        j1.push("job #1 start");
        let c = j1.clone();
        s.set_cancel(move || c.push("job #1 cancel"));
        let h = s.wait_external();
        let d = j1.clone();
        s.tool().deferred(Duration::from_millis(10), move |_| {
            d.push("job #1 done");
            h.success(()).unwrap();
        });
        Ok(())
    })
    .add(move |s, ()| {
        j2.push("job #2 start");
        let c = j2.clone();
        s.set_cancel(move || c.push("job #2 cancel"));
        s.set_timeout(Duration::from_secs(3600));
        Ok(())
    })
    .add(move |s, ()| {
        j3.push("job #3 start");
        let h = s.wait_external();
        let d = j3.clone();
        s.tool().deferred(Duration::from_millis(20), move |_| {
            d.push("job #3 fails");
            h.error("Some Error", "late").unwrap();
        });
        Ok(())
    });
    let n = l.clone();
    root.add(move |_, ()| {
        n.push("next step");
        Ok(())
    });

    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "job #1 start",
            "job #2 start",
            "job #3 start",
            "job #1 done",
            "job #3 fails",
            "job #2 cancel",
            "parallel onerror: Some Error",
            "next step",
        ]
    );
    assert_eq!(tool.elapsed(), Duration::from_millis(20));
    // The 1 h timer of job #2 went away with it.
    assert_eq!(tool.pending().timers, 0);
}

/// 1.4 / 1.3 together: the time limit of a step that contains a parallel
/// cancels every running branch (innermost first), then the step itself.
#[test]
fn spec_1_4_timeout_of_enclosing_step_cancels_all_branches() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, h) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            s.set_timeout(Duration::from_millis(100));
            let c = a.clone();
            s.set_cancel(move || c.push("outer cancel"));
            let (j1, j2) = (a.clone(), a.clone());
            s.parallel()
                .add_catch(
                    move |s, ()| {
                        j1.push("job #1 start");
                        let c = j1.clone();
                        s.set_cancel(move || c.push("job #1 cancel"));
                        Ok(())
                    },
                    |_, _| panic!("a cancelled branch's handler must not run"),
                )
                .add(move |s, ()| {
                    j2.push("job #2 start");
                    let c = j2.clone();
                    s.set_cancel(move || c.push("job #2 cancel"));
                    Ok(())
                });
            Ok(())
        },
        move |_, e| {
            h.push(format!("handler: {}", e.code()));
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(
        l.get(),
        [
            "job #1 start",
            "job #2 start",
            "job #1 cancel",
            "job #2 cancel",
            "outer cancel",
            "handler: Timeout",
        ]
    );
    assert_eq!(tool.elapsed(), Duration::from_millis(100));
}
