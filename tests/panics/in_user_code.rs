//! Panics in user code, on `TestTool` (virtual time) and on a 2-loop
//! `Runtime`: in an execute callback, in an error handler, in a
//! `set_cancel` callback (run by a timeout and by a root cancel), in the
//! `Drop` of a value on a step's `stack`, in the `Drop` of a value in the
//! flow's `state()`, and in a loop body.
//!
//! For every case the contract checked is the same:
//! - the panicking flow ends with `InternalError`, its info
//!   `panic in <where>: <message>`;
//! - flows waiting on the same loop (bystanders, each parked in
//!   `wait_external` with a cancel callback, a state value and a stack
//!   value) are untouched: none is cancelled and each ends with its exact
//!   result once its handle is completed afterwards;
//! - the loop keeps running: a second flow on the same loop (a sub-step, a
//!   timer, a loop) succeeds;
//! - nothing is left behind (no flow counted on the loop) and no error
//!   reaches the unhandled-error hook.
//!
//! On the runtime the panicking flow runs on loop 0 and two bystanders
//! wait on each loop; the second flow runs on both loops.
//!
//! One more test checks that a flow ended by a panicking `Drop` still
//! drops the other values it held.

use crate::common::{self, entries, Log};
use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::{
    error::codes, AsyncSteps, Error, ExternalHandle, FromArgs, Promise, TestTool,
};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Every panic raised on purpose here starts with this.
const BOOM: &str = "boom:";

/// How long a runtime test waits for a flow before it calls it a hang.
const HANG: Duration = Duration::from_secs(20);

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// A value whose `Drop` panics with its message (`Clone` for `state()`).
#[derive(Clone)]
struct Boom(&'static str);

impl Drop for Boom {
    fn drop(&mut self) {
        panic!("{}", self.0);
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Case {
    Execute,
    Handler,
    CancelOnTimeout,
    CancelOnRootCancel,
    StackDrop,
    StateDrop,
    LoopBody,
}

impl Case {
    fn message(self) -> &'static str {
        match self {
            Case::Execute => "boom: execute callback",
            Case::Handler => "boom: error handler",
            Case::CancelOnTimeout => "boom: cancel callback on timeout",
            Case::CancelOnRootCancel => "boom: cancel callback on root cancel",
            Case::StackDrop => "boom: drop of a stack value",
            Case::StateDrop => "boom: drop of a state value",
            Case::LoopBody => "boom: loop body",
        }
    }

    /// The `<where>` of the engine's `panic in <where>: <message>`.
    fn site(self) -> &'static str {
        match self {
            Case::Execute | Case::LoopBody => "step",
            Case::Handler => "error handler",
            Case::CancelOnTimeout | Case::CancelOnRootCancel => "cancel callback",
            Case::StackDrop | Case::StateDrop => "a value dropped by the flow",
        }
    }

    fn expected_info(self) -> String {
        format!("panic in {}: {}", self.site(), self.message())
    }

    /// The panicking flow. Its first step tells `started` (once it has
    /// set up what it sets up); had it gone on normally, its result would
    /// be `(1,)`.
    fn flow(self, started: mpsc::Sender<()>) -> AsyncSteps {
        let msg = self.message();
        let mut root = AsyncSteps::new();
        match self {
            Case::Execute => {
                root.add(move |_, ()| {
                    started.send(()).unwrap();
                    panic!("{msg}")
                });
            }
            Case::Handler => {
                root.add_catch(
                    move |s, ()| {
                        started.send(()).unwrap();
                        s.error("Original", "the error the handler gets")
                    },
                    move |_, e| {
                        assert_eq!(e.code(), "Original");
                        panic!("{msg}")
                    },
                );
            }
            Case::CancelOnTimeout => {
                root.add(move |s, ()| {
                    s.set_cancel(move || panic!("{msg}"));
                    s.set_timeout(Duration::from_millis(10));
                    started.send(()).unwrap();
                    Ok(())
                });
            }
            Case::CancelOnRootCancel => {
                root.add(move |s, ()| {
                    // Waits (a step with a cancel callback waits for an
                    // external completion) until the test cancels the flow.
                    s.set_cancel(move || panic!("{msg}"));
                    started.send(()).unwrap();
                    Ok(())
                });
            }
            Case::StackDrop => {
                root.add(move |s, ()| {
                    s.stack(Boom(msg));
                    started.send(()).unwrap();
                    // The step ends here: its frame and stack go.
                    Ok(())
                });
            }
            Case::StateDrop => {
                root.add(move |s, ()| {
                    s.state().set("boom", Boom(msg));
                    started.send(()).unwrap();
                    Ok(())
                });
            }
            Case::LoopBody => {
                root.add(move |s, ()| {
                    started.send(()).unwrap();
                    // Iteration 1 adds a sub-step (the loop's slow path), 2
                    // and 3 are plain (the fast path); 3 panics.
                    let mut n = 0;
                    s.loop_(move |s| {
                        n += 1;
                        match n {
                            1 => {
                                s.add(|_, ()| Ok(()));
                            }
                            3 => panic!("{msg}"),
                            _ => {}
                        }
                        Ok(())
                    });
                    Ok(())
                });
            }
        }
        root.add(|s, ()| s.success((1u32,)));
        root
    }
}

/// A flow parked in `wait_external` (its handle goes out through `out`)
/// with a cancel callback, a state value and a stack value; completed with
/// `v` it ends with `(v + i,)`.
fn bystander(i: u32, out: mpsc::Sender<(u32, ExternalHandle)>, log: Log) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.state().set("i", i);
        s.stack(format!("stack of {i}"));
        let l = log.clone();
        s.set_cancel(move || l.push(format!("cancel {i}")));
        out.send((i, s.wait_external())).unwrap();
        Ok(())
    });
    root.add(|s, (v,): (u32,)| {
        let i = *s.state().get::<u32>("i").unwrap();
        s.success((v + i,))
    });
    root
}

/// The value a test completes bystander `i` with, and what it then ends with.
fn bystander_input(i: u32) -> u32 {
    100 * (i + 1)
}

fn bystander_result(i: u32) -> (u32,) {
    (bystander_input(i) + i,)
}

/// The flow that must still run on the loop afterwards: a sub-step, a
/// timer and a loop; ends with `(99,)`.
fn second_flow() -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.add(|s, ()| s.success((90u32,)));
        Ok(())
    });
    root.add(|s, (v,): (u32,)| {
        let h = s.wait_external();
        s.tool().deferred(Duration::from_millis(1), move |_| {
            h.success((v + 4,)).unwrap();
        });
        Ok(())
    });
    root.add(|s, (v,): (u32,)| {
        s.state().set("v", v);
        s.repeat(5, |s, _| {
            *s.state().get_mut::<u32>("v").unwrap() += 1;
            Ok(())
        });
        s.add(|s, ()| {
            let v = *s.state().get::<u32>("v").unwrap();
            s.success((v,))
        });
        Ok(())
    });
    root
}

fn assert_internal(case: Case, r: Result<(u32,), Error>) {
    let e = match r {
        Ok(v) => panic!("{case:?}: the flow succeeded with {v:?}, expected InternalError"),
        Err(e) => e,
    };
    assert_eq!(
        (e.code(), e.info()),
        (codes::INTERNAL_ERROR, Some(case.expected_info().as_str())),
        "{case:?}: {e}"
    );
}

// ---------------------------------------------------------------------------
// TestTool
// ---------------------------------------------------------------------------

/// Runs `tool` one event at a time until `p` settles. A panic that escapes
/// the loop, or a flow that never settles, fails the test with a message
/// saying so.
fn settle<T: FromArgs>(tool: &mut TestTool, p: &mut Promise<T>, what: &str) -> Result<T, Error> {
    loop {
        if let Some(r) = p.try_take() {
            return r;
        }
        match catch_unwind(AssertUnwindSafe(|| tool.run_one())) {
            Ok(true) => {}
            Ok(false) => panic!("{what}: never settled, and nothing is pending on the loop"),
            Err(p) => panic!(
                "{what}: a panic escaped the loop: {}",
                panic_message(p.as_ref())
            ),
        }
    }
}

/// Errors given to the tool's unhandled-error hook.
fn hook(tool: &mut TestTool) -> Rc<RefCell<Vec<String>>> {
    let seen: Rc<RefCell<Vec<String>>> = Rc::default();
    let s = seen.clone();
    tool.set_unhandled_error_hook(move |e| s.borrow_mut().push(e.to_string()));
    seen
}

/// What a run of one case on a `TestTool` saw.
struct ToolRun {
    tool: TestTool,
    result: Result<(u32,), Error>,
    bystanders: Vec<Promise<(u32,)>>,
    handles: Vec<(u32, ExternalHandle)>,
    log: Log,
    reports: Rc<RefCell<Vec<String>>>,
}

/// Parks three bystanders, runs the panicking flow of `case` to its end.
fn run_case_on_test_tool(case: Case) -> ToolRun {
    common::hide_panics(BOOM);
    let mut tool = TestTool::new();
    let reports = hook(&mut tool);
    let log = Log::default();
    let (tx, rx) = mpsc::channel();
    let bystanders: Vec<Promise<(u32,)>> = (0..3)
        .map(|i| bystander(i, tx.clone(), log.clone()).promise(&mut tool))
        .collect();
    tool.run_all_ready();
    let handles: Vec<_> = rx.try_iter().collect();
    assert_eq!(handles.len(), 3, "every bystander waits");

    let (started_tx, started) = mpsc::channel();
    let mut p = case.flow(started_tx).promise::<(u32,)>(&mut tool);
    if case == Case::CancelOnRootCancel {
        tool.run_all_ready();
        started.try_recv().expect("the flow waits");
        p.cancel();
        let result = settle(&mut tool, &mut p, &format!("{case:?}"));
        return ToolRun {
            tool,
            result,
            bystanders,
            handles,
            log,
            reports,
        };
    }
    let result = settle(&mut tool, &mut p, &format!("{case:?}"));
    started.try_recv().expect("the panicking step ran");
    ToolRun {
        tool,
        result,
        bystanders,
        handles,
        log,
        reports,
    }
}

/// Bystanders untouched, the loop still runs flows, nothing left behind.
fn check_after_on_test_tool(case: Case, run: ToolRun) {
    let ToolRun {
        mut tool,
        bystanders,
        handles,
        log,
        ..
    } = run;
    assert_eq!(entries(&log), Vec::<String>::new(), "{case:?}: bystanders");
    for (i, h) in &handles {
        h.success((bystander_input(*i),))
            .unwrap_or_else(|e| panic!("{case:?}: bystander {i} no longer waits: {e}"));
    }
    for (i, mut p) in bystanders.into_iter().enumerate() {
        let what = format!("{case:?}: bystander {i}");
        let r = settle(&mut tool, &mut p, &what);
        assert_eq!(r.ok(), Some(bystander_result(i as u32)), "{what}");
    }
    let mut p = second_flow().promise::<(u32,)>(&mut tool);
    let r = settle(&mut tool, &mut p, &format!("{case:?}: second flow"));
    assert_eq!(r.ok(), Some((99,)), "{case:?}: the loop still runs flows");
    assert_eq!(tool.pending().flows, 0, "{case:?}: flows left on the loop");
    assert_eq!(entries(&log), Vec::<String>::new(), "{case:?}: bystanders");
}

fn on_test_tool(case: Case) {
    let run = run_case_on_test_tool(case);
    assert_internal(case, run.result.clone());
    let reports = run.reports.clone();
    check_after_on_test_tool(case, run);
    assert_eq!(
        *reports.borrow(),
        Vec::<String>::new(),
        "{case:?}: unhandled"
    );
}

#[test]
fn test_tool_panic_in_execute_callback() {
    on_test_tool(Case::Execute);
}

#[test]
fn test_tool_panic_in_error_handler() {
    on_test_tool(Case::Handler);
}

#[test]
fn test_tool_panic_in_cancel_callback_on_timeout() {
    on_test_tool(Case::CancelOnTimeout);
}

#[test]
fn test_tool_panic_in_cancel_callback_on_root_cancel() {
    on_test_tool(Case::CancelOnRootCancel);
}

#[test]
fn test_tool_panic_in_drop_of_a_stack_value() {
    on_test_tool(Case::StackDrop);
}

#[test]
fn test_tool_panic_in_drop_of_a_state_value() {
    on_test_tool(Case::StateDrop);
}

#[test]
fn test_tool_panic_in_loop_body() {
    on_test_tool(Case::LoopBody);
}

/// Counts its drops.
#[derive(Clone)]
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A flow ended by a panicking `Drop` still releases what else it held:
/// a value on an outer step's stack and a value in its state.
#[test]
fn test_tool_a_flow_ended_by_a_panicking_drop_releases_its_other_values() {
    common::hide_panics(BOOM);
    let mut tool = TestTool::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.stack(Counted(d.clone()));
        s.state().set("counted", Counted(d.clone()));
        s.add(|s, ()| {
            s.stack(Boom(Case::StackDrop.message()));
            Ok(())
        });
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    let e = settle(&mut tool, &mut p, "StackDrop").unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(tool.pending().flows, 0);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        2,
        "values the flow held, dropped"
    );
}

// ---------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------

/// Waits for `p` from another thread, failing the test after `HANG`.
fn wait<T: FromArgs + Send + 'static>(p: Promise<T>, what: &str) -> Result<T, Error> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(p.wait());
    });
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what}: not settled after {HANG:?}"))
}

/// What a run of one case on a 2-loop runtime saw.
struct RtRun {
    rt: Runtime,
    result: Result<(u32,), Error>,
    /// (loop, bystander promise), two on each loop.
    bystanders: Vec<(usize, Promise<(u32,)>)>,
    handles: Vec<(u32, ExternalHandle)>,
    log: Log,
    reports: Log,
}

/// The panicking flow runs on loop 0; two bystanders wait on each loop.
fn run_case_on_runtime(case: Case) -> RtRun {
    common::hide_panics(BOOM);
    let reports = Log::default();
    let r = reports.clone();
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .on_unhandled_error(move |e| r.push(e.to_string()))
        .build()
        .unwrap();
    let log = Log::default();
    let (tx, rx) = mpsc::channel();
    let bystanders: Vec<(usize, Promise<(u32,)>)> = (0..4u32)
        .map(|i| {
            let l = i as usize % 2;
            let p = rt
                .loop_handle(l)
                .unwrap()
                .promise(bystander(i, tx.clone(), log.clone()));
            (l, p)
        })
        .collect();
    let mut handles: Vec<_> = (0..4)
        .map(|_| rx.recv_timeout(HANG).expect("every bystander waits"))
        .collect();
    handles.sort_by_key(|(i, _)| *i);

    let (started_tx, started) = mpsc::channel();
    let p = rt
        .loop_handle(0)
        .unwrap()
        .promise::<(u32,)>(case.flow(started_tx));
    started.recv_timeout(HANG).expect("the panicking step ran");
    if case == Case::CancelOnRootCancel {
        p.cancel();
    }
    let result = wait(p, &format!("{case:?}"));
    RtRun {
        rt,
        result,
        bystanders,
        handles,
        log,
        reports,
    }
}

/// Bystanders untouched, both loops still run flows, nothing left behind.
fn check_after_on_runtime(case: Case, run: RtRun) {
    let RtRun {
        rt,
        bystanders,
        handles,
        log,
        ..
    } = run;
    assert_eq!(entries(&log), Vec::<String>::new(), "{case:?}: bystanders");
    for (i, h) in &handles {
        h.success((bystander_input(*i),))
            .unwrap_or_else(|e| panic!("{case:?}: bystander {i} no longer waits: {e}"));
    }
    for (i, (l, p)) in bystanders.into_iter().enumerate() {
        let what = format!("{case:?}: bystander {i} on loop {l}");
        assert_eq!(
            wait(p, &what).ok(),
            Some(bystander_result(i as u32)),
            "{what}"
        );
    }
    for l in [0, 1, 0] {
        let p = rt.loop_handle(l).unwrap().promise::<(u32,)>(second_flow());
        let what = format!("{case:?}: second flow on loop {l}");
        assert_eq!(wait(p, &what).ok(), Some((99,)), "{what}");
    }
    // Each loop's own live count, read on the loop.
    for l in 0..rt.loops() {
        let (tx, rx) = mpsc::channel();
        rt.loop_handle(l)
            .unwrap()
            .call(move |sched| tx.send(sched.stats().flows).unwrap());
        let flows = rx
            .recv_timeout(HANG)
            .unwrap_or_else(|_| panic!("{case:?}: loop {l} does not answer"));
        assert_eq!(flows, 0, "{case:?}: flows left on loop {l}");
    }
    assert_eq!(entries(&log), Vec::<String>::new(), "{case:?}: bystanders");
    rt.shutdown();
}

fn on_runtime(case: Case) {
    let run = run_case_on_runtime(case);
    assert_internal(case, run.result.clone());
    let reports = run.reports.clone();
    check_after_on_runtime(case, run);
    assert_eq!(
        entries(&reports),
        Vec::<String>::new(),
        "{case:?}: unhandled"
    );
}

#[test]
fn runtime_panic_in_execute_callback() {
    on_runtime(Case::Execute);
}

#[test]
fn runtime_panic_in_error_handler() {
    on_runtime(Case::Handler);
}

#[test]
fn runtime_panic_in_cancel_callback_on_timeout() {
    on_runtime(Case::CancelOnTimeout);
}

#[test]
fn runtime_panic_in_cancel_callback_on_root_cancel() {
    on_runtime(Case::CancelOnRootCancel);
}

#[test]
fn runtime_panic_in_drop_of_a_stack_value() {
    on_runtime(Case::StackDrop);
}

#[test]
fn runtime_panic_in_drop_of_a_state_value() {
    on_runtime(Case::StateDrop);
}

#[test]
fn runtime_panic_in_loop_body() {
    on_runtime(Case::LoopBody);
}

/// Defect: a parallel step starts its branches in place; a cancel callback
/// that panicked while a branch failed (cancelling a waiting sibling) left
/// the loop believing a parallel step was still starting, so the next
/// flow's parallel steps would have queued their branches, or a later one
/// with the same strand and seq been completed by mistake.
#[test]
fn a_panicking_cancel_callback_while_branches_start_leaves_the_next_flow_intact() {
    let mut tool = TestTool::new();
    let held: Arc<Mutex<Vec<ExternalHandle>>> = Arc::default();
    let mut first = AsyncSteps::new();
    let h = held.clone();
    first.add(move |s, ()| {
        s.parallel()
            .add(move |s, ()| {
                s.set_cancel(|| panic!("{BOOM} cancel of a started branch"));
                h.lock().unwrap().push(s.wait_external());
                Ok(())
            })
            .add(|s, ()| s.error("Failed", "second branch"));
        Ok(())
    });
    let p = first.promise::<()>(&mut tool);
    let e = tool.block_on(p).expect_err("the first flow fails");
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(format!("panic in cancel callback: {BOOM} cancel of a started branch").as_str())
    );
    assert_eq!(held.lock().unwrap().len(), 1, "the first branch waited");

    let log = Log::default();
    let mut second = AsyncSteps::new();
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    second.add(move |s, ()| {
        s.parallel()
            .add(move |_, ()| {
                l1.push("branch 1");
                Ok(())
            })
            .add(move |_, ()| {
                l2.push("branch 2");
                Ok(())
            });
        s.add(move |s, ()| {
            l3.push("after");
            s.success((7u32,))
        });
        Ok(())
    });
    let p = second.promise::<(u32,)>(&mut tool);
    assert_eq!(tool.block_on(p).expect("the second flow succeeds").0, 7);
    assert_eq!(log.get(), ["branch 1", "branch 2", "after"]);
}
