//! The cross-thread protocol of a loop's inbox, apart from the queue and
//! the waker it guards: the `sleeping` and `closed` flags and the SeqCst
//! fences that pair them with the queue.
//!
//! [`Inbox`](super::inbox::Inbox) plugs in its `Mailbox` (a locked queue
//! whose length is read without the lock) and mio's `Waker`. The rules:
//!
//! - **Sleep** (loop thread, [`Handshake::prepare_sleep`]): store how it
//!   will sleep in `sleeping` (blocked in `poll`, or parked on its thread
//!   when it watches no I/O source), SeqCst fence, then look at the queue
//!   (and whatever else the caller's check reads); sleep only if it is
//!   empty.
//! - **Send** (other threads, [`Handshake::after_push`]): push, SeqCst
//!   fence, then look at `closed` and `sleeping`. With a fence on each side
//!   (the store-buffering pattern), at least one side sees the other's
//!   write: either the loop sees the message before it sleeps, or the
//!   producer sees `sleeping` and wakes it.
//! - **One wake per park** ([`Handshake::wake_if_sleeping`]): only the
//!   producer whose compare-exchange flips `sleeping` back to awake calls
//!   the waker, with the way the loop sleeps (read by that same
//!   compare-exchange), so a burst of messages to a parked loop costs one
//!   wake syscall, of the right kind.
//! - **Close** (loop thread, [`Handshake::close`]): store `closed = true`,
//!   SeqCst fence, then drain the queue. A producer after its fence either
//!   finds `closed` (and drains the queue itself) or its message was there
//!   for the closing loop's drain: every message is settled.
//!
//! Under `--cfg loom` the atomics come from `loom`, and the `loom_tests`
//! module model-checks these rules with a stand-in queue and waker (loom
//! cannot run `parking_lot`'s lock or mio's `Waker`).

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicU8};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicU8};

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// How a loop sleeps, so that the producer who wakes it knows how to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sleep {
    /// Blocked in `mio::Poll::poll`: woken through the `mio::Waker`.
    Poll,
    /// Parked on its thread (no I/O source to watch): woken by
    /// `Thread::unpark`.
    Park,
}

const AWAKE: u8 = 0;
const POLL: u8 = 1;
const PARK: u8 = 2;

/// The `sleeping` and `closed` flags of one loop.
pub(crate) struct Handshake {
    /// `AWAKE`, or how the loop is (about to be) blocked: `POLL`, `PARK`.
    /// One atomic, so the producer whose compare-exchange takes the loop
    /// out of its sleep reads how it sleeps in the same operation.
    sleeping: AtomicU8,
    /// The loop is gone; messages are settled by their senders.
    closed: AtomicBool,
}

/// What a producer learned after publishing a message ([`Handshake::after_push`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub(crate) enum Posted {
    /// The loop is awake (or another producer is waking it).
    Queued,
    /// The loop slept; this producer flipped `sleeping` and called the waker.
    Woke,
    /// The loop is closed: the caller drains the queue and settles what it
    /// finds (the closing loop may not have seen this message).
    Closed,
}

impl Handshake {
    pub(crate) fn new() -> Self {
        Handshake {
            sleeping: AtomicU8::new(AWAKE),
            closed: AtomicBool::new(false),
        }
    }

    /// The producer's side, right after it pushed a message on the shared
    /// queue: fence, then `closed`, then [`wake_if_sleeping`](Self::wake_if_sleeping).
    ///
    /// The fence pairs with the one in [`prepare_sleep`](Self::prepare_sleep)
    /// (either the loop sees the message before sleeping, or we see
    /// `sleeping` and wake it) and with the one in [`close`](Self::close)
    /// (either the closing loop drains this message, or we see `closed`).
    #[inline]
    pub(crate) fn after_push(&self, wake: impl FnOnce(Sleep)) -> Posted {
        fence(SeqCst);
        if self.closed.load(Relaxed) {
            return Posted::Closed;
        }
        if self.wake_if_sleeping(wake) {
            Posted::Woke
        } else {
            Posted::Queued
        }
    }

    /// Calls `wake` if the loop sleeps (or is about to sleep), and says
    /// whether it did. Only the producer that flips `sleeping` back to false
    /// calls it, so a burst of messages to a parked loop costs one wake,
    /// not one per message. Call it after a SeqCst fence that follows
    /// publishing the work.
    #[inline]
    pub(crate) fn wake_if_sleeping(&self, wake: impl FnOnce(Sleep)) -> bool {
        // A compare-exchange, not a `swap(AWAKE)`: the same one RMW, and
        // only when the load saw a sleep. They differ only when the loop is
        // already awake: the swap then writes AWAKE over AWAKE, which no
        // thread can tell apart, but which loom (0.7) orders wrongly
        // against the loop's next store (its issue #254, an RMW not kept
        // atomic in its modification order) and so reports a lost wake-up
        // that cannot happen. A failed compare-exchange writes nothing, so
        // the model checks this code as it is.
        let how = self.sleeping.load(Relaxed);
        if how == AWAKE
            || self
                .sleeping
                .compare_exchange(how, AWAKE, Relaxed, Relaxed)
                .is_err()
        {
            // Awake, or the loop changed `sleeping` after our load:
            // another producer woke it, it woke by itself (a timeout), or
            // it is going to sleep again. In the last case its check after
            // its own fence sees our message (the store-buffering
            // guarantee of the two fences: our load missed its store, so
            // its check cannot miss our push), and it does not sleep.
            return false;
        }
        wake(if how == PARK {
            Sleep::Park
        } else {
            Sleep::Poll
        });
        true
    }

    /// The loop's side before it blocks: publishes `sleeping`, fences, and
    /// then asks `can_sleep` (is the queue empty, is there no other work?).
    /// Returns true when the loop may sleep; otherwise `sleeping` is taken
    /// back and the loop must run another turn.
    #[inline]
    pub(crate) fn prepare_sleep(&self, how: Sleep, can_sleep: impl FnOnce() -> bool) -> bool {
        let v = match how {
            Sleep::Poll => POLL,
            Sleep::Park => PARK,
        };
        // The loop's writes of `sleeping` are swaps, not stores: the same
        // value, at the cost of one read-modify-write per sleep, but loom
        // (0.7, its issue #254) may order a plain store inside a producer's
        // successful compare-exchange, and then reports a lost wake-up for
        // a loop that changes how it sleeps. With swaps the model checks
        // this code as it is.
        self.sleeping.swap(v, Relaxed);
        fence(SeqCst);
        if can_sleep() {
            true
        } else {
            self.sleeping.swap(AWAKE, Relaxed);
            false
        }
    }

    /// The loop is back from its sleep (`poll` or parked).
    #[inline]
    pub(crate) fn woke(&self) {
        self.sleeping.swap(AWAKE, Relaxed);
    }

    /// True while the loop is (about to be) asleep: a hint.
    #[inline]
    pub(crate) fn is_sleeping(&self) -> bool {
        self.sleeping.load(Relaxed) != AWAKE
    }

    /// True once [`close`](Self::close) ran. Exact on the loop's own
    /// thread; from another thread only after the fence of
    /// [`after_push`](Self::after_push), which reads it itself.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// The loop is gone: publishes `closed` and fences. The caller then
    /// drains the queue; later messages are settled by their producers.
    #[inline]
    pub(crate) fn close(&self) {
        self.closed.store(true, Relaxed);
        fence(SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
impl Handshake {
    /// How the loop sleeps now, if it does (tests).
    pub(crate) fn sleeping_as(&self) -> Option<Sleep> {
        match self.sleeping.load(Relaxed) {
            POLL => Some(Sleep::Poll),
            PARK => Some(Sleep::Park),
            _ => None,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn one_wake_per_park_and_none_after_close() {
        let h = Handshake::new();
        let wakes = Cell::new(Vec::new());
        let wake = |how| {
            let mut v = wakes.take();
            v.push(how);
            wakes.set(v);
        };
        // Awake loop: nobody wakes it.
        assert_eq!(h.after_push(wake), Posted::Queued);
        assert!(
            !h.prepare_sleep(Sleep::Poll, || false),
            "work waiting: no sleep"
        );
        assert!(!h.is_sleeping());
        // Loop blocked in poll: the first message wakes it, the rest of the
        // burst not.
        assert!(h.prepare_sleep(Sleep::Poll, || true));
        assert!(h.is_sleeping());
        assert_eq!(h.after_push(wake), Posted::Woke);
        assert_eq!(h.after_push(wake), Posted::Queued);
        h.woke();
        // Parked loop: woken the other way.
        assert!(h.prepare_sleep(Sleep::Park, || true));
        assert!(h.wake_if_sleeping(wake));
        assert!(!h.wake_if_sleeping(wake));
        assert!(!h.is_sleeping());
        h.woke();
        h.close();
        assert!(h.is_closed());
        assert_eq!(h.after_push(wake), Posted::Closed);
        assert_eq!(wakes.take(), vec![Sleep::Poll, Sleep::Park]);
    }
}

/// Model checks of the inbox protocol, with at least two threads each.
///
/// Run them (with the gate's models) by:
///
/// ```text
/// RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
///     cargo test --release --lib loom -- --nocapture
/// ```
///
/// (`--nocapture` shows how many interleavings each model explored.)
///
/// The stand-ins keep the synchronization of the real parts and add none:
///
/// - The queue is a loom `Mutex<VecDeque>` for its contents, but its
///   emptiness is read from two counters without the lock, as
///   `Mailbox::is_empty` and an empty `Mailbox::pop` read its length.
///   A lock taken there would make the loop's check a release that a later
///   push acquires: an edge the real queue lacks, which would hide a
///   missing fence.
/// - The waker is a loom `Mutex`/`Condvar` around a count of wake calls;
///   a wake is sticky until the loop's next `poll` takes it, as mio's is.
///   A loop that sleeps with nobody left to wake it is a deadlock, which
///   loom reports.
/// - What each thread settles is kept in its own `Vec` and handed back by
///   `join`, so the bookkeeping adds no edges either.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::{Arc, Condvar, Mutex};
    use loom::thread;
    use std::collections::VecDeque;

    /// Runs `f` under loom, bounded to `preemptions` (`None`: every
    /// interleaving) unless `LOOM_MAX_PREEMPTIONS` is set, and prints how
    /// many interleavings it explored and how long that took.
    fn model(name: &str, preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
        // A counter of this model's own (not a `static`: the test harness
        // runs the models on parallel threads).
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = runs.clone();
        let mut b = loom::model::Builder::new();
        // `LOOM_MAX_PREEMPTIONS` (read by `Builder::new`) overrides the bound.
        if let Some(p) = preemptions {
            b.preemption_bound.get_or_insert(p);
        }
        let t = std::time::Instant::now();
        b.check(move || {
            counter.fetch_add(1, SeqCst);
            f();
        });
        println!(
            "loom {name}: {} interleavings, {:.2?}",
            runs.load(SeqCst),
            t.elapsed()
        );
    }

    /// The stand-in for the inbox's `Mailbox` (see the module notes).
    struct Queue {
        items: Mutex<VecDeque<u32>>,
        pushed: AtomicUsize,
        popped: AtomicUsize,
    }

    impl Queue {
        fn new() -> Self {
            Queue {
                items: Mutex::new(VecDeque::new()),
                pushed: AtomicUsize::new(0),
                popped: AtomicUsize::new(0),
            }
        }

        fn push(&self, m: u32) {
            let mut q = self.items.lock().unwrap();
            q.push_back(m);
            self.pushed.fetch_add(1, SeqCst);
        }

        /// Loads only (no lock), like `Mailbox::is_empty`.
        fn is_empty(&self) -> bool {
            let popped = self.popped.load(SeqCst);
            popped == self.pushed.load(SeqCst)
        }

        /// Like `Mailbox::pop`: an empty queue answers without the
        /// lock.
        fn steal(&self) -> Option<u32> {
            if self.is_empty() {
                return None;
            }
            let mut q = self.items.lock().unwrap();
            let m = q.pop_front()?;
            self.popped.fetch_add(1, SeqCst);
            Some(m)
        }
    }

    /// The stand-in for mio's `Waker` and the loop's `poll`.
    struct Waker {
        /// (wake calls so far, wake calls the loop's polls have taken)
        state: Mutex<(usize, usize)>,
        cv: Condvar,
    }

    impl Waker {
        fn new() -> Self {
            Waker {
                state: Mutex::new((0, 0)),
                cv: Condvar::new(),
            }
        }

        fn wake(&self) {
            self.state.lock().unwrap().0 += 1;
            self.cv.notify_one();
        }

        /// `poll`: takes a pending wake, or blocks until one comes; with
        /// `timeout`, returns at once either way (a timer was due).
        fn poll(&self, timeout: bool) {
            let mut s = self.state.lock().unwrap();
            while !timeout && s.0 == s.1 {
                s = self.cv.wait(s).unwrap();
            }
            s.1 = s.0;
        }

        fn calls(&self) -> usize {
            self.state.lock().unwrap().0
        }
    }

    /// One loop's shared side, as [`Inbox`](super::super::inbox::Inbox)
    /// wires it: the same calls in the same order.
    struct Loop {
        hs: Handshake,
        inbox: Queue,
        /// The `mio::Waker` of a loop blocked in `poll`.
        waker: Waker,
        /// The thread's park token, for a loop that parks.
        parker: Waker,
    }

    impl Loop {
        fn new() -> Arc<Self> {
            Arc::new(Loop {
                hs: Handshake::new(),
                inbox: Queue::new(),
                waker: Waker::new(),
                parker: Waker::new(),
            })
        }

        /// The wake of `Inbox::wake_as`: only the one `how` names, so a
        /// loop woken the wrong way stays asleep (and loom reports it).
        fn wake_as(&self, how: Sleep) {
            match how {
                Sleep::Poll => self.waker.wake(),
                Sleep::Park => self.parker.wake(),
            }
        }

        /// `Inbox::send` from another thread; returns the messages this
        /// producer settled itself (the loop was closed).
        fn send(&self, m: u32) -> Vec<u32> {
            self.inbox.push(m);
            let mut settled = Vec::new();
            if self.hs.after_push(|how| self.wake_as(how)) == Posted::Closed {
                self.drain(&mut settled);
            }
            settled
        }

        /// `Inbox::drain_inbox`.
        fn drain(&self, into: &mut Vec<u32>) {
            while let Some(m) = self.inbox.steal() {
                into.push(m);
            }
        }

        /// `Poller::iterate` turns until `n` messages were taken: run a
        /// pass (drain the inbox), then `prepare_sleep`, `poll`, `woke`.
        /// The first poll times out when `first_times_out` (a timer was
        /// due). Returns the messages taken and how many times `sleeping`
        /// was published. The loop's `i`-th sleep is `sleeps[i % len]`
        /// (its I/O sources come and go): it blocks on the waker of that
        /// kind only.
        fn run_until_as(
            &self,
            n: usize,
            mut first_times_out: bool,
            sleeps: &[Sleep],
        ) -> (Vec<u32>, usize) {
            let mut got = Vec::new();
            let mut published = 0;
            loop {
                self.drain(&mut got);
                if got.len() >= n {
                    return (got, published);
                }
                let how = sleeps[published % sleeps.len()];
                published += 1;
                if self.hs.prepare_sleep(how, || self.inbox.is_empty()) {
                    let w = match how {
                        Sleep::Poll => &self.waker,
                        Sleep::Park => &self.parker,
                    };
                    w.poll(std::mem::take(&mut first_times_out));
                    self.hs.woke();
                }
            }
        }
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    /// No lost wake-up: `producers` threads each send one message while
    /// the loop thread turns (drain, prepare_sleep, poll, woke). A loop
    /// that slept with a message queued and no wake coming would block
    /// forever (loom reports the deadlock); so every interleaving ends
    /// with every message taken exactly once. The wake calls never exceed
    /// the times the loop published `sleeping`.
    fn no_lost_wakeup(producers: u32, first_times_out: bool) {
        no_lost_wakeup_as(producers, first_times_out, &[Sleep::Poll]);
    }

    /// [`no_lost_wakeup`] for a loop that sleeps each way in turn.
    fn no_lost_wakeup_as(producers: u32, first_times_out: bool, sleeps: &'static [Sleep]) {
        let l = Loop::new();
        let ths: Vec<_> = (0..producers)
            .map(|i| {
                let l = l.clone();
                thread::spawn(move || l.send(i))
            })
            .collect();
        let (got, published) = l.run_until_as(producers as usize, first_times_out, sleeps);
        for t in ths {
            assert!(t.join().unwrap().is_empty(), "nothing settled: not closed");
        }
        assert_eq!(sorted(got), (0..producers).collect::<Vec<_>>());
        assert!(l.inbox.is_empty());
        let calls = l.waker.calls() + l.parker.calls();
        assert!(calls <= published, "{calls} wakes for {published} parks");
    }

    // In these, the sleep that blocks is the last kind listed: the first
    // sleep times out when `first_times_out`, so the loop changes how it
    // sleeps between a producer's look at `sleeping` and its wake.

    #[test]
    fn loom_inbox_no_lost_wakeup_parked() {
        model("inbox: no lost wake-up, parked loop", None, || {
            no_lost_wakeup_as(1, false, &[Sleep::Park])
        });
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_park_then_poll() {
        model("inbox: no lost wake-up, parked then in poll", None, || {
            no_lost_wakeup_as(1, true, &[Sleep::Park, Sleep::Poll])
        });
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_poll_then_park() {
        model("inbox: no lost wake-up, in poll then parked", None, || {
            no_lost_wakeup_as(1, true, &[Sleep::Poll, Sleep::Park])
        });
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_two_producers_mixed_sleeps() {
        model(
            "inbox: no lost wake-up, 2 producers, parked then in poll",
            Some(3),
            || no_lost_wakeup_as(2, true, &[Sleep::Park, Sleep::Poll]),
        );
        model(
            "inbox: no lost wake-up, 2 producers, in poll then parked",
            Some(3),
            || no_lost_wakeup_as(2, true, &[Sleep::Poll, Sleep::Park]),
        );
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_one_producer() {
        model("inbox: no lost wake-up, 1 producer", None, || {
            no_lost_wakeup(1, false)
        });
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_after_a_timed_out_poll() {
        model("inbox: no lost wake-up, timed-out poll first", None, || {
            no_lost_wakeup(1, true)
        });
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_two_producers() {
        model("inbox: no lost wake-up, 2 producers", Some(3), || {
            no_lost_wakeup(2, false)
        });
    }

    #[test]
    fn loom_inbox_no_lost_wakeup_two_producers_after_a_timed_out_poll() {
        model(
            "inbox: no lost wake-up, 2 producers, timed-out poll first",
            Some(3),
            || no_lost_wakeup(2, true),
        );
    }

    /// The runtime's variant: a spawner pushes a job on a queue of its own
    /// (not the inbox), fences and calls `wake_if_sleeping`, as
    /// `Core::submit` does; the loop's `prepare_sleep` check also looks at
    /// that queue (its `idle`). The job is never stranded.
    #[test]
    fn loom_inbox_no_lost_wakeup_for_work_outside_the_inbox() {
        model(
            "inbox: no lost wake-up, job outside the inbox",
            None,
            || {
                let l = Loop::new();
                let jobs = Arc::new(Queue::new());
                let (l2, jobs2) = (l.clone(), jobs.clone());
                let spawner = thread::spawn(move || {
                    jobs2.push(7);
                    loom::sync::atomic::fence(SeqCst);
                    l2.hs.wake_if_sleeping(|_| l2.waker.wake());
                });
                let mut got = Vec::new();
                while got.is_empty() {
                    while let Some(j) = jobs.steal() {
                        got.push(j);
                    }
                    if got.is_empty()
                        && l.hs
                            .prepare_sleep(Sleep::Poll, || l.inbox.is_empty() && jobs.is_empty())
                    {
                        l.waker.poll(false);
                        l.hs.woke();
                    }
                }
                spawner.join().unwrap();
                assert_eq!(got, [7]);
            },
        );
    }

    /// A burst to a parked loop: the loop has published `sleeping` and
    /// blocks in `poll` while two producers send. Exactly one of them
    /// calls the waker (the one whose compare-exchange flips `sleeping`),
    /// never both and never neither; the woken loop then takes both
    /// messages.
    #[test]
    fn loom_inbox_burst_to_a_parked_loop_wakes_once() {
        model("inbox: burst to a parked loop, 1 wake", Some(5), || {
            let l = Loop::new();
            assert!(l.hs.prepare_sleep(Sleep::Poll, || l.inbox.is_empty()));
            let ths: Vec<_> = (0..2)
                .map(|i| {
                    let l = l.clone();
                    thread::spawn(move || l.send(i))
                })
                .collect();
            l.waker.poll(false);
            for t in ths {
                assert!(t.join().unwrap().is_empty());
            }
            assert_eq!(l.waker.calls(), 1, "one wake for the burst");
            l.hs.woke();
            let mut got = Vec::new();
            l.drain(&mut got);
            assert_eq!(sorted(got), [0, 1]);
        });
    }

    /// Close vs send: producers send while the loop takes what it finds
    /// (`handled_first`) and then closes (`Inbox::close`: publish
    /// `closed`, fence, drain). Every message is settled exactly once:
    /// handled by the loop, drained by its close, or drained by a producer
    /// that saw `closed`; none is left in the queue.
    fn close_vs_send(producers: u32, handled_first: bool) {
        let l = Loop::new();
        let ths: Vec<_> = (0..producers)
            .map(|i| {
                let l = l.clone();
                thread::spawn(move || l.send(i))
            })
            .collect();
        let mut settled = Vec::new();
        if handled_first {
            l.drain(&mut settled);
        }
        l.hs.close();
        l.drain(&mut settled);
        for t in ths {
            settled.extend(t.join().unwrap());
        }
        assert_eq!(sorted(settled), (0..producers).collect::<Vec<_>>());
        assert!(l.inbox.is_empty(), "a message left behind");
        assert_eq!(l.waker.calls(), 0, "the loop never slept");
    }

    #[test]
    fn loom_inbox_close_vs_send_one_producer() {
        model("inbox: close vs send, 1 producer", None, || {
            close_vs_send(1, true)
        });
    }

    #[test]
    fn loom_inbox_close_vs_send_two_producers() {
        model("inbox: close vs send, 2 producers", Some(4), || {
            close_vs_send(2, false)
        });
    }

    #[test]
    fn loom_inbox_close_vs_send_two_producers_after_a_pass() {
        model(
            "inbox: close vs send, 2 producers, a pass first",
            Some(3),
            || close_vs_send(2, true),
        );
    }
}
