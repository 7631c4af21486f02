//! [`Throttle`]: at most `max` entries per period (spec 2.4).

use super::gate::{Arm, Gate};
use super::{enter, resume, HoldCore, ISync, Section};
use crate::args::Args;
use crate::error::{Error, StepResult};
use crate::steps::external::ExternalHandle;
use crate::steps::hold::Guard;
use crate::steps::scheduler::Scheduler;
use crate::steps::step::Step;
use crate::steps::tool_handle::ToolHandle;
use crate::tool::Inbox;
use std::sync::Arc;
use std::time::Duration;

/// Lets at most `max` flows enter its critical sections per `period`
/// (spec `Throttle`); the others wait in a FIFO queue (arrival order,
/// whatever their loop) of at most `max_queue` (`None`: unbounded) and are
/// let in at the start of the next periods, `max` at a time. A flow that
/// finds the queue full fails with `DefenseRejected`.
///
/// The period starts with the first entry after an idle time and is driven
/// by a timer on the loop of the flow that started it; the timer stops as
/// soon as a period passes with no entry and no waiter, and starts again
/// on demand. If that loop goes away while flows wait, the timer moves to
/// a loop where a flow queued (the latest one whose loop still runs; that
/// loop must keep being driven, as every loop with flows on it must).
/// Unlike a [`Mutex`](super::Mutex), leaving the section frees
/// nothing: only time does. Every entry counts, nested ones too (spec
/// 1.11.2 and 2.4): a flow inside that enters the same throttle again takes
/// another of the period's `max` entries, or waits for a later period like
/// any other flow.
///
/// ```
/// use futoin_asyncsteps::{sync::Throttle, AsyncSteps, TestTool};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let mut tool = TestTool::new();
/// let t = Throttle::new(2, Duration::from_millis(100), None);
/// let done = Arc::new(AtomicUsize::new(0));
/// for _ in 0..5 {
///     let mut root = AsyncSteps::new();
///     let d = done.clone();
///     root.sync(&t, move |_, ()| {
///         d.fetch_add(1, Ordering::Relaxed);
///         Ok(())
///     });
///     root.execute(&mut tool);
/// }
/// let entered = |n: usize| done.load(Ordering::Relaxed) == n;
/// tool.run_all_ready();
/// assert!(entered(2)); // the first period
/// tool.advance(Duration::from_millis(100));
/// assert!(entered(4)); // the second
/// tool.advance(Duration::from_millis(100));
/// assert!(entered(5));
/// ```
#[derive(Clone)]
pub struct Throttle {
    core: Arc<ThrottleCore>,
}

pub(crate) struct ThrottleCore {
    gate: Gate<ExternalHandle>,
    period: Duration,
    max: u32,
    /// Whether a period timer is scheduled (on some loop).
    arm: Arm,
    /// The loops where a flow queued, each once, latest last, less those
    /// seen gone when a flow queues or when the timer stops (see
    /// `PeriodTimer`'s drop).
    spares: parking_lot::Mutex<Vec<ToolHandle>>,
}

impl HoldCore for ThrottleCore {
    const COUNTS_REENTRY: bool = true;

    fn what(&self) -> &'static str {
        "Throttle"
    }
    fn gate(&self) -> &Gate<ExternalHandle> {
        &self.gate
    }

    fn entered(self: Arc<Self>, s: &mut Step<'_>, queued: bool) {
        if queued {
            // Contended path only: remember the loops with waiters, to
            // move the timer to one if its own loop goes away.
            let here = &s.tool().core.inbox;
            let mut spares = self.spares.lock();
            spares.retain(|h| !h.inbox.is_closed());
            if let Some(i) = spares.iter().position(|h| Arc::ptr_eq(&h.inbox, here)) {
                let h = spares.remove(i);
                spares.push(h);
            } else {
                spares.push(s.tool().handle());
            }
        }
        if self.arm.on_entry() {
            PeriodTimer::schedule(self, s.tool());
        }
    }
}

impl Guard for ThrottleCore {
    /// Nothing: a slot comes back with the next period.
    fn leave(&self, _home: u64) {}

    fn place_cancelled(&self, _home: u64) {
        self.gate.node_cancelled();
    }
}

impl super::in_place::Own for Throttle {
    type Core = ThrottleCore;

    fn core(&self) -> Option<&Arc<ThrottleCore>> {
        (self.core.max != 0 && !self.core.period.is_zero()).then_some(&self.core)
    }

    fn into_core(self) -> Arc<ThrottleCore> {
        self.core
    }

    fn admitted(core: &Arc<ThrottleCore>, s: &mut Step<'_>) {
        if core.arm.on_entry() {
            PeriodTimer::schedule(core.clone(), s.tool());
        }
    }
}

/// The period timer's callback. Dropped without firing (its loop shut
/// down), it disarms and, if flows still wait, restarts the timer on a
/// loop where a flow queued, the latest first, skipping loops that have
/// gone away too (see [`Restart`]); with none left, the next entry starts
/// one.
struct PeriodTimer {
    core: Option<Arc<ThrottleCore>>,
    /// The loop it is scheduled on.
    home: Arc<Inbox<Scheduler>>,
}

impl PeriodTimer {
    fn schedule(core: Arc<ThrottleCore>, sched: &mut Scheduler) {
        let period = core.period;
        let mut t = PeriodTimer {
            core: Some(core),
            home: sched.core.inbox.clone(),
        };
        sched.deferred(period, move |sched| t.fire(sched));
    }

    fn fire(&mut self, sched: &mut Scheduler) {
        let Some(core) = self.core.take() else { return };
        for n in core.gate.new_period() {
            resume(n);
        }
        if core.arm.period_end(&core.gate) {
            PeriodTimer::schedule(core, sched);
        } else {
            // Idle: let go of loops that have gone away, so a throttle
            // that is never contended again does not keep them (their
            // wakers and inboxes) alive. Live loops stay: a flow may be
            // queueing on one right now (clearing the list could forget
            // it).
            core.spares.lock().retain(|h| !h.inbox.is_closed());
        }
    }
}

impl Drop for PeriodTimer {
    fn drop(&mut self) {
        let Some(core) = self.core.take() else { return };
        core.arm.lost();
        if !core.gate.busy() {
            return;
        }
        let loops: Vec<ToolHandle> = (core.spares.lock().iter())
            .filter(|h| !Arc::ptr_eq(&h.inbox, &self.home) && !h.inbox.is_closed())
            .cloned()
            .collect();
        Restart {
            core: Some(core),
            loops,
        }
        .try_next();
    }
}

/// Restarts a throttle's period timer on the last loop of `loops` that
/// still runs. A call sent to a loop that has gone away is dropped unrun;
/// this value's drop then tries the loop before it.
struct Restart {
    core: Option<Arc<ThrottleCore>>,
    loops: Vec<ToolHandle>,
}

impl Restart {
    fn try_next(mut self) {
        let Some(h) = self.loops.pop() else { return };
        h.call(move |sched| {
            if let Some(core) = self.core.take() {
                self.loops.clear();
                if core.arm.on_entry() {
                    PeriodTimer::schedule(core, sched);
                }
            }
        });
    }
}

impl Drop for Restart {
    fn drop(&mut self) {
        if self.core.is_some() && !self.loops.is_empty() {
            Restart {
                core: self.core.take(),
                loops: std::mem::take(&mut self.loops),
            }
            .try_next();
        }
    }
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (entered, queued) = self.core.gate.counts();
        f.debug_struct("Throttle")
            .field("max", &self.core.max)
            .field("period", &self.core.period)
            .field("entered_this_period", &entered)
            .field("queued", &queued)
            .finish()
    }
}

impl Throttle {
    /// At most `max` entries per `period`, at most `max_queue` waiting
    /// (`None`: no limit; `Some(0)`: no queue).
    ///
    /// `max == 0` or a zero `period` would let no flow in (or all at once):
    /// every `sync` on such a throttle fails with `InternalError` saying so.
    pub fn new(max: u32, period: Duration, max_queue: Option<u32>) -> Self {
        Throttle {
            core: Arc::new(ThrottleCore {
                gate: Gate::new(max.max(1), max_queue),
                period,
                max,
                arm: Arm::new(),
                spares: parking_lot::Mutex::new(Vec::new()),
            }),
        }
    }

    /// Entries in the current period and flows waiting (a recent snapshot).
    ///
    /// ```
    /// use futoin_asyncsteps::{sync::Throttle, AsyncSteps, TestTool};
    /// use std::time::Duration;
    ///
    /// let mut tool = TestTool::new();
    /// let t = Throttle::new(1, Duration::from_millis(100), None);
    /// for _ in 0..2 {
    ///     let mut root = AsyncSteps::new();
    ///     root.sync(&t, |s, ()| s.success(()));
    ///     root.execute(&mut tool);
    /// }
    /// tool.run_all_ready();
    /// assert_eq!(t.counts(), (1, 1)); // one entered, one waits
    /// tool.advance(Duration::from_millis(100));
    /// assert_eq!(t.counts(), (1, 0)); // the next period let it in
    /// ```
    pub fn counts(&self) -> (u32, u32) {
        self.core.gate.counts()
    }

    /// The `max` it was made with.
    pub(super) fn max(&self) -> u32 {
        self.core.max
    }

    /// The `period` it was made with.
    pub(super) fn period(&self) -> Duration {
        self.core.period
    }
}

impl ISync for Throttle {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        if self.core.max == 0 {
            return Err(Error::internal(
                "Throttle: max is 0, so no flow can ever enter",
            ));
        }
        if self.core.period.is_zero() {
            return Err(Error::internal(
                "Throttle: the period is zero, so it would limit nothing",
            ));
        }
        enter(self.core.clone(), s, args, section, false)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{AsyncSteps, TestTool};

    /// A flow queued on a loop that then went away; once the throttle goes
    /// idle it no longer keeps that loop's handle (a long-lived throttle
    /// kept one per short-lived loop, with its waker, for good).
    #[test]
    fn an_idle_throttle_lets_go_of_loops_that_went_away() {
        let t = Throttle::new(1, Duration::from_millis(100), None);
        let mut tool_a = TestTool::new();
        let mut a = AsyncSteps::new();
        a.sync(&t, |_, ()| Ok(()));
        let pa = a.promise::<()>(&mut tool_a);
        tool_a.run_all_ready();
        tool_a.block_on(pa).unwrap();

        let mut tool_b = TestTool::new();
        let mut b = AsyncSteps::new();
        b.sync(&t, |_, ()| Ok(()));
        let _pb = b.promise::<()>(&mut tool_b);
        tool_b.run_all_ready();
        assert_eq!(t.counts(), (1, 1));
        assert_eq!(t.core.spares.lock().len(), 1);
        drop(tool_b); // its waiter leaves the queue

        tool_a.advance(Duration::from_millis(100));
        assert_eq!(t.counts(), (0, 0));
        assert!(t.core.spares.lock().is_empty());
    }
}
