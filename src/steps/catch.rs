//! Error handlers stored without a heap allocation when they capture at
//! most one word.
//!
//! A handler usually captures nothing or one word (an `Arc` to report to,
//! a counter, a flag). A [`Catch`] keeps such a closure in place, in
//! one machine word beside its table, and boxes a bigger one as a `Box<F>`
//! (a thin pointer) in the same word. Either way a `Catch` is two words and
//! `Option<Catch>` is too (the table reference is never null), as small as
//! the boxed `dyn` handler it replaces, so frames and queued steps do not
//! grow; a handler that captures one word no longer costs an allocation
//! (and, for a flow spawned on another thread, a free on the loop thread of
//! memory that thread did not allocate).

use crate::error::{Error, StepResult};
use crate::steps::step::Step;
use crate::util::slot::{drop_impl, fits_in, store_in};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

/// The room for a handler kept in place: one word.
type Word = usize;
type Slot = MaybeUninit<Word>;

/// What to do with the handler in a slot: one static table per stored type.
struct Table {
    /// Moves the handler out of the slot and calls it.
    call: unsafe fn(*mut Slot, &mut Step<'_>, &Error) -> StepResult,
    /// Drops the handler in the slot.
    drop: unsafe fn(*mut Slot),
    /// Clones the handler into a new `Catch` (models only).
    clone: Option<unsafe fn(*mut Slot) -> Catch>,
    /// The slot holds a `Box` (its word is the heap address to prefetch).
    boxed: bool,
}

/// An error handler (spec `error_callback`). Invariant: `slot` holds an
/// owned, valid value of the type `table` was made for.
pub(crate) struct Catch {
    slot: UnsafeCell<Slot>,
    table: &'static Table,
    /// Neither `Send` nor `Sync`: the handler inside may be neither. Types
    /// that hold only `Send` handlers say so themselves (`AsyncSteps`).
    _local: PhantomData<*const ()>,
}

impl Drop for Catch {
    fn drop(&mut self) {
        // SAFETY: by the invariant, the slot holds an owned, valid value of
        // the table's type; it is dropped once, here (`call` takes it out of
        // a `ManuallyDrop`, so it never reaches this).
        unsafe { (self.table.drop)(self.slot.get()) }
    }
}

impl Catch {
    /// Runs the handler (it is consumed).
    #[inline]
    pub(crate) fn call(self, s: &mut Step<'_>, e: &Error) -> StepResult {
        let c = ManuallyDrop::new(self);
        // SAFETY: by the invariant, the slot holds an owned handler of the
        // table's type. `call` moves it out; `ManuallyDrop` keeps `drop`
        // from dropping it a second time.
        unsafe { (c.table.call)(c.slot.get(), s, e) }
    }

    /// A copy for a cloned model; `None` for one-shot handlers.
    pub(crate) fn try_clone(&self) -> Option<Catch> {
        let clone = self.table.clone?;
        // SAFETY: the slot holds a valid value of the table's type
        // (invariant); the pointer comes from the `UnsafeCell`, so its
        // `Clone` may use interior mutability; nothing else uses the slot
        // meanwhile (a `Catch` is neither `Send` nor `Sync`).
        Some(unsafe { clone(self.slot.get()) })
    }

    /// Prefetch hint for a boxed handler's heap memory (see
    /// `util::prefetch`); nothing for one kept in place.
    #[inline]
    pub(crate) fn prefetch(&self) {
        if self.table.boxed {
            // SAFETY: a boxed table is only made for `Box<F>` (`once_catch`,
            // `cloned_catch`), a thin pointer stored at the start of the
            // slot; reading it as a `*const u8` copies the address, which
            // is only handed to a prefetch hint, never dereferenced.
            let p = unsafe { self.slot.get().cast::<*const u8>().read() };
            crate::util::prefetch::prefetch(p, 1);
        }
    }
}

/// # Safety
/// `p` holds an owned, valid `F`, which this moves out (the caller must not
/// use or drop it again).
unsafe fn call_impl<F>(p: *mut Slot, s: &mut Step<'_>, e: &Error) -> StepResult
where
    F: FnOnce(&mut Step<'_>, &Error) -> StepResult,
{
    // SAFETY: guaranteed by the caller (see above).
    let f = unsafe { p.cast::<F>().read() };
    f(s, e)
}

/// # Safety
/// `p` holds a valid `T`, not used by anything else during the call.
unsafe fn clone_impl<T, const BOXED: bool>(p: *mut Slot) -> Catch
where
    T: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
{
    // SAFETY: guaranteed by the caller (see above).
    let v = unsafe { &*p.cast::<T>() };
    make(v.clone(), &Tables::<T, BOXED>::CLONED)
}

/// The tables of one stored type `T`: a closure kept in place, or
/// (`BOXED`) a `Box` of a bigger one.
struct Tables<T, const BOXED: bool>(PhantomData<T>);

impl<T, const BOXED: bool> Tables<T, BOXED>
where
    T: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
{
    const ONCE: Table = Table {
        call: call_impl::<T>,
        drop: drop_impl::<T, Word>,
        clone: None,
        boxed: BOXED,
    };
}

impl<T, const BOXED: bool> Tables<T, BOXED>
where
    T: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
{
    const CLONED: Table = Table {
        call: call_impl::<T>,
        drop: drop_impl::<T, Word>,
        clone: Some(clone_impl::<T, BOXED>),
        boxed: BOXED,
    };
}

/// A `Catch` holding `v` with its table. `v` fits the slot: a closure
/// checked by the caller, or a `Box` (one pointer).
fn make<T>(v: T, table: &'static Table) -> Catch {
    assert!(fits_in::<T, Slot>(), "a stored handler fits its slot");
    Catch {
        slot: store_in::<T, Word>(v),
        table,
        _local: PhantomData,
    }
}

/// Stores `f` in place with the `in_place` table when it fits the slot,
/// otherwise as a `Box<F>` with the `boxed` table.
fn place<F>(f: F, in_place: &'static Table, boxed: &'static Table) -> Catch {
    if fits_in::<F, Slot>() {
        make(f, in_place)
    } else {
        make(Box::new(f), boxed)
    }
}

/// A one-shot handler (sub-steps).
pub(crate) fn once_catch<F>(f: F) -> Catch
where
    F: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
{
    place(f, &Tables::<F, false>::ONCE, &Tables::<Box<F>, true>::ONCE)
}

/// A clonable handler (models, spec 1.5).
pub(crate) fn cloned_catch<F>(f: F) -> Catch
where
    F: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
{
    place(
        f,
        &Tables::<F, false>::CLONED,
        &Tables::<Box<F>, true>::CLONED,
    )
}

#[cfg(test)]
impl Catch {
    fn is_boxed(&self) -> bool {
        self.table.boxed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::def::StepDef;
    use crate::steps::frame::Frame;
    use crate::steps::inline::tests::Probe;
    use crate::{error::codes, AsyncSteps, TestTool};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_handler_is_two_words_as_the_boxed_one_it_replaced() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<Catch>(), 2 * word);
        assert_eq!(std::mem::size_of::<Option<Catch>>(), 2 * word);
        // A step: its callback (kind and three words), its handler; the
        // name is in the callback's table.
        assert_eq!(std::mem::size_of::<StepDef>(), 6 * word);
        // A frame: seg/seq/kind/flags, handler (2), name, wait, timer,
        // extra.
        assert_eq!(std::mem::size_of::<Frame>(), 8 * word);
    }

    #[test]
    fn one_word_captures_are_in_place_and_bigger_ones_boxed() {
        let zst = once_catch(|_: &mut Step<'_>, _: &Error| Ok(()));
        assert!(!zst.is_boxed());
        let arc = Arc::new(1u8);
        let one = once_catch(move |_: &mut Step<'_>, _: &Error| {
            assert_eq!(*arc, 1);
            Ok(())
        });
        assert!(!one.is_boxed());
        let (a, b) = (1u64, 2u64);
        let two = cloned_catch(move |_: &mut Step<'_>, _: &Error| {
            assert_eq!(a + b, 3);
            Ok(())
        });
        assert!(two.is_boxed());
        assert!(two.try_clone().unwrap().is_boxed());
        assert!(
            zst.try_clone().is_none(),
            "a one-shot handler is not cloned"
        );
    }

    #[test]
    fn a_one_word_capture_with_interior_mutability_is_cloned_in_place() {
        // `RefCell<()>` is one word (its borrow flag), and its `clone`
        // borrows, writing the flag through `&self`: the slot is an
        // `UnsafeCell`, so that is allowed.
        let cell = std::cell::RefCell::new(());
        let c = cloned_catch(move |s: &mut Step<'_>, _: &Error| {
            let _b = cell.borrow_mut();
            s.success((3u8,))
        });
        assert!(!c.is_boxed());
        let copy = c.try_clone().expect("clonable");
        let mut tool = TestTool::new();
        for c in [c, copy] {
            let mut root = AsyncSteps::new();
            root.add(|s, ()| s.error(codes::INVALID_REQUEST, "bad"));
            root.steps[0].catch = Some(c);
            let p = root.promise(&mut tool);
            assert_eq!(tool.block_on::<(u8,)>(p).unwrap().0, 3);
        }
    }

    /// A model whose step fails and whose handler, capturing `cap`, turns
    /// the error into the handler's result.
    fn model<C: Clone + Send + 'static>(cap: C, read: fn(&C) -> u64) -> AsyncSteps {
        let mut m = AsyncSteps::new();
        m.add_catch(
            |s, ()| s.error(codes::INVALID_REQUEST, "bad"),
            move |s, e| {
                assert_eq!(e.code(), codes::INVALID_REQUEST);
                s.success((read(&cap),))
            },
        );
        m
    }

    #[test]
    fn in_place_and_boxed_handlers_run_and_clone_with_their_captures() {
        let mut tool = TestTool::new();
        let small = model(Arc::new(7u64), |c| **c);
        let big = model([1u64, 2, 3, 4], |c| c.iter().sum());
        for (m, want) in [(small, 7), (big, 10)] {
            let copy = m.clone();
            let (p1, p2) = (m.promise(&mut tool), copy.promise(&mut tool));
            assert_eq!(tool.block_on::<(u64,)>(p1).unwrap().0, want);
            assert_eq!(tool.block_on::<(u64,)>(p2).unwrap().0, want);
        }
        let mut m = model([1u64, 2, 3, 4], |c| c.iter().sum());
        m.add(|s, (v,): (u64,)| s.success((v * 10,)));
        let p = m.promise(&mut tool);
        assert_eq!(tool.block_on::<(u64,)>(p).unwrap().0, 100);
    }

    #[test]
    fn each_capture_is_dropped_once_run_cloned_unrun_or_panicking() {
        let n = Arc::new(AtomicUsize::new(0));
        let mut tool = TestTool::new();
        // In place (one word) and boxed (a probe and a number): each model
        // and its clone run their handler once; two unrun handlers (one in
        // place, one boxed) are dropped; one handler panics.
        let small = {
            let p = Probe(n.clone());
            cloned_catch(move |s: &mut Step<'_>, _: &Error| {
                let _keep = &p;
                s.success(())
            })
        };
        let big = {
            let (p, k) = (Probe(n.clone()), 5u64);
            cloned_catch(move |s: &mut Step<'_>, _: &Error| {
                let _keep = &p;
                s.success((k,))
            })
        };
        let (small2, big2) = (small.try_clone().unwrap(), big.try_clone().unwrap());
        drop((small, big));
        assert_eq!(n.load(Ordering::SeqCst), 2);
        for c in [small2, big2] {
            let mut root = AsyncSteps::new();
            root.add(|s, ()| s.error(codes::INVALID_REQUEST, "bad"));
            root.steps[0].catch = Some(c);
            let p = root.promise(&mut tool);
            tool.block_on::<()>(p).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(n.load(Ordering::SeqCst), 4);
        let mut root = AsyncSteps::new();
        let p = Probe(n.clone());
        root.add_catch(
            |s, ()| s.error(codes::INVALID_REQUEST, "bad"),
            move |_, _| -> crate::StepResult {
                let _keep = &p;
                panic!("handler panics");
            },
        );
        let pr = root.promise(&mut tool);
        let e = tool.block_on::<()>(pr).unwrap_err();
        assert_eq!(e.code(), codes::INTERNAL_ERROR);
        assert_eq!(n.load(Ordering::SeqCst), 5);
    }
}
