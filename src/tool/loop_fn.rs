//! A loop callback (`immediate`, `deferred`) stored without a heap
//! allocation when it is small.
//!
//! The callback a timer runs most often captures one word: an
//! `ExternalHandle` it completes, an `Arc`. [`LoopFn`] keeps such a
//! closure in place, in one machine word beside its table, and boxes only
//! bigger ones (the `Box` then takes that word), so
//! `deferred(delay, move |_| h.success(()))` allocates nothing. One word,
//! not two as a step callback: a task of the loop's table stays as large
//! as it was (a boxed `dyn FnOnce` is two words too).

use crate::util::slot::{drop_impl, fits_in, store_in};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

type Words = [usize; 1];
type Slot = MaybeUninit<Words>;

/// What to do with the value in a slot: one static table per closure
/// type (and per way it is kept).
struct Table<H> {
    /// Moves the value out of the slot and runs the closure.
    call: unsafe fn(*mut Slot, &mut H),
    /// Drops the value in the slot.
    drop: unsafe fn(*mut Slot),
    /// The slot holds a `Box` of the closure (read by the tests only).
    #[cfg_attr(not(test), allow(dead_code))]
    boxed: bool,
}

/// A loop callback: the closure in place when it fits one word, else the
/// one-word `Box` of it, and the table for what is there. Two words
/// either way, as a boxed `dyn FnOnce` is. Invariant: `slot` holds a
/// valid value of the type `table` was made for, owned by this `LoopFn`.
pub(crate) struct LoopFn<H: 'static> {
    slot: UnsafeCell<Slot>,
    table: &'static Table<H>,
    /// Neither `Send` nor `Sync`, like a boxed loop callback.
    _local: PhantomData<*const ()>,
}

impl<H: 'static> Drop for LoopFn<H> {
    fn drop(&mut self) {
        // SAFETY: by the invariant, the slot holds an owned, valid value
        // of the table's type; it is dropped once, here (`call` takes it
        // out of a `ManuallyDrop`, so a called one never reaches this).
        unsafe { (self.table.drop)(self.slot.get()) }
    }
}

/// # Safety
/// `p` holds an owned, valid `F`, moved out here (not to be used again).
unsafe fn call_inline<F: FnOnce(&mut H), H>(p: *mut Slot, h: &mut H) {
    // SAFETY: guaranteed by the caller (see above).
    let f = unsafe { p.cast::<F>().read() };
    f(h)
}

/// # Safety
/// `p` holds an owned, valid `Box<F>`, moved out here (not to be used
/// again).
unsafe fn call_boxed<F: FnOnce(&mut H), H>(p: *mut Slot, h: &mut H) {
    // SAFETY: guaranteed by the caller (see above).
    let f = unsafe { p.cast::<Box<F>>().read() };
    f(h)
}

struct Tables<F, H>(PhantomData<fn(F) -> H>);

impl<F: FnOnce(&mut H) + 'static, H: 'static> Tables<F, H> {
    const INLINE: Table<H> = Table {
        call: call_inline::<F, H>,
        drop: drop_impl::<F, Words>,
        boxed: false,
    };
    const BOXED: Table<H> = Table {
        call: call_boxed::<F, H>,
        drop: drop_impl::<Box<F>, Words>,
        boxed: true,
    };
}

impl<H: 'static> LoopFn<H> {
    /// `f`, kept in place when it fits one word, else boxed.
    #[inline]
    pub(crate) fn new<F: FnOnce(&mut H) + 'static>(f: F) -> Self {
        let (slot, table) = if fits_in::<F, Slot>() {
            (store_in::<F, Words>(f), &Tables::<F, H>::INLINE)
        } else {
            (
                store_in::<Box<F>, Words>(Box::new(f)),
                &Tables::<F, H>::BOXED,
            )
        };
        LoopFn {
            slot,
            table,
            _local: PhantomData,
        }
    }

    /// Whether the closure had to be boxed (tests).
    #[cfg(test)]
    fn is_boxed(&self) -> bool {
        self.table.boxed
    }

    /// Runs the callback (consuming it).
    #[inline]
    pub(crate) fn call(self, h: &mut H) {
        let f = ManuallyDrop::new(self);
        // SAFETY: by the invariant, the slot holds an owned value of the
        // table's type. `call` moves it out; `ManuallyDrop` keeps `drop`
        // from dropping it a second time.
        unsafe { (f.table.call)(f.slot.get(), h) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_callback_is_two_words_as_a_boxed_one() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<LoopFn<u32>>(), 2 * word);
    }

    #[test]
    fn small_callbacks_stay_in_place_and_run_or_drop_once() {
        let hits = Rc::new(std::cell::Cell::new(0));
        // One word (an `Rc`): in place.
        let h2 = hits.clone();
        let f = LoopFn::<u32>::new(move |n: &mut u32| {
            *n += 1;
            h2.set(h2.get() + 1);
        });
        assert!(!f.is_boxed());
        let mut n = 0;
        f.call(&mut n);
        assert_eq!((n, hits.get(), Rc::strong_count(&hits)), (1, 1, 1));
        // Dropped uncalled: its capture goes.
        let h3 = hits.clone();
        let f = LoopFn::<u32>::new(move |_: &mut u32| drop(h3));
        assert_eq!(Rc::strong_count(&hits), 2);
        drop(f);
        assert_eq!(Rc::strong_count(&hits), 1);
        // Two words: boxed, and runs the same.
        let (a, b) = (hits.clone(), 5u64);
        let f = LoopFn::<u32>::new(move |n: &mut u32| {
            *n += b as u32;
            a.set(a.get() + 1);
        });
        assert!(f.is_boxed());
        f.call(&mut n);
        assert_eq!((n, hits.get(), Rc::strong_count(&hits)), (6, 2, 1));
    }
}
