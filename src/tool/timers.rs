//! [`Timers`]: the loop's pending timers, a min-queue on `(at, order)`
//! built as a calendar wheel, so a million pending timers cost about what
//! a thousand do.
//!
//! A binary heap of a million entries spends its time in cache misses: each
//! pop walks ~20 levels of a 32 MB array. Here a timer goes by its
//! millisecond tick (since the loop's start) into one of three places:
//!
//! - `due`: a small exact heap of the entries whose tick is `<= cur`, the
//!   tick the wheel has reached (about one millisecond's worth);
//! - `slots`: a ring of `SLOTS` vectors, one per tick in
//!   `(cur, cur + SLOTS)`, with a bitmap of the non-empty ones; inserting
//!   is a `Vec::push`;
//! - `far`: a heap for ticks `>= cur + SLOTS` (beyond ~4 s), moved into the
//!   ring as `cur` gets near them.
//!
//! `peek`/`pop` return the exact minimum: when `due` is empty the wheel
//! first moves `cur` to the next non-empty tick and drains that slot into
//! `due`. `cur` may run ahead of the loop's clock; entries in `due` simply
//! wait there until their time comes, and a new timer whose tick is not
//! past `cur` goes straight into `due`. Ties at the same instant keep their
//! `order` (FIFO), as with a plain heap.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

const SLOTS: usize = 4096;
const WORDS: usize = SLOTS / 64;

/// A min-queue of `(at, order, payload)`; see the module docs.
pub(crate) struct Timers<T: Ord> {
    origin: Instant,
    cur: u64,
    due: BinaryHeap<Reverse<Entry<T>>>,
    slots: Vec<Vec<Entry<T>>>,
    occupied: [u64; WORDS],
    far: BinaryHeap<Reverse<Entry<T>>>,
    len: usize,
    /// Entries in `slots` (so an empty ring is not scanned).
    in_slots: usize,
    /// Buffers of slots drained into `due`, handed to the next slots that
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
pub(crate) struct Entry<T: Ord> {
    pub at: Instant,
    pub order: u64,
    pub item: T,
}

impl<T: Ord> Timers<T> {
    /// An empty wheel whose tick 0 is `origin` (no timer is ever earlier).
    pub(crate) fn new(origin: Instant) -> Self {
        Timers {
            origin,
            cur: 0,
            due: BinaryHeap::new(),
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

    fn tick(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_millis() as u64
    }

    pub(crate) fn push(&mut self, e: Entry<T>) {
        self.len += 1;
        self.place(e);
    }

    fn place(&mut self, e: Entry<T>) {
        let t = self.tick(e.at);
        if t <= self.cur {
            self.due.push(Reverse(e));
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

    /// The earliest timer (exact), moving the wheel forward as needed.
    pub(crate) fn peek(&mut self) -> Option<&Entry<T>> {
        if self.due.is_empty() {
            self.fill_due();
        }
        self.due.peek().map(|Reverse(e)| e)
    }

    /// Removes and returns the earliest timer.
    pub(crate) fn pop(&mut self) -> Option<Entry<T>> {
        if self.due.is_empty() {
            self.fill_due();
        }
        let e = self.due.pop()?.0;
        self.len -= 1;
        Some(e)
    }

    /// Keeps only the timers for which `keep` holds.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.due.retain(|Reverse(e)| keep(&e.item));
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
        self.len = self.due.len() + self.far.len() + self.in_slots;
    }

    /// `due` is empty: move `cur` to the next tick that has timers and
    /// drain it into `due`.
    fn fill_due(&mut self) {
        if let Some(t) = self.next_occupied() {
            self.advance_to(t);
        } else if let Some(Reverse(e)) = self.far.peek() {
            let t = self.tick(e.at);
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

    /// Moves `cur` to `t` (>= cur): every slot up to `t` goes into `due`,
    /// and far timers now within the ring come into it.
    fn advance_to(&mut self, t: u64) {
        while let Some(s) = self.next_occupied().filter(|&s| s <= t) {
            let i = (s % SLOTS as u64) as usize;
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.cur = s;
            let mut v = std::mem::take(&mut self.slots[i]);
            self.in_slots -= v.len();
            self.due.extend(v.drain(..).map(Reverse));
            if self.spare.len() < SPARE && v.capacity() <= SPARE_CAP {
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
            if self.tick(e.at) >= limit {
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
        let mut h: BinaryHeap<Reverse<Entry<u32>>> = BinaryHeap::new();
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
                w.push(Entry {
                    at,
                    order,
                    item: round,
                });
                h.push(Reverse(Entry {
                    at,
                    order,
                    item: round,
                }));
            } else {
                assert_eq!(w.peek().map(|e| e.item), h.peek().map(|e| e.0.item));
                let a = w.pop().map(|e| (e.at, e.item));
                let b = h.pop().map(|e| (e.0.at, e.0.item));
                assert_eq!(a, b);
                if let Some((at, _)) = a {
                    now_ms = now_ms.max(at.duration_since(origin).as_millis() as u64);
                }
            }
            assert_eq!(w.len(), h.len());
        }
        while let Some(Reverse(e)) = h.pop() {
            assert_eq!(w.pop().map(|x| x.item), Some(e.item));
        }
        assert!(w.pop().is_none());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn retain_drops_what_is_not_kept_everywhere() {
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        for (i, ms) in [0u64, 5, 3000, 9000, 100_000].into_iter().enumerate() {
            w.push(Entry {
                at: origin + Duration::from_millis(ms),
                order: i as u64,
                item: i as u32,
            });
        }
        w.retain(|&i| i % 2 == 0);
        assert_eq!(w.len(), 3);
        let got: Vec<u32> = std::iter::from_fn(|| w.pop().map(|e| e.item)).collect();
        assert_eq!(got, [0, 2, 4]);
    }

    #[test]
    fn a_timer_behind_the_wheel_goes_first() {
        // The wheel ran ahead to a far timer; a nearer one added later
        // still comes out first.
        let origin = Instant::now();
        let mut w: Timers<u32> = Timers::new(origin);
        let at = |ms| origin + Duration::from_millis(ms);
        w.push(Entry {
            at: at(50),
            order: 1,
            item: 50,
        });
        assert_eq!(w.peek().map(|e| e.item), Some(50));
        w.push(Entry {
            at: at(10),
            order: 2,
            item: 10,
        });
        w.push(Entry {
            at: at(50),
            order: 3,
            item: 51,
        });
        let got: Vec<u32> = std::iter::from_fn(|| w.pop().map(|e| e.item)).collect();
        assert_eq!(got, [10, 50, 51]);
    }
}
