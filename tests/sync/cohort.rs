//! Cohort handover (`Handover`): a slot freed on a loop goes to that
//! loop's oldest waiter first, for a run bounded by a count and a time,
//! then in arrival order. Exact orders on two `TestTool`s of one thread
//! (two loops, virtual time, driven by the test). The bound measured on
//! two loops of two threads needs the queue's own order: it is a unit
//! test of the crate's `sync::cohort`.

use crate::common::*;
use crate::sleep;
use futoin_asyncsteps::error::codes;
use futoin_asyncsteps::sync::{Handover, Mutex};
use futoin_asyncsteps::{AsyncSteps, Promise, TestTool};
use std::time::Duration;

/// Two loops on this thread, run in turn until neither has work.
struct Two {
    a: TestTool,
    b: TestTool,
}

impl Two {
    fn new() -> Self {
        Two {
            a: TestTool::new(),
            b: TestTool::new(),
        }
    }

    fn tool(&mut self, on_b: bool) -> &mut TestTool {
        if on_b {
            &mut self.b
        } else {
            &mut self.a
        }
    }

    /// Runs both loops until neither has anything ready.
    fn settle(&mut self) {
        while self.a.run_all_ready() + self.b.run_all_ready() > 0 {}
    }

    /// Moves both clocks forward by `d`, a millisecond at a time.
    fn advance(&mut self, d: Duration) {
        for _ in 0..d.as_millis() {
            self.a.advance(ms(1));
            self.b.advance(ms(1));
            self.settle();
        }
    }

    /// Starts a flow on A or B whose section logs `name` and lasts `d` of
    /// virtual time; it runs until it waits (queued, or inside).
    fn waiter(&mut self, on_b: bool, m: &Mutex, r: &Log, name: &'static str, d: Duration) {
        let mut root = AsyncSteps::new();
        let r = r.clone();
        root.sync(m, move |s, ()| {
            r.push(name);
            if !d.is_zero() {
                sleep(s, d);
            }
            Ok(())
        });
        let tool = self.tool(on_b);
        let p: Promise<()> = root.promise(tool);
        tool.run_all_ready();
        std::mem::forget(p);
    }

    /// Starts a flow on A whose section logs `name` and stays inside until
    /// the handle left in `slot` completes; it runs until it waits.
    fn stayer(&mut self, m: &Mutex, r: &Log, name: &'static str, slot: &HandleSlot) {
        let mut root = AsyncSteps::new();
        let (r, slot) = (r.clone(), slot.clone());
        root.sync(m, move |s, ()| {
            r.push(name);
            slot.put(s.wait_external());
            Ok(())
        });
        root.execute(&mut self.a);
        self.settle();
    }

    /// A [`stayer`](Self::stayer) that logs nothing, taking a free `m`.
    fn holder(&mut self, m: &Mutex, slot: &HandleSlot) {
        let mut root = AsyncSteps::new();
        let slot = slot.clone();
        root.sync(m, move |s, ()| {
            slot.put(s.wait_external());
            Ok(())
        });
        root.execute(&mut self.a);
        self.a.run_all_ready();
    }
}

/// The log of a holder on A releasing a Mutex(1) with `h` to waiters
/// that queued in the order of `queue` (on B or not, and a name), each
/// section empty.
fn order_of(h: Handover, queue: &[(bool, &'static str)]) -> Vec<String> {
    let mut two = Two::new();
    let m = Mutex::new(1, None).with_handover(h);
    let (r, slot) = (log(), HandleSlot::default());
    two.holder(&m, &slot);
    for &(on_b, name) in queue {
        two.waiter(on_b, &m, &r, name, Duration::ZERO);
    }
    assert_eq!(m.counts(), (1, queue.len() as u32));
    slot.take().success(()).unwrap();
    two.settle();
    assert_eq!(m.counts(), (0, 0));
    r.get()
}

/// [`order_of`] with b1 on B, a1..a5 on A, b2 on B.
fn order_with(h: Handover) -> Vec<String> {
    let q = [
        (true, "b1"),
        (false, "a1"),
        (false, "a2"),
        (false, "a3"),
        (false, "a4"),
        (false, "a5"),
        (true, "b2"),
    ];
    order_of(h, &q)
}

#[test]
fn a_run_on_the_releasing_loop_ends_at_its_count_then_the_oldest_waiter_goes_first() {
    // A hands over within its cohort three times (b1 is passed three
    // times), then in arrival order: b1 on B, which starts B's run (b2,
    // its only waiter); B's next release goes in arrival order to a4,
    // and A, which lost the slot, begins a new run (a5).
    let h = Handover {
        run: 3,
        time: Duration::from_secs(3600),
    };
    assert_eq!(
        order_with(h),
        ["a1", "a2", "a3", "b1", "b2", "a4", "a5"],
        "run of 3, then arrival order"
    );
}

#[test]
fn a_loop_begins_a_new_run_once_the_slot_came_back_from_another() {
    // Runs of one: A hands to a1, then in queue order to b1 (the slot
    // leaves A); B hands to b2, then in queue order to a2; back on A, a
    // new run hands to a3 past b3, which then gets it.
    let h = Handover {
        run: 1,
        time: Duration::from_secs(3600),
    };
    let q = [
        (true, "b1"),
        (false, "a1"),
        (true, "b2"),
        (false, "a2"),
        (true, "b3"),
        (false, "a3"),
    ];
    assert_eq!(order_of(h, &q), ["a1", "b1", "b2", "a2", "a3", "b3"]);
}

#[test]
fn no_new_run_begins_while_the_slot_stays_on_its_loop() {
    // Runs of one: A hands to a1; its run spent, the queue's order gives
    // a2 (A's own, the oldest), and the run stays spent: b1 comes before
    // a3.
    let h = Handover {
        run: 1,
        time: Duration::from_secs(3600),
    };
    let q = [(false, "a1"), (false, "a2"), (true, "b1"), (false, "a3")];
    assert_eq!(order_of(h, &q), ["a1", "a2", "b1", "a3"]);
}

#[test]
fn a_loops_waiters_keep_their_order_when_the_handover_changes_while_they_wait() {
    // a1 queues under strict FIFO; a clone switches to runs; a2 queues.
    // The run hands over within A in A's order: a1 first.
    let mut two = Two::new();
    let m = Mutex::new(1, None).with_handover(Handover::FIFO);
    let (r, slot) = (log(), HandleSlot::default());
    two.holder(&m, &slot);
    two.waiter(false, &m, &r, "a1", Duration::ZERO);
    let m2 = m.clone().with_handover(Handover::default());
    assert_eq!(m.handover(), Handover::default(), "clones share it");
    two.waiter(false, &m2, &r, "a2", Duration::ZERO);
    slot.take().success(()).unwrap();
    two.settle();
    assert_eq!(r.get(), ["a1", "a2"]);
}

#[test]
fn handing_the_slot_to_the_only_waiter_passes_nobody_and_does_not_count() {
    // Runs of one. a1 waits alone when the holder leaves: that handover
    // passes nobody and is not in a run. While a1 is inside, b1 then a2
    // queue: a1's handover to a2 is the run's first (it passes b1).
    let mut two = Two::new();
    let m = Mutex::new(1, None).with_handover(Handover {
        run: 1,
        time: Duration::from_secs(3600),
    });
    let (r, slot, inside) = (log(), HandleSlot::default(), HandleSlot::default());
    two.holder(&m, &slot);
    two.stayer(&m, &r, "a1", &inside);
    slot.take().success(()).unwrap();
    two.settle();
    assert_eq!(r.get(), ["a1"]);
    two.waiter(true, &m, &r, "b1", Duration::ZERO);
    two.waiter(false, &m, &r, "a2", Duration::ZERO);
    inside.take().success(()).unwrap();
    two.settle();
    assert_eq!(r.get(), ["a1", "a2", "b1"]);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn handover_fifo_keeps_arrival_order_across_loops() {
    assert_eq!(
        order_with(Handover::FIFO),
        ["b1", "a1", "a2", "a3", "a4", "a5", "b2"]
    );
}

#[test]
fn the_default_run_passes_another_loops_waiter_only_within_its_bound() {
    // 70 waiters of A queued after b1: the default run (64) passes b1 64
    // times, then b1 gets the slot.
    let mut two = Two::new();
    let m = Mutex::new(1, None);
    assert_eq!(m.handover(), Handover::default());
    assert_eq!(
        Handover::default(),
        Handover {
            run: 64,
            time: Duration::from_micros(100)
        }
    );
    let (r, slot) = (log(), HandleSlot::default());
    two.holder(&m, &slot);
    two.waiter(true, &m, &r, "b1", Duration::ZERO);
    let names: Vec<&'static str> = (0..70)
        .map(|i| &*Box::leak(format!("a{i}").into_boxed_str()))
        .collect();
    for n in &names {
        two.waiter(false, &m, &r, n, Duration::ZERO);
    }
    slot.take().success(()).unwrap();
    two.settle();
    let got = r.get();
    assert_eq!(got.iter().position(|n| n == "b1"), Some(64), "{got:?}");
    assert_eq!(got.len(), 71);
    // A's own waiters in their arrival order.
    let a: Vec<_> = got.iter().filter(|n| *n != "b1").cloned().collect();
    assert_eq!(a, names);
}

#[test]
fn a_run_ends_at_its_first_handover_past_its_time() {
    // Sections on A last 4 ms (virtual): the run's handovers come at 0,
    // 4 and 8 ms; the one at 12 ms is past a 10 ms run, so it goes in
    // arrival order (b1). With a 100 ms run, A's waiters all go first.
    for (time, want) in [
        (ms(10), ["a1", "a2", "a3", "b1", "a4"]),
        (ms(100), ["a1", "a2", "a3", "a4", "b1"]),
    ] {
        let mut two = Two::new();
        let m = Mutex::new(1, None).with_handover(Handover { run: 100, time });
        let (r, slot) = (log(), HandleSlot::default());
        two.holder(&m, &slot);
        two.waiter(true, &m, &r, "b1", Duration::ZERO);
        for name in ["a1", "a2", "a3", "a4"] {
            two.waiter(false, &m, &r, name, ms(4));
        }
        slot.take().success(()).unwrap();
        two.settle();
        two.advance(ms(20));
        assert_eq!(r.get(), want, "run time {time:?}");
        assert_eq!(m.counts(), (0, 0));
    }
}

#[test]
fn a_waiter_that_left_the_queue_is_skipped_by_the_run() {
    // a1 gives up (its step times out) before the holder leaves: the run
    // goes to a2 and a3, then, with no waiter left on A, to b1.
    let mut two = Two::new();
    let m = Mutex::new(1, None);
    let (r, slot) = (log(), HandleSlot::default());
    two.holder(&m, &slot);
    two.waiter(true, &m, &r, "b1", Duration::ZERO);
    let mut root = AsyncSteps::new();
    let (r1, m1) = (r.clone(), m.clone());
    root.add_catch(
        move |s, ()| {
            s.set_timeout(ms(5));
            let r1 = r1.clone();
            s.sync(&m1, move |_, ()| {
                r1.push("a1");
                Ok(())
            });
            Ok(())
        },
        {
            let r = r.clone();
            move |s, e| {
                r.push(format!("a1 {}", e.code()));
                s.success(())
            }
        },
    );
    root.execute(&mut two.a);
    two.settle();
    for name in ["a2", "a3"] {
        two.waiter(false, &m, &r, name, Duration::ZERO);
    }
    assert_eq!(m.counts(), (1, 4));
    two.advance(ms(6));
    assert_eq!(m.counts(), (1, 3), "a1 left the queue");
    slot.take().success(()).unwrap();
    two.settle();
    assert_eq!(r.get(), ["a1 Timeout", "a2", "a3", "b1"]);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_waiter_granted_within_the_run_frees_its_place_in_the_queue_limit() {
    // Mutex(1, max_queue 2): a1 and a2 fill the queue, a3 is rejected. A
    // handover within A's run counts a1 out of the queue at once (its
    // node stays in the lock-free queue, dead, until a handover skips
    // it), so a4 finds room.
    let mut two = Two::new();
    let m = Mutex::new(1, Some(2));
    let (r, slot) = (log(), HandleSlot::default());
    two.holder(&m, &slot);
    let inside = HandleSlot::default();
    two.stayer(&m, &r, "a1", &inside);
    two.waiter(false, &m, &r, "a2", Duration::ZERO);
    let mut a3 = AsyncSteps::new();
    a3.sync(&m, |_, ()| Ok(()));
    let p3: Promise<()> = a3.promise(&mut two.a);
    two.settle();
    assert_eq!(
        two.a.block_on(p3).unwrap_err().code(),
        codes::DEFENSE_REJECTED
    );
    slot.take().success(()).unwrap();
    two.settle();
    assert_eq!(m.counts(), (1, 1), "a1 inside, a2 waits");
    two.waiter(true, &m, &r, "b4", Duration::ZERO);
    assert_eq!(m.counts(), (1, 2), "b4 queued");
    inside.take().success(()).unwrap();
    two.settle();
    assert_eq!(r.get(), ["a1", "a2", "b4"]);
    assert_eq!(m.counts(), (0, 0));
}
