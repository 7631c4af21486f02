//! Bad settings and misuse around loops and runtimes: none kills a loop
//! thread (which would leave every flow placed on it unanswered), panics,
//! hangs, or loses an error. Regression tests for defects of that kind;
//! where a doc comment says what used to happen, that was the defect.

use crate::common::*;
use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, Error, TakeOnce, TestTool};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// Runs `f` on a thread of its own; `None` when it has not returned
/// within `secs` (a hang).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// Spawns a flow giving 4 on `rt` and waits for it.
fn four(rt: &Runtime) -> Result<u8, String> {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((4u8,)));
    rt.spawn::<(u8,)>(root)
        .wait()
        .map(|(v,)| v)
        .map_err(|e| e.to_string())
}

fn one_loop() -> futoin_asyncsteps::runtime::Builder {
    Runtime::builder().loops(1).pin_threads(false)
}

#[test]
fn a_spin_too_long_for_the_clock_spins_until_work_comes() {
    let r = within(10, || {
        let rt = one_loop().spin(Duration::MAX).build().unwrap();
        let first = four(&rt);
        // The loop is idle (spinning) again.
        thread::sleep(ms(20));
        (first, four(&rt))
    });
    assert_eq!(r, Some((Ok(4), Ok(4))));
}

#[test]
fn an_idle_loop_spins_no_longer_than_its_next_timer() {
    let rt = one_loop().spin(Duration::from_secs(5)).build().unwrap();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let h = s.wait_external();
        s.tool().deferred(ms(1), move |_| {
            h.success(()).unwrap();
        });
        Ok(())
    });
    let t0 = Instant::now();
    rt.spawn::<()>(root).wait().unwrap();
    // A spin of 5 s that ignored the timer would take 5 s.
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn a_panicking_unhandled_error_hook_does_not_escape_the_loop() {
    let mut tool = TestTool::new();
    let calls = Rc::new(Cell::new(0));
    let c = calls.clone();
    tool.set_unhandled_error_hook(move |_| {
        c.set(c.get() + 1);
        panic!("hook");
    });
    for _ in 0..2 {
        let mut bad = AsyncSteps::new();
        bad.add(|_, ()| Err(Error::with_info("Oops", "x")));
        bad.execute(&mut tool);
    }
    tool.run_all();
    assert_eq!(calls.get(), 2, "the loop went on after the first panic");
}

#[test]
fn a_runtime_whose_hook_panics_still_answers_later_flows() {
    let r = within(10, || {
        let rt = one_loop()
            .on_unhandled_error(|_| panic!("hook"))
            .build()
            .unwrap();
        let mut bad = AsyncSteps::new();
        bad.add(|_, ()| Err(Error::with_info("Oops", "x")));
        rt.execute(bad);
        thread::sleep(ms(50));
        four(&rt)
    });
    assert_eq!(r, Some(Ok(4)));
}

#[test]
fn a_stop_through_a_runtime_loop_handle_is_ignored() {
    let r = within(10, || {
        let rt = one_loop().build().unwrap();
        rt.loop_handle(0).unwrap().stop();
        thread::sleep(ms(50));
        four(&rt)
    });
    assert_eq!(r, Some(Ok(4)));
}

#[test]
fn thread_names_with_a_nul_byte_are_errors() {
    let e = one_loop().thread_name("a\0b").build().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("NUL"), "{e}");
    let e = AsyncTool::spawn("a\0b").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn block_on_a_flow_of_another_loop_of_this_thread_is_refused() {
    let r = within(10, || {
        let mut a = AsyncTool::new().unwrap();
        let mut b = AsyncTool::new().unwrap();
        let mut root = AsyncSteps::new();
        root.add(|s, ()| s.success((3u8,)));
        let p = root.clone().promise::<(u8,)>(&mut b);
        let refused = a.block_on(p).map_err(|e| e.code().to_owned());
        // Its own loop runs it.
        let p = root.promise::<(u8,)>(&mut b);
        (
            refused,
            b.block_on(p).map(|(v,)| v).map_err(|e| e.to_string()),
        )
    });
    assert_eq!(r, Some((Err(codes::INTERNAL_ERROR.to_owned()), Ok(3))));
}

#[test]
fn a_task_handle_of_another_loop_is_ignored() {
    let (mut a, mut b) = (TestTool::new(), TestTool::new());
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    let mine = a.deferred(ms(5), move |_| r.set(true));
    let foreign = b.immediate(|_| {});
    assert_eq!((a.is_valid(foreign), a.is_valid(mine)), (false, true));
    a.cancel(foreign);
    a.run_all();
    assert!(ran.get(), "the foreign handle cancelled a callback");
    assert!(b.is_valid(foreign));
}

#[test]
fn a_flow_whose_promise_was_dropped_reports_its_error_to_the_hook() {
    let mut tool = TestTool::new();
    let reported = Rc::new(Cell::new(0));
    let r = reported.clone();
    tool.set_unhandled_error_hook(move |e| {
        assert_eq!(e.code(), "Oops");
        r.set(r.get() + 1);
    });
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Err(Error::with_info("Oops", "lost")));
    drop(root.clone().promise::<()>(&mut tool));
    // A kept promise gets the error; the hook does not.
    let kept = root.promise::<()>(&mut tool);
    tool.run_all();
    assert_eq!(reported.get(), 1);
    assert_eq!(tool.block_on(kept).unwrap_err().code(), "Oops");
}

/// A flow spawned from a step goes to that loop's own queue. If the loop
/// stops before starting it, its promise is answered `Canceled` even while
/// a `RuntimeHandle` (which can reach that queue) is still alive.
#[test]
fn a_flow_queued_on_a_loop_and_never_started_is_canceled_at_shutdown() {
    let rt = Runtime::builder()
        .loops(1)
        .pin_threads(false)
        .build()
        .unwrap();
    let h = rt.handle(); // kept alive, as a server keeps one
    let (tx, rx) = mpsc::channel();
    let h2 = h.clone();
    let mut root = AsyncSteps::new();
    root.add(move |_, ()| {
        let mut child = AsyncSteps::new();
        child.add(|s, ()| s.success((1u8,)));
        tx.send(h2.spawn::<(u8,)>(child)).unwrap();
        // Hold the only loop until the shutdown starts: the child never
        // gets to run.
        while !h2.is_closed() {
            thread::yield_now();
        }
        Ok(())
    });
    let parent = rt.spawn::<()>(root);
    let child = rx.recv().unwrap();
    rt.shutdown();
    let _ = parent.wait();
    let got = within(10, move || child.wait().map_err(|e| e.code().to_owned()));
    assert_eq!(
        got.expect("the child's promise was never answered"),
        Err(codes::CANCELED.to_owned())
    );
    drop(h);
}

/// A value whose `Drop` panics, captured by a queued flow's step.
#[derive(Clone)]
struct Boom;

impl Drop for Boom {
    fn drop(&mut self) {
        panic!("drop of a queued flow's value");
    }
}

/// Flows queued on a loop and never started, two of them holding values
/// whose `Drop`s panic, one of those in each of its two steps: at shutdown
/// every one of them is answered `Canceled` and the process goes on. (A
/// panic while the loop dropped its queue left the flows queued behind it
/// unanswered; two in one flow's steps aborted the process.)
#[test]
fn queued_flows_holding_panicking_values_are_all_canceled_at_shutdown() {
    hide_panics("drop of a queued flow's value");
    let rt = one_loop().build().unwrap();
    let h = rt.handle();
    let (tx, rx) = mpsc::channel();
    let h2 = h.clone();
    let mut root = AsyncSteps::new();
    root.add(move |_, ()| {
        for i in 0..4u8 {
            let mut child = AsyncSteps::new();
            if i % 2 == 0 {
                for _ in 0..=i / 2 {
                    let b = Boom;
                    child.add(move |s, ()| {
                        let _keep = &b;
                        s.success((i,))
                    });
                }
            } else {
                child.add(move |s, ()| s.success((i,)));
            }
            tx.send(h2.spawn::<(u8,)>(child)).unwrap();
        }
        while !h2.is_closed() {
            thread::yield_now();
        }
        Ok(())
    });
    let parent = rt.spawn::<()>(root);
    let children: Vec<_> = (0..4).map(|_| rx.recv().unwrap()).collect();
    rt.shutdown();
    let _ = parent.wait();
    let got = within(10, move || {
        children
            .into_iter()
            .map(|c| c.wait().map_err(|e| e.code().to_owned()))
            .collect::<Vec<_>>()
    });
    assert_eq!(
        got.expect("a child's promise was never answered"),
        vec![Err(codes::CANCELED.to_owned()); 4]
    );
    drop(h);
}

/// `AsyncTool::block_on`, on a runtime's loop thread, of a flow spawned on
/// that runtime and not started yet: the flow is queued on this very loop,
/// which cannot start it while blocked, so the call fails at once (as
/// `Promise::wait` does) instead of parking for good.
#[test]
fn block_on_of_a_queued_runtime_flow_from_its_loop_thread_fails_at_once() {
    let rt = one_loop().build().unwrap();
    let h = rt.handle();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let mut child = AsyncSteps::new();
        child.add(|s, ()| s.success((1u8,)));
        let p = h.spawn::<(u8,)>(child);
        let mut tool = AsyncTool::new().map_err(|e| Error::internal(e.to_string()))?;
        let e = tool.block_on(p).unwrap_err();
        s.success((e.to_string(),))
    });
    let p = rt.spawn::<(String,)>(root);
    let Some(got) = within(10, move || p.wait()) else {
        // The loop thread is stuck for good: dropping the runtime would
        // wait for it.
        std::mem::forget(rt);
        panic!("block_on never returned");
    };
    assert_eq!(
        got.unwrap().0,
        "InternalError: block_on(): the flow runs (or is queued to run) on another loop \
         of this thread, which this call does not drive; block on that loop, or await the \
         promise in a step (s.await_future)"
    );
}

/// Spawns `child` from a step of a one-loop runtime and cancels it before
/// that loop (busy running the step) can start it: the child is answered
/// `Canceled`, and the loop goes on serving.
fn cancel_before_it_starts(child: AsyncSteps) {
    hide_panics("drop of a queued flow's value");
    let rt = one_loop().build().unwrap();
    let h = rt.handle();
    let child = TakeOnce::new(child);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let p = h.spawn::<()>(child.take()?);
        p.cancel();
        s.await_future(p);
        Ok(())
    });
    let got = rt.spawn::<()>(root).wait().map_err(|e| e.code().to_owned());
    assert_eq!(got, Err(codes::CANCELED.to_owned()));
    assert_eq!(four(&rt), Ok(4), "the loop still serves");
}

/// A queued flow holding a value whose `Drop` panics, cancelled before it
/// starts: its loop goes on serving (the panic used to unwind out of the
/// loop, which then stopped and cancelled every flow on it).
#[test]
fn a_flow_cancelled_before_it_starts_with_a_panicking_value_leaves_its_loop_alive() {
    let mut child = AsyncSteps::new();
    let b = Boom;
    child.add(move |s, ()| {
        let _keep = &b;
        s.success((1u8,))
    });
    cancel_before_it_starts(child);
}

/// Counts its drops.
#[derive(Clone)]
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A queued flow whose state holds a value whose `Drop` panics beside
/// eight others, cancelled before it starts: every other value is dropped
/// too (the map's own drop stopped at the panic and leaked the rest).
#[test]
fn a_discarded_flow_drops_every_state_value_despite_a_panicking_one() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mut child = AsyncSteps::new();
    child.state().set("boom", Boom);
    for i in 0..8 {
        child
            .state()
            .set(format!("tracked {i}"), Tracked(drops.clone()));
    }
    child.add(|_, ()| Ok(()));
    cancel_before_it_starts(child);
    assert_eq!(drops.load(Ordering::SeqCst), 8);
}

/// Loop 0's stats once `ready` holds for them (published after each turn),
/// or the last ones seen after 10 s.
fn stats_once(
    rt: &Runtime,
    ready: impl Fn(&futoin_asyncsteps::runtime::LoopStats) -> bool,
) -> futoin_asyncsteps::runtime::LoopStats {
    let start = Instant::now();
    loop {
        let st = rt.stats()[0].clone();
        if ready(&st) || start.elapsed() > Duration::from_secs(10) {
            return st;
        }
        thread::yield_now();
    }
}

/// A flow of one step that meets this test's thread at the returned
/// barrier `times` times, then ends.
fn meeting_flow(times: usize) -> (AsyncSteps, Arc<std::sync::Barrier>) {
    let meet = Arc::new(std::sync::Barrier::new(2));
    let m = meet.clone();
    let mut root = AsyncSteps::new();
    root.add(move |_, ()| {
        for _ in 0..times {
            m.wait();
        }
        Ok(())
    });
    (root, meet)
}

/// A flow cancelled before it started is answered without running: it is
/// not counted as started (it was).
#[test]
fn started_leaves_out_flows_cancelled_before_they_started() {
    let rt = one_loop().build().unwrap();
    // Met twice: when the blocker runs, and when it may end.
    let (blocker, meet) = meeting_flow(2);
    let pb = rt.spawn::<()>(blocker);
    meet.wait();
    let cancelled: Vec<_> = (0..5)
        .map(|_| {
            let mut r = AsyncSteps::new();
            r.add(|_, ()| panic!("a cancelled flow ran"));
            let p = rt.spawn::<()>(r);
            p.cancel();
            p
        })
        .collect();
    meet.wait();
    pb.wait().unwrap();
    for p in cancelled {
        assert_eq!(p.wait().unwrap_err().code(), codes::CANCELED);
    }
    let st = stats_once(&rt, |st| st.steps >= 1 && st.flows == 0);
    assert_eq!((st.steps, st.started), (1, 1));
}

/// A `TestTool` does not wait for a flow on another thread's loop: its
/// `block_on` says so and names what does.
#[test]
fn test_tool_block_on_a_runtime_flow_says_what_to_use() {
    let rt = one_loop().build().unwrap();
    let (root, meet) = meeting_flow(1);
    let p = rt.spawn::<()>(root);
    let mut tool = TestTool::new();
    let e = tool.block_on(p).unwrap_err();
    meet.wait();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(
            "block_on(): the flow runs on another thread's loop, which a TestTool does \
             not wait for; use Promise::wait or AsyncTool::block_on"
        )
    );
}
