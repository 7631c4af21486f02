//! The time of a loop for code that runs inside its work without being
//! handed the loop (a sync object's slot given back when a step's frame
//! is dropped): the real clock, or the virtual clock of the `TestTool`
//! whose event runs on this thread.
//!
//! A `TestTool` marks itself for the time of each event; the mark before
//! it comes back after. A real-time loop marks nothing (its passes pay
//! nothing for this): its time is the real clock.

use std::cell::Cell;
use std::time::Instant;

/// A virtual-clock loop whose event runs on this thread, and its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Here {
    /// The loop's id (`Inbox::id`).
    id: u64,
    /// Its virtual time.
    at: Instant,
}

thread_local! {
    static HERE: Cell<Option<Here>> = const { Cell::new(None) };
}

/// The virtual-clock loop `id` at time `at` marked as running on this
/// thread until the value is dropped (the mark before it comes back then).
#[must_use = "the mark lasts as long as the value"]
pub(crate) struct Mark(Option<Here>);

impl Mark {
    pub(crate) fn new(id: u64, at: Instant) -> Mark {
        // `try_with`: an event run during thread-local teardown is not
        // marked.
        let before = HERE
            .try_with(|h| h.replace(Some(Here { id, at })))
            .ok()
            .flatten();
        Mark(before)
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        let _ = HERE.try_with(|h| h.set(self.0));
    }
}

/// The time now of loop `id`: its virtual time while one of its events
/// runs on this thread, else the real clock.
pub(crate) fn now_of(id: u64) -> Instant {
    match HERE.try_with(Cell::get) {
        Ok(Some(h)) if h.id == id => h.at,
        _ => Instant::now(),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_mark_gives_its_loop_its_time_while_it_lasts() {
        std::thread::spawn(|| {
            let t = Instant::now() + Duration::from_secs(3600);
            let real = |id| {
                let before = Instant::now();
                let n = now_of(id);
                n >= before && n < t
            };
            assert!(real(7), "unmarked: the real clock");
            let outer = Mark::new(7, t);
            assert_eq!(now_of(7), t);
            assert!(real(8), "another loop: the real clock");
            {
                let t2 = t + Duration::from_secs(1);
                let _inner = Mark::new(8, t2);
                assert_eq!(now_of(8), t2);
                assert!(real(7), "the inner mark is the one that counts");
            }
            assert_eq!(now_of(7), t, "the outer mark is back");
            drop(outer);
            assert!(real(7));
        })
        .join()
        .unwrap();
    }
}
