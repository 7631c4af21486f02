//! Which loop the calling thread is running, and that loop's clock: for
//! code that runs inside a loop's work without being handed the loop (a
//! sync object's slot given back when a step's frame is dropped).
//!
//! A loop marks itself for the time of each pass (`Core::run_pass`), of
//! each event (`TestTool`), and of its drop (`Scheduler`'s, which cancels
//! its flows); the mark before it comes back after. Code run outside any
//! of these reads no loop (`None`), rather than whichever ran last.

use std::cell::Cell;
use std::time::Instant;

/// The loop the calling thread runs now (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Here {
    /// The loop's id (`Inbox::id`).
    pub(crate) id: u64,
    /// A virtual clock's time (`TestTool`); `None`: the real clock.
    virtual_now: Option<Instant>,
}

impl Here {
    /// The loop's time now: the virtual clock, or the real one read now.
    pub(crate) fn now(&self) -> Instant {
        self.virtual_now.unwrap_or_else(Instant::now)
    }
}

thread_local! {
    static HERE: Cell<Option<Here>> = const { Cell::new(None) };
}

/// Loop `id` marked as the one this thread runs, until the value is
/// dropped (the mark before it comes back then); `virtual_now` is its
/// time when its clock is virtual.
#[must_use = "the mark lasts as long as the value"]
pub(crate) struct Mark(Option<Here>);

impl Mark {
    #[inline]
    pub(crate) fn new(id: u64, virtual_now: Option<Instant>) -> Mark {
        // `try_with`: a loop run during thread-local teardown is not marked.
        let before = HERE
            .try_with(|h| h.replace(Some(Here { id, virtual_now })))
            .ok()
            .flatten();
        Mark(before)
    }
}

impl Drop for Mark {
    #[inline]
    fn drop(&mut self) {
        let _ = HERE.try_with(|h| h.set(self.0));
    }
}

/// The loop this thread runs, if it has run one.
#[inline]
pub(crate) fn here() -> Option<Here> {
    HERE.try_with(Cell::get).ok().flatten()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_mark_lasts_as_long_as_its_value_and_restores_the_one_before() {
        std::thread::spawn(|| {
            assert_eq!(here(), None);
            let t = Instant::now() + Duration::from_secs(5);
            let outer = Mark::new(7, Some(t));
            let h = here().expect("marked");
            assert_eq!((h.id, h.now()), (7, t));
            {
                let _inner = Mark::new(8, None);
                let before = Instant::now();
                let h = here().expect("marked");
                assert_eq!(h.id, 8);
                assert!(h.now() >= before, "the real clock");
            }
            assert_eq!(here().map(|h| h.id), Some(7), "the outer mark is back");
            drop(outer);
            assert_eq!(here(), None);
        })
        .join()
        .unwrap();
    }
}
