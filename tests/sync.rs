//! Mutex, Throttle and Limiter (spec 1.11, 2.3–2.5): limits reached
//! exactly, queue limits, periods under virtual time, cancel and timeout
//! while queued and while holding, errors in the section, reentrance,
//! parallel branches, and contention from flows on two loops.

mod common;

use common::*;
use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::sync::{ISync, Limiter, LimiterOptions, Mutex, Section, Throttle};
use futoin_asyncsteps::{
    error::codes, Args, AsyncSteps, Error, IntoArgs, Promise, Step, StepResult, TestTool,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits `d` inside a step (a timeout recovered by its handler).
fn sleep(s: &mut Step<'_>, d: Duration) {
    s.add_catch(
        move |s, ()| {
            s.set_timeout(d);
            Ok(())
        },
        |s, e| {
            assert_eq!(e.code(), codes::TIMEOUT);
            s.success(())
        },
    );
}

/// Counts flows inside a section and the most seen at once.
#[derive(Clone, Default)]
struct Occupancy {
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    entries: Arc<AtomicUsize>,
}

impl Occupancy {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn get(&self) -> (usize, usize, usize) {
        (
            self.now.load(Ordering::SeqCst),
            self.peak.load(Ordering::SeqCst),
            self.entries.load(Ordering::SeqCst),
        )
    }
}

/// The body of an occupant's section: enters, holds for `hold`, then leaves.
fn occupy(s: &mut Step<'_>, occ: &Occupancy, hold: Duration) {
    occ.enter();
    sleep(s, hold);
    let occ = occ.clone();
    s.add(move |_, ()| {
        occ.leave();
        Ok(())
    });
}

/// A flow whose section on `obj` enters, holds for `hold`, then leaves.
fn occupant<S: ISync + Clone>(obj: &S, occ: &Occupancy, hold: Duration) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let occ = occ.clone();
    root.sync(obj, move |s, ()| {
        occupy(s, &occ, hold);
        Ok(())
    });
    root
}

/// Adds a parallel of `branches` occupants of `m`, each holding for `hold`.
fn parallel_occupants(
    s: &mut Step<'_>,
    m: &Mutex,
    occ: &Occupancy,
    branches: usize,
    hold: Duration,
) {
    let mut p = s.parallel();
    for _ in 0..branches {
        let (m, occ) = (m.clone(), occ.clone());
        p.add(move |s, ()| {
            s.sync(&m, move |s, ()| {
                occupy(s, &occ, hold);
                Ok(())
            });
            Ok(())
        });
    }
}

fn code_of<T>(tool: &mut TestTool, p: Promise<T>) -> String
where
    T: futoin_asyncsteps::FromArgs,
{
    match tool.block_on(p) {
        Ok(_) => "ok".into(),
        Err(e) => e.code().to_string(),
    }
}

/// [`code_of`] every promise, in order.
fn codes_of(tool: &mut TestTool, ps: Vec<Promise<()>>) -> Vec<String> {
    ps.into_iter().map(|p| code_of(tool, p)).collect()
}

/// Runs the loop to the end and expects every promise to succeed.
fn run_all_ok(tool: &mut TestTool, ps: Vec<Promise<()>>) {
    tool.run_all();
    for p in ps {
        tool.block_on(p).unwrap();
    }
}

/// Runs `root` to its end and returns the error it failed with.
fn error_of(tool: &mut TestTool, root: AsyncSteps) -> Error {
    let p = root.promise::<()>(tool);
    tool.run_all();
    tool.block_on(p).unwrap_err()
}

#[test]
fn mutex_admits_exactly_max_at_once_and_everyone_eventually() {
    let mut tool = TestTool::new();
    let m = Mutex::new(3, None);
    let occ = Occupancy::default();
    let ps: Vec<_> = (0..10)
        .map(|_| occupant(&m, &occ, ms(10)).promise::<()>(&mut tool))
        .collect();
    tool.run_all_ready();
    assert_eq!(m.counts(), (3, 7));
    run_all_ok(&mut tool, ps);
    assert_eq!(occ.get(), (0, 3, 10));
    // 10 flows, 3 at a time, 10 ms each: 4 rounds.
    assert_eq!(tool.elapsed(), ms(40));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn mutex_queue_limit_rejects_exactly_the_overflow() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, Some(2));
    let occ = Occupancy::default();
    let ps: Vec<_> = (0..6)
        .map(|_| occupant(&m, &occ, ms(5)).promise::<()>(&mut tool))
        .collect();
    tool.run_all();
    assert_eq!(
        codes_of(&mut tool, ps),
        [
            "ok",
            "ok",
            "ok",
            "DefenseRejected",
            "DefenseRejected",
            "DefenseRejected"
        ]
    );
    assert_eq!(occ.get(), (0, 1, 3));
}

#[test]
fn rejection_info_names_the_object() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, Some(0));
    let occ = Occupancy::default();
    let _a = occupant(&m, &occ, ms(5)).promise::<()>(&mut tool);
    let b = occupant(&m, &occ, ms(5)).promise::<()>(&mut tool);
    tool.run_all();
    let e = tool.block_on(b).unwrap_err();
    assert_eq!(e.code(), codes::DEFENSE_REJECTED);
    assert_eq!(e.info(), Some("Mutex: the queue is full"));
}

#[test]
fn handover_is_strict_fifo() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    for i in 0..5 {
        let mut root = AsyncSteps::new();
        let r = r.clone();
        root.sync(&m, move |s, ()| {
            r.push(format!("in {i}"));
            sleep(s, ms(1));
            Ok(())
        });
        root.execute(&mut tool);
    }
    tool.run_all();
    assert_eq!(r.get(), ["in 0", "in 1", "in 2", "in 3", "in 4"]);
}

// ---- handing a slot over on one loop: who runs first ----

/// Where a waiting step leaves its handle.
type HandleSlot = Arc<std::sync::Mutex<Option<futoin_asyncsteps::ExternalHandle>>>;

/// Appends steps that record `names`, in order.
fn record_steps(root: &mut AsyncSteps, r: &Recorder, names: &[&'static str]) {
    for &name in names {
        let r = r.clone();
        root.add(move |_, ()| {
            r.push(name.to_string());
            Ok(())
        });
    }
}

/// Starts a flow whose section records "b in" (it queues behind a holder).
fn start_waiter(tool: &mut TestTool, m: &Mutex, r: &Recorder) {
    let mut b = AsyncSteps::new();
    let r = r.clone();
    b.sync(m, move |_, ()| {
        r.push("b in".to_string());
        Ok(())
    });
    b.execute(tool);
}

/// Starts a flow that parks its handle in `slot` and records "c resumed"
/// once completed; runs it up to its wait.
fn start_parked(tool: &mut TestTool, r: &Recorder, slot: &HandleSlot) {
    let mut c = AsyncSteps::new();
    let sc = slot.clone();
    c.add(move |s, ()| {
        *sc.lock().unwrap() = Some(s.wait_external());
        Ok(())
    });
    record_steps(&mut c, r, &["c resumed"]);
    c.execute(tool);
    tool.run_all_ready();
}

/// Starts flow "a": a section on `m` that records "a in" and then runs
/// `body`, followed by steps that record `tail`.
fn start_holder(
    tool: &mut TestTool,
    m: &Mutex,
    r: &Recorder,
    tail: &[&'static str],
    body: impl FnOnce(&mut Step<'_>) + Clone + Send + 'static,
) {
    let mut a = AsyncSteps::new();
    let ra = r.clone();
    a.sync(m, move |s, ()| {
        ra.push("a in".to_string());
        body(s);
        Ok(())
    });
    record_steps(&mut a, r, tail);
    a.execute(tool);
}

/// A slot handed to a waiter on the same loop: the waiter's section runs
/// before the releasing flow's next step (which would otherwise delay the
/// handover by the rest of that flow's burst).
#[test]
fn a_local_handover_runs_the_waiter_before_the_releasing_flow_goes_on() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    start_holder(&mut tool, &m, &r, &["a next", "a last"], |s| {
        sleep(s, ms(1))
    });
    start_waiter(&mut tool, &m, &r);
    tool.run_all();
    assert_eq!(r.get(), ["a in", "b in", "a next", "a last"]);
}

/// The release may come while a flow is being resumed: here the section
/// waits for an external completion and ends when it comes. The waiter
/// still runs before the releasing flow's next steps.
#[test]
fn a_handover_made_while_resuming_also_runs_the_waiter_first() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    let slot = HandleSlot::default();
    let sa = slot.clone();
    start_holder(&mut tool, &m, &r, &["a next", "a last"], move |s| {
        *sa.lock().unwrap() = Some(s.wait_external());
    });
    start_waiter(&mut tool, &m, &r);
    tool.run_all();
    assert_eq!(r.get(), ["a in"]);
    let h = slot.lock().unwrap().take().expect("a waits");
    h.success(()).unwrap();
    tool.run_all();
    assert_eq!(r.get(), ["a in", "b in", "a next", "a last"]);
}

/// Only a grant makes the releasing flow yield: a flow leaving a free
/// mutex goes on at once even while a message for another flow of its
/// loop waits (here one its own section posted).
#[test]
fn a_release_without_a_waiter_does_not_yield() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    let slot = HandleSlot::default();
    start_parked(&mut tool, &r, &slot);
    let sa = slot.clone();
    start_holder(&mut tool, &m, &r, &["a next"], move |_| {
        sa.lock().unwrap().take().unwrap().success(()).unwrap();
    });
    tool.run_all();
    assert_eq!(r.get(), ["a in", "a next", "c resumed"]);
}

/// Completes a waiting step when dropped.
struct Completer(HandleSlot);

impl Drop for Completer {
    fn drop(&mut self) {
        if let Some(h) = self.0.lock().unwrap().take() {
            let _ = h.success(());
        }
    }
}

/// A message that a `stack()` value of the section posts as it is
/// dropped is no grant: the flow leaving the free mutex goes on, as the
/// same flow without `sync` does.
#[test]
fn a_message_from_a_dropped_stack_value_is_no_grant() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    let slot = HandleSlot::default();
    start_parked(&mut tool, &r, &slot);
    let sa = slot.clone();
    start_holder(&mut tool, &m, &r, &["a next"], move |s| {
        s.stack(Completer(sa));
    });
    tool.run_all();
    assert_eq!(r.get(), ["a in", "a next", "c resumed"]);
}

#[test]
fn section_gets_incoming_args_and_its_result_goes_on() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    // Make the second flow queue, so its args travel the slow path too.
    let _holder = occupant(&m, &occ, ms(5)).promise::<()>(&mut tool);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((20i32, "x".to_owned())));
    root.sync(&m, |s, (v, t): (i32, String)| s.success((v + 1, t + "y")));
    root.add(|s, (v, t): (i32, String)| s.success((v * 2, t)));
    let p = root.promise::<(i32, String)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (42, "xy".to_owned()));
}

#[test]
fn wrong_section_args_are_an_internal_error_and_release() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u8,)));
    root.sync(&m, |_, (_v,): (String,)| Ok(()));
    let e = error_of(&mut tool, root);
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn error_in_section_releases_and_reaches_the_handlers() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    let mut a = AsyncSteps::new();
    let r1 = r.clone();
    a.sync_catch(
        &m,
        |s, ()| s.error("MyError", "inside"),
        move |_, e| {
            r1.push(format!("section handler {}", e.code()));
            Ok(()) // not handled: goes on
        },
    );
    let pa = a.promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    let r2 = r.clone();
    b.sync(&m, move |_, ()| {
        r2.push("b inside");
        Ok(())
    });
    let pb = b.promise::<()>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(pa).unwrap_err().code(), "MyError");
    tool.block_on(pb).unwrap();
    assert_eq!(r.get(), ["section handler MyError", "b inside"]);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn recovered_error_in_section_passes_the_handler_result_on() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    root.sync_catch(
        &m,
        |s, ()| s.error("MyError", "inside"),
        |s, _| s.success(("recovered".to_owned(),)),
    );
    let p = root.promise::<(String,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap().0, "recovered");
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn cancel_while_queued_leaves_the_queue() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let a = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    let b = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    let c = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 2));
    b.cancel();
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 1));
    tool.run_all();
    tool.block_on(a).unwrap();
    assert_eq!(code_of(&mut tool, b), codes::CANCELED);
    tool.block_on(c).unwrap();
    // b never entered: a then c, 10 ms each.
    assert_eq!(occ.get(), (0, 1, 2));
    assert_eq!(tool.elapsed(), ms(20));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn timeout_while_queued_leaves_the_queue() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let a = occupant(&m, &occ, ms(50)).promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    let m2 = m.clone();
    b.add(move |s, ()| {
        s.set_timeout(ms(10));
        s.sync(&m2, |_, ()| panic!("never enters"));
        Ok(())
    });
    let b = b.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 1));
    tool.advance(ms(10));
    assert_eq!(code_of(&mut tool, b), codes::TIMEOUT);
    assert_eq!(m.counts(), (1, 0));
    tool.run_all();
    tool.block_on(a).unwrap();
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn cancel_and_timeout_while_holding_release_for_the_next() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let a = occupant(&m, &occ, ms(100)).promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    let m2 = m.clone();
    let occ2 = occ.clone();
    b.add(move |s, ()| {
        s.set_timeout(ms(150));
        s.sync(&m2, move |s, ()| {
            occ2.enter();
            sleep(s, ms(1000));
            Ok(())
        });
        Ok(())
    });
    let b = b.promise::<()>(&mut tool);
    let c = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    tool.run_all_ready();
    // a holds; cancel it: b gets in at once.
    tool.advance(ms(20));
    a.cancel();
    tool.run_all_ready();
    assert_eq!(code_of(&mut tool, a), codes::CANCELED);
    assert_eq!(occ.get().2, 2);
    // b times out while holding (at 150 ms): c gets in.
    tool.advance(ms(130));
    assert_eq!(code_of(&mut tool, b), codes::TIMEOUT);
    tool.run_all();
    tool.block_on(c).unwrap();
    assert_eq!(occ.get().2, 3);
    assert_eq!(tool.elapsed(), ms(160));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn the_same_flow_re_enters_a_mutex_it_holds() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.sync(&m, move |s, ()| {
        let m3 = m2.clone();
        s.sync(&m2, move |s, ()| {
            s.sync(&m3, |s, ()| s.success((3,)));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap().0, 3);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_branch_never_inherits_its_parents_hold_and_a_deadlock_is_an_error() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.sync(&m, move |s, ()| {
        let m3 = m2.clone();
        s.parallel().add(move |s, ()| {
            s.sync(&m3, |_, ()| panic!("must not enter"));
            Ok(())
        });
        Ok(())
    });
    let e = error_of(&mut tool, root);
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(
            "Mutex: deadlock: a parallel branch waits for a lock that only its own \
             ancestors hold (they release it after the branch ends)"
        )
    );
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_branch_waits_for_slots_that_others_will_free() {
    // max 2: the parent holds one, the branches share the other.
    let mut tool = TestTool::new();
    let m = Mutex::new(2, None);
    let occ = Occupancy::default();
    let mut root = AsyncSteps::new();
    let (m2, occ2) = (m.clone(), occ.clone());
    root.sync(&m, move |s, ()| {
        parallel_occupants(s, &m2, &occ2, 3, ms(10));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    tool.block_on(p).unwrap();
    assert_eq!(occ.get(), (0, 1, 3));
    assert_eq!(tool.elapsed(), ms(30));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn sibling_branches_are_separate_flows() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let mut root = AsyncSteps::new();
    let (m2, occ2) = (m.clone(), occ.clone());
    root.add(move |s, ()| {
        parallel_occupants(s, &m2, &occ2, 2, ms(10));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    tool.block_on(p).unwrap();
    assert_eq!(occ.get(), (0, 1, 2));
    assert_eq!(tool.elapsed(), ms(20));
}

#[test]
fn zero_limits_are_clear_internal_errors() {
    /// A flow of one empty section on `obj`.
    fn empty_section<S: ISync + Clone>(obj: &S) -> AsyncSteps {
        let mut r = AsyncSteps::new();
        r.sync(obj, |_, ()| Ok(()));
        r
    }
    let mut tool = TestTool::new();
    let cases: Vec<(AsyncSteps, &str)> = vec![
        (
            empty_section(&Mutex::new(0, None)),
            "Mutex: max is 0, so no flow can ever enter",
        ),
        (
            empty_section(&Throttle::new(0, ms(10), None)),
            "Throttle: max is 0, so no flow can ever enter",
        ),
        (
            empty_section(&Throttle::new(1, Duration::ZERO, None)),
            "Throttle: the period is zero, so it would limit nothing",
        ),
    ];
    for (root, info) in cases {
        let e = error_of(&mut tool, root);
        assert_eq!((e.code(), e.info()), (codes::INTERNAL_ERROR, Some(info)));
    }
}

/// Entry times (ms since `t0`) of flows going through `sync`.
fn entry_times(tool: &mut TestTool, obj: &Throttle, n: usize) -> (Recorder, Vec<Promise<()>>) {
    let r = Recorder::default();
    let t0 = tool.now();
    let ps = (0..n)
        .map(|_| {
            let mut root = AsyncSteps::new();
            let r = r.clone();
            root.sync(obj, move |s, ()| {
                let at: Instant = s.tool().now();
                r.push(format!("{}", (at - t0).as_millis()));
                Ok(())
            });
            root.promise::<()>(tool)
        })
        .collect();
    (r, ps)
}

#[test]
fn throttle_admits_max_per_period_in_order() {
    let mut tool = TestTool::new();
    let t = Throttle::new(3, ms(100), None);
    let (r, ps) = entry_times(&mut tool, &t, 8);
    run_all_ok(&mut tool, ps);
    assert_eq!(r.get(), ["0", "0", "0", "100", "100", "100", "200", "200"]);
}

#[test]
fn throttle_timer_stops_when_idle_and_restarts_on_demand() {
    let mut tool = TestTool::new();
    let t = Throttle::new(1, ms(100), None);
    let (r, ps) = entry_times(&mut tool, &t, 2);
    run_all_ok(&mut tool, ps);
    assert_eq!(r.get(), ["0", "100"]);
    // One more period to reset the count, then nothing is pending.
    assert_eq!(tool.pending().timers, 0);
    assert_eq!(tool.elapsed(), ms(200));
    assert_eq!(t.counts(), (0, 0));
    // Idle for a while, then a new burst starts a new period at once.
    tool.advance(ms(1000));
    let (r, ps) = entry_times(&mut tool, &t, 2);
    run_all_ok(&mut tool, ps);
    assert_eq!(r.get(), ["0", "100"]);
}

#[test]
fn throttle_queue_limit_and_cancel_while_queued() {
    let mut tool = TestTool::new();
    let t = Throttle::new(1, ms(100), Some(2));
    let (r, mut ps) = entry_times(&mut tool, &t, 5);
    tool.run_all_ready();
    assert_eq!(t.counts(), (1, 2));
    // The second is cancelled while queued; the third takes its turn.
    let second = ps.remove(1);
    second.cancel();
    tool.run_all();
    assert_eq!(
        codes_of(&mut tool, ps),
        ["ok", "ok", "DefenseRejected", "DefenseRejected"]
    );
    assert_eq!(code_of(&mut tool, second), codes::CANCELED);
    assert_eq!(r.get(), ["0", "100"]);
}

#[test]
fn limiter_combines_concurrency_and_rate() {
    let mut tool = TestTool::new();
    let l = Limiter::new(LimiterOptions {
        concurrent: 2,
        max_queue: 2,
        rate: 3,
        period: ms(100),
        burst: 1,
    });
    let occ = Occupancy::default();
    let r = Recorder::default();
    let t0 = tool.now();
    let ps: Vec<_> = (0..6)
        .map(|_| {
            let mut root = AsyncSteps::new();
            let (occ, r) = (occ.clone(), r.clone());
            root.sync(&l, move |s, ()| {
                r.push(format!("{}", (s.tool().now() - t0).as_millis()));
                occupy(s, &occ, ms(30));
                Ok(())
            });
            root.promise::<()>(&mut tool)
        })
        .collect();
    tool.run_all();
    // 2 inside + 2 queued for a slot; the rest are rejected by the mutex.
    assert_eq!(
        codes_of(&mut tool, ps),
        ["ok", "ok", "ok", "ok", "DefenseRejected", "DefenseRejected"]
    );
    // Two at once; the third entry of the period at 30 ms, the fourth
    // waits for the rate (burst 1) until the next period at 100 ms.
    assert_eq!(r.get(), ["0", "0", "30", "100"]);
    assert_eq!(occ.get(), (0, 2, 4));
}

#[test]
fn contention_from_flows_on_two_loops() {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .build()
        .unwrap();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    const FLOWS: usize = 200;
    const ROUNDS: usize = 20;
    let loops_seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    // Half the flows on each loop, so both contend for the mutex.
    let ps: Vec<_> = (0..FLOWS)
        .map(|i| {
            let mut root = AsyncSteps::new();
            let (m, occ, seen, h) = (m.clone(), occ.clone(), loops_seen.clone(), rt.handle());
            root.repeat(ROUNDS, move |s, _| {
                let (occ, seen, h) = (occ.clone(), seen.clone(), h.clone());
                s.sync(&m, move |s, ()| {
                    occ.enter();
                    seen.lock().unwrap().insert(h.current_loop().unwrap());
                    // Park while inside until the loop's next turn: the
                    // other flows of this loop (and the other loop) run.
                    s.add(|s, ()| {
                        let w = s.wait_external();
                        s.tool().immediate(move |_| {
                            w.success(()).unwrap();
                        });
                        Ok(())
                    });
                    s.add(move |_, ()| {
                        occ.leave();
                        Ok(())
                    });
                    Ok(())
                });
                Ok(())
            });
            rt.loop_handle(i % 2).unwrap().promise::<()>(root)
        })
        .collect();
    for p in ps {
        p.wait().unwrap();
    }
    assert_eq!(occ.get(), (0, 1, FLOWS * ROUNDS));
    assert_eq!(m.counts(), (0, 0));
    assert_eq!(loops_seen.lock().unwrap().len(), 2);
}

/// A value whose `Drop` panics.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("drop panicked");
    }
}

#[test]
fn a_flow_ended_by_a_panicking_drop_still_frees_its_slot() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut a = AsyncSteps::new();
    a.sync(&m, |s, ()| {
        s.stack(PanicOnDrop);
        Ok(())
    });
    let pa = a.promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    b.sync(&m, |s, ()| s.success((7,)));
    let pb = b.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(code_of(&mut tool, pa), codes::INTERNAL_ERROR);
    assert_eq!(tool.block_on(pb).unwrap(), (7,));
    assert_eq!(m.counts(), (0, 0));
}

/// Enters its mutex from the error handler of a step that failed.
#[derive(Clone)]
struct AfterRecovery(Mutex);

impl ISync for AfterRecovery {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        let inner = self.0.clone();
        s.add_catch(
            |s, ()| s.error("Busy", "try the other way"),
            move |s, _| inner.sync(s, args, section),
        );
        Ok(())
    }
}

#[test]
fn a_section_added_from_an_error_handler_gets_its_args() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((20i32,)));
    root.sync(&AfterRecovery(Mutex::new(1, None)), |s, (v,): (i32,)| {
        s.success((v + 1,))
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (21,));

    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.add_catch(
            |s, ()| s.error("X", "y"),
            |s, _| {
                Section::new(|s, (v,): (i32,)| s.success((v,))).add_to(s, (5i32,).into_args());
                Ok(())
            },
        );
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (5,));
}

/// Takes two objects in one step: `.0` around nothing, `.1` around the
/// section; both are held until the section ends.
#[derive(Clone)]
struct Both(Mutex, Mutex);

impl ISync for Both {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0
            .sync(s, Args::new(), Section::new(|_, _: Args| Ok(())))?;
        self.1.sync(s, args, section)
    }
}

#[test]
fn two_objects_taken_in_one_step_are_both_held() {
    let mut tool = TestTool::new();
    let shared = Mutex::new(1, None);
    let occ = Occupancy::default();
    let ps: Vec<_> = (0..3)
        .map(|_| {
            let both = Both(shared.clone(), Mutex::new(1, None));
            occupant(&both, &occ, ms(10)).promise::<()>(&mut tool)
        })
        .collect();
    tool.run_all_ready();
    assert_eq!(shared.counts(), (1, 2));
    run_all_ok(&mut tool, ps);
    assert_eq!(occ.get(), (0, 1, 3));
    assert_eq!(tool.elapsed(), ms(30));
    assert_eq!(shared.counts(), (0, 0));
}

/// Syncs twice on the same object in one step.
#[derive(Clone)]
struct Twice(Mutex);

impl ISync for Twice {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0
            .sync(s, Args::new(), Section::new(|_, _: Args| Ok(())))?;
        self.0.sync(s, args, section)
    }
}

#[test]
fn the_same_object_twice_in_one_step_re_enters_or_is_refused_while_waiting() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    // Free: the first sync enters, the second re-enters.
    let mut root = AsyncSteps::new();
    root.sync(&Twice(m.clone()), |s, ()| s.success((1,)));
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (1,));
    assert_eq!(m.counts(), (0, 0));
    // Busy: the first sync would wait, so the second cannot know the
    // outcome; it is refused instead of deadlocking on itself.
    let occ = Occupancy::default();
    let holder = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    let mut root = AsyncSteps::new();
    root.sync(&Twice(m.clone()), |_, ()| Ok(()));
    let e = error_of(&mut tool, root);
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some("Mutex: this step already waits for the same object; sync on it once per step")
        )
    );
    tool.block_on(holder).unwrap();
    assert_eq!(m.counts(), (0, 0));
}
