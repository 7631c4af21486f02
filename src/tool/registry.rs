//! The live loops by id, so that a handle can reach its loop without
//! keeping it alive.
//!
//! A [`FlowHandle`](crate::FlowHandle) is made for every started flow and
//! is usually dropped at once (a detached flow). Holding an `Arc` of the
//! loop's [`Shared`] in it cost two atomic read-modify-writes per flow, a
//! tenth of a simple flow's time. The handle holds the loop's id instead
//! and looks the loop up here only when it is used (`cancel`), which is
//! rare. A loop is listed from its creation until its `Shared` is dropped.

use crate::tool::shared::Shared;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

/// Loop id → its shared side. Written when a loop is made or dropped,
/// read when a handle is used.
static LOOPS: LazyLock<RwLock<HashMap<u64, Weak<Shared>>>> = LazyLock::new(Default::default);

/// Lists `shared` under its id.
pub(crate) fn register(shared: &Arc<Shared>) {
    let w = Arc::downgrade(shared);
    LOOPS.write().insert(shared.id, w);
}

/// Removes loop `id` (its `Shared` is being dropped).
pub(crate) fn unregister(id: u64) {
    // The `Weak` is dropped after the lock is released (it never drops a
    // `Shared` itself: the last strong reference is already gone).
    let gone = LOOPS.write().remove(&id);
    drop(gone);
}

/// The loop `id` if it is still alive.
pub(crate) fn lookup(id: u64) -> Option<Arc<Shared>> {
    // The lock guard is a temporary of this statement: it is released
    // before the upgraded `Arc` can be dropped, because dropping the last
    // `Arc` unregisters, which takes the write lock.
    let w = LOOPS.read().get(&id).cloned();
    w?.upgrade()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_found_until_its_shared_side_is_dropped() {
        let s = Shared::new();
        let id = s.id;
        let found = lookup(id).expect("a live loop is listed");
        assert!(Arc::ptr_eq(&found, &s));
        drop(found);
        drop(s);
        assert!(lookup(id).is_none(), "a dropped loop is no longer listed");
        assert!(!LOOPS.read().contains_key(&id), "its entry is removed");
    }
}
