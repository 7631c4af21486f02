//! Promises and handles across loops: a promise of a flow posted to a loop
//! that stopped or was dropped, a `TaskHandle` of another loop given to
//! `cancel()`, a waker that looks at the promise it wakes for, and
//! `AsyncTool::block_on` of a flow on another loop.
//!
//! Regression tests for loop and handle defects found in review: each
//! doc comment describes the defect as it was, and the test asserts the
//! correct behaviour.

use futoin_asyncsteps::{AsyncSteps, AsyncTool, TestTool};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// A flow posted to a loop that has stopped (or whose `Scheduler` was
/// dropped with the message still in its inbox) is never started and its
/// `Promise` is never completed: `wait()` blocks forever. The `Scheduler`
/// drop comment promises "waiters get an answer".
#[test]
fn promise_to_a_stopped_loop_resolves() {
    let (h, th) = AsyncTool::spawn("review-stopped").unwrap();
    h.stop();
    th.join().unwrap();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u8,)));
    let p = h.promise::<(u8,)>(root);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(p.wait().map(|v| v.0).map_err(|e| e.code().to_owned()));
    });
    let r = rx.recv_timeout(Duration::from_secs(2));
    assert!(
        r.is_ok(),
        "Promise::wait() still blocks 2 s after the loop stopped"
    );
}

/// Same, with the message already queued when the loop is dropped.
#[test]
fn promise_queued_when_the_loop_is_dropped_resolves() {
    let tool = TestTool::new();
    let h = tool.handle();
    let p = thread::spawn(move || {
        let mut root = AsyncSteps::new();
        root.add(|s, ()| s.success((1u8,)));
        h.promise::<(u8,)>(root)
    })
    .join()
    .unwrap();
    drop(tool);
    assert!(
        p.is_done(),
        "the loop is gone: the promise must be settled (e.g. Canceled)"
    );
}

/// `TaskHandle`s are bare slot-map keys with no loop identity, and flow
/// timeouts live in the same map as user callbacks. A handle from another
/// loop (or a stale copy kept by user code) passed to `cancel()` can remove
/// a flow's timeout timer, so the step then waits forever.
#[test]
fn foreign_task_handle_cannot_cancel_a_flow_timeout() {
    use futoin_asyncsteps::error::codes;
    let mut a = TestTool::new();
    let mut b = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(Duration::from_secs(1));
        Ok(())
    });
    let p = root.promise::<()>(&mut a);
    a.run_all_ready(); // the step ran and armed its timeout
    let foreign = b.immediate(|_| {});
    let looked_valid = a.is_valid(foreign);
    a.cancel(foreign);
    let r = a.block_on(p);
    assert_eq!(
        r.map_err(|e| e.to_string()),
        Err(codes::TIMEOUT.to_string())
    );
    assert!(
        !looked_valid,
        "a handle of loop B must not be valid on loop A"
    );
}

/// `Completion::complete` calls the stored waker while it still holds the
/// slot lock (parking_lot, not reentrant). A waker that looks at the promise
/// (polls it inline, or calls `is_done()`) deadlocks the loop thread.
#[test]
fn waker_that_inspects_the_promise_does_not_deadlock() {
    use futoin_asyncsteps::Promise;
    use std::future::Future;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Wake, Waker};
    struct W(Arc<Mutex<Option<Promise<(u8,)>>>>);
    impl Wake for W {
        fn wake(self: Arc<Self>) {
            let g = self.0.lock().unwrap();
            let _ = g.as_ref().map(|p| p.is_done());
        }
    }
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut tool = TestTool::new();
        let mut root = AsyncSteps::new();
        root.add(|s, ()| s.success((1u8,)));
        let cell = Arc::new(Mutex::new(Some(root.promise::<(u8,)>(&mut tool))));
        let waker = Waker::from(Arc::new(W(cell.clone())));
        {
            let mut g = cell.lock().unwrap();
            let p = g.as_mut().unwrap();
            assert!(std::pin::Pin::new(p)
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
        }
        tool.run_all();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(2)).is_ok(),
        "loop thread deadlocked in Completion::complete"
    );
}

/// `AsyncTool::block_on(p)` only re-checks `p` after its own loop wakes up.
/// For a promise of a flow on another loop (e.g. from `ToolHandle::promise`)
/// nothing wakes this loop when that flow ends, so an idle loop sleeps in
/// `poll(None)` forever although the result is ready.
#[test]
fn block_on_a_promise_of_another_loop_returns() {
    let (hb, thb) = AsyncTool::spawn("review-loop-b").unwrap();
    let hb2 = hb.clone();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut a = AsyncTool::new().unwrap();
        let mut root = AsyncSteps::new();
        root.add(|s, ()| s.success((5u8,)));
        let p = hb2.promise::<(u8,)>(root);
        let _ = tx.send(a.block_on(p).map(|v| v.0).map_err(|e| e.to_string()));
    });
    let r = rx.recv_timeout(Duration::from_secs(2));
    hb.stop();
    thb.join().unwrap();
    assert_eq!(
        r,
        Ok(Ok(5)),
        "block_on still sleeping 2 s after loop B finished the flow"
    );
}
