//! Timers at the edges of virtual time: huge advances of `TestTool`'s
//! clock, and the order of timers set far along it.

use futoin_asyncsteps::TestTool;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

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
    let mut tool = TestTool::new();
    tool.advance(Duration::MAX);
    tool.deferred(Duration::MAX, |_| {});
    assert_eq!(tool.run_all(), 1);
    let at = tool.elapsed();
    assert!(at > 400 * YEAR);
    assert_eq!(tool.advance(Duration::MAX), 0);
    assert_eq!(tool.advance(Duration::ZERO), 0);
    assert_eq!(tool.elapsed(), at);
}
