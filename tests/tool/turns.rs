//! `TestTool` runs its turns as `AsyncTool` runs its passes: the same
//! program logs the same order on both tools (flows completing their own
//! handles, a zero-delay timer, messages sent during a pass, run in it up
//! to `DRAIN_MAX`).
//!
//! Regression tests: `TestTool` used to run each of these programs in
//! another order than `AsyncTool` (every test here failed before the fix).

use futoin_asyncsteps::{AsyncSteps, AsyncTool, Scheduler, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Log = Arc<Mutex<Vec<&'static str>>>;

fn two_flows(s: &mut Scheduler) -> Log {
    let l: Log = Arc::default();
    for (a, b) in [("A", "A2"), ("B", "B2")] {
        let (l1, l2) = (l.clone(), l.clone());
        let mut root = AsyncSteps::new();
        root.add(move |s, ()| {
            l1.lock().unwrap().push(a);
            s.wait_external().success(()).unwrap();
            Ok(())
        });
        root.add(move |_, ()| {
            l2.lock().unwrap().push(b);
            Ok(())
        });
        root.execute(s);
    }
    l
}

fn zero_timer(s: &mut Scheduler) -> Log {
    let l: Log = Arc::default();
    let (l1, l2) = (l.clone(), l.clone());
    s.immediate(move |s| {
        l1.lock().unwrap().push("X");
        let l3 = l1.clone();
        s.deferred(Duration::ZERO, move |_| l3.lock().unwrap().push("T"));
    });
    s.immediate(move |s| {
        l2.lock().unwrap().push("Y");
        let l4 = l2.clone();
        s.immediate(move |_| l4.lock().unwrap().push("Z"));
    });
    l
}

/// Runs the program `f` sets up on an `AsyncTool` and on a `TestTool`
/// until each is idle; what each logged.
fn both<T: Clone>(f: fn(&mut Scheduler) -> Arc<Mutex<Vec<T>>>) -> (Vec<T>, Vec<T>) {
    let mut real = AsyncTool::new().unwrap();
    let lr = f(&mut real);
    real.run_until_idle().unwrap();
    let mut virt = TestTool::new();
    let lv = f(&mut virt);
    virt.run_all();
    let r = lr.lock().unwrap().clone();
    let v = lv.lock().unwrap().clone();
    (r, v)
}

#[test]
fn flows_completing_their_own_handles_run_in_the_same_order_on_both_tools() {
    let (r, v) = both(two_flows);
    assert_eq!(r, v);
    assert_eq!(v, ["A", "B", "A2", "B2"]);
}

#[test]
fn a_zero_delay_timer_runs_in_the_same_order_on_both_tools() {
    let (r, v) = both(zero_timer);
    assert_eq!(r, v);
    assert_eq!(v, ["X", "Y", "Z", "T"]);
}

type Names = Arc<Mutex<Vec<String>>>;

/// A flow whose `repeat` completes its own handle each iteration (a local
/// message sent while the messages of a pass run), beside an entry queued
/// before that pass.
fn self_completing_loop(s: &mut Scheduler) -> Names {
    let l: Names = Arc::default();
    let (l1, l2) = (l.clone(), l.clone());
    let mut root = AsyncSteps::new();
    root.repeat(70, move |s, i| {
        l1.lock().unwrap().push(format!("R{i}"));
        s.wait_external().success(()).unwrap();
        Ok(())
    });
    root.execute(s);
    s.immediate(move |s| {
        l2.lock().unwrap().push("I".into());
        let l3 = l2.clone();
        s.immediate(move |_| l3.lock().unwrap().push("J".into()));
    });
    l
}

#[test]
fn messages_sent_during_a_pass_run_in_it_up_to_the_bound_on_both_tools() {
    let (r, v) = both(self_completing_loop);
    // Pass 1: the flow's first iteration, then `I` (queuing `J`). Pass 2:
    // the completions, each sending the next, 64 at most (`DRAIN_MAX`),
    // then `J`. Pass 3: the rest.
    let mut want = vec!["R0".to_string(), "I".into()];
    want.extend((1..=64).map(|i| format!("R{i}")));
    want.push("J".into());
    want.extend((65..70).map(|i| format!("R{i}")));
    assert_eq!(r, want);
    assert_eq!(v, want);
}
