//! C-interface edge cases (FTN12 2.7): scheduling calls in a cancel
//! callback, misuse through a parallel's handle, a foreign sync object's
//! lock that is never granted, string data at any alignment, direct calls
//! of this runtime's sync objects, and a stale `ForeignExternal`. Each
//! test drives the function tables as a C program would and states the
//! documented result.

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{futoin_mutex_new, futoin_sync_free};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};
use std::sync::Mutex;

#[macro_use]
#[path = "common/cabi_fixture.rs"]
mod fixture;
use fixture::*;

// ---------------------------------------------------------------------------
// A cancel callback cancels the step's own timer
// ---------------------------------------------------------------------------

/// The timer handle the step set, for its cancel callback.
struct Timer(FutoInHandle);
// SAFETY: the handle is plain data the loop gave out; only that loop's
// thread uses it (the step and its cancel callback).
unsafe impl Send for Timer {}
static TIMER: Mutex<Timer> = Mutex::new(Timer(FutoInHandle::EMPTY));

unsafe extern "C" fn timer_fired(data: *mut c_void) {
    send(data, "timer fired");
}

unsafe extern "C" fn cancel_the_timer(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    let mut h = TIMER.lock().unwrap().0;
    let before = call!(bsi, sched_is_valid(bsi, &mut h));
    call!(bsi, sched_cancel(bsi, &mut h));
    let after = call!(bsi, sched_is_valid(bsi, &mut h));
    // A timer set here is a real one too.
    let mut late = call!(bsi, sched_deferred(bsi, 3_600_000, data, Some(timer_fired)));
    let late_valid = call!(bsi, sched_is_valid(bsi, &mut late));
    call!(bsi, sched_cancel(bsi, &mut late));
    send(
        data,
        format!("cancel: timer valid {before} -> {after}; one set here {late_valid}"),
    );
}

unsafe extern "C" fn timed_step(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    TIMER.lock().unwrap().0 = call!(bsi, sched_deferred(bsi, 3_600_000, data, Some(timer_fired)));
    call!(bsi, set_cancel(bsi, data, Some(cancel_the_timer)));
    call!(bsi, set_timeout(bsi, 10));
}

/// The standard pattern: a step sets a timer for its external activity
/// and its cancel callback cancels it. The scheduling calls act on the
/// loop there as in the step's callback (they used to be no-ops, so the
/// timer fired later, with data the step had already given up).
#[test]
fn a_cancel_callback_cancels_the_steps_timer() {
    let fx = Fixture::new();
    let got = fx.run_step(Some(timed_step), SECS);
    assert_eq!(
        got,
        [
            "cancel: timer valid 1 -> 0; one set here 1",
            "Timeout: (null)",
            "ok"
        ]
    );
}

// ---------------------------------------------------------------------------
// Misuse through a parallel's handle fails the step that made it
// ---------------------------------------------------------------------------

unsafe extern "C" fn par_add_null(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let par = call!(bsi, parallel(bsi, data, None));
    assert!(!par.is_null());
    call!(par, add(par, data, None, None));
}

unsafe extern "C" fn par_success(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let par = call!(bsi, parallel(bsi, data, None));
    call!(par, success(par, null_mut()));
}

unsafe extern "C" fn par_execute(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let par = call!(bsi, parallel(bsi, data, None));
    call!(par, execute(par, null_mut(), None));
}

/// Each used to be dropped with the parallel's handle: the flow went on
/// as if nothing were wrong.
#[test]
fn misuse_through_a_parallels_handle_fails_the_step() {
    let cases: [(ExecuteCallback, &str); 3] = [
        (
            Some(par_add_null),
            "InternalError: add(): the execute callback is NULL",
        ),
        (
            Some(par_success),
            "InternalError: success(): a parallel's handle only takes add()",
        ),
        (Some(par_execute), "InternalError: execute(): only a root"),
    ];
    for (step, want) in cases {
        let fx = Fixture::new();
        let got = fx.run_step(step, SECS);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with(want), "{got:?}");
        assert_eq!(got[1], "ok");
    }
}

// ---------------------------------------------------------------------------
// A foreign sync object's lock that is never granted is not unlocked
// ---------------------------------------------------------------------------

/// A foreign sync object: its header, then where its calls report.
#[repr(C)]
struct Foreign {
    hdr: FutoInSync,
    tx: *const Tx,
}

/// Where the calls of the `Foreign` object `s` report.
fn foreign_tx(s: *mut FutoInSync) -> *mut c_void {
    // SAFETY: `s` is a test's `Foreign`, whose header comes first.
    unsafe { (*(s as *mut Foreign)).tx as *mut c_void }
}

/// Adds a sync step on a new `Foreign` object with `api` to the fixture's
/// root (its section reports "section"); the object is returned, to be
/// kept until the flow has ended.
fn add_foreign_sync(fx: &Fixture, api: &'static FutoInSyncAPI) -> Box<Foreign> {
    let mut obj = Box::new(Foreign {
        hdr: FutoInSync { api },
        tx: &*fx.tx,
    });
    let sp = &mut *obj as *mut Foreign as *mut FutoInSync;
    call!(
        fx.root,
        add_sync(fx.root, sp, fx.d(), Some(in_section), None)
    );
    obj
}

unsafe extern "C" fn lock_cancelled(_: *mut FutoInAsyncSteps, data: *mut c_void) {
    send(data, "lock cancelled");
}

/// A lock that is busy: it waits, and times out.
unsafe extern "C" fn busy_lock(bsi: *mut FutoInAsyncSteps, s: *mut FutoInSync) {
    let d = foreign_tx(s);
    send(d, "lock waits");
    call!(bsi, set_timeout(bsi, 20));
    call!(bsi, set_cancel(bsi, d, Some(lock_cancelled)));
}

unsafe extern "C" fn busy_unlock(_: *mut FutoInAsyncSteps, s: *mut FutoInSync) {
    send(foreign_tx(s), "unlock");
}

static BUSY_API: FutoInSyncAPI = FutoInSyncAPI {
    lock: Some(busy_lock),
    unlock: Some(busy_unlock),
};

unsafe extern "C" fn in_section(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "section");
}

/// The object never granted the lock: it must not be asked to give it
/// back (it used to be, letting a second holder in).
#[test]
fn a_lock_that_timed_out_is_not_unlocked() {
    let fx = Fixture::new();
    let _obj = add_foreign_sync(&fx, &BUSY_API);
    fx.execute();
    let got = fx.until_end(SECS);
    fx.wait_idle();
    assert_eq!(got, ["lock waits", "lock cancelled", "unhandled Timeout"]);
}

// ---------------------------------------------------------------------------
// STRING16 / STRING32 data at any alignment
// ---------------------------------------------------------------------------

static S16: FutoInType = FutoInType {
    flags: FTN_TYPE_STRING16,
    cleanup: None,
};
static S32: FutoInType = FutoInType {
    flags: FTN_TYPE_STRING32,
    cleanup: None,
};

/// Bytes at an address aligned to 4, so that one byte in is misaligned
/// for 2- and 4-byte units.
#[repr(C, align(4))]
struct Aligned<const N: usize>([u8; N]);

/// "hi" as UTF-16 and as NUL-terminated UTF-32 (native order), one byte in.
static BUF16: Aligned<5> = {
    let (h, i) = ((b'h' as u16).to_ne_bytes(), (b'i' as u16).to_ne_bytes());
    Aligned([0, h[0], h[1], i[0], i[1]])
};
static BUF32: Aligned<13> = {
    let (h, i) = ((b'h' as u32).to_ne_bytes(), (b'i' as u32).to_ne_bytes());
    Aligned([
        0, h[0], h[1], h[2], h[3], i[0], i[1], i[2], i[3], 0, 0, 0, 0,
    ])
};

unsafe extern "C" fn give_misaligned(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const FutoInArgs,
) {
    let mut out = FutoInArgs::EMPTY;
    // STRING16 counted (2 units), STRING32 NUL-terminated (length 0).
    let slots = [
        (&S16, BUF16.0.as_ptr().wrapping_add(1), 2u32),
        (&S32, BUF32.0.as_ptr().wrapping_add(1), 0u32),
    ];
    for (i, (t, p, n)) in slots.into_iter().enumerate() {
        assert_eq!(p as usize % 2, 1, "misaligned on purpose");
        out.args[i].type_ = t;
        out.args[i].v.p = p.cast_mut().cast();
        out.args[i].length = n;
    }
    call!(bsi, success(bsi, &mut out));
}

unsafe extern "C" fn read_strings(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    a: *const FutoInArgs,
) {
    // SAFETY: the args the runtime passed, valid while this runs.
    let a = unsafe { &*a };
    let mut got = Vec::new();
    for slot in &a.args[..2] {
        // SAFETY: a type pointer the runtime set (a string type here).
        let flags = unsafe { (*slot.type_).flags };
        // SAFETY: string slots hold a pointer; the runtime's copies are
        // NUL-terminated UTF-8 (STRING) as the header says for results.
        let text = unsafe { std::ffi::CStr::from_ptr(slot.v.p.cast()) };
        got.push(format!("{flags:#04x} {}", text.to_string_lossy()));
    }
    send(data, got.join(", "));
    call!(bsi, success(bsi, null_mut()));
}

/// The header puts no alignment rule on string data (a STRING16 may sit
/// at an odd offset of a wire buffer): such data is read, not a crash
/// (it was an aborting precondition failure, undefined in release).
#[test]
fn misaligned_string16_and_string32_are_read() {
    if ran_in_child("misaligned_string16_and_string32_are_read") {
        return;
    }
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    call!(
        root,
        add(root, d, Some(give_misaligned), Some(report_error))
    );
    call!(root, add(root, d, Some(read_strings), Some(report_error)));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    let got = fx.until_end(SECS);
    // Both arrive as STRING (0x02), UTF-8.
    assert_eq!(got, ["0x02 hi, 0x02 hi", "ok"]);
}

// ---------------------------------------------------------------------------
// This runtime's sync objects are not called directly
// ---------------------------------------------------------------------------

static MX: AtomicPtr<FutoInSync> = AtomicPtr::new(null_mut());

unsafe extern "C" fn call_lock(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
    let mx = MX.load(SeqCst);
    // SAFETY: a live mutex of ours and its table.
    unsafe { ((*(*mx).api).lock.unwrap())(bsi, mx) };
}

unsafe extern "C" fn call_unlock(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
    let mx = MX.load(SeqCst);
    // SAFETY: a live mutex of ours and its table.
    unsafe { ((*(*mx).api).unlock.unwrap())(bsi, mx) };
}

/// Both give `NotImplemented`, as the interface's docs say (`unlock` was
/// a silent no-op).
#[test]
fn lock_and_unlock_called_directly_are_not_implemented() {
    MX.store(futoin_mutex_new(1, u32::MAX), SeqCst);
    let want = "NotImplemented: this runtime's sync objects are used through addSync(), \
                not lock()/unlock()";
    for step in [call_lock, call_unlock] {
        let fx = Fixture::new();
        let got = fx.run_step(Some(step), SECS);
        assert_eq!(got, [want, "ok"]);
    }
    // SAFETY: the mutex made above; no flow uses it any more.
    unsafe { futoin_sync_free(MX.load(SeqCst)) };
}

// ---------------------------------------------------------------------------
// A stale ForeignExternal reaches no other step
// ---------------------------------------------------------------------------

/// The handle address of flow A's step (recycled later), for flow B's body.
static STALE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One iteration of flow B: the iteration that runs on the recycled handle
/// waits, and reports that it does.
unsafe extern "C" fn b_iteration(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: usize) {
    // Only the first time: later iterations get that memory again.
    if bsi as usize == STALE.load(SeqCst) && STALE.swap(0, SeqCst) != 0 {
        call!(bsi, wait_external(bsi));
        send(data, format!("iteration {i} waits on the recycled handle"));
    }
}

unsafe extern "C" fn b_loop(bsi: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    call!(bsi, repeat(bsi, data, 2000, Some(b_iteration), null_mut()));
}

/// A step waits and times out; its event comes late, through the
/// `ForeignExternal` it gave out, while the handle memory serves a waiting
/// step of another flow (handles are recycled after a quarantine of 256).
/// The late completion is refused; it used to complete the other step.
#[test]
fn a_late_completion_through_a_stale_foreign_external_is_refused() {
    use futoin_asyncsteps::cabi::{futoin_asyncsteps_new, ForeignRoot};
    let fx = Fixture::new();
    // SAFETY: a root made on the fixture's live runtime, owned here.
    let mut a = unsafe { ForeignRoot::from_raw(futoin_asyncsteps_new(fx.rt)) }.unwrap();
    let (htx, hrx) = std::sync::mpsc::channel();
    a.add(move |s, ()| {
        let h = s.wait_external();
        s.set_timeout(std::time::Duration::from_millis(10));
        htx.send((h, s.as_ptr() as usize)).unwrap();
        Ok(())
    });
    let (etx, erx) = std::sync::mpsc::channel();
    let flow_a = a.execute(move |e| etx.send(e.code().to_owned()).unwrap());
    let (ext, ptr) = hrx.recv_timeout(SECS).unwrap();
    assert_eq!(erx.recv_timeout(SECS).unwrap(), "Timeout");
    assert!(!ext.is_valid());
    STALE.store(ptr, SeqCst);
    // Flow B: a loop whose iterations take handles until one gets A's,
    // whose step then waits.
    let (root, d) = (fx.root, fx.d());
    call!(root, add(root, d, Some(b_loop), Some(report_error)));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    let waiting = fx.rx.recv_timeout(SECS).unwrap();
    assert!(
        waiting.ends_with("waits on the recycled handle"),
        "{waiting}"
    );
    // A's late event is refused, and B's step still waits.
    assert!(!ext.is_valid(), "the stale handle is not valid again");
    assert_eq!(ext.success((7i32,)).unwrap_err().code(), "InternalError");
    assert_eq!(
        ext.error("Boom", "late").unwrap_err().code(),
        "InternalError"
    );
    let b = ptr as *mut FutoInAsyncSteps;
    assert_eq!(call!(b, is_valid(b)), 1);
    // B's own completion (from this thread, as allowed for a waiting
    // step) ends its loop's iteration; the flow goes on to its end.
    call!(b, success(b, null_mut()));
    assert_eq!(fx.until_end(SECS), ["ok"]);
    drop(flow_a);
}

// ---------------------------------------------------------------------------
// A foreign lock that was granted is unlocked, however the flow ends
// ---------------------------------------------------------------------------

/// The lock step of the first test (completed later by another flow), and
/// the root that test cancels.
static LOCK_STEP: AtomicPtr<FutoInAsyncSteps> = AtomicPtr::new(null_mut());
static ROOT_A: AtomicPtr<FutoInAsyncSteps> = AtomicPtr::new(null_mut());

unsafe extern "C" fn waiting_lock(bsi: *mut FutoInAsyncSteps, s: *mut FutoInSync) {
    let d = foreign_tx(s);
    call!(bsi, set_cancel(bsi, d, Some(lock_cancelled)));
    LOCK_STEP.store(bsi, SeqCst);
    send(d, "lock waits");
}

unsafe extern "C" fn granting_unlock(_: *mut FutoInAsyncSteps, s: *mut FutoInSync) {
    send(foreign_tx(s), "unlock");
}

static WAITING_API: FutoInSyncAPI = FutoInSyncAPI {
    lock: Some(waiting_lock),
    unlock: Some(granting_unlock),
};

/// Flow B, on the same loop: cancels flow A, then grants A's lock.
unsafe extern "C" fn cancel_then_grant(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let a = ROOT_A.load(SeqCst);
    call!(a, cancel(a));
    let l = LOCK_STEP.load(SeqCst);
    let valid = call!(l, is_valid(l));
    call!(l, success(l, null_mut()));
    send(data, format!("granted (lock step valid {valid})"));
}

/// The object grants the lock (completes the waiting lock step) after a
/// root cancel was queued: the cancel ends the step first, but the object
/// has granted the lock, so it is given back.
#[test]
fn a_lock_granted_while_a_cancel_is_queued_is_unlocked() {
    use futoin_asyncsteps::cabi::futoin_asyncsteps_new;
    let fx = Fixture::new();
    ROOT_A.store(fx.root, SeqCst);
    let _obj = add_foreign_sync(&fx, &WAITING_API);
    fx.execute();
    assert_eq!(fx.rx.recv_timeout(SECS).unwrap(), "lock waits");
    // SAFETY: the fixture's live runtime.
    let b = unsafe { futoin_asyncsteps_new(fx.rt) };
    call!(
        b,
        add(b, fx.d(), Some(cancel_then_grant), Some(report_error))
    );
    call!(b, execute(b, fx.d(), Some(report_unhandled)));
    fx.wait_idle();
    let got: Vec<String> = fx.rx.try_iter().collect();
    call!(b, free(b));
    assert_eq!(got, ["granted (lock step valid 1)", "unlock"]);
}

static ROOT_C: AtomicPtr<FutoInAsyncSteps> = AtomicPtr::new(null_mut());

/// Grants at once, after queueing a cancel of its own flow.
unsafe extern "C" fn granting_lock(bsi: *mut FutoInAsyncSteps, s: *mut FutoInSync) {
    let r = ROOT_C.load(SeqCst);
    call!(r, cancel(r));
    call!(bsi, success(bsi, null_mut()));
    send(foreign_tx(s), "locked");
}

static GRANTING_API: FutoInSyncAPI = FutoInSyncAPI {
    lock: Some(granting_lock),
    unlock: Some(granting_unlock),
};

unsafe extern "C" fn nothing(_: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {}

/// A lock granted in its step: given back when a cancel comes before the
/// section, wherever the flow's step budget (1,024 steps per activation)
/// happens to end around the lock step.
#[test]
fn a_lock_granted_at_once_is_unlocked_whatever_the_step_budget() {
    for n in 1000..1040usize {
        let fx = Fixture::new();
        ROOT_C.store(fx.root, SeqCst);
        for _ in 0..n {
            call!(fx.root, add(fx.root, fx.d(), Some(nothing), None));
        }
        let _obj = add_foreign_sync(&fx, &GRANTING_API);
        fx.execute();
        fx.wait_idle();
        let got: Vec<String> = fx.rx.try_iter().collect();
        // The section runs when the lock step ends an activation's burst
        // early enough; either way the lock is given back once.
        let want: &[&str] = if got.len() == 3 {
            &["locked", "section", "unlock"]
        } else {
            &["locked", "unlock"]
        };
        assert_eq!(got, want, "{n} steps before the lock");
    }
}

// ---------------------------------------------------------------------------
// Another implementation's handle on this runtime's sync objects
// ---------------------------------------------------------------------------

static HANDLE_ERRORS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe extern "C" fn count_handle_error(
    _: *mut FutoInAsyncSteps,
    _: *const std::ffi::c_char,
    _: *const std::ffi::c_char,
) {
    HANDLE_ERRORS.fetch_add(1, SeqCst);
}

/// Another implementation's step table: only `handle_error`.
static OTHER_API: FutoInAsyncStepsAPI = FutoInAsyncStepsAPI {
    handle_error: Some(count_handle_error),
    // SAFETY: every other entry is an `Option` of a function pointer,
    // for which all zeros is `None`.
    ..unsafe { std::mem::zeroed() }
};

/// `lock` refuses it through its `handle_error`; `unlock` (which such an
/// implementation may call in its cleanup, outside any step) has nothing
/// to give back and calls nothing.
#[test]
fn another_implementations_lock_is_refused_and_its_unlock_is_a_no_op() {
    let mx = futoin_mutex_new(1, u32::MAX);
    let mut other = FutoInAsyncSteps { api: &OTHER_API };
    let bsi: *mut FutoInAsyncSteps = &mut other;
    // SAFETY: a live mutex of ours and its table; `bsi` is a handle with a
    // full table.
    unsafe { ((*(*mx).api).lock.unwrap())(bsi, mx) };
    assert_eq!(HANDLE_ERRORS.load(SeqCst), 1);
    // SAFETY: as above.
    unsafe { ((*(*mx).api).unlock.unwrap())(bsi, mx) };
    assert_eq!(HANDLE_ERRORS.load(SeqCst), 1);
    // SAFETY: the mutex made above; nothing uses it any more.
    unsafe { futoin_sync_free(mx) };
}
