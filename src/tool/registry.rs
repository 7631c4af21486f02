//! The live loops by id, so that a handle can reach its loop without
//! keeping it alive.
//!
//! A [`FlowHandle`](crate::FlowHandle) is made for every started flow and
//! is usually dropped at once (a detached flow). Holding an `Arc` of the
//! loop's inbox in it cost two atomic read-modify-writes per flow, a
//! tenth of a simple flow's time. The handle holds the loop's id instead
//! and looks the loop up here only when it is used (`cancel`), which is
//! rare. A loop is listed from its creation until its inbox is dropped.
//!
//! The table keeps each inbox as `dyn Any`, so it needs to know neither the
//! engine nor its messages; [`lookup`] gives it back as the type asked for.

use parking_lot::RwLock;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

type Entry = Weak<dyn Any + Send + Sync>;

/// Loop id → its inbox. Written when a loop is made or dropped, read when
/// a handle is used.
static LOOPS: LazyLock<RwLock<HashMap<u64, Entry>>> = LazyLock::new(Default::default);

/// Lists `inbox` under `id`.
pub(crate) fn register<T: Any + Send + Sync>(id: u64, inbox: &Arc<T>) {
    let w: Entry = Arc::downgrade(inbox) as Entry;
    LOOPS.write().insert(id, w);
}

/// Removes loop `id` (its inbox is being dropped).
pub(crate) fn unregister(id: u64) {
    // The `Weak` is dropped after the lock is released (it never drops an
    // inbox itself: the last strong reference is already gone).
    let gone = LOOPS.write().remove(&id);
    drop(gone);
}

/// The inbox of loop `id` if the loop is still alive and its inbox is a
/// `T`.
pub(crate) fn lookup<T: Any + Send + Sync>(id: u64) -> Option<Arc<T>> {
    // The lock guard is a temporary of this statement: it is released
    // before the upgraded `Arc` can be dropped, because dropping the last
    // `Arc` unregisters, which takes the write lock.
    let w = LOOPS.read().get(&id).cloned();
    w?.upgrade()?.downcast::<T>().ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Stands for an inbox: unregisters itself when dropped.
    struct Listed(u64);

    impl Drop for Listed {
        fn drop(&mut self) {
            unregister(self.0);
        }
    }

    #[test]
    fn a_loop_is_found_until_its_shared_side_is_dropped() {
        let id = u64::MAX - 7;
        let s = Arc::new(Listed(id));
        register(id, &s);
        let found = lookup::<Listed>(id).expect("a live loop is listed");
        assert!(Arc::ptr_eq(&found, &s));
        assert!(lookup::<String>(id).is_none(), "asked as another type");
        drop(found);
        drop(s);
        assert!(
            lookup::<Listed>(id).is_none(),
            "a dropped loop is no longer listed"
        );
        assert!(!LOOPS.read().contains_key(&id), "its entry is removed");
    }
}
