//! Sync objects through the C interface: one freed while a flow has its
//! step queued stays alive for the flow; a foreign `FutoInSync`'s lock
//! that is never granted is not unlocked, one that was granted is
//! unlocked however the flow ends; another implementation's handle on
//! this runtime's sync objects is refused.
//!
//! Regression tests: each guards against a defect fixed in the C
//! interface. Each drives the function tables as a C program would and
//! states the documented result.

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use crate::fixture::*;
use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{futoin_mutex_new, futoin_sync_free};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};

// ---------------------------------------------------------------------------
// Sync objects freed while a flow has their step queued
// ---------------------------------------------------------------------------

unsafe extern "C" fn in_section(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "section");
}

/// Allocations of the size a freed `FutoInSync` had, so that reading it
/// afterwards reads something else (each its own heap block).
#[allow(clippy::vec_box)]
fn reuse_freed_memory() -> Vec<Box<[usize; 3]>> {
    (0..64).map(|i| Box::new([i; 3])).collect()
}

/// `futoin_sync_free` after a root's addSync() queued the object, before
/// the flow runs: "flows still using one keep it alive".
#[test]
fn sync_freed_after_root_add_sync_stays_alive_for_the_flow() {
    if ran_in_child("sync_objects::sync_freed_after_root_add_sync_stays_alive_for_the_flow") {
        return;
    }
    let fx = Fixture::new();
    let mx = futoin_mutex_new(1, u32::MAX);
    call!(
        fx.root,
        add_sync(fx.root, mx, fx.d(), Some(in_section), None)
    );
    call!(fx.root, add(fx.root, fx.d(), Some(report_ok), None));
    // SAFETY: made by futoin_mutex_new, freed once.
    unsafe { futoin_sync_free(mx) };
    let junk = reuse_freed_memory();
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["section", "ok"]);
    drop(junk);
}

static MX: AtomicPtr<FutoInSync> = AtomicPtr::new(null_mut());

unsafe extern "C" fn queue_sync_then_free(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let mx = MX.load(SeqCst);
    call!(bsi, add_sync(bsi, mx, data, Some(in_section), None));
    // SAFETY: made by futoin_mutex_new, freed once; the queued step uses it.
    unsafe { futoin_sync_free(mx) };
    std::mem::forget(reuse_freed_memory());
}

/// The same from a step: the sync object is freed in the callback that
/// queued its step.
#[test]
fn sync_freed_after_step_add_sync_stays_alive_for_the_flow() {
    if ran_in_child("sync_objects::sync_freed_after_step_add_sync_stays_alive_for_the_flow") {
        return;
    }
    let fx = Fixture::new();
    MX.store(futoin_mutex_new(1, u32::MAX), SeqCst);
    call!(
        fx.root,
        add(
            fx.root,
            fx.d(),
            Some(queue_sync_then_free),
            Some(report_error)
        )
    );
    call!(fx.root, add(fx.root, fx.d(), Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["section", "ok"]);
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
