//! The lock-free core shared by [`Mutex`](super::Mutex) and
//! [`Throttle`](super::Throttle): an admission counter and a FIFO of
//! waiters, in one atomic word plus a lock-free queue.
//!
//! The word packs `(queued << 32) | admitted`. `admitted` is the number of
//! flows inside (Mutex) or the entries of the current period (Throttle);
//! `queued` counts nodes that have committed to the queue, including dead
//! ones not yet skipped: cancelled, or granted out of turn (a holder that
//! hands its slot to a waiter of its own loop, see `cohort`). The rules
//! that make it lock-free and keep its order:
//!
//! - A newcomer enters only when `queued == 0 && admitted < max` (one CAS on
//!   the uncontended path). Otherwise it CASes `queued + 1` and then pushes
//!   its node: every increment is followed by exactly one push.
//! - Whoever hands a slot to a waiter (a Mutex release, a Throttle period)
//!   CASes `queued - 1` (keeping `admitted`: the slot moves to the waiter)
//!   and then pops one node. The pop may briefly find the queue empty while
//!   the committed waiter is between its CAS and its push; it retries (a
//!   few instructions of the other thread, the same kind of window as a
//!   crossbeam `Steal::Retry`).
//! - A node is granted or cancelled exactly once (CAS on its state). A
//!   handover that pops a dead node keeps the slot and goes on to the next
//!   waiter, or gives the slot back when none is left.
//! - A holder may grant a queued node out of turn
//!   ([`grant_out_of_turn`](Gate::grant_out_of_turn)): the slot moves to
//!   that waiter (`admitted` stays), the node stays queued, dead, until a
//!   handover skips it. Nothing else passes the queue.
//! - `queued > 0` implies `admitted == max` for a Mutex: a release with
//!   nodes queued transfers instead of decrementing, so no newcomer can
//!   slip past the queue.
//!
//! Under `--cfg loom` the atomics and the queue come from `loom`, and the
//! `loom_tests` module model-checks acquire, release, queueing and cancel
//! with two and three threads.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU64, AtomicU8};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU64, AtomicU8};

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};
use std::sync::Arc;

const ONE_QUEUED: u64 = 1 << 32;
const ADMITTED: u64 = ONE_QUEUED - 1;

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const CANCELLED: u8 = 2;

/// A queued flow's node: granted or cancelled exactly once. Whoever wins
/// that one change of state takes what resumes the waiter: the granter to
/// use it, the waiter that cancels to drop it at once (a cancelled node may
/// stay in the queue until a handover skips it, and what resumes a waiter
/// holds its step's wait token and a handle of its loop).
pub(crate) struct Node<T> {
    state: AtomicU8,
    /// What the granter uses to resume the waiter (its step's handle);
    /// `None` once taken.
    resume: Cell<Option<T>>,
    /// Its place in the queue's order (see [`OrderLog`]).
    #[cfg(all(test, not(loom)))]
    arrival: std::sync::atomic::AtomicU64,
}

/// The exact order of a gate's queue and of its grants, for the tests of
/// the handover order (a lock-free queue has no order a test could read
/// from outside: two flows that queue at the same moment may push in
/// either order). Test builds only.
#[cfg(all(test, not(loom)))]
#[derive(Default)]
pub(crate) struct OrderLog {
    /// Nodes pushed so far: each gets the next number as it is pushed
    /// (under the log's lock, so the numbers are the queue's order).
    pub(crate) pushed: u64,
    /// The numbers of the granted nodes, in the order of their grants.
    pub(crate) grants: Vec<u64>,
}

/// What a gate does with a dead node a handover skipped: keeps it for a
/// later waiter of the skipping thread's loop, or drops it.
pub(crate) type Spare<T> = fn(Arc<Node<T>>);

// SAFETY: `resume` is the only field that is not `Sync`. It is written when
// the node is made, before the node is shared, and after that it is
// touched only by `grant` and `cancel`, each in the one thread that won
// the node's single change of state away from `WAITING` (their CAS), and
// at most once there, and by the node's `Drop`, which runs
// after the last `Arc` is gone (the `Arc` count orders it after any take).
// So no two threads ever access it. The write at construction happens
// before the winner's take: the granter got the node from the queue (the
// push synchronises with the pop), or, granting out of turn, from its own
// thread's cohort, which the waiter's thread (that same thread: a cohort
// belongs to one loop) filled after making the node (program order); the
// canceller is the waiter that made it. A node made by `reuse` is written
// through `Arc::get_mut`, whose acquire orders the last other `Arc`'s drop
// before it. Moving the `T` out to another thread needs `T: Send`.
unsafe impl<T: Send> Sync for Node<T> {}

impl<T> Node<T> {
    pub(crate) fn new(resume: T) -> Arc<Self> {
        Arc::new(Node {
            state: AtomicU8::new(WAITING),
            resume: Cell::new(Some(resume)),
            #[cfg(all(test, not(loom)))]
            arrival: Default::default(),
        })
    }

    /// The granter's side: what resumes the waiter, when it gets the slot.
    fn grant(&self) -> Option<T> {
        let won = self
            .state
            .compare_exchange(WAITING, GRANTED, AcqRel, Acquire)
            .is_ok();
        // SAFETY: this thread won the node's only change of state, so no
        // other thread touches the cell (see the `Sync` impl).
        won.then(|| unsafe { self.resume.take() }).flatten()
    }

    /// The waiter's side when it gives up (cancel, timeout): true when it
    /// left the queue before being granted (what would have resumed it is
    /// dropped now, though the node may stay queued for a while); false
    /// when a slot was already handed to it (the caller must give that
    /// slot back).
    pub(crate) fn cancel(&self) -> bool {
        let won = self
            .state
            .compare_exchange(WAITING, CANCELLED, AcqRel, Acquire)
            .is_ok();
        if won {
            // SAFETY: this thread won the node's only change of state, so
            // no other thread touches the cell (see the `Sync` impl).
            drop(unsafe { self.resume.take() });
        }
        won
    }

    /// True once a slot was handed to this waiter.
    pub(crate) fn is_granted(&self) -> bool {
        self.state.load(Acquire) == GRANTED
    }

    /// True while the waiter waits: neither granted nor cancelled.
    pub(crate) fn is_waiting(&self) -> bool {
        self.state.load(Acquire) == WAITING
    }

    /// A node for a new waiter: `spare` (a node kept for reuse) when it
    /// is no longer shared (the queue and the granter are done with it),
    /// else one made anew, so a waiter of a warm loop allocates no node.
    pub(crate) fn reuse(spare: Option<Arc<Self>>, resume: T) -> Arc<Self> {
        if let Some(mut n) = spare {
            // `get_mut` checks that no other `Arc` is left, with the
            // acquire that orders the last one's drop before this reuse.
            if let Some(m) = Arc::get_mut(&mut n) {
                m.state.store(WAITING, Relaxed);
                m.resume.set(Some(resume));
                return n;
            }
        }
        Node::new(resume)
    }
}

/// The cell of a node's resume value: std's `UnsafeCell`, or loom's under
/// `--cfg loom`, which checks that no two threads ever touch it at once.
struct Cell<T>(
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
);

impl<T> Cell<Option<T>> {
    fn new(v: Option<T>) -> Self {
        #[cfg(not(loom))]
        return Cell(std::cell::UnsafeCell::new(v));
        #[cfg(loom)]
        return Cell(loom::cell::UnsafeCell::new(v));
    }

    /// Replaces the value; `&mut self` proves exclusive access.
    fn set(&mut self, v: Option<T>) {
        #[cfg(not(loom))]
        {
            *self.0.get_mut() = v;
        }
        #[cfg(loom)]
        // SAFETY: `&mut self`: no other reference to the cell exists.
        self.0.with_mut(|p| unsafe { *p = v });
    }

    /// # Safety
    /// No other thread accesses the cell meanwhile.
    unsafe fn take(&self) -> Option<T> {
        #[cfg(not(loom))]
        // SAFETY: exclusive access, by the caller's contract.
        return unsafe { (*self.0.get()).take() };
        #[cfg(loom)]
        // SAFETY: exclusive access, by the caller's contract (checked by loom).
        return self.0.with_mut(|p| unsafe { (*p).take() });
    }
}

/// The FIFO of waiting nodes: crossbeam's lock-free `Injector`, or a
/// loom-visible mutex-protected deque under `--cfg loom` (the model checks
/// our protocol; the queue itself is crossbeam's, checked by its authors).
#[cfg(not(loom))]
struct Queue<T>(crossbeam_deque::Injector<Arc<Node<T>>>);

#[cfg(not(loom))]
impl<T> Queue<T> {
    fn new() -> Self {
        Queue(crossbeam_deque::Injector::new())
    }
    fn push(&self, n: Arc<Node<T>>) {
        self.0.push(n);
    }
    fn try_pop(&self) -> Option<Arc<Node<T>>> {
        crate::util::steal::steal(|| self.0.steal())
    }
}

#[cfg(loom)]
struct Queue<T>(loom::sync::Mutex<std::collections::VecDeque<Arc<Node<T>>>>);

#[cfg(loom)]
impl<T> Queue<T> {
    fn new() -> Self {
        Queue(loom::sync::Mutex::new(Default::default()))
    }
    fn push(&self, n: Arc<Node<T>>) {
        self.0.lock().unwrap().push_back(n);
    }
    fn try_pop(&self) -> Option<Arc<Node<T>>> {
        self.0.lock().unwrap().pop_front()
    }
}

/// The outcome of [`Gate::enter_or_queue`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Enter {
    /// Admitted at once.
    Now,
    /// Queued; the node is granted later (or cancelled by its owner).
    Queued,
    /// The queue is at its limit.
    Rejected,
}

/// Admission counter + FIFO of waiters; see the module docs.
pub(crate) struct Gate<T> {
    word: AtomicU64,
    /// Queued nodes that are dead (cancelled, or granted out of turn) and
    /// not popped yet (can dip below zero for a moment: a pop may skip a
    /// node before the one that killed it counts it, and the live count
    /// then reads one too high). Only the counts and the queue-limit check
    /// read it.
    dead: AtomicI64,
    queue: Queue<T>,
    max: u32,
    max_queue: Option<u32>,
    spare: Spare<T>,
    #[cfg(all(test, not(loom)))]
    pub(crate) order: std::sync::Mutex<OrderLog>,
}

impl<T> Gate<T> {
    /// `max` admitted at once (`>= 1`; callers check), at most `max_queue`
    /// live waiters (`None`: no limit); dead nodes a handover skips are
    /// dropped.
    pub(crate) fn new(max: u32, max_queue: Option<u32>) -> Self {
        Gate {
            word: AtomicU64::new(0),
            dead: AtomicI64::new(0),
            queue: Queue::new(),
            max,
            max_queue,
            spare: drop,
            #[cfg(all(test, not(loom)))]
            order: Default::default(),
        }
    }

    /// The same gate, giving the dead nodes a handover skips to `spare`.
    pub(crate) fn with_spare(self, spare: Spare<T>) -> Self {
        Gate { spare, ..self }
    }

    pub(crate) fn max(&self) -> u32 {
        self.max
    }

    /// (admitted, live waiters), for statistics and tests.
    pub(crate) fn counts(&self) -> (u32, u32) {
        let w = self.word.load(Acquire);
        let q = (w >> 32) as i64 - self.dead.load(Relaxed);
        ((w & ADMITTED) as u32, q.max(0) as u32)
    }

    /// Whether a newcomer may enter in state `w`: nobody is queued (FIFO)
    /// and a slot is free.
    fn may_enter(&self, w: u64) -> bool {
        w >> 32 == 0 && (w & ADMITTED) < self.max as u64
    }

    /// The uncontended path: one CAS, admitted only when nobody waits.
    pub(crate) fn try_enter(&self) -> bool {
        let mut w = self.word.load(Relaxed);
        loop {
            if !self.may_enter(w) {
                return false;
            }
            match self.word.compare_exchange_weak(w, w + 1, Acquire, Relaxed) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Enters, or queues the node made by `node()` (called only when the
    /// flow is really going to wait), or refuses when the queue is full.
    pub(crate) fn enter_or_queue(&self, node: impl FnOnce() -> Arc<Node<T>>) -> Enter {
        let mut w = self.word.load(Relaxed);
        loop {
            if self.may_enter(w) {
                match self.word.compare_exchange_weak(w, w + 1, Acquire, Relaxed) {
                    Ok(_) => return Enter::Now,
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            if let Some(limit) = self.max_queue {
                let live = (w >> 32) as i64 - self.dead.load(Relaxed);
                if live >= limit as i64 {
                    return Enter::Rejected;
                }
            }
            match self
                .word
                .compare_exchange_weak(w, w + ONE_QUEUED, AcqRel, Relaxed)
            {
                Ok(_) => {
                    let n = node();
                    #[cfg(all(test, not(loom)))]
                    let _log = self.log_push(&n);
                    self.queue.push(n);
                    return Enter::Queued;
                }
                Err(now) => w = now,
            }
        }
    }

    /// The owner of a node that [`Node::cancel`]led it (it stays in the
    /// queue until a handover skips it).
    pub(crate) fn node_cancelled(&self) {
        self.dead.fetch_add(1, Relaxed);
    }

    /// A holder hands its slot to the queued node `n` out of turn (a
    /// waiter of its own loop, see `cohort`): what resumes that waiter, or
    /// `None` when `n` no longer waits (granted by a handover, or
    /// cancelled), and the caller keeps its slot. Granted, `n` stays in the
    /// queue, dead, until a handover skips it.
    pub(crate) fn grant_out_of_turn(&self, n: &Node<T>) -> Option<T> {
        let granted = n.grant();
        if granted.is_some() {
            self.dead.fetch_add(1, Relaxed);
            #[cfg(all(test, not(loom)))]
            self.log_grant(n);
        }
        granted
    }

    /// Gives one admitted slot up: hands it to the first live waiter (what
    /// resumes it is returned) or, with none, lowers `admitted`.
    pub(crate) fn release(&self) -> Option<T> {
        let mut w = self.word.load(Acquire);
        loop {
            if w >> 32 != 0 {
                match self
                    .word
                    .compare_exchange_weak(w, w - ONE_QUEUED, AcqRel, Acquire)
                {
                    Ok(_) => {
                        if let Some(n) = self.take_committed() {
                            return Some(n);
                        }
                        // It was dead: we still hold the slot.
                        w = self.word.load(Acquire);
                    }
                    Err(now) => w = now,
                }
            } else {
                debug_assert!(w & ADMITTED > 0, "release without a slot");
                match self.word.compare_exchange_weak(w, w - 1, AcqRel, Acquire) {
                    Ok(_) => return None,
                    Err(now) => w = now,
                }
            }
        }
    }

    /// Starts a new period (Throttle): `admitted = 0`, then hands up to
    /// `max` slots to waiters in order. Returns what resumes them.
    pub(crate) fn new_period(&self) -> Vec<T> {
        self.word.fetch_and(!ADMITTED, AcqRel);
        let mut out = Vec::new();
        loop {
            let w = self.word.load(Acquire);
            if w >> 32 == 0 || (w & ADMITTED) >= self.max as u64 {
                return out;
            }
            // Move one waiter in: queued - 1, admitted + 1.
            if self
                .word
                .compare_exchange(w, w - ONE_QUEUED + 1, AcqRel, Acquire)
                .is_ok()
            {
                match self.take_committed() {
                    Some(n) => out.push(n),
                    // Cancelled: that slot is not used after all.
                    None => {
                        self.word.fetch_sub(1, AcqRel);
                    }
                }
            }
        }
    }

    /// True while anything was admitted this period or anyone waits
    /// (Throttle: the period timer must keep running).
    pub(crate) fn busy(&self) -> bool {
        self.word.load(Acquire) != 0
    }

    /// Pops the node a `queued - 1` entitled us to and grants it, giving
    /// what resumes its waiter; `None` when it was dead (it is dropped
    /// from the count, and goes to `spare`).
    fn take_committed(&self) -> Option<T> {
        let n = loop {
            if let Some(n) = self.queue.try_pop() {
                break n;
            }
            // A committed waiter is between its CAS and its push.
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            std::thread::yield_now();
        };
        let granted = n.grant();
        match granted {
            None => {
                self.dead.fetch_sub(1, Relaxed);
                (self.spare)(n);
            }
            #[cfg(all(test, not(loom)))]
            Some(_) => self.log_grant(&n),
            #[cfg(not(all(test, not(loom))))]
            Some(_) => {}
        }
        granted
    }
}

#[cfg(all(test, not(loom)))]
impl<T> Gate<T> {
    /// Numbers `n` as it is pushed; the push happens under the returned
    /// lock.
    fn log_push(&self, n: &Node<T>) -> std::sync::MutexGuard<'_, OrderLog> {
        let mut log = self.order.lock().unwrap();
        n.arrival.store(log.pushed, Relaxed);
        log.pushed += 1;
        log
    }

    /// `n` was granted.
    fn log_grant(&self, n: &Node<T>) {
        let a = n.arrival.load(Relaxed);
        self.order.lock().unwrap().grants.push(a);
    }
}

/// Whether a Throttle's period timer is scheduled: at most one at a time,
/// and never none while the gate is busy.
pub(crate) struct Arm {
    armed: AtomicBool,
}

impl Arm {
    pub(crate) fn new() -> Self {
        Arm {
            armed: AtomicBool::new(false),
        }
    }

    /// After an admission or a queueing: true when the caller must
    /// schedule the timer (it was idle). The fence pairs with the one in
    /// [`period_end`](Self::period_end): either that side sees this entry
    /// and keeps its timer, or this side sees it disarmed.
    pub(crate) fn on_entry(&self) -> bool {
        fence(SeqCst);
        !self.armed.load(SeqCst)
            && self
                .armed
                .compare_exchange(false, true, SeqCst, SeqCst)
                .is_ok()
    }

    /// At the end of a period (after [`Gate::new_period`]): true when the
    /// timer must run again. An idle gate disarms, then re-checks, so an
    /// entry racing the disarm is never left without a timer.
    pub(crate) fn period_end<T>(&self, gate: &Gate<T>) -> bool {
        if gate.busy() {
            return true;
        }
        self.armed.store(false, SeqCst);
        fence(SeqCst);
        gate.busy()
            && self
                .armed
                .compare_exchange(false, true, SeqCst, SeqCst)
                .is_ok()
    }

    /// The scheduled timer is gone without firing (its loop shut down).
    /// The fence pairs with the one in [`on_entry`](Self::on_entry), as
    /// [`period_end`](Self::period_end)'s does: the caller's next
    /// [`Gate::busy`] (an acquire load) then sees a flow that queued while
    /// this side disarmed, or that flow's `on_entry` sees it disarmed and
    /// schedules a timer itself.
    pub(crate) fn lost(&self) {
        self.armed.store(false, SeqCst);
        fence(SeqCst);
    }
}

/// Test helper for both the unit tests and the loom models.
#[cfg(test)]
impl<T> Gate<T> {
    /// [`enter_or_queue`](Self::enter_or_queue) with a node resuming
    /// `resume`, keeping a handle on that node when it was queued.
    fn enter_keeping(&self, resume: T) -> (Enter, Option<Arc<Node<T>>>) {
        let mut node = None;
        let r = self.enter_or_queue(|| {
            let n = Node::new(resume);
            node = Some(n.clone());
            n
        });
        (r, node)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_reused_only_when_no_one_else_holds_it() {
        // Granted and given back: reused, waiting again with the new value.
        let n = Node::new(1u8);
        assert_eq!(n.grant(), Some(1));
        let first = Arc::as_ptr(&n);
        let n = Node::reuse(Some(n), 2);
        assert_eq!(Arc::as_ptr(&n), first);
        assert!(!n.is_granted());
        assert_eq!(n.grant(), Some(2));
        // Still shared (a cancelled node left in the queue): a new one.
        let shared = n.clone();
        let m = Node::reuse(Some(n), 3);
        assert_ne!(Arc::as_ptr(&m), Arc::as_ptr(&shared));
        assert_eq!(m.grant(), Some(3));
        assert_eq!(Node::reuse(None, 4).grant(), Some(4));
    }

    #[test]
    fn fast_path_then_fifo_handover() {
        let g: Gate<u32> = Gate::new(1, None);
        assert!(g.try_enter());
        assert!(!g.try_enter());
        assert_eq!(g.enter_or_queue(|| Node::new(1)), Enter::Queued);
        assert_eq!(g.enter_or_queue(|| Node::new(2)), Enter::Queued);
        assert_eq!(g.counts(), (1, 2));
        // A newcomer cannot pass the queue even after a release.
        assert_eq!(g.release(), Some(1));
        assert!(!g.try_enter());
        assert_eq!(g.release(), Some(2));
        assert_eq!(g.release(), None);
        assert_eq!(g.counts(), (0, 0));
    }

    #[test]
    fn cancelled_waiters_are_skipped_and_do_not_count_against_the_limit() {
        let g: Gate<u32> = Gate::new(1, Some(1));
        assert!(g.try_enter());
        let (r, first) = g.enter_keeping(1);
        assert_eq!(r, Enter::Queued);
        assert_eq!(g.enter_or_queue(|| Node::new(9)), Enter::Rejected);
        let first = first.unwrap();
        assert!(first.cancel());
        g.node_cancelled();
        assert_eq!(g.enter_or_queue(|| Node::new(2)), Enter::Queued);
        assert_eq!(g.release(), Some(2), "the live waiter");
        assert_eq!(g.release(), None);
        assert_eq!(g.counts(), (0, 0));
    }

    #[test]
    fn a_granted_node_cannot_be_cancelled() {
        let g: Gate<u32> = Gate::new(1, None);
        assert!(g.try_enter());
        let (_, node) = g.enter_keeping(1);
        let node = node.unwrap();
        assert_eq!(g.release(), Some(1));
        assert!(node.is_granted());
        assert!(!node.cancel());
    }

    /// A cancelled waiter's node may stay queued until a handover skips
    /// it; what would have resumed it (a step's handle, which keeps a
    /// wait token and a handle of its loop) is dropped at the cancel.
    #[test]
    fn a_cancelled_node_lets_go_of_its_resume_value_at_once() {
        let r = Arc::new(());
        let g: Gate<Arc<()>> = Gate::new(1, None);
        assert!(g.try_enter());
        for _ in 0..1000 {
            let (e, node) = g.enter_keeping(r.clone());
            assert_eq!(e, Enter::Queued);
            assert!(node.expect("queued").cancel());
            g.node_cancelled();
        }
        assert_eq!(Arc::strong_count(&r), 1, "no cancelled node keeps it");
        assert_eq!(g.counts(), (1, 0));
        assert_eq!(g.release(), None, "every queued node was cancelled");
        assert_eq!(g.counts(), (0, 0));
    }

    #[test]
    fn new_period_admits_up_to_max_in_order() {
        let g: Gate<u32> = Gate::new(2, None);
        assert!(g.try_enter());
        assert!(g.try_enter());
        for i in 0..3 {
            assert_eq!(g.enter_or_queue(|| Node::new(i)), Enter::Queued);
        }
        assert_eq!(g.new_period(), [0, 1]);
        assert_eq!(g.counts(), (2, 1));
        assert_eq!(g.new_period(), [2]);
        assert_eq!(g.counts(), (1, 0));
        assert!(g.new_period().is_empty());
        assert!(!g.busy());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::thread;
    use std::sync::atomic::Ordering::SeqCst;

    /// Runs `f` under loom, bounded to `preemptions` (loom's default is
    /// unbounded), and prints how many interleavings it explored.
    fn model(name: &str, preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
        // A counter of this model's own (tests run in parallel).
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        let r = runs.clone();
        b.check(move || {
            r.fetch_add(1, SeqCst);
            f();
        });
        println!("loom {name}: {} interleavings", runs.load(SeqCst));
    }

    /// `threads` flows, one per thread, contend for a Mutex(`max`): each
    /// enters (at once, or queued and later granted), finds at most `max`
    /// inside, and releases (a handover to a waiter, which then sees
    /// `is_granted`). Every interleaving ends with each having been inside
    /// exactly once, nothing admitted and nothing queued.
    fn mutex_contention(max: u32, threads: usize) {
        let g = Arc::new(Gate::<usize>::new(max, None));
        let inside = Arc::new(AtomicUsize::new(0));
        let entries = Arc::new(AtomicUsize::new(0));
        let ths: Vec<_> = (0..threads)
            .map(|i| {
                let (g, inside, entries) = (g.clone(), inside.clone(), entries.clone());
                thread::spawn(move || {
                    match g.enter_keeping(i) {
                        (Enter::Now, _) => {}
                        (Enter::Queued, node) => {
                            let n = node.unwrap();
                            while !n.is_granted() {
                                thread::yield_now();
                            }
                        }
                        (Enter::Rejected, _) => unreachable!("no limit"),
                    }
                    let before = inside.fetch_add(1, SeqCst);
                    assert!(before < max as usize, "more than {max} inside");
                    entries.fetch_add(1, SeqCst);
                    inside.fetch_sub(1, SeqCst);
                    let _ = g.release();
                })
            })
            .collect();
        for t in ths {
            t.join().unwrap();
        }
        assert_eq!(entries.load(SeqCst), threads);
        assert_eq!(g.counts(), (0, 0));
    }

    /// Two flows on two threads through a Mutex(1): mutual exclusion and
    /// handover.
    #[test]
    fn two_threads_mutual_exclusion_and_handover() {
        model("mutex, 2 threads", 3, || mutex_contention(1, 2));
    }

    /// Three threads through a Mutex(2): never more than two inside, all
    /// three get in, and the gate ends empty.
    #[test]
    fn three_threads_through_a_mutex_of_two() {
        model("mutex(2), 3 threads", 2, || mutex_contention(2, 3));
    }

    /// A queued waiter cancels while the holder releases: either the
    /// waiter left first (the slot is freed) or it was granted first (its
    /// cancel fails and it gives the slot back). Never lost, never twice.
    #[test]
    fn cancel_while_queued_races_release() {
        model("cancel vs release", 3, || {
            let g = Arc::new(Gate::<u8>::new(1, None));
            assert!(g.try_enter());
            let (r, node) = g.enter_keeping(0);
            assert_eq!(r, Enter::Queued);
            let node = node.unwrap();
            let g2 = g.clone();
            // Granted before the cancel (`Some`): the waiter owns the
            // slot. Only one side takes the waiter's value (loom checks
            // the cell is never touched by both).
            let holder = thread::spawn(move || g2.release());
            let cancelled = node.cancel();
            if cancelled {
                g.node_cancelled();
            } else {
                // The slot was handed over already: give it back.
                assert!(g.release().is_none());
            }
            let granted = holder.join().unwrap();
            assert_eq!(granted, (!cancelled).then_some(0));
            assert_eq!(g.counts(), (0, 0));
            assert!(g.try_enter(), "the gate is free again");
        });
    }

    /// Cohort handover: the holder of one slot grants a waiter of its own
    /// loop out of turn while the holder of the other slot, on another
    /// loop, releases in arrival order. Exactly one of them gives the
    /// waiter a slot (the other keeps or frees its own), the waiter's
    /// node, dead once granted out of turn, is skipped and counted out,
    /// and every slot comes back: nothing admitted, nothing queued.
    #[test]
    fn out_of_turn_grant_races_a_release() {
        model("out of turn vs release", 3, || {
            let g = Arc::new(Gate::<u8>::new(2, None));
            assert!(g.try_enter());
            assert!(g.try_enter());
            let (r, node) = g.enter_keeping(7);
            assert_eq!(r, Enter::Queued);
            let node = node.unwrap();
            let g2 = g.clone();
            let other = thread::spawn(move || {
                let granted = g2.release();
                if granted.is_some() {
                    // The waiter got this slot: it leaves in time.
                    assert!(g2.release().is_none());
                }
                granted
            });
            let mine = g.grant_out_of_turn(&node);
            // Whoever granted it, the waiter leaves once (here, when this
            // side did); this side's own slot goes back otherwise.
            let _ = g.release();
            let theirs = other.join().unwrap();
            assert!(node.is_granted());
            assert_eq!(
                (mine.is_some(), theirs.is_some()),
                (theirs.is_none(), mine.is_none()),
                "exactly one grant"
            );
            assert_eq!(g.counts(), (0, 0));
            assert!(g.try_enter(), "the gate is free again");
        });
    }

    /// Throttle's timer: a period ending on an idle gate races a new
    /// entry. Afterwards a busy gate always has exactly one timer, and
    /// there are never two.
    #[test]
    fn period_end_races_an_entry() {
        model("timer disarm vs entry", 3, || {
            let g = Arc::new(Gate::<u8>::new(2, None));
            let arm = Arc::new(Arm::new());
            // A period is running with one entry in it: its timer is armed.
            assert!(arm.on_entry());
            assert!(g.try_enter());
            let (g2, arm2) = (g.clone(), arm.clone());
            let timer = thread::spawn(move || {
                assert!(g2.new_period().is_empty());
                arm2.period_end(&g2)
            });
            let entered = g.try_enter();
            let entry_arms = entered && arm.on_entry();
            let timer_again = timer.join().unwrap();
            assert!(entered, "the gate had room");
            if g.busy() {
                // The entry landed in the new period: exactly one of the
                // two keeps a timer running for it.
                assert!(timer_again ^ entry_arms, "{timer_again} {entry_arms}");
            } else {
                // It landed in the old period, which the reset closed: at
                // most one (harmless, idle) timer is left.
                assert!(!(timer_again && entry_arms));
            }
        });
    }

    /// Throttle: a period reset races a newcomer. The waiter queued before
    /// goes first and alone (max 1); the newcomer never passes it, so it
    /// queues whatever the order, and admissions never exceed `max`.
    #[test]
    fn new_period_races_a_newcomer() {
        model("period vs newcomer", 3, || {
            let g = Arc::new(Gate::<u8>::new(1, None));
            assert!(g.try_enter());
            assert_eq!(g.enter_or_queue(|| Node::new(0)), Enter::Queued);
            let g2 = g.clone();
            let timer = thread::spawn(move || g2.new_period());
            let newcomer = g.enter_or_queue(|| Node::new(1));
            let resumed = timer.join().unwrap();
            assert_eq!(resumed, [0]);
            assert_eq!(newcomer, Enter::Queued);
            assert_eq!(g.counts(), (1, 1));
        });
    }
}
