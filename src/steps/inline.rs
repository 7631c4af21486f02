//! Step callbacks stored without a heap allocation when they are small.
//!
//! Most execute callbacks capture nothing or one or two words (an `Arc`,
//! an index). A [`Callback`] keeps such a closure in place, in two machine
//! words, and boxes only bigger ones, so `add()` of a small closure
//! allocates nothing. (A [`StackRef`](crate::StackRef) is three words: it
//! names its loop too, so a closure capturing one is boxed.)

use crate::args::FromArgs;
use crate::error::StepResult;
use crate::steps::def::{ExecFn, NameFn};
use crate::steps::step::Step;
use crate::util::slot::{drop_impl, fits_in, store_in};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

/// The room for a closure kept in place: two words.
type Words = [usize; 2];
type Slot = MaybeUninit<Words>;

/// The slot as stored: behind an `UnsafeCell`, because a captured value
/// may mutate itself through `&self` (a `RefCell`'s `clone` does), which a
/// plain shared reference to the bytes would not allow.
type Cell = UnsafeCell<Slot>;

/// What to do with the closure in a [`Slot`]: one static table per
/// closure type (and args type).
struct Table {
    /// Moves the closure out of the slot and calls it.
    call: unsafe fn(*mut Slot, &mut Step<'_>) -> StepResult,
    /// Drops the closure in the slot.
    drop: unsafe fn(*mut Slot),
    /// Clones the closure into a new callback (models only).
    clone: Option<unsafe fn(*mut Slot) -> Callback>,
    /// The step's name for `async_stack`: kept here, with the closure's
    /// type, so a step definition needs no field for it.
    name: NameFn,
}

/// A closure kept in place. Invariant: `slot` holds a valid value of the
/// closure type `table` was made for, owned by this `Inline`.
pub(crate) struct Inline {
    slot: Cell,
    table: &'static Table,
    /// Neither `Send` nor `Sync`: the closure inside may be neither (like
    /// a boxed `dyn ExecFn`). Types that hold only `Send` closures say so
    /// themselves (`AsyncSteps`).
    _local: PhantomData<*const ()>,
}

impl Drop for Inline {
    fn drop(&mut self) {
        // SAFETY: by the invariant, the slot holds an owned, valid closure
        // of the table's type; it is dropped once, here (`call` takes the
        // value out of a `ManuallyDrop`, so it never reaches this).
        unsafe { (self.table.drop)(self.slot.get()) }
    }
}

/// An execute callback: in place when small enough, boxed otherwise.
pub(crate) enum Callback {
    Inline(Inline),
    Boxed(Box<dyn ExecFn>),
}

impl Callback {
    /// Runs the callback (it is consumed).
    #[inline]
    pub(crate) fn call(self, s: &mut Step<'_>) -> StepResult {
        match self {
            Callback::Inline(i) => {
                let i = ManuallyDrop::new(i);
                // SAFETY: by the invariant, the slot holds an owned closure
                // of the table's type. `call` moves it out; `ManuallyDrop`
                // keeps `Inline::drop` from dropping it a second time.
                unsafe { (i.table.call)(i.slot.get(), s) }
            }
            Callback::Boxed(b) => b.call(s),
        }
    }

    /// A copy for a cloned model; `None` for one-shot callbacks.
    pub(crate) fn try_clone(&self) -> Option<Callback> {
        match self {
            Callback::Inline(i) => {
                let clone = i.table.clone?;
                // SAFETY: the slot holds a valid closure of the table's
                // type (invariant). The pointer comes from the `UnsafeCell`,
                // so the closure's `Clone` may even mutate it through
                // `&self` (interior mutability); nothing else uses the slot
                // meanwhile (the holder is neither `Send` nor `Sync`).
                Some(unsafe { clone(i.slot.get()) })
            }
            Callback::Boxed(b) => b.try_clone().map(Callback::Boxed),
        }
    }

    /// The step's name for `async_stack`.
    #[inline]
    pub(crate) fn name(&self) -> NameFn {
        match self {
            Callback::Inline(i) => i.table.name,
            Callback::Boxed(b) => b.name(),
        }
    }
}

/// True when a `F` fits this module's slot.
const fn fits<F>() -> bool {
    fits_in::<F, Slot>()
}

/// Writes `f` into a new slot of this module. Only called when `fits::<F>()`.
fn store<F>(f: F) -> Cell {
    store_in::<F, Words>(f)
}

/// # Safety
/// `p` holds an owned, valid `F`, which this moves out (the caller must not
/// use or drop it again).
unsafe fn call_impl<F, A>(p: *mut Slot, s: &mut Step<'_>) -> StepResult
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult,
    A: FromArgs,
{
    // SAFETY: guaranteed by the caller (see above).
    let f = unsafe { p.cast::<F>().read() };
    // On an args mismatch `f` is dropped here, like a boxed callback.
    let a = A::from_args(s.args())?;
    f(s, a)
}

/// # Safety
/// `p` holds a valid `F`, not used by anything else during the call (it is
/// reached through a shared reference, and `F::clone` may use interior
/// mutability, which the `UnsafeCell` around the slot allows).
unsafe fn clone_impl<F, A, N: 'static>(p: *mut Slot) -> Callback
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    // SAFETY: guaranteed by the caller (see above).
    let f = unsafe { &*p.cast::<F>() };
    cloned_named::<N, F, A>(f.clone())
}

/// The tables of one closure type `F` taking `A`, for a step named after
/// the type `N` (usually `F` itself; a wrapper is named after what it
/// wraps).
struct Tables<F, A, N>(PhantomData<fn(F, A) -> N>);

impl<F, A, N: 'static> Tables<F, A, N>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    const ONCE: Table = Table {
        call: call_impl::<F, A>,
        drop: drop_impl::<F, Words>,
        clone: None,
        name: std::any::type_name::<N>,
    };
}

impl<F, A, N: 'static> Tables<F, A, N>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    const CLONED: Table = Table {
        call: call_impl::<F, A>,
        drop: drop_impl::<F, Words>,
        clone: Some(clone_impl::<F, A, N>),
        name: std::any::type_name::<N>,
    };
}

/// A one-shot callback (sub-steps), named after `F`.
#[inline]
pub(crate) fn once<F, A>(f: F) -> Callback
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    once_named::<F, F, A>(f)
}

/// A one-shot callback named after `N` (a wrapper named after the
/// callback it wraps).
pub(crate) fn once_named<N: 'static, F, A>(f: F) -> Callback
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    if fits::<F>() {
        Callback::Inline(Inline {
            slot: store(f),
            table: &Tables::<F, A, N>::ONCE,
            _local: PhantomData,
        })
    } else {
        Callback::Boxed(crate::steps::def::boxed_once::<N, F, A>(f))
    }
}

/// A clonable callback (models, spec 1.5), named after `F`.
#[inline]
pub(crate) fn cloned<F, A>(f: F) -> Callback
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    cloned_named::<F, F, A>(f)
}

/// A clonable callback named after `N`.
pub(crate) fn cloned_named<N: 'static, F, A>(f: F) -> Callback
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    if fits::<F>() {
        Callback::Inline(Inline {
            slot: store(f),
            table: &Tables::<F, A, N>::CLONED,
            _local: PhantomData,
        })
    } else {
        Callback::Boxed(crate::steps::def::boxed_cloned::<N, F, A>(f))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::{AsyncSteps, Error, TestTool};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts drops of the values it is cloned into (also used by the
    /// tests of `catch`).
    #[derive(Clone)]
    pub(in crate::steps) struct Probe(pub(in crate::steps) Arc<AtomicUsize>);

    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn small_closures_are_inline_and_big_ones_boxed() {
        let p = Probe(Arc::new(AtomicUsize::new(0)));
        let small = once(move |_: &mut Step<'_>, ()| {
            let _keep = &p;
            Ok(())
        });
        assert!(matches!(small, Callback::Inline(_)));
        let big = [7u64; 4];
        let large = once(move |_: &mut Step<'_>, ()| {
            assert_eq!(big[3], 7);
            Ok(())
        });
        assert!(matches!(large, Callback::Boxed(_)));
        let zst = once(|_: &mut Step<'_>, ()| Ok(()));
        assert!(matches!(zst, Callback::Inline(_)));
        // An over-aligned capture does not fit the slot.
        #[derive(Clone, Copy)]
        #[repr(align(32))]
        struct Wide(u8);
        let w = Wide(1);
        let wide = once(move |_: &mut Step<'_>, ()| {
            // Uses the whole value, so the closure captures all of it.
            let w: &Wide = std::hint::black_box(&w);
            assert_eq!(w.0, 1);
            Ok(())
        });
        assert!(matches!(wide, Callback::Boxed(_)));
    }

    #[test]
    fn a_capture_with_interior_mutability_is_cloned_in_place() {
        // `RefCell::clone` writes its borrow flag through `&self`: the slot
        // is an `UnsafeCell`, so that is allowed.
        let cell = std::cell::RefCell::new(3u8);
        let mut tool = TestTool::new();
        let mut model = AsyncSteps::new();
        model.add(move |s, ()| {
            let v = *cell.borrow();
            s.success((v,))
        });
        assert!(matches!(
            model.steps[0].exec,
            crate::steps::def::Exec::Fn(Callback::Inline(_))
        ));
        let copy = model.clone();
        let (p1, p2) = (model.promise(&mut tool), copy.promise(&mut tool));
        assert_eq!(tool.block_on::<(u8,)>(p1).unwrap().0, 3);
        assert_eq!(tool.block_on::<(u8,)>(p2).unwrap().0, 3);
    }

    #[test]
    fn an_unrun_callback_drops_its_capture_once() {
        let n = Arc::new(AtomicUsize::new(0));
        let p = Probe(n.clone());
        let c = once(move |_: &mut Step<'_>, ()| {
            let _keep = &p;
            Ok(())
        });
        assert_eq!(n.load(Ordering::SeqCst), 0);
        drop(c);
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn run_clone_and_mismatch_drop_each_capture_once() {
        let n = Arc::new(AtomicUsize::new(0));
        let p = Probe(n.clone());
        let mut tool = TestTool::new();
        let mut model = AsyncSteps::new();
        // Two words (an Arc and a u64): inline, clonable.
        let k = 5u64;
        model.add(move |s, ()| {
            let _keep = &p;
            s.success((k,))
        });
        let mut copy = model.clone();
        // The second step expects the wrong type: its capture is dropped
        // without running.
        let p2 = Probe(n.clone());
        copy.add(move |_, (_x,): (String,)| {
            let _keep = &p2;
            Ok(())
        });
        let pr = copy.promise(&mut tool);
        let r = tool.block_on::<()>(pr);
        assert_eq!(r.unwrap_err().code(), crate::error::codes::INTERNAL_ERROR);
        let pm = model.promise(&mut tool);
        let m = tool.block_on::<(u64,)>(pm);
        assert_eq!(m.unwrap().0, 5);
        // The model's probe, its clone's and the failed step's: three drops
        // of three values (the originals moved into the closures).
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_panicking_inline_callback_drops_its_capture() {
        let n = Arc::new(AtomicUsize::new(0));
        let p = Probe(n.clone());
        let mut tool = TestTool::new();
        let mut root = AsyncSteps::new();
        root.add(move |_, ()| -> Result<(), Error> {
            let _keep = &p;
            panic!("boom");
        });
        let pr = root.promise(&mut tool);
        let r = tool.block_on::<()>(pr);
        assert_eq!(r.unwrap_err().code(), crate::error::codes::INTERNAL_ERROR);
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }
}
