//! The uncontended path of `sync` steps (the critical section runs in the
//! sync step itself when the lock is free) against the general path, where
//! the section is a sub-step. Each scenario runs once on a `Mutex` or
//! `Throttle` directly (in place) and once through a user `ISync` that only
//! forwards to it (always the general path); both runs must log exactly the
//! same callbacks, args, error codes, `async_stack`s, cancel and drop
//! order, lock counts and step references, and the log itself is checked.
//!
//! What the scenarios share is here; `locks` has those of holding and
//! releasing, `limits` those of a `Limiter` out of rate, the step budget,
//! a queued section and args left unread.

use futoin_asyncsteps::sync::{ISync, Limiter, LimiterOptions, Mutex, Section, Throttle};
use futoin_asyncsteps::{Args, Step, StepResult};
use std::time::Duration;

/// Forwards to the object inside: the general path, for comparison.
#[derive(Clone)]
struct General<S>(S);

impl<S: ISync> ISync for General<S> {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0.sync(s, args, section)
    }
}

/// A sync object whose counts a scenario logs.
trait Obj: ISync + Clone {
    fn counts(&self) -> (u32, u32);
}

impl Obj for Mutex {
    fn counts(&self) -> (u32, u32) {
        Mutex::counts(self)
    }
}

impl Obj for Throttle {
    fn counts(&self) -> (u32, u32) {
        Throttle::counts(self)
    }
}

impl Obj for Limiter {
    /// A Limiter shows no counts: the scenarios compare everything else.
    fn counts(&self) -> (u32, u32) {
        (0, 0)
    }
}

impl<S: Obj> Obj for General<S> {
    fn counts(&self) -> (u32, u32) {
        self.0.counts()
    }
}

/// Runs `$scenario` on `$make` (in place) and on `General($make)`, asserts
/// that both logged the same, and gives that log. (Callback type names on
/// `async_stack` name the object's type where a scenario is generic over
/// it: `General<T>` is read as `T`.)
macro_rules! same {
    ($scenario:ident, $make:expr $(, $arg:expr)*) => {{
        let obj = $make;
        let inner = type_name_of(&obj);
        let wrapped = format!(
            "{}<{inner}>",
            std::any::type_name::<General<()>>().trim_end_matches("<()>")
        );
        let in_place = $scenario(obj $(, $arg)*);
        let general: Vec<String> = $scenario(General($make) $(, $arg)*)
            .iter()
            .map(|l| l.replace(&wrapped, inner))
            .collect();
        assert_eq!(in_place, general, "in place (left) vs general path (right)");
        in_place
    }};
}

fn type_name_of<T>(_: &T) -> &'static str {
    std::any::type_name::<T>()
}

fn mutex() -> Mutex {
    Mutex::new(1, None)
}

fn throttle() -> Throttle {
    Throttle::new(u32::MAX, Duration::from_secs(1), None)
}

/// `concurrent` at once (8 more may wait), and a rate never reached.
fn limiter(concurrent: u32) -> Limiter {
    Limiter::new(LimiterOptions {
        concurrent,
        max_queue: 8,
        rate: u32::MAX,
        ..Default::default()
    })
}

// Declared after `same!`: a `macro_rules!` macro is in scope only below
// its definition.
mod limits;
mod locks;
