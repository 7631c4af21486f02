//! Step handles: the `FutoInAsyncSteps*` a C callback receives, and the
//! vtable entries that act on the step behind it.
//!
//! A handle is a pooled [`StepBsi`] bound to one step callback. While the
//! callback runs, its calls go straight to the engine's [`Step`]. A step
//! that waits (waitExternal, setTimeout, setCancel) keeps its handle until
//! the step ends, so `success`/`handle_error` can come later, from any
//! thread, through the step's [`ExternalHandle`]. Handle memory is never
//! given back to the system (it is recycled after a quarantine of
//! [`QUARANTINE`] newer handles), so a stale handle is detected, not a
//! use after free.

use super::root;
use super::types::*;
use super::value::{self, c_str};
use crate::args::Args;
use crate::error::{Error, StepResult};
use crate::steps::parallel::Parallel;
use crate::steps::result::ExternalHandle;
use crate::steps::step::Step;
use crate::tool::handle::ToolHandle;
use crate::tool::scheduler::TaskHandle;
use parking_lot::Mutex;
use slotmap::{Key, KeyData};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Released handles a loop thread keeps before reusing the oldest.
pub const QUARANTINE: usize = 256;

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

/// The handle behind a step's `FutoInAsyncSteps*`.
#[repr(C)]
pub(crate) struct StepBsi {
    hdr: FutoInAsyncSteps,
    /// The thread mark of the loop that runs the step.
    owner: AtomicUsize,
    /// The step may be acted on (cleared when the step ends).
    live: AtomicBool,
    root_id: AtomicIsize,
    /// Completes a waiting step from outside its callback.
    ext: Mutex<Option<ExternalHandle>>,
    /// The step's loop, for scheduling outside the callback.
    tool: Mutex<Option<ToolHandle>>,
    // Loop thread only (checked with `owner` before any access):
    /// The step while its callback runs, else NULL.
    cur: Cell<*mut Step<'static>>,
    /// The error the callback leaves with (handle_error, breakLoop, misuse).
    failed: Cell<Option<Error>>,
    /// The step waits: keep the handle until the step ends.
    waited: Cell<bool>,
    /// A parallel's handle: the parallel's place in the step's queue.
    par: Cell<Option<usize>>,
    /// Parallel handles made in this callback (released with it).
    children: RefCell<Vec<&'static StepBsi>>,
}

// SAFETY: other threads touch only the atomics and the mutexes; the Cell
// and RefCell fields are read and written only on the thread whose mark is
// in `owner` (every access goes through `with_step`/`on_loop`).
unsafe impl Sync for StepBsi {}
// SAFETY: as above; `hdr.api` points to a static table.
unsafe impl Send for StepBsi {}

thread_local! {
    static MARK: u8 = const { 0 };
    static POOL: RefCell<VecDeque<&'static StepBsi>> = const { RefCell::new(VecDeque::new()) };
    /// The last string given out by stateVariable("error_info"/...).
    static LAST_STR: RefCell<CString> = RefCell::new(CString::default());
}

fn thread_mark() -> usize {
    MARK.with(|m| m as *const u8 as usize)
}

impl StepBsi {
    fn new() -> Self {
        StepBsi {
            hdr: FutoInAsyncSteps { api: &STEP_API },
            owner: AtomicUsize::new(0),
            live: AtomicBool::new(false),
            root_id: AtomicIsize::new(0),
            ext: Mutex::new(None),
            tool: Mutex::new(None),
            cur: Cell::new(std::ptr::null_mut()),
            failed: Cell::new(None),
            waited: Cell::new(false),
            par: Cell::new(None),
            children: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn ptr(&'static self) -> *mut FutoInAsyncSteps {
        self as *const StepBsi as *mut FutoInAsyncSteps
    }

    fn on_loop(&self) -> bool {
        self.owner.load(Ordering::Acquire) == thread_mark()
    }

    /// Records the error the callback leaves with; the first one stays
    /// unless `replace` (handle_error and loop control replace).
    fn fail(&self, e: Error, replace: bool) {
        let old = self.failed.take();
        self.failed.set(match old {
            Some(o) if !replace => Some(o),
            _ => Some(e),
        });
    }
}

/// A handle from the pool (or a new one once the quarantine is not full).
fn acquire() -> &'static StepBsi {
    POOL.with_borrow_mut(|p| {
        if p.len() > QUARANTINE {
            p.pop_front()
        } else {
            None
        }
    })
    .unwrap_or_else(|| {
        let b: &'static StepBsi = Box::leak(Box::new(StepBsi::new()));
        // Kept reachable for good: a handle outlives its thread's pool,
        // and leak checkers see type-stable memory, not a leak.
        ALL.lock().push(b);
        b
    })
}

/// Every handle ever made (they are never freed; see the module docs).
static ALL: Mutex<Vec<&'static StepBsi>> = Mutex::new(Vec::new());

/// A handle from the pool, bound to `s` for one callback.
fn bind(s: &mut Step<'_>) -> &'static StepBsi {
    let b = acquire();
    b.owner.store(thread_mark(), Ordering::Relaxed);
    b.root_id.store(s.root_id(), Ordering::Relaxed);
    b.cur.set((s as *mut Step<'_>).cast::<Step<'static>>());
    b.failed.set(None);
    b.waited.set(false);
    b.par.set(None);
    b.live.store(true, Ordering::Release);
    b
}

/// Ends a handle: stale from now on, recycled after the quarantine.
fn release(b: &'static StepBsi) {
    b.live.store(false, Ordering::Release);
    b.cur.set(std::ptr::null_mut());
    b.failed.set(None);
    b.ext.lock().take();
    b.tool.lock().take();
    for c in b.children.take() {
        release(c);
    }
    // After the pool is gone (thread exit) the handle just stays leaked.
    let _ = POOL.try_with(|p| p.borrow_mut().push_back(b));
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
fn finish(s: &mut Step<'_>, b: &'static StepBsi) -> StepResult {
    b.cur.set(std::ptr::null_mut());
    for c in b.children.take() {
        release(c);
    }
    let r = b.failed.take();
    if b.waited.get() && r.is_none() {
        s.stack(Keep(b));
    } else {
        release(b);
    }
    r.map_or(Ok(()), Err)
}

/// Runs a C execute callback as the body of step `s`.
pub(crate) fn run_exec(
    s: &mut Step<'_>,
    args: Args,
    f: unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, *const FutoInArgs),
    d: SendPtr,
) -> StepResult {
    let mut cargs = FutoInArgs::EMPTY;
    value::to_c(args, &mut cargs);
    let b = bind(s);
    // SAFETY: a C callback given to add(); the handle is valid while it
    // runs, and the args live until it returns.
    unsafe { f(b.ptr(), d.get(), &cargs) };
    value::reset_all(&mut cargs);
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

/// Adds a C step (with its C error handler, if any) to `s`.
pub(crate) fn add_c(s: &mut Step<'_>, data: *mut c_void, f: ExecuteCallback, eh: ErrorCallback) {
    let d = SendPtr(data);
    let Some(f) = f else {
        s.add(|_, ()| Err(Error::internal("add(): the execute callback is NULL")));
        return;
    };
    match eh {
        None => {
            s.add(move |s, a: Args| run_exec(s, a, f, d));
        }
        Some(eh) => {
            s.add_catch(
                move |s, a: Args| run_exec(s, a, f, d),
                move |s, e| run_catch(s, e, eh, d),
            );
        }
    }
}

/// The C step closures for a root model (clonable, `Send`).
pub(crate) fn model_step(
    f: ExecuteCallback,
    d: SendPtr,
) -> impl FnOnce(&mut Step<'_>, Args) -> StepResult + Clone + Send + 'static {
    move |s, a| match f {
        Some(f) => run_exec(s, a, f, d),
        None => Err(Error::internal("add(): the execute callback is NULL")),
    }
}

/// The C error handler closure for a root model.
pub(crate) fn model_catch(
    eh: unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut c_void, *const c_char),
    d: SendPtr,
) -> impl FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static {
    move |s, e| run_catch(s, e, eh, d)
}

/// The handle behind `p`, if it is one of ours... `p` comes from C.
///
/// # Safety
/// `p` is NULL or a pointer this module gave out (vtable STEP_API).
unsafe fn get<'a>(p: *mut FutoInAsyncSteps) -> Option<&'a StepBsi> {
    // SAFETY: caller's contract; handles are never freed.
    unsafe { (p as *const StepBsi).as_ref() }
}

/// Runs `f` on the step whose callback is running on this thread for `p`.
fn with_step<R>(
    p: *mut FutoInAsyncSteps,
    f: impl FnOnce(&mut Step<'_>, &'static StepBsi) -> R,
) -> Option<R> {
    // SAFETY: the vtable is reached only through handles we gave out.
    let b: &'static StepBsi = unsafe { get(p) }?;
    if !b.live.load(Ordering::Acquire) || !b.on_loop() {
        return None;
    }
    let cur = b.cur.get();
    if cur.is_null() {
        return None;
    }
    // SAFETY: `cur` is set only while the step's callback runs on this
    // (the owner) thread, from the `&mut Step` that callback got; that
    // reference is not used until the C callback returns, so this is the
    // only live access to the step.
    let s = unsafe { &mut *cur };
    // A panic in the engine must not cross into C: it fails the step.
    match catch_unwind(AssertUnwindSafe(|| f(s, b))) {
        Ok(r) => Some(r),
        Err(p) => {
            b.fail(
                crate::steps::flow::panic_error("C interface call", p),
                false,
            );
            None
        }
    }
}

/// Runs `f` off the step's callback, with the step's external handle.
fn with_ext<R>(p: *mut FutoInAsyncSteps, f: impl FnOnce(&ExternalHandle) -> R) -> Option<R> {
    // SAFETY: as in `with_step`.
    let b = unsafe { get(p) }?;
    let h = b.ext.lock().clone()?;
    catch_unwind(AssertUnwindSafe(|| f(&h))).ok()
}

/// Runs `f` with a handle bound to `s`, as a C callback would run.
pub(crate) fn run_raw(s: &mut Step<'_>, f: impl FnOnce(*mut FutoInAsyncSteps)) -> StepResult {
    let b = bind(s);
    f(b.ptr());
    finish(s, b)
}

/// Runs `f` with a handle bound to no step (already stale; `rootId`
/// works): for calls made after a step ended, such as a sync unlock on
/// cancel.
pub(crate) fn with_detached(root_id: isize, f: impl FnOnce(*mut FutoInAsyncSteps)) {
    let b = acquire();
    b.owner.store(0, Ordering::Relaxed);
    b.root_id.store(root_id, Ordering::Relaxed);
    f(b.ptr());
    release(b);
}

/// Fails the step whose callback runs for `p` with `e`.
pub(crate) fn fail_step(p: *mut FutoInAsyncSteps, e: Error) {
    with_step(p, |_, b| b.fail(e, false));
}

/// True for our step handles.
pub(crate) fn is_ours(p: *mut FutoInAsyncSteps) -> bool {
    // SAFETY: the caller's handle is readable up to its `api` field.
    !p.is_null() && std::ptr::eq(unsafe { (*p).api }, &STEP_API)
}

fn misuse(p: *mut FutoInAsyncSteps, what: &'static str) {
    with_step(p, |_, b| b.fail(Error::internal(what), false));
}

/// A parallel's handle takes only add(); anything else is a misuse.
fn not_parallel(p: *mut FutoInAsyncSteps, what: &'static str) -> bool {
    match with_step(p, |_, b| b.par.get().is_some()) {
        Some(true) => {
            misuse(p, what);
            false
        }
        _ => true,
    }
}

fn mark_wait(s: &mut Step<'_>, b: &StepBsi) {
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

// ------------------------------------------------------------- entries

unsafe extern "C" fn add(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    with_step(p, |s, b| match b.par.get() {
        Some(idx) => {
            let d = SendPtr(data);
            let Some(f) = f else {
                b.fail(
                    Error::internal("add(): the execute callback is NULL"),
                    false,
                );
                return;
            };
            let mut par = Parallel::at(s, idx);
            match eh {
                None => par.add(move |s, a: Args| run_exec(s, a, f, d)),
                Some(eh) => par.add_catch(
                    move |s, a: Args| run_exec(s, a, f, d),
                    move |s, e| run_catch(s, e, eh, d),
                ),
            };
        }
        None => add_c(s, data, f, eh),
    });
}

unsafe extern "C" fn parallel(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    eh: ErrorCallback,
) -> *mut FutoInAsyncSteps {
    if !not_parallel(p, "parallel(): a parallel's handle only takes add()") {
        return std::ptr::null_mut();
    }
    with_step(p, |s, b| {
        let d = SendPtr(data);
        let idx = match eh {
            None => s.parallel().index(),
            Some(eh) => s.parallel_catch(move |s, e| run_catch(s, e, eh, d)).index(),
        };
        let idx = idx?;
        let pb = bind(s);
        pb.par.set(Some(idx));
        b.children.borrow_mut().push(pb);
        Some(pb.ptr())
    })
    .flatten()
    .unwrap_or(std::ptr::null_mut())
}

/// A C state variable: `cleanup(data, value)` runs when the last copy of
/// the flow's state holding it is dropped.
#[derive(Clone)]
pub(crate) struct CVar(Arc<CVarInner>);
pub(crate) struct CVarInner {
    value: *mut c_void,
    data: *mut c_void,
    cleanup: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
}
// SAFETY: the header makes state values the user's to share with the
// flow's loop thread; the runtime only passes the pointers back.
unsafe impl Send for CVarInner {}
// SAFETY: as above; the runtime never dereferences the pointers.
unsafe impl Sync for CVarInner {}
impl Drop for CVarInner {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup {
            // SAFETY: the user's cleanup for the value its allocate made.
            unsafe { c(self.data, self.value) };
        }
    }
}

type Allocate = Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>;
type Cleanup2 = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;

/// stateVariable on a state map (a running step's or a root's model).
pub(crate) fn state_var(
    st: &mut crate::State,
    name: &str,
    data: *mut c_void,
    allocate: Allocate,
    cleanup: Cleanup2,
) -> Result<*mut c_void, Error> {
    let text = match name {
        "error_info" => Some(st.error_info().map(str::to_owned)),
        "last_exception" => Some(st.last_exception().map(|e| e.code().to_owned())),
        _ => None,
    };
    if let Some(t) = text {
        return Ok(match t.and_then(|t| CString::new(t).ok()) {
            Some(c) => LAST_STR.with_borrow_mut(|l| {
                *l = c;
                l.as_ptr() as *mut c_void
            }),
            None => std::ptr::null_mut(),
        });
    }
    if let Some(v) = st.get::<CVar>(name) {
        return Ok(v.0.value);
    }
    if st.contains(name) {
        return Err(Error::internal(format!(
            "stateVariable(): \"{name}\" holds a value that is not a C state variable"
        )));
    }
    let Some(allocate) = allocate else {
        return Ok(std::ptr::null_mut());
    };
    // SAFETY: the user's allocator, called once per name and flow.
    let value = unsafe { allocate(data) };
    st.set(
        name.to_owned(),
        CVar(Arc::new(CVarInner {
            value,
            data,
            cleanup,
        })),
    );
    Ok(value)
}

unsafe extern "C" fn state_variable(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    name: *const c_char,
    allocate: Allocate,
    cleanup: Cleanup2,
) -> *mut c_void {
    with_step(p, |s, b| {
        // SAFETY: a C string from the caller (or NULL, refused).
        let r = unsafe { c_str(name, "stateVariable(): name") }
            .and_then(|n| state_var(s.state(), n, data, allocate, cleanup));
        r.unwrap_or_else(|e| {
            b.fail(e, false);
            std::ptr::null_mut()
        })
    })
    .unwrap_or(std::ptr::null_mut())
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

unsafe extern "C" fn stack(
    p: *mut FutoInAsyncSteps,
    size: usize,
    cleanup: Option<unsafe extern "C" fn(*mut c_void)>,
) -> *mut c_void {
    if !not_parallel(p, "stack(): a parallel's handle only takes add()") {
        return std::ptr::null_mut();
    }
    with_step(p, |s, b| {
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

unsafe extern "C" fn success(p: *mut FutoInAsyncSteps, args: *mut FutoInArgs) {
    let a = match args.as_mut() {
        None => Ok(Args::new()),
        // SAFETY: the caller's args, as the header describes them.
        Some(a) => unsafe { value::from_c(a) },
    };
    if !not_parallel(p, "success(): a parallel's handle only takes add()") {
        return;
    }
    let mut a = Some(a);
    let inside = with_step(p, |s, b| match a.take().expect("once") {
        Ok(a) => {
            if let Err(e) = s.success(a) {
                b.fail(e, false);
            }
        }
        Err(e) => b.fail(e, false),
    });
    if inside.is_none() {
        if let Some(a) = a {
            with_ext(p, |h| {
                let _ = match a {
                    Ok(a) => h.success(a),
                    Err(e) => h.error(e.code().to_owned(), e.info().unwrap_or("").to_owned()),
                };
            });
        }
    }
}

unsafe extern "C" fn handle_error(
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
    if !not_parallel(p, "handle_error(): a parallel's handle only takes add()") {
        return;
    }
    let mut e = Some(e);
    let inside = with_step(p, |s, b| {
        let e = e.take().expect("once");
        s.state().set_error_info(e.info());
        b.fail(e, true);
    });
    if inside.is_none() {
        if let Some(e) = e {
            with_ext(p, |h| {
                h.error(e.code().to_owned(), e.info().unwrap_or("").to_owned())
            });
        }
    }
}

unsafe extern "C" fn set_timeout(p: *mut FutoInAsyncSteps, ms: u32) {
    if not_parallel(p, "setTimeout(): a parallel's handle only takes add()") {
        with_step(p, |s, b| {
            s.set_timeout(Duration::from_millis(ms.into()));
            mark_wait(s, b);
        });
    }
}

unsafe extern "C" fn set_cancel(p: *mut FutoInAsyncSteps, data: *mut c_void, ch: CancelCallback) {
    if !not_parallel(p, "setCancel(): a parallel's handle only takes add()") {
        return;
    }
    with_step(p, |s, b| {
        let Some(ch) = ch else {
            b.fail(
                Error::internal("setCancel(): the cancel callback is NULL"),
                false,
            );
            return;
        };
        let d = SendPtr(data);
        // SAFETY: the user's cancel callback, with the step's handle (kept
        // until the step ends, which is after its cancel callback).
        s.set_cancel(move || unsafe { ch(b.ptr(), d.get()) });
        mark_wait(s, b);
    });
}

unsafe extern "C" fn wait_external(p: *mut FutoInAsyncSteps) {
    if not_parallel(p, "waitExternal(): a parallel's handle only takes add()") {
        with_step(p, mark_wait);
    }
}

/// A copied label, or None for NULL.
unsafe fn label(l: *const c_char) -> Result<Option<String>, Error> {
    if l.is_null() {
        return Ok(None);
    }
    // SAFETY: a C string from the caller.
    unsafe { c_str(l, "loop label") }.map(|s| Some(s.to_owned()))
}

unsafe extern "C" fn loop_(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    f: LoopCallback,
    l: *const c_char,
) {
    if !not_parallel(p, "loop(): a parallel's handle only takes add()") {
        return;
    }
    with_step(p, |s, b| {
        // SAFETY: the caller's label.
        let (Some(f), Ok(l)) = (f, unsafe { label(l) }) else {
            b.fail(
                Error::internal("loop(): NULL body or a label that is not UTF-8"),
                false,
            );
            return;
        };
        let d = SendPtr(data);
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

unsafe extern "C" fn repeat(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    count: usize,
    f: RepeatCallback,
    l: *const c_char,
) {
    if !not_parallel(p, "repeat(): a parallel's handle only takes add()") {
        return;
    }
    with_step(p, |s, b| {
        // SAFETY: the caller's label.
        let (Some(f), Ok(l)) = (f, unsafe { label(l) }) else {
            b.fail(
                Error::internal("repeat(): NULL body or a label that is not UTF-8"),
                false,
            );
            return;
        };
        let d = SendPtr(data);
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
    with_step(p, |s, b| {
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

unsafe extern "C" fn break_loop(p: *mut FutoInAsyncSteps, l: *const c_char) {
    control(p, l, true);
}

unsafe extern "C" fn continue_loop(p: *mut FutoInAsyncSteps, l: *const c_char) {
    control(p, l, false);
}

unsafe extern "C" fn execute(p: *mut FutoInAsyncSteps, _data: *mut c_void, _ue: ErrorCallback) {
    misuse(p, "execute(): only a root can be executed, not a step");
}

unsafe extern "C" fn cancel(p: *mut FutoInAsyncSteps) {
    misuse(
        p,
        "cancel(): only a root can be cancelled; fail a step with handle_error()",
    );
}

unsafe extern "C" fn add_sync(
    p: *mut FutoInAsyncSteps,
    sync: *mut FutoInSync,
    data: *mut c_void,
    f: ExecuteCallback,
    eh: ErrorCallback,
) {
    if !not_parallel(p, "addSync(): a parallel's handle only takes add()") {
        return;
    }
    with_step(p, |s, b| {
        // SAFETY: the caller's sync object (NULL is refused).
        if let Err(e) = unsafe { super::sync::add_sync(s, sync, SendPtr(data), f, eh) } {
            b.fail(e, false);
        }
    });
}

unsafe extern "C" fn root_id(p: *mut FutoInAsyncSteps) -> isize {
    // SAFETY: a handle we gave out, or NULL.
    unsafe { get(p) }.map_or(0, |b| b.root_id.load(Ordering::Relaxed))
}

unsafe extern "C" fn is_valid(p: *mut FutoInAsyncSteps) -> c_int {
    // SAFETY: a handle we gave out, or NULL.
    unsafe { get(p) }.map_or(0, |b| b.live.load(Ordering::Acquire) as c_int)
}

unsafe extern "C" fn new_instance(p: *mut FutoInAsyncSteps) -> *mut FutoInAsyncSteps {
    with_step(p, |s, _| root::runtime_of(s).map(root::new_root))
        .flatten()
        .unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn free(_p: *mut FutoInAsyncSteps) {
    // A step's handle is not the caller's to free: a no-op.
}

fn to_handle(s: &mut Step<'_>, t: TaskHandle) -> FutoInHandle {
    FutoInHandle {
        data1: Arc::as_ptr(&s.sched.shared) as *mut c_void,
        data2: std::ptr::null_mut(),
        data3: t.data().as_ffi() as isize,
    }
}

fn from_handle(s: &mut Step<'_>, h: *mut FutoInHandle) -> Option<TaskHandle> {
    // SAFETY: the caller's handle, or NULL.
    let h = unsafe { h.as_ref() }?;
    std::ptr::eq(h.data1, Arc::as_ptr(&s.sched.shared) as *const c_void)
        .then(|| TaskHandle::from(KeyData::from_ffi(h.data3 as u64)))
}

fn schedule(
    p: *mut FutoInAsyncSteps,
    delay: Option<u32>,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    let Some(cb) = cb else {
        misuse(
            p,
            "sched_immediate()/sched_deferred(): the callback is NULL",
        );
        return FutoInHandle::EMPTY;
    };
    let d = SendPtr(data);
    // SAFETY: the user's callback with its data, on the loop thread.
    let call = move || unsafe { cb(d.get()) };
    let inside = with_step(p, |s, _| {
        let t = match delay {
            None => s.tool().immediate(move |_| call()),
            Some(ms) => s
                .tool()
                .deferred(Duration::from_millis(ms.into()), move |_| call()),
        };
        to_handle(s, t)
    });
    if let Some(h) = inside {
        return h;
    }
    // SAFETY: a handle we gave out, or NULL.
    if let Some(b) = unsafe { get(p) } {
        if let Some(t) = b.tool.lock().clone() {
            match delay {
                None => t.call(move |_| call()),
                Some(ms) => t.deferred(Duration::from_millis(ms.into()), move |_| call()),
            }
        }
    }
    FutoInHandle::EMPTY
}

unsafe extern "C" fn sched_immediate(
    p: *mut FutoInAsyncSteps,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    schedule(p, None, data, cb)
}

unsafe extern "C" fn sched_deferred(
    p: *mut FutoInAsyncSteps,
    ms: u32,
    data: *mut c_void,
    cb: SchedCallback,
) -> FutoInHandle {
    schedule(p, Some(ms), data, cb)
}

unsafe extern "C" fn sched_cancel(p: *mut FutoInAsyncSteps, h: *mut FutoInHandle) {
    with_step(p, |s, _| {
        if let Some(t) = from_handle(s, h) {
            s.tool().cancel(t);
        }
    });
}

unsafe extern "C" fn sched_is_valid(p: *mut FutoInAsyncSteps, h: *mut FutoInHandle) -> c_int {
    with_step(p, |s, _| {
        from_handle(s, h).is_some_and(|t| s.tool().is_valid(t)) as c_int
    })
    .unwrap_or(0)
}

unsafe extern "C" fn is_same_thread(p: *mut FutoInAsyncSteps) -> c_int {
    // SAFETY: a handle we gave out, or NULL.
    unsafe { get(p) }.is_some_and(|b| b.live.load(Ordering::Acquire) && b.on_loop()) as c_int
}

/// The vtable of step handles.
pub(crate) static STEP_API: FutoInAsyncStepsAPI = FutoInAsyncStepsAPI {
    add: Some(add),
    parallel: Some(parallel),
    state_variable: Some(state_variable),
    stack: Some(stack),
    success: Some(success),
    handle_error: Some(handle_error),
    set_timeout: Some(set_timeout),
    set_cancel: Some(set_cancel),
    wait_external: Some(wait_external),
    loop_: Some(loop_),
    repeat: Some(repeat),
    break_loop: Some(break_loop),
    continue_loop: Some(continue_loop),
    execute: Some(execute),
    cancel: Some(cancel),
    add_sync: Some(add_sync),
    root_id: Some(root_id),
    is_valid: Some(is_valid),
    new_instance: Some(new_instance),
    free: Some(free),
    sched_immediate: Some(sched_immediate),
    sched_deferred: Some(sched_deferred),
    sched_cancel: Some(sched_cancel),
    sched_is_valid: Some(sched_is_valid),
    is_same_thread: Some(is_same_thread),
};
