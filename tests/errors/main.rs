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

#[path = "../common/mod.rs"]
mod common;

mod ended_handles;
mod handlers;
mod misuse;
mod panics;
mod state;
mod success;
mod unhandled;

use common::{run, Log};
use futoin_asyncsteps::{Args, AsyncSteps, Error, Step, StepResult, TestTool};
use std::cell::RefCell;
use std::rc::Rc;

/// Collects what reaches the loop's unhandled-error hook.
fn install_hook(tool: &mut TestTool) -> Rc<RefCell<Vec<String>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    tool.set_unhandled_error_hook(move |e| s.borrow_mut().push(e.to_string()));
    seen
}

/// A step that logs "next step" (used to prove a step is never reached).
fn next_step_logger(l: &Log) -> impl FnOnce(&mut Step<'_>, Args) -> StepResult + Clone + Send {
    let l = l.clone();
    move |_, _| {
        l.push("next step");
        Ok(())
    }
}

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
