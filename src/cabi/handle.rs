//! Step handles: the `FutoInAsyncSteps*` a C callback receives.
//!
//! A handle is a pooled [`StepBsi`] bound to one step callback. While the
//! callback runs, its calls go straight to the engine's [`Step`]. A step
//! that waits (waitExternal, setTimeout, setCancel) keeps its handle until
//! the step ends, so `success`/`handle_error` can come later, from any
//! thread, through the step's [`ExternalHandle`]. Handle memory is never
//! given back to the system (it is recycled after a quarantine of
//! [`QUARANTINE`] newer handles), so a stale handle is detected, not a
//! use after free. The vtable entries that act on a handle are in
//! `cabi::step`, their table in `cabi::api`; running a C callback with a
//! handle bound is in `cabi::callback`.

use super::table;
use super::types::*;
use crate::error::{Error, StepResult};
use crate::steps::external::ExternalHandle;
use crate::steps::scheduler::Scheduler;
use crate::steps::step::Step;
use crate::steps::tool_handle::ToolHandle;
use crate::util::thread::thread_mark;
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

/// Released handles a loop thread keeps before reusing the oldest (and
/// the stale parallel handles a root keeps before reusing the oldest).
pub const QUARANTINE: usize = 256;

/// The handle behind a step's `FutoInAsyncSteps*`.
#[repr(C)]
pub(crate) struct StepBsi {
    hdr: FutoInAsyncSteps,
    /// The thread mark of the loop that runs the step.
    pub(crate) owner: AtomicUsize,
    /// The step may be acted on (cleared when the step ends).
    pub(crate) live: AtomicBool,
    pub(crate) root_id: AtomicIsize,
    /// Completes a waiting step from outside its callback.
    pub(crate) ext: Mutex<Option<ExternalHandle>>,
    /// The step's loop, for scheduling outside the callback.
    pub(crate) tool: Mutex<Option<ToolHandle>>,
    /// A call that is for the step's loop came from another thread while
    /// the step lived (see [`off_loop`]); the call it was is in
    /// `off_loop_call`.
    off_loop: AtomicBool,
    off_loop_call: Mutex<Option<&'static str>>,
    // Loop thread only (checked with `owner` before any access):
    /// The step while its callback runs, else NULL.
    pub(crate) cur: Cell<*mut Step<'static>>,
    /// The error the callback leaves with (handle_error, breakLoop, misuse).
    pub(crate) failed: Cell<Option<Error>>,
    /// The step waits: keep the handle until the step ends.
    pub(crate) waited: Cell<bool>,
    /// A parallel's handle: the parallel's place in the step's queue.
    pub(crate) par: Cell<Option<usize>>,
    /// Parallel handles made in this callback (released with it).
    pub(crate) children: RefCell<Vec<&'static StepBsi>>,
    /// The loop while the step's cancel callback runs, else NULL: the
    /// scheduling calls work there (see [`try_cancel_cb`]).
    pub(crate) cancel_sched: Cell<*mut Scheduler>,
}

// SAFETY: other threads touch only the atomics and the mutexes; the Cell
// and RefCell fields are read and written only on the thread whose mark is
// in `owner` (every access goes through `with_step`/`on_loop`).
unsafe impl Sync for StepBsi {}
// SAFETY: as above; `hdr.api` points to a static table.
unsafe impl Send for StepBsi {}

/// Per loop thread: released handles, and the strings stateVariable gave
/// out since the current step callback started (one thread-local, so a
/// callback pays one lookup for both).
struct Local {
    pool: RefCell<VecDeque<&'static StepBsi>>,
    /// Each stays valid until the next step callback starts here, also
    /// when another one is read after it.
    given: RefCell<Vec<CString>>,
    /// A `try_step` runs its closure on this thread (which holds a
    /// `&mut Step`).
    in_step: Cell<bool>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            pool: RefCell::new(VecDeque::new()),
            given: RefCell::new(Vec::new()),
            in_step: Cell::new(false),
        }
    };
}

/// Keeps a string given to C until the next step callback starts on this
/// thread; the same text again gives the same pointer.
pub(crate) fn give_str(c: CString) -> *mut c_void {
    LOCAL.with(|l| {
        let mut g = l.given.borrow_mut();
        if let Some(old) = g.iter().find(|o| **o == c) {
            return old.as_ptr() as *mut c_void;
        }
        // The bytes stay where they are when the CString moves.
        let p = c.as_ptr() as *mut c_void;
        g.push(c);
        p
    })
}

impl StepBsi {
    fn new() -> Self {
        StepBsi {
            // SAFETY: the header of this new `StepBsi`, its first field.
            hdr: unsafe { table::header::<StepBsi>() },
            owner: AtomicUsize::new(0),
            live: AtomicBool::new(false),
            root_id: AtomicIsize::new(0),
            ext: Mutex::new(None),
            tool: Mutex::new(None),
            off_loop: AtomicBool::new(false),
            off_loop_call: Mutex::new(None),
            cur: Cell::new(std::ptr::null_mut()),
            failed: Cell::new(None),
            waited: Cell::new(false),
            par: Cell::new(None),
            children: RefCell::new(Vec::new()),
            cancel_sched: Cell::new(std::ptr::null_mut()),
        }
    }

    pub(crate) fn ptr(&'static self) -> *mut FutoInAsyncSteps {
        self as *const StepBsi as *mut FutoInAsyncSteps
    }

    pub(crate) fn on_loop(&self) -> bool {
        self.owner.load(Ordering::Acquire) == thread_mark()
    }

    /// Records the error the callback leaves with; the first one stays
    /// unless `replace` (handle_error and loop control replace).
    pub(crate) fn fail(&self, e: Error, replace: bool) {
        let old = self.failed.take();
        self.failed.set(match old {
            Some(o) if !replace => Some(o),
            _ => Some(e),
        });
    }
}

/// A handle from the pool (or a new one once the quarantine is not full).
fn acquire(l: &Local) -> &'static StepBsi {
    let mut p = l.pool.borrow_mut();
    let reused = if p.len() > QUARANTINE {
        p.pop_front()
    } else {
        None
    };
    drop(p);
    reused.unwrap_or_else(|| {
        let b: &'static StepBsi = Box::leak(Box::new(StepBsi::new()));
        // Kept reachable for good: a handle outlives its thread's pool,
        // and leak checkers see type-stable memory, not a leak.
        ALL.lock().push(b);
        b
    })
}

/// Every handle ever made (they are never freed; see the module docs).
static ALL: Mutex<Vec<&'static StepBsi>> = Mutex::new(Vec::new());

/// A handle from the pool, bound to `s` for one callback that starts now.
/// (Inline: `cabi::callback` runs it once per C callback.)
#[inline]
pub(crate) fn bind(s: &mut Step<'_>) -> &'static StepBsi {
    let b = LOCAL.with(|l| {
        if !l.given.borrow().is_empty() {
            l.given.borrow_mut().clear();
        }
        acquire(l)
    });
    set_up(b, s)
}

/// [`bind`] for a handle made inside the running callback of `parent` (a
/// parallel's): what that callback was given stays valid.
///
/// The new handle holds the parent's own step pointer, not one made from
/// `s`: `s` is a reborrow that ends when this call returns, and a pointer
/// made from it would be invalidated by the parent's next call (each makes
/// a new `&mut` from the parent's pointer).
pub(crate) fn bind_child(parent: &StepBsi, s: &mut Step<'_>) -> &'static StepBsi {
    let c = set_up(LOCAL.with(acquire), s);
    c.cur.set(parent.cur.get());
    c
}

fn set_up(b: &'static StepBsi, s: &mut Step<'_>) -> &'static StepBsi {
    b.owner.store(thread_mark(), Ordering::Relaxed);
    b.root_id.store(s.root_id(), Ordering::Relaxed);
    b.cur.set((s as *mut Step<'_>).cast::<Step<'static>>());
    b.failed.set(None);
    b.waited.set(false);
    b.par.set(None);
    // A misuse recorded too late for the handle's previous step.
    b.off_loop.store(false, Ordering::Relaxed);
    b.live.store(true, Ordering::Release);
    b
}

/// Ends a handle: stale from now on, recycled after the quarantine.
fn release(b: &'static StepBsi) {
    b.live.store(false, Ordering::Release);
    b.cur.set(std::ptr::null_mut());
    b.failed.set(None);
    // Only a waiting step set these (`mark_wait`): no locks for the others.
    if b.waited.replace(false) {
        b.ext.lock().take();
        b.tool.lock().take();
    }
    let _ = release_children(b);
    // After the pool is gone (thread exit) the handle just stays leaked.
    let _ = LOCAL.try_with(|l| l.pool.borrow_mut().push_back(b));
}

/// Releases the parallel handles made in `b`'s callback (most have none):
/// the first call made on one of them from another thread, if any, and
/// the first error one of them recorded (a misuse made through a
/// parallel's handle fails the step that made it).
#[inline]
fn release_children(b: &StepBsi) -> (Option<&'static str>, Option<Error>) {
    let (mut off, mut failed) = (None, None);
    if !b.children.borrow().is_empty() {
        for c in b.children.take() {
            off = off.or_else(|| take_off_loop(c));
            failed = failed.or_else(|| c.failed.take());
            release(c);
        }
    }
    (off, failed)
}

/// Records a call made on `b`, a live handle, from a thread other than
/// its loop's: `what` is for the loop (only success()/handle_error() of a
/// waiting step, and the read-only calls, may come from elsewhere). A
/// waiting step fails at once, through its external handle; any other
/// step when its callback returns (`finish`). A call that races with the
/// end of the step (`finish` has read the flag) counts as made after it:
/// a no-op, as on a stale handle.
fn off_loop(b: &StepBsi, what: &'static str) {
    {
        let mut call = b.off_loop_call.lock();
        if !b.off_loop.load(Ordering::Relaxed) {
            *call = Some(what);
            b.off_loop.store(true, Ordering::Release);
        }
    }
    // Read after the flag is set: a step that starts waiting after this
    // read takes the `ext` lock after it, so its `finish` sees the flag.
    let ext = b.ext.lock().clone();
    if let Some(h) = ext {
        let _ = h.fail(off_loop_error(what));
    }
}

/// The error of a step that had a call from another thread.
fn off_loop_error(what: &str) -> Error {
    Error::internal(format!(
        "{what} called from a thread other than the step's loop: only \
         success() and handle_error() of a waiting step may be"
    ))
}

/// The call recorded by [`off_loop`] on `b`, if any (cleared). Loop thread.
#[inline]
fn take_off_loop(b: &StepBsi) -> Option<&'static str> {
    if !b.off_loop.load(Ordering::Acquire) {
        return None;
    }
    let call = b.off_loop_call.lock().take();
    b.off_loop.store(false, Ordering::Relaxed);
    Some(call.unwrap_or("a call"))
}

/// Records an off-loop call of `what` on `p` (see [`off_loop`]), if `p`
/// is a live handle of ours and this is not its loop's thread.
pub(crate) fn flag_off_loop(p: *mut FutoInAsyncSteps, what: &'static str) {
    // SAFETY: as in `with_step`.
    if let Some(b) = unsafe { get(p) } {
        if b.live.load(Ordering::Acquire) && !b.on_loop() {
            off_loop(b, what);
        }
    }
}

/// Keeps a waiting step's handle until the step ends.
struct Keep(&'static StepBsi);
impl Drop for Keep {
    fn drop(&mut self) {
        release(self.0);
    }
}

/// After the callback: what the step returns; the handle is released now
/// or, for a waiting step, when the step ends.
pub(crate) fn finish(s: &mut Step<'_>, b: &'static StepBsi) -> StepResult {
    b.cur.set(std::ptr::null_mut());
    let (off, child_failed) = release_children(b);
    let off = off.or_else(|| take_off_loop(b));
    let mut r = b.failed.take().or(child_failed);
    if let Some(what) = off {
        // Whatever the callback did, the flow must not go on silently.
        r = Some(off_loop_error(what));
    }
    if b.waited.get() && r.is_none() {
        s.stack(Keep(b));
    } else {
        release(b);
    }
    r.map_or(Ok(()), Err)
}

/// The handle behind `p`, if it is one of our step handles (None for NULL
/// and for any other handle, such as another implementation's).
///
/// # Safety
/// `p` is NULL or points to a `FutoInAsyncSteps` of any implementation,
/// readable up to its `api` field.
pub(crate) unsafe fn get<'a>(p: *mut FutoInAsyncSteps) -> Option<&'a StepBsi> {
    // SAFETY: caller's contract.
    if !unsafe { is_ours(p) } {
        return None;
    }
    // SAFETY: only `StepBsi::new` puts its table in a header (`Table`), at
    // the start of a StepBsi (`repr(C)`); step handles are never freed.
    Some(unsafe { &*(p as *const StepBsi) })
}

/// Runs `f` on the step whose callback is running on this thread for `p`;
/// the call `what` on a live handle from another thread is recorded as a
/// misuse (see [`off_loop`]).
pub(crate) fn with_step<R>(
    p: *mut FutoInAsyncSteps,
    what: &'static str,
    f: impl FnOnce(&mut Step<'_>, &'static StepBsi) -> R,
) -> Option<R> {
    let r = try_step(p, f);
    if r.is_none() {
        flag_off_loop(p, what);
    }
    r
}

/// [`with_step`] for the calls that have a way on from another thread
/// (their caller records the misuse when that fails too).
pub(crate) fn try_step<R>(
    p: *mut FutoInAsyncSteps,
    f: impl FnOnce(&mut Step<'_>, &'static StepBsi) -> R,
) -> Option<R> {
    let b = live_here(p)?;
    let cur = b.cur.get();
    if cur.is_null() {
        return None;
    }
    // The closures given here run no user code that gets a handle (a
    // user's allocate runs outside them: see `state_variable`), but a
    // value's cleanup may run in one, and could still reach a handle:
    // such a call back in is refused, and fails the step.
    let r = one_at_a_time(|| {
        // SAFETY: `cur` is set only while the step's callback runs on this
        // (the owner) thread, from the `&mut Step` that callback got; that
        // reference is not used until the C callback returns. Every `&mut`
        // made from a `cur` (of this handle, or of a parallel's handle
        // made in the same callback, which holds the same pointer) is made
        // here, on the owner thread, and `one_at_a_time` lets only one
        // live at a time: this is the only live access to the step.
        let s = unsafe { &mut *cur };
        f(s, b)
    });
    match r {
        Some(Ok(r)) => Some(r),
        None => {
            b.fail(
                Error::internal("a step call made from code another step call runs"),
                false,
            );
            None
        }
        // A panic in the engine must not cross into C: it fails the step.
        Some(Err(p)) => {
            b.fail(crate::tool::panic_error("C interface call", p), false);
            None
        }
    }
}

/// The handle behind `p` if it is one of ours, live, and this is its
/// loop's thread.
fn live_here(p: *mut FutoInAsyncSteps) -> Option<&'static StepBsi> {
    // SAFETY: `p` is what C passed to an entry of the step table: NULL or
    // a handle, which starts with its `api` field (header).
    let b: &'static StepBsi = unsafe { get(p) }?;
    (b.live.load(Ordering::Acquire) && b.on_loop()).then_some(b)
}

/// Runs `f`, the one call into the engine this thread makes at a time,
/// and catches its panic; `None` (and `f` does not run) when one already
/// runs here: a call back in from code that call runs (a value's cleanup).
fn one_at_a_time<R>(f: impl FnOnce() -> R) -> Option<std::thread::Result<R>> {
    if LOCAL.try_with(|l| l.in_step.replace(true)).unwrap_or(true) {
        return None;
    }
    let r = catch_unwind(AssertUnwindSafe(f));
    let _ = LOCAL.try_with(|l| l.in_step.set(false));
    Some(r)
}

/// Runs `f` on the loop of `p`'s step while that step's cancel callback
/// runs on this thread (the engine hands the callback its loop), else
/// None: the scheduling calls a cancel callback makes (typically
/// cancelling the step's own timer) act at once, as in the step's
/// callback.
pub(crate) fn try_cancel_cb<R>(
    p: *mut FutoInAsyncSteps,
    f: impl FnOnce(&mut Scheduler) -> R,
) -> Option<R> {
    let sched = live_here(p)?.cancel_sched.get();
    if sched.is_null() {
        return None;
    }
    one_at_a_time(|| {
        // SAFETY: `cancel_sched` is set only while the step's cancel
        // callback runs on this (the owner) thread, from the `&mut
        // Scheduler` the engine gave that callback
        // (`Step::set_cancel_sched`), and cleared when it returns; the
        // engine does not use its reference meanwhile. `one_at_a_time`
        // lets only one `&mut` made from it live at a time.
        let sched = unsafe { &mut *sched };
        f(sched)
    })?
    // An engine panic must not cross into C: the call does nothing.
    .map_err(crate::util::panic::drop_payload)
    .ok()
}

/// Runs `f` off the step's callback, with the step's external handle.
pub(crate) fn with_ext<R>(
    p: *mut FutoInAsyncSteps,
    f: impl FnOnce(&ExternalHandle) -> R,
) -> Option<R> {
    // SAFETY: as in `with_step`.
    let b = unsafe { get(p) }?;
    let h = b.ext.lock().clone()?;
    catch_unwind(AssertUnwindSafe(|| f(&h))).ok()
}

/// Runs `f` with a handle bound to no step (already stale; `rootId`
/// works): for calls made after a step ended, such as a sync unlock on
/// cancel.
pub(crate) fn with_detached(root_id: isize, f: impl FnOnce(*mut FutoInAsyncSteps)) {
    let b = LOCAL.with(acquire);
    b.owner.store(0, Ordering::Relaxed);
    b.root_id.store(root_id, Ordering::Relaxed);
    f(b.ptr());
    release(b);
}

/// Fails the step whose callback runs for `p` with `e` (`what` is the
/// call, for a misuse from another thread).
pub(crate) fn fail_step(p: *mut FutoInAsyncSteps, what: &'static str, e: Error) {
    with_step(p, what, |_, b| b.fail(e, false));
}

/// True for our step handles.
///
/// # Safety
/// As [`get`].
pub(crate) unsafe fn is_ours(p: *mut FutoInAsyncSteps) -> bool {
    // SAFETY: caller's contract.
    unsafe { table::is::<StepBsi>(p) }
}

/// [`with_step`] for the calls a parallel's handle does not take: on one,
/// the step fails with `InternalError` naming `what`, and `f` is not run.
pub(crate) fn with_plain_step<R>(
    p: *mut FutoInAsyncSteps,
    what: &'static str,
    f: impl FnOnce(&mut Step<'_>, &'static StepBsi) -> R,
) -> Option<R> {
    with_step(p, what, plain(what, f)).flatten()
}

/// [`try_step`] for the calls a parallel's handle does not take.
pub(crate) fn try_plain_step<R>(
    p: *mut FutoInAsyncSteps,
    what: &'static str,
    f: impl FnOnce(&mut Step<'_>, &'static StepBsi) -> R,
) -> Option<R> {
    try_step(p, plain(what, f)).flatten()
}

fn plain<R>(
    what: &'static str,
    f: impl FnOnce(&mut Step<'_>, &'static StepBsi) -> R,
) -> impl FnOnce(&mut Step<'_>, &'static StepBsi) -> Option<R> {
    move |s, b| {
        if b.par.get().is_some() {
            b.fail(
                Error::internal(format!("{what}: a parallel's handle only takes add()")),
                false,
            );
            return None;
        }
        Some(f(s, b))
    }
}

/// The external handle of the waiting step behind `p`, if `p` is one of
/// our step handles and its step waits: it refuses completions once that
/// step has ended, even after the handle memory went to another step.
///
/// # Safety
/// As [`get`].
pub(crate) unsafe fn ext_of(p: *mut FutoInAsyncSteps) -> Option<ExternalHandle> {
    // SAFETY: caller's contract.
    let b = unsafe { get(p) }?;
    if !b.live.load(Ordering::Acquire) {
        return None;
    }
    b.ext.lock().clone()
}

/// Marks the step as waiting: its handle stays until the step ends, with
/// the external handle and the loop for calls from outside the callback.
pub(crate) fn mark_wait(s: &mut Step<'_>, b: &StepBsi) {
    if s.in_error_handler() {
        return; // the engine has recorded the misuse
    }
    b.waited.set(true);
    let mut ext = b.ext.lock();
    if ext.is_none() {
        *ext = Some(s.wait_external());
    }
    let mut tool = b.tool.lock();
    if tool.is_none() {
        *tool = Some(s.tool().handle());
    }
}
