//! [`Core`]: one loop's own parts: the clock, immediate and deferred tasks,
//! the queue they and the engine's ready work wait in, the timers, the
//! inbox, the readiness table, and one pass of the loop.

use super::inbox::{Drain, Inbox, Msg, OwnerGuard};
use super::loop_fn::LoopFn;
use super::reactor::{IoKey, Reactor};
use super::timers::Timers;
use super::{panic_error, Engine, Stage};
use crate::error::Error;
use slotmap::{new_key_type, SlotMap};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

new_key_type! {
    /// A scheduled callback or timer on its loop.
    pub(crate) struct TaskKey;
}

/// Timer delays are capped here, ~100 years (a longer one, up to
/// `Duration::MAX`, would not fit in an `Instant`).
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Handle of a scheduled callback (spec 2.6 `Handle`): pass it to
/// [`Scheduler::cancel`](crate::Scheduler::cancel) or
/// [`Scheduler::is_valid`](crate::Scheduler::is_valid) of the loop that
/// gave it out; another loop ignores it.
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
    /// The loop (`Inbox::id`) that gave it out.
    tool: u64,
}

impl TaskHandle {
    /// Its key on its own loop (for the binary interface, which tells the
    /// loop apart itself).
    pub(crate) fn key(&self) -> TaskKey {
        self.key
    }
}

/// What a task does when it runs.
enum Task<H: Engine> {
    /// A user's callback (`immediate`, `deferred`, a loop callback), in
    /// place when it is one word.
    User(LoopFn<H>),
    /// A timer of the engine's (a step's timeout).
    Engine(H::Timer),
}

struct TaskSlot<H: Engine> {
    task: Task<H>,
    /// Still in the timer heap (not due yet).
    timer: bool,
}

/// An entry of the loop's queue: a task that is due, or engine work that
/// is ready (a flow with strands to run).
enum Entry<E> {
    Task(TaskKey),
    Engine(E),
}

/// What happens to an error nobody waits for.
type ErrorHook = Box<dyn FnMut(&Error)>;

/// The loop core of one loop, generic over the engine `H` that owns it
/// (the engine holds its `Core` and hands it out through
/// [`Engine::core`]). It knows nothing of flows: what it runs of the
/// engine's (its messages, timers, queue entries, I/O waiters) it hands
/// back through the [`Engine`] trait.
pub(crate) struct Core<H: Engine> {
    pub(crate) now: Instant,
    /// `now` follows the real clock (`AsyncTool`): it is read again when a
    /// timer is set. A virtual clock (`TestTool`) moves only when told.
    real_clock: bool,
    tasks: SlotMap<TaskKey, TaskSlot<H>>,
    queue: VecDeque<Entry<H::Entry>>,
    timers: Timers<TaskKey>,
    stale_timers: usize,
    /// Entries in `queue` whose task was cancelled or whose engine work is
    /// gone (see [`entry_died`](Self::entry_died)).
    dead_entries: usize,
    order: u64,
    pub(crate) inbox: Arc<Inbox<H>>,
    unhandled: Option<ErrorHook>,
    /// The readiness table; `None` on a loop without one (`TestTool`).
    pub(crate) io: Option<Reactor<H::Waiter>>,
    stopped: bool,
    /// Marks the creating thread as a loop owner while the loop lives.
    _owner: OwnerGuard,
    /// Neither `Send` nor `Sync`, whatever the tasks hold: a loop core stays
    /// on the thread that made it, which the inbox's local queue relies on
    /// (see `Inbox::local`).
    _local: PhantomData<*const ()>,
}

impl<H: Engine> Core<H> {
    pub(crate) fn new(now: Instant) -> Self {
        Core {
            now,
            real_clock: false,
            tasks: SlotMap::with_key(),
            queue: VecDeque::new(),
            timers: Timers::new(now),
            stale_timers: 0,
            dead_entries: 0,
            order: 0,
            inbox: Inbox::new(),
            unhandled: None,
            io: None,
            stopped: false,
            _owner: OwnerGuard::new(),
            _local: PhantomData,
        }
    }

    /// Gives this loop a readiness table and the real clock (`AsyncTool`).
    pub(crate) fn set_registry(&mut self, registry: mio::Registry) {
        self.io = Some(Reactor::new(registry));
        self.real_clock = true;
    }

    /// Sources registered with this loop's reactor.
    pub(crate) fn io_waits(&self) -> usize {
        self.io.as_ref().map_or(0, |io| io.len())
    }

    /// A readiness event: hands the wait it answers to the engine, or
    /// keeps the readiness for the next wait.
    pub(crate) fn io_event(h: &mut H, ev: &mio::event::Event) {
        let done = h.core().io.as_mut().and_then(|io| io.event(ev));
        if let Some(d) = done {
            h.on_ready(d);
        }
    }

    /// Completes a wait that found kept readiness when it began (posted to
    /// run after the callback that began it has returned).
    pub(crate) fn io_poke(h: &mut H, k: IoKey) {
        let done = h.core().io.as_mut().and_then(|io| io.poke(k));
        if let Some(d) = done {
            h.on_ready(d);
        }
    }

    /// Schedules `f` to run on this loop as soon as possible.
    pub(crate) fn immediate(&mut self, f: impl FnOnce(&mut H) + 'static) -> TaskHandle {
        let key = self.tasks.insert(TaskSlot {
            task: Task::User(LoopFn::new(f)),
            timer: false,
        });
        self.queue.push_back(Entry::Task(key));
        self.handle_of(key)
    }

    /// The public handle of task `key` of this loop.
    pub(crate) fn handle_of(&self, key: TaskKey) -> TaskHandle {
        TaskHandle {
            key,
            tool: self.inbox.id,
        }
    }

    /// Task `h` names on this loop, if this loop gave it out.
    pub(crate) fn key_of(&self, h: TaskHandle) -> Option<TaskKey> {
        (h.tool == self.inbox.id).then_some(h.key)
    }

    /// Schedules `f` to run after `delay`, counted from this call (the
    /// clock is read again on a real-time loop); a zero delay runs it on
    /// the next pass, after the immediates already queued. A delay above
    /// [`MAX_DELAY`] counts as `MAX_DELAY`.
    pub(crate) fn deferred(
        &mut self,
        delay: Duration,
        f: impl FnOnce(&mut H) + 'static,
    ) -> TaskHandle {
        let key = self.add_timer(delay, Task::User(LoopFn::new(f)));
        self.handle_of(key)
    }

    /// A timer of the engine's: `t` goes to [`Engine::on_timer`] after
    /// `delay`.
    pub(crate) fn engine_timer(&mut self, delay: Duration, t: H::Timer) -> TaskKey {
        self.add_timer(delay, Task::Engine(t))
    }

    fn add_timer(&mut self, delay: Duration, task: Task<H>) -> TaskKey {
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

    /// Cancels a user's task; a no-op when it already ran, or when the
    /// handle names one of the engine's timers or another loop's task.
    pub(crate) fn cancel(&mut self, h: TaskHandle) {
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

    /// True while a user's task is still scheduled.
    pub(crate) fn is_valid(&self, h: TaskHandle) -> bool {
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

    /// Replaces what happens to an error nobody waits for (the default
    /// writes one line to stderr).
    pub(crate) fn set_unhandled_error_hook(&mut self, hook: impl FnMut(&Error) + 'static) {
        self.unhandled = Some(Box::new(hook));
    }

    /// Hands an error nobody waits for to the hook (or stderr). A
    /// panicking hook is reported on stderr and the loop goes on, as after
    /// any other user callback.
    #[cold]
    #[inline(never)]
    pub(crate) fn report_unhandled(&mut self, e: &Error) {
        match &mut self.unhandled {
            Some(h) => {
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| h(e))) {
                    let why = panic_error("unhandled-error hook", p);
                    eprintln!("futoin-asyncsteps: {why} (reporting: {e})");
                }
            }
            None => eprintln!("futoin-asyncsteps: unhandled error in flow: {e}"),
        }
    }

    /// Queues engine work that is ready to run (behind what is queued).
    #[inline]
    pub(crate) fn push_entry(&mut self, e: H::Entry) {
        self.queue.push_back(Entry::Engine(e));
    }

    /// The work of an engine entry still in the queue is gone (a flow
    /// ended while queued): the entry is counted dead until it comes up,
    /// when [`Engine::run_entry`] says so and it is dropped.
    #[inline]
    pub(crate) fn entry_died(&mut self) {
        self.dead_entries += 1;
    }

    /// Runs a message taken from the inbox.
    #[inline(always)]
    pub(crate) fn dispatch(h: &mut H, msg: Msg<H>) {
        match msg {
            Msg::Engine(m) => h.on_message(m),
            Msg::Call(f) => Self::call_user(h, f),
            Msg::Stop => h.core().stopped = true,
        }
    }

    /// Runs a user's callback; its panic is reported and the loop goes on.
    fn call_user(h: &mut H, f: impl FnOnce(&mut H)) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(h))) {
            let e = panic_error("loop callback", p);
            h.core().report_unhandled(&e);
        }
    }

    /// Runs the messages that wait when it starts (see
    /// [`Batch`](super::inbox::Batch)), all of them, then those that came
    /// meanwhile, batch after batch, until a batch finds none or the pass
    /// has run [`DRAIN_MAX`](super::inbox::DRAIN_MAX) messages (or the
    /// first batch, if longer); the rest wait for the next pass. (The rule
    /// is [`Drain`]'s, which `TestTool` follows too, one message at a
    /// time.)
    ///
    /// The messages waiting when a pass starts run whole, as the entries
    /// queued then do: a flow that completed thousands of waiting steps
    /// of its loop (a driver flow, a broadcast) sees them all run before
    /// its next activation, not a slice of them per activation. The bound
    /// on the later batches keeps a flow that keeps sending itself
    /// messages (a future that wakes itself, a step completing its own
    /// external handle) from holding back timers, queued entries and
    /// other threads' messages for more than `DRAIN_MAX` activations.
    /// Going on past the first batch keeps a chain of local hand-overs in
    /// one pass: a sync slot given to a waiter of this loop is a local
    /// message, and under contention one section's end grants the next.
    #[inline]
    pub(crate) fn run_inbox(h: &mut H) -> usize {
        let mut d = Drain::new(&h.core_ref().inbox);
        while let Some(m) = d.next(&h.core_ref().inbox) {
            Self::dispatch(h, m);
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
    /// was dead (then it is only dropped).
    #[inline(always)]
    pub(crate) fn run_front(h: &mut H) -> bool {
        Self::look_ahead(h);
        let core = h.core();
        let Some(e) = core.queue.pop_front() else {
            return false;
        };
        match e {
            Entry::Engine(e) => {
                if !h.run_entry(e) {
                    h.core().dead_entries -= 1;
                    return false;
                }
            }
            Entry::Task(k) => match core.tasks.remove(k) {
                Some(slot) => match slot.task {
                    Task::User(f) => Self::call_user(h, |h| f.call(h)),
                    Task::Engine(t) => h.on_timer(t),
                },
                None => {
                    core.dead_entries -= 1;
                    return false;
                }
            },
        }
        true
    }

    /// The engine timer of the queued entry at `i`, if it is one.
    #[inline]
    fn timer_at(&self, i: usize) -> Option<&H::Timer> {
        let Entry::Task(k) = *self.queue.get(i)? else {
            return None;
        };
        match &self.tasks.get(k)?.task {
            Task::Engine(t) => Some(t),
            Task::User(_) => None,
        }
    }

    /// Look-ahead over a batch of fired engine timers: while one is
    /// handled, the engine fetches what the next few will touch into the
    /// cache, in stages (see [`Stage`]). Only while such a batch is queued:
    /// a lone entry has nothing to overlap, and other entries are left
    /// alone because they are mostly warm (work that was just started or
    /// just ran), where the stages would cost about 80 instructions an
    /// entry for nothing.
    #[inline(always)]
    fn look_ahead(h: &H) {
        let c = h.core_ref();
        let Some(t) = c.timer_at(Stage::Far as usize) else {
            return; // fewer entries, engine work, a user callback or a cancelled one
        };
        h.look_ahead(t, Stage::Far);
        if let Some(t) = c.timer_at(Stage::Mid as usize) {
            h.look_ahead(t, Stage::Mid);
        }
        if let Some(t) = c.timer_at(Stage::Near as usize) {
            h.look_ahead(t, Stage::Near);
        }
    }

    /// Entries in the queue, dead ones included.
    pub(crate) fn queued_entries(&self) -> usize {
        self.queue.len()
    }

    /// One pass: the due timers join the queue, the messages run (those
    /// waiting, then those sent meanwhile, up to [`DRAIN_MAX`](super::inbox::DRAIN_MAX) in all
    /// unless the first batch was longer; see
    /// [`run_inbox`](Self::run_inbox)), then the entries that were queued
    /// before the messages ran. What the pass queues (a flow a message
    /// started or resumed) and the messages past the bound wait for the
    /// next pass, whose messages go first. `TestTool` runs its turns by
    /// the same rule, one event at a time.
    pub(crate) fn run_pass(h: &mut H) -> usize {
        // A fired timer is counted when its entry runs (not when it is
        // queued as well).
        let core = h.core();
        core.fire_timers();
        let mut todo = core.queue.len();
        let mut n = Self::run_inbox(h);
        while todo > 0 {
            todo -= 1;
            if Self::run_front(h) {
                n += 1;
            }
        }
        n
    }

    /// True when live entries are queued.
    pub(crate) fn has_immediates(&self) -> bool {
        self.queue.len() > self.dead_entries
    }

    /// Live entries queued.
    pub(crate) fn immediates(&self) -> usize {
        self.queue.len() - self.dead_entries
    }

    /// Live timers pending.
    pub(crate) fn pending_timers(&self) -> usize {
        self.timers.len() - self.stale_timers.min(self.timers.len())
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
        !self.has_immediates() && self.next_deadline().is_none() && self.inbox.is_empty()
    }

    /// A stop message came since the last call (see `ToolHandle::stop`).
    pub(crate) fn take_stop(&mut self) -> bool {
        std::mem::take(&mut self.stopped)
    }
}

impl<H: Engine> Drop for Core<H> {
    fn drop(&mut self) {
        // Every message still queued, and every later one, is answered.
        self.inbox.close();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The loop core on an engine of its own: a log, with no flows at all.

    use super::*;
    use crate::tool::Done;
    use std::cell::Cell;

    thread_local! {
        /// Engine messages settled because their loop was gone.
        static SETTLED: Cell<u32> = const { Cell::new(0) };
    }

    /// An engine that logs what the loop hands it; entry 0 is work that
    /// is gone.
    struct Log {
        core: Core<Log>,
        seen: Vec<String>,
    }

    impl Engine for Log {
        type Msg = u32;
        type Timer = u32;
        type Entry = u32;
        type Waiter = ();

        fn core(&mut self) -> &mut Core<Self> {
            &mut self.core
        }
        fn core_ref(&self) -> &Core<Self> {
            &self.core
        }
        fn on_message(&mut self, m: u32) {
            self.seen.push(format!("message {m}"));
        }
        fn on_timer(&mut self, t: u32) {
            self.seen.push(format!("timer {t}"));
        }
        fn run_entry(&mut self, e: u32) -> bool {
            if e == 0 {
                return false;
            }
            self.seen.push(format!("entry {e}"));
            true
        }
        fn on_ready(&mut self, _: Done<()>) {
            self.seen.push("ready".into());
        }
        fn settle(m: u32) {
            SETTLED.with(|s| s.set(s.get() + m));
        }
    }

    fn engine() -> Log {
        Log {
            core: Core::new(Instant::now()),
            seen: Vec::new(),
        }
    }

    /// A pass runs the due timers' entries after what was queued before
    /// them, and the messages first; a dead entry is dropped uncounted, and
    /// an engine timer is not a user's task.
    #[test]
    fn a_pass_hands_the_engine_its_messages_timers_and_entries_in_order() {
        let mut e = engine();
        e.core.push_entry(1);
        e.core.immediate(|e: &mut Log| e.seen.push("task".into()));
        let t = e.core.engine_timer(Duration::ZERO, 7);
        e.core.push_entry(0);
        e.core.entry_died();
        e.core.inbox.send(Msg::Engine(5));
        assert_eq!(e.core.immediates(), 2, "the dead entry is not counted");
        assert!(!e.core.is_valid(e.core.handle_of(t)), "an engine timer");

        assert_eq!(Core::run_pass(&mut e), 4, "the dead entry did not run");
        assert_eq!(e.seen, ["message 5", "entry 1", "task", "timer 7"]);
        assert!(e.core.is_idle());
        assert_eq!(e.core.immediates(), 0);
    }

    /// A dropped loop core settles the engine messages still queued.
    #[test]
    fn a_dropped_core_settles_the_engine_messages_left() {
        let e = engine();
        e.core.inbox.send(Msg::Engine(3));
        e.core.inbox.send(Msg::Stop);
        let before = SETTLED.with(Cell::get);
        drop(e);
        assert_eq!(SETTLED.with(Cell::get) - before, 3);
    }
}
