//! Error state (spec 1.7, 2.2.2): `error_info` and `last_exception` set,
//! reset and kept, a reused flow starting clean, `async_stack` naming the
//! steps from the root to the failing one (functions, closures, boxed
//! closures, sync steps, parallels and their branches), and `error()`
//! failing the step at the call, whatever the callback returns.

use crate::common::{run, Log};
use futoin_asyncsteps::{AsyncSteps, Error, Step, StepResult, TestTool};
use std::sync::{Arc, Mutex};

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
