//! Running C callbacks as the bodies and error handlers of steps, each
//! with a step handle (`cabi::handle`) bound for the call; and running a
//! call on a loop from outside it.

use super::handle::{bind, finish};
use super::types::*;
use super::value;
use crate::args::Args;
use crate::error::{Error, StepResult};
use crate::steps::external::ExternalHandle;
use crate::steps::step::Step;
use crate::steps::tool_handle::ToolHandle;
use std::ffi::{c_char, c_void, CString};

/// A raw pointer a callback carries to its loop thread (user `data`).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub *mut c_void);
// SAFETY: the header makes the user responsible for `data` being usable on
// the flow's loop thread; the runtime only passes it back.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the whole `SendPtr`).
    pub(crate) fn get(self) -> *mut c_void {
        self.0
    }
}

/// Runs a C execute callback as the body of step `s`.
pub(crate) fn run_exec(
    s: &mut Step<'_>,
    args: Args,
    f: unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, *const FutoInArgs),
    d: SendPtr,
) -> StepResult {
    let mut cargs = FutoInArgs::EMPTY;
    // No args (the usual case between C steps): nothing to convert or to
    // reset after.
    let some = !args.is_empty();
    if some {
        value::to_c(args, &mut cargs);
    }
    let b = bind(s);
    // SAFETY: a C callback given to add(); the handle is valid while it
    // runs, and the args live until it returns. The pointer is a mutable
    // one: the callback may move values out of the args, or forward them
    // with success(), which resets them.
    unsafe { f(b.ptr(), d.get(), std::ptr::addr_of_mut!(cargs)) };
    if some {
        value::reset_all(&mut cargs);
    }
    finish(s, b)
}

/// Runs a C error handler for step `s` failed with `e`.
pub(crate) fn run_catch(
    s: &mut Step<'_>,
    e: &Error,
    eh: unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, *const c_char),
    d: SendPtr,
) -> StepResult {
    let code = CString::new(e.code()).unwrap_or_else(|_| c"InternalError".into());
    let b = bind(s);
    // SAFETY: a C error callback; code lives until it returns.
    unsafe { eh(b.ptr(), d.get(), code.as_ptr()) };
    finish(s, b)
}

/// The body of a C step: runs `f` (a NULL `f` fails the step). Clonable
/// and `Send`, so it serves root models as well as running steps.
pub(crate) fn exec_fn(
    f: ExecuteCallback,
    d: SendPtr,
) -> impl FnOnce(&mut Step<'_>, Args) -> StepResult + Clone + Send + 'static {
    move |s, a| match f {
        Some(f) => run_exec(s, a, f, d),
        None => Err(Error::internal("add(): the execute callback is NULL")),
    }
}

/// The error handler of a C step.
pub(crate) fn catch_fn(
    eh: unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, *const c_char),
    d: SendPtr,
) -> impl FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static {
    move |s, e| run_catch(s, e, eh, d)
}

/// Runs `call` on the loop behind `t` from outside it: soon, or after
/// `delay_ms` (the `sched_*` entries called off the loop; the handle they
/// return is empty).
pub(crate) fn schedule_on(
    t: &ToolHandle,
    delay_ms: Option<u32>,
    call: impl FnOnce() + Send + 'static,
) {
    match delay_ms {
        None => t.call(move |_| call()),
        Some(ms) => t.deferred(std::time::Duration::from_millis(ms.into()), move |_| call()),
    }
}

/// Runs `f` with a handle bound to `s`, as a C callback would run.
pub(crate) fn run_raw(s: &mut Step<'_>, f: impl FnOnce(*mut FutoInAsyncSteps)) -> StepResult {
    let b = bind(s);
    f(b.ptr());
    finish(s, b)
}

/// [`run_raw`], also giving the step's external handle when the step
/// waits once `f` returns (what ends the wait comes later).
pub(crate) fn run_raw_waiting(
    s: &mut Step<'_>,
    f: impl FnOnce(*mut FutoInAsyncSteps),
) -> (StepResult, Option<ExternalHandle>) {
    let b = bind(s);
    f(b.ptr());
    let ext = if b.waited.get() {
        b.ext.lock().clone()
    } else {
        None
    };
    (finish(s, b), ext)
}
