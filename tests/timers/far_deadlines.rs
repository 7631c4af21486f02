//! Timers at the edges of virtual time: huge advances of `TestTool`'s
//! clock, the order of timers set far along it, and delays beyond any
//! clock (`Duration::MAX`), which count as 100 years.

use crate::common::HandleSlot as Slot;
use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// A tool whose clock `run_all` moved past where `advance` stops, to the
/// longest timer set there.
fn past_the_saturation_point() -> TestTool {
    let mut tool = TestTool::new();
    tool.advance(Duration::MAX);
    tool.deferred(Duration::MAX, |_| {});
    assert_eq!(tool.run_all(), 1);
    tool
}

#[test]
fn advance_duration_max_does_not_panic() {
    let r = std::panic::catch_unwind(|| {
        let mut tool = TestTool::new();
        tool.deferred(Duration::from_secs(1), |_| {});
        tool.advance(Duration::MAX)
    });
    assert_eq!(r.map_err(|_| "panicked"), Ok(1));
}

#[test]
fn huge_advances_saturate_and_fire_what_is_due() {
    let mut tool = TestTool::new();
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    tool.deferred(Duration::from_secs(1), move |_| l.borrow_mut().push("1s"));
    let l = log.clone();
    tool.deferred(50 * YEAR, move |_| l.borrow_mut().push("50y"));
    assert_eq!(tool.advance(Duration::MAX), 2);
    assert_eq!(*log.borrow(), ["1s", "50y"]);
    let at = tool.elapsed();
    assert_eq!(at, 400 * YEAR, "the clock stops 400 years in");
    // Again and again: no panic, no move, nothing more to run.
    for _ in 0..3 {
        assert_eq!(tool.advance(Duration::MAX), 0);
        assert_eq!(tool.advance(Duration::from_secs(1)), 0);
        assert_eq!(tool.elapsed(), at);
    }
    // Timers set there still come due as the clock is moved on to them.
    let l = log.clone();
    tool.deferred(Duration::from_millis(5), move |_| {
        l.borrow_mut().push("5ms")
    });
    assert_eq!(tool.advance(Duration::MAX), 0, "the clock cannot reach it");
    assert_eq!(tool.run_all(), 1);
    assert_eq!(tool.elapsed(), at + Duration::from_millis(5));
    assert_eq!(*log.borrow(), ["1s", "50y", "5ms"]);
}

#[test]
fn advance_past_the_saturation_point_does_not_go_back() {
    // `run_all` moves the clock to a timer beyond where `advance` stops.
    let mut tool = past_the_saturation_point();
    let at = tool.elapsed();
    assert!(at > 400 * YEAR);
    assert_eq!(tool.advance(Duration::MAX), 0);
    assert_eq!(tool.advance(Duration::ZERO), 0);
    assert_eq!(tool.elapsed(), at);
}

#[test]
fn timer_order_far_in_virtual_time() {
    let mut tool = TestTool::new();
    tool.advance(600 * YEAR);
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    tool.deferred(Duration::from_secs(1), move |_| l.borrow_mut().push("1s"));
    let l = log.clone();
    tool.deferred(Duration::from_millis(1), move |_| {
        l.borrow_mut().push("1ms")
    });
    assert_eq!(tool.run_all_ready(), 0, "nothing is due yet");
    tool.run_all();
    assert_eq!(*log.borrow(), ["1ms", "1s"]);
}

#[test]
fn the_longest_timers_keep_their_order_after_a_huge_advance() {
    // From where `advance` stops, timers up to the longest delay are
    // still told apart, to the nanosecond.
    let mut tool = TestTool::new();
    tool.advance(Duration::MAX);
    let at = tool.elapsed();
    let log = Rc::new(RefCell::new(Vec::new()));
    for (i, d) in [
        Duration::MAX,
        100 * YEAR - Duration::from_nanos(1),
        Duration::from_nanos(1),
        Duration::ZERO,
    ]
    .into_iter()
    .enumerate()
    {
        let l = log.clone();
        tool.deferred(d, move |_| l.borrow_mut().push(i));
    }
    assert_eq!(tool.run_all_ready(), 1);
    assert_eq!(tool.run_all(), 3);
    assert_eq!(*log.borrow(), [3, 2, 1, 0]);
    assert_eq!(tool.elapsed(), at + 100 * YEAR);
}

#[test]
fn timers_at_the_far_end_of_virtual_time_run_in_scheduling_order() {
    // `run_all` can move the clock 100 years past where `advance` stops,
    // to the end of the range the timers keep apart: there, every new
    // deadline is that end, so timers fall due at once, first set first.
    let mut tool = past_the_saturation_point();
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    tool.deferred(Duration::from_secs(1), move |_| l.borrow_mut().push("1s"));
    let l = log.clone();
    tool.deferred(Duration::from_millis(1), move |_| {
        l.borrow_mut().push("1ms")
    });
    assert_eq!(tool.run_all(), 2);
    assert_eq!(*log.borrow(), ["1s", "1ms"]);
    assert_eq!(tool.elapsed(), 500 * YEAR);
}

/// A limit above 100 years counts as 100 years, `Duration::MAX` included.
#[test]
fn huge_timeouts_count_as_a_hundred_years() {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(Duration::MAX);
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed(), CENTURY);

    let mut tool = TestTool::new();
    tool.deferred(Duration::MAX, |_| {});
    assert_eq!(tool.run_all(), 1);
    assert_eq!(tool.elapsed(), CENTURY);
}

/// Regression test for a defect found in review (the defect as it was,
/// the test asserts the correct behaviour):
///
/// `set_timeout(Duration::MAX)` ("practically no limit") panics inside the
/// scheduler (`Instant + Duration` overflow): the step fails with an
/// InternalError, and the half-inserted timer task leaks in `tasks`.
#[test]
fn huge_timeout_is_not_a_panic() {
    let mut tool = TestTool::new();
    let slot = Slot::default();
    let mut root = AsyncSteps::new();
    let sl = slot.clone();
    root.add(move |s, ()| {
        s.set_timeout(Duration::MAX);
        sl.put(s.wait_external());
        Ok(())
    });
    let p = root.promise::<(u8,)>(&mut tool);
    tool.run_all_ready();
    if let Some(h) = slot.get() {
        h.success((1u8,)).unwrap();
    }
    assert_eq!(
        tool.block_on(p).map(|v| v.0).map_err(|e| e.to_string()),
        Ok(1)
    );
    // And from the loop API directly: no panic.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tool.deferred(Duration::MAX, |_| {});
    }));
    assert!(r.is_ok(), "deferred(Duration::MAX) panicked");
}
