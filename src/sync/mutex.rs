//! [`Mutex`]: at most `max` flows inside at once (spec 2.3).

use super::cohort::{self, Handover};
use super::gate::Gate;
use super::{enter, resume, HoldCore, ISync, Section};
use crate::args::Args;
use crate::error::{Error, StepResult};
use crate::steps::external::ExternalHandle;
use crate::steps::hold::Guard;
use crate::steps::step::Step;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Lets at most `max` flows into its critical sections at once (spec
/// `Mutex`); the others wait in a queue of at most `max_queue` (`None`:
/// unbounded), and a flow that finds it full fails with `DefenseRejected`.
///
/// - Order: a slot freed on a loop goes to the oldest waiter of that loop
///   first, for a bounded run, then in arrival order (cohort handover; see
///   [`Handover`] for the exact guarantee, and
///   [`with_handover`](Mutex::with_handover) to change the bounds or keep
///   strict arrival order).
/// - Re-entrance: a flow (or parallel branch) inside may sync on the same
///   mutex again and passes straight through.
/// - Parallel branches are separate flows: they never inherit their
///   parent's hold. A branch that would wait for slots held only by its own
///   ancestors could never enter (they release after the branch ends), so
///   it fails with `InternalError` ("deadlock") instead of hanging.
/// - The slot is freed when the synchronized step ends in any way:
///   success, error, cancel or timeout. A flow cancelled while queued
///   leaves the queue. The next waiter resumes on its own loop.
/// - Lock-free: the uncontended path is one CAS; see the module docs.
/// - `max_queue` counts live waiters (one that gives up, or is handed a
///   slot, leaves the count at once). While another thread is in the
///   middle of a handover, the count may be off by one for a moment, in
///   either direction: one flow more may be queued past the limit, or one
///   turned away a waiter early (at most one per handover in progress).
///
/// ```
/// use futoin_asyncsteps::{sync::Mutex, AsyncSteps, TestTool};
/// use std::time::Duration;
///
/// let mut tool = TestTool::new();
/// let m = Mutex::new(1, None);
/// let mut ps = Vec::new();
/// for i in 0..3 {
///     let mut root = AsyncSteps::new();
///     root.sync(&m, move |s, ()| {
///         // Hold the mutex for 10 ms (virtual time), then go on.
///         s.add_catch(
///             |s, ()| { s.set_timeout(Duration::from_millis(10)); Ok(()) },
///             |s, _| s.success(()),
///         );
///         Ok(())
///     });
///     ps.push(root.promise::<()>(&mut tool));
/// }
/// tool.run_all();
/// // One at a time: the three timeouts ran one after another.
/// assert_eq!(tool.elapsed(), Duration::from_millis(30));
/// ```
#[derive(Clone)]
pub struct Mutex {
    core: Arc<MutexCore>,
}

pub(super) struct MutexCore {
    gate: Gate<ExternalHandle>,
    /// `max == 0` is kept, to be reported on use rather than panicking.
    max: u32,
    /// [`Handover::run`].
    run: AtomicU32,
    /// [`Handover::time`], in nanoseconds (saturated).
    time_ns: AtomicU64,
}

impl HoldCore for MutexCore {
    const HANDS_OVER: bool = true;

    fn what(&self) -> &'static str {
        "Mutex"
    }
    fn gate(&self) -> &Gate<ExternalHandle> {
        &self.gate
    }
    fn handover(&self) -> Handover {
        Handover {
            run: self.run.load(Relaxed),
            time: Duration::from_nanos(self.time_ns.load(Relaxed)),
        }
    }
}

impl Guard for MutexCore {
    fn leave(&self, home: u64) {
        let id = self as *const MutexCore as usize;
        if let Some(n) = cohort::release(&self.gate, id, home, || self.handover()) {
            resume(n);
        }
    }
    fn place_cancelled(&self, home: u64) {
        self.gate.node_cancelled();
        cohort::cancelled(self as *const MutexCore as usize, home);
    }
}

impl std::fmt::Debug for Mutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (inside, queued) = self.core.gate.counts();
        f.debug_struct("Mutex")
            .field("max", &self.core.max)
            .field("inside", &inside)
            .field("queued", &queued)
            .finish()
    }
}

/// The spec's defaults (`Mutex(max=1, max_queue=null)`): one flow inside at
/// a time, an unbounded queue; the same as `Mutex::new(1, None)`.
///
/// ```
/// use futoin_asyncsteps::sync::Mutex;
/// let m = Mutex::default();
/// assert_eq!(format!("{m:?}"), format!("{:?}", Mutex::new(1, None)));
/// ```
impl Default for Mutex {
    fn default() -> Self {
        Mutex::new(1, None)
    }
}

impl Mutex {
    /// At most `max` flows inside at once, at most `max_queue` waiting
    /// (`None`: no limit; `Some(0)`: no queue, a busy mutex rejects).
    ///
    /// `max == 0` would let no flow in ever: every `sync` on such a mutex
    /// fails with `InternalError` saying so.
    pub fn new(max: u32, max_queue: Option<u32>) -> Self {
        Mutex {
            core: Arc::new(MutexCore {
                gate: Gate::new(max.max(1), max_queue).with_spare(super::spare_node),
                max,
                run: AtomicU32::new(0),
                time_ns: AtomicU64::new(0),
            }),
        }
        .with_handover(Handover::default())
    }

    /// Sets how a freed slot is passed on while flows wait (see
    /// [`Handover`]); the default is `Handover::default()`. It applies to
    /// every clone of this mutex, from the next handover on.
    ///
    /// ```
    /// use futoin_asyncsteps::sync::{Handover, Mutex};
    /// let m = Mutex::new(1, None).with_handover(Handover::FIFO);
    /// assert_eq!(m.handover(), Handover::FIFO);
    /// ```
    pub fn with_handover(self, h: Handover) -> Self {
        let core = &self.core;
        core.run.store(h.run, Relaxed);
        let ns = u64::try_from(h.time.as_nanos()).unwrap_or(u64::MAX);
        core.time_ns.store(ns, Relaxed);
        self
    }

    /// How a freed slot is passed on (see [`with_handover`](Mutex::with_handover)).
    pub fn handover(&self) -> Handover {
        self.core.handover()
    }

    /// Flows inside now and flows waiting (a recent snapshot).
    ///
    /// ```
    /// use futoin_asyncsteps::{sync::Mutex, AsyncSteps, TestTool};
    ///
    /// let mut tool = TestTool::new();
    /// let m = Mutex::new(1, None);
    /// for _ in 0..2 {
    ///     let mut root = AsyncSteps::new();
    ///     root.sync(&m, |s, ()| {
    ///         s.wait_external(); // stays inside
    ///         Ok(())
    ///     });
    ///     root.execute(&mut tool);
    /// }
    /// tool.run_all_ready();
    /// assert_eq!(m.counts(), (1, 1)); // one inside, one waiting
    /// ```
    pub fn counts(&self) -> (u32, u32) {
        self.core.gate.counts()
    }

    /// The `max` it was made with.
    pub(super) fn max(&self) -> u32 {
        self.core.max
    }

    /// Its gate, for the tests of the handover order.
    #[cfg(all(test, not(loom)))]
    pub(super) fn gate(&self) -> &Gate<ExternalHandle> {
        &self.core.gate
    }
}

impl ISync for Mutex {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        if self.core.max == 0 {
            return Err(Error::internal(
                "Mutex: max is 0, so no flow can ever enter",
            ));
        }
        enter(self.core.clone(), s, args, section, true)
    }
}

impl super::in_place::Own for Mutex {
    type Core = MutexCore;

    fn core(&self) -> Option<&Arc<MutexCore>> {
        (self.core.max != 0).then_some(&self.core)
    }

    fn into_core(self) -> Arc<MutexCore> {
        self.core
    }
}
