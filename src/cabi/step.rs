//! The entries of the step handles' table (`cabi::api`); the handles
//! themselves are in `cabi::handle`.

use super::callback::{catch_fn, exec_fn, schedule_on, SendPtr};
use super::cvar::{state_var, Allocate, Cleanup2};
use super::handle::{
    bind, bind_child, fail_step, finish, flag_off_loop, get, mark_wait, try_cancel_cb,
    try_plain_step, try_step, with_ext, with_plain_step, with_step,
};
use super::root;
use super::types::*;
use super::value::{self, c_str};
use crate::args::Args;
use crate::error::Error;
use crate::steps::external::ExternalHandle;
use crate::steps::parallel::Parallel;
use crate::steps::scheduler::Scheduler;
use crate::steps::step::Step;
use crate::tool::{TaskHandle, TaskKey};
use slotmap::{Key, KeyData};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

// ------------------------------------------------------------- entries

pub(crate) unsafe extern "C" fn add(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    let d = SendPtr(data);
    with_step(p, "add()", |s, b| match b.par.get() {
        // A NULL callback for a branch fails the step adding it.
        Some(_) if f.is_none() => b.fail(
            Error::internal("add(): the execute callback is NULL"),
            false,
        ),
        Some(idx) => {
            let mut par = Parallel::at(s, idx);
            match eh {
                None => par.add(exec_fn(f, d)),
                Some(eh) => par.add_catch(exec_fn(f, d), catch_fn(eh, d)),
            };
        }
        None => {
            match eh {
                None => s.add(exec_fn(f, d)),
                Some(eh) => s.add_catch(exec_fn(f, d), catch_fn(eh, d)),
            };
        }
    });
}

pub(crate) unsafe extern "C" fn parallel(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    eh: ErrorCallback,
) -> *mut FutoInAsyncSteps {
    with_plain_step(p, "parallel()", |s, b| {
        let d = SendPtr(data);
        let idx = match eh {
            None => s.parallel().index(),
            Some(eh) => s.parallel_catch(catch_fn(eh, d)).index(),
        };
        let idx = idx?;
        let pb = bind_child(b, s);
        pb.par.set(Some(idx));
        b.children.borrow_mut().push(pb);
        Some(pb.ptr())
    })
    .flatten()
    .unwrap_or(std::ptr::null_mut())
}

pub(crate) unsafe extern "C" fn state_variable(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    name: *const c_char,
    allocate: Allocate,
    cleanup: Cleanup2,
) -> *mut c_void {
    const WHAT: &str = "stateVariable()";
    let null = std::ptr::null_mut();
    // SAFETY: a C string from the caller (or NULL, refused).
    let name = unsafe { c_str(name, "stateVariable(): name") };
    // What the state has (or an error); None: a new variable to make.
    let found = with_step(p, WHAT, |s, b| {
        let r = name.clone().and_then(|n| {
            let st = s.state();
            let predefined = matches!(n, "error_info" | "last_exception");
            if allocate.is_none() || predefined || st.contains(n) {
                state_var(st, n, data, None, None).map(Some)
            } else {
                Ok(None)
            }
        });
        r.unwrap_or_else(|e| {
            b.fail(e, false);
            Some(null)
        })
    });
    let (Some(None), Ok(n)) = (found, name) else {
        return found.flatten().unwrap_or(null);
    };
    // `allocate` is the caller's code and may call this handle again, so
    // it runs with the step not borrowed.
    let mut made = crate::state::State::new();
    let v = state_var(&mut made, n, data, allocate, cleanup).unwrap_or(null);
    let r = with_step(p, WHAT, |s, b| {
        let st = s.state();
        if !st.contains(n) {
            st.copy_missing(&made);
            return v;
        }
        // Made meanwhile (by `allocate`, through this handle): that one
        // stays, and `made` is cleaned up below.
        state_var(st, n, data, None, None).unwrap_or_else(|e| {
            b.fail(e, false);
            null
        })
    })
    .unwrap_or(null);
    // The value not kept is cleaned up here, with the step not borrowed.
    drop(made);
    r
}

/// A block from stack(): cleanup, then freed, when the step ends.
struct CBlock {
    p: *mut u8,
    layout: std::alloc::Layout,
    cleanup: Option<unsafe extern "C" fn(*mut c_void)>,
}
impl Drop for CBlock {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup {
            // SAFETY: the user's cleanup for the block it got.
            unsafe { c(self.p.cast()) };
        }
        // SAFETY: allocated in `stack` with this layout.
        unsafe { std::alloc::dealloc(self.p, self.layout) };
    }
}

pub(crate) unsafe extern "C" fn stack(
    p: *mut FutoInAsyncSteps,
    size: usize,
    cleanup: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut c_void {
    with_plain_step(p, "stack()", |s, b| {
        let Ok(layout) = std::alloc::Layout::from_size_align(size.max(1), 16) else {
            b.fail(
                Error::internal(format!("stack(): {size} bytes is too large")),
                false,
            );
            return std::ptr::null_mut();
        };
        // SAFETY: a non-zero size.
        let m = unsafe { std::alloc::alloc_zeroed(layout) };
        if m.is_null() {
            b.fail(
                Error::internal(format!("stack(): out of memory for {size} bytes")),
                false,
            );
            return std::ptr::null_mut();
        }
        s.stack(CBlock {
            p: m,
            layout,
            cleanup,
        });
        m.cast()
    })
    .unwrap_or(std::ptr::null_mut())
}

pub(crate) unsafe extern "C" fn success(p: *mut FutoInAsyncSteps, args: *mut FutoInArgs) {
    // SAFETY: the caller's args (or NULL), as the header describes them.
    let a = match unsafe { args.as_mut() } {
        None => Ok(Args::new()),
        // SAFETY: as above.
        Some(a) => unsafe { value::from_c(a) },
    };
    let mut a = Some(a);
    let inside = try_plain_step(p, "success()", |s, b| match a.take().expect("once") {
        Ok(a) => {
            if let Err(e) = s.success(a) {
                b.fail(e, false);
            }
        }
        Err(e) => b.fail(e, false),
    });
    if inside.is_none() {
        if let Some(a) = a {
            // Off the callback: a waiting step completes from anywhere.
            let outside = with_ext(p, |h| match a {
                Ok(a) => {
                    let _ = h.success(a);
                }
                Err(e) => ext_error(h, e),
            });
            if outside.is_none() {
                flag_off_loop(p, "success()");
            }
        }
    }
}

pub(crate) unsafe extern "C" fn handle_error(
    p: *mut FutoInAsyncSteps,
    code: *const c_char,
    info: *const c_char,
) {
    // SAFETY: C strings from the caller (NULL is refused or empty).
    let e = match unsafe { c_str(code, "handle_error(): code") } {
        Err(e) => e,
        Ok(c) => {
            let info = if info.is_null() {
                None
            } else {
                // SAFETY: as above.
                Some(
                    unsafe { std::ffi::CStr::from_ptr(info) }
                        .to_string_lossy()
                        .into_owned(),
                )
            };
            match info {
                Some(i) => Error::with_info(c.to_owned(), i),
                None => Error::new(c.to_owned()),
            }
        }
    };
    let mut e = Some(e);
    let inside = try_plain_step(p, "handle_error()", |s, b| {
        let e = s.raise(e.take().expect("once"));
        s.state().set_error_info(e.info());
        b.fail(e, true);
    });
    if inside.is_none() {
        if let Some(e) = e {
            // Off the callback: a waiting step fails from anywhere.
            if with_ext(p, |h| ext_error(h, e)).is_none() {
                flag_off_loop(p, "handle_error()");
            }
        }
    }
}

pub(crate) unsafe extern "C" fn set_timeout(p: *mut FutoInAsyncSteps, ms: u32) {
    with_plain_step(p, "setTimeout()", |s, b| {
        s.set_timeout(Duration::from_millis(ms.into()));
        mark_wait(s, b);
    });
}

pub(crate) unsafe extern "C" fn set_cancel(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    ch: CancelCallback,
) {
    with_plain_step(p, "setCancel()", |s, b| {
        let Some(ch) = ch else {
            b.fail(
                Error::internal("setCancel(): the cancel callback is NULL"),
                false,
            );
            return;
        };
        let d = SendPtr(data);
        // The loop is lent to the scheduling calls the callback makes
        // (`try_cancel_cb`) while it runs.
        s.set_cancel_sched(move |sched| {
            b.cancel_sched.set(sched);
            // SAFETY: the user's cancel callback, with the step's handle
            // (kept until the step ends, which is after its cancel
            // callback).
            unsafe { ch(b.ptr(), d.get()) };
            b.cancel_sched.set(std::ptr::null_mut());
        });
        mark_wait(s, b);
    });
}

pub(crate) unsafe extern "C" fn wait_external(p: *mut FutoInAsyncSteps) {
    with_plain_step(p, "waitExternal()", mark_wait);
}

/// Fails a waiting step from outside its callback.
fn ext_error(h: &ExternalHandle, e: Error) {
    // Off the callback too, a NULL info stays NULL in `error_info`.
    let _ = h.fail(e);
}

/// A copied label, or None for NULL.
unsafe fn label(l: *const c_char) -> Result<Option<String>, Error> {
    if l.is_null() {
        return Ok(None);
    }
    // SAFETY: a C string from the caller.
    unsafe { c_str(l, "loop label") }.map(|s| Some(s.to_owned()))
}

/// Adds a loop whose body is `body` (made from the C callback by `make`),
/// labelled or not: what `loop` and `repeat` share.
fn add_loop<C: Copy>(
    p: *mut FutoInAsyncSteps,
    what: &'static str,
    f: Option<C>,
    l: *const c_char,
    add: impl FnOnce(&mut Step<'_>, C, Option<String>),
) {
    with_plain_step(p, what, |s, b| {
        // SAFETY: the caller's label.
        match (f, unsafe { label(l) }) {
            (Some(f), Ok(l)) => add(s, f, l),
            _ => b.fail(
                Error::internal(format!("{what}: NULL body or a label that is not UTF-8")),
                false,
            ),
        }
    });
}

pub(crate) unsafe extern "C" fn loop_(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    f: LoopCallback,
    l: *const c_char,
) {
    let d = SendPtr(data);
    add_loop(p, "loop()", f, l, |s, f, l| {
        let body = move |s: &mut Step<'_>| {
            let b = bind(s);
            // SAFETY: the user's loop body with a handle valid while it runs.
            unsafe { f(b.ptr(), d.get()) };
            finish(s, b)
        };
        match l {
            Some(l) => s.loop_labeled(l, body),
            None => s.loop_(body),
        };
    });
}

pub(crate) unsafe extern "C" fn repeat(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    count: usize,
    f: RepeatCallback,
    l: *const c_char,
) {
    let d = SendPtr(data);
    add_loop(p, "repeat()", f, l, |s, f, l| {
        let body = move |s: &mut Step<'_>, i: usize| {
            let b = bind(s);
            // SAFETY: the user's loop body with a handle valid while it runs.
            unsafe { f(b.ptr(), d.get(), i) };
            finish(s, b)
        };
        match l {
            Some(l) => s.repeat_labeled(l, count, body),
            None => s.repeat(count, body),
        };
    });
}

fn control(p: *mut FutoInAsyncSteps, l: *const c_char, brk: bool) {
    let what = if brk { "breakLoop()" } else { "continueLoop()" };
    with_step(p, what, |s, b| {
        // SAFETY: the caller's label.
        let r = match unsafe { label(l) } {
            Err(e) => Err(e),
            Ok(None) if brk => s.break_loop(),
            Ok(None) => s.continue_loop(),
            Ok(Some(l)) if brk => s.break_label(l),
            Ok(Some(l)) => s.continue_label(l),
        };
        if let Err(e) = r {
            b.fail(e, true);
        }
    });
}

pub(crate) unsafe extern "C" fn break_loop(p: *mut FutoInAsyncSteps, l: *const c_char) {
    control(p, l, true);
}

pub(crate) unsafe extern "C" fn continue_loop(p: *mut FutoInAsyncSteps, l: *const c_char) {
    control(p, l, false);
}

pub(crate) unsafe extern "C" fn execute(
    p: *mut FutoInAsyncSteps,
    _data: *mut c_void,
    _ue: ErrorCallback,
) {
    fail_step(
        p,
        "execute()",
        Error::internal("execute(): only a root can be executed, not a step"),
    );
}

pub(crate) unsafe extern "C" fn cancel(p: *mut FutoInAsyncSteps) {
    fail_step(
        p,
        "cancel()",
        Error::internal("cancel(): only a root can be cancelled; fail a step with handle_error()"),
    );
}

pub(crate) unsafe extern "C" fn add_sync(
    p: *mut FutoInAsyncSteps,
    sync: *mut FutoInSync,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    with_plain_step(p, "addSync()", |s, b| {
        // SAFETY: the caller's sync object (NULL is refused).
        if let Err(e) = unsafe { super::sync::add_sync(s, sync, SendPtr(data), f, eh) } {
            b.fail(e, false);
        }
    });
}

pub(crate) unsafe extern "C" fn root_id(p: *mut FutoInAsyncSteps) -> isize {
    // SAFETY: the handle C passed: NULL or readable up to `api`.
    unsafe { get(p) }.map_or(0, |b| b.root_id.load(Ordering::Relaxed))
}

pub(crate) unsafe extern "C" fn is_valid(p: *mut FutoInAsyncSteps) -> c_int {
    // SAFETY: the handle C passed: NULL or readable up to `api`.
    unsafe { get(p) }.map_or(0, |b| b.live.load(Ordering::Acquire) as c_int)
}

pub(crate) unsafe extern "C" fn new_instance(p: *mut FutoInAsyncSteps) -> *mut FutoInAsyncSteps {
    with_step(p, "newInstance()", |s, _| {
        root::runtime_of(s).map(root::new_root)
    })
    .flatten()
    .unwrap_or(std::ptr::null_mut())
}

pub(crate) unsafe extern "C" fn free(_p: *mut FutoInAsyncSteps) {
    // A step's handle is not the caller's to free: a no-op.
}

fn to_handle(sched: &Scheduler, t: TaskHandle) -> FutoInHandle {
    FutoInHandle {
        data1: Arc::as_ptr(&sched.core.inbox) as *mut c_void,
        data2: std::ptr::null_mut(),
        data3: t.key().data().as_ffi() as isize,
    }
}

/// # Safety
/// `h` is NULL or points to a `FutoInHandle`.
unsafe fn from_handle(sched: &Scheduler, h: *mut FutoInHandle) -> Option<TaskHandle> {
    // SAFETY: caller's contract.
    let h = unsafe { h.as_ref() }?;
    std::ptr::eq(h.data1, Arc::as_ptr(&sched.core.inbox) as *const c_void).then(|| {
        sched
            .core
            .handle_of(TaskKey::from(KeyData::from_ffi(h.data3 as u64)))
    })
}

/// Sets a task on `sched` (the step's loop): `call` now or after `delay`.
fn schedule_here(
    sched: &mut Scheduler,
    delay: Option<u32>,
    call: impl FnOnce() + 'static,
) -> FutoInHandle {
    let t = match delay {
        None => sched.immediate(move |_| call()),
        Some(ms) => sched.deferred(Duration::from_millis(ms.into()), move |_| call()),
    };
    to_handle(sched, t)
}

fn schedule(
    p: *mut FutoInAsyncSteps,
    delay: Option<u32>,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    let what = match delay {
        None => "sched_immediate()",
        Some(_) => "sched_deferred()",
    };
    let Some(cb) = cb else {
        fail_step(
            p,
            what,
            Error::internal("sched_immediate()/sched_deferred(): the callback is NULL"),
        );
        return FutoInHandle::EMPTY;
    };
    let d = SendPtr(data);
    // SAFETY: the user's callback with its data, on the loop thread.
    let call = move || unsafe { cb(d.get()) };
    let inside = match try_step(p, |s, _| schedule_here(s.tool(), delay, call)) {
        Some(h) => return h,
        // The step's cancel callback, on the loop thread.
        None => try_cancel_cb(p, |sched| schedule_here(sched, delay, call)),
    };
    if let Some(h) = inside {
        return h;
    }
    // SAFETY: the handle C passed: NULL or readable up to `api`.
    let tool = unsafe { get(p) }.and_then(|b| b.tool.lock().clone());
    match tool {
        // Off the callback: a waiting step's loop takes it from anywhere.
        Some(t) => schedule_on(&t, delay, call),
        None => flag_off_loop(p, what),
    }
    FutoInHandle::EMPTY
}

pub(crate) unsafe extern "C" fn sched_immediate(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    schedule(p, None, data, cb)
}

pub(crate) unsafe extern "C" fn sched_deferred(
    p: *mut FutoInAsyncSteps,
    ms: u32,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    schedule(p, Some(ms), data, cb)
}

pub(crate) unsafe extern "C" fn sched_cancel(p: *mut FutoInAsyncSteps, h: *mut FutoInHandle) {
    // From another thread a no-op, as the handles the scheduling calls give
    // there are empty (header, index 20..23).
    let cancel = |sched: &mut Scheduler| {
        // SAFETY: the caller's handle, or NULL.
        if let Some(t) = unsafe { from_handle(sched, h) } {
            sched.cancel(t);
        }
    };
    if try_step(p, |s, _| cancel(s.tool())).is_none() {
        // In the step's cancel callback: typically the step's own timer.
        try_cancel_cb(p, cancel);
    }
}

pub(crate) unsafe extern "C" fn sched_is_valid(
    p: *mut FutoInAsyncSteps,
    h: *mut FutoInHandle,
) -> c_int {
    // A query: from another thread it gives 0, as for an empty handle.
    let valid = |sched: &mut Scheduler| {
        // SAFETY: the caller's handle, or NULL.
        unsafe { from_handle(sched, h) }.is_some_and(|t| sched.is_valid(t)) as c_int
    };
    try_step(p, |s, _| valid(s.tool()))
        .or_else(|| try_cancel_cb(p, valid))
        .unwrap_or(0)
}

pub(crate) unsafe extern "C" fn is_same_thread(p: *mut FutoInAsyncSteps) -> c_int {
    // SAFETY: the handle C passed: NULL or readable up to `api`.
    unsafe { get(p) }.is_some_and(|b| b.live.load(Ordering::Acquire) && b.on_loop()) as c_int
}
