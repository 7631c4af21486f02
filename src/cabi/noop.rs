//! The entries of a handle that takes only `add()` (a root model's
//! parallel): every other entry is a harmless no-op. The table they make
//! (`NOOP_API`) is in `cabi::api`.

use super::types::*;
use std::ffi::{c_char, c_int, c_void};

pub(crate) unsafe extern "C" fn noop_add(
    _p: *mut FutoInAsyncSteps,
    _d: *mut c_void,
    _f: ExecuteCallback,
    _e: ErrorCallback,
) {
}

// Every entry of a handle that takes only add(): harmless no-ops.
pub(crate) unsafe extern "C" fn n_par(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: ErrorCallback,
) -> *mut FutoInAsyncSteps {
    std::ptr::null_mut()
}
#[allow(clippy::type_complexity)]
pub(crate) unsafe extern "C" fn n_state(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const c_char,
    _: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    _: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
) -> *mut c_void {
    std::ptr::null_mut()
}
pub(crate) unsafe extern "C" fn n_stack(
    _: *mut FutoInAsyncSteps,
    _: usize,
    _: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut c_void {
    std::ptr::null_mut()
}
pub(crate) unsafe extern "C" fn n_success(_: *mut FutoInAsyncSteps, a: *mut FutoInArgs) {
    // SAFETY: the caller's args, or NULL; the values are moved (reset).
    if let Some(a) = unsafe { a.as_mut() } {
        super::value::reset_all(a);
    }
}
pub(crate) unsafe extern "C" fn n_err(
    _: *mut FutoInAsyncSteps,
    _: *const c_char,
    _: *const c_char,
) {
}
pub(crate) unsafe extern "C" fn n_u32(_: *mut FutoInAsyncSteps, _: u32) {}
pub(crate) unsafe extern "C" fn n_cancel_cb(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: CancelCallback,
) {
}
pub(crate) unsafe extern "C" fn n_unit(_: *mut FutoInAsyncSteps) {}
pub(crate) unsafe extern "C" fn n_loop(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: LoopCallback,
    _: *const c_char,
) {
}
pub(crate) unsafe extern "C" fn n_repeat(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: usize,
    _: RepeatCallback,
    _: *const c_char,
) {
}
pub(crate) unsafe extern "C" fn n_label(_: *mut FutoInAsyncSteps, _: *const c_char) {}
pub(crate) unsafe extern "C" fn n_exec(_: *mut FutoInAsyncSteps, _: *mut c_void, _: ErrorCallback) {
}
pub(crate) unsafe extern "C" fn n_sync(
    _: *mut FutoInAsyncSteps,
    _: *mut FutoInSync,
    _: *mut c_void,
    _: ExecuteCallback,
    _: ErrorCallback,
) {
}
pub(crate) unsafe extern "C" fn n_id(_: *mut FutoInAsyncSteps) -> isize {
    0
}
pub(crate) unsafe extern "C" fn n_int(_: *mut FutoInAsyncSteps) -> c_int {
    0
}
pub(crate) unsafe extern "C" fn n_new(_: *mut FutoInAsyncSteps) -> *mut FutoInAsyncSteps {
    std::ptr::null_mut()
}

pub(crate) unsafe extern "C" fn sched_immediate_noop(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: SchedCallback,
) -> FutoInHandle {
    FutoInHandle::EMPTY
}
pub(crate) unsafe extern "C" fn sched_deferred_noop(
    _: *mut FutoInAsyncSteps,
    _: u32,
    _: *mut c_void,
    _: SchedCallback,
) -> FutoInHandle {
    FutoInHandle::EMPTY
}

pub(crate) unsafe extern "C" fn sched_cancel(_: *mut FutoInAsyncSteps, _: *mut FutoInHandle) {}
pub(crate) unsafe extern "C" fn sched_is_valid(
    _: *mut FutoInAsyncSteps,
    _: *mut FutoInHandle,
) -> c_int {
    0
}
