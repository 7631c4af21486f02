//! [`TestTool`]: a deterministic loop with virtual time, for tests.

use crate::args::FromArgs;
use crate::error::Error;
use crate::steps::promise::Promise;
use crate::steps::scheduler::{Scheduler, Stats};
use crate::tool::{here, Core, Drain, HORIZON, MAX_DELAY};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// How far [`TestTool::advance`] moves the virtual clock from the tool's
/// creation at most: 400 years, so that every deadline a timer set by then
/// can have (at most [`MAX_DELAY`] later) is within the timers' [`HORIZON`]
/// and keeps its order.
const MAX_ELAPSED: Duration = HORIZON.saturating_sub(MAX_DELAY);

/// A loop whose clock moves only when told to: run one event, run all,
/// advance time, inspect what is pending. Nothing sleeps, so time-dependent
/// flows (timeouts, deferred callbacks) are tested exactly and instantly.
///
/// Other threads may still post to it (external completions); their
/// messages run when the test drives the tool.
///
/// ```
/// use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
/// use std::time::Duration;
///
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| { s.set_timeout(Duration::from_secs(30)); Ok(()) });
/// let mut p = root.promise::<()>(&mut tool);
/// tool.run_all_ready();
/// tool.advance(Duration::from_secs(29));
/// assert!(p.try_take().is_none());
/// tool.advance(Duration::from_secs(1));
/// assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
/// ```
pub struct TestTool {
    sched: Scheduler,
    start: Instant,
    /// The current turn; `None` between turns.
    turn: Option<Turn>,
}

/// One turn of a [`TestTool`], as a pass of an `AsyncTool`
/// (`Core::run_pass`): the due timers join the queue, the messages
/// run (those waiting, then those sent meanwhile, up to `DRAIN_MAX` in
/// all unless the first batch was longer; see
/// [`Drain`]), then the entries that were queued before them.
struct Turn {
    /// The messages of the turn, not run yet.
    msgs: Drain,
    /// Entries (cancelled ones included) queued when the turn began and not
    /// looked at yet.
    entries: usize,
}

impl std::fmt::Debug for TestTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestTool")
            .field("elapsed", &self.elapsed())
            .field("stats", &self.sched.stats())
            .finish()
    }
}

impl Default for TestTool {
    fn default() -> Self {
        Self::new()
    }
}

impl TestTool {
    /// A new virtual-time loop on the calling thread.
    pub fn new() -> Self {
        let start = Instant::now();
        TestTool {
            sched: Scheduler::new(start),
            start,
            turn: None,
        }
    }

    /// Virtual time elapsed since creation.
    pub fn elapsed(&self) -> Duration {
        self.sched.core.now - self.start
    }

    /// Runs the next event: a message, a ready callback or flow continuation,
    /// or else the earliest timer (moving the clock to it). False when
    /// nothing is pending.
    ///
    /// Events run in turns, exactly as the passes of an
    /// [`AsyncTool`](crate::AsyncTool) run them: a turn moves the due
    /// timers to the queue, runs the messages that were waiting when it
    /// began (taking turns between those of this thread and those of other
    /// threads), then those sent meanwhile, batch after batch, until a
    /// batch finds none or 64 have run, then every entry that was queued
    /// before those messages ran. What the turn queues (a callback, a flow
    /// a message started or resumed, a timer it set, even with a zero
    /// delay) and the messages past the bound or sent while its entries
    /// run wait for the next turn. Each call runs one event; the next call
    /// goes on with the same turn.
    pub fn run_one(&mut self) -> bool {
        if self.run_ready_one() {
            return true;
        }
        match self.sched.core.next_deadline() {
            Some(at) => {
                self.sched.core.now = at;
                self.run_ready_one()
            }
            None => false,
        }
    }

    /// Runs events until nothing is pending, moving the clock through every
    /// timer; returns how many ran. A flow that never stops (an endless
    /// loop) makes this never return: use [`run_for`](TestTool::run_for).
    pub fn run_all(&mut self) -> usize {
        let mut n = 0;
        while self.run_one() {
            n += 1;
        }
        n
    }

    /// Like [`run_all`](TestTool::run_all) but stops after `max` events.
    pub fn run_for(&mut self, max: usize) -> usize {
        let mut n = 0;
        while n < max && self.run_one() {
            n += 1;
        }
        n
    }

    /// Runs everything due now without moving the clock.
    pub fn run_all_ready(&mut self) -> usize {
        let mut n = 0;
        while self.run_ready_one() {
            n += 1;
        }
        n
    }

    /// Runs one event due now (see [`run_one`](TestTool::run_one)); false
    /// when none is left.
    fn run_ready_one(&mut self) -> bool {
        let TestTool { sched, turn, .. } = self;
        // Its virtual time for what runs without the loop in hand.
        let _clock = here::Mark::new(sched.core.inbox.id, sched.core.now);
        // The rest of the current turn, else a new one.
        for _ in 0..2 {
            let t = turn.get_or_insert_with(|| {
                sched.core.fire_timers();
                Turn {
                    entries: sched.core.queued_entries(),
                    msgs: Drain::new(&sched.core.inbox),
                }
            });
            if let Some(m) = t.msgs.next(&sched.core.inbox) {
                Core::dispatch(sched, m);
                return true;
            }
            while t.entries > 0 {
                t.entries -= 1;
                if Core::run_front(sched) {
                    return true;
                }
            }
            *turn = None;
        }
        false
    }

    /// Moves the clock forward by `d`, running every event that falls due
    /// on the way, in deadline order.
    ///
    /// The clock saturates 400 years after the tool's creation: a longer
    /// `d`, up to `Duration::MAX`, moves it there and no further (a clock
    /// already past it, moved by [`run_one`](TestTool::run_one) to a later
    /// timer, stays where it is). Timers due beyond that point run with
    /// [`run_one`](TestTool::run_one) and [`run_all`](TestTool::run_all),
    /// which move the clock to each of them.
    pub fn advance(&mut self, d: Duration) -> usize {
        let room = MAX_ELAPSED.saturating_sub(self.elapsed());
        let target = self
            .sched
            .core
            .now
            .checked_add(d.min(room))
            .unwrap_or(self.sched.core.now);
        let mut n = self.run_all_ready();
        while let Some(at) = self.sched.core.next_deadline() {
            if at > target {
                break;
            }
            self.sched.core.now = self.sched.core.now.max(at);
            n += self.run_all_ready();
        }
        self.sched.core.now = target;
        n + self.run_all_ready()
    }

    /// What is pending: flows, timers, ready callbacks, inbox messages.
    pub fn pending(&self) -> Stats {
        self.sched.stats()
    }

    /// Runs events until `p`'s flow ends and returns its result. A flow
    /// that still waits when nothing is pending gives an `InternalError` at
    /// once instead of hanging (messages from other threads are not awaited:
    /// use [`AsyncTool`](crate::AsyncTool) for that). A flow on another
    /// loop of this same thread would never end meanwhile: that is an
    /// `InternalError` at once, and nothing runs.
    pub fn block_on<T: FromArgs>(&mut self, mut p: Promise<T>) -> Result<T, Error> {
        p.refuse_if_stuck_behind(&self.sched.core.inbox)?;
        loop {
            if let Some(r) = p.try_take() {
                return r;
            }
            if !self.run_one() {
                return p.try_take().unwrap_or_else(|| {
                    Err(Error::internal(if p.elsewhere(&self.sched.core.inbox) {
                        "block_on(): the flow runs on another thread's loop, which a \
                         TestTool does not wait for; use Promise::wait or \
                         AsyncTool::block_on"
                    } else {
                        "block_on(): the flow still waits and nothing is pending"
                    }))
                });
            }
        }
    }
}

impl Deref for TestTool {
    type Target = Scheduler;
    fn deref(&self) -> &Scheduler {
        &self.sched
    }
}

impl DerefMut for TestTool {
    fn deref_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }
}
