//! Sync objects across the C boundary: this runtime's Mutex, Throttle and
//! Limiter as `FutoInSync*`, and `addSync` with any `FutoInSync` (ours, or
//! a foreign one driven through its `lock`/`unlock`).

use super::callback::{catch_fn, exec_fn, run_raw, run_raw_waiting, SendPtr};
use super::handle::{fail_step, is_ours, with_detached};
use super::types::*;
use crate::args::Args;
use crate::error::{codes, Error, StepResult};
use crate::steps::external::ExternalHandle;
use crate::steps::step::Step;
use crate::sync::{ISync, Limiter, LimiterOptions, Mutex, Section, Throttle};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Any of our sync objects, as one clonable `ISync`.
#[derive(Clone)]
pub(crate) struct AnySync(Arc<dyn ISync>);

impl ISync for AnySync {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0.sync(s, args, section)
    }
}

/// A `FutoInSync` made here.
#[repr(C)]
struct OurSync {
    hdr: FutoInSync,
    obj: AnySync,
}

fn new_sync(obj: impl ISync) -> *mut FutoInSync {
    Box::into_raw(Box::new(OurSync {
        hdr: FutoInSync { api: &OUR_SYNC_API },
        obj: AnySync(Arc::new(obj)),
    }))
    .cast()
}

fn queue(max_queue: u32) -> Option<u32> {
    (max_queue != u32::MAX).then_some(max_queue)
}

/// `futoin_mutex_new`: see the header.
#[no_mangle]
pub extern "C" fn futoin_mutex_new(max: u32, max_queue: u32) -> *mut FutoInSync {
    new_sync(Mutex::new(max, queue(max_queue)))
}

/// `futoin_throttle_new`: see the header.
#[no_mangle]
pub extern "C" fn futoin_throttle_new(max: u32, period_ms: u32, max_queue: u32) -> *mut FutoInSync {
    new_sync(Throttle::new(
        max,
        Duration::from_millis(period_ms.into()),
        queue(max_queue),
    ))
}

/// `futoin_limiter_new`: see the header. `rate` 0 means no rate limit
/// (the Limiter is then just its concurrency Mutex).
#[no_mangle]
pub extern "C" fn futoin_limiter_new(
    concurrent: u32,
    max_queue: u32,
    rate: u32,
    period_ms: u32,
    burst: u32,
) -> *mut FutoInSync {
    if rate == 0 {
        return new_sync(Mutex::new(concurrent, Some(max_queue)));
    }
    new_sync(Limiter::new(LimiterOptions {
        concurrent,
        max_queue,
        rate,
        period: Duration::from_millis(period_ms.into()),
        burst,
    }))
}

/// `futoin_sync_free`: see the header.
///
/// # Safety
/// `sync` is NULL, a foreign object, or one of ours not freed before.
#[no_mangle]
pub unsafe extern "C" fn futoin_sync_free(sync: *mut FutoInSync) {
    // SAFETY: caller's contract: readable up to `api`.
    if sync.is_null() || !std::ptr::eq(unsafe { (*sync).api }, &OUR_SYNC_API) {
        return;
    }
    // SAFETY: ours, made by `new_sync` and not freed before (caller's
    // contract). Only this `FutoInSync` goes: every flow that queued a
    // step of it holds its own Arc, taken by `sync_ref` at addSync().
    drop(unsafe { Box::from_raw(sync.cast::<OurSync>()) });
}

/// `lock`/`unlock` called directly (not through `addSync`): this runtime's
/// sync objects protect a section, so they are used with `addSync`.
unsafe extern "C" fn our_lock(bsi: *mut FutoInAsyncSteps, _sync: *mut FutoInSync) {
    not_implemented(bsi, "lock()");
}

/// As `lock`: the section's end gives the slot back, not a call. Only a
/// step of this runtime is failed: another implementation's `lock` was
/// refused, so nothing is held, and it may call `unlock` in its cleanup,
/// outside any step, where its `handle_error` could not be called.
unsafe extern "C" fn our_unlock(bsi: *mut FutoInAsyncSteps, _sync: *mut FutoInSync) {
    // SAFETY: the handle the caller passed: NULL or readable up to `api`.
    if unsafe { is_ours(bsi) } {
        not_implemented(bsi, "unlock()");
    }
}

/// Fails the step of `bsi` with `NotImplemented`: this runtime's sync
/// objects are used through `addSync`, not called directly.
fn not_implemented(bsi: *mut FutoInAsyncSteps, what: &'static str) {
    let info = "this runtime's sync objects are used through addSync(), not lock()/unlock()";
    // SAFETY: the handle the caller passed: NULL or readable up to `api`.
    if unsafe { is_ours(bsi) } {
        fail_step(bsi, what, Error::with_info(codes::NOT_IMPLEMENTED, info));
    } else if let Some(he) =
        // SAFETY: a foreign handle (or NULL) and its table, as the spec
        // lays them out.
        unsafe { bsi.as_ref().and_then(|b| b.api.as_ref()) }
            .and_then(|a| a.handle_error)
    {
        let info = std::ffi::CString::new(info).expect("no NUL");
        // SAFETY: the foreign handle's own handle_error.
        unsafe { he(bsi, c"NotImplemented".as_ptr(), info.as_ptr()) };
    }
}

static OUR_SYNC_API: FutoInSyncAPI = FutoInSyncAPI {
    lock: Some(our_lock),
    unlock: Some(our_unlock),
};

/// The critical section: the C step, getting the args the sync step got.
fn section(f: ExecuteCallback, eh: ErrorCallback, d: SendPtr) -> Result<Section, Error> {
    if f.is_none() {
        return Err(Error::internal("addSync(): the execute callback is NULL"));
    }
    Ok(match eh {
        None => Section::new(exec_fn(f, d)),
        Some(eh) => Section::with_catch(exec_fn(f, d), catch_fn(eh, d)),
    })
}

/// What an `addSync` step enters, taken when the step is added.
#[derive(Clone)]
pub(crate) enum SyncRef {
    /// One of ours: a reference of the step's own, so `futoin_sync_free`
    /// before the step runs (or while it runs) frees only the `FutoInSync`.
    Ours(AnySync),
    /// Another implementation's object: its owner keeps it alive while
    /// flows use it (header contract).
    Foreign(SendPtr),
}

/// The error of `addSync` with a NULL sync object.
pub(crate) fn null_sync() -> Error {
    Error::internal("addSync(): the sync object is NULL")
}

/// What `sync` refers to, for an `addSync` step; None for NULL.
///
/// # Safety
/// `sync` is NULL or a `FutoInSync` readable up to its `api` field: one of
/// ours not freed yet, or a foreign one that outlives the flows using it.
pub(crate) unsafe fn sync_ref(sync: *mut FutoInSync) -> Option<SyncRef> {
    // SAFETY: caller's contract: NULL or readable up to `api`.
    let obj = unsafe { sync.as_ref() }?;
    if std::ptr::eq(obj.api, &OUR_SYNC_API) {
        // SAFETY: only `new_sync` makes objects with this table, as an
        // OurSync; it is not freed yet (caller's contract).
        let ours = unsafe { &*(sync as *const OurSync) }.obj.clone();
        return Some(SyncRef::Ours(ours));
    }
    Some(SyncRef::Foreign(SendPtr(sync.cast())))
}

/// Adds an `addSync` step to `s`.
///
/// # Safety
/// As [`sync_ref`].
pub(crate) unsafe fn add_sync(
    s: &mut Step<'_>,
    sync: *mut FutoInSync,
    d: SendPtr,
    f: ExecuteCallback,
    eh: ErrorCallback,
) -> Result<(), Error> {
    // SAFETY: caller's contract.
    let target = unsafe { sync_ref(sync) }.ok_or_else(null_sync)?;
    // SAFETY: a foreign object outlives the flows using it (caller's
    // contract, carried into the step); ours is held by `target`.
    s.add(move |s, a: Args| unsafe { sync_now(s, a, target, d, f, eh) });
    Ok(())
}

/// The body of an `addSync` step: enters `target`, runs the section with
/// `args`, leaves.
///
/// # Safety
/// A [`SyncRef::Foreign`] object is alive, and stays alive until the step
/// and the unlock it may leave behind are done.
pub(crate) unsafe fn sync_now(
    s: &mut Step<'_>,
    args: Args,
    target: SyncRef,
    d: SendPtr,
    f: ExecuteCallback,
    eh: ErrorCallback,
) -> StepResult {
    let sync = match target {
        SyncRef::Ours(ours) => return ours.sync(s, args, section(f, eh, d)?),
        SyncRef::Foreign(p) => p.get().cast::<FutoInSync>(),
    };
    // SAFETY: caller's contract: a live foreign object with its table.
    let (lock, unlock) = match unsafe { (*sync).api.as_ref() } {
        Some(FutoInSyncAPI {
            lock: Some(l),
            unlock: Some(u),
        }) => (*l, *u),
        _ => {
            return Err(Error::internal(
                "addSync(): the sync object has no lock/unlock",
            ))
        }
    };
    foreign(s, args, sync, lock, unlock, section(f, eh, d)?)
}

type LockFn = unsafe extern "C" fn(*mut FutoInAsyncSteps, *mut FutoInSync);

/// Where a foreign sync object's lock stands, for its [`Unlocker`].
enum Lock {
    /// Not asked yet, refused, or given back.
    Free,
    /// Granted: the lock step succeeded in its callback.
    Held,
    /// The lock step waits: the lock is granted once the object completes
    /// that step successfully through its handle (even when a root cancel
    /// then ends the step first: the object has granted it).
    Waiting(ExternalHandle),
}

/// Unlocks a foreign sync object whose lock was granted when the normal
/// exit did not unlock it (an error, a cancel, a timeout). A lock step that
/// failed, timed out or was cancelled before the object completed it is
/// not followed by `unlock`: the object never granted that lock.
struct Unlocker {
    sync: *mut FutoInSync,
    unlock: LockFn,
    lock: RefCell<Lock>,
    root_id: isize,
}

impl Drop for Unlocker {
    fn drop(&mut self) {
        let granted = match self.lock.replace(Lock::Free) {
            Lock::Free => false,
            Lock::Held => true,
            Lock::Waiting(h) => h.succeeded_by_handle(),
        };
        if granted {
            let (sync, unlock) = (self.sync, self.unlock);
            // SAFETY: the foreign object's own unlock, once per lock.
            with_detached(self.root_id, |b| unsafe { unlock(b, sync) });
        }
    }
}

/// A foreign sync object: a lock step (the object may wait and complete it
/// later), the section, then an unlock step; an `Unlocker` covers every
/// other way out.
fn foreign(
    s: &mut Step<'_>,
    args: Args,
    sync: *mut FutoInSync,
    lock: LockFn,
    unlock: LockFn,
    section: Section,
) -> StepResult {
    let guard = Rc::new(Unlocker {
        sync,
        unlock,
        lock: RefCell::new(Lock::Free),
        root_id: s.root_id(),
    });
    s.stack(guard.clone());
    let g = guard.clone();
    s.add(move |s, _: Args| {
        // SAFETY: the foreign object's own lock.
        let (r, ext) = run_raw_waiting(s, |b| unsafe { lock(b, sync) });
        *g.lock.borrow_mut() = match (&r, ext) {
            (Err(_), _) => Lock::Free,
            (Ok(()), Some(h)) if !s.has_succeeded() => Lock::Waiting(h),
            (Ok(()), _) => Lock::Held,
        };
        r
    });
    section.add_to(s, args);
    s.add(move |s, a: Args| {
        *guard.lock.borrow_mut() = Lock::Free;
        // SAFETY: the foreign object's own unlock, once per lock.
        run_raw(s, |b| unsafe { unlock(b, sync) })?;
        s.success(a)
    });
    Ok(())
}
