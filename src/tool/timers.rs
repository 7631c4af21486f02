//! [`Timers`]: the loop's pending timers, a min-queue on `(at, order)`
//! built as a calendar wheel, so a million pending timers cost about what
//! a thousand do.
//!
//! A binary heap of a million entries spends its time in cache misses: each
//! pop walks ~20 levels of a 32 MB array. Here a timer goes by its
//! millisecond tick (since the loop's start) into one of three places:
//!
//! - due: the entries whose tick is `<= cur`, the tick of the loop's clock
//!   when timers were last fired (about one millisecond's worth). They are
//!   kept in two parts: `run`, the drained slots, sorted once and then
//!   taken from the front (no per-entry heap work for the bulk of the
//!   timers), and `late`, a small heap of the timers pushed with a tick
//!   already `<= cur`. The earliest due timer is the smaller of the two
//!   heads;
//! - `slots`: a ring of `SLOTS` vectors, one per tick in
//!   `(cur, cur + SLOTS)`, with a bitmap of the non-empty ones; inserting
//!   is a `Vec::push`;
//! - `far`: a heap for ticks `>= cur + SLOTS` (beyond ~4 s), moved into the
//!   ring as `cur` gets near them.
//!
//! `cur` moves only with time: [`pop_due`](Timers::pop_due) takes it to the
//! tick of the `now` it is given, draining the slots on the way, so a new
//! timer goes to `late` only when its tick is already reached. `peek`/`pop`
//! return the exact minimum without moving `cur`: when nothing is due, that
//! is the earliest entry of the first non-empty slot (found by one scan of
//! the slot and then kept up to date by the pushes into it, see [`Next`]),
//! else the top of `far`. Ties at the same instant keep their `order`
//! (FIFO), as with a plain heap.
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
    /// The first non-empty slot past `cur` and where its earliest entry is,
    /// once a peek has looked for it; `None` when not known.
    next: Option<Next>,
}

/// The first non-empty slot past `cur`: its tick and the index of its
/// earliest entry. A slot that an exact [`pop`](Timers::pop) took from is
/// `sorted`, latest first, so its earliest entry is the last one and the
/// next pops are `Vec::pop`s; a push of an entry that is not the new
/// earliest ends that (the next such pop sorts again).
#[derive(Clone, Copy, Debug)]
struct Next {
    tick: u64,
    min: usize,
    sorted: bool,
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
            next: None,
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
            if let Some(n) = &mut self.next {
                if t < n.tick {
                    // A new first slot: looked for again when needed.
                    self.next = None;
                } else if t == n.tick {
                    if e < slot[n.min] {
                        // The new earliest; in a sorted slot, it is last.
                        n.min = slot.len();
                    } else {
                        n.sorted = false;
                    }
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

    #[inline]
    fn nothing_due(&self) -> bool {
        self.run.is_empty() && self.late.is_empty()
    }

    /// The earliest due entry, if any.
    #[inline]
    fn due_head(&self) -> Option<&Entry<T>> {
        if self.late_first() {
            self.late.peek().map(|Reverse(e)| e)
        } else {
            self.run.front()
        }
    }

    /// Removes the earliest due entry, if any.
    #[inline]
    fn pop_due_entry(&mut self) -> Option<Entry<T>> {
        let e = if self.late_first() {
            self.late.pop()?.0
        } else {
            self.run.pop_front()?
        };
        self.len -= 1;
        Some(e)
    }

    /// The earliest entry (exact), without moving `cur`.
    fn head(&mut self) -> Option<&Entry<T>> {
        if !self.nothing_due() {
            return self.due_head();
        }
        match self.find_next() {
            Some(n) => Some(&self.slots[(n.tick % SLOTS as u64) as usize][n.min]),
            None => self.far.peek().map(|Reverse(e)| e),
        }
    }

    /// Removes the earliest entry (exact), without moving `cur`.
    fn pop_entry(&mut self) -> Option<Entry<T>> {
        if !self.nothing_due() {
            return self.pop_due_entry();
        }
        let e = match self.find_next() {
            Some(n) => {
                let i = (n.tick % SLOTS as u64) as usize;
                let slot = &mut self.slots[i];
                if !n.sorted {
                    // Latest first: this pop and the next ones (of dead
                    // timers, say) take from the end.
                    slot.sort_unstable_by(|a, b| b.cmp(a));
                }
                let e = slot.pop()?;
                self.in_slots -= 1;
                self.next = if slot.is_empty() {
                    self.occupied[i / 64] &= !(1 << (i % 64));
                    None
                } else {
                    Some(Next {
                        tick: n.tick,
                        min: slot.len() - 1,
                        sorted: true,
                    })
                };
                e
            }
            None => self.far.pop()?.0,
        };
        self.len -= 1;
        Some(e)
    }

    /// The first non-empty slot past `cur` and its earliest entry: the
    /// known one, or else found with one scan of that slot.
    fn find_next(&mut self) -> Option<Next> {
        if self.next.is_none() {
            let tick = self.next_occupied()?;
            let slot = &self.slots[(tick % SLOTS as u64) as usize];
            let (min, _) = slot.iter().enumerate().min_by(|a, b| a.1.cmp(b.1))?;
            self.next = Some(Next {
                tick,
                min,
                sorted: false,
            });
        }
        self.next
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
    /// When nothing is due yet, the wheel first moves to `now`'s tick.
    #[inline]
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<T> {
        if self.nothing_due() {
            let t = now / NS_PER_TICK;
            if t <= self.cur {
                // Every other entry is in a later tick.
                return None;
            }
            self.advance_to(t);
        }
        if self.due_head()?.at > now {
            return None;
        }
        self.pop_due_entry().map(|e| e.item)
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
        self.next = None;
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
        if self.next.is_some_and(|n| n.tick > t) {
            // No slot to drain: the first non-empty one is later.
            self.cur = t;
            self.pull_far();
            return;
        }
        while let Some(s) = self.next_occupied().filter(|&s| s <= t) {
            self.next = None;
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

    /// Random pushes, pops, peeks and retains against a plain heap: the same
    /// order always. `delay(r, rnd)` picks a delay in milliseconds.
    fn check_against_a_heap(
        seed: u64,
        rounds: u32,
        delay: fn(u64, &mut dyn FnMut() -> u64) -> u64,
    ) {
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        // The reference: a plain heap of (at, order, item).
        let mut h: BinaryHeap<Reverse<(Instant, u64, u32)>> = BinaryHeap::new();
        let mut x: u64 = seed;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now_ms = 0u64;
        let mut order = 0u64;
        for round in 0..rounds {
            let r = rnd();
            if r % 3 != 0 {
                let d = delay(r, &mut rnd);
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
            } else if r % 301 == 3 {
                let k = (rnd() % 5) as u32;
                w.retain(|&i| i % 5 != k);
                h.retain(|e| e.0 .2 % 5 != k);
            } else {
                assert_eq!(
                    w.peek().map(|(at, i)| (at, *i)),
                    h.peek().map(|e| (e.0 .0, e.0 .2))
                );
                if r % 4 == 0 {
                    // Only a look, as the loop takes before it sleeps.
                    continue;
                }
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
    fn same_order_as_a_binary_heap() {
        // Delays from 0 to ~20 s, clustered near the start.
        check_against_a_heap(0x2545_f491_4f6c_dd1d, 20_000, |r, rnd| match r % 5 {
            0 => rnd() % 3,
            1 => rnd() % 100,
            2 => rnd() % 5_000,
            3 => rnd() % 20_000,
            _ => (rnd() % 2_000_000) / 1000,
        });
    }

    #[test]
    fn same_order_as_a_binary_heap_in_few_slots() {
        // Many entries per slot, pushed between exact pops from the same
        // slot; now and then an hour-long one.
        for seed in [1u64, 0x9e37_79b9_7f4a_7c15, 0xdead_beef] {
            check_against_a_heap(seed, 20_000, |r, rnd| {
                if r % 97 == 0 {
                    3_600_000
                } else {
                    rnd() % 4
                }
            });
        }
    }

    #[test]
    fn short_timers_after_a_peek_at_a_long_one_use_the_ring() {
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        w.push(origin + Duration::from_secs(3600), 0, 0);
        assert_eq!(w.pop_due(w.since_origin(origin)), None);
        assert_eq!(
            w.peek().map(|(at, &i)| (at, i)),
            Some((origin + Duration::from_secs(3600), 0))
        );
        for i in 1..=10_000u32 {
            w.push(
                origin + Duration::from_millis(u64::from(i % 4000) + 1),
                u64::from(i),
                i,
            );
        }
        assert_eq!((w.late.len(), w.in_slots), (0, 10_000));
        // Firing as the clock goes: the exact order, the hour-long one last.
        let mut got = Vec::new();
        for ms in 0..=4001 {
            let now = w.since_origin(origin + Duration::from_millis(ms));
            while let Some(i) = w.pop_due(now) {
                got.push(i);
            }
        }
        let mut want: Vec<u32> = (1..=10_000).collect();
        want.sort_by_key(|&i| (i % 4000, i));
        assert_eq!(got, want);
        assert_eq!(w.len(), 1);
        assert_eq!(w.pop().map(|e| e.1), Some(0));
    }

    #[test]
    fn a_peek_keeps_the_wheel_at_its_tick() {
        // Peeks and exact pops of later timers leave `cur` where the clock
        // is, so timers pushed after them still go to the ring.
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        let at = |ms| origin + Duration::from_millis(ms);
        w.push(at(5), 1, 5);
        w.push(at(7_000), 2, 7_000);
        assert_eq!(w.pop_due(w.since_origin(at(2))), None);
        assert_eq!(w.peek().map(|e| *e.1), Some(5));
        assert_eq!(w.pop().map(|e| e.1), Some(5));
        assert_eq!(w.peek().map(|e| *e.1), Some(7_000));
        assert_eq!(w.cur, 2);
        w.push(at(3), 3, 3);
        w.push(at(2), 4, 2);
        assert_eq!((w.late.len(), w.in_slots), (1, 1));
        let got: Vec<u32> = std::iter::from_fn(|| w.pop().map(|e| e.1)).collect();
        assert_eq!(got, [2, 3, 7_000]);
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
