//! [`Timers`]: the loop's pending timers, a min-queue on `(at, order)`
//! built as a calendar wheel, so a million pending timers cost about what
//! a thousand do.
//!
//! A binary heap of a million entries spends its time in cache misses: each
//! pop walks ~20 levels of a 32 MB array. Here a timer goes by its
//! millisecond tick (since the loop's start) into one of three places:
//!
//! - due: the entries whose tick is `<= cur`, the tick the wheel has
//!   reached (about one millisecond's worth). They are kept in two parts:
//!   `run`, the drained slots, sorted once and then taken from the front
//!   (no per-entry heap work for the bulk of the timers), and `late`, a
//!   small heap of the timers pushed with a tick already `<= cur`. The
//!   earliest due timer is the smaller of the two heads;
//! - `slots`: a ring of `SLOTS` vectors, one per tick in
//!   `(cur, cur + SLOTS)`, with a bitmap of the non-empty ones; inserting
//!   is a `Vec::push`;
//! - `far`: a heap for ticks `>= cur + SLOTS` (beyond ~4 s), moved into the
//!   ring as `cur` gets near them.
//!
//! `peek`/`pop` return the exact minimum: when nothing is due the wheel
//! first moves `cur` to the next non-empty tick and drains that slot. `cur`
//! may run ahead of the loop's clock; due entries simply wait until their
//! time comes, and a new timer whose tick is not past `cur` goes straight
//! into `late`. Ties at the same instant keep their `order` (FIFO), as with
//! a plain heap.
//!
//! An entry keeps its instant as nanoseconds since the wheel's origin (a
//! `u64`: exact, and enough for 584 years), so an entry is three words and
//! its tick one division. Instants count up to [`HORIZON`] (500 years) past
//! the origin; a later one counts as the horizon itself. The scheduler caps
//! delays at 100 years and `TestTool::advance` stops the clock at 400, so
//! a deadline only reaches the horizon once the clock is moved past 400
//! years to far timers; timers capped there fall due together, in
//! scheduling order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// The latest instant the wheel keeps apart, after its origin: 500 years.
pub(crate) const HORIZON: Duration = Duration::from_secs(500 * 365 * 24 * 3600);
const HORIZON_NS: u64 = HORIZON.as_nanos() as u64;

const SLOTS: usize = 4096;
const WORDS: usize = SLOTS / 64;
const NS_PER_TICK: u64 = 1_000_000;

/// A min-queue of `(at, order, payload)`; see the module docs.
pub(crate) struct Timers<T: Ord> {
    origin: Instant,
    cur: u64,
    /// Due entries from drained slots, in `(at, order)` order.
    run: VecDeque<Entry<T>>,
    /// Due entries pushed when their tick was already reached.
    late: BinaryHeap<Reverse<Entry<T>>>,
    slots: Vec<Vec<Entry<T>>>,
    occupied: [u64; WORDS],
    far: BinaryHeap<Reverse<Entry<T>>>,
    len: usize,
    /// Entries in `slots` (so an empty ring is not scanned).
    in_slots: usize,
    /// Buffers of slots drained into `run`, handed to the next slots that
    /// fill, so a steady load does not grow each slot's vector from empty
    /// again every millisecond.
    spare: Vec<Vec<Entry<T>>>,
}

/// At most this many drained slot buffers are kept for reuse, each of at
/// most `SPARE_CAP` entries (a burst gives bigger ones back).
const SPARE: usize = 8;
const SPARE_CAP: usize = 4096;

/// One timer: ordered by time, then by insertion order.
#[derive(PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Entry<T: Ord> {
    /// Nanoseconds since the wheel's origin.
    at: u64,
    order: u64,
    item: T,
}

impl<T: Ord> Timers<T> {
    /// An empty wheel whose tick 0 is `origin` (no timer is ever earlier).
    pub(crate) fn new(origin: Instant) -> Self {
        Timers {
            origin,
            cur: 0,
            run: VecDeque::new(),
            late: BinaryHeap::new(),
            // Allocated on first use: a loop that never has a timer
            // more than a tick ahead does not pay for the ring.
            slots: Vec::new(),
            occupied: [0; WORDS],
            far: BinaryHeap::new(),
            len: 0,
            in_slots: 0,
            spare: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `t` as nanoseconds since the origin (an instant before it counts
    /// as the origin; none is: the loop's clock starts there), at most
    /// [`HORIZON`]'s.
    #[inline]
    pub(crate) fn since_origin(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin);
        u64::try_from(d.as_nanos()).map_or(HORIZON_NS, |ns| ns.min(HORIZON_NS))
    }

    #[inline]
    fn instant(&self, at: u64) -> Instant {
        self.origin + Duration::from_nanos(at)
    }

    /// Adds timer `item` due at `at`; `order` breaks ties (smaller first).
    pub(crate) fn push(&mut self, at: Instant, order: u64, item: T) {
        self.len += 1;
        let at = self.since_origin(at);
        self.place(Entry { at, order, item });
    }

    fn place(&mut self, e: Entry<T>) {
        let t = e.at / NS_PER_TICK;
        if t <= self.cur {
            self.late.push(Reverse(e));
        } else if t < self.cur + SLOTS as u64 {
            if self.slots.is_empty() {
                self.slots.resize_with(SLOTS, Vec::new);
            }
            let i = (t % SLOTS as u64) as usize;
            let slot = &mut self.slots[i];
            if slot.capacity() == 0 {
                if let Some(v) = self.spare.pop() {
                    *slot = v;
                }
            }
            slot.push(e);
            self.in_slots += 1;
            self.occupied[i / 64] |= 1 << (i % 64);
        } else {
            self.far.push(Reverse(e));
        }
    }

    /// True when the earliest due entry is in `late` rather than `run`
    /// (both are checked by the caller to be not both empty).
    #[inline]
    fn late_first(&self) -> bool {
        match (self.run.front(), self.late.peek()) {
            (Some(r), Some(Reverse(l))) => l < r,
            (None, _) => true,
            (Some(_), None) => false,
        }
    }

    /// The earliest entry (exact), moving the wheel forward as needed.
    fn head(&mut self) -> Option<&Entry<T>> {
        if self.run.is_empty() && self.late.is_empty() {
            self.fill_due();
        }
        if self.late_first() {
            self.late.peek().map(|Reverse(e)| e)
        } else {
            self.run.front()
        }
    }

    fn pop_entry(&mut self) -> Option<Entry<T>> {
        if self.run.is_empty() && self.late.is_empty() {
            self.fill_due();
        }
        let e = if self.late_first() {
            self.late.pop()?.0
        } else {
            self.run.pop_front()?
        };
        self.len -= 1;
        Some(e)
    }

    /// The earliest timer (exact): its instant and item.
    pub(crate) fn peek(&mut self) -> Option<(Instant, &T)> {
        let origin = self.origin;
        self.head()
            .map(|e| (origin + Duration::from_nanos(e.at), &e.item))
    }

    /// Removes and returns the earliest timer.
    pub(crate) fn pop(&mut self) -> Option<(Instant, T)> {
        self.pop_entry().map(|e| (self.instant(e.at), e.item))
    }

    /// Removes and returns the earliest timer if it is due at `now`
    /// (nanoseconds since the origin, from [`since_origin`](Self::since_origin)).
    #[inline]
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<T> {
        if self.head()?.at > now {
            return None;
        }
        self.pop_entry().map(|e| e.item)
    }

    /// Keeps only the timers for which `keep` holds.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.run.retain(|e| keep(&e.item));
        self.late.retain(|Reverse(e)| keep(&e.item));
        self.far.retain(|Reverse(e)| keep(&e.item));
        for (i, s) in self.slots.iter_mut().enumerate() {
            if !s.is_empty() {
                s.retain(|e| keep(&e.item));
                if s.is_empty() {
                    self.occupied[i / 64] &= !(1 << (i % 64));
                    // Give the memory of a big burst back.
                    s.shrink_to(16);
                }
            }
        }
        self.in_slots = self.slots.iter().map(Vec::len).sum::<usize>();
        self.len = self.run.len() + self.late.len() + self.far.len() + self.in_slots;
    }

    /// Nothing is due: move `cur` to the next tick that has timers and
    /// drain it.
    fn fill_due(&mut self) {
        if let Some(t) = self.next_occupied() {
            self.advance_to(t);
        } else if let Some(Reverse(e)) = self.far.peek() {
            let t = e.at / NS_PER_TICK;
            self.advance_to(t);
        }
    }

    /// The first non-empty slot's tick in `(cur, cur + SLOTS)`.
    fn next_occupied(&self) -> Option<u64> {
        if self.in_slots == 0 {
            return None;
        }
        let start = ((self.cur + 1) % SLOTS as u64) as usize;
        // Scan the bitmap from `start`, wrapping once.
        for k in 0..=WORDS {
            let w = (start / 64 + k) % WORDS;
            let mut bits = self.occupied[w];
            if k == 0 {
                bits &= !0u64 << (start % 64);
            } else if k == WORDS {
                // Back at the first word: only the bits before `start`.
                bits &= (1u64 << (start % 64)).wrapping_sub(1);
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let off = (i + SLOTS - start) % SLOTS;
                return Some(self.cur + 1 + off as u64);
            }
        }
        None
    }

    /// Moves `cur` to `t` (>= cur): every slot up to `t` is sorted onto
    /// the back of `run` (a later tick holds only later instants, so `run`
    /// stays sorted), and far timers now within the ring come into it.
    fn advance_to(&mut self, t: u64) {
        while let Some(s) = self.next_occupied().filter(|&s| s <= t) {
            let i = (s % SLOTS as u64) as usize;
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.cur = s;
            let mut v = std::mem::take(&mut self.slots[i]);
            self.in_slots -= v.len();
            v.sort_unstable();
            let v = if self.run.is_empty() {
                // Take the slot's buffer as is; the emptied one is spare.
                Vec::from(std::mem::replace(&mut self.run, VecDeque::from(v)))
            } else {
                self.run.extend(v.drain(..));
                v
            };
            if self.spare.len() < SPARE && v.capacity() <= SPARE_CAP && v.capacity() > 0 {
                self.spare.push(v);
            }
            self.pull_far();
        }
        if t > self.cur {
            self.cur = t;
            self.pull_far();
        }
    }

    fn pull_far(&mut self) {
        let limit = self.cur + SLOTS as u64;
        while let Some(Reverse(e)) = self.far.peek() {
            if e.at / NS_PER_TICK >= limit {
                return;
            }
            let Some(Reverse(e)) = self.far.pop() else {
                return;
            };
            self.place(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Random pushes and pops against a plain heap: the same order always.
    #[test]
    fn same_order_as_a_binary_heap() {
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        // The reference: a plain heap of (at, order, item).
        let mut h: BinaryHeap<Reverse<(Instant, u64, u32)>> = BinaryHeap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now_ms = 0u64;
        let mut order = 0u64;
        for round in 0..20_000u32 {
            let r = rnd();
            if r % 3 != 0 {
                // Delays from 0 to ~20 s, clustered near the start.
                let d = match r % 5 {
                    0 => rnd() % 3,
                    1 => rnd() % 100,
                    2 => rnd() % 5_000,
                    3 => rnd() % 20_000,
                    _ => (rnd() % 2_000_000) / 1000,
                };
                let at = origin + Duration::from_micros(now_ms * 1000 + d * 1000 + rnd() % 1000);
                order += 1;
                w.push(at, order, round);
                h.push(Reverse((at, order, round)));
            } else if r % 9 == 0 {
                // The scheduler's way: pop what is due at a clock time.
                let now = origin + Duration::from_micros(now_ms * 1000 + rnd() % 3000);
                let limit = w.since_origin(now);
                loop {
                    let want = match h.peek() {
                        Some(Reverse((at, _, i))) if *at <= now => Some(*i),
                        _ => None,
                    };
                    assert_eq!(w.pop_due(limit), want);
                    if want.is_none() {
                        break;
                    }
                    h.pop();
                }
            } else {
                assert_eq!(
                    w.peek().map(|(at, i)| (at, *i)),
                    h.peek().map(|e| (e.0 .0, e.0 .2))
                );
                let a = w.pop();
                let b = h.pop().map(|e| (e.0 .0, e.0 .2));
                assert_eq!(a, b);
                if let Some((at, _)) = a {
                    now_ms = now_ms.max(at.duration_since(origin).as_millis() as u64);
                }
            }
            assert_eq!(w.len(), h.len());
        }
        while let Some(Reverse((at, _, i))) = h.pop() {
            assert_eq!(w.pop(), Some((at, i)));
        }
        assert!(w.pop().is_none());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn an_instant_past_the_horizon_counts_as_the_horizon() {
        let origin = Instant::now();
        let w: Timers<u32> = Timers::new(origin);
        let end = HORIZON.as_nanos() as u64;
        assert_eq!(w.since_origin(origin + HORIZON), end);
        assert_eq!(w.since_origin(origin + HORIZON * 2), end);
        assert_eq!(
            w.since_origin(origin + HORIZON - Duration::from_nanos(1)),
            end - 1
        );
    }

    #[test]
    fn retain_drops_what_is_not_kept_everywhere() {
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        for (i, ms) in [0u64, 5, 3000, 9000, 100_000].into_iter().enumerate() {
            w.push(origin + Duration::from_millis(ms), i as u64, i as u32);
        }
        w.retain(|&i| i % 2 == 0);
        assert_eq!(w.len(), 3);
        let got: Vec<u32> = std::iter::from_fn(|| w.pop().map(|e| e.1)).collect();
        assert_eq!(got, [0, 2, 4]);
    }

    #[test]
    fn a_timer_behind_the_wheel_goes_first() {
        // The wheel ran ahead to a far timer; a nearer one added later
        // still comes out first.
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        let at = |ms| origin + Duration::from_millis(ms);
        w.push(at(50), 1, 50);
        assert_eq!(w.peek().map(|e| *e.1), Some(50));
        w.push(at(10), 2, 10);
        w.push(at(50), 3, 51);
        let got: Vec<u32> = std::iter::from_fn(|| w.pop().map(|e| e.1)).collect();
        assert_eq!(got, [10, 50, 51]);
    }
}
