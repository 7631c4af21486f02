//! [`SmallValue`]: a custom argument of one word, kept in place.

use super::CustomValue;
use crate::util::slot::{drop_impl, fits_in, store_in};
use std::any::{Any, TypeId};
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

/// The room for a value kept in place: one machine word.
type Word = usize;
type Slot = MaybeUninit<Word>;

/// What to do with the value in a [`Slot`]: one static table per type.
struct Table {
    type_id: fn() -> TypeId,
    type_name: fn() -> &'static str,
    /// Drops the value in the slot.
    drop: unsafe fn(*mut Slot),
    /// Moves the value out of the slot into a box.
    boxed: unsafe fn(*mut Slot) -> Box<dyn CustomValue>,
}

struct Tables<T>(PhantomData<fn(T)>);

impl<T: Any + Send> Tables<T> {
    const TABLE: Table = Table {
        type_id: TypeId::of::<T>,
        type_name: std::any::type_name::<T>,
        drop: drop_impl::<T, Word>,
        boxed: boxed_impl::<T>,
    };
}

/// # Safety
/// `p` holds a valid `T`, owned by the caller, not used afterwards.
unsafe fn boxed_impl<T: Any + Send>(p: *mut Slot) -> Box<dyn CustomValue> {
    // SAFETY: guaranteed by the caller: the value is moved out once.
    Box::new(unsafe { p.cast::<T>().read() })
}

/// A custom argument of at most one word (a handle, a set of flags, an
/// `Arc`), kept in place in its [`Value`](super::Value) instead of boxed:
/// such an argument costs no allocation. [`ArgValue`](super::ArgValue)'s
/// default methods make one for every type that fits, and a
/// [`Value::Custom`](super::Value::Custom) box for the others.
///
/// ```
/// use futoin_asyncsteps::{ArgValue, Value};
/// struct Flags(u32);
/// impl ArgValue for Flags {}
///
/// let v = Flags(5).into_value();
/// assert!(matches!(v, Value::Small(_)));
/// assert_eq!(Flags::from_value(v).ok().map(|f| f.0), Some(5));
/// ```
pub struct SmallValue {
    slot: UnsafeCell<Slot>,
    table: &'static Table,
}

// SAFETY: a `SmallValue` only ever holds a `T: Send` (see `new`), and owns
// it: moving it to another thread moves that value.
unsafe impl Send for SmallValue {}

impl SmallValue {
    /// Keeps `v` in place when its type fits one word (in size and
    /// alignment); gives it back otherwise.
    #[inline]
    pub fn new<T: Any + Send>(v: T) -> Result<Self, T> {
        if !fits_in::<T, Word>() {
            return Err(v);
        }
        Ok(SmallValue {
            slot: store_in::<T, Word>(v),
            table: &Tables::<T>::TABLE,
        })
    }

    /// The value, if it is a `T`; the `SmallValue` back otherwise.
    #[inline]
    pub fn take<T: Any>(self) -> Result<T, Self> {
        if (self.table.type_id)() != TypeId::of::<T>() {
            return Err(self);
        }
        let me = ManuallyDrop::new(self);
        // SAFETY: the slot holds a valid `T` (its table is `T`'s), and
        // `me` is never dropped, so the value is moved out once.
        Ok(unsafe { me.slot.get().cast::<T>().read() })
    }

    /// The Rust type name of the value.
    pub fn type_name(&self) -> &'static str {
        (self.table.type_name)()
    }

    /// The value, boxed (what a [`Value::Custom`](super::Value::Custom)
    /// holds).
    pub fn into_boxed(self) -> Box<dyn CustomValue> {
        let me = ManuallyDrop::new(self);
        // SAFETY: the slot holds a valid value of the table's type, and
        // `me` is never dropped, so the value is moved out once.
        unsafe { (me.table.boxed)(me.slot.get()) }
    }
}

impl Drop for SmallValue {
    fn drop(&mut self) {
        // SAFETY: the slot holds a valid value of the table's type, owned
        // by this `SmallValue` and dropped once, here.
        unsafe { (self.table.drop)(self.slot.get()) }
    }
}

/// The value's type name: `SmallValue(<u32>)`.
impl fmt::Debug for SmallValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SmallValue(<{}>)", self.type_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_word_is_kept_in_place_a_bigger_value_is_given_back() {
        let s = SmallValue::new(7u32).unwrap();
        assert_eq!(s.type_name(), "u32");
        assert_eq!(s.take::<u32>().ok(), Some(7));
        assert_eq!(SmallValue::new([1u64, 2]).err(), Some([1u64, 2]));
    }

    #[test]
    fn the_wrong_type_gives_the_value_back_and_it_drops_once() {
        let a = Arc::new(());
        let s = SmallValue::new(a.clone()).unwrap();
        assert_eq!(Arc::strong_count(&a), 2);
        let s = s.take::<u64>().unwrap_err();
        assert_eq!(Arc::strong_count(&a), 2);
        drop(s);
        assert_eq!(Arc::strong_count(&a), 1);
        let b = SmallValue::new(a.clone()).unwrap().into_boxed();
        assert_eq!(Arc::strong_count(&a), 2);
        assert!(b.into_any().downcast::<Arc<()>>().is_ok());
        assert_eq!(Arc::strong_count(&a), 1);
    }
}
