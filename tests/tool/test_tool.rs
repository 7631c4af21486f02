//! `TestTool` (spec 2.6): one event per `run_one`, virtual time that fires
//! timers in deadline order, exact pending counts, cancelled immediates
//! and due timers, 100k timers with most cancelled, and a long `repeat`
//! that yields to other work after a burst.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, TaskHandle, TestTool};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

#[test]
fn test_tool_run_one_runs_exactly_one_event() {
    let mut tool = TestTool::new();
    let order = Rc::new(RefCell::new(Vec::new()));
    for i in 0..3 {
        let o = order.clone();
        tool.immediate(move |_| o.borrow_mut().push(i));
    }
    assert_eq!(tool.pending().immediates, 3);
    assert!(tool.run_one());
    assert_eq!(*order.borrow(), [0]);
    assert_eq!(tool.pending().immediates, 2);
    assert!(tool.run_one());
    assert_eq!(*order.borrow(), [0, 1]);
    assert!(tool.run_one());
    assert_eq!(*order.borrow(), [0, 1, 2]);
    assert!(!tool.run_one());
    assert_eq!(tool.pending().immediates, 0);

    // A timer is one event too, and moves the clock to it.
    let o = order.clone();
    tool.deferred(ms(7), move |_| o.borrow_mut().push(7));
    assert!(tool.run_one());
    assert_eq!(tool.elapsed(), ms(7));
    assert_eq!(*order.borrow(), [0, 1, 2, 7]);
    assert!(!tool.run_one());
}

#[test]
fn test_tool_advance_fires_timers_in_deadline_order() {
    let mut tool = TestTool::new();
    let t0 = tool.now();
    let order = Rc::new(RefCell::new(Vec::new()));
    for (name, d) in [("t30", 30u64), ("t10", 10), ("t20", 20), ("t20b", 20)] {
        let o = order.clone();
        tool.deferred(ms(d), move |sched| {
            o.borrow_mut()
                .push(format!("{name}@{}", (sched.now() - t0).as_millis()))
        });
    }
    assert_eq!(tool.pending().timers, 4);
    assert_eq!(tool.advance(ms(15)), 1);
    assert_eq!(tool.elapsed(), ms(15));
    assert_eq!(*order.borrow(), ["t10@10"]);
    assert_eq!(tool.pending().timers, 3);
    assert_eq!(tool.advance(ms(15)), 3);
    assert_eq!(tool.elapsed(), ms(30));
    assert_eq!(*order.borrow(), ["t10@10", "t20@20", "t20b@20", "t30@30"]);
    assert_eq!(tool.pending().timers, 0);
    assert_eq!(tool.advance(ms(5)), 0);
    assert_eq!(tool.elapsed(), ms(35));
}

#[test]
fn test_tool_pending_counts_are_exact() {
    let mut tool = TestTool::new();
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates, st.inbox), (0, 0, 0, 0));
    tool.immediate(|_| {});
    tool.immediate(|_| {});
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(Duration::from_secs(1));
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.deferred(ms(500), |_| {});
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates, st.inbox), (1, 1, 3, 0));

    assert!(tool.run_one());
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates), (1, 1, 2));

    assert_eq!(tool.run_all_ready(), 2);
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates), (1, 2, 0));
    assert_eq!(st.steps, 1);

    tool.advance(ms(500));
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates), (1, 1, 0));
    assert!(p.try_take().is_none());

    tool.advance(ms(500));
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates), (0, 0, 0));
    assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
}

#[test]
fn test_tool_pending_excludes_cancelled_immediate() {
    let mut tool = TestTool::new();
    let ran = Rc::new(Cell::new(0));
    let mut hs = Vec::new();
    for _ in 0..3 {
        let r = ran.clone();
        hs.push(tool.immediate(move |_| r.set(r.get() + 1)));
    }
    tool.cancel(hs[1]);
    assert_eq!(tool.pending().immediates, 2);
    assert_eq!(tool.run_all(), 2);
    assert_eq!(ran.get(), 2);
}

#[test]
fn test_tool_cancel_of_due_timer_keeps_timer_count_exact() {
    let mut tool = TestTool::new();
    let order = Rc::new(RefCell::new(Vec::new()));
    let victim: Rc<Cell<Option<TaskHandle>>> = Rc::new(Cell::new(None));
    let (o, v) = (order.clone(), victim.clone());
    tool.deferred(ms(5), move |sched| {
        o.borrow_mut().push("first");
        sched.cancel(v.get().unwrap());
    });
    let o = order.clone();
    let h2 = tool.deferred(ms(5), move |_| o.borrow_mut().push("victim"));
    victim.set(Some(h2));
    let o = order.clone();
    tool.deferred(ms(10), move |_| o.borrow_mut().push("last"));
    assert_eq!(tool.pending().timers, 3);
    // Both 5 ms timers fall due together; the first cancels the second.
    assert!(tool.run_one());
    assert_eq!(*order.borrow(), ["first"]);
    assert!(!tool.is_valid(h2));
    assert_eq!(tool.pending().timers, 1);
    tool.advance(ms(5));
    assert_eq!(*order.borrow(), ["first", "last"]);
    assert_eq!(tool.pending().timers, 0);
    tool.deferred(ms(1), |_| {});
    assert_eq!(tool.pending().timers, 1);
}

#[test]
fn test_tool_100k_timers_90k_cancelled() {
    let mut tool = TestTool::new();
    let fired = Rc::new(RefCell::new(Vec::with_capacity(10_000)));
    let handles: Vec<TaskHandle> = (0..100_000u64)
        .map(|i| {
            let f = fired.clone();
            tool.deferred(ms(i + 1), move |_| f.borrow_mut().push(i))
        })
        .collect();
    assert_eq!(tool.stats().timers, 100_000);
    for (i, h) in handles.iter().enumerate() {
        if i % 10 != 0 {
            tool.cancel(*h);
        }
    }
    assert_eq!(tool.stats().timers, 10_000);
    assert_eq!(tool.pending().timers, 10_000);
    assert_eq!(tool.run_all(), 10_000);
    assert_eq!(fired.borrow().len(), 10_000);
    assert_eq!(
        *fired.borrow(),
        (0..100_000u64).step_by(10).collect::<Vec<_>>()
    );
    assert_eq!(tool.elapsed(), ms(99_991));
    assert_eq!(tool.stats().timers, 0);
}

#[test]
fn long_repeat_yields_to_other_work() {
    let l = log();
    let mut tool = TestTool::new();
    let a = l.clone();
    tool.immediate(move |_| push(&a, "immediate"));

    let mut fa = AsyncSteps::new();
    fa.repeat(100_000, |_, _| Ok(()));
    let a = l.clone();
    fa.add(move |_, ()| {
        push(&a, "A done");
        Ok(())
    });
    let mut pa = fa.promise::<()>(&mut tool);

    let mut fb = AsyncSteps::new();
    let b = l.clone();
    fb.add(move |_, ()| {
        push(&b, "B done");
        Ok(())
    });
    let mut pb = fb.promise::<()>(&mut tool);

    assert!(tool.run_one());
    assert_eq!(entries(&l), ["immediate"]);
    // A's first activation: a burst, not the whole loop.
    assert!(tool.run_one());
    assert!(pa.try_take().is_none());
    assert_eq!(entries(&l), ["immediate"]);
    let steps_first = tool.stats().steps;
    assert!(steps_first > 0 && steps_first < 100_000, "{steps_first}");
    // B, started after A, gets its turn before A finishes.
    assert!(tool.run_one());
    pb.try_take().unwrap().unwrap();
    assert_eq!(entries(&l), ["immediate", "B done"]);

    let mut activations = 1usize;
    let ra = loop {
        if let Some(r) = pa.try_take() {
            break r;
        }
        assert!(tool.run_one());
        activations += 1;
    };
    ra.unwrap();
    assert!(activations > 1);
    assert!(activations >= 100_000 / 1024, "{activations}");
    assert_eq!(entries(&l), ["immediate", "B done", "A done"]);
    assert!(!tool.run_one());
}
