//! Implicit success (spec 1.6) and success args: no args after an
//! implicit success, what turns it off (`set_cancel`, `set_timeout`,
//! `wait_external`), explicit args reaching the next step exactly, and
//! args of the wrong types (an `InternalError` naming what was expected
//! and what was given).

use crate::common::{assert_internal, run, Log};
use crate::next_step_logger;
use futoin_asyncsteps::{error::codes, ArgValue, Args, AsyncSteps, TestTool};
use std::time::Duration;

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

/// A step that expects `(i32, String)` after one that gives something
/// else: the error names both.
#[test]
fn typed_args_mismatch_names_expected_and_given() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u64, 'x')));
    root.add(|s, (a, b): (i32, String)| s.success((a, b)));
    let p = root.promise::<(i32, String)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some("step expects (i32, String), got (u64, char)")
    );

    // Too few args.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32,)));
    root.add(|s, (a, b): (i32, String)| s.success((a, b)));
    let p = root.promise::<(i32, String)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        e.to_string(),
        "InternalError: step expects (i32, String), got (i32,)"
    );

    // The promise's own type mismatches.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32,)));
    let p = root.promise::<(String,)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        e.to_string(),
        "InternalError: promise result: expected (String,), got (i32,)"
    );
}
