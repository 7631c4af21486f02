//! [`Scheduler`]: the engine of one loop: the flows pinned to it, their
//! pools, the step budget and the args register, on top of the loop core
//! (`tool::Core`: tasks, timers, inbox, readiness table).

use crate::args::{Args, IntoArgs};
use crate::error::Error;
use crate::state::State;
use crate::steps::def::{NameFn, StepDef};
use crate::steps::external::WaitToken;
use crate::steps::flow::{Flow, Resume};
use crate::steps::flow_handle::FlowHandle;
use crate::steps::frame::Resources;
use crate::steps::hold::Hold;
use crate::steps::io_wait::IoWaiter;
use crate::steps::message::FlowMsg;
use crate::steps::model::AsyncSteps;
use crate::steps::promise::Completion;
use crate::steps::tool_handle::ToolHandle;
use crate::tool::{Core, Done, Engine, Stage, TaskHandle, TaskKey, Trim};
use slotmap::{new_key_type, SlotMap};
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::{Duration, Instant};

// Running a flow: one activation, and what follows its end.
mod drive;
// Prefetching the flows of the next queued timeouts.
mod lookahead;
// Freeing what a burst left in the pools once the loop has been idle.
mod pools;

new_key_type! {
    /// Identifies a flow on its loop.
    pub(crate) struct FlowKey;
}

/// Steps a flow may run before it yields the loop to other work.
pub(crate) const BURST: u32 = 1024;

/// Emptied `Resources` boxes (a few hundred bytes each) a loop keeps for
/// reuse even below this many flows at its peak.
const RESOURCES_POOL_MAX: usize = 1024;

/// A step's timer (its timeout, or its sleep), as a timer of the loop
/// core carries it.
#[derive(Clone, Copy)]
pub(crate) struct FlowTimer {
    pub flow: FlowKey,
    pub strand: u32,
    pub seq: u32,
    /// A sleep (`Step::sleep`): the step succeeds; else it times out.
    pub wake: bool,
}

/// Counters a harness can read; see [`Scheduler::stats`].
///
/// ```
/// let tool = futoin_asyncsteps::TestTool::new();
/// let st = tool.stats();
/// assert_eq!((st.flows, st.timers, st.immediates), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Flows started and not yet finished.
    pub flows: usize,
    /// Steps executed since the loop was created: a running total, not
    /// steps pending (also in [`TestTool::pending`](crate::TestTool::pending)).
    pub steps: u64,
    /// Flow activations since the loop was created, a running total: each
    /// time a flow runs, for its start, for an event that resumed it (an
    /// external completion, readiness, a timeout, a future's wake, a sync
    /// grant) or for its turn after it yielded. With `steps`, what a
    /// protocol costs the engine: an echo round trip of
    /// `io::net::serve_stream` is one step in one activation.
    pub activations: u64,
    /// Timers pending: deferred callbacks and the loop's own timers, such
    /// as step timeouts (`set_timeout`); cancelled ones excluded.
    pub timers: usize,
    /// Immediate callbacks and flow continuations queued.
    pub immediates: usize,
    /// Messages waiting in the cross-thread inbox.
    pub inbox: usize,
    /// Sources registered with the loop's reactor (each from its first
    /// `wait_io` until the step that owns it ends).
    pub io: usize,
}

/// One event loop's scheduler (spec 2.6 AsyncTool interface): immediate and
/// deferred callbacks with handles, the flows pinned to this loop, and the
/// inbox that other threads post to.
///
/// Reached as `&mut Scheduler` through [`AsyncTool`](crate::AsyncTool),
/// [`TestTool`](crate::TestTool) (both deref to it) and inside steps through
/// [`Step::tool`](crate::Step::tool).
///
/// ```
/// use futoin_asyncsteps::TestTool;
/// use std::time::Duration;
/// use std::rc::Rc;
/// use std::cell::RefCell;
///
/// let mut tool = TestTool::new();
/// let log = Rc::new(RefCell::new(Vec::new()));
/// let l = log.clone();
/// tool.deferred(Duration::from_millis(5), move |_| l.borrow_mut().push("late"));
/// let l = log.clone();
/// let h = tool.immediate(move |_| l.borrow_mut().push("now"));
/// assert!(tool.is_valid(h));
/// tool.run_all();
/// assert!(!tool.is_valid(h));
/// assert_eq!(*log.borrow(), ["now", "late"]);
/// ```
pub struct Scheduler {
    /// The loop core: tasks, timers, the inbox, the readiness table. The
    /// first field: dropped right after `Drop` has cancelled the flows, it
    /// closes the inbox (answering the messages left) before the pools go.
    pub(crate) core: Core<Scheduler>,
    pub(crate) flows: SlotMap<FlowKey, Option<Box<Flow>>>,
    // Boxed so a flow moves in and out of the slot map as one pointer.
    #[allow(clippy::vec_box)]
    pool: Vec<Box<Flow>>,
    peak_flows: usize,
    /// Start of the quiet period in which the pools hold more than they
    /// keep (`None` outside one); see `trim_pools`.
    idle_since: Option<Instant>,
    pub(crate) pool_limits: pools::PoolLimits,
    /// Emptied `Resources` boxes of ended frames, ready for reuse (up to
    /// the peak of flows, at least `RESOURCES_POOL_MAX`).
    #[allow(clippy::vec_box)]
    pub(crate) spare_resources: Vec<Box<Resources>>,
    /// Closed wait tokens no handle refers to, ready for reuse.
    pub(crate) tokens: Vec<Arc<WaitToken>>,
    /// Error-record storage of flows that never set a state key (see
    /// `StatePool`).
    pub(crate) states: crate::state::StatePool,
    pub(crate) steps: u64,
    /// Flow activations (`Stats::activations`).
    pub(crate) activations: u64,
    /// Steps the running flow may still execute before it yields.
    pub(crate) budget: u32,
    /// The parallel step of the running flow whose branches start in
    /// place (see the flow's `branches` module).
    pub(crate) starting: crate::steps::flow::Starting,
    /// The args register: success args on their way from a step to the
    /// next. Empty whenever no flow runs.
    pub(crate) args: Args,
    /// The args a `break_with` carries to the step after its loop, while
    /// its break travels there; empty whenever no flow runs.
    pub(crate) break_args: Option<Args>,
    /// The hold (and section name) of the `sync` step running its
    /// critical section with its frame deferred; empty whenever no such
    /// step runs (see `Step::run_in_place`).
    pub(crate) section: Option<(Hold, NameFn)>,
    /// A second hold of that section, taken inside the first (a
    /// `Limiter`'s Throttle inside its Mutex), with the name shown between
    /// the step's and the section's on `async_stack`.
    pub(crate) section_inner: Option<(Hold, NameFn)>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Scheduler {
    pub(crate) fn new(now: Instant) -> Self {
        Scheduler {
            core: Core::new(now),
            flows: SlotMap::with_key(),
            pool: Vec::new(),
            peak_flows: 0,
            idle_since: None,
            pool_limits: pools::PoolLimits::default(),
            spare_resources: Vec::new(),
            tokens: Vec::new(),
            states: Default::default(),
            steps: 0,
            activations: 0,
            budget: 0,
            starting: Default::default(),
            args: Args::new(),
            break_args: None,
            section: None,
            section_inner: None,
        }
    }

    /// Schedules `f` to run on this loop as soon as possible (spec `immediate`).
    pub fn immediate(&mut self, f: impl FnOnce(&mut Scheduler) + 'static) -> TaskHandle {
        self.core.immediate(f)
    }

    /// Schedules `f` to run after `delay` (spec `deferred`); a zero delay runs
    /// it on the next loop iteration, after the immediates already queued.
    /// A delay above 100 years counts as 100 years (`Duration::MAX`
    /// included).
    pub fn deferred(
        &mut self,
        delay: Duration,
        f: impl FnOnce(&mut Scheduler) + 'static,
    ) -> TaskHandle {
        self.core.deferred(delay, f)
    }

    /// Cancels a scheduled callback; a no-op when it already ran (spec `cancel`).
    ///
    /// Only callbacks scheduled through this API are reachable: a handle
    /// that names one of the engine's own timers (e.g. a handle from another
    /// loop) is ignored.
    pub fn cancel(&mut self, h: TaskHandle) {
        self.core.cancel(h);
    }

    /// True while the callback is still scheduled (spec `is_valid`).
    pub fn is_valid(&self, h: TaskHandle) -> bool {
        self.core.is_valid(h)
    }

    /// True on the thread that owns this loop (spec `is_same_thread`).
    pub fn is_same_thread(&self) -> bool {
        self.core.inbox.is_same_thread()
    }

    /// The loop's current time (real, or virtual under [`TestTool`](crate::TestTool)).
    ///
    /// On a real-time loop this is the clock as last read: at the start of
    /// each turn, after it slept, and when a timer was set.
    pub fn now(&self) -> Instant {
        self.core.now
    }

    /// A `Send + Sync` handle to post work to this loop from any thread.
    pub fn handle(&self) -> ToolHandle {
        ToolHandle {
            inbox: self.core.inbox.clone(),
        }
    }

    /// Replaces what happens to an error no one waits for: a flow started
    /// with [`AsyncSteps::execute`] that fails, or a panicking callback.
    /// The default writes one line to stderr.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// use std::{cell::RefCell, rc::Rc};
    /// let mut tool = TestTool::new();
    /// let seen = Rc::new(RefCell::new(Vec::new()));
    /// let s2 = seen.clone();
    /// tool.set_unhandled_error_hook(move |e| s2.borrow_mut().push(e.code().to_owned()));
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| s.error("NotFound", "nobody waits for this"));
    /// root.execute(&mut tool);
    /// tool.run_all();
    /// assert_eq!(*seen.borrow(), ["NotFound"]);
    /// ```
    pub fn set_unhandled_error_hook(&mut self, hook: impl FnMut(&Error) + 'static) {
        self.core.set_unhandled_error_hook(hook);
    }

    /// Current counters.
    pub fn stats(&self) -> Stats {
        Stats {
            flows: self.flows.len(),
            steps: self.steps,
            activations: self.activations,
            timers: self.core.pending_timers(),
            immediates: self.core.immediates(),
            inbox: self.core.inbox.depth(),
            io: self.core.io_waits(),
        }
    }

    /// Starts a flow on this loop; it runs from the next iteration on.
    #[inline]
    pub(crate) fn start(&mut self, root: AsyncSteps, done: Option<Arc<Completion>>) -> FlowHandle {
        let AsyncSteps { steps, state } = root;
        self.start_parts(steps, state, done)
    }

    /// [`start`](Self::start) from a model's parts: its level-0 steps in
    /// any inline size (the runtime queues them in a smaller one) and its
    /// state.
    #[inline(always)]
    pub(crate) fn start_parts<A: smallvec::Array<Item = StepDef>>(
        &mut self,
        steps: SmallVec<A>,
        state: State,
        done: Option<Arc<Completion>>,
    ) -> FlowHandle {
        let mut flow = self.pool.pop().unwrap_or_default();
        flow.init(steps, state);
        flow.queued = true;
        let key = self.flows.insert_with_key(|key| {
            flow.key = key;
            Some(flow)
        });
        // A pooled or new flow has no `done`: set only when there is one.
        if let Some(d) = done {
            d.bind(&self.core.inbox, key);
            if let Some(Some(f)) = self.flows.get_mut(key) {
                f.set_done(Some(d));
            }
        }
        self.peak_flows = self.peak_flows.max(self.flows.len());
        self.core.push_entry(key);
        FlowHandle {
            loop_id: self.core.inbox.id,
            thread_mark: self.core.inbox.owner_mark(),
            key,
        }
    }

    /// Sets the timeout of step `seq` of `strand` in `flow`.
    pub(crate) fn flow_timeout(
        &mut self,
        delay: Duration,
        flow: FlowKey,
        strand: u32,
        seq: u32,
        wake: bool,
    ) -> TaskKey {
        self.core.engine_timer(
            delay,
            FlowTimer {
                flow,
                strand,
                seq,
                wake,
            },
        )
    }

    /// Cancels a task of this loop, the engine's timers included.
    #[inline]
    pub(crate) fn cancel_task(&mut self, k: TaskKey) {
        self.core.cancel_task(k);
    }

    /// Hands an error nobody waits for to the loop's hook.
    pub(crate) fn report_unhandled(&mut self, e: &Error) {
        self.core.report_unhandled(e);
    }

    /// Empties the args register.
    #[inline(always)]
    pub(crate) fn clear_args(&mut self) {
        if !self.args.is_empty() {
            self.args = Args::new();
        }
    }

    /// Empties the `Resources` of an ended frame and keeps it for the next
    /// frame that needs one. What it holds is dropped here (a panicking
    /// `Drop` goes to the caller, like dropping the frame would).
    ///
    /// When that gives a sync slot to a waiter on this loop, the running
    /// flow yields at its next step: the waiter's grant is a message in
    /// the local queue, and the rest of this flow's burst (typically its
    /// next `sync`, which now queues) would otherwise run before the
    /// holder of the slot does. Under contention from two loops that
    /// delay sat on the lock's critical path at every local handover.
    #[inline]
    pub(crate) fn recycle_resources(&mut self, mut x: Box<Resources>) {
        let inbox = &self.core.inbox;
        if x.reset(|| inbox.local_len()) {
            self.budget = 0;
        }
        // Up to the peak of flows alive at once, as the flows themselves
        // (given back with them when the loop has been quiet a while).
        if self.spare_resources.len() < self.peak_flows.max(RESOURCES_POOL_MAX) {
            self.spare_resources.push(x);
        }
    }

    /// Closes the wait token of an ended step; pooled like flows (up to the
    /// peak number of flows alive at once).
    pub(crate) fn release_token(&mut self, t: Arc<WaitToken>) {
        WaitToken::release(t, &mut self.tokens, self.peak_flows);
    }
}

/// The engine's side of the loop: what the loop core hands back to it.
impl Engine for Scheduler {
    type Msg = FlowMsg;
    type Timer = FlowTimer;
    type Entry = FlowKey;
    type Waiter = IoWaiter;

    #[inline(always)]
    fn core(&mut self) -> &mut Core<Self> {
        &mut self.core
    }

    #[inline(always)]
    fn core_ref(&self) -> &Core<Self> {
        &self.core
    }

    #[inline(always)]
    fn on_message(&mut self, m: FlowMsg) {
        match m {
            FlowMsg::Execute(root, done) => {
                self.start(*root, done);
            }
            FlowMsg::Complete {
                flow,
                strand,
                seq,
                result,
            } => {
                // Success args travel in the register (see `Resume::Complete`).
                let err = match result {
                    Ok(a) => {
                        self.args = a.unpack();
                        None
                    }
                    Err(e) => Some(e),
                };
                self.drive(flow, Resume::Complete { strand, seq, err })
            }
            FlowMsg::Cancel(flow) => self.drive(flow, Resume::Cancel),
            FlowMsg::Poll { flow, strand, seq } => self.drive(flow, Resume::Poll { strand, seq }),
        }
    }

    #[inline]
    fn on_timer(&mut self, t: FlowTimer) {
        let FlowTimer {
            flow,
            strand,
            seq,
            wake,
        } = t;
        if wake {
            self.drive(flow, Resume::Wake { strand, seq })
        } else {
            self.drive(flow, Resume::Timeout { strand, seq })
        }
    }

    #[inline]
    fn run_entry(&mut self, key: FlowKey) -> bool {
        if !self.flows.contains_key(key) {
            // Its flow ended while it was queued.
            return false;
        }
        self.drive(key, Resume::Ready);
        true
    }

    /// Completes the step that waited: with the [`Ready`](crate::io::Ready)
    /// as its result args, or with none for the `io::net` helpers' waits
    /// (they never read it, and nothing is boxed).
    fn on_ready(&mut self, d: Done<IoWaiter>) {
        let IoWaiter {
            flow,
            strand,
            seq,
            args,
        } = d.who;
        if args {
            self.args = (d.ready(),).into_args();
        }
        self.drive(
            flow,
            Resume::Complete {
                strand,
                seq,
                err: None,
            },
        );
    }

    fn settle(m: FlowMsg) {
        m.settle();
    }

    #[inline]
    fn look_ahead(&self, t: &FlowTimer, stage: Stage) {
        self.prefetch_timeout(t.flow, stage);
    }

    #[inline]
    fn busy(&mut self) {
        self.idle_since = None;
    }

    fn trim(&mut self) -> Trim {
        self.trim_pools()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // Cancel what still runs so cancel callbacks fire and waiters get
        // an answer (the loop core, dropped next, answers the messages).
        let keys: Vec<FlowKey> = self.flows.keys().collect();
        for k in keys {
            self.drive(k, Resume::Cancel);
        }
    }
}

#[cfg(test)]
impl Scheduler {
    /// The ended flows kept for reuse (tests look inside).
    pub(crate) fn pooled(&self) -> &[Box<Flow>] {
        &self.pool
    }
}
