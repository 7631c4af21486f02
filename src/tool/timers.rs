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
//!   `(cur, cur + SLOTS)`, with a bitmap of the non-empty ones; each vector
//!   is a small binary min-heap (inserting is a `Vec::push` and, for
//!   timers set in time order, no sifting);
//! - `far`: a heap for ticks `>= cur + SLOTS` (beyond ~4 s), moved into the
//!   ring as `cur` gets near them.
//!
//! Only [`pop_due`](Timers::pop_due), which is given the loop's clock,
//! moves `cur`, and never past the clock's tick: it drains the slots up to
//! that tick. `peek`/`pop` return the exact minimum without moving the
//! wheel: when nothing is due, it is the top of the first non-empty slot
//! (or of `far`). So `cur` follows the clock, and a timer set while a far
//! one is pending (a long timeout) still goes into the ring, not into
//! `late`. A timer whose tick is not past `cur` (a zero delay) goes into
//! `late`. Ties at the same instant keep their `order` (FIFO), as with a
//! plain heap.
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
    /// The last tick drained into `run` (or passed with nothing to drain):
    /// never past the latest clock given to `pop_due`.
    cur: u64,
    /// Due entries from drained slots, in `(at, order)` order.
    run: VecDeque<Entry<T>>,
    /// Due entries pushed when their tick was already reached.
    late: BinaryHeap<Reverse<Entry<T>>>,
    /// Min-heaps (see [`sift_up`]), one per tick.
    slots: Vec<Vec<Entry<T>>>,
    occupied: [u64; WORDS],
    far: BinaryHeap<Reverse<Entry<T>>>,
    len: usize,
    /// Entries in `slots` (so an empty ring is not scanned).
    in_slots: usize,
    /// No slot holds a tick below this one, and it is past `cur`: where
    /// the search for the first non-empty slot starts, so repeated peeks
    /// do not scan the same empty slots again.
    scan: u64,
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
            scan: 1,
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
            sift_up(slot);
            self.in_slots += 1;
            self.occupied[i / 64] |= 1 << (i % 64);
            self.scan = self.scan.min(t);
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

    #[inline]
    fn nothing_due(&self) -> bool {
        self.run.is_empty() && self.late.is_empty()
    }

    /// The earliest entry (exact), without moving the wheel: the due
    /// entries come before the ring's, which come before `far`'s.
    fn head(&mut self) -> Option<&Entry<T>> {
        if !self.nothing_due() {
            return if self.late_first() {
                self.late.peek().map(|Reverse(e)| e)
            } else {
                self.run.front()
            };
        }
        match self.next_occupied() {
            // The slot's heap top.
            Some(t) => self.slots[(t % SLOTS as u64) as usize].first(),
            None => self.far.peek().map(|Reverse(e)| e),
        }
    }

    /// Removes the entry [`head`](Self::head) returns, without moving the
    /// wheel either.
    fn pop_entry(&mut self) -> Option<Entry<T>> {
        let e = if !self.nothing_due() {
            if self.late_first() {
                self.late.pop()?.0
            } else {
                self.run.pop_front()?
            }
        } else if let Some(t) = self.next_occupied() {
            let i = (t % SLOTS as u64) as usize;
            let slot = &mut self.slots[i];
            let e = heap_pop(slot)?;
            if slot.is_empty() {
                self.occupied[i / 64] &= !(1 << (i % 64));
            }
            self.in_slots -= 1;
            e
        } else {
            self.far.pop()?.0
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
    /// When nothing is due yet, the wheel moves up to `now`'s tick (and no
    /// further), draining the slots on the way.
    #[inline]
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<T> {
        if self.nothing_due() {
            let t = now / NS_PER_TICK;
            if t > self.cur {
                self.advance_to(t);
            }
            // Whatever is left in the ring or in `far` is past `cur`,
            // hence past `now`'s tick.
            if self.nothing_due() {
                return None;
            }
        }
        let at = if self.late_first() {
            self.late.peek()?.0.at
        } else {
            self.run.front()?.at
        };
        if at > now {
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
                } else {
                    heapify(s);
                }
            }
        }
        self.in_slots = self.slots.iter().map(Vec::len).sum::<usize>();
        self.len = self.run.len() + self.late.len() + self.far.len() + self.in_slots;
    }

    /// The first non-empty slot's tick in `(cur, cur + SLOTS)`, searched
    /// from `scan` (which it moves up to that tick).
    fn next_occupied(&mut self) -> Option<u64> {
        if self.in_slots == 0 {
            return None;
        }
        // The ring's ticks are in `[scan, cur + SLOTS)`, fewer than `SLOTS`:
        // in the ring's order from `scan`'s index they come in tick order.
        let start = (self.scan % SLOTS as u64) as usize;
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
                self.scan += off as u64;
                return Some(self.scan);
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
            self.set_cur(s);
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
            self.set_cur(t);
            self.pull_far();
        }
    }

    #[inline]
    fn set_cur(&mut self, t: u64) {
        self.cur = t;
        self.scan = self.scan.max(t + 1);
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

/// Restores the min-heap order of `v` after a push onto its back. Timers
/// set in time order land behind their parent and do not move.
#[inline]
fn sift_up<E: Ord>(v: &mut [E]) {
    let Some(mut i) = v.len().checked_sub(1) else {
        return;
    };
    while i > 0 {
        let p = (i - 1) / 2;
        if v[i] >= v[p] {
            return;
        }
        v.swap(i, p);
        i = p;
    }
}

/// Moves `v[i]` down to its place in the min-heap `v`.
fn sift_down<E: Ord>(v: &mut [E], mut i: usize) {
    loop {
        let l = 2 * i + 1;
        if l >= v.len() {
            return;
        }
        let c = if l + 1 < v.len() && v[l + 1] < v[l] {
            l + 1
        } else {
            l
        };
        if v[i] <= v[c] {
            return;
        }
        v.swap(i, c);
        i = c;
    }
}

/// Removes the smallest entry of the min-heap `v`.
fn heap_pop<E: Ord>(v: &mut Vec<E>) -> Option<E> {
    let last = v.len().checked_sub(1)?;
    v.swap(0, last);
    let e = v.pop();
    sift_down(v, 0);
    e
}

/// Makes `v` a min-heap.
fn heapify<E: Ord>(v: &mut [E]) {
    for i in (0..v.len() / 2).rev() {
        sift_down(v, i);
    }
}

#[cfg(test)]
mod tests;
