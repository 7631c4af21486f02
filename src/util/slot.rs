//! Values kept in place in a small slot of raw memory (a few words)
//! instead of boxed: the step callbacks, error handlers and loop drivers
//! of the engine, and small custom step args. Each user pairs a slot with
//! a static table of functions made for the value's type.

use std::cell::UnsafeCell;
use std::mem::{align_of, size_of, MaybeUninit};

/// True when a `F` fits a slot `S` (size and alignment); a constant per
/// type.
pub(crate) const fn fits_in<F, S>() -> bool {
    size_of::<F>() <= size_of::<S>() && align_of::<F>() <= align_of::<S>()
}

/// Writes `f` into a new slot of type `S`.
///
/// # Panics
/// When `F` does not fit `S` (`fits_in`); callers check first, and the
/// check is a constant, so this costs nothing.
pub(crate) fn store_in<F, S>(f: F) -> UnsafeCell<MaybeUninit<S>> {
    assert!(fits_in::<F, S>(), "a value stored in place fits its slot");
    let slot = UnsafeCell::new(MaybeUninit::<S>::uninit());
    // SAFETY: `fits_in::<F, S>()` holds (asserted above), so the slot is
    // large and aligned enough for an `F` (`UnsafeCell` and `MaybeUninit`
    // have the layout of what they wrap); it is freshly uninitialised, so
    // nothing is overwritten.
    unsafe { slot.get().cast::<F>().write(f) };
    slot
}

/// Drops the `F` in a slot of type `S`.
///
/// # Safety
/// `p` holds an owned, valid `F`, dropped here (not to be used again).
pub(crate) unsafe fn drop_impl<F, S>(p: *mut MaybeUninit<S>) {
    // SAFETY: guaranteed by the caller (see above).
    unsafe { p.cast::<F>().drop_in_place() }
}
