//! Where the Rust closures (and values) given to a foreign flow live.
//!
//! A closure added from a step is boxed and its pointer is the callback's
//! `data`. The box is owned by a pointer-sized cell from the step's
//! `stack()` (freed with the step, after its sub-steps), or, where the
//! implementation gives no stack (a root, an error handler of some
//! implementations), by an arena kept in the root's state variable
//! [`ARENA`] (freed when the root's state is cleaned up).

use crate::cabi::types::*;
use crate::error::Error;
use parking_lot::Mutex;
use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The state variable that holds a root's [`Arena`].
pub(super) const ARENA: &CStr = c"futoin_asyncsteps::wrap::arena";

/// Boxed values owned by a root's state: each pointer with its drop.
#[derive(Default)]
pub(super) struct Arena(Mutex<Vec<Owned>>);

/// A boxed value as a raw pointer, with the function that drops it.
type Owned = (*mut c_void, unsafe fn(*mut c_void));

// SAFETY: the arena only holds boxes of `Send` values (see `Keeper::keep`),
// and drops each exactly once, on whichever thread drops the arena.
unsafe impl Send for Arena {}
// SAFETY: the list is behind a mutex; the values are never touched here
// except to drop them.
unsafe impl Sync for Arena {}

impl Drop for Arena {
    fn drop(&mut self) {
        for (p, drop_fn) in self.0.get_mut().drain(..) {
            // SAFETY: each entry is a pointer from `Box::into_raw` with the
            // matching `drop_box::<T>`, pushed once.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe { drop_fn(p) }));
        }
    }
}

/// Drops a `Box<T>` given as a raw pointer.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw` and is dropped once.
unsafe fn drop_box<T>(p: *mut c_void) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p as *mut T) });
}

/// The `stack()` cleanup of a cell that holds a `*mut T` from a box.
unsafe extern "C" fn drop_cell<T>(cell: *mut c_void) {
    // SAFETY: the cell is the pointer-sized block `Keeper::keep` asked
    // for (maybe unaligned); it holds NULL or a box pointer written once.
    let p = unsafe { (cell as *mut *mut T).read_unaligned() };
    if !p.is_null() {
        // SAFETY: written by `Keeper::keep` from `Box::into_raw`; this
        // cleanup runs once per cell.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { drop_box::<T>(p.cast()) }));
    }
}

unsafe extern "C" fn arena_new(_: *mut c_void) -> *mut c_void {
    Box::into_raw(Box::<Arena>::default()).cast()
}

unsafe extern "C" fn arena_free(_: *mut c_void, v: *mut c_void) {
    if !v.is_null() {
        // SAFETY: `v` is the arena `arena_new` made; the state variable's
        // cleanup runs once.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { drop_box::<Arena>(v) }));
    }
}

/// The root arena reached through `bsi` (made on first use), or NULL.
///
/// # Safety
/// `bsi` is a live handle with the table `api`.
pub(super) unsafe fn arena_of(
    bsi: *mut FutoInAsyncSteps,
    api: &FutoInAsyncStepsAPI,
) -> *const Arena {
    let Some(sv) = api.state_variable else {
        return std::ptr::null();
    };
    // SAFETY: the caller's live handle; the allocate/cleanup pair above.
    unsafe {
        sv(
            bsi,
            std::ptr::null_mut(),
            ARENA.as_ptr(),
            Some(arena_new),
            Some(arena_free),
        )
    }
    .cast()
}

/// Who owns the boxes made for one handle's callbacks.
#[derive(Clone, Copy)]
pub(super) enum Keeper {
    /// The running step: its `stack()`, else its root's arena.
    Step(*mut FutoInAsyncSteps, *const FutoInAsyncStepsAPI),
    /// A root's arena (set up before the root runs).
    Arena(*const Arena),
}

impl Keeper {
    /// Boxes `v` and gives the box to the owner; the pointer stays valid
    /// until the owner frees it.
    ///
    /// # Safety
    /// For `Step`: a live step handle inside its callback. For `Arena`: a
    /// live arena.
    pub(super) unsafe fn keep<T: Send + 'static>(self, v: T) -> Result<*mut T, Error> {
        let p = Box::into_raw(Box::new(v));
        let arena = match self {
            Keeper::Step(bsi, api) => {
                // SAFETY: the caller's live handle and its table.
                let api = unsafe { &*api };
                if let Some(stack) = api.stack {
                    let size = std::mem::size_of::<*mut T>();
                    // SAFETY: as above; `drop_cell::<T>` matches the cell.
                    let cell = unsafe { stack(bsi, size, Some(drop_cell::<T>)) };
                    if !cell.is_null() {
                        // SAFETY: `cell` is at least pointer-sized memory
                        // of this step; alignment is not assumed.
                        unsafe { (cell as *mut *mut T).write_unaligned(p) };
                        return Ok(p);
                    }
                }
                // SAFETY: as above.
                unsafe { arena_of(bsi, api) }
            }
            Keeper::Arena(a) => a,
        };
        // SAFETY: NULL or a live arena (the caller's contract, or just
        // returned by the implementation's stateVariable).
        match unsafe { arena.as_ref() } {
            Some(a) => {
                a.0.lock().push((p.cast(), drop_box::<T>));
                Ok(p)
            }
            None => {
                // SAFETY: `p` is ours, never given out.
                drop(unsafe { Box::from_raw(p) });
                Err(Error::internal(
                    "wrap: the implementation gave neither stack() nor stateVariable() \
                     memory to keep a Rust callback in",
                ))
            }
        }
    }
}
