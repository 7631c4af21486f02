//! Panics in an execute callback, an error handler and a cancel callback
//! (on a timeout and on a root cancel) become an `InternalError` for that
//! flow; the loop and its other flows go on.

use crate::common::{assert_internal, run, Log};
use crate::{install_hook, with_inner_handler};
use futoin_asyncsteps::{AsyncSteps, TestTool};
use std::time::Duration;

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
