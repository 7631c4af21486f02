//! One activation of a flow runs at most a burst of steps (1024), then
//! the flow yields: a failure at the end of a burst, parallel branches
//! that never wait, and a timeout of a flow parked because its burst was
//! spent.
//!
//! Regression tests for defects found in review, each failing before its
//! fix: an error at the end of a burst was parked instead of unwound (an
//! external completion could then pop the failed step as a success, and a
//! failed future was polled again); a strand that had spent its burst was
//! taken first again, so a branch that never waits starved its siblings;
//! a timeout while the flow was parked replayed a stale entry.

use crate::common::{entries, log, push, HandleSlot as Slot, Log};
use futoin_asyncsteps::{AsyncSteps, Error, ExternalHandle, TestTool};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// One activation runs at most this many steps (the engine's burst).
const BURST: usize = 1024;

/// A step that fails as the last step of a burst: its handler runs, and
/// its external handle, taken before it failed, is refused.
#[test]
fn a_failure_at_the_end_of_a_burst_is_handled_and_closes_the_wait() {
    let mut tool = TestTool::new();
    let slot: Arc<Mutex<Option<ExternalHandle>>> = Default::default();
    let l = log();
    let mut root = AsyncSteps::new();
    for _ in 0..BURST - 1 {
        root.add(|_, ()| Ok(()));
    }
    let (sl, l1, l2) = (slot.clone(), l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            *sl.lock().unwrap() = Some(s.wait_external());
            s.error("MyError", "failed after wait_external")
        },
        move |_, e| {
            push(&l1, format!("handler {}", e.code()));
            Ok(())
        },
    );
    root.add(move |_, ()| {
        push(&l2, "next step");
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    assert!(tool.run_one(), "one activation: the whole burst");
    let h = slot.lock().unwrap().clone().expect("the step ran");
    let ext = h.success(());
    tool.run_all();
    assert!(ext.is_err(), "the step failed: its handle is refused");
    assert_eq!(entries(&l), ["handler MyError"]);
    assert_eq!(p.try_take().expect("ended").unwrap_err().code(), "MyError");
}

/// An awaited future that fails at the end of a burst (after waking
/// itself) is not polled again, and its error reaches the handlers.
#[test]
fn a_future_failing_at_the_end_of_a_burst_is_not_polled_again() {
    struct WakeThenFail(Arc<Mutex<u32>>);
    impl Future for WakeThenFail {
        type Output = Result<(), Error>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            *self.0.lock().unwrap() += 1;
            cx.waker().wake_by_ref();
            Poll::Ready(Err(Error::with_info("FutErr", "failed")))
        }
    }
    let mut tool = TestTool::new();
    let polls: Arc<Mutex<u32>> = Default::default();
    let l = log();
    let mut root = AsyncSteps::new();
    let (pl, l1, l2) = (polls.clone(), l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            for _ in 0..BURST - 2 {
                s.add(|_, ()| Ok(()));
            }
            let l1 = l1.clone();
            s.await_future_catch(WakeThenFail(pl.clone()), move |_, e| {
                push(&l1, format!("await handler {}", e.code()));
                Ok(())
            });
            Ok(())
        },
        move |_, e| {
            push(&l2, format!("outer handler {}", e.code()));
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    // Neither handler recovers (no success()): the flow fails with it.
    assert_eq!(tool.block_on(p).unwrap_err().code(), "FutErr");
    assert_eq!(*polls.lock().unwrap(), 1, "polled once");
    assert_eq!(
        entries(&l),
        ["await handler FutErr", "outer handler FutErr"]
    );
}

/// A branch that loops without waiting until a sibling's second step sets
/// a flag: the sibling gets its turn after a burst (before, the looping
/// branch was taken first at every activation and the flow never ended).
#[test]
fn a_busy_branch_does_not_starve_its_siblings() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.state().set("flag", false);
        s.state().set("spins", 0u32);
        s.parallel()
            .add(|s, ()| {
                s.loop_(|s| {
                    if *s.state().get::<bool>("flag").unwrap() {
                        return s.break_loop();
                    }
                    let n = s.state().get_mut::<u32>("spins").unwrap();
                    *n += 1;
                    if *n > 100 * BURST as u32 {
                        return s.error("Starved", "the sibling never ran");
                    }
                    Ok(())
                });
                Ok(())
            })
            .add(|s, ()| {
                s.add(|s, ()| {
                    s.state().set("flag", true);
                    Ok(())
                });
                Ok(())
            });
        Ok(())
    });
    root.add(|s, ()| {
        let n = *s.state().get::<u32>("spins").unwrap();
        s.success((n,))
    });
    let p = root.promise::<(u32,)>(&mut tool);
    let (spins,) = tool.block_on(p).unwrap();
    assert!(spins > 0 && (spins as usize) < 2 * BURST, "{spins} spins");
}

/// A long branch yields to its sibling's sub-step after a burst.
#[test]
fn a_long_branch_lets_its_sibling_go_on() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let l0 = l.clone();
    root.add(move |s, ()| {
        let (a, b) = (l0.clone(), l0.clone());
        s.parallel()
            .add(move |s, ()| {
                let a = a.clone();
                s.repeat(10 * BURST, move |_, i| {
                    if i + 1 == 10 * BURST {
                        push(&a, "A end");
                    }
                    Ok(())
                });
                Ok(())
            })
            .add(move |s, ()| {
                let b = b.clone();
                s.add(move |_, ()| {
                    push(&b, "B sub");
                    Ok(())
                });
                Ok(())
            });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["B sub", "A end"]);
}

/// Regression test for a defect found in review (the defect as it was,
/// the test asserts the correct behaviour):
///
/// A timeout of an outer step fires while the flow is parked in `ready`
/// because its step budget ran out. The timeout unwinds the strand, the
/// handler recovers and the flow goes on to a waiting step B; then the stale
/// `Queued::Next` that was parked for the (now gone) loop is replayed on the
/// same strand: it pops B's frame although B still waits and runs C.
#[test]
fn timeout_while_parked_by_budget_does_not_replay_stale_ready_entry() {
    let mut tool = TestTool::new();
    let log = Log::default();
    let slot = Slot::default();
    let mut root = AsyncSteps::new();
    let l = log.clone();
    root.add_catch(
        |s, ()| {
            s.set_timeout(Duration::ZERO);
            s.repeat(1_000_000, |_, _| Ok(()));
            Ok(())
        },
        move |s, e| {
            l.push(format!("handler {}", e.code()));
            s.success(())
        },
    );
    let (l, sl) = (log.clone(), slot.clone());
    root.add(move |s, ()| {
        l.push("B waits");
        sl.put(s.wait_external());
        Ok(())
    });
    let l = log.clone();
    root.add(move |_, ()| {
        l.push("C");
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.run_for(50);
    assert_eq!(log.get(), ["handler Timeout", "B waits"]);
    assert!(slot.get().expect("B ran").is_valid(), "B must still wait");
    assert!(p.try_take().is_none(), "the flow must still wait in B");
}
