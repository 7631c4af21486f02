//! An `ExternalHandle` after its step ended: a completion after a
//! success, after a timeout, at the same instant as the timeout (the
//! first wins) and after the flow was cancelled is refused with an
//! `InternalError`.

use crate::common::{assert_internal, HandleSlot as Slot, Log};
use crate::{install_hook, next_step_logger};
use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
use std::time::Duration;

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
