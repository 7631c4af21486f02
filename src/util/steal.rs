//! Taking an item from a crossbeam queue another thread may take from too.

use crossbeam_deque::Steal;

/// Runs a crossbeam steal until it gives an answer: the item, or `None`
/// when the queue is empty (`Retry`, a race with another stealer, is
/// retried at once).
pub(crate) fn steal<T>(mut f: impl FnMut() -> Steal<T>) -> Option<T> {
    loop {
        match f() {
            Steal::Success(t) => return Some(t),
            Steal::Empty => return None,
            Steal::Retry => std::hint::spin_loop(),
        }
    }
}
