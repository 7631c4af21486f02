//! Panicking `Drop`s of values the engine holds outside any callback: a
//! value on a step's stack, and a detached flow's result args. The flow
//! still ends (its promise settles, or its `InternalError` reaches the
//! unhandled-error hook), and the loop lives on. A panicking `Drop` in a
//! recycled `Extra` is `tests/sync/mutex.rs`'s
//! `a_flow_ended_by_a_panicking_drop_still_frees_its_slot`.

use futoin_asyncsteps::{error::codes, ArgValue, AsyncSteps, TestTool};
use std::sync::{Arc, Mutex as StdMutex};

/// Regression test for a defect found in review (the defect as it was,
/// the test asserts the correct behaviour):
///
/// "A panic inside a callback becomes an InternalError for that flow; it
/// never takes a loop thread down" (DESIGN.md). Drops of user values run
/// inside the engine without `catch_unwind` (`stack()` values, queued
/// closures, awaited futures on cancel, args): a panicking `Drop` unwinds out
/// of the loop while the flow is taken out of its slot, so the flow becomes a
/// zombie (counted in `stats().flows`, its promise never settles).
#[test]
fn panicking_drop_of_a_stack_value_is_contained() {
    struct Boom;
    impl Drop for Boom {
        fn drop(&mut self) {
            panic!("boom in drop");
        }
    }
    let mut tool = TestTool::new();
    tool.set_unhandled_error_hook(|_| {});
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let _ = s.stack(Boom);
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    let escaped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tool.run_all();
    }))
    .is_err();
    let settled = p.try_take().is_some();
    let flows = tool.stats().flows;
    assert_eq!((escaped, settled, flows), (false, true, 0));
}

/// A result arg whose Drop panics, for a flow nobody waits for.
struct ArgBomb;

impl Drop for ArgBomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("arg bomb");
        }
    }
}

impl ArgValue for ArgBomb {}

/// Regression test (found in a review of the engine's fast paths): a
/// panicking `Drop` of a detached flow's result args unwound out of the
/// loop. It is an `InternalError` for the unhandled-error hook, and the
/// loop lives on.
#[test]
fn panicking_result_arg_of_detached_flow_keeps_loop_alive() {
    let mut tool = TestTool::new();
    let errs = Arc::new(StdMutex::new(Vec::new()));
    let e2 = errs.clone();
    tool.set_unhandled_error_hook(move |e| e2.lock().unwrap().push(e.code().to_owned()));
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((ArgBomb,)));
    root.execute(&mut tool);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.run_all()));
    assert!(r.is_ok(), "the loop panicked");
    assert_eq!(*errs.lock().unwrap(), [codes::INTERNAL_ERROR]);
    // The loop goes on running flows.
    let mut next = AsyncSteps::new();
    next.add(|s, ()| s.success((2i32,)));
    let p = next.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 2);
}

/// A value a loop's driver captures whose `Drop` panics when the loop
/// ends: the loop's step, kept in the flow's queue while the loop runs,
/// is dropped as the loop frame goes. The flow ends with `InternalError`
/// (its promise settles) and the loop goes on running flows.
#[test]
fn panicking_drop_of_a_loop_drivers_capture_is_contained() {
    struct Boom;
    impl Drop for Boom {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("boom in a loop's capture");
            }
        }
    }
    let mut tool = TestTool::new();
    tool.set_unhandled_error_hook(|_| {});
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let b = Boom;
        s.repeat(2, move |_, _| {
            let _ = &b;
            Ok(())
        });
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    let escaped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tool.run_all();
    }))
    .is_err();
    assert!(!escaped, "the panic left the loop");
    let e = p.try_take().expect("settled").unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(tool.stats().flows, 0);
    // The loop runs the next flow.
    let mut next = AsyncSteps::new();
    next.add(|s, ()| s.success((7i32,)));
    let p = next.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (7,));
}
