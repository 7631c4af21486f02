//! One loop thread of a [`Runtime`](crate::runtime::Runtime): pinning, the
//! start of new flows (local worker, the flows placed on the loop by
//! `spawn_balanced`, the loop's own injector, stealing from peers), the
//! wake-up protocol, and statistics.

use crate::error::{codes, Error};
use crate::runtime::builder::{PinStatus, SharedHook};
use crate::state::State;
use crate::steps::async_tool::AsyncTool;
use crate::steps::def::StepDef;
use crate::steps::model::AsyncSteps;
use crate::steps::promise::Completion;
use crate::steps::promise::{set_thread_runtime, thread_runtime};
use crate::steps::scheduler::Scheduler;
use crate::tool::Inbox;
use crate::util::panic::{drain_caught, drop_caught, drop_payload, keep_first};
use crate::util::steal::steal;
use crossbeam_deque::{Injector, Stealer, Worker};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Flows a loop starts per turn before it runs what is queued: new flows
/// cannot starve flows that already run.
const START_BATCH: usize = 256;

/// A loop with more flows than this spawned on it and not started wakes a
/// parked peer to steal some. Below it, flows spawned on a loop stay there
/// (they start on the next turn; waking a peer would cost more).
const LOCAL_BACKLOG: usize = 32;

/// A flow spawned on a loop thread starts on that loop (its partner flows
/// and the flows it completes stay on one thread) unless that loop has
/// more than this many flows, running or waiting to start, beyond the
/// least busy live loop of the runtime; then it is placed on that loop as
/// `submit_balanced` places a flow (its `placed` queue, which no peer
/// steals from: the busy loop, idle between events, would take it back
/// from an ordinary queue before the woken peer ran). 64 flows of slack
/// keep a connection's flows on the accept loop while the loops are about
/// even, and spread them once one loop runs ahead.
const LOCALITY_SLACK: usize = 64;

/// A root flow spawned on the runtime and not started yet.
///
/// Dropping one that never started (shutdown, a loop gone) answers its
/// waiter with `Canceled`, so no spawn is ever lost silently.
///
/// A burst of spawns from outside the loops can queue hundreds of
/// thousands of jobs (a spawning thread outruns the loops that start
/// them), and their slots are most of the burst's memory: a job is 64
/// bytes, where the model it came from is 112 (see [`Steps`]).
pub(crate) struct Job {
    steps: Steps,
    state: State,
    /// `None` once started (or for a detached flow).
    done: Option<Arc<Completion>>,
}

/// A queued job's steps. A model of one step (what a spawn usually is)
/// keeps it in place; any other count moves to the heap: a model of more
/// than two steps is there already and keeps its buffer, one of exactly
/// two pays one small allocation to be queued, and an empty one none.
///
/// The enum is no bigger than one step: its tag goes in a value a step
/// definition never takes (its callback kind has room to spare).
enum Steps {
    One(StepDef),
    Many(Vec<StepDef>),
}

// SAFETY: a job's steps and state are the parts of an `AsyncSteps`, moved
// out in `Job::new` and nothing else is ever put in them; `AsyncSteps` is
// `Send` (see its `unsafe impl`: only `Send` closures and state values),
// and `done` is an `Arc<Completion>`, itself `Send`. Splitting the parts
// into another container does not change what they hold.
unsafe impl Send for Job {}

impl Job {
    pub(crate) fn new(root: AsyncSteps, done: Option<Arc<Completion>>) -> Self {
        let AsyncSteps { mut steps, state } = root;
        let steps = if steps.len() == 1 && !steps.spilled() {
            Steps::One(steps.pop().expect("one step"))
        } else {
            // A spilled model keeps its buffer (no copy, no allocation);
            // two steps in place move to an exact one, none to no buffer.
            Steps::Many(steps.into_vec())
        };
        Job { steps, state, done }
    }

    /// Starts the flow on `tool`; false when it was cancelled before it
    /// started (it is answered, and does not run).
    fn start(mut self, tool: &mut AsyncTool) -> bool {
        let done = self.done.take();
        if let Some(d) = &done {
            if d.cancel_requested() {
                d.complete(Err(Error::with_info(
                    codes::CANCELED,
                    "flow cancelled before it started",
                )));
                self.discard();
                return false;
            }
        }
        let steps: SmallVec<[StepDef; 1]> =
            match std::mem::replace(&mut self.steps, Steps::Many(Vec::new())) {
                Steps::One(one) => SmallVec::from_buf([one]),
                // At most one step fits in place; more keep the buffer.
                Steps::Many(v) => SmallVec::from_vec(v),
            };
        let state = std::mem::take(&mut self.state);
        tool.start_parts(steps, state, done);
        true
    }
}

impl Job {
    /// Drops a job that will never start: its waiter is answered first,
    /// then its steps and its state's values go one at a time. A panicking `Drop` among those is
    /// caught and its payload dropped (there is no flow left to fail; the
    /// panic hook has already printed it), so the caller goes on answering
    /// the other jobs; two of them no longer abort the process.
    pub(crate) fn discard(mut self) {
        self.answer();
        let mut first = None;
        match std::mem::replace(&mut self.steps, Steps::Many(Vec::new())) {
            Steps::Many(mut v) => drain_caught(&mut v, &mut first),
            one => drop_caught(one, &mut first),
        }
        // The state's values one at a time too (its map's own drop would
        // stop at the first panic and leak the rest).
        if let Some(p) = self.state.clear_catching() {
            keep_first(p, &mut first);
        }
        drop_caught(self, &mut first);
        if let Some(p) = first {
            drop_payload(p);
        }
    }

    /// Answers the waiter of a job that never started, if it still has one.
    fn answer(&mut self) {
        if let Some(d) = self.done.take() {
            d.complete(Err(Error::with_info(
                codes::CANCELED,
                "the runtime shut down before the flow started",
            )));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // Only a job that never started still has its waiter.
        self.answer();
    }
}

/// Counters a loop publishes after each turn (relaxed: a harness reads a
/// recent snapshot, not a consistent one). `flows` also moves during a
/// turn, as the loop starts flows (see `start_jobs`); for a moment it may
/// count a flow about to start that turns out cancelled.
#[derive(Default)]
pub(crate) struct Counters {
    pub flows: AtomicUsize,
    pub steps: AtomicU64,
    pub timers: AtomicUsize,
    pub started: AtomicU64,
    pub stolen: AtomicU64,
    /// 1 while the loop takes a job from a queue and has not counted it in
    /// `flows` yet (see `start_jobs`); part of its `load`.
    pub taking: AtomicUsize,
    /// Sync handovers by the loop's thread: (to its own waiters, to
    /// another loop's), from `sync::handovers`.
    pub handovers_local: AtomicU64,
    pub handovers_crossed: AtomicU64,
}

/// What the runtime knows about one loop.
pub(crate) struct LoopRef {
    pub inbox: Arc<Inbox<Scheduler>>,
    /// Flows spawned from outside the loops and dealt to this one
    /// (`submit`); an idle peer may steal them.
    pub queue: Injector<Job>,
    /// Flows placed on this loop by `submit_balanced`: started by this
    /// loop only, never stolen (see there).
    pub placed: Injector<Job>,
    pub stealer: Stealer<Job>,
    pub pin: PinStatus,
    pub counters: Counters,
    /// The loop's thread ended before the runtime's shutdown (an I/O error
    /// of its poll, or a panic that escaped it): no flow is placed on it
    /// any more, and one pushed meanwhile is answered (see `closed_after_push`).
    pub dead: AtomicBool,
}

/// The runtime state every loop and handle shares.
pub(crate) struct Core {
    /// Identifies this runtime for the loop threads' thread-local.
    pub id: usize,
    pub loops: Vec<LoopRef>,
    /// Round-robin cursor for flows spawned from outside the loops.
    pub next_loop: AtomicUsize,
    /// Set once at shutdown; later spawns are answered at once.
    pub closing: AtomicBool,
    /// Where the next wake-up search starts (spreads wake-ups).
    pub next_wake: AtomicUsize,
    pub spin: Duration,
    /// Signalled when a loop's last flow ends (see `wait_quiet`).
    pub quiet: Quiet,
}

/// Where `Runtime::wait_idle` and `shutdown_timeout` wait. A loop whose
/// flow count drops to zero notifies when someone waits: at the end of a
/// turn (`publish`), and wherever `start_jobs` takes back a count it put
/// up for a job it did not start (the loop may sleep before its next
/// `publish`: every change to zero that may precede a sleep notifies).
/// The loop stores its count then reads `waiters`, a waiter counts itself
/// then reads the counts (all `SeqCst`), so one of the two sees the
/// other; the notify and the waiter's checks are under the lock, so none
/// is lost.
#[derive(Default)]
pub(crate) struct Quiet {
    lock: parking_lot::Mutex<()>,
    cv: parking_lot::Condvar,
    waiters: AtomicUsize,
}

static NEXT_RUNTIME: AtomicUsize = AtomicUsize::new(1);

pub(crate) fn next_runtime_id() -> usize {
    NEXT_RUNTIME.fetch_add(1, Ordering::Relaxed)
}

/// The loop thread's own view: which loop of its runtime it is (the
/// runtime is `promise::thread_runtime`), and its worker queue of flows
/// spawned on this thread.
struct Current {
    idx: usize,
    worker: Worker<Job>,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// The loop index when the calling thread is a loop of runtime `rt`.
pub(crate) fn current_loop(rt: usize) -> Option<usize> {
    if thread_runtime() != Some(rt) {
        return None;
    }
    CURRENT
        .try_with(|c| match c.try_borrow() {
            Ok(c) => c.as_ref().map(|c| c.idx),
            Err(_) => None,
        })
        .ok()
        .flatten()
}

impl Core {
    /// Queues a flow: on a loop thread of this runtime, on that loop's own
    /// worker (it starts there unless an idle peer steals it first); from
    /// anywhere else, on one loop's injector (see `place`), waking that
    /// loop if it is parked.
    pub(crate) fn submit(&self, job: Job) {
        if self.closing.load(Ordering::Acquire) {
            return; // dropping the job answers its waiter
        }
        let mut job = Some(job);
        // `Some((i, backlog))`: pushed on loop `i`'s own worker, which now
        // holds more than `LOCAL_BACKLOG` jobs when `backlog`.
        let ours = thread_runtime() == Some(self.id);
        // Set when this loop is too far ahead (`LOCALITY_SLACK`): the
        // least busy loop.
        let mut elsewhere = None;
        let local = CURRENT
            .try_with(|c| {
                let c = c.try_borrow().ok()?;
                let cur = c.as_ref().filter(|_| ours)?;
                let (least, load) = self.least_busy(cur.idx);
                // (This loop's own worker counts through its stealer.)
                if self.load(cur.idx) > load.saturating_add(LOCALITY_SLACK) {
                    elsewhere = Some(least);
                    return None;
                }
                cur.worker.push(job.take()?);
                Some((cur.idx, cur.worker.len() > LOCAL_BACKLOG))
            })
            .ok()
            .flatten();
        // Not on a loop thread of this runtime: pushed on loop `i`'s
        // queue; from too busy a loop: placed on the least busy one.
        let placed = job.map(|job| match elsewhere {
            Some(i) => {
                self.loops[i].placed.push(job);
                i
            }
            None => {
                let i = self.place();
                self.loops[i].queue.push(job);
                i
            }
        });
        if self.closed_after_push(placed) {
            return;
        }
        match (local, placed) {
            (_, Some(i)) => {
                self.loops[i].inbox.wake_if_sleeping();
            }
            (Some((idx, true)), None) => self.wake_one(idx),
            _ => {}
        }
    }

    /// Queues a flow on the loop that has the fewest flows, running or
    /// waiting to start (ties: round robin), from any thread, and wakes it
    /// if it is parked. Counting the flows queued but not started yet keeps
    /// a burst (an accept loop taking many connections in one turn) spread.
    ///
    /// The flow goes on the loop's `placed` queue, which peers never steal
    /// from: the placement is the point (a connection's flow stays on its
    /// loop for good). With stealing, the loop woken first for a burst took
    /// the others' share too: 100 echo connections accepted at once ended
    /// up split 26/74 or 30/70 over two loops as often as evenly, and the
    /// uneven rounds served up to a quarter fewer round trips.
    pub(crate) fn submit_balanced(&self, job: Job) {
        if self.closing.load(Ordering::Acquire) {
            return; // dropping the job answers its waiter
        }
        let n = self.loops.len();
        let start = self.next_loop.fetch_add(1, Ordering::Relaxed) % n;
        let i = (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| !self.loops[i].dead.load(Ordering::Relaxed))
            .min_by_key(|&i| self.load(i))
            .unwrap_or(start);
        self.loops[i].placed.push(job);
        if !self.closed_after_push(Some(i)) {
            self.loops[i].inbox.wake_if_sleeping();
        }
    }

    /// Loop `i`'s flows, running or waiting to start in its queues (its
    /// own worker seen from outside, through its stealer).
    fn load(&self, i: usize) -> usize {
        let l = &self.loops[i];
        // The queues first: a job is in `taking` before it leaves its
        // queue (see `start_jobs`); `SeqCst` (plain loads on x86).
        let queued = l.placed.len() + l.queue.len() + l.stealer.len();
        queued + l.counters.taking.load(Ordering::SeqCst) + l.counters.flows.load(Ordering::SeqCst)
    }

    /// The least busy live loop other than `me` (ties: the first after it)
    /// and its load; `(me, usize::MAX)` when there is none.
    fn least_busy(&self, me: usize) -> (usize, usize) {
        let n = self.loops.len();
        (1..n)
            .map(|k| (me + k) % n)
            .filter(|&i| !self.loops[i].dead.load(Ordering::Relaxed))
            .map(|i| (i, self.load(i)))
            .min_by_key(|&(_, l)| l)
            .unwrap_or((me, usize::MAX))
    }

    /// After a job was pushed (on loop `on`'s `queue` or `placed`, or on
    /// the calling loop's own worker): true when the runtime is closing or
    /// that loop has died, in which case the queues (all of them, or that
    /// loop's) have been drained (their jobs answered; a job on a loop's
    /// own worker is answered when that loop stops).
    ///
    /// The fence pairs with the one in `Inbox::prepare_sleep` (a parked
    /// loop sees the job or the caller, waking loops after this, sees it
    /// parked), with the one in `close` (shutdown drains the injector or we
    /// see `closing`) and with the one in `loop_died` (the same for a loop
    /// that ended on its own).
    fn closed_after_push(&self, on: Option<usize>) -> bool {
        fence(Ordering::SeqCst);
        if self.closing.load(Ordering::Relaxed) {
            self.drain_injector();
            return true;
        }
        match on {
            Some(i) if self.loops[i].dead.load(Ordering::Relaxed) => {
                self.drain_loop(i);
                true
            }
            _ => false,
        }
    }

    /// Loop `idx`'s thread ended before the shutdown: mark it so no flow
    /// is placed on it, then answer the flows already queued for it.
    fn loop_died(&self, idx: usize) {
        self.loops[idx].dead.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.drain_loop(idx);
    }

    /// Picks the loop for a flow spawned from outside: the first parked
    /// loop from a round-robin start, else the round-robin one. Spawn
    /// counts stay even under a burst (each loop gets every n-th flow), and
    /// a lone spawn goes to a loop that is free to start it now.
    fn place(&self) -> usize {
        let n = self.loops.len();
        let start = self.next_loop.fetch_add(1, Ordering::Relaxed) % n;
        let live = |&i: &usize| !self.loops[i].dead.load(Ordering::Relaxed);
        let mut order = (0..n).map(|k| (start + k) % n).filter(live);
        let first = order.clone().next().unwrap_or(start);
        order
            .find(|&i| self.loops[i].inbox.is_sleeping())
            .unwrap_or(first)
    }

    /// Wakes one parked loop other than `except`, if any is parked.
    fn wake_one(&self, except: usize) {
        let n = self.loops.len();
        let start = self.next_wake.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            if i != except && self.loops[i].inbox.wake_if_sleeping() {
                return;
            }
        }
    }

    /// Answers every flow still in a loop's queues with `Canceled`.
    pub(crate) fn drain_injector(&self) {
        for i in 0..self.loops.len() {
            self.drain_loop(i);
        }
    }

    /// Answers every flow still in loop `i`'s queues with `Canceled`.
    fn drain_loop(&self, i: usize) {
        let l = &self.loops[i];
        for q in [&l.placed, &l.queue] {
            while let Some(job) = steal(|| q.steal()) {
                job.discard();
            }
        }
    }

    /// Waits until `done(self)` holds, checked whenever a loop's last flow
    /// ends, or until `deadline`; true when it holds.
    pub(crate) fn wait_quiet(
        &self,
        done: impl Fn(&Core) -> bool,
        deadline: Option<Instant>,
    ) -> bool {
        let mut g = self.quiet.lock.lock();
        self.quiet.waiters.fetch_add(1, Ordering::SeqCst);
        let r = loop {
            if done(self) {
                break true;
            }
            match deadline {
                Some(d) => {
                    if self.quiet.cv.wait_until(&mut g, d).timed_out() {
                        break done(self);
                    }
                }
                None => self.quiet.cv.wait(&mut g),
            }
        };
        self.quiet.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// No flow runs on any loop (their counts as of their last turn), and
    /// none is being taken from a queue to start.
    pub(crate) fn no_flows(&self) -> bool {
        self.loops.iter().all(|l| {
            let c = &l.counters;
            l.dead.load(Ordering::Acquire)
                || c.taking.load(Ordering::SeqCst) + c.flows.load(Ordering::SeqCst) == 0
        })
    }

    /// No flow runs, and none waits to start in a queue of the runtime
    /// (each live loop's `load` is zero).
    pub(crate) fn idle(&self) -> bool {
        (0..self.loops.len())
            .all(|i| self.loops[i].dead.load(Ordering::Acquire) || self.load(i) == 0)
    }

    /// Marks the runtime closing; see `submit`.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    /// True when some flow waits to be started that loop `idx`, the
    /// calling loop thread, could take (its own worker, its own `placed`,
    /// any loop's queue, a peer's worker).
    fn has_jobs(&self, idx: usize) -> bool {
        CURRENT.with_borrow(|c| {
            c.as_ref().is_some_and(|c| {
                !c.worker.is_empty()
                    || !self.loops[idx].placed.is_empty()
                    || self
                        .loops
                        .iter()
                        .enumerate()
                        .any(|(i, l)| !l.queue.is_empty() || (i != idx && !l.stealer.is_empty()))
            })
        })
    }
}

/// How a loop thread is to be pinned.
pub(crate) enum Pin {
    Off,
    Core(core_affinity::CoreId),
    Unknown,
}

type Ready = mpsc::Sender<(usize, io::Result<LoopRef>)>;

/// Body of loop thread `idx`: pin, create the loop, report ready, wait for
/// the runtime to be assembled, then run until told to stop.
pub(crate) fn thread_main(
    idx: usize,
    pin: Pin,
    hook: Option<SharedHook>,
    ready: Ready,
    go: mpsc::Receiver<Option<Arc<Core>>>,
) {
    let pin = match pin {
        Pin::Off => PinStatus::Off,
        Pin::Core(c) if core_affinity::set_for_current(c) => PinStatus::Pinned(c.id),
        Pin::Core(c) => PinStatus::Failed(format!("could not pin to core {}", c.id)),
        Pin::Unknown => PinStatus::Failed("the core list is not available".to_owned()),
    };
    let mut tool = match AsyncTool::new() {
        Ok(t) => t,
        Err(e) => {
            let _ = ready.send((idx, Err(e)));
            return;
        }
    };
    if let Some(h) = hook {
        tool.set_unhandled_error_hook(move |e| h(e));
    }
    let worker = Worker::new_fifo();
    let me = LoopRef {
        inbox: tool.core.inbox.clone(),
        queue: Injector::new(),
        placed: Injector::new(),
        stealer: worker.stealer(),
        pin,
        counters: Counters::default(),
        dead: AtomicBool::new(false),
    };
    if ready.send((idx, Ok(me))).is_err() {
        return;
    }
    drop(ready);
    let Ok(Some(core)) = go.recv() else {
        return; // the build failed elsewhere
    };
    set_thread_runtime(core.id);
    CURRENT.with(|c| *c.borrow_mut() = Some(Current { idx, worker }));
    let why = match catch_unwind(AssertUnwindSafe(|| run(idx, &core, &mut tool))) {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(p) => Some(crate::tool::panic_error("loop", p).to_string()),
    };
    if let Some(why) = why {
        eprintln!("futoin-asyncsteps: loop {idx} stopped: {why}");
        core.loop_died(idx);
    }
    // Flows that never started are answered (`Job::discard`), then the loop's
    // own flows are cancelled on this thread as the tool drops. The jobs
    // are popped here, not left to the worker's drop: the loop's
    // `Stealer` (in `Core`, alive while any `RuntimeHandle` is) shares
    // the worker's buffer, so dropping the worker alone keeps them.
    if let Some(cur) = CURRENT.with(|c| c.borrow_mut().take()) {
        set_thread_runtime(0);
        while let Some(job) = cur.worker.pop() {
            job.discard();
        }
    }
    drop(tool);
    publish(&core, &core.loops[idx].counters, None);
}

fn run(idx: usize, core: &Core, tool: &mut AsyncTool) -> io::Result<()> {
    let me = &core.loops[idx];
    loop {
        let started = start_jobs(idx, core, tool);
        if started == START_BATCH && !me.queue.is_empty() {
            // More waits than this loop takes per turn: share it out.
            core.wake_one(idx);
        }
        let (immediates, io) = (tool.core.has_immediates(), tool.core.io_waits());
        if spins(core.spin, started, immediates, io) {
            spin(idx, core, tool);
        }
        let wait = (started > 0).then_some(Duration::ZERO);
        tool.iterate_with(wait, &|| !core.has_jobs(idx))?;
        publish(core, &me.counters, Some(tool));
        // A stop sent through `Runtime::loop_handle` is ignored: the loops
        // of a runtime stop with it (the shutdown sets `closing` first).
        if tool.core.take_stop() && core.closing.load(Ordering::Acquire) {
            return Ok(());
        }
    }
}

/// Whether an idle loop spins before it sleeps: a spin is configured, the
/// turn started no flow and nothing is queued, and the loop watches no I/O
/// source. A loop with sources sleeps in its poll at once: the spin looks
/// only at the inbox and the job queues, so an I/O event arriving meanwhile
/// would wait for the spin to end.
fn spins(spin: Duration, started: usize, immediates: bool, io_sources: usize) -> bool {
    !spin.is_zero() && started == 0 && !immediates && io_sources == 0
}

/// Polls for messages or new flows for up to the configured spin time,
/// and no later than the loop's next timer. (A spin too long to add to
/// the clock spins until something comes.)
fn spin(idx: usize, core: &Core, tool: &mut AsyncTool) {
    let now = Instant::now();
    let spin_end = now.checked_add(core.spin);
    let until = match (spin_end, tool.core.next_deadline()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if until.is_some_and(|u| u <= now) {
        return;
    }
    loop {
        let busy = !tool.core.inbox.is_empty() || core.has_jobs(idx);
        if busy || until.is_some_and(|u| Instant::now() >= u) {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Starts up to `START_BATCH` waiting flows: this loop's own first (its
/// worker, then the flows placed on it), then from the injector, then
/// (only when this loop has nothing else to do) stolen from a peer's
/// worker. Returns how many started.
fn start_jobs(idx: usize, core: &Core, tool: &mut AsyncTool) -> usize {
    let me = &core.loops[idx];
    // The loop's flow count moves with each job it starts, not only at the
    // turn's `publish`, for `submit_balanced` and `Runtime::wait_idle` on
    // other threads. Only this thread writes it and `taking`: `taking` is
    // up from before a job leaves its queue until the job is counted in
    // `flows` (or known not to start), so whoever sees it gone from the
    // queue (the queues' lengths are read first, see `load`) sees it in
    // one or the other, and `flows` (a statistic too) stays exact.
    let taking = |on: bool| me.counters.taking.store(usize::from(on), Ordering::SeqCst);
    let mut n = 0;
    while n < START_BATCH {
        if core.closing.load(Ordering::Acquire) {
            break; // closed meanwhile: what has not started never will
        }
        let dry = !tool.core.has_immediates();
        taking(true);
        // `(job, stolen)`, counted in `taking`.
        let got = CURRENT.with_borrow(|c| {
            let w = &c.as_ref()?.worker;
            if let Some(j) = w.pop() {
                return Some((j, 0));
            }
            if !me.placed.is_empty() {
                if let Some(j) = steal(|| me.placed.steal()) {
                    return Some((j, 0));
                }
            }
            // An empty queue is seen with two loads; a steal attempt costs
            // far more (the worker's steal pins a memory epoch), and most
            // turns of a busy server find every queue empty.
            if !me.queue.is_empty() {
                if let Some(j) = steal(|| me.queue.steal_batch_and_pop(w)) {
                    return Some((j, 0));
                }
            }
            if !dry {
                return None;
            }
            let len = core.loops.len();
            let before = w.len();
            (1..len).find_map(|k| {
                let peer = &core.loops[(idx + k) % len];
                let from_queue = || {
                    if peer.queue.is_empty() {
                        return None;
                    }
                    steal(|| peer.queue.steal_batch_and_pop(w))
                };
                let from_worker = || {
                    if peer.stealer.is_empty() {
                        return None;
                    }
                    steal(|| peer.stealer.steal_batch_and_pop(w))
                };
                let j = from_queue().or_else(from_worker)?;
                // The batch beyond the popped job went to our worker.
                Some((j, 1 + w.len() - before))
            })
        });
        let Some((job, stolen)) = got else {
            // Nothing to start: a waiter for a quiet runtime that saw
            // `taking` up checks again (this loop may sleep before its
            // next `publish`).
            taking(false);
            notify_quiet(core, me.counters.flows.load(Ordering::Relaxed));
            break;
        };
        if stolen > 0 {
            me.counters
                .stolen
                .fetch_add(stolen as u64, Ordering::Relaxed);
        }
        if job.start(tool) {
            me.counters.started.fetch_add(1, Ordering::Relaxed);
            let flows = me.counters.flows.load(Ordering::Relaxed);
            me.counters.flows.store(flows + 1, Ordering::SeqCst);
            taking(false);
        } else {
            // Cancelled before it started.
            taking(false);
            notify_quiet(core, me.counters.flows.load(Ordering::Relaxed));
        }
        n += 1;
    }
    n
}

/// A loop's flow count is now `flows`: with none left, whoever waits for
/// a quiet runtime checks again (see `Quiet`).
fn notify_quiet(core: &Core, flows: usize) {
    if flows == 0 && core.quiet.waiters.load(Ordering::SeqCst) > 0 {
        let _g = core.quiet.lock.lock();
        core.quiet.cv.notify_all();
    }
}

fn publish(core: &Core, c: &Counters, tool: Option<&AsyncTool>) {
    let st = tool.map(|t| t.stats()).unwrap_or_default();
    c.flows.store(st.flows, Ordering::SeqCst);
    notify_quiet(core, st.flows);
    if tool.is_some() {
        c.steps.store(st.steps, Ordering::Relaxed);
        // On the loop's own thread: its handovers.
        let (local, crossed) = crate::sync::handovers();
        c.handovers_local.store(local, Ordering::Relaxed);
        c.handovers_crossed.store(crossed, Ordering::Relaxed);
    }
    c.timers.store(st.timers, Ordering::Relaxed);
}

#[cfg(test)]
mod tests;
