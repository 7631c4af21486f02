//! The function tables of this crate's handles, and the way in to the C
//! interface for the files above this one (`runtime`, `wrap`).
//!
//! Each table's entries are in the file of its handles (`step`, `root`,
//! `noop`). They call down into the per-handle machinery, which names a
//! table only through the `Table` trait (`cabi::table`), implemented here
//! for each handle type. So this file is the top of the interface's
//! machinery: no file below it imports it.

use super::handle::StepBsi;
use super::root::{RootBsi, RootPar};
use super::table::Table;
use super::types::FutoInAsyncStepsAPI;
use super::{noop, root, step};

pub(crate) use super::handle::ext_of;
pub(crate) use super::root::new_root;

/// The table of step handles (entries in `step`).
static STEP_API: FutoInAsyncStepsAPI = FutoInAsyncStepsAPI {
    add: Some(step::add),
    parallel: Some(step::parallel),
    state_variable: Some(step::state_variable),
    stack: Some(step::stack),
    success: Some(step::success),
    handle_error: Some(step::handle_error),
    set_timeout: Some(step::set_timeout),
    set_cancel: Some(step::set_cancel),
    wait_external: Some(step::wait_external),
    loop_: Some(step::loop_),
    repeat: Some(step::repeat),
    break_loop: Some(step::break_loop),
    continue_loop: Some(step::continue_loop),
    execute: Some(step::execute),
    cancel: Some(step::cancel),
    add_sync: Some(step::add_sync),
    root_id: Some(step::root_id),
    is_valid: Some(step::is_valid),
    new_instance: Some(step::new_instance),
    free: Some(step::free),
    sched_immediate: Some(step::sched_immediate),
    sched_deferred: Some(step::sched_deferred),
    sched_cancel: Some(step::sched_cancel),
    sched_is_valid: Some(step::sched_is_valid),
    is_same_thread: Some(step::is_same_thread),
};

/// The table of roots (entries in `root`).
static ROOT_API: FutoInAsyncStepsAPI = FutoInAsyncStepsAPI {
    add: Some(root::add),
    parallel: Some(root::parallel),
    state_variable: Some(root::state_variable),
    stack: Some(root::stack),
    success: Some(root::success),
    handle_error: Some(root::handle_error),
    set_timeout: Some(root::set_timeout),
    set_cancel: Some(root::set_cancel),
    wait_external: Some(root::wait_external),
    loop_: Some(root::loop_),
    repeat: Some(root::repeat),
    break_loop: Some(root::break_loop),
    continue_loop: Some(root::continue_loop),
    execute: Some(root::execute),
    cancel: Some(root::cancel),
    add_sync: Some(root::add_sync),
    root_id: Some(root::root_id),
    is_valid: Some(root::is_valid),
    new_instance: Some(root::new_instance),
    free: Some(root::free),
    sched_immediate: Some(root::sched_immediate),
    sched_deferred: Some(root::sched_deferred),
    sched_cancel: Some(noop::sched_cancel),
    sched_is_valid: Some(noop::sched_is_valid),
    is_same_thread: Some(root::is_same_thread),
};

/// A root parallel's handle: add() adds a branch; the rest are no-ops.
static ROOT_PAR_API: FutoInAsyncStepsAPI = FutoInAsyncStepsAPI {
    add: Some(root::par_add),
    ..NOOP_API
};

/// The no-op table the add()-only handles start from.
const NOOP_API: FutoInAsyncStepsAPI = FutoInAsyncStepsAPI {
    add: Some(noop::noop_add),
    parallel: Some(noop::n_par),
    state_variable: Some(noop::n_state),
    stack: Some(noop::n_stack),
    success: Some(noop::n_success),
    handle_error: Some(noop::n_err),
    set_timeout: Some(noop::n_u32),
    set_cancel: Some(noop::n_cancel_cb),
    wait_external: Some(noop::n_unit),
    loop_: Some(noop::n_loop),
    repeat: Some(noop::n_repeat),
    break_loop: Some(noop::n_label),
    continue_loop: Some(noop::n_label),
    execute: Some(noop::n_exec),
    cancel: Some(noop::n_unit),
    add_sync: Some(noop::n_sync),
    root_id: Some(noop::n_id),
    is_valid: Some(noop::n_int),
    new_instance: Some(noop::n_new),
    free: Some(noop::n_unit),
    sched_immediate: Some(noop::sched_immediate_noop),
    sched_deferred: Some(noop::sched_deferred_noop),
    sched_cancel: Some(noop::sched_cancel),
    sched_is_valid: Some(noop::sched_is_valid),
    is_same_thread: Some(noop::n_int),
};

// SAFETY: STEP_API is a static of its own, put in no other type's header;
// a StepBsi is `repr(C)` and starts with its `FutoInAsyncSteps`.
unsafe impl Table for StepBsi {
    #[inline]
    fn table() -> &'static FutoInAsyncStepsAPI {
        &STEP_API
    }
}

// SAFETY: ROOT_API is a static of its own, put in no other type's header;
// a RootBsi is `repr(C)` and starts with its `FutoInAsyncSteps`.
unsafe impl Table for RootBsi {
    #[inline]
    fn table() -> &'static FutoInAsyncStepsAPI {
        &ROOT_API
    }
}

// SAFETY: ROOT_PAR_API is a static of its own, put in no other type's
// header; a RootPar is `repr(C)` and starts with its `FutoInAsyncSteps`.
unsafe impl Table for RootPar {
    #[inline]
    fn table() -> &'static FutoInAsyncStepsAPI {
        &ROOT_PAR_API
    }
}
