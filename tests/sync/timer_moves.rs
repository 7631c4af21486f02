//! A `Throttle`'s period timer runs on one loop. When that loop goes away
//! while flows wait on other loops, the timer moves to one of theirs, so
//! no waiter is left without a next period.

use crate::common::ms;
use futoin_asyncsteps::sync::Throttle;
use futoin_asyncsteps::{AsyncSteps, Promise, TestTool};

/// A throttle of one entry per 100 ms whose period timer runs on the
/// returned loop (a first flow entered there).
fn throttle_timed_on_a() -> (Throttle, TestTool) {
    let t = Throttle::new(1, ms(100), None);
    let mut tool_a = TestTool::new();
    let mut a = AsyncSteps::new();
    a.sync(&t, |_, ()| Ok(()));
    let pa = a.promise::<()>(&mut tool_a);
    tool_a.run_all_ready();
    tool_a.block_on(pa).unwrap();
    (t, tool_a)
}

/// Queues a flow on `t` on `tool`; it succeeds with `n` once inside.
fn queue(t: &Throttle, tool: &mut TestTool, n: i32) -> Promise<(i32,)> {
    let mut root = AsyncSteps::new();
    root.sync(t, move |s, ()| s.success((n,)));
    let p = root.promise::<(i32,)>(tool);
    tool.run_all_ready();
    p
}

/// The waiter on `tool` gets in exactly one period after `now`.
fn enters_one_period_later(tool: &mut TestTool, p: Promise<(i32,)>, n: i32) {
    tool.run_all_ready();
    tool.advance(ms(99));
    assert!(!p.is_done());
    tool.advance(ms(1));
    assert!(p.is_done());
    assert_eq!(tool.block_on(p).unwrap(), (n,));
}

#[test]
fn a_throttle_period_moves_to_a_waiters_loop_when_its_loop_goes() {
    let (t, tool_a) = throttle_timed_on_a();
    let mut tool_b = TestTool::new();
    let pb = queue(&t, &mut tool_b, 1);
    assert_eq!(t.counts(), (1, 1));
    drop(tool_a);
    enters_one_period_later(&mut tool_b, pb, 1);
}

/// The latest flow to queue was on the timer's own loop: the timer still
/// moves to the loop of an earlier waiter.
#[test]
fn the_timer_moves_past_waiters_of_its_own_loop() {
    let (t, mut tool_a) = throttle_timed_on_a();
    let mut tool_b = TestTool::new();
    let pb = queue(&t, &mut tool_b, 1);
    let _pa2 = queue(&t, &mut tool_a, 2);
    assert_eq!(t.counts(), (1, 2));
    drop(tool_a);
    enters_one_period_later(&mut tool_b, pb, 1);
    assert_eq!(t.counts(), (1, 0));
}

/// The latest waiter's loop went away before the timer's: the timer moves
/// to the loop before it that still runs.
#[test]
fn the_timer_skips_loops_that_went_away_too() {
    let (t, tool_a) = throttle_timed_on_a();
    let mut tool_c = TestTool::new();
    let pc = queue(&t, &mut tool_c, 3);
    let mut tool_b = TestTool::new();
    let _pb = queue(&t, &mut tool_b, 2);
    drop(tool_b); // its waiter is cancelled and leaves the queue
    assert_eq!(t.counts(), (1, 1));
    drop(tool_a);
    enters_one_period_later(&mut tool_c, pc, 3);
}
