//! `Args`: `take` moves the later values down, and the loop's args
//! register holds nothing once a flow has ended; a string literal reaches
//! a step taking a `String` (bytes: `Vec<u8>`); `Vec`, `Box`, `Arc` and
//! `Option` of values travel as they are; a step takes one bare value.

use futoin_asyncsteps::{error::codes, Args, AsyncSteps, IntoArgs, TestTool};
use std::sync::{Arc, Mutex};

/// Regression test for a defect found in review (failed before its fix).
///
/// `take` moves the later values down: `len`, `is_empty` and the next
/// step's types agree.
#[test]
fn args_take_moves_the_rest_down() {
    let mut a = (1i32, String::from("x"), true).into_args();
    assert!(a.take(1).is_some());
    assert_eq!(a.len(), 2);
    assert_eq!(a.type_names(), "(i32, bool)");
    assert!(a.take(0).is_some());
    assert_eq!((a.len(), a.is_empty()), (1, false));
    assert!(a.take(1).is_none(), "nothing at 1");
    assert!(a.take(0).is_some());
    assert!(a.is_empty());

    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32, String::from("x"))));
    root.add(|s, mut a: Args| {
        a.take(0);
        s.success(a)
    });
    root.add(|s, (v,): (String,)| s.success((v,)));
    let p = root.promise::<(String,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, "x");
}

/// Regression test for a defect found in review (the defect as it was,
/// the test asserts the correct behaviour):
///
/// Success args a handler set before returning an error stay in the loop's
/// args register after the flow has ended ("Empty whenever no flow runs");
/// they are dropped only when some flow next runs on this loop.
#[test]
fn args_register_is_empty_after_flow_fails() {
    use futoin_asyncsteps::ArgValue;
    struct Res(Arc<Mutex<bool>>);
    impl ArgValue for Res {}
    impl Drop for Res {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = true;
        }
    }
    let dropped = Arc::new(Mutex::new(false));
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let d = dropped.clone();
    root.add_catch(
        |s, ()| s.error("First", "x"),
        move |s, _| {
            s.success((Res(d.clone()),))?;
            s.error("Second", "handler replaced the error")
        },
    );
    let p = root.promise::<()>(&mut tool);
    // error() after success() is a misuse: the flow fails with it.
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(
            "error() after success(): a step completes once \
             (asked for Second: handler replaced the error)"
        )
    );
    assert!(
        *dropped.lock().unwrap(),
        "result args of a failed flow must be dropped when it ends"
    );
}

/// Runs `root` on a fresh `TestTool` and gives its flow's result.
fn run<T: futoin_asyncsteps::FromArgs>(root: AsyncSteps) -> Result<T, futoin_asyncsteps::Error> {
    let mut tool = TestTool::new();
    let p = root.promise::<T>(&mut tool);
    tool.block_on(p)
}

#[test]
fn a_string_literal_reaches_a_step_that_takes_a_string() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success(("OK", b"raw" as &'static [u8])));
    root.add(|s, (t, b): (String, Vec<u8>)| s.success((t + "!", b.len())));
    assert_eq!(run::<(String, usize)>(root).unwrap(), ("OK!".to_owned(), 3));
    // A step that takes the literal as it is still gets it.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success(("OK",)));
    root.add(|s, (t,): (&'static str,)| s.success((t.len(),)));
    assert_eq!(run::<(usize,)>(root).unwrap().0, 2);
    // A number is no string: the mismatch says so.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((7u8,)));
    root.add(|_, (_,): (String,)| Ok(()));
    let e = run::<()>(root).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some("step expects (String,), got (u8,)")
        )
    );
}

#[test]
fn vecs_boxes_arcs_and_options_of_values_travel_as_they_are() {
    #[derive(Debug, PartialEq)]
    struct Point(i32, i32);
    impl futoin_asyncsteps::ArgValue for Point {}
    let shared = Arc::new(Mutex::new(5u8));
    let mut root = AsyncSteps::new();
    let sh = shared.clone();
    root.add(move |s, ()| {
        s.success((
            vec![Point(1, 2), Point(3, 4)],
            Box::new(Point(5, 6)),
            sh.clone(),
            Some(vec![1u16, 2]),
        ))
    });
    #[allow(clippy::type_complexity)]
    root.add(
        |s, (ps, b, a, o): (Vec<Point>, Box<Point>, Arc<Mutex<u8>>, Option<Vec<u16>>)| {
            *a.lock().unwrap() += 1;
            s.success((ps.len() + o.map_or(0, |v| v.len()), b.0, vec![0u8; 3]))
        },
    );
    let (n, x, bytes) = run::<(usize, i32, Vec<u8>)>(root).unwrap();
    assert_eq!((n, x, bytes), (4, 5, vec![0, 0, 0]));
    assert_eq!(*shared.lock().unwrap(), 6);
    // Their names in a mismatch.
    let a = (vec![1u8], vec!["x".to_owned()]).into_args();
    assert_eq!(
        a.type_names(),
        "(Vec<u8>, alloc::vec::Vec<alloc::string::String>)"
    );
}

#[test]
fn a_step_takes_one_bare_value() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success(7u32));
    root.add(|s, n: u32| s.success((n * 6,)));
    root.add(|s, n: u32| s.success(n.to_string()));
    assert_eq!(run::<String>(root).unwrap(), "42");
    // Two values are not one.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u32, 2u32)));
    root.add(|_, _: u32| Ok(()));
    let e = run::<()>(root).unwrap_err();
    assert_eq!(e.info(), Some("step expects (u32,), got (u32, u32)"));
}
