//! The inbox: the part of a loop that other threads may touch, with its
//! waker.

pub(crate) use super::handshake::Sleep;
use super::handshake::{Handshake, Posted};
use super::mailbox::Mailbox;
use super::Engine;
use crate::util::thread::thread_mark;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A message for the owner loop, pushed from any thread: a closure to run
/// there, a stop, or a message of the engine's.
///
/// Kept small (see the engine's size test): every byte of a message sent
/// from another thread crosses from the producer's core to the loop's, and
/// a burst of them is held in the queues at once.
pub(crate) enum Msg<H: Engine> {
    /// Run a closure on the loop.
    Call(Box<dyn FnOnce(&mut H) + Send>),
    /// Stop a loop that runs in `run()` mode.
    Stop,
    /// A message for the engine (a flow to start, a step completed, ...).
    Engine(H::Msg),
}

/// The shared, thread-safe side of one loop: the messages for it (a
/// plain queue for its own thread, a locked double buffer for the others:
/// see `Mailbox`), how it sleeps and how to wake it.
pub(crate) struct Inbox<H: Engine> {
    inbox: Mailbox<Msg<H>>,
    /// Messages sent from the loop's own thread: a plain queue, no atomics,
    /// no wake-up. Touched only on the owner thread (see `local()`).
    local: UnsafeCell<VecDeque<Msg<H>>>,
    /// Messages of other threads the loop has taken from `inbox` and not
    /// run yet (owner thread only, as `local`).
    taken: UnsafeCell<VecDeque<Msg<H>>>,
    waker: OnceLock<mio::Waker>,
    /// The `sleeping` and `closed` flags and the fences that pair them with
    /// `inbox` (model-checked under loom, see `handshake`).
    hs: Handshake,
    /// Identity of the owner thread (address of a thread-local).
    thread_mark: usize,
    /// Identity of the loop, never reused (tells its `TaskHandle`s from
    /// other loops').
    pub(crate) id: u64,
    /// The owner thread, unparked when the loop sleeps parked
    /// (`Sleep::Park`).
    thread: std::thread::Thread,
}

impl<H: Engine> Drop for Inbox<H> {
    fn drop(&mut self) {
        super::registry::unregister(self.id);
    }
}

/// Answers a message whose loop is gone: the engine answers its own (a
/// flow waiting for a result gets `Canceled`); anything else is dropped.
fn settle<H: Engine>(msg: Msg<H>) {
    if let Msg::Engine(m) = msg {
        H::settle(m);
    }
}

// SAFETY: all fields but `local` and `taken` are `Sync`. Those two are
// only accessed on the owner thread, through `Inbox::local` and
// `Inbox::taken` (see the proof there); other threads never read or write
// them. Their contents are `Msg`s, which are `Send`
// (a `Call` is a `Send` closure, an engine message is `Send` by the
// `Engine` bound), so dropping them on whichever thread releases the last
// `Arc` is sound.
unsafe impl<H: Engine> Sync for Inbox<H> {}

thread_local! {
    /// Loops (loop cores) alive on this thread.
    static OWNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// True when the calling thread owns a loop (it must not block waiting
/// for a flow that may need that loop to run).
pub(crate) fn owns_loop() -> bool {
    OWNED.with(|c| c.get() > 0)
}

/// Counts a loop created on this thread; the count drops with the guard.
pub(crate) struct OwnerGuard(());

impl OwnerGuard {
    pub(crate) fn new() -> Self {
        OWNED.with(|c| c.set(c.get() + 1));
        OwnerGuard(())
    }
}

impl Drop for OwnerGuard {
    fn drop(&mut self) {
        // `try_with`: a loop dropped during thread-local teardown.
        let _ = OWNED.try_with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Numbers the loops (`Inbox::id`).
static NEXT_LOOP: AtomicU64 = AtomicU64::new(1);

impl<H: Engine> Inbox<H> {
    pub(crate) fn new() -> Arc<Self> {
        let s = Arc::new(Inbox {
            inbox: Mailbox::new(),
            local: UnsafeCell::new(VecDeque::new()),
            taken: UnsafeCell::new(VecDeque::new()),
            waker: OnceLock::new(),
            hs: Handshake::new(),
            thread_mark: thread_mark(),
            id: NEXT_LOOP.fetch_add(1, Ordering::Relaxed),
            thread: std::thread::current(),
        });
        super::registry::register(s.id, &s);
        s
    }

    /// Identity of the owner thread (what [`thread_mark`] gives there).
    #[inline]
    pub(crate) fn owner_mark(&self) -> usize {
        self.thread_mark
    }

    pub(crate) fn set_waker(&self, w: mio::Waker) {
        let _ = self.waker.set(w);
    }

    /// True on the loop's own thread.
    #[inline]
    pub(crate) fn is_same_thread(&self) -> bool {
        self.thread_mark == thread_mark()
    }

    /// Runs `f` on the owner thread's local queue.
    #[inline]
    fn local<R>(&self, f: impl FnOnce(&mut VecDeque<Msg<H>>) -> R) -> R {
        debug_assert!(self.is_same_thread());
        // SAFETY: `local` is only reached from the thread that owns the loop:
        // `send` checks `is_same_thread()` first, and the other callers
        // (`close`, `prepare_sleep`, `Batch::next`, `is_empty`, `depth`,
        // `local_len`) are reached only through the owner's loop core
        // (`Core`, made on the owner thread and `!Send` by its marker
        // field, so it never leaves that thread) or the engine and tool
        // holding it, as the assertion above checks in debug builds. So no
        // two threads touch it. On that thread the `&mut` lives only inside
        // `f`, which only pushes, pops or reads the length and never runs
        // user code (a popped message is handled after `f` returns), so no
        // second `&mut` can overlap.
        f(unsafe { &mut *self.local.get() })
    }

    /// Runs `f` on the owner thread's queue of messages taken from other
    /// threads.
    #[inline]
    fn taken<R>(&self, f: impl FnOnce(&mut VecDeque<Msg<H>>) -> R) -> R {
        debug_assert!(self.is_same_thread());
        // SAFETY: as for `local` (the same callers, on the owner thread
        // only; `f` only moves messages in or out, or reads the length,
        // and runs no user code).
        f(unsafe { &mut *self.taken.get() })
    }

    /// Queues a message; never blocks. Wakes the loop only when it sleeps.
    /// From the loop's own thread it takes the plain local queue.
    pub(crate) fn send(&self, msg: Msg<H>) {
        if self.is_same_thread() {
            if self.hs.is_closed() {
                settle(msg);
            } else {
                self.local(|q| q.push_back(msg));
            }
            return;
        }
        self.inbox.push(msg);
        // The fence in `after_push` pairs with the one in `prepare_sleep`:
        // either the loop sees the message before sleeping, or we see
        // `sleeping` and wake it. It also pairs with the one in `close`:
        // either the closing loop drains this message, or we see `closed`
        // and settle it here.
        if self.hs.after_push(|how| self.wake_as(how)) == Posted::Closed {
            self.drain_inbox();
        }
    }

    /// Wakes the loop unconditionally, without a message (a waker whose
    /// owner does not track `sleeping`, like `block_on`'s), however it
    /// sleeps: its thread is unparked (nothing but a flag when it is not
    /// parked) and its `mio::Waker` is woken.
    pub(crate) fn wake_loop(&self) {
        self.thread.unpark();
        self.wake_as(Sleep::Poll);
    }

    /// Wakes a loop that sleeps the way `how` says.
    #[inline]
    fn wake_as(&self, how: Sleep) {
        match how {
            Sleep::Park => self.thread.unpark(),
            Sleep::Poll => {
                if let Some(w) = self.waker.get() {
                    // A failed wake means the poll instance is gone: the
                    // loop has stopped, and the message is dropped with it.
                    let _ = w.wake();
                }
            }
        }
    }

    /// Wakes the loop if it sleeps (or is about to sleep), and says
    /// whether it did. Only the producer that flips `sleeping` back to
    /// awake makes the wake syscall, so a burst of messages to a parked
    /// loop costs one wake, not one per message. Call it after a SeqCst
    /// fence that follows publishing the work.
    pub(crate) fn wake_if_sleeping(&self) -> bool {
        self.hs.wake_if_sleeping(|how| self.wake_as(how))
    }

    /// The loop is gone (its loop core dropped): answer every queued message
    /// and every later one at once. Owner thread only.
    pub(crate) fn close(&self) {
        self.hs.close();
        while let Some(m) = self.local(|q| q.pop_front()) {
            settle(m);
        }
        while let Some(m) = self.taken(|q| q.pop_front()) {
            settle(m);
        }
        self.drain_inbox();
    }

    /// Settles what other threads queued (any thread: the closing loop,
    /// or a producer that found it closed).
    fn drain_inbox(&self) {
        while let Some(m) = self.inbox.pop() {
            settle(m);
        }
    }

    /// Marks the loop as going to sleep the way `how` says; returns false
    /// when it must not (messages are waiting, or `idle` says other work
    /// is).
    ///
    /// `idle` is checked after `sleeping` is published (SeqCst fence), so a
    /// producer of that other work that pushes, fences, and then wakes
    /// every loop it sees sleeping is never missed.
    pub(crate) fn prepare_sleep(&self, how: Sleep, idle: &dyn Fn() -> bool) -> bool {
        if !self.local(|q| q.is_empty()) || !self.taken(|q| q.is_empty()) {
            return false;
        }
        self.hs
            .prepare_sleep(how, || self.inbox.is_empty() && idle())
    }

    /// The loop has gone (a hint from another thread: it may go just
    /// after this says no; a message sent then is settled by its sender).
    pub(crate) fn is_closed(&self) -> bool {
        self.hs.is_closed()
    }

    /// True while the loop is (about to be) asleep: a hint for placement;
    /// a producer that must not miss a sleeper uses `wake_if_sleeping`
    /// after its fence instead.
    pub(crate) fn is_sleeping(&self) -> bool {
        self.hs.is_sleeping()
    }

    pub(crate) fn woke(&self) {
        self.hs.woke();
    }

    /// The messages waiting now, to be taken with [`Batch::next`]; owner
    /// thread only. Those of other threads are taken from the shared
    /// queue now (one lock, when there are any).
    #[inline]
    pub(crate) fn batch(&self) -> Batch {
        let remote = if self.inbox.is_empty() {
            self.taken(|q| q.len())
        } else {
            self.taken(|q| {
                self.inbox.take_all(q);
                q.len()
            })
        };
        Batch {
            local: self.local_len(),
            remote,
            remote_next: false,
        }
    }

    /// Messages sent from this loop's own thread and waiting; owner
    /// thread only.
    #[inline]
    pub(crate) fn local_len(&self) -> usize {
        self.local(|q| q.len())
    }

    /// True when no message waits; owner thread only.
    pub(crate) fn is_empty(&self) -> bool {
        self.local(|q| q.is_empty()) && self.taken(|q| q.is_empty()) && self.inbox.is_empty()
    }

    /// Messages from other threads that the loop has not taken yet; any
    /// thread (a snapshot).
    pub(crate) fn remote_depth(&self) -> usize {
        self.inbox.len()
    }

    /// Messages waiting; owner thread only.
    pub(crate) fn depth(&self) -> usize {
        self.local(|q| q.len()) + self.taken(|q| q.len()) + self.inbox.len()
    }
}

/// The messages that were waiting when a batch was taken: a batch takes
/// these and no more, so a message sent while it runs (a future that wakes
/// itself, an external completion made by a step, a message from another
/// thread) waits for the next batch: the same pass takes it while fewer
/// than `DRAIN_MAX` messages have run, else the next pass does, after the
/// due timers and the queued entries (see `Drain`). It takes turns
/// between the local queue and the messages of other threads, so neither
/// kind waits behind a long run of the other.
pub(crate) struct Batch {
    local: usize,
    remote: usize,
    /// The other threads' turn comes next.
    remote_next: bool,
}

impl Batch {
    /// Messages left in the batch.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.local + self.remote
    }

    /// The next message of the batch; `None` once it has been taken whole.
    #[inline]
    pub(crate) fn next<H: Engine>(&mut self, shared: &Inbox<H>) -> Option<Msg<H>> {
        if self.remote == 0 {
            // Local messages only (a busy loop's usual batch): they are
            // all there, as only this thread takes them.
            if self.local == 0 {
                return None;
            }
            self.local -= 1;
            return shared.local(|q| q.pop_front());
        }
        self.next_mixed(shared)
    }

    /// [`next`](Self::next) while messages of other threads are left.
    fn next_mixed<H: Engine>(&mut self, shared: &Inbox<H>) -> Option<Msg<H>> {
        loop {
            let remote = self.remote > 0 && (self.local == 0 || self.remote_next);
            if remote {
                self.remote -= 1;
                self.remote_next = false;
                // Only the owner takes from `taken`: what was counted is
                // there.
                if let Some(m) = shared.taken(|q| q.pop_front()) {
                    return Some(m);
                }
                self.remote = 0;
            } else if self.local > 0 {
                self.local -= 1;
                self.remote_next = true;
                if let Some(m) = shared.local(|q| q.pop_front()) {
                    return Some(m);
                }
                self.local = 0;
            } else {
                return None;
            }
        }
    }
}

/// Messages one pass of the loop runs beyond those that waited when it
/// began (`Core::run_inbox`): a pass runs at most this many, or the first
/// batch whole when it is longer.
pub(crate) const DRAIN_MAX: usize = 64;

/// The messages one pass runs (see `Core::run_inbox`): the batch
/// waiting when it starts, whole (as the entries queued when it starts),
/// then those sent meanwhile, batch after batch, until a batch finds none
/// or the pass has run [`DRAIN_MAX`] messages, or the first batch if that
/// was longer. Taken one message at a time, so `TestTool` runs the same
/// messages in a turn as `AsyncTool` does in a pass.
pub(crate) struct Drain {
    batch: Batch,
    /// Messages taken so far.
    pub(crate) ran: usize,
    /// How many the pass may take: `DRAIN_MAX`, or the first batch.
    limit: usize,
    /// `ran` when `batch` was taken: a batch that gives nothing ends the
    /// drain.
    batch_start: usize,
    /// Over: later messages wait for the next drain.
    done: bool,
}

impl Drain {
    /// A drain starting with the messages waiting now; owner thread only.
    #[inline]
    pub(crate) fn new<H: Engine>(shared: &Inbox<H>) -> Self {
        let batch = shared.batch();
        Drain {
            limit: DRAIN_MAX.max(batch.len()),
            batch,
            ran: 0,
            batch_start: 0,
            done: false,
        }
    }

    /// The next message of the drain; `None` once it is over (and from
    /// then on).
    #[inline]
    pub(crate) fn next<H: Engine>(&mut self, shared: &Inbox<H>) -> Option<Msg<H>> {
        while !self.done {
            if self.ran >= self.limit {
                break;
            }
            if let Some(m) = self.batch.next(shared) {
                self.ran += 1;
                return Some(m);
            }
            if self.ran == self.batch_start {
                break;
            }
            self.batch = shared.batch();
            self.batch_start = self.ran;
        }
        self.done = true;
        None
    }
}

#[cfg(all(test, not(loom)))]
impl<H: Engine> Inbox<H> {
    /// How the loop sleeps now, if it does (tests).
    pub(crate) fn sleeping_as(&self) -> Option<Sleep> {
        self.hs.sleeping_as()
    }
}
