//! A loop's driver ([`LoopIter`]): in place when it fits two machine
//! words, boxed otherwise, as step callbacks are (see `inline`). The
//! driver of a `repeat` whose body captures nothing (a count and an index)
//! fits, so starting such a loop allocates nothing. Like a callback, the
//! driver knows the loop's name for `async_stack`, so a queued loop step
//! stays six words.

use crate::error::StepResult;
use crate::steps::def::NameFn;
use crate::steps::step::Step;
use crate::util::slot::{drop_impl, fits_in, store_in};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

/// The room for a driver kept in place: two words.
type Words = [usize; 2];
type Slot = MaybeUninit<Words>;

/// What to do with the driver in a [`Slot`]: one static table per driver
/// type.
struct Table {
    /// Runs the driver once (it stays in the slot).
    call: unsafe fn(*mut Slot, &mut Step<'_>) -> Option<StepResult>,
    /// Drops the driver in the slot.
    drop: unsafe fn(*mut Slot),
    /// The loop's name for `async_stack`.
    name: NameFn,
}

/// A driver kept in place. Invariant: `slot` holds a valid value of the
/// driver type `table` was made for, owned by this `Inline`.
pub(crate) struct Inline {
    slot: UnsafeCell<Slot>,
    table: &'static Table,
    /// Neither `Send` nor `Sync`, like a boxed driver.
    _local: PhantomData<*const ()>,
}

impl Drop for Inline {
    fn drop(&mut self) {
        // SAFETY: by the invariant, the slot holds an owned, valid driver
        // of the table's type; it is dropped once, here.
        unsafe { (self.table.drop)(self.slot.get()) }
    }
}

/// A loop driver: produces the next iteration by running the body on the
/// given step, or `None` when the loop condition ends the loop.
pub(crate) enum LoopIter {
    Inline(Inline),
    Boxed(Box<dyn Driver>),
}

/// A boxed driver, with the loop's name.
pub(crate) trait Driver {
    fn call(&mut self, s: &mut Step<'_>) -> Option<StepResult>;
    fn name(&self) -> NameFn;
}

/// Driver `F` of a loop named after `N`.
struct Named<F, N>(F, PhantomData<fn() -> N>);

impl<F, N: 'static> Driver for Named<F, N>
where
    F: FnMut(&mut Step<'_>) -> Option<StepResult>,
{
    fn call(&mut self, s: &mut Step<'_>) -> Option<StepResult> {
        (self.0)(s)
    }
    fn name(&self) -> NameFn {
        std::any::type_name::<N>
    }
}

/// # Safety
/// `p` holds a valid `F`, which nothing else uses during the call.
unsafe fn call_impl<F>(p: *mut Slot, s: &mut Step<'_>) -> Option<StepResult>
where
    F: FnMut(&mut Step<'_>) -> Option<StepResult>,
{
    // SAFETY: guaranteed by the caller (see above); the driver stays in
    // the slot, borrowed for this call only.
    let f = unsafe { &mut *p.cast::<F>() };
    f(s)
}

/// The table of one driver type `F`, of a loop named after `N`.
struct Tables<F, N>(PhantomData<fn(F) -> N>);

impl<F, N: 'static> Tables<F, N>
where
    F: FnMut(&mut Step<'_>) -> Option<StepResult> + 'static,
{
    const TABLE: Table = Table {
        call: call_impl::<F>,
        drop: drop_impl::<F, Words>,
        name: std::any::type_name::<N>,
    };
}

impl LoopIter {
    /// The driver `f` of a loop named after `N` (its body's type), in
    /// place when it fits.
    #[inline]
    pub(crate) fn new<N: 'static, F>(f: F) -> Self
    where
        F: FnMut(&mut Step<'_>) -> Option<StepResult> + 'static,
    {
        if fits_in::<F, Words>() {
            LoopIter::Inline(Inline {
                slot: store_in::<F, Words>(f),
                table: &Tables::<F, N>::TABLE,
                _local: PhantomData,
            })
        } else {
            LoopIter::Boxed(Box::new(Named::<F, N>(f, PhantomData)))
        }
    }

    /// The loop's name for `async_stack`.
    #[inline]
    pub(crate) fn name(&self) -> NameFn {
        match self {
            LoopIter::Inline(i) => i.table.name,
            LoopIter::Boxed(b) => b.name(),
        }
    }

    /// Runs the driver once: the next iteration's result, or `None` when
    /// the loop is over.
    #[inline]
    pub(crate) fn call(&mut self, s: &mut Step<'_>) -> Option<StepResult> {
        match self {
            LoopIter::Inline(i) => {
                // SAFETY: by the invariant, the slot holds a valid driver
                // of the table's type, and `&mut self` keeps anything else
                // from using it during the call.
                unsafe { (i.table.call)(i.slot.get(), s) }
            }
            LoopIter::Boxed(b) => b.call(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AsyncSteps, TestTool};
    use std::rc::Rc;

    #[test]
    fn a_small_driver_is_kept_in_place_a_big_one_boxed() {
        let (count, mut i) = (3usize, 0usize);
        let small = LoopIter::new::<u8, _>(move |_: &mut Step<'_>| {
            i += 1;
            (i <= count).then_some(Ok(()))
        });
        assert!(matches!(small, LoopIter::Inline(_)));
        assert_eq!((small.name())(), "u8");
        let big = [7u64; 4];
        let boxed = LoopIter::new::<u16, _>(move |_: &mut Step<'_>| {
            (big.iter().sum::<u64>() > 100).then_some(Ok(()))
        });
        assert!(matches!(boxed, LoopIter::Boxed(_)));
        assert_eq!((boxed.name())(), "u16");
    }

    /// A driver in place is dropped with its `LoopIter`, once.
    #[test]
    fn a_driver_in_place_is_dropped_once() {
        let kept = Rc::new(());
        let k = kept.clone();
        let d = LoopIter::new::<(), _>(move |_: &mut Step<'_>| {
            let _ = &k;
            None
        });
        assert!(matches!(d, LoopIter::Inline(_)));
        assert_eq!(Rc::strong_count(&kept), 2);
        drop(d);
        assert_eq!(Rc::strong_count(&kept), 1);
    }

    /// A `repeat` whose body captures nothing runs on a driver in place,
    /// which keeps its index from iteration to iteration.
    #[test]
    fn a_driver_in_place_keeps_its_state_from_call_to_call() {
        let mut tool = TestTool::new();
        let mut root = AsyncSteps::new();
        root.add(|s, ()| {
            s.state().set("n", 0usize);
            s.repeat(4, |s, i| {
                *s.state().get_mut::<usize>("n").unwrap() += i;
                Ok(())
            });
            s.add(|s, ()| {
                let n = *s.state().get::<usize>("n").unwrap();
                s.success((n,))
            });
            Ok(())
        });
        let p = root.promise::<(usize,)>(&mut tool);
        assert_eq!(tool.block_on(p).unwrap().0, 6);
    }
}
