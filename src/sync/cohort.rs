//! Cohort handover: a slot freed on a loop goes to a waiter of that loop
//! first, for a bounded run, then in arrival order ([`Handover`]).
//!
//! A handover to a waiter of another loop resumes it through that loop's
//! inbox, and wakes that loop's thread when it sleeps; one to a waiter of
//! the releasing loop is a local message, run in the same pass. Every
//! waiter is queued in the gate's FIFO as before (so a slot freed anywhere
//! finds every waiter, and the queue limit counts them all); a loop also
//! keeps its own waiters of each object in a local FIFO of its thread (the
//! loop's *cohort*). A flow that leaves hands its slot to the oldest live
//! waiter of its cohort, out of turn ([`Gate::grant_out_of_turn`]), while
//! the run allows it; otherwise the gate hands it on in arrival order.
//!
//! The run: the handovers a loop made within its cohort since the slot
//! last came to it from another loop. It ends at [`Handover::run`]
//! handovers, or at the first one [`Handover::time`] or more after the
//! run's first; from then on the loop's slots go in arrival order (to its
//! own waiters while they are the oldest, so nobody is passed) until one
//! goes to a waiter of another loop, or nobody waits: then a new run may
//! begin.
//!
//! This is lock cohorting (Dice, Marathe and Shavit, "Lock Cohorting: A
//! General Technique for Designing NUMA Locks", PPoPP 2012) with loops for
//! NUMA nodes: the spec (1.11) sets no order among waiters.

use super::gate::{Gate, Node};
use crate::steps::external::ExternalHandle;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a [`Mutex`](super::Mutex) (or a [`Limiter`](super::Limiter)'s
/// concurrency limit) passes a freed slot on when flows wait: to the
/// oldest waiter on the loop that freed it, for a run of at most `run`
/// handovers lasting at most `time`, then in arrival order until the slot
/// goes to a waiter of another loop (*cohort handover*).
///
/// A handover that stays on its loop costs no thread wake-up (the waiter
/// resumes in the same pass); one to another loop goes through that
/// loop's inbox. On one loop every waiter is a waiter of that loop, and
/// the order is arrival order except within a run.
///
/// **The order guarantee.** Waiters of one loop always get slots in their
/// arrival order. A waiter is *passed* when a slot goes to a flow that
/// began waiting after it. A handover to the only waiter passes nobody
/// and is no part of a run. Only a run passes anyone, and a run passes
/// waiters of other loops only: at most `run` times each, and never
/// `time` or more after the run's first handover. When a run ends, the loop's slots go
/// in arrival order (to its own waiters while they are the oldest, which
/// passes nobody) until one goes to a waiter of another loop; only then
/// may that loop begin a new run. So on two loops with one slot (a
/// `Mutex::new(1, ..)`), a waiter is passed at most `run` times in all.
/// With more loops, or more slots, each run of another loop that comes
/// before it may pass it up to `run` times again, and a new run begins
/// only after a slot went to a waiter older than it.
///
/// `Handover::FIFO` (a run of 0) keeps strict arrival order. A run asks
/// for at most 65,536 handovers (a larger `run` counts as that): each
/// handover of a run leaves a dead node in the lock-free queue until the
/// run ends.
///
/// ```
/// use futoin_asyncsteps::sync::{Handover, Mutex};
/// use std::time::Duration;
///
/// // The default: runs of up to 64 handovers within 100 µs.
/// let m = Mutex::new(1, None);
/// assert_eq!(m.handover(), Handover::default());
/// // Longer runs: fewer wake-ups of the other loops, longer waits there.
/// let m = Mutex::new(1, None).with_handover(Handover {
///     run: 1024,
///     time: Duration::from_millis(1),
/// });
/// assert_eq!(m.handover().run, 1024);
/// // Strict arrival order.
/// let fifo = Mutex::new(1, None).with_handover(Handover::FIFO);
/// assert_eq!(fifo.handover().run, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handover {
    /// At most this many handovers in a run (0: none, strict arrival
    /// order).
    pub run: u32,
    /// A run ends at its first handover this long or more after its first
    /// one.
    pub time: Duration,
}

impl Handover {
    /// Strict arrival order: no runs.
    pub const FIFO: Handover = Handover {
        run: 0,
        time: Duration::ZERO,
    };
}

/// Runs of up to 64 handovers within 100 µs.
impl Default for Handover {
    fn default() -> Self {
        Handover {
            run: 64,
            time: Duration::from_micros(100),
        }
    }
}

/// A loop's waiters of one object, and its run.
#[derive(Default)]
struct Cohort {
    /// Nodes of this loop's waiters, oldest first; some may be dead
    /// already (granted by a handover of another loop, or cancelled),
    /// skipped when they come to the front.
    waiters: VecDeque<Arc<Node<ExternalHandle>>>,
    /// Handovers of the run; `u32::MAX` once it ended.
    run: u32,
    /// The run's first handover.
    start: Option<Instant>,
}

impl Cohort {
    /// Drops the dead nodes at the front.
    fn skip_dead(&mut self) {
        while self.waiters.front().is_some_and(|n| !n.is_waiting()) {
            self.waiters.pop_front();
        }
    }

    /// Nothing to keep: no waiter, no run.
    fn is_idle(&self) -> bool {
        self.waiters.is_empty() && self.run == 0
    }
}

/// (loop id, object id).
type Key = (u64, usize);

/// Hashes a [`Key`] with one multiply per word: both parts are already
/// spread (an address, a counter), and the map is this thread's own, so
/// the keys are not an attacker's to choose (SipHash cost 6% of a
/// contended handover).
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        // The Fibonacci multiplier (2^64 / golden ratio), rotated so the
        // low bits, which the map's buckets use, depend on every bit.
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(26);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// The cohorts of the loops of one thread, for each object that has
/// waiters there or a run going; an entry goes once it has neither.
#[derive(Default)]
struct Cohorts {
    /// The cohort made last, kept when it goes idle (an idle cohort holds
    /// nothing, and serves the next object that needs one): a loop that
    /// waits on one object at a time hashes nothing.
    one: Option<(Key, Cohort)>,
    /// The others.
    map: HashMap<Key, Cohort, std::hash::BuildHasherDefault<KeyHasher>>,
    /// Emptied waiter lists of cohorts that went, kept for the next ones:
    /// a Mutex that one flow at a time waits for would otherwise allocate
    /// and free a list at each wait.
    spare: Vec<VecDeque<Arc<Node<ExternalHandle>>>>,
}

/// At most this many emptied waiter lists are kept per thread.
const SPARE_LISTS: usize = 16;

impl Cohorts {
    /// No cohort holds anything.
    fn is_empty(&self) -> bool {
        self.map.is_empty() && self.one.as_ref().is_none_or(|(_, c)| c.is_idle())
    }

    /// The cohort of `key`, made (with a kept list, if any) if needed.
    fn entry(&mut self, key: Key) -> &mut Cohort {
        let in_one = self.one.as_ref().map(|(k, c)| (*k == key, c.is_idle()));
        let in_map = !self.map.is_empty() && self.map.contains_key(&key);
        match in_one {
            // The idle one serves `key` (which is in no other cohort).
            None | Some((false, true)) if !in_map => {
                let one = self.one.get_or_insert_with(|| (key, Cohort::default()));
                one.0 = key;
                &mut one.1
            }
            Some((true, _)) => &mut self.one.as_mut().expect("checked").1,
            _ => {
                let spare = &mut self.spare;
                self.map.entry(key).or_insert_with(|| Cohort {
                    waiters: spare.pop().unwrap_or_default(),
                    ..Cohort::default()
                })
            }
        }
    }

    fn get_mut(&mut self, key: &Key) -> Option<&mut Cohort> {
        if self.one.as_ref().is_some_and(|(k, _)| k == key) {
            return self.one.as_mut().map(|(_, c)| c);
        }
        if self.map.is_empty() {
            return None;
        }
        self.map.get_mut(key)
    }

    /// Drops the cohort of `key` if it is idle, keeping its list (the
    /// one made last stays, idle).
    fn remove_if_idle(&mut self, key: &Key) {
        if self.map.is_empty() {
            return;
        }
        if self.map.get(key).is_some_and(Cohort::is_idle) {
            if let Some(c) = self.map.remove(key) {
                if self.spare.len() < SPARE_LISTS {
                    self.spare.push(c.waiters);
                }
            }
        }
    }
}

thread_local! {
    /// This thread's cohorts (see [`Cohorts`]).
    static COHORTS: RefCell<Cohorts> = RefCell::new(Cohorts::default());
    /// Whether a cohort of this thread holds anything (`!is_empty()`, as
    /// of the last change): an uncontended release reads only this.
    static ANY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on this thread's cohorts (`None` while they are borrowed or
/// torn down), then records whether any holds something.
fn with_cohorts<R>(f: impl FnOnce(&mut Cohorts) -> R) -> Option<R> {
    COHORTS
        .try_with(|m| {
            let mut m = m.try_borrow_mut().ok()?;
            let r = f(&mut m);
            let _ = ANY.try_with(|a| a.set(!m.is_empty()));
            Some(r)
        })
        .ok()
        .flatten()
}

/// A flow of loop `loop_id` queued `node` on object `id`: the newest
/// waiter of that loop's cohort. Kept whatever the object's [`Handover`]
/// (it may change while flows wait), so a loop's waiters are always in
/// order there.
pub(crate) fn queued(loop_id: u64, id: usize, node: &Arc<Node<ExternalHandle>>) {
    with_cohorts(|m| {
        let c = m.entry((loop_id, id));
        c.skip_dead();
        c.waiters.push_back(node.clone());
    });
}

/// A waiter of object `id` on loop `home` (this thread's) left the
/// queue before it was granted (cancel, timeout, its loop shutting down):
/// the dead nodes at both ends of the cohort go, and the cohort once it
/// is idle, so a loop that goes away leaves nothing behind.
pub(crate) fn cancelled(id: usize, home: u64) {
    with_cohorts(|m| {
        let key = (home, id);
        let Some(c) = m.get_mut(&key) else { return };
        c.skip_dead();
        while c.waiters.back().is_some_and(|n| !n.is_waiting()) {
            c.waiters.pop_back();
        }
        m.remove_if_idle(&key);
    });
}

/// A flow of loop `home` (this thread's) gives up one slot of object
/// `id`, whose gate is `gate`: what resumes the waiter that gets it, if
/// any (see the module docs). A thread with no cohort (no waiter of its
/// loops anywhere, no run going) hands the slot on in queue order at once.
pub(crate) fn release(
    gate: &Gate<ExternalHandle>,
    id: usize,
    home: u64,
    h: impl FnOnce() -> Handover,
) -> Option<ExternalHandle> {
    if !ANY.try_with(Cell::get).unwrap_or(false) {
        return gate.release();
    }
    with_cohorts(|m| m.release(gate, (home, id), h())).unwrap_or_else(|| gate.release())
}

impl Cohorts {
    /// [`release`] for the cohort of `key`.
    /// The gate's own release calls nothing of this module (a dead node
    /// it skips goes to the node pool), so it runs within the borrow.
    fn release(
        &mut self,
        gate: &Gate<ExternalHandle>,
        key: Key,
        h: Handover,
    ) -> Option<ExternalHandle> {
        let Some(c) = self.get_mut(&key) else {
            return gate.release();
        };
        c.skip_dead();
        if let Some(r) = c.hand_within(gate, key.0, h) {
            return Some(r);
        }
        let r = gate.release();
        // A waiter of this loop granted in queue order was its oldest.
        c.skip_dead();
        if r.as_ref().is_none_or(|w| w.loop_id() != key.0) {
            // The slot left this loop, or nobody waits: a new run may
            // begin.
            c.run = 0;
            c.start = None;
        }
        if c.is_idle() {
            self.remove_if_idle(&key);
        }
        r
    }
}

impl Cohort {
    /// Hands the slot to this cohort's oldest live waiter, out of turn,
    /// if the run allows; `home` is the cohort's loop.
    fn hand_within(
        &mut self,
        gate: &Gate<ExternalHandle>,
        home: u64,
        h: Handover,
    ) -> Option<ExternalHandle> {
        if self.waiters.is_empty() || self.run >= h.run.min(MAX_RUN) {
            return None;
        }
        if gate.counts().1 <= 1 {
            // The only waiter anywhere (a waiter that comes later is
            // younger): handing it the slot passes nobody, so it does not
            // count in a run. (The count can read one low while another
            // thread skips a dead node; with one slot, only the holder
            // does.)
            return self.grant_front(gate);
        }
        let now = crate::tool::here::now_of(home);
        match self.start {
            Some(start) if self.run > 0 => {
                if now.saturating_duration_since(start) >= h.time {
                    self.run = u32::MAX;
                    return None;
                }
            }
            _ => self.start = Some(now),
        }
        let r = self.grant_front(gate);
        if r.is_some() {
            self.run += 1;
        }
        r
    }

    /// Grants the oldest live waiter out of turn.
    fn grant_front(&mut self, gate: &Gate<ExternalHandle>) -> Option<ExternalHandle> {
        while let Some(n) = self.waiters.pop_front() {
            if let Some(r) = gate.grant_out_of_turn(&n) {
                return Some(r);
            }
        }
        None
    }
}

/// The longest run [`Handover::run`] may ask for: each handover of a run
/// leaves a dead node in the gate's queue until the run ends.
pub(crate) const MAX_RUN: u32 = 65_536;

/// Cohorts kept by this thread (tests check that none is left behind).
#[cfg(all(test, not(loom)))]
pub(crate) fn entries() -> usize {
    COHORTS.with(|m| {
        let m = m.borrow();
        m.map.len() + usize::from(m.one.as_ref().is_some_and(|(_, c)| !c.is_idle()))
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Mutex;
    use crate::{AsyncSteps, AsyncTool};

    /// The largest number of times a waiter was passed, from the queue
    /// order numbers of the grants in the order they were made: a grant
    /// passes every waiter with a smaller number not granted yet.
    fn most_passed(grants: &[u64]) -> usize {
        // A Fenwick tree over the numbers granted so far.
        let n = grants.iter().max().map_or(0, |m| *m as usize + 1);
        let mut tree = vec![0usize; n + 1];
        let mut worst = 0;
        for (g, &a) in grants.iter().enumerate() {
            let (mut i, mut below) = (a as usize, 0);
            while i > 0 {
                below += tree[i];
                i &= i - 1;
            }
            // The grants before this one with a larger number passed it.
            worst = worst.max(g - below);
            let mut i = a as usize + 1;
            while i <= n {
                tree[i] += 1;
                i += i & i.wrapping_neg();
            }
        }
        worst
    }

    #[test]
    fn most_passed_counts_later_arrivals_granted_first() {
        assert_eq!(most_passed(&[0, 1, 2]), 0);
        assert_eq!(most_passed(&[1, 2, 3, 0]), 3);
        assert_eq!(most_passed(&[2, 0, 3, 1]), 2);
    }

    /// `flows` flows of `sections` sections each on a loop of its own
    /// thread, syncing on `m`; each section stays inside until its loop's
    /// next turn, so the other flows of its loop queue behind it.
    fn contend(m: &Mutex, flows: usize, sections: usize) -> std::thread::JoinHandle<()> {
        let m = m.clone();
        std::thread::spawn(move || {
            let mut tool = AsyncTool::new().unwrap();
            let ps: Vec<_> = (0..flows)
                .map(|_| {
                    let mut root = AsyncSteps::new();
                    let m = m.clone();
                    root.repeat(sections, move |s, _| {
                        s.sync(&m, |s, ()| {
                            let w = s.wait_external();
                            s.tool().immediate(move |_| {
                                w.success(()).unwrap();
                            });
                            Ok(())
                        });
                        Ok(())
                    });
                    root.promise::<()>(&mut tool)
                })
                .collect();
            for p in ps {
                tool.block_on(p).unwrap();
            }
            assert_eq!(entries(), 0, "a cohort left behind");
        })
    }

    /// The order guarantee of [`Handover`] on two loops and one slot, and
    /// the figure of the issue that asked for it: over 100 runs of 10
    /// flows x 40 sections on each of two loops (two threads), with runs
    /// of 8, no waiter is passed more than 8 times, and runs happen (some
    /// waiter is passed). The queue's order is read from the gate's
    /// `OrderLog`: tickets taken by the flows themselves race with the
    /// queue (a flow preempted between its ticket and its push seems
    /// passed by every flow that queued meanwhile, up to 10 times under
    /// strict FIFO).
    #[test]
    fn on_two_loops_no_waiter_is_passed_more_than_the_run() {
        const RUN: u32 = 8;
        let mut worst = 0;
        let mut runs_passed = 0;
        for _ in 0..100 {
            let m = Mutex::new(1, None).with_handover(Handover {
                run: RUN,
                time: Duration::from_secs(3600),
            });
            let (a, b) = (contend(&m, 10, 40), contend(&m, 10, 40));
            a.join().unwrap();
            b.join().unwrap();
            let log = m.gate().order.lock().unwrap();
            let passed = most_passed(&log.grants);
            worst = worst.max(passed);
            runs_passed += usize::from(passed > 0);
            assert_eq!(m.counts(), (0, 0));
        }
        println!(
            "most times a waiter was passed, over 100 runs: {worst} (run {RUN}); \
             runs where a waiter was passed: {runs_passed}"
        );
        assert!(worst <= RUN as usize, "passed {worst} times");
        assert!(runs_passed > 0, "no run ever passed a waiter");
    }

    /// A loop keeps nothing once its waiters are gone: granted within a
    /// run, in queue order, or given up (a timeout while queued), under
    /// either handover.
    #[test]
    fn no_cohort_is_left_once_the_waiters_are_gone() {
        use crate::error::codes;
        use crate::TestTool;
        for h in [Handover::default(), Handover::FIFO] {
            let mut tool = TestTool::new();
            let m = Mutex::new(1, None).with_handover(h);
            let mut holder = AsyncSteps::new();
            holder.sync(&m, |s, ()| {
                s.set_timeout(Duration::from_millis(10));
                Ok(())
            });
            let hp = holder.promise::<()>(&mut tool);
            // A lone waiter that gives up: only the cancel can clean up.
            let mut w0 = AsyncSteps::new();
            let m0 = m.clone();
            w0.add(move |s, ()| {
                s.set_timeout(Duration::from_millis(2));
                s.sync(&m0, |_, ()| Ok(()));
                Ok(())
            });
            let p0 = w0.promise::<()>(&mut tool);
            tool.run_all_ready();
            assert_eq!((m.counts(), entries()), ((1, 1), 1));
            tool.advance(Duration::from_millis(3));
            assert_eq!((m.counts(), entries()), ((1, 0), 0), "{h:?}");
            assert_eq!(tool.block_on(p0).unwrap_err().code(), codes::TIMEOUT);
            let mut ps = Vec::new();
            for i in 0..4u64 {
                let mut w = AsyncSteps::new();
                let m = m.clone();
                // The first two give up after 5 ms.
                let limit = if i < 2 { 5 } else { 100 };
                w.add(move |s, ()| {
                    s.set_timeout(Duration::from_millis(limit));
                    s.sync(&m, |_, ()| Ok(()));
                    Ok(())
                });
                ps.push(w.promise::<()>(&mut tool));
            }
            tool.run_all_ready();
            assert_eq!((m.counts(), entries()), ((1, 4), 1));
            tool.advance(Duration::from_millis(5));
            assert_eq!((m.counts(), entries()), ((1, 2), 1));
            tool.run_all();
            assert_eq!(tool.block_on(hp).unwrap_err().code(), codes::TIMEOUT);
            let ends: Vec<_> = ps
                .into_iter()
                .map(|p| tool.block_on(p).map_err(|e| e.code().to_owned()))
                .collect();
            let timeout = Err(codes::TIMEOUT.to_owned());
            assert_eq!(ends, [timeout.clone(), timeout, Ok(()), Ok(())], "{h:?}");
            assert_eq!((m.counts(), entries()), ((0, 0), 0), "{h:?}");
        }
    }

    /// Under strict FIFO nobody is ever passed (the same measure reads 0).
    #[test]
    fn under_fifo_no_waiter_is_passed() {
        for _ in 0..10 {
            let m = Mutex::new(1, None).with_handover(Handover::FIFO);
            let (a, b) = (contend(&m, 10, 40), contend(&m, 10, 40));
            a.join().unwrap();
            b.join().unwrap();
            let log = m.gate().order.lock().unwrap();
            assert!(!log.grants.is_empty(), "flows queued");
            assert_eq!(most_passed(&log.grants), 0);
        }
    }
}
