//! Conformance tests for error state (spec 1.7), implicit success (1.6),
//! success args, error handler semantics (2.1) and API misuse, which the
//! spec requires to be reported as `InternalError` (2.1).
//!
//! Misuse that the type system rules out is not tested here: adding steps to
//! a root after `execute()`/`promise()` does not compile, because starting a
//! flow consumes the `AsyncSteps` value (see the `compile_fail` doctest on
//! `AsyncSteps` in `src/steps/model.rs`).
//!
//! Everything runs on a [`TestTool`] (virtual time, nothing sleeps).

use futoin_asyncsteps::{
    error::codes, ArgValue, Args, AsyncSteps, Error, Step, StepResult, TestTool,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;
use common::{assert_internal, run, HandleSlot as Slot, Recorder as Log};

/// Collects what reaches the loop's unhandled-error hook.
fn install_hook(tool: &mut TestTool) -> Rc<RefCell<Vec<String>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    tool.set_unhandled_error_hook(move |e| s.borrow_mut().push(e.to_string()));
    seen
}

/// Formats a `StepResult` for the log.
fn show(r: &StepResult) -> String {
    match r {
        Ok(()) => "Ok".into(),
        Err(e) => format!("Err({e})"),
    }
}

/// A step that logs "next step" (used to prove a step is never reached).
fn next_step_logger(l: &Log) -> impl FnOnce(&mut Step<'_>, Args) -> StepResult + Clone + Send {
    let l = l.clone();
    move |_, _| {
        l.push("next step");
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// 1.7. error_info, last_exception, async_stack
// ---------------------------------------------------------------------------

#[test]
fn error_info_is_set_from_info_and_reset_when_error_has_none() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b, c) = (l.clone(), l.clone(), l.clone());
    root.add(move |s, ()| {
        // No error yet.
        a.push(format!("before: {:?}", s.state().error_info()));
        Ok(())
    })
    .add_catch(
        |s, ()| s.error("First", "first info"),
        move |s, e| {
            b.push(format!(
                "{}: error_info={:?} e.info={:?}",
                e.code(),
                s.state().error_info(),
                e.info()
            ));
            s.success(())
        },
    )
    .add_catch(
        |_, ()| Err(Error::new("Second")),
        move |s, e| {
            c.push(format!(
                "{}: error_info={:?} e.info={:?}",
                e.code(),
                s.state().error_info(),
                e.info()
            ));
            s.success(())
        },
    );
    run::<()>(root).unwrap();
    assert_eq!(
        l.get(),
        [
            "before: None",
            "First: error_info=Some(\"first info\") e.info=Some(\"first info\")",
            "Second: error_info=None e.info=None",
        ]
    );
}

#[test]
fn last_exception_holds_the_last_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b, c, d) = (l.clone(), l.clone(), l.clone(), l.clone());
    root.add(move |s, ()| {
        a.push(format!("before: {:?}", s.state().last_exception()));
        Ok(())
    })
    .add_catch(
        move |s, ()| {
            let b1 = b.clone();
            s.add_catch(
                |s, ()| s.error("First", "first info"),
                move |s, e| {
                    let le = s.state().last_exception().unwrap().clone();
                    assert_eq!(le, Error::with_info("First", "first info"));
                    assert_eq!(&le, e);
                    b1.push(format!("inner handler: last_exception={le}"));
                    // Replace the error.
                    s.error("Second", "second info")
                },
            );
            Ok(())
        },
        move |s, e| {
            let st = s.state();
            let le = st.last_exception().unwrap();
            c.push(format!(
                "outer handler: e={e} last_exception={le} error_info={:?}",
                st.error_info()
            ));
            assert_eq!(le, &Error::with_info("Second", "second info"));
            s.success(())
        },
    )
    .add(move |s, ()| {
        // Recovery does not clear it: it is the last error *caught*.
        let st = s.state();
        d.push(format!(
            "after recovery: last_exception={:?} error_info={:?}",
            st.last_exception()
                .map(|e| (e.code().to_string(), e.info().map(str::to_string))),
            st.error_info()
        ));
        Ok(())
    });
    run::<()>(root).unwrap();
    assert_eq!(
        l.get(),
        [
            "before: None",
            "inner handler: last_exception=First: first info",
            "outer handler: e=Second: second info last_exception=Second: second info error_info=Some(\"second info\")",
            "after recovery: last_exception=Some((\"Second\", Some(\"second info\"))) error_info=Some(\"second info\")",
        ]
    );
}

/// A finished flow's object (and its state's storage) is reused by the
/// next flow on the loop: nothing of the first flow's error state and
/// values may show through.
#[test]
fn a_reused_flow_starts_with_empty_error_state() {
    let mut tool = TestTool::new();
    let l = Log::default();
    for round in 0..3 {
        let mut root = AsyncSteps::new();
        let (a, b) = (l.clone(), l.clone());
        root.add(move |s, ()| {
            let st = s.state();
            a.push(format!(
                "round {round} start: info={:?} last={:?} stack={} key={}",
                st.error_info(),
                st.last_exception().map(|e| e.code().to_owned()),
                st.async_stack().len(),
                st.contains("k"),
            ));
            st.set("k", round);
            Ok(())
        })
        .add_catch(
            move |s, ()| match round {
                0 => s.error("First", "first info"),
                _ => Err(Error::new("Later")),
            },
            move |s, e| {
                let st = s.state();
                b.push(format!(
                    "round {round} handler: {e} info={:?} last={:?} stack={}",
                    st.error_info(),
                    st.last_exception().map(|e| e.code().to_owned()),
                    st.async_stack().len(),
                ));
                s.success(())
            },
        );
        let p = root.promise::<()>(&mut tool);
        tool.block_on(p).unwrap();
    }
    assert_eq!(
        l.get(),
        [
            "round 0 start: info=None last=None stack=0 key=false",
            "round 0 handler: First: first info info=Some(\"first info\") last=Some(\"First\") stack=1",
            "round 1 start: info=None last=None stack=0 key=false",
            "round 1 handler: Later info=None last=Some(\"Later\") stack=1",
            "round 2 start: info=None last=None stack=0 key=false",
            "round 2 handler: Later info=None last=Some(\"Later\") stack=1",
        ]
    );
}

fn outer_step(s: &mut Step<'_>, _: ()) -> StepResult {
    s.add(middle_step);
    Ok(())
}

/// Keeps the `async_stack` a handler sees, as strings.
fn keep_stack(into: &Mutex<Vec<String>>, s: &mut Step<'_>) {
    *into.lock().unwrap() = s
        .state()
        .async_stack()
        .iter()
        .map(|n| n.to_string())
        .collect();
}

fn middle_step(s: &mut Step<'_>, _: ()) -> StepResult {
    s.add(failing_step);
    Ok(())
}

fn failing_step(s: &mut Step<'_>, _: ()) -> StepResult {
    s.error("Deep", "deep failure")
}

#[test]
fn async_stack_names_the_failing_step_last() {
    let stack: Arc<Mutex<Vec<String>>> = Default::default();
    let st = stack.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(outer_step, move |s, e| {
        assert_eq!(e.code(), "Deep");
        keep_stack(&st, s);
        s.success(())
    });
    run::<()>(root).unwrap();
    let stack = stack.lock().unwrap().clone();
    assert_eq!(stack.len(), 3, "{stack:?}");
    assert!(stack[0].ends_with("::outer_step"), "{stack:?}");
    assert!(stack[1].ends_with("::middle_step"), "{stack:?}");
    assert!(stack[2].ends_with("::failing_step"), "{stack:?}");
}

#[test]
fn async_stack_with_closures_names_the_test_fn() {
    let stack: Arc<Mutex<Vec<String>>> = Default::default();
    let st = stack.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(
        |s, ()| {
            s.add(|_, ()| Err(Error::new("Deep")));
            Ok(())
        },
        move |s, _| {
            keep_stack(&st, s);
            s.success(())
        },
    );
    run::<()>(root).unwrap();
    let stack = stack.lock().unwrap().clone();
    assert_eq!(stack.len(), 2, "{stack:?}");
    for n in &stack {
        assert!(
            n.contains("async_stack_with_closures_names_the_test_fn") && n.contains("{{closure}}"),
            "{stack:?}"
        );
    }
    // The inner closure is nested in the outer one: its name is longer.
    assert!(stack[1].starts_with(stack[0].trim_end_matches("{{closure}}")));
    assert!(stack[1].len() > stack[0].len(), "{stack:?}");
}

/// Every kind of step names itself: a parallel added to the model, a
/// branch function, a closure that captures more than two words (kept in
/// a box) and a sync step (named after its section, not its wrapper;
/// the section's own frame follows it).
#[test]
fn async_stack_names_boxed_closures_sync_steps_and_model_parallels() {
    let stack: Arc<Mutex<Vec<String>>> = Default::default();
    let st = stack.clone();
    let mut root = AsyncSteps::new();
    root.parallel_catch(move |s, e| {
        assert_eq!(e.code(), "Wide");
        keep_stack(&st, s);
        s.success(())
    })
    .add(par_wide);
    run::<()>(root).unwrap();
    let stack = stack.lock().unwrap().clone();
    assert_eq!(stack.len(), 5, "{stack:?}");
    assert!(
        stack[0].starts_with("futoin_asyncsteps::steps::parallel::Parallel<"),
        "{stack:?}"
    );
    assert!(stack[1].ends_with("::par_wide"), "{stack:?}");
    assert!(stack[2].ends_with("::par_wide::{{closure}}"), "{stack:?}");
    assert!(stack[3].ends_with("::wide_section"), "{stack:?}");
    assert!(stack[4].ends_with("::wide_section"), "{stack:?}");
}

fn par_wide(s: &mut Step<'_>, _: ()) -> StepResult {
    let wide = [1u64, 2, 3, 4];
    s.add(move |s, ()| {
        assert_eq!(wide.iter().sum::<u64>(), 10);
        s.sync(&futoin_asyncsteps::sync::Mutex::new(1, None), wide_section);
        Ok(())
    });
    Ok(())
}

fn wide_section(s: &mut Step<'_>, _: ()) -> StepResult {
    s.error("Wide", "in a boxed closure's section")
}

fn par_outer(s: &mut Step<'_>, _: ()) -> StepResult {
    s.parallel().add(par_branch_ok).add(par_branch_fail);
    Ok(())
}

fn par_branch_ok(s: &mut Step<'_>, _: ()) -> StepResult {
    s.wait_external();
    Ok(())
}

fn par_branch_fail(s: &mut Step<'_>, _: ()) -> StepResult {
    s.error("BranchFail", "in branch")
}

#[test]
fn async_stack_in_branch_handler_names_the_branch_step_last() {
    let stack: Arc<Mutex<Vec<String>>> = Default::default();
    let st = stack.clone();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let st = st.clone();
        s.parallel()
            .add(par_branch_ok)
            .add_catch(par_branch_fail, move |s, _| {
                keep_stack(&st, s);
                Ok(())
            });
        Ok(())
    });
    assert_eq!(run::<()>(root).unwrap_err().code(), "BranchFail");
    let stack = stack.lock().unwrap().clone();
    assert_eq!(stack.len(), 3, "{stack:?}");
    assert!(
        stack[0].contains("async_stack_in_branch_handler_names_the_branch_step_last"),
        "{stack:?}"
    );
    assert!(stack[1].contains("Parallel"), "{stack:?}");
    assert!(stack[2].ends_with("::par_branch_fail"), "{stack:?}");
}

#[test]

fn async_stack_through_a_parallel_branch() {
    let stack: Arc<Mutex<Vec<String>>> = Default::default();
    let st = stack.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(par_outer, move |s, e| {
        assert_eq!(e.code(), "BranchFail");
        keep_stack(&st, s);
        s.success(())
    });
    run::<()>(root).unwrap();
    let stack = stack.lock().unwrap().clone();
    assert_eq!(stack.len(), 3, "{stack:?}");
    assert!(stack[0].ends_with("::par_outer"), "{stack:?}");
    assert!(stack[1].contains("Parallel"), "{stack:?}");
    assert!(stack[2].ends_with("::par_branch_fail"), "{stack:?}");
}

// ---------------------------------------------------------------------------
// 1.6. Implicit success
// ---------------------------------------------------------------------------

#[test]
fn implicit_success_passes_no_args() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.success_step((5i32,))
        .add(move |_, (v,): (i32,)| {
            // Returns without success(): implicit success, the args are not
            // forwarded.
            a.push(format!("got {v}"));
            Ok(())
        })
        .add(move |_, args: Args| {
            b.push(format!("next: {} args ({})", args.len(), args.type_names()));
            Ok(())
        });
    run::<()>(root).unwrap();
    assert_eq!(l.get(), ["got 5", "next: 0 args (())"]);
}

#[test]
fn typed_step_after_implicit_success_is_internal_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |_, ()| {
        a.push("implicit");
        Ok(())
    });
    let b = l.clone();
    root.add(move |_, (v,): (i32,)| {
        b.push(format!("never: {v}"));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let e = run::<()>(root).unwrap_err();
    assert_internal(&e, "step expects (i32,), got ()");
    assert_eq!(l.get(), ["implicit"]);
}

#[test]
fn set_cancel_set_timeout_wait_external_disable_implicit_success() {
    // set_cancel(): waits until cancelled.
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let c = a.clone();
        s.set_cancel(move || c.push("cancelled"));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all();
    assert!(p.try_take().is_none());
    assert_eq!(tool.pending().flows, 1);
    p.cancel();
    tool.run_all();
    let e = p.try_take().unwrap().unwrap_err();
    assert_eq!(e.code(), codes::CANCELED);
    assert_eq!(e.info(), Some("flow cancelled"));
    assert_eq!(l.get(), ["cancelled"]);
    assert_eq!(tool.pending().flows, 0);

    // set_timeout(): waits until the timeout.
    let l = Log::default();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(Duration::from_millis(50));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let start = tool.elapsed();
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed() - start, Duration::from_millis(50));
    assert!(l.get().is_empty());

    // wait_external(): waits forever (nothing else is pending).
    let l = Log::default();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.wait_external();
        Ok(())
    });
    root.add(next_step_logger(&l));
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_internal(
        &e,
        "block_on(): the flow still waits and nothing is pending",
    );
    assert_eq!(tool.pending().flows, 1);
    assert!(l.get().is_empty());
}

// ---------------------------------------------------------------------------
// Success args
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct User {
    id: u32,
    name: String,
}
impl ArgValue for User {}

#[test]
fn explicit_success_args_reach_next_step_exactly() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add(|s, ()| s.success((7i32, "seven".to_string(), true, 2.5f64)))
        .add(move |s, (n, t, f, x): (i32, String, bool, f64)| {
            a.push(format!("{n} {t} {f} {x}"));
            s.success((
                User {
                    id: 3,
                    name: "ann".into(),
                },
                vec![1u8, 2, 3],
            ))
        })
        .add(move |s, (u, bytes): (User, Vec<u8>)| {
            b.push(format!("{u:?} {bytes:?}"));
            // The last sub-step's result is this step's result.
            s.add(|s, ()| s.success((10i32,)));
            s.add(|s, (v,): (i32,)| s.success((v * 2, "twenty".to_string())));
            Ok(())
        });
    let r = run::<(i32, String)>(root).unwrap();
    assert_eq!(r, (20, "twenty".to_string()));
    assert_eq!(
        l.get(),
        [
            "7 seven true 2.5",
            "User { id: 3, name: \"ann\" } [1, 2, 3]"
        ]
    );
}

#[test]
fn wrong_arg_types_are_internal_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((5i64,)));
    let a = l.clone();
    root.add(move |_, (n, t): (i32, String)| {
        a.push(format!("never: {n} {t}"));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let e = run::<()>(root).unwrap_err();
    assert_internal(&e, "step expects (i32, String), got (i64,)");
    assert!(l.get().is_empty());

    // Wrong count.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32, 2i32)))
        .add(|_, (_v,): (i32,)| Ok(()));
    assert_internal(
        &run::<()>(root).unwrap_err(),
        "step expects (i32,), got (i32, i32)",
    );

    // The promise's type is checked the same way, in its own words.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32,)));
    assert_internal(
        &run::<(String,)>(root).unwrap_err(),
        "promise result: expected (String,), got (i32,)",
    );
}

// ---------------------------------------------------------------------------
// Misuse in execute callbacks
// ---------------------------------------------------------------------------

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

/// Runs `handler` as the error handler of a failing inner step; the outer
/// step's handler logs what reaches it. Returns the flow result.
fn with_inner_handler<H>(l: &Log, handler: H) -> Result<(), Error>
where
    H: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
{
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let a = a.clone();
            s.add_catch(
                move |_, ()| {
                    a.push("inner step fails");
                    Err(Error::with_info("Orig", "original"))
                },
                handler,
            );
            Ok(())
        },
        move |s, e| {
            b.push(format!(
                "outer handler: {e} (error_info {:?})",
                s.state().error_info()
            ));
            Ok(())
        },
    );
    root.add(next_step_logger(l));
    run::<()>(root)
}

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

// ---------------------------------------------------------------------------
// ExternalHandle after its step ended
// ---------------------------------------------------------------------------

const EXT_SUCCESS_ENDED: &str = "external success(): the step has already completed or ended";
const EXT_ERROR_ENDED: &str = "external error(): the step has already completed or ended";

#[test]
fn external_handle_success_after_success_is_refused() {
    let l = Log::default();
    let slot = Slot::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let sl = slot.clone();
    root.add(move |s, ()| {
        sl.put(s.wait_external());
        Ok(())
    });
    let a = l.clone();
    root.add(move |s, (v,): (i32,)| {
        a.push(format!("next step got {v}"));
        s.success((v,))
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all_ready();
    let h = slot.take();
    let h2 = h.clone();
    assert!(h.is_valid());
    h.success((1i32,)).unwrap();
    assert!(!h.is_valid());
    assert!(!h2.is_valid());
    assert_internal(&h.success((2i32,)).unwrap_err(), EXT_SUCCESS_ENDED);
    assert_internal(&h2.success((3i32,)).unwrap_err(), EXT_SUCCESS_ENDED);
    assert_internal(&h2.error("Late", "late").unwrap_err(), EXT_ERROR_ENDED);
    assert_eq!(tool.block_on(p).unwrap(), (1,));
    assert_eq!(l.get(), ["next step got 1"]);
    // Still refused after the flow is gone, and nothing is posted.
    assert_internal(&h.success((4i32,)).unwrap_err(), EXT_SUCCESS_ENDED);
    assert_eq!(tool.pending().inbox, 0);

    // A step that asks for a handle but completes by itself closes it.
    let mut root = AsyncSteps::new();
    let sl = slot.clone();
    root.add(move |s, ()| {
        sl.put(s.wait_external());
        s.success((9i32,))
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (9,));
    let h = slot.take();
    assert!(!h.is_valid());
    assert_internal(&h.success((1i32,)).unwrap_err(), EXT_SUCCESS_ENDED);
}

#[test]
fn external_handle_success_after_timeout_is_refused() {
    let l = Log::default();
    let slot = Slot::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let sl = slot.clone();
    root.add(move |s, ()| {
        sl.put(s.wait_external());
        s.set_timeout(Duration::from_millis(10));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    let h = slot.take();
    tool.advance(Duration::from_millis(10));
    assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
    assert!(!h.is_valid());
    assert_internal(&h.success(()).unwrap_err(), EXT_SUCCESS_ENDED);
    assert_internal(&h.error("Late", "late").unwrap_err(), EXT_ERROR_ENDED);
    assert_eq!(tool.pending().inbox, 0);
    assert_eq!(tool.run_all(), 0);
    assert!(l.get().is_empty());
}

#[test]
fn external_handle_timeout_and_success_at_same_instant_first_wins() {
    // The timeout is armed before the external callback at the same virtual
    // instant: the timeout wins and the late completion is refused.
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let h = s.wait_external();
        s.set_timeout(Duration::from_millis(10));
        let b = a.clone();
        s.tool().deferred(Duration::from_millis(10), move |_| {
            b.push(format!(
                "late success: {:?}",
                h.success(()).map_err(|e| e.to_string())
            ));
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    tool.run_all();
    assert_eq!(
        l.get(),
        ["late success: Err(\"InternalError: external success(): the step has already completed or ended\")"]
    );

    // The other way round: the external completion wins, the timeout is void.
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let h = s.wait_external();
        let b = a.clone();
        s.tool().deferred(Duration::from_millis(10), move |_| {
            b.push(format!(
                "success: {:?}",
                h.success((1u8,)).map_err(|e| e.to_string())
            ));
        });
        s.set_timeout(Duration::from_millis(10));
        Ok(())
    });
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (1,));
    assert_eq!(l.get(), ["success: Ok(())"]);
}

#[test]
fn external_handle_after_flow_cancelled_is_refused() {
    let l = Log::default();
    let slot = Slot::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (sl, a) = (slot.clone(), l.clone());
    root.add(move |s, ()| {
        sl.put(s.wait_external());
        let c = a.clone();
        s.set_cancel(move || c.push("cancel callback"));
        Ok(())
    });
    root.add(next_step_logger(&l));
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all();
    let h = slot.take();
    assert!(h.is_valid());
    p.cancel();
    tool.run_all();
    let e = p.try_take().unwrap().unwrap_err();
    assert_eq!(e.code(), codes::CANCELED);
    assert!(!h.is_valid());
    assert_internal(&h.success(()).unwrap_err(), EXT_SUCCESS_ENDED);
    assert_internal(&h.error("Late", "late").unwrap_err(), EXT_ERROR_ENDED);
    assert_eq!(l.get(), ["cancel callback"]);
    assert_eq!(tool.pending().flows, 0);

    // Same through the FlowHandle of execute().
    let mut tool = TestTool::new();
    let hook = install_hook(&mut tool);
    let mut root = AsyncSteps::new();
    let sl = slot.clone();
    root.add(move |s, ()| {
        sl.put(s.wait_external());
        Ok(())
    });
    let fh = root.execute(&mut tool);
    tool.run_all();
    let h = slot.take();
    fh.cancel();
    tool.run_all();
    assert_eq!(tool.pending().flows, 0);
    assert_internal(&h.success(()).unwrap_err(), EXT_SUCCESS_ENDED);
    // (What the hook sees for a cancelled execute() flow is checked in
    // `root_cancel_of_execute_flow_is_not_an_unhandled_error`.)
    drop(hook);
}

// ---------------------------------------------------------------------------
// Panics
// ---------------------------------------------------------------------------

#[test]
fn panic_in_execute_callback_is_internal_error() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add_catch(
        |_, ()| panic!("boom in step"),
        move |s, e| {
            a.push(format!("handler: {e} / {:?}", s.state().error_info()));
            s.success(("recovered".to_string(),))
        },
    );
    let r = run::<(String,)>(root).unwrap();
    assert_eq!(r.0, "recovered");
    assert_eq!(
        l.get(),
        ["handler: InternalError: panic in step: boom in step / Some(\"panic in step: boom in step\")"]
    );
}

#[test]
fn panic_in_error_handler_is_internal_error() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |_, e| {
        a.push(format!("inner handler: {}", e.code()));
        panic!("boom in handler {}", 2)
    })
    .unwrap_err();
    assert_internal(&e, "panic in error handler: boom in handler 2");
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "inner handler: Orig",
            "outer handler: InternalError: panic in error handler: boom in handler 2 \
             (error_info Some(\"panic in error handler: boom in handler 2\"))",
        ]
    );
}

#[test]
fn panic_in_cancel_callback_on_timeout_fails_the_flow_and_loop_goes_on() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let hook = install_hook(&mut tool);
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add_catch(
        |s, ()| {
            s.set_cancel(|| panic!("boom in cancel"));
            s.set_timeout(Duration::from_millis(10));
            Ok(())
        },
        move |_, e| {
            a.push(format!("handler: {e}"));
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    // The flow ends with InternalError at once: no handler sees the
    // timeout, and nothing goes to the hook (the promise has the error).
    let e = tool.block_on(p).unwrap_err();
    assert_internal(&e, "panic in cancel callback: boom in cancel");
    assert!(l.get().is_empty());
    assert!(hook.borrow().is_empty());
    assert_eq!(tool.pending().flows, 0);

    // The loop keeps running flows.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let h = s.wait_external();
        s.tool().deferred(Duration::from_millis(1), move |_| {
            h.success((42i32,)).unwrap()
        });
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (42,));
    assert!(hook.borrow().is_empty());
}

#[test]
fn panic_in_cancel_callback_on_root_cancel_does_not_stop_other_flows() {
    let mut tool = TestTool::new();
    let hook = install_hook(&mut tool);

    // Flow A waits with a panicking cancel callback.
    let mut a = AsyncSteps::new();
    a.add(|s, ()| {
        s.set_cancel(|| panic!("boom in cancel A"));
        Ok(())
    });
    // Flow B completes later, on the same loop.
    let mut b = AsyncSteps::new();
    b.add(|s, ()| {
        let h = s.wait_external();
        s.tool().deferred(Duration::from_millis(5), move |_| {
            h.success((7u8,)).unwrap()
        });
        Ok(())
    });
    let mut pa = a.promise::<()>(&mut tool);
    let pb = b.promise::<(u8,)>(&mut tool);
    tool.run_all_ready();
    pa.cancel();
    tool.run_all_ready();
    let e = pa.try_take().unwrap().unwrap_err();
    assert_internal(&e, "panic in cancel callback: boom in cancel A");
    assert!(hook.borrow().is_empty());
    assert_eq!(tool.pending().flows, 1);
    assert_eq!(tool.block_on(pb).unwrap(), (7,));

    // And a flow started afterwards completes too.
    let mut c = AsyncSteps::new();
    c.success_step(("still alive".to_string(),));
    let pc = c.promise::<(String,)>(&mut tool);
    assert_eq!(tool.block_on(pc).unwrap().0, "still alive");
    assert!(hook.borrow().is_empty());
}

// ---------------------------------------------------------------------------
// Error handler completion (spec 2.1 error_callback)
// ---------------------------------------------------------------------------

#[test]
fn handler_success_with_args_recovers() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        |_, ()| Err(Error::with_info("NotFound", "no such user")),
        move |s, e| {
            a.push(format!("handler: {e}"));
            s.success(("guest".to_string(), 0u32))
        },
    )
    .add(move |s, (name, id): (String, u32)| {
        b.push(format!("next step: {name} {id}"));
        s.success((name,))
    });
    assert_eq!(run::<(String,)>(root).unwrap().0, "guest");
    assert_eq!(
        l.get(),
        ["handler: NotFound: no such user", "next step: guest 0"]
    );
}

#[test]
fn handler_silent_return_continues_to_outer_handler() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |_, e| {
        a.push(format!("inner handler: {e}"));
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e, Error::with_info("Orig", "original"));
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "inner handler: Orig: original",
            "outer handler: Orig: original (error_info Some(\"original\"))",
        ]
    );
}

#[test]
fn handler_returning_new_error_replaces_it() {
    let l = Log::default();
    let a = l.clone();
    let e = with_inner_handler(&l, move |s, e| {
        a.push(format!("inner handler: {e}"));
        s.error("Replaced", "by inner handler")
    })
    .unwrap_err();
    assert_eq!(e, Error::with_info("Replaced", "by inner handler"));
    assert_eq!(
        l.get(),
        [
            "inner step fails",
            "inner handler: Orig: original",
            "outer handler: Replaced: by inner handler (error_info Some(\"by inner handler\"))",
        ]
    );
}

#[test]
fn handler_adding_steps_is_implicit_success() {
    // Spec 1.2.1: add() in an error handler is an implicit success; the
    // added steps run at the failed step's level and their result is the
    // step's result.
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        |_, ()| Err(Error::new("Primary")),
        move |s, e| {
            a.push(format!("handler: {}", e.code()));
            let c = a.clone();
            s.add(move |s, ()| {
                c.push("fallback step 1");
                s.success((5i32,))
            });
            s.add(|s, (v,): (i32,)| s.success((v, "fallback".to_string())));
            Ok(())
        },
    )
    .add(move |s, (v, t): (i32, String)| {
        b.push(format!("next step: {v} {t}"));
        s.success((v + 1,))
    });
    assert_eq!(run::<(i32,)>(root).unwrap(), (6,));
    assert_eq!(
        l.get(),
        [
            "handler: Primary",
            "fallback step 1",
            "next step: 5 fallback"
        ]
    );
}

#[test]
fn cancel_callback_runs_when_error_unwinds_through_step() {
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let c = a.clone();
            s.set_cancel(move || c.push("outer cancel"));
            let d = a.clone();
            s.add(move |_, ()| {
                d.push("sub-step fails");
                Err(Error::new("SubFail"))
            });
            Ok(())
        },
        move |_, e| {
            b.push(format!("outer handler: {}", e.code()));
            Ok(())
        },
    );
    root.add(next_step_logger(&l));
    assert_eq!(run::<()>(root).unwrap_err().code(), "SubFail");
    assert_eq!(
        l.get(),
        ["sub-step fails", "outer cancel", "outer handler: SubFail"]
    );

    // When the sub-steps succeed, the cancel callback does not run.
    let l = Log::default();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let c = a.clone();
        s.set_cancel(move || c.push("never: cancel"));
        s.add(|s, ()| s.success((1u8,)));
        Ok(())
    });
    root.add(next_step_logger(&l));
    run::<()>(root).unwrap();
    assert_eq!(l.get(), ["next step"]);
}

// ---------------------------------------------------------------------------
// Unhandled errors of execute()
// ---------------------------------------------------------------------------

#[test]
fn unhandled_error_of_execute_goes_to_hook() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let hook = install_hook(&mut tool);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.error("MyError", "nobody handles me"));
    root.add(next_step_logger(&l));
    let _h = root.execute(&mut tool);
    assert!(hook.borrow().is_empty());
    tool.run_all();
    assert_eq!(*hook.borrow(), ["MyError: nobody handles me"]);
    assert!(l.get().is_empty());
    assert_eq!(tool.pending().flows, 0);

    // A handled error and a success do not reach the hook.
    let mut root = AsyncSteps::new();
    root.add_catch(|_, ()| Err(Error::new("Handled")), |s, _| s.success(()));
    root.execute(&mut tool);
    let mut root = AsyncSteps::new();
    root.success_step((1u8,));
    root.execute(&mut tool);
    tool.run_all();
    assert_eq!(hook.borrow().len(), 1);
    // The hook sees the code as such.
    let codes_seen = Rc::new(RefCell::new(Vec::new()));
    let cs = codes_seen.clone();
    tool.set_unhandled_error_hook(move |e| cs.borrow_mut().push(e.code().to_string()));
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Err(Error::new(codes::NOT_IMPLEMENTED)));
    root.execute(&mut tool);
    tool.run_all();
    assert_eq!(*codes_seen.borrow(), [codes::NOT_IMPLEMENTED]);
}

#[test]

fn root_cancel_of_execute_flow_is_not_an_unhandled_error() {
    // `codes::CANCELED` is documented as "only seen by result waiters", and
    // the hook as receiving errors of flows that *fail*; a cancel requested
    // by the owner through the FlowHandle is neither.
    let l = Log::default();
    let mut tool = TestTool::new();
    let hook = install_hook(&mut tool);
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let c = a.clone();
        s.set_cancel(move || c.push("cancel callback"));
        Ok(())
    });
    let h = root.execute(&mut tool);
    tool.run_all();
    assert_eq!(tool.pending().flows, 1);
    h.cancel();
    tool.run_all();
    assert_eq!(tool.pending().flows, 0);
    assert_eq!(l.get(), ["cancel callback"]);
    assert!(hook.borrow().is_empty(), "hook saw {:?}", hook.borrow());
}

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

/// Spec 2.2.2: `error()` completes the step with the error at once. An
/// `Err` the callback drops, or a `success()` after it, does not undo
/// that, and its handler sees it. (Both used to be lost: the flow went
/// on.) Several raised: the last is the result, as code catching the
/// first throw and raising again would give (spec 3.5 catches one).
#[test]
fn an_error_the_callback_ignores_still_fails_the_step() {
    let log = Log::default();
    let mut root = AsyncSteps::new();
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    root.add_catch(
        |s, ()| {
            let _ignored = s.error("Forgot", "not returned");
            Ok(())
        },
        move |s, e| {
            l1.push(format!("handler 1: {} {:?}", e.code(), e.info()));
            s.success(())
        },
    );
    root.add_catch(
        |s, ()| {
            let _first = s.error("NotFound", "no such user");
            let _second = s.error("Other", "later");
            s.success((1u8,))
        },
        move |s, e| {
            let info = s.state().error_info().map(String::from);
            l2.push(format!("handler 2: {} {:?} {:?}", e.code(), e.info(), info));
            s.success(())
        },
    );
    root.add(move |_, ()| {
        l3.push("next");
        Ok(())
    });
    run::<()>(root).unwrap();
    assert_eq!(
        log.get(),
        [
            "handler 1: Forgot Some(\"not returned\")",
            "handler 2: Other Some(\"later\") Some(\"later\")",
            "next"
        ]
    );
}

/// Spec 2.2.2: "error_info - assigned to error_info state field", at the
/// call: the step sees it before it returns.
#[test]
fn error_assigns_error_info_at_the_call() {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let s2 = seen.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(|s, ()| s.error("First", "old info"), |s, _| s.success(()));
    root.add(move |s, ()| {
        let before = s.state().error_info().map(String::from);
        let r = s.error("Second", "new info");
        let after = s.state().error_info().map(String::from);
        *s2.lock().unwrap() = vec![before, after];
        r
    });
    assert_eq!(run::<()>(root).unwrap_err().code(), "Second");
    assert_eq!(
        *seen.lock().unwrap(),
        [Some("old info".to_string()), Some("new info".to_string())]
    );
}
