//! Dropping several user values where each `Drop` may panic.
//!
//! Rust's drop glue for a vector or an array goes on dropping the other
//! elements after one panics, and a second panic while the first unwinds
//! aborts the process. The engine holds users' values in such containers
//! (a step's `stack()` values, success args), so it drops them one at a
//! time here instead: each panic is caught, every value is dropped, and
//! the first panic is raised again afterwards — unless the thread is
//! already unwinding, when raising it would abort: it is then dropped
//! quietly (the panic already on its way becomes the flow's
//! `InternalError`).

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// A panic payload caught while dropping, kept until every value is gone.
pub(crate) type Payload = Box<dyn Any + Send>;

/// Drops `v`, catching a panic of its `Drop`; the first payload caught is
/// kept in `first`. A later payload is leaked, since its own `Drop` may
/// panic too.
#[inline]
pub(crate) fn drop_caught<T>(v: T, first: &mut Option<Payload>) {
    call_caught(move || drop(v), first);
}

/// Runs `f` (user code that may panic), catching a panic: the first
/// payload caught is kept in `first`, a later one is leaked (its own
/// `Drop` may panic too).
#[inline]
pub(crate) fn call_caught(f: impl FnOnce(), first: &mut Option<Payload>) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
        keep_first(p, first);
    }
}

/// Keeps `p` in `first` if it is the first payload caught; leaks it
/// otherwise.
#[inline]
pub(crate) fn keep_first(p: Payload, first: &mut Option<Payload>) {
    match first {
        None => *first = Some(p),
        Some(_) => std::mem::forget(p),
    }
}

/// Drops a caught panic's payload, whose `Drop` may panic too (it is a
/// user value, passed to `panic_any`): that panic is caught, and its own
/// payload is leaked rather than dropped, so nothing unwinds out of here.
pub(crate) fn drop_payload(p: Payload) {
    let mut again = None;
    drop_caught(p, &mut again);
    std::mem::forget(again);
}

/// The message of a panic payload (a `&str` or a `String`; any other
/// payload says so), the payload itself dropped here, safely (see
/// [`drop_payload`]).
pub(crate) fn message(p: Payload) -> String {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    drop_payload(p);
    msg
}

/// Raises `first` again, unless the thread is unwinding already (that
/// would abort); then the payload is leaked.
#[inline]
pub(crate) fn rethrow(first: Option<Payload>) {
    if let Some(p) = first {
        if std::thread::panicking() {
            std::mem::forget(p);
        } else {
            resume_unwind(p);
        }
    }
}

/// Drops every element of `v` in order (as dropping the vector would),
/// each on its own, keeping the first panic in `first`. `v` keeps its
/// buffer.
#[inline]
pub(crate) fn drain_caught<T>(v: &mut Vec<T>, first: &mut Option<Payload>) {
    for x in v.drain(..) {
        drop_caught(x, first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local!(static DROPPED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) });

    struct Noisy(u32, bool);
    impl Drop for Noisy {
        fn drop(&mut self) {
            DROPPED.with_borrow_mut(|d| d.push(self.0));
            if self.1 {
                panic!("drop {}", self.0);
            }
        }
    }

    #[test]
    fn every_value_is_dropped_and_the_first_panic_raised() {
        let mut v = vec![Noisy(1, true), Noisy(2, false), Noisy(3, true)];
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut first = None;
            drain_caught(&mut v, &mut first);
            rethrow(first);
        }));
        let msg = r.unwrap_err().downcast::<String>().unwrap();
        assert_eq!(*msg, "drop 1", "in order: 1 panicked first");
        assert!(v.is_empty());
        assert_eq!(DROPPED.with_borrow(|d| d.clone()), [1, 2, 3]);
    }

    #[test]
    fn while_unwinding_the_panics_stay_inside() {
        struct DrainOnDrop(Vec<Noisy>);
        impl Drop for DrainOnDrop {
            fn drop(&mut self) {
                let mut first = None;
                drain_caught(&mut self.0, &mut first);
                rethrow(first);
            }
        }
        let r = catch_unwind(|| {
            let _d = DrainOnDrop(vec![Noisy(7, true), Noisy(8, true)]);
            panic!("first");
        });
        let msg = r.unwrap_err().downcast::<&str>().unwrap();
        assert_eq!(*msg, "first");
        assert_eq!(DROPPED.with_borrow(|d| d.clone()), [7, 8]);
    }
}
