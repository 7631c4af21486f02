//! Unhandled errors of `execute()` flows reach the loop's unhandled-error
//! hook; a root cancel by the flow's owner does not.

use crate::common::Log;
use crate::{install_hook, next_step_logger};
use futoin_asyncsteps::{error::codes, AsyncSteps, Error, TestTool};
use std::cell::RefCell;
use std::rc::Rc;

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
