//! [`Limiter`]: concurrency and rate limits in one (spec 2.5).

use super::{Handover, ISync, Mutex, Section, Throttle};
use crate::args::Args;
use crate::error::{Error, StepResult};
use crate::steps::step::Step;
use std::time::Duration;

/// The options of a [`Limiter`] (spec 2.5), with the spec's defaults.
///
/// ```
/// use futoin_asyncsteps::sync::LimiterOptions;
/// use std::time::Duration;
/// let o = LimiterOptions { concurrent: 8, rate: 100, ..Default::default() };
/// assert_eq!((o.max_queue, o.period, o.burst), (0, Duration::from_secs(1), 0));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimiterOptions {
    /// Flows inside at once (default 1).
    pub concurrent: u32,
    /// Flows waiting for a concurrency slot (default 0: no queue).
    pub max_queue: u32,
    /// Entries per period (default 1).
    pub rate: u32,
    /// The rate period (default 1 s).
    pub period: Duration,
    /// Flows waiting for the rate limit (default 0: no queue).
    pub burst: u32,
}

impl Default for LimiterOptions {
    fn default() -> Self {
        LimiterOptions {
            concurrent: 1,
            max_queue: 0,
            rate: 1,
            period: Duration::from_millis(1000),
            burst: 0,
        }
    }
}

/// What a [`Limiter`] holds at one moment; see [`Limiter::counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterCounts {
    /// Flows holding a concurrency slot (at most `concurrent`), whether
    /// they have passed the rate limit or wait for it.
    pub inside: u32,
    /// Flows waiting for a concurrency slot (at most `max_queue`).
    pub waiting: u32,
    /// Flows that entered in the current rate period (at most `rate`).
    pub entered: u32,
    /// Flows holding a slot and waiting for the rate (at most `burst`).
    pub waiting_rate: u32,
}

/// A [`Mutex`] (`concurrent`, `max_queue`) around a [`Throttle`] (`rate`
/// per `period`, `burst` waiting): the limits of request processing in one
/// object (spec `Limiter`, 1.11.7). A flow first takes a concurrency slot,
/// then waits for the rate; either full queue gives `DefenseRejected`.
///
/// ```
/// use futoin_asyncsteps::sync::{Limiter, LimiterOptions};
/// use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
///
/// let mut tool = TestTool::new();
/// let l = Limiter::new(LimiterOptions::default()); // 1 at a time, 1/s, no queues
/// let mut ps = Vec::new();
/// for _ in 0..2 {
///     let mut root = AsyncSteps::new();
///     root.sync(&l, |s, ()| s.success(()));
///     ps.push(root.promise::<()>(&mut tool));
/// }
/// tool.run_all();
/// let second = ps.pop().unwrap();
/// let first = ps.pop().unwrap();
/// assert!(tool.block_on(first).is_ok());
/// assert_eq!(tool.block_on(second).unwrap_err().code(), codes::DEFENSE_REJECTED);
/// ```
#[derive(Clone, Debug)]
pub struct Limiter {
    pub(super) mutex: Mutex,
    pub(super) throttle: Throttle,
}

impl Limiter {
    /// A limiter with these options.
    ///
    /// A `concurrent` or `rate` of 0 would let no flow in ever, and a zero
    /// `period` would limit nothing: every `sync` on such a limiter fails
    /// with `InternalError` naming the option.
    ///
    /// ```
    /// use futoin_asyncsteps::sync::{Limiter, LimiterOptions};
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    ///
    /// let mut tool = TestTool::new();
    /// let l = Limiter::new(LimiterOptions { rate: 0, ..Default::default() });
    /// let mut root = AsyncSteps::new();
    /// root.sync(&l, |s, ()| s.success(()));
    /// let p = root.promise::<()>(&mut tool);
    /// let e = tool.block_on(p).unwrap_err();
    /// assert_eq!(e.info(), Some("Limiter: rate is 0, so no flow can ever enter"));
    /// ```
    pub fn new(o: LimiterOptions) -> Self {
        Limiter {
            mutex: Mutex::new(o.concurrent, Some(o.max_queue)),
            throttle: Throttle::new(o.rate, o.period, Some(o.burst)),
        }
    }

    /// Sets how a freed concurrency slot is passed on while flows wait for
    /// one (its [`Mutex`]'s [`with_handover`](Mutex::with_handover); the
    /// default is `Handover::default()`). Flows waiting for the rate are
    /// let in by periods, in arrival order.
    ///
    /// ```
    /// use futoin_asyncsteps::sync::{Handover, Limiter, LimiterOptions};
    /// let l = Limiter::new(LimiterOptions::default()).with_handover(Handover::FIFO);
    /// assert_eq!(l.handover(), Handover::FIFO);
    /// ```
    pub fn with_handover(self, h: Handover) -> Self {
        Limiter {
            mutex: self.mutex.with_handover(h),
            throttle: self.throttle,
        }
    }

    /// How a freed concurrency slot is passed on (see
    /// [`with_handover`](Limiter::with_handover)).
    pub fn handover(&self) -> Handover {
        self.mutex.handover()
    }

    /// How many flows hold a concurrency slot and wait for one (its
    /// [`Mutex`]'s [`counts`](Mutex::counts)), and how many entered in the
    /// current rate period and wait for the rate (its [`Throttle`]'s
    /// [`counts`](Throttle::counts)). A snapshot: other loops may change
    /// it at once.
    ///
    /// ```
    /// use futoin_asyncsteps::sync::{Limiter, LimiterCounts, LimiterOptions};
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// use std::time::Duration;
    ///
    /// let mut tool = TestTool::new();
    /// let l = Limiter::new(LimiterOptions {
    ///     concurrent: 2,
    ///     max_queue: 1,
    ///     rate: 1,
    ///     period: Duration::from_millis(100),
    ///     burst: 1,
    /// });
    /// for _ in 0..3 {
    ///     let mut root = AsyncSteps::new();
    ///     root.sync(&l, |s, ()| {
    ///         s.wait_external(); // stays inside
    ///         Ok(())
    ///     });
    ///     root.execute(&mut tool);
    /// }
    /// tool.run_all_ready();
    /// // Two have a slot: one entered this period, one waits for the
    /// // rate; the third waits for a slot.
    /// let c = l.counts();
    /// assert_eq!((c.inside, c.waiting), (2, 1));
    /// assert_eq!((c.entered, c.waiting_rate), (1, 1));
    /// // The next period lets the second one in.
    /// tool.advance(Duration::from_millis(100));
    /// let c = l.counts();
    /// assert_eq!((c.inside, c.waiting, c.entered, c.waiting_rate), (2, 1, 1, 0));
    /// ```
    pub fn counts(&self) -> LimiterCounts {
        let (inside, waiting) = self.mutex.counts();
        let (entered, waiting_rate) = self.throttle.counts();
        LimiterCounts {
            inside,
            waiting,
            entered,
            waiting_rate,
        }
    }

    /// Why no flow can go through this limiter, when its options say so.
    pub(super) fn misconfigured(&self) -> Option<&'static str> {
        if self.mutex.max() == 0 {
            Some("Limiter: concurrent is 0, so no flow can ever enter")
        } else if self.throttle.max() == 0 {
            Some("Limiter: rate is 0, so no flow can ever enter")
        } else if self.throttle.period().is_zero() {
            Some("Limiter: the period is zero, so it would limit nothing")
        } else {
            None
        }
    }
}

impl Limiter {
    /// The general path: the Throttle's `sync` inside the Mutex's, around
    /// the section `section()` makes once the Mutex admits the flow.
    /// Generic, so that a caller with the user's own closure (the
    /// frameless path, `in_place`) makes a Limiter section of one word
    /// (the Throttle), kept in place: no allocation, where capturing a
    /// made `Section` would box it.
    pub(super) fn sync_with<M>(&self, s: &mut Step<'_>, args: Args, section: M) -> StepResult
    where
        M: FnOnce() -> Section + 'static,
    {
        // Checked here, before the Mutex and the Throttle inside would
        // report it under their own names.
        if let Some(why) = self.misconfigured() {
            return Err(Error::internal(why));
        }
        let throttle = self.throttle.clone();
        // Named after the Limiter on `async_stack`, as its frameless path
        // names it (`in_place`).
        let inner = Section::named::<Limiter, _, _>(move |s: &mut Step<'_>, a: Args| {
            throttle.sync(s, a, section())
        });
        self.mutex.sync(s, args, inner)
    }
}

impl ISync for Limiter {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.sync_with(s, args, move || section)
    }
}
