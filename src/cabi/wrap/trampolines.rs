//! The `extern "C"` trampolines that call the Rust closures given to a
//! foreign flow, the slots they find the closures in, and the adding of a
//! step or a parallel with them (the boxes themselves live where
//! [`Keeper`] puts them).

use super::boxes::Keeper;
use super::view::{guarded, wrap_checked, wrap_step, ForeignSteps};
use crate::args::{Args, FromArgs};
use crate::cabi::types::*;
use crate::error::{Error, StepResult};
use parking_lot::Mutex;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A step's execute closure, typed args decoded inside.
pub(super) type ExecFn = Box<dyn FnOnce(&mut ForeignSteps<'_>, Args) -> StepResult + Send>;
/// An error handler.
pub(super) type CatchFn = Box<dyn FnOnce(&mut ForeignSteps<'_>, &Error) -> StepResult + Send>;
/// A loop body (`i` is the iteration for `repeat`, 0 for `loop`).
pub(super) type BodyFn = Box<dyn FnMut(&mut ForeignSteps<'_>, usize) -> StepResult + Send>;

/// Erases the args type of a step closure.
pub(super) fn exec_fn<F, A>(f: F) -> ExecFn
where
    F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
    A: FromArgs,
{
    Box::new(move |s, mut a| {
        let a = A::from_args(&mut a)?;
        f(s, a)
    })
}

/// The `data` of an `add`: the step and its error handler (the spec gives
/// both callbacks the same `data`).
pub(super) struct StepSlot {
    pub(super) exec: Mutex<Option<ExecFn>>,
    pub(super) catch: Mutex<Option<CatchFn>>,
}

/// Keeps a step's closures with `keeper` and adds the step through the
/// `add` entry of `bsi` (a step, a root, or a parallel's handle).
///
/// # Safety
/// `keeper` as for [`Keeper::keep`]; `bsi` a live handle whose steps do
/// not outlive the keeper's memory.
pub(super) unsafe fn add_step(
    keeper: Keeper,
    bsi: *mut FutoInAsyncSteps,
    f: Option<ExecFn>,
    c: Option<CatchFn>,
) -> Result<(), Error> {
    let has_catch = c.is_some();
    let slot = StepSlot {
        exec: Mutex::new(f),
        catch: Mutex::new(c),
    };
    // SAFETY: the caller's contract.
    let p = unsafe { keeper.keep(slot) }?;
    // SAFETY: a live handle starts with its table.
    let add = unsafe { (*(*bsi).api).add }
        .ok_or_else(|| Error::internal("wrap: the implementation has no add"))?;
    let eh: ErrorCallback = if has_catch { Some(catch_tramp) } else { None };
    // SAFETY: as above; the slot lives as long as the step (keeper).
    unsafe { add(bsi, p.cast(), Some(exec_tramp), eh) };
    Ok(())
}

/// Adds a parallel step through the `parallel` entry of `bsi`, its error
/// handler kept with `keeper`; the parallel's own handle.
///
/// # Safety
/// As for [`add_step`].
pub(super) unsafe fn open_parallel(
    keeper: Keeper,
    bsi: *mut FutoInAsyncSteps,
    c: Option<CatchFn>,
) -> Result<*mut FutoInAsyncSteps, Error> {
    let (data, eh): (*mut StepSlot, ErrorCallback) = match c {
        Some(c) => {
            let slot = StepSlot {
                exec: Mutex::new(None),
                catch: Mutex::new(Some(c)),
            };
            // SAFETY: the caller's contract.
            (unsafe { keeper.keep(slot) }?, Some(catch_tramp))
        }
        None => (std::ptr::null_mut(), None),
    };
    // SAFETY: a live handle starts with its table.
    let parallel = unsafe { (*(*bsi).api).parallel }
        .ok_or_else(|| Error::internal("wrap: the implementation has no parallel"))?;
    // SAFETY: as above; the handler's slot lives as long as the step.
    let par = unsafe { parallel(bsi, data.cast(), eh) };
    if par.is_null() {
        return Err(Error::internal("wrap: parallel() gave NULL"));
    }
    Ok(par)
}

/// The execute trampoline of an `add`ed Rust step.
pub(super) unsafe extern "C" fn exec_tramp(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: `data` is the StepSlot kept until the parent step ends.
    let f = unsafe { &*(data as *const StepSlot) }.exec.lock().take();
    // SAFETY: the implementation calls with the step's live handle and
    // its args.
    unsafe {
        wrap_step(bsi, args, |s, a: Args| match f {
            Some(f) => f(s, a),
            None => Err(Error::internal("wrap: a Rust step was called twice")),
        })
    };
}

/// The error trampoline of an `add`ed Rust step (or a parallel).
pub(super) unsafe extern "C" fn catch_tramp(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: `data` is the StepSlot kept until the parent step ends.
    let Some(c) = unsafe { &*(data as *const StepSlot) }.catch.lock().take() else {
        return; // a handler runs once; the error goes on
    };
    // SAFETY: the live handle of the failed step's handler.
    let Some(mut s) = (unsafe { wrap_checked(bsi) }) else {
        return;
    };
    // SAFETY: the implementation's NUL-terminated code, or NULL.
    let e = unsafe { s.error_of(code) };
    let r = guarded("a wrapped error handler", || c(&mut s, &e));
    s.complete(r);
}

/// The trampoline of a `loop`/`repeat` body.
pub(super) unsafe extern "C" fn body_tramp(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    // SAFETY: the implementation gives loop bodies iteration 0..; `loop`
    // bodies ignore it.
    unsafe { repeat_tramp(bsi, data, 0) }
}

/// The trampoline of a `repeat` body.
pub(super) unsafe extern "C" fn repeat_tramp(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    i: usize,
) {
    // SAFETY: the live handle of this iteration.
    let Some(mut s) = (unsafe { wrap_checked(bsi) }) else {
        return;
    };
    // SAFETY: `data` is the body kept until the parent step ends.
    let body = unsafe { &*(data as *const Mutex<BodyFn>) };
    let r = match body.try_lock() {
        Some(mut b) => guarded("a wrapped loop body", || b(&mut s, i)),
        None => Err(Error::internal("wrap: a loop body was re-entered")),
    };
    s.complete(r);
}

/// A `setCancel` callback's data.
pub(super) type CancelSlot = Mutex<Option<Box<dyn FnOnce() + Send>>>;

/// The `setCancel` trampoline.
pub(super) unsafe extern "C" fn cancel_tramp(_bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    // SAFETY: `data` is the CancelSlot kept until the step ends.
    if let Some(f) = unsafe { &*(data as *const CancelSlot) }.lock().take() {
        // Nothing to report a panic to: the step is already ending.
        let _ = catch_unwind(AssertUnwindSafe(f));
    }
}

/// A scheduled callback's data: owned by the call (freed when it runs).
pub(super) type TaskFn = Box<dyn FnOnce() + Send>;

/// The `sched_immediate`/`sched_deferred` trampoline.
pub(super) unsafe extern "C" fn task_tramp(data: *mut c_void) {
    // SAFETY: `data` came from `Box::into_raw(Box<TaskFn>)`; the
    // implementation calls it once, and a cancelled task never.
    let f = unsafe { Box::from_raw(data as *mut TaskFn) };
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// An unhandled-error callback's data, kept in the root's arena.
pub(super) type UnhandledSlot = Mutex<Option<Box<dyn FnOnce(Error) + Send>>>;

/// The `execute` unhandled-error trampoline.
pub(super) unsafe extern "C" fn unhandled_tramp(
    _bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: `data` is the slot kept in the root's arena, which lives
    // until the root's state is cleaned up, after this callback.
    if let Some(f) = unsafe { &*(data as *const UnhandledSlot) }.lock().take() {
        // SAFETY: the implementation's NUL-terminated code, or NULL.
        let code = match unsafe { code.as_ref() } {
            // SAFETY: as above.
            Some(_) => unsafe { CStr::from_ptr(code) }
                .to_string_lossy()
                .into_owned(),
            None => crate::error::codes::INTERNAL_ERROR.to_owned(),
        };
        let _ = catch_unwind(AssertUnwindSafe(|| f(Error::new(code))));
    }
}
