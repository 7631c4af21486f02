//! The loop core shared by [`AsyncTool`](crate::AsyncTool) and
//! [`TestTool`](crate::TestTool): immediate queue, timers, flows, inbox.

use crate::args::Args;
use crate::error::Error;
use crate::state::State;
use crate::steps::def::StepDef;
use crate::steps::flow::{Flow, Resume};
use crate::steps::frame::Extra;
use crate::steps::model::AsyncSteps;
use crate::steps::result::{Completion, FlowHandle, WaitToken};
use crate::tool::shared::{Drain, Msg, OwnerGuard, Shared};
use crate::tool::timers::Timers;
use slotmap::{new_key_type, SlotMap};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

// Prefetching the flows of the next queued entries.
mod lookahead;
// Freeing what a burst left in the pools once the loop has been idle.
mod pools;
pub(crate) use pools::Trim;

/// Handle of a scheduled callback (spec 2.6 `Handle`): pass it to
/// [`Scheduler::cancel`] or [`Scheduler::is_valid`] of the loop that gave
/// it out; another loop ignores it.
///
/// ```
/// use futoin_asyncsteps::TestTool;
/// let (mut a, mut b) = (TestTool::new(), TestTool::new());
/// let h = a.immediate(|_| {});
/// let _ = b.immediate(|_| {});
/// assert!(a.is_valid(h));
/// assert!(!b.is_valid(h)); // a handle of loop `a`
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskHandle {
    key: TaskKey,
    /// The loop (`Shared::id`) that gave it out.
    tool: u64,
}

impl TaskHandle {
    /// Its key on its own loop (for the binary interface, which tells the
    /// loop apart itself).
    pub(crate) fn key(&self) -> TaskKey {
        self.key
    }
}

/// How many times a flow whose values keep panicking on drop is torn down
/// before the rest is left (each try gets past at least one frame).
const TEARDOWN_TRIES: usize = 64;

/// The error a panic that ended a flow gives it.
fn flow_panic_error(p: Box<dyn std::any::Any + Send>) -> Error {
    match p.downcast::<crate::steps::flow::FlowPanic>() {
        Ok(fp) => fp.0,
        Err(p) => crate::tool::panic_error("a value dropped by the flow", p),
    }
}
use std::sync::Arc;
use std::time::{Duration, Instant};

new_key_type! {
    /// A scheduled callback or timer on its loop.
    pub(crate) struct TaskKey;
    /// Identifies a flow on its loop.
    pub(crate) struct FlowKey;
    /// Identifies a source registered with the loop's reactor.
    pub(crate) struct IoKey;
}

/// Steps a flow may run before it yields the loop to other work.
pub(crate) const BURST: u32 = 1024;

/// At most this many emptied `Extra`s are kept for reuse per loop (a few
/// hundred bytes each).
const EXTRA_POOL_MAX: usize = 1024;

/// Timer delays are capped here, ~100 years (a longer one, up to
/// `Duration::MAX`, would not fit in an `Instant`).
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

enum Task {
    User(Box<dyn FnOnce(&mut Scheduler)>),
    Timeout {
        flow: FlowKey,
        strand: u32,
        seq: u32,
    },
}

struct TaskSlot {
    task: Task,
    timer: bool,
}

enum Entry {
    Task(TaskKey),
    Flow(FlowKey),
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

type ErrorHook = Box<dyn FnMut(&Error)>;

/// The event-loop core (spec 2.6 AsyncTool interface): immediate and deferred
/// callbacks with handles, the flows pinned to this loop, and the inbox that
/// other threads post to.
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
    pub(crate) now: Instant,
    /// `now` follows the real clock (`AsyncTool`): it is read again when a
    /// timer is set. A virtual clock (`TestTool`) moves only when told.
    real_clock: bool,
    tasks: SlotMap<TaskKey, TaskSlot>,
    queue: VecDeque<Entry>,
    timers: Timers<TaskKey>,
    stale_timers: usize,
    /// Entries in `queue` whose task was cancelled or whose flow has
    /// ended.
    dead_entries: usize,
    order: u64,
    pub(crate) flows: SlotMap<FlowKey, Option<Box<Flow>>>,
    // Boxed so a flow moves in and out of the slot map as one pointer.
    #[allow(clippy::vec_box)]
    pool: Vec<Box<Flow>>,
    peak_flows: usize,
    /// Start of the quiet period in which the pools hold more than they
    /// keep (`None` outside one); see `trim_pools`.
    idle_since: Option<Instant>,
    pub(crate) pool_limits: pools::PoolLimits,
    /// Emptied `Extra`s of ended frames, ready for reuse (at most
    /// `EXTRA_POOL_MAX`).
    #[allow(clippy::vec_box)]
    pub(crate) extras: Vec<Box<Extra>>,
    /// Closed wait tokens no handle refers to, ready for reuse.
    pub(crate) tokens: Vec<Arc<WaitToken>>,
    /// Error-record storage of flows that never set a state key (see
    /// `StatePool`).
    pub(crate) states: crate::state::StatePool,
    pub(crate) shared: Arc<Shared>,
    pub(crate) steps: u64,
    /// Steps the running flow may still execute before it yields.
    pub(crate) budget: u32,
    /// The args register: success args on their way from a step to the
    /// next. Empty whenever no flow runs.
    pub(crate) args: Args,
    /// The hold (and section name) of the `sync` step running its
    /// critical section with its frame deferred; empty whenever no such
    /// step runs (see `sync::in_place`).
    pub(crate) section: Option<(crate::sync::Hold, crate::steps::def::NameFn)>,
    /// The Throttle of a [`Limiter`](crate::sync::Limiter) whose section
    /// runs so, admitted inside its Mutex (the hold above): a second hold
    /// of the section, kept as its object only (see `sync::in_place`).
    pub(crate) section_inner: Option<crate::sync::InnerHold>,
    unhandled: Option<ErrorHook>,
    /// `None` on a loop without a reactor (`TestTool`).
    pub(crate) io: Option<crate::io::reactor::Reactor>,
    stopped: bool,
    /// Marks the creating thread as a loop owner while the loop lives.
    _owner: OwnerGuard,
}

impl Scheduler {
    pub(crate) fn new(now: Instant) -> Self {
        Scheduler {
            now,
            real_clock: false,
            tasks: SlotMap::with_key(),
            queue: VecDeque::new(),
            timers: Timers::new(now),
            stale_timers: 0,
            dead_entries: 0,
            order: 0,
            flows: SlotMap::with_key(),
            pool: Vec::new(),
            peak_flows: 0,
            idle_since: None,
            pool_limits: pools::PoolLimits::default(),
            extras: Vec::new(),
            tokens: Vec::new(),
            states: Default::default(),
            shared: Shared::new(),
            steps: 0,
            budget: 0,
            args: Args::new(),
            section: None,
            section_inner: None,
            unhandled: None,
            io: None,
            stopped: false,
            _owner: OwnerGuard::new(),
        }
    }

    /// Gives this loop a reactor and the real clock (`AsyncTool`).
    pub(crate) fn set_registry(&mut self, registry: mio::Registry) {
        self.io = Some(crate::io::reactor::Reactor::new(registry));
        self.real_clock = true;
    }

    /// Sources registered with this loop's reactor.
    pub(crate) fn io_waits(&self) -> usize {
        self.io.as_ref().map_or(0, |io| io.len())
    }

    /// A readiness event: completes the step waiting on that source, or
    /// keeps the readiness for the next wait.
    pub(crate) fn io_event(&mut self, ev: &mio::event::Event) {
        let done = self.io.as_mut().and_then(|io| io.event(ev));
        self.io_complete(done);
    }

    /// Completes a wait that found kept readiness when it began.
    pub(crate) fn io_poke(&mut self, k: IoKey) {
        let done = self.io.as_mut().and_then(|io| io.poke(k));
        self.io_complete(done);
    }

    fn io_complete(&mut self, done: Option<crate::io::reactor::Done>) {
        let Some(d) = done else {
            return;
        };
        if d.args {
            self.args = crate::io::ready_args(d.ready());
        }
        self.drive(
            d.flow,
            Resume::Complete {
                strand: d.strand,
                seq: d.seq,
                err: None,
            },
        );
    }

    /// Schedules `f` to run on this loop as soon as possible (spec `immediate`).
    pub fn immediate(&mut self, f: impl FnOnce(&mut Scheduler) + 'static) -> TaskHandle {
        let key = self.tasks.insert(TaskSlot {
            task: Task::User(Box::new(f)),
            timer: false,
        });
        self.queue.push_back(Entry::Task(key));
        self.handle_of(key)
    }

    /// The public handle of task `key` of this loop.
    pub(crate) fn handle_of(&self, key: TaskKey) -> TaskHandle {
        TaskHandle {
            key,
            tool: self.shared.id,
        }
    }

    /// Task `h` names on this loop, if this loop gave it out.
    pub(crate) fn key_of(&self, h: TaskHandle) -> Option<TaskKey> {
        (h.tool == self.shared.id).then_some(h.key)
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
        let key = self.add_timer(delay, Task::User(Box::new(f)));
        self.handle_of(key)
    }

    fn add_timer(&mut self, delay: Duration, task: Task) -> TaskKey {
        // The delay counts from this call: the cached clock may be as old
        // as the start of the pass (callbacks and steps that ran since), or
        // of the last iterate (code run between iterations).
        if self.real_clock {
            self.now = Instant::now();
        }
        let at = self
            .now
            .checked_add(delay.min(MAX_DELAY))
            .unwrap_or_else(|| self.now + Duration::from_secs(24 * 3600));
        let h = self.tasks.insert(TaskSlot { task, timer: true });
        self.order += 1;
        self.timers.push(at, self.order, h);
        h
    }

    pub(crate) fn flow_timeout(
        &mut self,
        delay: Duration,
        flow: FlowKey,
        strand: u32,
        seq: u32,
    ) -> TaskKey {
        self.add_timer(delay, Task::Timeout { flow, strand, seq })
    }

    /// Empties the args register.
    #[inline(always)]
    pub(crate) fn clear_args(&mut self) {
        if !self.args.is_empty() {
            self.args = Args::new();
        }
    }

    /// Empties the args register outside any flow's own catch: a value
    /// whose `Drop` panics becomes an `InternalError` instead of unwinding
    /// out of the loop.
    #[inline]
    fn clear_args_caught(&mut self) -> Result<(), Error> {
        if self.args.is_empty() {
            return Ok(());
        }
        self.drop_args_caught()
    }

    #[cold]
    #[inline(never)]
    fn drop_args_caught(&mut self) -> Result<(), Error> {
        let a = std::mem::take(&mut self.args);
        catch_unwind(AssertUnwindSafe(move || drop(a))).map_err(flow_panic_error)
    }

    /// [`clear_args_caught`](Self::clear_args_caught), reporting a panic
    /// as an unhandled error (no flow to give it to).
    fn clear_args_reporting(&mut self) {
        if let Err(e) = self.clear_args_caught() {
            self.report_unhandled(&e);
        }
    }

    /// Cancels a scheduled callback; a no-op when it already ran (spec `cancel`).
    ///
    /// Only callbacks scheduled through this API are reachable: a handle
    /// that names one of the engine's own timers (e.g. a handle from another
    /// loop) is ignored.
    pub fn cancel(&mut self, h: TaskHandle) {
        if self.is_valid(h) {
            self.cancel_task(h.key);
        }
    }

    /// Cancels any task, engine timers included.
    pub(crate) fn cancel_task(&mut self, h: TaskKey) {
        if let Some(slot) = self.tasks.remove(h) {
            if !slot.timer {
                self.dead_entries += 1;
            } else {
                self.stale_timers += 1;
                // Drop cancelled entries once they are the majority, so a
                // churn of cancelled timers never piles up (amortised O(1)).
                if self.stale_timers > 64 && self.stale_timers * 2 > self.timers.len() {
                    let tasks = &self.tasks;
                    self.timers.retain(|t| tasks.contains_key(*t));
                    self.stale_timers = 0;
                }
            }
        }
    }

    /// True while the callback is still scheduled (spec `is_valid`).
    pub fn is_valid(&self, h: TaskHandle) -> bool {
        let Some(key) = self.key_of(h) else {
            return false;
        };
        matches!(
            self.tasks.get(key),
            Some(TaskSlot {
                task: Task::User(_),
                ..
            })
        )
    }

    /// True on the thread that owns this loop (spec `is_same_thread`).
    pub fn is_same_thread(&self) -> bool {
        self.shared.is_same_thread()
    }

    /// The loop's current time (real, or virtual under [`TestTool`](crate::TestTool)).
    ///
    /// On a real-time loop this is the clock as last read: at the start of
    /// each turn, after it slept, and when a timer was set.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// A `Send + Sync` handle to post work to this loop from any thread.
    pub fn handle(&self) -> crate::ToolHandle {
        crate::ToolHandle {
            shared: self.shared.clone(),
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
        self.unhandled = Some(Box::new(hook));
    }

    /// Current counters.
    pub fn stats(&self) -> Stats {
        Stats {
            flows: self.flows.len(),
            steps: self.steps,
            timers: self.timers.len() - self.stale_timers.min(self.timers.len()),
            immediates: self.queue.len() - self.dead_entries,
            inbox: self.shared.depth(),
            io: self.io_waits(),
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
            d.bind(&self.shared, key);
            if let Some(Some(f)) = self.flows.get_mut(key) {
                f.set_done(Some(d));
            }
        }
        self.peak_flows = self.peak_flows.max(self.flows.len());
        self.queue.push_back(Entry::Flow(key));
        FlowHandle {
            loop_id: self.shared.id,
            thread_mark: self.shared.owner_mark(),
            key,
        }
    }

    /// Empties the `Extra` of an ended frame and keeps it for the next
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
    pub(crate) fn recycle_extra(&mut self, mut x: Box<Extra>) {
        let shared = &self.shared;
        if x.reset(|| shared.local_len()) {
            self.budget = 0;
        }
        if self.extras.len() < EXTRA_POOL_MAX {
            self.extras.push(x);
        }
    }

    /// Closes the wait token of an ended step; pooled like flows (up to the
    /// peak number of flows alive at once).
    pub(crate) fn release_token(&mut self, t: Arc<WaitToken>) {
        WaitToken::release(t, &mut self.tokens, self.peak_flows);
    }

    /// Hands a flow's unhandled error to the hook (or stderr). A panicking
    /// hook is reported on stderr and the loop goes on, as after any other
    /// user callback.
    #[cold]
    #[inline(never)]
    pub(crate) fn report_unhandled(&mut self, e: &Error) {
        match &mut self.unhandled {
            Some(h) => {
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| h(e))) {
                    let why = crate::tool::panic_error("unhandled-error hook", p);
                    eprintln!("futoin-asyncsteps: {why} (reporting: {e})");
                }
            }
            None => eprintln!("futoin-asyncsteps: unhandled error in flow: {e}"),
        }
    }

    /// Runs one flow activation.
    pub(crate) fn drive(&mut self, key: FlowKey, resume: Resume) {
        let Some(slot) = self.flows.get_mut(key) else {
            // A completion's args for a flow that has ended.
            self.clear_args_reporting();
            return;
        };
        let Some(mut flow) = slot.take() else {
            self.clear_args_reporting();
            return;
        };
        if matches!(resume, Resume::Ready) {
            flow.queued = false;
        }
        let res = match catch_unwind(AssertUnwindSafe(|| flow.drive(self, resume))) {
            Ok(r) => r,
            Err(p) => {
                // A panic the flow cannot go on from (a user `Drop` run by
                // the engine, a cancel callback): it ends with
                // `InternalError`, and what it still holds is torn down.
                // (A second panic from the register adds nothing to `e`.)
                let _ = self.clear_args_caught();
                self.flows.remove(key);
                self.count_dead_entry(&flow);
                let e = flow_panic_error(p);
                let done = flow.take_done();
                // Each panicking value is skipped; the frame it was in has
                // already been removed, so this ends.
                let mut clean = false;
                for _ in 0..TEARDOWN_TRIES {
                    match catch_unwind(AssertUnwindSafe(|| flow.teardown(self))) {
                        Ok(()) => {
                            clean = true;
                            break;
                        }
                        Err(p) => crate::util::panic::drop_payload(p),
                    }
                }
                let _ = self.clear_args_caught();
                match done {
                    Some(c) => c.complete(Err(e)),
                    None => self.report_unhandled(&e),
                }
                if clean {
                    self.discard(flow);
                } else {
                    // Still panicking after many tries: keep the loop alive
                    // and leave the rest, but give its sync slots back (a
                    // `Hold` runs no user code).
                    drop(flow.take_holds());
                    std::mem::forget(flow);
                }
                return;
            }
        };
        match res {
            Some(res) => {
                self.flows.remove(key);
                self.count_dead_entry(&flow);
                let done = flow.take_done();
                // The result args (in the register) are moved out only for
                // someone waiting for them.
                let args = match (&res, &done) {
                    (Ok(()), Some(_)) => Some(std::mem::take(&mut self.args)),
                    _ => None,
                };
                // The register never outlives an activation (a failed flow
                // may leave a handler's success args there; a detached
                // flow's result args are dropped here).
                let cleared = self.clear_args_caught();
                let canceled = flow.was_canceled();
                // What the flow holds (its state) is dropped before the
                // result is given: a panicking Drop makes it InternalError.
                let (res, reusable) = match catch_unwind(AssertUnwindSafe(|| flow.reset())) {
                    Ok(()) => (res.and(cleared), true),
                    Err(p) => (Err(flow_panic_error(p)), false),
                };
                match done {
                    // Someone holds the promise (the flow holds the other
                    // reference): the result is theirs.
                    Some(c) if Arc::strong_count(&c) > 1 => {
                        c.complete(res.map(|()| args.unwrap_or_default()))
                    }
                    // Detached, or its promise was dropped: an error goes
                    // to the hook.
                    _ => {
                        if let Err(e) = res {
                            if !canceled || !reusable {
                                self.report_unhandled(&e);
                            }
                        }
                    }
                }
                if reusable {
                    if self.pool.len() < self.peak_flows {
                        flow.state.recycle(&mut self.states);
                        self.pool.push(flow);
                    }
                } else {
                    self.discard(flow);
                }
            }
            None => {
                self.clear_args_reporting();
                if flow.has_ready() && !flow.queued {
                    flow.queued = true;
                    self.queue.push_back(Entry::Flow(key));
                }
                self.flows[key] = Some(flow);
            }
        }
    }

    /// A flow that ended while its `Entry::Flow` was still queued (a root
    /// cancel, a timeout or a completion ended it first) leaves that entry
    /// dead: counted like a cancelled task's, skipped when it comes up.
    #[inline]
    fn count_dead_entry(&mut self, flow: &Flow) {
        if flow.queued {
            self.dead_entries += 1;
        }
    }

    /// Drops a flow that is not to be pooled; a panicking `Drop` in what
    /// is left is reported, not let out of the loop.
    fn discard(&mut self, flow: Box<Flow>) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(flow))) {
            let e = flow_panic_error(p);
            self.report_unhandled(&e);
        }
    }

    #[inline]
    pub(crate) fn dispatch_one(&mut self, msg: Msg) {
        match msg {
            Msg::Call(f) => self.call_user(f),
            Msg::Execute(root, done) => {
                self.start(*root, done);
            }
            Msg::Complete {
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
            Msg::Cancel(flow) => self.drive(flow, Resume::Cancel),
            Msg::Poll { flow, strand, seq } => self.drive(flow, Resume::Poll { strand, seq }),
            Msg::Stop => self.stopped = true,
        }
    }

    fn call_user(&mut self, f: impl FnOnce(&mut Scheduler)) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(self))) {
            let e = crate::tool::panic_error("loop callback", p);
            self.report_unhandled(&e);
        }
    }

    /// Runs the messages that wait when it starts (see [`Batch`](crate::tool::shared::Batch)), then
    /// those that came meanwhile, batch after batch, until a batch finds
    /// none or [`DRAIN_MAX`](crate::tool::shared::DRAIN_MAX) have run; the rest wait for the next pass.
    /// (The rule is [`Drain`]'s, which `TestTool` follows too, one message
    /// at a time.)
    ///
    /// The bound keeps a flow that keeps sending itself messages (a future
    /// that wakes itself, a step completing its own external handle) from
    /// holding back timers, queued entries and other threads' messages for
    /// more than `DRAIN_MAX` activations. Going on past the first batch
    /// keeps a chain of local hand-overs in one pass: a sync slot given to
    /// a waiter of this loop is a local message, and under contention one
    /// section's end grants the next.
    pub(crate) fn run_inbox(&mut self) -> usize {
        let mut d = Drain::new(&self.shared);
        while let Some(m) = d.next(&self.shared) {
            self.dispatch_one(m);
        }
        d.ran
    }

    /// Moves due timers to the immediate queue; returns how many.
    pub(crate) fn fire_timers(&mut self) -> usize {
        let mut n = 0;
        let now = self.timers.since_origin(self.now);
        while let Some(task) = self.timers.pop_due(now) {
            if let Some(slot) = self.tasks.get_mut(task) {
                // Out of the heap now: cancelling it no longer leaves a stale entry.
                slot.timer = false;
                self.queue.push_back(Entry::Task(task));
                n += 1;
            } else {
                self.stale_timers = self.stale_timers.saturating_sub(1);
            }
        }
        n
    }

    /// Runs the front entry of the queue; false when there is none or it
    /// was a cancelled task (then it is only dropped).
    #[inline]
    pub(crate) fn run_front(&mut self) -> bool {
        self.look_ahead();
        let Some(e) = self.queue.pop_front() else {
            return false;
        };
        match e {
            Entry::Flow(key) => {
                if !self.flows.contains_key(key) {
                    // Its flow ended while it was queued.
                    self.dead_entries -= 1;
                    return false;
                }
                self.drive(key, Resume::Ready)
            }
            Entry::Task(h) => match self.tasks.remove(h) {
                Some(slot) => match slot.task {
                    Task::User(f) => self.call_user(f),
                    Task::Timeout { flow, strand, seq } => {
                        self.drive(flow, Resume::Timeout { strand, seq })
                    }
                },
                None => {
                    self.dead_entries -= 1;
                    return false;
                }
            },
        }
        true
    }

    /// Entries in the queue, cancelled ones included.
    pub(crate) fn queued_entries(&self) -> usize {
        self.queue.len()
    }

    /// The ended flows kept for reuse (tests look inside).
    #[cfg(test)]
    pub(crate) fn pooled(&self) -> &[Box<Flow>] {
        &self.pool
    }

    /// One pass: the due timers join the queue, the messages run (those
    /// waiting, then those sent meanwhile, up to [`DRAIN_MAX`](crate::tool::shared::DRAIN_MAX); see
    /// [`run_inbox`](Self::run_inbox)), then the entries that were queued
    /// before the messages ran. What the pass queues (a flow a message
    /// started or resumed) and the messages past the bound wait for the
    /// next pass, whose messages go first. `TestTool` runs its turns by
    /// the same rule, one event at a time.
    pub(crate) fn run_pass(&mut self) -> usize {
        // A fired timer is counted when its entry runs (not when it is
        // queued as well).
        self.fire_timers();
        let mut todo = self.queue.len();
        let mut n = self.run_inbox();
        while todo > 0 {
            todo -= 1;
            if self.run_front() {
                n += 1;
            }
        }
        n
    }

    pub(crate) fn has_immediates(&self) -> bool {
        self.queue.len() > self.dead_entries
    }

    /// Time of the earliest live timer.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some((at, &task)) = self.timers.peek() {
            if self.tasks.contains_key(task) {
                return Some(at);
            }
            self.timers.pop();
            self.stale_timers = self.stale_timers.saturating_sub(1);
        }
        None
    }

    /// True when nothing is queued, no timer is pending and the inbox is empty.
    pub(crate) fn is_idle(&mut self) -> bool {
        !self.has_immediates() && self.next_deadline().is_none() && self.shared.is_empty()
    }

    pub(crate) fn take_stop(&mut self) -> bool {
        std::mem::take(&mut self.stopped)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // Cancel what still runs so cancel callbacks fire and waiters get an answer.
        let keys: Vec<FlowKey> = self.flows.keys().collect();
        for k in keys {
            self.drive(k, Resume::Cancel);
        }
        self.shared.close();
    }
}
