//! Handing a slot over on one loop: who runs first. A local handover runs
//! the waiter before the releasing flow goes on (also when made while
//! resuming); a release without a waiter does not yield; a message sent
//! from a dropped stack value is no grant.

use crate::common::*;
use crate::sleep;
use futoin_asyncsteps::sync::Mutex;
use futoin_asyncsteps::{AsyncSteps, Step, TestTool};
use std::sync::Arc;

/// Where a waiting step leaves its handle.
type HandleSlot = Arc<std::sync::Mutex<Option<futoin_asyncsteps::ExternalHandle>>>;

/// Appends steps that record `names`, in order.
fn record_steps(root: &mut AsyncSteps, r: &Log, names: &[&'static str]) {
    for &name in names {
        let r = r.clone();
        root.add(move |_, ()| {
            r.push(name.to_string());
            Ok(())
        });
    }
}

/// Starts a flow whose section records "b in" (it queues behind a holder).
fn start_waiter(tool: &mut TestTool, m: &Mutex, r: &Log) {
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
fn start_parked(tool: &mut TestTool, r: &Log, slot: &HandleSlot) {
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
    r: &Log,
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
    let r = Log::default();
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
    let r = Log::default();
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
    let r = Log::default();
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
    let r = Log::default();
    let slot = HandleSlot::default();
    start_parked(&mut tool, &r, &slot);
    let sa = slot.clone();
    start_holder(&mut tool, &m, &r, &["a next"], move |s| {
        s.stack(Completer(sa));
    });
    tool.run_all();
    assert_eq!(r.get(), ["a in", "a next", "c resumed"]);
}
