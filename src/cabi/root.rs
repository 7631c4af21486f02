//! Root handles (`futoin_asyncsteps_new`, `newInstance`) and the entries
//! of their table and of a root parallel's (the tables are in `cabi::api`).
//!
//! A root is an `Arc<RootBsi>`: C holds one reference (given back by
//! `free`), a running flow another, so `free` may come at any time, from
//! any thread, even from the flow's own unhandled-error callback.

use super::callback::{catch_fn, exec_fn, schedule_on, SendPtr};
use super::cvar::state_var;
use super::handle::QUARANTINE;
use super::table;
use super::types::*;
use super::value::c_str;
use crate::args::Args;
use crate::error::Error;
use crate::runtime::RuntimeHandle;
use crate::steps::model::AsyncSteps;
use crate::steps::promise::Promise;
use crate::steps::step::Step;
use crate::util::thread::thread_mark;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Where a running C flow keeps its runtime (for `newInstance`).
const RT_KEY: &str = "\0futoin.c.runtime";

/// The runtime of the C flow `s` runs in.
pub(crate) fn runtime_of(s: &mut Step<'_>) -> Option<RuntimeHandle> {
    s.state().get::<RuntimeHandle>(RT_KEY).cloned()
}

enum Run {
    Idle,
    Running {
        gen: u64,
        promise: Option<Promise<Args>>,
        cancel: bool,
    },
}

struct RootInner {
    model: AsyncSteps,
    rt: RuntimeHandle,
    run: Run,
    /// How many models `execute` has taken (the model being built goes
    /// with the next one).
    gen: u64,
    /// Handles of the model's parallels.
    pars: Vec<ParBox>,
    /// Handles of parallels whose model `execute` took, oldest first:
    /// reused only when more than [`QUARANTINE`] wait, so that a stale one
    /// is detected for at least that many newer parallels.
    retired: VecDeque<ParBox>,
}

#[repr(C)]
pub(crate) struct RootBsi {
    hdr: FutoInAsyncSteps,
    id: isize,
    /// The thread mark of the loop running the flow (0 when not running):
    /// set by the flow's first step, so it is right from there on.
    home: AtomicUsize,
    inner: Mutex<RootInner>,
}

// SAFETY: `hdr.api` points to a static table; the rest is behind a mutex.
// The RootPar handles `inner` owns are shared with C (any thread) only
// through shared references: their `root` never changes, and the rest are
// atomics.
unsafe impl Send for RootBsi {}
// SAFETY: as above.
unsafe impl Sync for RootBsi {}

/// A parallel added to a root's model.
#[repr(C)]
pub(crate) struct RootPar {
    hdr: FutoInAsyncSteps,
    /// The root that owns this handle (never changes).
    root: *const RootBsi,
    // Written and read with the root's lock held (atomics only so that the
    // handle is never borrowed mutably while C holds its address):
    /// The parallel's place in the model.
    idx: AtomicUsize,
    /// The root's `gen` when the parallel was added: the handle adds to
    /// the model while the root's `gen` is the same.
    gen: AtomicU64,
}

/// A `RootPar` owned by its root; C holds its address, so it is only ever
/// read through shared references, and freed with the root.
struct ParBox(NonNull<RootPar>);

impl ParBox {
    fn new(root: &RootBsi) -> Self {
        ParBox(NonNull::from(Box::leak(Box::new(RootPar {
            // SAFETY: the header of this new `RootPar`, its first field.
            hdr: unsafe { table::header::<RootPar>() },
            root,
            idx: AtomicUsize::new(0),
            gen: AtomicU64::new(0),
        }))))
    }

    fn get(&self) -> &RootPar {
        // SAFETY: from `Box::leak` in `new`, freed only in `drop`.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for ParBox {
    fn drop(&mut self) {
        // SAFETY: from `Box::leak` in `new`; dropped once, with its root.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

static NEXT_ID: AtomicIsize = AtomicIsize::new(1);

/// A new root on `rt`, as C gets it.
pub(crate) fn new_root(rt: RuntimeHandle) -> *mut FutoInAsyncSteps {
    let r = Arc::new(RootBsi {
        // SAFETY: the header of this new `RootBsi`, its first field.
        hdr: unsafe { table::header::<RootBsi>() },
        // Odd ids never collide with the step ids (see `Step::root_id`),
        // which are even.
        id: NEXT_ID.fetch_add(2, Ordering::Relaxed),
        home: AtomicUsize::new(0),
        inner: Mutex::new(RootInner {
            model: AsyncSteps::new(),
            rt,
            run: Run::Idle,
            gen: 0,
            pars: Vec::new(),
            retired: VecDeque::new(),
        }),
    });
    Arc::into_raw(r) as *mut FutoInAsyncSteps
}

/// The root behind `p`, if it is one of our roots (None for NULL and for
/// any other handle, such as another implementation's).
///
/// # Safety
/// `p` is NULL or points to a `FutoInAsyncSteps` of any implementation,
/// readable up to its `api` field; one of our roots is one C has not freed.
unsafe fn root<'a>(p: *mut FutoInAsyncSteps) -> Option<&'a RootBsi> {
    // SAFETY: caller's contract: a non-NULL `p` is readable up to `api`.
    if !unsafe { table::is::<RootBsi>(p) } {
        return None;
    }
    // SAFETY: only `new_root` puts the root table in a handle (`Table`), on
    // an `Arc<RootBsi>` whose value starts with that header (`repr(C)`); C
    // has not freed it (caller's contract).
    Some(unsafe { &*(p as *const RootBsi) })
}

/// Runs `f`, turning a panic into nothing (it must not cross into C).
fn guard<R>(f: impl FnOnce() -> R) -> Option<R> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// A call that makes sense only inside a step: the root's flow will fail
/// with an `InternalError` saying so.
fn poison(p: *mut FutoInAsyncSteps, what: &'static str) {
    // SAFETY: the handle C passed (see `root`).
    if let Some(r) = unsafe { root(p) } {
        guard(|| {
            r.inner
                .lock()
                .model
                .add(move |_, ()| -> crate::error::StepResult {
                    Err(Error::internal(format!(
                        "{what} on a root: it is for a step's callback"
                    )))
                });
        });
    }
}

pub(crate) unsafe extern "C" fn add(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    // SAFETY: the handle C passed (see `root`).
    let Some(r) = (unsafe { root(p) }) else {
        return;
    };
    guard(|| {
        let d = SendPtr(data);
        let mut i = r.inner.lock();
        match eh {
            None => i.model.add(exec_fn(f, d)),
            Some(eh) => i.model.add_catch(exec_fn(f, d), catch_fn(eh, d)),
        };
    });
}

pub(crate) unsafe extern "C" fn parallel(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    eh: ErrorCallback,
) -> *mut FutoInAsyncSteps {
    // SAFETY: the handle C passed (see `root`).
    let Some(r) = (unsafe { root(p) }) else {
        return std::ptr::null_mut();
    };
    guard(|| {
        let d = SendPtr(data);
        let mut i = r.inner.lock();
        match eh {
            None => i.model.parallel(),
            Some(eh) => i.model.parallel_catch(catch_fn(eh, d)),
        };
        let idx = i.model.len() - 1;
        let par = if i.retired.len() > QUARANTINE {
            i.retired.pop_front().expect("not empty")
        } else {
            ParBox::new(r)
        };
        par.get().idx.store(idx, Ordering::Relaxed);
        par.get().gen.store(i.gen, Ordering::Relaxed);
        let ptr = par.0.as_ptr().cast::<FutoInAsyncSteps>();
        i.pars.push(par);
        ptr
    })
    .unwrap_or(std::ptr::null_mut())
}

pub(crate) unsafe extern "C" fn par_add(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    // SAFETY: the handle C passed: NULL or readable up to `api`.
    if !unsafe { table::is::<RootPar>(p) } {
        return;
    }
    // SAFETY: only `ParBox::new` puts its table in a handle (`Table`), on a
    // RootPar owned by its root, alive while the root is (C must not use
    // it after freeing the root); it is only ever borrowed shared.
    let par = unsafe { &*(p as *const RootPar) };
    // SAFETY: as above: its root is alive.
    let r = unsafe { &*par.root };
    guard(|| {
        let d = SendPtr(data);
        let mut i = r.inner.lock();
        if par.gen.load(Ordering::Relaxed) != i.gen {
            // The model went to a flow (running or ended): the branch would
            // be lost, or added to another parallel. The next run says so.
            i.model.add(|_, ()| -> crate::error::StepResult {
                Err(Error::internal(
                    "add() on a root parallel's handle after execute() took its model",
                ))
            });
            return;
        }
        let idx = par.idx.load(Ordering::Relaxed);
        if let Some(mut m) = i.model.parallel_at(idx) {
            match eh {
                None => m.add(exec_fn(f, d)),
                Some(eh) => m.add_catch(exec_fn(f, d), catch_fn(eh, d)),
            };
        }
    });
}

pub(crate) unsafe extern "C" fn state_variable(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    name: *const c_char,
    allocate: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    cleanup: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
) -> *mut c_void {
    // SAFETY: the handle C passed (see `root`).
    let Some(r) = (unsafe { root(p) }) else {
        return std::ptr::null_mut();
    };
    guard(|| {
        // SAFETY: the caller's C string.
        let Ok(name) = (unsafe { c_str(name, "stateVariable(): name") }) else {
            return std::ptr::null_mut();
        };
        let mut i = r.inner.lock();
        if matches!(i.run, Run::Running { .. }) {
            return std::ptr::null_mut(); // the model's state went to the flow
        }
        let st = i.model.state();
        let predefined = matches!(name, "error_info" | "last_exception");
        if allocate.is_none() || predefined || st.contains(name) {
            return state_var(st, name, data, allocate, cleanup).unwrap_or(std::ptr::null_mut());
        }
        // A new variable: `allocate` is the caller's code and may call this
        // root again, so it runs with the lock released.
        drop(i);
        let mut made = crate::state::State::new();
        let v = state_var(&mut made, name, data, allocate, cleanup).unwrap_or(std::ptr::null_mut());
        let mut i = r.inner.lock();
        if matches!(i.run, Run::Running { .. }) {
            return std::ptr::null_mut(); // `made` is dropped (cleaned up) after the lock
        }
        let st = i.model.state();
        if st.contains(name) {
            // Made meanwhile from another thread: that one stays.
            return state_var(st, name, data, None, None).unwrap_or(std::ptr::null_mut());
        }
        st.copy_missing(&made);
        v
    })
    .unwrap_or(std::ptr::null_mut())
}

pub(crate) unsafe extern "C" fn stack(
    p: *mut FutoInAsyncSteps,
    _n: usize,
    _c: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut c_void {
    poison(p, "stack()");
    std::ptr::null_mut()
}
pub(crate) unsafe extern "C" fn success(p: *mut FutoInAsyncSteps, args: *mut FutoInArgs) {
    // SAFETY: the caller's args, or NULL.
    if let Some(a) = unsafe { args.as_mut() } {
        super::value::reset_all(a);
    }
    poison(p, "success()");
}
pub(crate) unsafe extern "C" fn handle_error(
    p: *mut FutoInAsyncSteps,
    _c: *const c_char,
    _i: *const c_char,
) {
    poison(p, "handle_error()");
}
pub(crate) unsafe extern "C" fn set_timeout(p: *mut FutoInAsyncSteps, _ms: u32) {
    poison(p, "setTimeout()");
}
pub(crate) unsafe extern "C" fn set_cancel(
    p: *mut FutoInAsyncSteps,
    _d: *mut c_void,
    _c: CancelCallback,
) {
    poison(p, "setCancel()");
}
pub(crate) unsafe extern "C" fn wait_external(p: *mut FutoInAsyncSteps) {
    poison(p, "waitExternal()");
}
pub(crate) unsafe extern "C" fn loop_(
    p: *mut FutoInAsyncSteps,
    _d: *mut c_void,
    _f: LoopCallback,
    _l: *const c_char,
) {
    poison(p, "loop()");
}
pub(crate) unsafe extern "C" fn repeat(
    p: *mut FutoInAsyncSteps,
    _d: *mut c_void,
    _n: usize,
    _f: RepeatCallback,
    _l: *const c_char,
) {
    poison(p, "repeat()");
}
pub(crate) unsafe extern "C" fn break_loop(p: *mut FutoInAsyncSteps, _l: *const c_char) {
    poison(p, "breakLoop()");
}
pub(crate) unsafe extern "C" fn continue_loop(p: *mut FutoInAsyncSteps, _l: *const c_char) {
    poison(p, "continueLoop()");
}

/// Held by a running flow: clears the root's run state when the flow ends
/// (however it ends) and keeps the root's memory until then. `Clone` only
/// because model closures must be; the engine never clones a running
/// flow's steps.
#[derive(Clone)]
struct KeepRoot(Arc<RootBsi>, u64);

impl Drop for KeepRoot {
    fn drop(&mut self) {
        let mut i = self.0.inner.lock();
        if matches!(i.run, Run::Running { gen, .. } if gen == self.1) {
            i.run = Run::Idle;
            self.0.home.store(0, Ordering::Relaxed);
        }
    }
}

pub(crate) unsafe extern "C" fn execute(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    ue: ErrorCallback,
) {
    // SAFETY: the handle C passed (see `root`).
    if unsafe { root(p) }.is_none() {
        return;
    }
    // A reference of this call's own: the flow may end, and C free the
    // root (from its unhandled-error callback, or from a step), before
    // this call is done with it.
    // SAFETY: `p` is one of our roots (checked above): a live
    // Arc<RootBsi> (C has not freed it).
    let r = unsafe {
        Arc::increment_strong_count(p as *const RootBsi);
        Arc::from_raw(p as *const RootBsi)
    };
    let report = |code: &std::ffi::CStr| {
        if let Some(ue) = ue {
            // SAFETY: the user's callback with the root's own handle.
            unsafe { ue(p, data, code.as_ptr()) };
        }
    };
    let started = guard(|| {
        let mut i = r.inner.lock();
        if matches!(i.run, Run::Running { .. }) {
            return Some(false); // documented: a no-op while running
        }
        if i.rt.is_closed() {
            return None;
        }
        i.gen += 1;
        let gen = i.gen;
        // The model's parallel handles are stale from now on.
        let taken = std::mem::take(&mut i.pars);
        i.retired.extend(taken);
        i.run = Run::Running {
            gen,
            promise: None,
            cancel: false,
        };
        let model = std::mem::take(&mut i.model);
        let rt = i.rt.clone();
        drop(i);
        let keep = KeepRoot(r.clone(), gen);
        let (d, rp) = (SendPtr(data), SendPtr(p.cast()));
        let rt2 = rt.clone();
        let mut flow = AsyncSteps::new();
        flow.add_catch(
            move |s, ()| {
                keep.0.home.store(thread_mark(), Ordering::Relaxed);
                s.stack(keep);
                s.state().set(RT_KEY, rt2);
                s.copy_from(&model);
                Ok(())
            },
            move |_, e| {
                if let Some(ue) = ue {
                    let code = CString::new(e.code()).unwrap_or_else(|_| c"InternalError".into());
                    // SAFETY: the user's callback; the root is alive (the
                    // running flow keeps it).
                    unsafe { ue(rp.get().cast(), d.get(), code.as_ptr()) };
                }
                Ok(())
            },
        );
        let promise = rt.spawn_balanced::<Args>(flow);
        let mut i = r.inner.lock();
        if let Run::Running {
            gen: g,
            promise: slot,
            cancel,
        } = &mut i.run
        {
            if *g == gen {
                if *cancel {
                    promise.cancel();
                }
                *slot = Some(promise);
            }
        }
        Some(true)
    });
    // Not started: the runtime was freed, or a panic (a bug).
    if !matches!(started, Some(Some(_))) {
        report(c"InternalError");
    }
}

fn cancel_run(r: &RootBsi) {
    let mut i = r.inner.lock();
    if let Run::Running {
        promise, cancel, ..
    } = &mut i.run
    {
        match promise {
            Some(p) => p.cancel(),
            None => *cancel = true,
        }
    }
}

pub(crate) unsafe extern "C" fn cancel(p: *mut FutoInAsyncSteps) {
    // SAFETY: the handle C passed (see `root`).
    if let Some(r) = unsafe { root(p) } {
        guard(|| cancel_run(r));
    }
}

pub(crate) unsafe extern "C" fn add_sync(
    p: *mut FutoInAsyncSteps,
    sync: *mut FutoInSync,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    // SAFETY: the handle C passed (see `root`).
    let Some(r) = (unsafe { root(p) }) else {
        return;
    };
    let d = SendPtr(data);
    guard(|| {
        // Taken now: one of our objects is held from here on, so freeing
        // it before the flow reaches the step is fine.
        // SAFETY: the user's sync object (or NULL): ours not freed yet, or
        // a foreign one alive while flows use it (header contract).
        let target = unsafe { super::sync::sync_ref(sync) };
        r.inner.lock().model.add(move |s, a: Args| match target {
            // SAFETY: a foreign object outlives the flows using it (header
            // contract); ours is held by `t`.
            Some(t) => unsafe { super::sync::sync_now(s, a, t, d, f, eh) },
            None => Err(super::sync::null_sync()),
        });
    });
}

pub(crate) unsafe extern "C" fn root_id(p: *mut FutoInAsyncSteps) -> isize {
    // SAFETY: the handle C passed (see `root`).
    unsafe { root(p) }.map_or(0, |r| r.id)
}

pub(crate) unsafe extern "C" fn is_valid(p: *mut FutoInAsyncSteps) -> c_int {
    // SAFETY: the handle C passed (see `root`).
    unsafe { root(p) }.is_some() as c_int
}

pub(crate) unsafe extern "C" fn new_instance(p: *mut FutoInAsyncSteps) -> *mut FutoInAsyncSteps {
    // SAFETY: the handle C passed (see `root`).
    let Some(r) = (unsafe { root(p) }) else {
        return std::ptr::null_mut();
    };
    guard(|| new_root(r.inner.lock().rt.clone())).unwrap_or(std::ptr::null_mut())
}

pub(crate) unsafe extern "C" fn free(p: *mut FutoInAsyncSteps) {
    // SAFETY: the handle C passed (see `root`).
    if unsafe { root(p) }.is_none() {
        return;
    }
    // SAFETY: one of our roots (checked above): C gives back its reference.
    let r = unsafe { Arc::from_raw(p as *const RootBsi) };
    guard(|| cancel_run(&r));
    drop(r);
}

/// Off-loop scheduling: the callback runs on one of the runtime's loops;
/// the handle is empty (see the header).
fn schedule(
    p: *mut FutoInAsyncSteps,
    delay: Option<u32>,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    // SAFETY: the handle C passed (see `root`).
    let (Some(r), Some(cb)) = (unsafe { root(p) }, cb) else {
        return FutoInHandle::EMPTY;
    };
    let d = SendPtr(data);
    guard(|| {
        let rt = r.inner.lock().rt.clone();
        if let Some(t) = rt.loop_handle(0) {
            // SAFETY: the user's callback with its data.
            schedule_on(&t, delay, move || unsafe { cb(d.get()) });
        }
    });
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
pub(crate) unsafe extern "C" fn is_same_thread(p: *mut FutoInAsyncSteps) -> c_int {
    // SAFETY: the handle C passed (see `root`).
    let Some(r) = (unsafe { root(p) }) else {
        return 0;
    };
    let home = r.home.load(Ordering::Relaxed);
    (home != 0 && home == thread_mark()) as c_int
}
