//! Per-flow state: a typed map plus the predefined FTN12 variables
//! `error_info`, `last_exception` and `async_stack` (spec 1.7).
//!
//! State values must be `Clone + Send + 'static`: cloning a model flow
//! (spec 1.5) copies its state, and a model may be sent to the loop that runs it.
//! Wrap values that cannot be cloned in an `Arc`.
//!
//! ```
//! use futoin_asyncsteps::State;
//! let mut st = State::new();
//! st.set("answer", 42i32);
//! assert_eq!(st.get::<i32>("answer"), Some(&42));
//! assert_eq!(st.get::<u8>("answer"), None); // wrong type
//! *st.get_mut::<i32>("answer").unwrap() += 1;
//! assert_eq!(st.remove::<i32>("answer"), Some(43));
//! assert!(!st.contains("answer"));
//! ```

use crate::error::Error;
use smallvec::SmallVec;
use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

trait StateValue: Any + Send {
    fn clone_box(&self) -> Box<dyn StateValue>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Any + Send + Clone> StateValue for T {
    fn clone_box(&self) -> Box<dyn StateValue> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// A pooled flow keeps its emptied `Inner` when its map was used (and
/// these buffers up to `KEEP` entries), so the next flow on it sets keys
/// and records errors without allocating. One that only recorded errors
/// goes back to the loop's [`StatePool`] instead.
#[derive(Default)]
struct Inner {
    map: HashMap<Cow<'static, str>, Box<dyn StateValue>>,
    /// `error_info` when `has_info` (the buffer is kept for reuse).
    info: String,
    has_info: bool,
    last_exception: Option<Error>,
    /// The steps from the outermost to the one that raised the last error,
    /// as the functions that name them: recording an error calls none of
    /// them (an indirect call each). Inline up to `STACK_INLINE`: a flow
    /// recording its first error allocates nothing for it.
    async_stack: SmallVec<[NameFn; STACK_INLINE]>,
    /// The names of `async_stack`, made when first read.
    names: std::cell::OnceCell<Box<[&'static str]>>,
}

/// A function giving a step's name for `async_stack` (the engine's
/// `NameFn`: a type's name, known at compile time).
pub(crate) type NameFn = fn() -> &'static str;

/// `async_stack` names stored in `Inner` itself (most flows fail a few
/// levels deep).
const STACK_INLINE: usize = 4;

/// Buffers of a cleared `Inner` bigger than this are not kept.
const KEEP: usize = 64;

impl Inner {
    fn set_info(&mut self, info: Option<&str>) {
        self.info.clear();
        if let Some(s) = info {
            self.info.push_str(s);
        }
        self.has_info = info.is_some();
    }
}

/// Emptied `Inner`s whose map was never used: the error records of flows
/// that only failed (a timeout recovered, say). The loop keeps them, not
/// its pooled flows, so a flow waiting in a step holds none: a loop whose
/// flows all once timed out would otherwise carry one per waiting flow
/// (160 bytes each; 18 MB at the peak of a million timer flows).
// Boxed: an `Inner` moves between a `State` and the pool as one pointer.
#[allow(clippy::vec_box)]
#[derive(Default)]
pub(crate) struct StatePool(Vec<Box<Inner>>);

/// At most this many `Inner`s are kept per loop: only flows that have
/// recorded an error and not yet ended hold one each.
const STATE_POOL_MAX: usize = 1024;

/// The state map of one flow, shared by all its steps and parallel branches.
///
/// Allocates nothing until first written.
#[derive(Default)]
pub struct State(Option<Box<Inner>>);

impl State {
    /// Prefetch hint: brings the state's storage into the cache (see
    /// `util::prefetch`).
    #[inline]
    pub(crate) fn prefetch(&self) {
        if let Some(inner) = &self.0 {
            crate::util::prefetch::prefetch(&**inner, 3);
        }
    }

    /// An empty state.
    pub const fn new() -> Self {
        State(None)
    }

    /// Empties the state, dropping each value on its own, so a panicking
    /// `Drop` neither skips the others nor leaks the map; the first panic
    /// is returned for the caller to raise. The allocation is kept for
    /// the next flow (see `Inner`).
    #[inline]
    pub(crate) fn clear_catching(&mut self) -> Option<Box<dyn Any + Send>> {
        // Most flows never touch their state: no call for them.
        let inner = self.0.as_mut()?;
        Self::drain_catching(inner)
    }

    fn drain_catching(inner: &mut Inner) -> Option<Box<dyn Any + Send>> {
        inner.has_info = false;
        if inner.info.capacity() > KEEP {
            inner.info = String::new();
        }
        inner.last_exception = None;
        if inner.async_stack.capacity() > KEEP {
            inner.async_stack = SmallVec::new();
        } else {
            inner.async_stack.clear();
        }
        if inner.names.get().is_some() {
            inner.names = Default::default();
        }
        if inner.map.is_empty() {
            // Only the predefined variables were used (an error recorded,
            // say): no drain to set up and tear down.
            if inner.map.capacity() > KEEP {
                inner.map = HashMap::new();
            }
            return None;
        }
        let mut first = None;
        for (_, v) in inner.map.drain() {
            // A second payload is leaked, not dropped: its own `Drop` may
            // panic too (see `util::panic`).
            crate::util::panic::drop_caught(v, &mut first);
        }
        if inner.map.capacity() > KEEP {
            inner.map = HashMap::new();
        }
        first
    }

    /// For a cleared state (after [`clear_catching`](Self::clear_catching)):
    /// gives its storage to the loop's `pool` when its map has no buffer
    /// (never used, or one of more than `KEEP` entries that the clear
    /// dropped); a map that keeps its buffer stays with the flow.
    #[inline]
    pub(crate) fn recycle(&mut self, pool: &mut StatePool) {
        if let Some(i) = &self.0 {
            if i.map.capacity() == 0 && pool.0.len() < STATE_POOL_MAX {
                pool.0.extend(self.0.take());
            }
        }
    }

    /// Takes `other` unless it is empty: an empty model state keeps this
    /// (cleared) allocation for reuse.
    #[inline]
    pub(crate) fn adopt(&mut self, other: State) {
        if other.0.is_some() {
            *self = other;
        }
    }

    fn inner(&mut self) -> &mut Inner {
        self.0.get_or_insert_with(Default::default)
    }

    /// Sets `key` to `value`, replacing any previous value.
    pub fn set<T: Any + Send + Clone>(&mut self, key: impl Into<Cow<'static, str>>, value: T) {
        self.inner().map.insert(key.into(), Box::new(value));
    }

    /// The value at `key` when it exists and has type `T`.
    pub fn get<T: Any>(&self, key: &str) -> Option<&T> {
        self.0
            .as_ref()?
            .map
            .get(key)
            .and_then(|v| (**v).as_any().downcast_ref())
    }

    /// Mutable access to the value at `key` when it exists and has type `T`.
    pub fn get_mut<T: Any>(&mut self, key: &str) -> Option<&mut T> {
        self.0
            .as_mut()?
            .map
            .get_mut(key)
            .and_then(|v| (**v).as_any_mut().downcast_mut())
    }

    /// True when `key` holds a value of any type.
    pub fn contains(&self, key: &str) -> bool {
        self.0.as_ref().is_some_and(|i| i.map.contains_key(key))
    }

    /// Removes `key` and returns its value when it has type `T`. A value
    /// of another type stays in place (as with [`get`](Self::get)) and
    /// `None` is returned; [`contains`](Self::contains) tells the two cases
    /// apart.
    ///
    /// ```
    /// use futoin_asyncsteps::State;
    /// let mut st = State::new();
    /// st.set("n", 5u32);
    /// assert_eq!(st.remove::<String>("n"), None); // wrong type: kept
    /// assert_eq!(st.remove::<u32>("n"), Some(5));
    /// assert!(!st.contains("n"));
    /// ```
    pub fn remove<T: Any>(&mut self, key: &str) -> Option<T> {
        let map = &mut self.0.as_mut()?.map;
        if !(**map.get(key)?).as_any().is::<T>() {
            return None;
        }
        let v = map.remove(key)?;
        v.into_any().downcast().ok().map(|b| *b)
    }

    /// The keys currently set, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().flat_map(|i| i.map.keys().map(|k| k.as_ref()))
    }

    /// `error_info`: the info of the last error raised, `None` when it had none.
    pub fn error_info(&self) -> Option<&str> {
        let i = self.0.as_ref()?;
        i.has_info.then_some(i.info.as_str())
    }

    /// `last_exception`: the last error raised in this flow.
    pub fn last_exception(&self) -> Option<&Error> {
        self.0.as_ref()?.last_exception.as_ref()
    }

    /// `async_stack`: the type names of the step callbacks from the outermost
    /// step to the one that raised the last error.
    pub fn async_stack(&self) -> &[&'static str] {
        match &self.0 {
            Some(i) => i
                .names
                .get_or_init(|| i.async_stack.iter().map(|name| name()).collect()),
            None => &[],
        }
    }

    /// Sets `error_info` now (the C interface's `handle_error` makes it
    /// readable before the callback returns).
    pub(crate) fn set_error_info(&mut self, info: Option<&str>) {
        self.inner().set_info(info);
    }

    /// Records `e` as the last error; `stack` fills `async_stack` (its
    /// buffer is reused). A state with no storage yet takes it from the
    /// loop's `pool`.
    pub(crate) fn record_error(
        &mut self,
        pool: &mut StatePool,
        e: &Error,
        stack: impl FnOnce(&mut SmallVec<[NameFn; STACK_INLINE]>),
    ) {
        if self.0.is_none() {
            self.0 = pool.0.pop();
        }
        let i = self.inner();
        i.set_info(e.info());
        i.last_exception = Some(e.clone());
        i.async_stack.clear();
        if i.names.get().is_some() {
            i.names = Default::default();
        }
        stack(&mut i.async_stack);
    }

    /// Copies the entries of `other` whose keys are not set here (spec `copyFrom`).
    pub(crate) fn copy_missing(&mut self, other: &State) {
        if let Some(o) = &other.0 {
            if o.map.is_empty() {
                return;
            }
            let me = self.inner();
            for (k, v) in &o.map {
                me.map.entry(k.clone()).or_insert_with(|| (**v).clone_box());
            }
        }
    }
}

impl Clone for State {
    fn clone(&self) -> Self {
        let mut s = State::new();
        if let Some(i) = &self.0 {
            let me = s.inner();
            for (k, v) in &i.map {
                me.map.insert(k.clone(), (**v).clone_box());
            }
            me.set_info(i.has_info.then_some(i.info.as_str()));
            me.last_exception = i.last_exception.clone();
            me.async_stack = i.async_stack.clone();
        }
        s
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("keys", &self.keys().collect::<Vec<_>>())
            .field("error_info", &self.error_info())
            .field("last_exception", &self.last_exception())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_missing_keeps_own() {
        let mut a = State::new();
        a.set("x", 1u8);
        let mut b = State::new();
        b.set("x", 2u8);
        b.set("y", 3u8);
        a.copy_missing(&b);
        assert_eq!(a.get::<u8>("x"), Some(&1));
        assert_eq!(a.get::<u8>("y"), Some(&3));
    }

    #[test]
    fn record_error_resets_info() {
        let mut s = State::new();
        let mut pool = StatePool::default();
        s.record_error(&mut pool, &Error::with_info("A", "a"), |v| v.push(|| "f"));
        assert_eq!(s.error_info(), Some("a"));
        s.record_error(&mut pool, &Error::new("B"), |_| {});
        assert_eq!(s.error_info(), None);
        assert_eq!(s.last_exception().unwrap().code(), "B");
    }

    /// `async_stack` beyond its inline names, then shorter after the state
    /// was cleared for reuse: exactly the names of the last record.
    #[test]
    fn async_stack_spills_and_is_reset() {
        let mut s = State::new();
        let deep: [NameFn; 6] = [|| "a", || "b", || "c", || "d", || "e", || "f"];
        let mut pool = StatePool::default();
        s.record_error(&mut pool, &Error::new("A"), |v| v.extend(deep));
        assert_eq!(s.async_stack(), ["a", "b", "c", "d", "e", "f"]);
        // Read again: the same names, made once.
        assert_eq!(s.async_stack(), ["a", "b", "c", "d", "e", "f"]);
        assert!(s.clear_catching().is_none());
        assert_eq!(s.async_stack(), [] as [&str; 0]);
        assert!(s.last_exception().is_none());
        s.record_error(&mut pool, &Error::new("B"), |v| v.push(|| "g"));
        assert_eq!(s.async_stack(), ["g"]);
        assert_eq!(s.last_exception().unwrap().code(), "B");
    }

    /// An error-only state gives its storage to the pool and the next
    /// record takes that same storage; a state whose map was used keeps
    /// its own; the pool stops at its bound.
    #[test]
    fn error_only_storage_goes_to_the_pool_and_comes_back() {
        let mut pool = StatePool::default();
        let mut a = State::new();
        a.record_error(&mut pool, &Error::with_info("A", "a"), |v| v.push(|| "f"));
        let storage = &**a.0.as_ref().unwrap() as *const Inner;
        assert!(a.clear_catching().is_none());
        a.recycle(&mut pool);
        assert!(a.0.is_none());
        assert_eq!(pool.0.len(), 1);

        let mut b = State::new();
        b.record_error(&mut pool, &Error::new("B"), |_| {});
        assert_eq!(&**b.0.as_ref().unwrap() as *const Inner, storage);
        assert!(pool.0.is_empty());
        assert_eq!(b.error_info(), None);
        assert_eq!(b.last_exception().unwrap().code(), "B");

        let mut c = State::new();
        c.set("k", 1u8);
        c.record_error(&mut pool, &Error::new("C"), |_| {});
        assert!(c.clear_catching().is_none());
        c.recycle(&mut pool);
        assert!(c.0.is_some(), "a used map stays with its flow");
        assert!(pool.0.is_empty());

        let mut states: Vec<State> = (0..=STATE_POOL_MAX)
            .map(|_| {
                let mut s = State::new();
                s.record_error(&mut StatePool::default(), &Error::new("D"), |_| {});
                assert!(s.clear_catching().is_none());
                s
            })
            .collect();
        for s in &mut states {
            s.recycle(&mut pool);
        }
        assert!(states[STATE_POOL_MAX].0.is_some(), "beyond the bound");
        assert_eq!(pool.0.len(), STATE_POOL_MAX);
    }

    /// A map emptied by `remove` is still cleared for reuse, and values
    /// set after it are dropped by the next clear.
    #[test]
    fn clear_after_removes_and_sets() {
        let mut s = State::new();
        s.set("x", 1u8);
        assert_eq!(s.remove::<u8>("x"), Some(1));
        assert!(s.clear_catching().is_none());
        let v = std::sync::Arc::new(());
        s.set("y", v.clone());
        assert_eq!(std::sync::Arc::strong_count(&v), 2);
        assert!(s.clear_catching().is_none());
        assert_eq!(std::sync::Arc::strong_count(&v), 1);
        assert!(!s.contains("y"));
    }
}
