//! The loop machinery of `AsyncTool` and `TestTool`: how a pass drains the
//! inbox (the messages waiting when it starts, all of them, local and
//! cross-thread in turn, then those sent meanwhile, up to `DRAIN_MAX` in
//! all unless the first batch was longer), when deadlines are
//! counted from, `TestTool::block_on` on a flow of another loop, queue
//! entries of flows that have ended, the count `iterate` returns, and loop
//! callbacks whose panic payload panics on drop.
//!
//! Regression tests: each guards against a defect these loops had (the
//! behaviour its doc comment states is what the defect broke: a due timer
//! or a cross-thread message held back behind a busy flow, delays counted
//! from the start of a pass, `block_on` waiting for another loop's flow,
//! phantom queue entries of ended flows, a fired timer counted twice, a
//! panic payload's own panic unwinding out of the loop).

use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, Error, Scheduler, TestTool};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A future that wakes itself and stays pending `left` times (or until
/// `stop` is set), counting its polls; on its first poll it says so on
/// `started`.
struct YieldN {
    left: u32,
    polls: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    started: Option<mpsc::Sender<()>>,
}

impl YieldN {
    fn new(left: u32, polls: &Arc<AtomicU32>) -> Self {
        YieldN {
            left,
            polls: polls.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            started: None,
        }
    }
}

impl Future for YieldN {
    type Output = Result<(), Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls.fetch_add(1, SeqCst);
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        if self.left == 0 || self.stop.load(SeqCst) {
            return Poll::Ready(Ok(()));
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A root that awaits `fut`.
fn awaiting(fut: YieldN) -> AsyncSteps {
    let fut = futoin_asyncsteps::TakeOnce::new(fut);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.await_future(fut.take().expect("run once"));
        Ok(())
    });
    root
}

const YIELDS: u32 = 20_000;

/// How many messages one pass of `AsyncTool` (one turn of `TestTool`) runs
/// at most.
const DRAIN_MAX: u32 = 64;

/// Defect: a pass ran at most `DRAIN_MAX` of the messages waiting when it
/// began, then the queued entries, so a flow that completed thousands of
/// waiting steps of its loop (the driver of the C++ reference's
/// ParallelWaitLoop) ran again, a full burst of loop iterations, after
/// every 64 of them. The messages waiting when a pass begins now run whole,
/// before the entries queued then (here a timer due at once).
#[test]
fn the_messages_waiting_when_a_pass_begins_run_whole() {
    let mut tool = AsyncTool::new().unwrap();
    let done = Arc::new(AtomicU32::new(0));
    let rx = start_waiters(&mut tool, &done);
    tool.run_until_idle().unwrap();
    complete_waiters(rx);
    let seen = probe(&mut tool, &done);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(seen.get(), Some(WAITERS));
    assert_eq!(done.load(SeqCst), WAITERS);
}

/// The same on `TestTool`: its turn runs the messages as the pass does.
#[test]
fn the_messages_waiting_when_a_turn_begins_run_whole_on_test_tool() {
    let mut tool = TestTool::new();
    let done = Arc::new(AtomicU32::new(0));
    let rx = start_waiters(&mut tool, &done);
    tool.run_all_ready();
    complete_waiters(rx);
    let seen = probe(&mut tool, &done);
    while seen.get().is_none() {
        assert!(tool.run_one(), "the probe runs");
    }
    assert_eq!(seen.get(), Some(WAITERS));
}

/// Flows of the two tests above.
const WAITERS: u32 = 1_000;

/// Starts `WAITERS` flows that each wait in a step (its handle comes out
/// of the returned channel), then count into `done`.
fn start_waiters(
    tool: &mut Scheduler,
    done: &Arc<AtomicU32>,
) -> mpsc::Receiver<futoin_asyncsteps::ExternalHandle> {
    let (tx, rx) = mpsc::channel();
    for _ in 0..WAITERS {
        let (tx, d) = (tx.clone(), done.clone());
        let mut root = AsyncSteps::new();
        root.add(move |s, ()| {
            tx.send(s.wait_external()).unwrap();
            Ok(())
        });
        root.add(move |_, ()| {
            d.fetch_add(1, SeqCst);
            Ok(())
        });
        root.execute(tool);
    }
    rx
}

/// Completes every parked waiter, on this (the loop's) thread.
fn complete_waiters(rx: mpsc::Receiver<futoin_asyncsteps::ExternalHandle>) {
    let handles: Vec<_> = rx.try_iter().collect();
    assert_eq!(handles.len(), WAITERS as usize);
    for h in handles {
        h.success(()).unwrap();
    }
}

/// Sets a timer due at once that records `count` when it runs.
fn probe(tool: &mut Scheduler, count: &Arc<AtomicU32>) -> Rc<Cell<Option<u32>>> {
    let seen = Rc::new(Cell::new(None));
    let (s, n) = (seen.clone(), count.clone());
    tool.deferred(Duration::ZERO, move |_| s.set(Some(n.load(SeqCst))));
    seen
}

/// A timer due before a self-waking future's second poll runs in the pass
/// of that poll, after at most `DRAIN_MAX` polls, not after every poll the
/// future keeps asking for.
#[test]
fn a_self_waking_future_does_not_hold_back_a_due_timer() {
    let mut tool = AsyncTool::new().unwrap();
    let polls = Arc::new(AtomicU32::new(0));
    let p = awaiting(YieldN::new(YIELDS, &polls)).promise::<()>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(polls.load(SeqCst), 1);
    let seen = probe(&mut tool, &polls);
    tool.block_on(p).unwrap();
    assert_eq!(seen.get(), Some(1 + DRAIN_MAX));
    assert_eq!(polls.load(SeqCst), YIELDS + 1);
}

/// The same on `TestTool`, in the same order: its turn runs the messages
/// as the pass does (one event per `run_one`).
#[test]
fn a_self_waking_future_does_not_hold_back_a_due_timer_on_test_tool() {
    let mut tool = TestTool::new();
    let polls = Arc::new(AtomicU32::new(0));
    let p = awaiting(YieldN::new(YIELDS, &polls)).promise::<()>(&mut tool);
    assert!(tool.run_one());
    assert_eq!(polls.load(SeqCst), 1);
    let seen = probe(&mut tool, &polls);
    tool.block_on(p).unwrap();
    assert_eq!(seen.get(), Some(1 + DRAIN_MAX));
    assert_eq!(polls.load(SeqCst), YIELDS + 1);
}

/// External completions made on the loop thread by the step itself run at
/// most `DRAIN_MAX` iterations per pass: a timer due meanwhile runs then.
#[test]
fn a_loop_completed_by_its_own_handles_does_not_hold_back_a_due_timer() {
    let mut tool = AsyncTool::new().unwrap();
    let iterations = Arc::new(AtomicU32::new(0));
    let it = iterations.clone();
    let mut root = AsyncSteps::new();
    root.repeat(YIELDS as usize, move |s, _| {
        it.fetch_add(1, SeqCst);
        let h = s.wait_external();
        h.success(()).unwrap();
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(iterations.load(SeqCst), 1);
    let seen = probe(&mut tool, &iterations);
    tool.block_on(p).unwrap();
    assert_eq!(seen.get(), Some(1 + DRAIN_MAX));
    assert_eq!(iterations.load(SeqCst), YIELDS);
}

/// A message from another thread waiting beside the local queue is taken
/// in the same turn, not after every local message that follows.
#[test]
fn test_tool_takes_a_cross_thread_message_beside_local_ones() {
    let mut tool = TestTool::new();
    let polls = Arc::new(AtomicU32::new(0));
    let fut = YieldN::new(YIELDS, &polls);
    let stop = fut.stop.clone();
    let p = awaiting(fut).promise::<()>(&mut tool);
    assert!(tool.run_one());
    assert_eq!(polls.load(SeqCst), 1);
    let seen = Arc::new(AtomicU32::new(0));
    let h = tool.handle();
    let (s, n) = (seen.clone(), polls.clone());
    std::thread::spawn(move || {
        h.call(move |_| {
            s.store(n.load(SeqCst), SeqCst);
            stop.store(true, SeqCst);
        })
    })
    .join()
    .unwrap();
    tool.block_on(p).unwrap();
    // The local poll that was waiting first, then the call.
    assert_eq!(seen.load(SeqCst), 2);
    assert_eq!(polls.load(SeqCst), 3);
}

/// A `ToolHandle::call` from another thread to a loop thread whose future
/// keeps waking itself runs while that future still runs.
#[test]
fn a_cross_thread_call_is_answered_while_a_future_keeps_waking_itself() {
    const LIMIT: u32 = 2_000_000;
    let (h, thread) = AsyncTool::spawn("tool-defects-yield").unwrap();
    let polls = Arc::new(AtomicU32::new(0));
    let mut fut = YieldN::new(LIMIT, &polls);
    let stop = fut.stop.clone();
    let (started_tx, started) = mpsc::channel();
    fut.started = Some(started_tx);
    let p = h.promise::<()>(awaiting(fut));
    started.recv().unwrap();
    let (tx, rx) = mpsc::channel();
    let n = polls.clone();
    h.call(move |_| {
        let _ = tx.send(n.load(SeqCst));
        stop.store(true, SeqCst);
    });
    let seen = rx.recv().unwrap();
    p.wait().unwrap();
    // The future was still running (and then stopped, told by the call).
    assert!(seen < LIMIT, "the call ran after {seen} polls");
    assert_eq!(polls.load(SeqCst), seen + 1);
    h.stop();
    thread.join().unwrap();
}

/// Runs `tool` until `fired` holds how long after its timer was set the
/// timer fired.
fn fired_after(tool: &mut AsyncTool, fired: &Rc<Cell<Option<Duration>>>) -> Duration {
    while fired.get().is_none() {
        tool.iterate(None).unwrap();
    }
    fired.get().unwrap()
}

/// A timer set by code that runs between two iterations counts its delay
/// from the call, not from the start of the last iteration. (The sleep
/// stands for that code's work.)
#[test]
fn a_timer_set_between_iterations_counts_from_the_call() {
    let mut tool = AsyncTool::new().unwrap();
    tool.iterate(Some(Duration::ZERO)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let fired = Rc::new(Cell::new(None));
    let f = fired.clone();
    let t0 = Instant::now();
    tool.deferred(Duration::from_millis(100), move |_| {
        f.set(Some(t0.elapsed()))
    });
    let after = fired_after(&mut tool, &fired);
    assert!(after >= Duration::from_millis(100), "fired after {after:?}");
}

/// A timer set by a callback after a long callback of the same pass
/// counts its delay from the call, not from the start of the pass.
#[test]
fn a_timer_set_after_a_long_callback_counts_from_the_call() {
    let mut tool = AsyncTool::new().unwrap();
    let fired = Rc::new(Cell::new(None));
    tool.immediate(|_| std::thread::sleep(Duration::from_millis(150)));
    let f = fired.clone();
    tool.immediate(move |t| {
        let t0 = Instant::now();
        t.deferred(Duration::from_millis(100), move |_| {
            f.set(Some(t0.elapsed()))
        });
    });
    let after = fired_after(&mut tool, &fired);
    assert!(after >= Duration::from_millis(100), "fired after {after:?}");
}

/// A step's timeout set after a long step of the same activation counts
/// from the call.
#[test]
fn a_step_timeout_set_after_a_long_step_counts_from_the_call() {
    let mut tool = AsyncTool::new().unwrap();
    let set_at = Arc::new(std::sync::Mutex::new(None));
    let at = set_at.clone();
    let mut root = AsyncSteps::new();
    root.add(|_, ()| {
        std::thread::sleep(Duration::from_millis(150));
        Ok(())
    })
    .add(move |s, ()| {
        *at.lock().unwrap() = Some(Instant::now());
        s.set_timeout(Duration::from_millis(100));
        s.wait_external();
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    let after = set_at.lock().unwrap().unwrap().elapsed();
    assert_eq!(e.code(), codes::TIMEOUT);
    assert!(
        after >= Duration::from_millis(100),
        "timed out after {after:?}"
    );
}

/// `TestTool::block_on` on a flow of another loop of the same thread fails
/// at once and runs nothing of its own loop; the flow still ends on its
/// own loop.
#[test]
fn test_tool_block_on_a_flow_of_another_loop_of_this_thread_fails_at_once() {
    let mut a = TestTool::new();
    let mut b = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((7u8,)));
    let p = root.promise::<(u8,)>(&mut a);
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    b.deferred(Duration::from_secs(3600), move |_| r.set(true));
    let e = b.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(
            "block_on(): the flow runs (or is queued to run) on another loop of this \
             thread, which this call does not drive; block on that loop, or await the \
             promise in a step (s.await_future)"
        )
    );
    assert!(!ran.get());
    assert_eq!(b.elapsed(), Duration::ZERO);
    assert_eq!(b.pending().timers, 1);
    assert_eq!(a.pending().flows, 1);

    let p = {
        let mut root = AsyncSteps::new();
        root.add(|s, ()| s.success((8u8,)));
        root.promise::<(u8,)>(&mut a)
    };
    assert_eq!(a.block_on(p).unwrap(), (8,));
}

/// A flow cancelled while its first entry is still queued leaves no entry
/// behind: nothing is counted as ready and nothing runs.
#[test]
fn a_flow_cancelled_while_queued_leaves_no_phantom_entry() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Ok(()));
    let h = root.execute(&mut tool);
    h.cancel();
    assert!(tool.run_one()); // the cancel
    assert_eq!(tool.pending().flows, 0);
    assert_eq!(tool.pending().immediates, 0);
    assert!(!tool.run_one());
    assert_eq!(tool.stats().steps, 0);
}

/// A flow that yielded (step budget spent) and is then ended by an
/// external completion before its entry comes up leaves no entry behind.
#[test]
fn a_flow_ended_by_a_completion_while_queued_leaves_no_phantom_entry() {
    let mut tool = TestTool::new();
    let slot = Arc::new(std::sync::Mutex::new(None));
    let sl = slot.clone();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let sl = sl.clone();
        s.parallel()
            .add(move |s, ()| {
                *sl.lock().unwrap() = Some(s.wait_external());
                Ok(())
            })
            .add(|s, ()| {
                s.repeat(100_000, |_, _| Ok(()));
                Ok(())
            });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert!(tool.run_one()); // runs until the budget is spent
    assert_eq!(tool.pending().immediates, 1);
    let h = slot.lock().unwrap().take().unwrap();
    h.error("Failed", "from outside").unwrap();
    assert!(tool.run_one()); // the completion ends the flow
    assert_eq!(tool.pending().flows, 0);
    assert_eq!(tool.pending().immediates, 0);
    let steps = tool.stats().steps;
    assert!(!tool.run_one());
    assert_eq!(tool.stats().steps, steps);
    assert_eq!(tool.block_on(p).unwrap_err().code(), "Failed");
}

/// On `AsyncTool` the same dead entry is not counted as ready either.
#[test]
fn async_tool_counts_no_entry_for_a_flow_cancelled_while_queued() {
    let mut tool = AsyncTool::new().unwrap();
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Ok(()));
    let h = root.execute(&mut tool);
    h.cancel();
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(tool.stats().flows, 0);
    assert_eq!(tool.stats().immediates, 0);
    assert_eq!(tool.stats().steps, 0);
}

/// `iterate` counts each fired timer once: as the callback it runs.
#[test]
fn iterate_counts_a_fired_timer_once() {
    let mut tool = AsyncTool::new().unwrap();
    let ran = Rc::new(Cell::new(0));
    let r = ran.clone();
    tool.deferred(Duration::ZERO, move |_| r.set(r.get() + 1));
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(ran.get(), 1);

    for _ in 0..3 {
        let r = ran.clone();
        tool.deferred(Duration::ZERO, move |_| r.set(r.get() + 1));
    }
    let r = ran.clone();
    tool.immediate(move |_| r.set(r.get() + 1));
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 4);
    assert_eq!(ran.get(), 5);
}

/// A panic payload whose `Drop` panics too.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("bomb");
    }
}

/// The errors the unhandled-error hook saw, as text.
fn hooked(tool: &mut futoin_asyncsteps::Scheduler) -> Rc<std::cell::RefCell<Vec<String>>> {
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let s = seen.clone();
    tool.set_unhandled_error_hook(move |e| {
        s.borrow_mut()
            .push(format!("{}: {}", e.code(), e.info().unwrap_or("")))
    });
    seen
}

/// A loop callback that panics with such a payload is reported like any
/// panicking callback; the payload's own panic stays inside the loop.
#[test]
fn a_loop_callback_panicking_with_a_payload_that_panics_on_drop_is_reported() {
    let mut tool = TestTool::new();
    let seen = hooked(&mut tool);
    tool.immediate(|_| std::panic::panic_any(Bomb));
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    tool.immediate(move |_| r.set(true));
    let n = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.run_all()));
    assert_eq!(n.ok(), Some(2));
    assert!(ran.get());
    assert_eq!(
        *seen.borrow(),
        ["InternalError: panic in loop callback: non-string panic payload"]
    );

    let mut tool = AsyncTool::new().unwrap();
    let seen = hooked(&mut tool);
    tool.deferred(Duration::ZERO, |_| std::panic::panic_any(Bomb));
    let n = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tool.iterate(Some(Duration::ZERO)).unwrap()
    }));
    assert_eq!(n.ok(), Some(1));
    assert_eq!(
        *seen.borrow(),
        ["InternalError: panic in loop callback: non-string panic payload"]
    );
}

/// An unhandled-error hook that panics with such a payload does not take
/// the loop down either.
#[test]
fn a_hook_panicking_with_a_payload_that_panics_on_drop_stays_in_the_loop() {
    let mut tool = TestTool::new();
    let calls = Rc::new(Cell::new(0));
    let c = calls.clone();
    tool.set_unhandled_error_hook(move |_| {
        c.set(c.get() + 1);
        std::panic::panic_any(Bomb)
    });
    tool.immediate(|_| panic!("first"));
    tool.immediate(|_| panic!("second"));
    let n = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.run_all()));
    assert_eq!(n.ok(), Some(2));
    assert_eq!(calls.get(), 2);
}
