//! `Args`: `take` moves the later values down, and the loop's args
//! register holds nothing once a flow has ended.

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
