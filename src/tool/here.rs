//! Which loop the calling thread is running, and that loop's clock: for
//! code that runs inside a loop's work without being handed the loop (a
//! sync object's slot given back when a step's frame is dropped).
//!
//! A loop marks itself at the start of each pass (`Core::run_pass`) and
//! `TestTool` at each event; the mark stays until another loop of the same
//! thread runs. A thread that runs one loop (every loop of a `Runtime`, an
//! `AsyncTool`) therefore always reads its own loop; one that runs several
//! `TestTool`s reads the one whose event runs.

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

/// Marks loop `id` as the one this thread runs; `virtual_now` is its time
/// when its clock is virtual.
#[inline]
pub(crate) fn enter(id: u64, virtual_now: Option<Instant>) {
    // `try_with`: a loop run during thread-local teardown is not marked.
    let _ = HERE.try_with(|h| h.set(Some(Here { id, virtual_now })));
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
    fn the_mark_is_the_last_loop_entered_with_its_clock() {
        std::thread::spawn(|| {
            assert_eq!(here(), None);
            let t = Instant::now() + Duration::from_secs(5);
            enter(7, Some(t));
            let h = here().expect("marked");
            assert_eq!((h.id, h.now()), (7, t));
            enter(8, None);
            let before = Instant::now();
            let h = here().expect("marked");
            assert_eq!(h.id, 8);
            assert!(h.now() >= before, "the real clock");
        })
        .join()
        .unwrap();
    }
}
