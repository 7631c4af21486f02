//! The wheel's unit tests: against a plain heap and against a reference
//! model of the scheduler's use of it.

use super::*;
use std::collections::BTreeMap;
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
    // A nearer timer added after the wheel was peeked at (and after
    // one at the same instant) still comes out first.
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

/// xorshift64: deterministic randomness for the model checks.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Never zero; seeds next to each other start far apart.
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const MS: u64 = NS_PER_TICK;

/// The scheduler's use of the wheel (`add_timer`, `cancel_task` with
/// its stale-entry sweep, `fire_timers`, `next_deadline`,
/// `TestTool::advance`), checked step by step against a reference
/// model: the live timers in a `BTreeMap` on `(at, order)`.
struct Sim {
    origin: Instant,
    w: Timers<u32>,
    /// The clock, in nanoseconds since the origin.
    now: u64,
    order: u64,
    model: BTreeMap<(u64, u64), u32>,
    /// Per item: its key in `model` while it is pending.
    key: Vec<Option<(u64, u64)>>,
    /// Per item: cancelled while its entry was in the wheel.
    cancelled: Vec<bool>,
    /// Cancelled entries still in the wheel.
    stale: usize,
    fired: usize,
}

impl Sim {
    fn new() -> Self {
        let origin = Instant::now();
        Sim {
            origin,
            w: Timers::new(origin),
            now: 0,
            order: 0,
            model: BTreeMap::new(),
            key: Vec::new(),
            cancelled: Vec::new(),
            stale: 0,
            fired: 0,
        }
    }

    fn push(&mut self, delay: u64) {
        let at = self.now + delay;
        let item = self.key.len() as u32;
        self.order += 1;
        self.w
            .push(self.origin + Duration::from_nanos(at), self.order, item);
        self.model.insert((at, self.order), item);
        self.key.push(Some((at, self.order)));
        self.cancelled.push(false);
        assert_eq!(self.w.len(), self.model.len() + self.stale);
    }

    fn cancel(&mut self, item: u32) {
        let Some(k) = self.key[item as usize].take() else {
            return;
        };
        self.model.remove(&k);
        self.cancelled[item as usize] = true;
        self.stale += 1;
        if self.stale > 64 && self.stale * 2 > self.w.len() {
            let cancelled = &self.cancelled;
            self.w.retain(|&i| !cancelled[i as usize]);
            self.stale = 0;
        }
        assert_eq!(self.w.len(), self.model.len() + self.stale);
    }

    /// `fire_timers`: every live timer due now comes out, in order,
    /// and none that is not due.
    fn fire(&mut self) {
        while let Some(item) = self.w.pop_due(self.now) {
            if self.cancelled[item as usize] {
                self.stale -= 1;
                continue;
            }
            let (&k, &want) = self.model.first_key_value().expect("a timer fired twice");
            assert_eq!(item, want, "out of order");
            assert!(k.0 <= self.now, "fired early");
            self.model.remove(&k);
            self.key[item as usize] = None;
            self.fired += 1;
        }
        if let Some((&(at, _), _)) = self.model.first_key_value() {
            assert!(at > self.now, "a due timer was left behind");
        }
        assert_eq!(self.w.len(), self.model.len() + self.stale);
        // The wheel never runs ahead of the clock.
        assert!(self.w.cur <= self.now / MS);
    }

    /// `next_deadline`: the earliest live timer, dropping stale heads.
    fn next_deadline(&mut self) -> Option<u64> {
        let got = loop {
            match self.w.peek() {
                Some((at, &i)) if !self.cancelled[i as usize] => {
                    break Some(self.w.since_origin(at));
                }
                Some(_) => {
                    self.w.pop();
                    self.stale -= 1;
                }
                None => break None,
            }
        };
        assert_eq!(got, self.model.keys().next().map(|k| k.0));
        assert!(self.w.cur <= self.now / MS);
        got
    }

    /// `TestTool::advance`: the clock steps to each deadline up to
    /// `now + d`, so each timer fires exactly at its instant.
    fn advance(&mut self, d: u64) {
        let target = self.now + d;
        self.fire();
        while let Some(at) = self.next_deadline() {
            if at > target {
                break;
            }
            self.now = self.now.max(at);
            let before = self.fired;
            self.fire();
            assert!(self.fired > before, "nothing fired at a deadline");
        }
        self.now = target;
        self.fire();
    }
}

/// Delays of every kind: none, within the tick, the ring (and its
/// edge), far, very far; some exact so that instants tie.
fn delay(r: &mut Rng) -> u64 {
    match r.below(10) {
        0 => 0,
        1 => r.below(MS),
        2 => r.below(5) * MS,
        3 => r.below(100 * MS),
        4 | 5 => r.below(4_000 * MS),
        6 => (4_090 + r.below(12)) * MS + r.below(2) * r.below(MS),
        7 => r.below(20_000 * MS),
        8 => 3_600_000 * MS + r.below(3) * MS,
        _ => r.below(30 * 24 * 3_600_000) * MS + r.below(MS),
    }
}

/// Random pushes, cancels, quiet turns, clock jumps and advances with
/// far timers pending, over many seeds: every timer fires exactly once,
/// never early, never left behind, in `(at, order)` order.
#[test]
fn same_firings_as_a_reference_model_with_far_timers() {
    for seed in 0..150u64 {
        let mut r = Rng::new(seed);
        let mut sim = Sim::new();
        // A long timeout pending from the start in half the runs.
        if seed % 2 == 0 {
            sim.push(3_600_000 * MS);
        }
        for _ in 0..2_000 {
            match r.below(20) {
                0..=8 => {
                    let d = delay(&mut r);
                    sim.push(d);
                }
                9..=11 => {
                    // A burst at one instant: ties keep their order.
                    let d = delay(&mut r);
                    for _ in 0..r.below(6) {
                        sim.push(d);
                    }
                }
                12 | 13 => {
                    let n = sim.key.len() as u64;
                    if n > 0 {
                        let i = r.below(n) as u32;
                        sim.cancel(i);
                    }
                }
                14 => {
                    // Cancel the earliest live timer: a stale head.
                    if let Some(&i) = sim.model.values().next() {
                        sim.cancel(i);
                    }
                }
                15 => {
                    // A quiet turn of a real loop.
                    sim.fire();
                    sim.next_deadline();
                }
                16 => {
                    // The clock jumped (a busy turn): late, but in order.
                    sim.now += r.below(50 * MS);
                    sim.fire();
                }
                17 => sim.advance(r.below(3 * MS)),
                18 => sim.advance(r.below(500 * MS)),
                _ => sim.advance(r.below(10_000 * MS)),
            }
        }
        // Run everything out.
        while let Some(at) = sim.next_deadline() {
            sim.now = sim.now.max(at);
            sim.fire();
        }
        assert!(sim.model.is_empty());
        assert_eq!((sim.w.len(), sim.stale), (0, 0));
    }
}

/// While a far timer is pending, neither a quiet turn (`pop_due` with
/// nothing due, then `peek`) nor dropping a cancelled head moves the
/// wheel to it: the timers set meanwhile go into the ring, not into
/// the `late` heap, and fire at their instants.
#[test]
fn short_timers_go_into_the_ring_while_a_far_one_is_pending() {
    let mut sim = Sim::new();
    sim.push(3_600_000 * MS);
    // A quiet turn.
    sim.fire();
    assert_eq!(sim.next_deadline(), Some(3_600_000 * MS));
    assert_eq!(sim.w.cur, 0);
    for i in 0..1000 {
        sim.push(4 * MS + i * 3_990 * MS / 1000);
    }
    assert_eq!(sim.w.late.len(), 0);
    assert_eq!(sim.w.in_slots, 1000);
    assert_eq!(sim.w.far.len(), 1);
    sim.advance(4_000 * MS);
    assert_eq!(sim.fired, 1000);
    assert_eq!(sim.w.cur, 4_000);
    // A timer 3 s ahead, in the ring, cancelled: the loop drops it as
    // a stale head (`pop`), which leaves the wheel where it is too.
    sim.push(3_000 * MS);
    sim.cancel(sim.key.len() as u32 - 1);
    assert_eq!(sim.next_deadline(), Some(3_600_000 * MS));
    assert_eq!(sim.w.len(), 1);
    assert_eq!(sim.w.cur, 4_000);
    for i in 0..1000 {
        sim.push((i + 1) * MS);
    }
    assert_eq!(sim.w.late.len(), 0);
    assert_eq!(sim.w.in_slots, 1000);
    // They fire at their instants as the clock gets there.
    sim.advance(1_000 * MS);
    assert_eq!(sim.fired, 2000);
    sim.advance(3_600_000 * MS);
    assert_eq!(sim.fired, 2001);
    assert_eq!(sim.w.len(), 0);
}

/// Pops of the ring's head without the clock (the loop dropping
/// cancelled timers) come out of the slot's heap in order, also after
/// `retain` took entries out of the middle of the heap.
#[test]
fn popping_within_a_slot_keeps_the_order() {
    let origin = Instant::now();
    let mut w: Timers<u32> = Timers::new(origin);
    let mut r = Rng::new(7);
    let mut want = Vec::new();
    // 500 timers within two ticks, in random order, many tied.
    for i in 0..500u32 {
        let at = 10 * MS + r.below(2_000) * 1000;
        w.push(origin + Duration::from_nanos(at), u64::from(i), i);
        want.push((at, i));
    }
    want.sort_unstable();
    assert_eq!(w.in_slots, 500);
    let pop = |w: &mut Timers<u32>| {
        let (_, &i) = w.peek()?;
        let (at, j) = w.pop()?;
        assert_eq!(i, j);
        Some((w.since_origin(at), j))
    };
    let got: Vec<(u64, u32)> = (0..100).map_while(|_| pop(&mut w)).collect();
    assert_eq!(got, want[..100]);
    w.retain(|&i| i % 3 != 0);
    let got: Vec<(u64, u32)> = std::iter::from_fn(|| pop(&mut w)).collect();
    let rest: Vec<(u64, u32)> = want[100..]
        .iter()
        .copied()
        .filter(|e| e.1 % 3 != 0)
        .collect();
    assert_eq!(got, rest);
    assert_eq!((w.cur, w.len()), (0, 0));
}
