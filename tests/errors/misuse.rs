//! API misuse, reported as `InternalError` (spec 2.1): completing a step
//! twice (`success()` twice, with an external completion, `error()` after
//! `success()`), adding steps after `success()`, the waiting calls in an
//! error handler, a parallel refused after `success()`, and a `StackRef`
//! of a flow on another loop.

use crate::common::{self, assert_internal, run, slot, Log, Slot};
use crate::{next_step_logger, with_inner_handler};
use futoin_asyncsteps::{error::codes, AsyncSteps, Error, StepResult, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Misuse in execute callbacks
// ---------------------------------------------------------------------------

/// Formats a `StepResult` for the log.
fn show(r: &StepResult) -> String {
    match r {
        Ok(()) => "Ok".into(),
        Err(e) => format!("Err({e})"),
    }
}

#[test]
fn success_twice_is_internal_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        s.success((1i32,))?;
        let r = s.success((2i32,));
        a.push(format!("second success: {}", show(&r)));
        // Ignoring the returned error does not help: the step fails.
        Ok(())
    });
    root.add(next_step_logger(&l));
    let e = run::<()>(root).unwrap_err();
    assert_internal(&e, "success() called twice in the same step");
    assert_eq!(
        l.get(),
        ["second success: Err(InternalError: success() called twice in the same step)"]
    );
}

#[test]
fn success_after_add_is_internal_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let b = a.clone();
        s.add(move |_, ()| {
            b.push("never: sub-step");
            Ok(())
        });
        let r = s.success(());
        a.push(format!("success: {}", show(&r)));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let e = run::<()>(root).unwrap_err();
    assert_internal(&e, "success() after add(): sub-steps complete this step");
    assert_eq!(
        l.get(),
        ["success: Err(InternalError: success() after add(): sub-steps complete this step)"]
    );
}

#[test]
fn add_after_success_is_internal_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        s.success(())?;
        let b = a.clone();
        s.add(move |_, ()| {
            b.push("never: sub-step");
            Ok(())
        });
        a.push("added");
        Ok(())
    });
    root.add(next_step_logger(&l));
    let e = run::<()>(root).unwrap_err();
    assert_internal(&e, "add() after success() in the same step");
    assert_eq!(l.get(), ["added"]);

    // parallel() is an add() too.
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        s.success(())?;
        let b = a.clone();
        s.parallel().add(move |_, ()| {
            b.push("never: branch");
            Ok(())
        });
        Ok(())
    });
    root.add(next_step_logger(&l));
    let e = run::<()>(root).unwrap_err();
    assert_internal(&e, "add() after success() in the same step");
    assert!(l.get().is_empty());
}

// ---------------------------------------------------------------------------
// Misuse in error handlers
// ---------------------------------------------------------------------------

#[test]
fn set_timeout_in_error_handler_is_internal_error() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |s, e| {
        a.push(format!("inner handler: {}", e.code()));
        s.set_timeout(Duration::from_millis(10));
        Ok(())
    })
    .unwrap_err();
    assert_internal(&e, "set_timeout() is not allowed in an error handler");
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "inner handler: Orig",
            "outer handler: InternalError: set_timeout() is not allowed in an error handler \
             (error_info Some(\"set_timeout() is not allowed in an error handler\"))",
        ]
    );
}

#[test]
fn set_cancel_in_error_handler_is_internal_error() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |s, e| {
        a.push(format!("inner handler: {}", e.code()));
        let c = a.clone();
        s.set_cancel(move || c.push("never: cancel callback"));
        // Even a recovery does not hide the misuse.
        s.success(())
    })
    .unwrap_err();
    assert_internal(&e, "set_cancel() is not allowed in an error handler");
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "inner handler: Orig",
            "outer handler: InternalError: set_cancel() is not allowed in an error handler \
             (error_info Some(\"set_cancel() is not allowed in an error handler\"))",
        ]
    );
}

#[test]
fn wait_external_in_error_handler_is_internal_error() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |s, e| {
        a.push(format!("inner handler: {}", e.code()));
        let h = s.wait_external();
        // The handle is dead from the start.
        a.push(format!(
            "handle valid: {}, success: {:?}",
            h.is_valid(),
            h.success(()).map_err(|e| e.to_string())
        ));
        Ok(())
    })
    .unwrap_err();
    assert_internal(&e, "wait_external() is not allowed in an error handler");
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "inner handler: Orig",
            "handle valid: false, success: Err(\"InternalError: external success(): the step has already completed or ended\")",
            "outer handler: InternalError: wait_external() is not allowed in an error handler \
             (error_info Some(\"wait_external() is not allowed in an error handler\"))",
        ]
    );
}

#[test]
fn success_twice_in_error_handler_is_internal_error() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |s, _| {
        s.success(())?;
        let r = s.success(());
        a.push(format!("second success: {}", show(&r)));
        Ok(())
    })
    .unwrap_err();
    assert_internal(&e, "success() called twice in the same step");
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "second success: Err(InternalError: success() called twice in the same step)",
            "outer handler: InternalError: success() called twice in the same step \
             (error_info Some(\"success() called twice in the same step\"))",
        ]
    );
}

/// The waiting calls belong to execute callbacks: in an error handler each
/// fails the step with an `InternalError` naming the call.
#[test]
fn waiting_calls_in_an_error_handler_are_internal_errors() {
    let mut tool = TestTool::new();
    type Call = fn(&mut futoin_asyncsteps::Step<'_>);
    let cases: [(&str, Call); 3] = [
        ("set_timeout", |s| s.set_timeout(Duration::from_millis(10))),
        ("set_cancel", |s| s.set_cancel(|| {})),
        ("wait_external", |s| {
            let h = s.wait_external();
            assert!(!h.is_valid());
            assert_eq!(h.success(()).unwrap_err().code(), codes::INTERNAL_ERROR);
        }),
    ];
    for (name, call) in cases {
        let mut root = AsyncSteps::new();
        root.add_catch(
            move |s, ()| {
                s.add_catch(
                    |s, ()| s.error("First", "x"),
                    move |s, _| {
                        call(s);
                        Ok(())
                    },
                );
                Ok(())
            },
            |s, e| s.success((e.to_string(),)),
        );
        let p = root.promise::<(String,)>(&mut tool);
        assert_eq!(
            tool.block_on(p).unwrap().0,
            format!("InternalError: {name}() is not allowed in an error handler")
        );
        assert_eq!(tool.elapsed(), Duration::ZERO);
    }
    // What a handler does instead: add a step that waits.
    let mut root = AsyncSteps::new();
    root.add_catch(
        |s, ()| s.error("First", "x"),
        |s, _| {
            s.add(|s, ()| {
                s.set_timeout(Duration::from_millis(10));
                Ok(())
            });
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed(), Duration::from_millis(10));
}

// ---------------------------------------------------------------------------
// One completion per step
// ---------------------------------------------------------------------------

/// Regression test for a defect found in review (failed before its fix).
///
/// success() in a step whose external handle completed it already: the
/// step fails with `InternalError`, not one completion silently dropped.
#[test]
fn an_external_completion_and_success_in_one_step_is_a_misuse() {
    let mut tool = TestTool::new();
    let ext: Slot<Result<(), Error>> = slot();
    let mut root = AsyncSteps::new();
    let e2 = ext.clone();
    root.add(move |s, ()| {
        let h = s.wait_external();
        *e2.lock().unwrap() = Some(h.success((1i32,)));
        s.success((2i32,))
    });
    root.add(|s, (v,): (i32,)| s.success((v,)));
    let p = root.promise::<(i32,)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert!(matches!(*ext.lock().unwrap(), Some(Ok(()))));
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some("an external completion and success() in the same step: a step completes once")
    );
}

/// Regression test for a defect found in review (failed before its fix).
///
/// error() after success() in one callback is a misuse.
#[test]
fn error_after_success_is_a_misuse() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.success((1u8,))?;
        s.error("MyError", "after success")
    });
    let p = root.promise::<(u8,)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some("error() after success(): a step completes once (asked for MyError: after success)")
    );
}

// ---------------------------------------------------------------------------
// A refused parallel, a StackRef of another loop
// ---------------------------------------------------------------------------

/// A `parallel()` refused as misuse (after `success()`) adds its branches
/// nowhere: not to the parallel step queued next on the level below,
/// which runs with its own branch only once the handler recovered.
#[test]
fn a_refused_parallel_adds_no_branch_to_another_levels_parallel() {
    let l = common::log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (l1, lh) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            s.success(())?;
            let l2 = l1.clone();
            s.parallel().add(move |_, ()| {
                common::push(&l2, "injected branch");
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            common::push(&lh, format!("handler: {}", e.code()));
            s.success(())
        },
    );
    let l3 = l.clone();
    root.parallel().add(move |_, ()| {
        common::push(&l3, "own branch");
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        common::entries(&l),
        ["handler: InternalError", "own branch"]
    );
}

/// A `StackRef` made by a flow on another loop is refused, even when that
/// flow has the same key on its loop as this one (the first flow of two
/// fresh loops does) and this flow's step holds a value of the same type
/// in the same place: it used to read this flow's own value.
#[test]
fn a_stack_ref_from_a_flow_on_another_loop_is_refused() {
    let slot: Arc<Mutex<Option<futoin_asyncsteps::StackRef<i32>>>> = Arc::default();
    let mut ta = TestTool::new();
    let mut a = AsyncSteps::new();
    let s2 = slot.clone();
    a.add(move |s, ()| {
        *s2.lock().unwrap() = Some(s.stack(1i32));
        Ok(())
    });
    let pa = a.promise::<()>(&mut ta);
    ta.block_on(pa).unwrap();

    let mut tb = TestTool::new();
    let mut b = AsyncSteps::new();
    b.add(move |s, ()| {
        let _mine = s.stack(2i32);
        let theirs = slot.lock().unwrap().expect("made on loop a");
        let v = *s.stack_get(theirs)?;
        s.success((v,))
    });
    let pb = b.promise::<(i32,)>(&mut tb);
    let e = tb.block_on(pb).unwrap_err();
    assert_internal(&e, "stack_get(): the reference belongs to another flow");
}
