//! Deferred frames: what a step's frame costs, seen from inside the flow.

use crate::error::codes;
use crate::tool::scheduler::Scheduler;
use crate::{AsyncSteps, Error};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Runs `root` to its end on a fresh loop and returns how many frames its
/// main strand ever had room for (the pooled flow keeps its buffer).
fn frames_reserved(root: AsyncSteps) -> usize {
    let mut sched = Scheduler::new(Instant::now());
    sched.start(root, None);
    while sched.run_pass() > 0 {}
    let flow = sched.pooled().last().expect("the ended flow is pooled");
    flow.main.frames.capacity()
}

#[test]
fn steps_that_complete_at_once_push_no_frame() {
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Ok(()));
    root.add(|s, ()| s.success((1i32,)));
    root.add(|s, (v,): (i32,)| {
        assert_eq!(v, 1);
        s.state().set("seen", v);
        Ok(())
    });
    assert_eq!(frames_reserved(root), 0);
}

#[test]
fn a_step_pushes_its_frame_when_it_needs_it() {
    // Adding a sub-step, a stack value, a cancel callback: each needs the
    // step's frame (one level: room for one frame).
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.add(|_, ()| Ok(()));
        Ok(())
    });
    assert_eq!(frames_reserved(root), 1);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.stack(5u8);
        Ok(())
    });
    assert_eq!(frames_reserved(root), 1);
    // A step that fails at once gets its frame then, so its own handler
    // runs on it.
    let mut root = AsyncSteps::new();
    root.add_catch(
        |_, ()| Err(Error::with_info("Boom", "at once")),
        |s, e| {
            assert_eq!(e.code(), "Boom");
            s.success(())
        },
    );
    assert_eq!(frames_reserved(root), 1);
}

#[test]
fn a_frameless_step_that_fails_is_named_in_async_stack_and_handled_once() {
    let mut tool = crate::TestTool::new();
    let mut root = AsyncSteps::new();
    fn failing(_: &mut crate::Step<'_>, (): ()) -> crate::StepResult {
        Err(Error::with_info(codes::INVALID_REQUEST, "no"))
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    root.add_catch(failing, move |s, e| {
        r.fetch_add(1, Ordering::Relaxed);
        let stack = s.state().async_stack();
        assert_eq!(stack.len(), 1, "{stack:?}");
        assert!(stack[0].ends_with("::failing"), "{stack:?}");
        Err(e.clone())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::INVALID_REQUEST);
    assert_eq!(runs.load(Ordering::Relaxed), 1);
}
