//! External completion and cancel (spec 1.3, 1.13, 2.2.3): completions
//! from other threads, many at once, errors, `is_valid`, a stale handle
//! that must not reach a later step, a second completion refused, cancel
//! through a `FlowHandle` (innermost first, from another thread, after
//! its loop is gone) and through a `Promise` (before, while and after the
//! flow runs).

use crate::common::*;
use futoin_asyncsteps::{
    error::codes, AsyncSteps, AsyncTool, ExternalHandle, FlowHandle, TestTool,
};
use std::sync::mpsc;
use std::thread;

/// Adds three nested steps, each with a cancel callback; the innermost waits.
fn nested_waiting(root: &mut AsyncSteps, l: &Log) {
    let a = l.clone();
    root.add(move |s, ()| {
        let a0 = a.clone();
        s.set_cancel(move || push(&a0, "L0 cancel"));
        let a1 = a.clone();
        s.add(move |s, ()| {
            let a1c = a1.clone();
            s.set_cancel(move || push(&a1c, "L1 cancel"));
            let a2 = a1.clone();
            s.add(move |s, ()| {
                s.set_cancel(move || push(&a2, "L2 cancel"));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let b = l.clone();
    root.add(move |_, ()| {
        push(&b, "never");
        Ok(())
    });
}

#[test]
fn external_success_from_another_thread_feeds_next_step() {
    let mut tool = AsyncTool::new().unwrap();
    let (tx, rx) = mpsc::channel::<ExternalHandle>();
    let worker = thread::spawn(move || {
        let h = rx.recv().unwrap();
        assert!(h.is_valid());
        h.success((41i32,)).unwrap();
        assert!(!h.is_valid());
    });
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        tx.send(s.wait_external()).unwrap();
        Ok(())
    });
    root.add(|s, (v,): (i32,)| s.success((v + 1,)));
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 42);
    worker.join().unwrap();
}

#[test]
fn two_hundred_flows_completed_from_four_threads() {
    const FLOWS: usize = 200;
    const THREADS: usize = 4;
    let mut tool = AsyncTool::new().unwrap();
    let mut txs = Vec::new();
    let mut workers = Vec::new();
    for t in 0..THREADS {
        let (tx, rx) = mpsc::channel::<(usize, ExternalHandle)>();
        txs.push(tx);
        workers.push(thread::spawn(move || {
            for _ in 0..FLOWS / THREADS {
                let (i, h) = rx.recv().unwrap();
                assert_eq!(i % THREADS, t);
                h.success(((i * 7) as u64, format!("t{t}"))).unwrap();
            }
        }));
    }
    let mut promises = Vec::new();
    for i in 0..FLOWS {
        let tx = txs[i % THREADS].clone();
        let mut root = AsyncSteps::new();
        root.add(move |s, ()| {
            tx.send((i, s.wait_external())).unwrap();
            Ok(())
        });
        root.add(move |s, (v, t): (u64, String)| s.success((v + i as u64, t)));
        promises.push(root.promise::<(u64, String)>(&mut tool));
    }
    drop(txs);
    for (i, p) in promises.into_iter().enumerate() {
        let (v, t) = tool.block_on(p).unwrap();
        assert_eq!(v, (i * 8) as u64);
        assert_eq!(t, format!("t{}", i % THREADS));
    }
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(tool.stats().flows, 0);
}

#[test]
fn external_error_from_another_thread_reaches_handler() {
    let l = log();
    let mut tool = AsyncTool::new().unwrap();
    let (tx, rx) = mpsc::channel::<ExternalHandle>();
    let worker = thread::spawn(move || {
        let h = rx.recv().unwrap();
        h.error("ExtError", "from worker").unwrap();
        assert!(!h.is_valid());
        // A second completion is refused.
        assert_eq!(h.success(()).unwrap_err().code(), codes::INTERNAL_ERROR);
    });
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add_catch(
        move |s, ()| {
            tx.send(s.wait_external()).unwrap();
            Ok(())
        },
        move |s, e| {
            let info = s.state().error_info().map(str::to_owned);
            push(
                &a,
                format!("handler {} {:?} {:?}", e.code(), e.info(), info),
            );
            s.success((1u8,))
        },
    );
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 1);
    worker.join().unwrap();
    assert_eq!(
        entries(&l),
        ["handler ExtError Some(\"from worker\") Some(\"from worker\")"]
    );
}

#[test]
fn external_handle_is_valid_while_waiting_then_false() {
    let ext: Slot<ExternalHandle> = slot();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let e = ext.clone();
    root.add(move |s, ()| {
        *e.lock().unwrap() = Some(s.wait_external());
        Ok(())
    });
    root.add(|s, (v,): (u8,)| s.success((v,)));
    let mut p = root.promise::<(u8,)>(&mut tool);
    tool.run_all();
    let h = ext.lock().unwrap().take().unwrap();
    let h2 = h.clone();
    assert!(h.is_valid());
    assert!(h2.is_valid());
    assert!(p.try_take().is_none());
    h.success((3u8,)).unwrap();
    assert!(!h.is_valid());
    assert!(!h2.is_valid());
    assert_eq!(
        h2.success((4u8,)).unwrap_err().code(),
        codes::INTERNAL_ERROR
    );
    tool.run_all();
    assert_eq!(p.try_take().unwrap().unwrap().0, 3);
    assert!(!h.is_valid());

    // Invalid after a timeout ended the step.
    let mut root = AsyncSteps::new();
    let e = ext.clone();
    root.add(move |s, ()| {
        s.set_timeout(ms(5));
        *e.lock().unwrap() = Some(s.wait_external());
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    let h = ext.lock().unwrap().take().unwrap();
    assert!(h.is_valid());
    tool.advance(ms(5));
    assert!(!h.is_valid());
    assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(h.success(()).unwrap_err().code(), codes::INTERNAL_ERROR);
    tool.run_all();
    assert_eq!(tool.pending().flows, 0);
}

/// Wait tokens are reused across steps, but never while a handle to the
/// old step is alive: a stale handle stays refused and cannot complete the
/// step that now waits; a dropped one lets the next wait reuse its token.
#[test]
fn stale_external_handle_never_reaches_a_later_waiting_step() {
    let slot = HandleSlot::default();
    let mut tool = TestTool::new();
    let waiter = |slot: &HandleSlot| {
        let mut root = AsyncSteps::new();
        let sl = slot.clone();
        root.add(move |s, ()| {
            sl.put(s.wait_external());
            Ok(())
        });
        root.add(|s, (v,): (u8,)| s.success((v,)));
        root
    };

    // First flow completes; its handle is kept.
    let mut p1 = waiter(&slot).promise::<(u8,)>(&mut tool);
    tool.run_all();
    let stale = slot.take();
    stale.success((1u8,)).unwrap();
    tool.run_all();
    assert_eq!(p1.try_take().unwrap().unwrap().0, 1);

    // Second flow waits: the kept handle is refused and changes nothing.
    let mut p2 = waiter(&slot).promise::<(u8,)>(&mut tool);
    tool.run_all();
    let fresh = slot.take();
    assert!(!stale.is_valid());
    assert!(fresh.is_valid());
    assert_eq!(
        stale.success((9u8,)).unwrap_err().code(),
        codes::INTERNAL_ERROR
    );
    tool.run_all();
    assert!(p2.try_take().is_none());
    fresh.success((2u8,)).unwrap();
    drop(fresh);
    tool.run_all();
    assert_eq!(p2.try_take().unwrap().unwrap().0, 2);

    // Third flow (its token may be the second one's, now unreferenced).
    let mut p3 = waiter(&slot).promise::<(u8,)>(&mut tool);
    tool.run_all();
    let h3 = slot.take();
    assert!(h3.is_valid());
    assert_eq!(
        stale.success((9u8,)).unwrap_err().code(),
        codes::INTERNAL_ERROR
    );
    h3.success((3u8,)).unwrap();
    tool.run_all();
    assert_eq!(p3.try_take().unwrap().unwrap().0, 3);
    assert_eq!(tool.pending().flows, 0);
}

#[test]
fn cancel_through_flow_handle_runs_cancel_callbacks_innermost_first() {
    let l = log();
    let mut tool = TestTool::new();
    tool.set_unhandled_error_hook(|_| {});
    let mut root = AsyncSteps::new();
    nested_waiting(&mut root, &l);
    let h = root.execute(&mut tool);
    tool.run_all();
    assert!(entries(&l).is_empty());
    assert_eq!(tool.pending().flows, 1);
    h.cancel();
    tool.run_all();
    assert_eq!(entries(&l), ["L2 cancel", "L1 cancel", "L0 cancel"]);
    assert_eq!(tool.pending().flows, 0);
    // Cancelling a finished flow is a no-op.
    h.cancel();
    tool.run_all();
    assert_eq!(entries(&l), ["L2 cancel", "L1 cancel", "L0 cancel"]);
}

#[test]
fn cancel_through_flow_handle_from_another_thread() {
    let l = log();
    let mut tool = AsyncTool::new().unwrap();
    tool.set_unhandled_error_hook(|_| {});
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.set_cancel(move || push(&a1, "outer cancel"));
        let (a2, tx) = (a.clone(), ready_tx.clone());
        s.add(move |s, ()| {
            s.set_cancel(move || push(&a2, "inner cancel"));
            tx.send(()).unwrap();
            Ok(())
        });
        Ok(())
    });
    let h: FlowHandle = root.execute(&mut tool);
    let canceller = thread::spawn(move || {
        ready_rx.recv().unwrap();
        assert!(!h.is_same_thread());
        h.cancel();
    });
    while tool.stats().flows > 0 {
        tool.iterate(None).unwrap();
    }
    canceller.join().unwrap();
    assert_eq!(entries(&l), ["inner cancel", "outer cancel"]);
}

/// Flow keys are per loop, so two loops' first flows may share one: a
/// `FlowHandle` cancels on its own loop only. Once that loop is gone,
/// `cancel()` does nothing and `is_same_thread()` still answers.
#[test]
fn flow_handle_cancels_on_its_own_loop_and_outlives_it() {
    let (mut a, mut b) = (TestTool::new(), TestTool::new());
    let waiting = || {
        let mut root = AsyncSteps::new();
        root.add(|s, ()| {
            s.wait_external();
            Ok(())
        });
        root
    };
    let ha = waiting().execute(&mut a);
    let pb = waiting().promise::<()>(&mut b);
    a.run_all();
    b.run_all();
    assert_eq!((a.stats().flows, b.stats().flows), (1, 1));
    ha.cancel();
    a.run_all();
    b.run_all();
    assert_eq!((a.stats().flows, b.stats().flows), (0, 1));
    assert!(ha.is_same_thread());
    drop(a);
    ha.cancel();
    b.run_all();
    assert_eq!(b.stats().flows, 1);
    let hb = waiting().execute(&mut b);
    drop(b);
    hb.cancel();
    assert!(hb.is_same_thread());
    drop(pb);
}

#[test]
fn promise_cancel_before_the_flow_starts() {
    // Same thread, before the loop ran the flow.
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    nested_waiting(&mut root, &l);
    let p = root.promise::<()>(&mut tool);
    p.cancel();
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::CANCELED);
    assert!(entries(&l).is_empty());
    assert_eq!(tool.stats().steps, 0);
    assert_eq!(tool.pending().flows, 0);

    // From another thread, before the loop even received the flow.
    let l = log();
    let mut tool = AsyncTool::new().unwrap();
    let h = tool.handle();
    let l2 = l.clone();
    let p = thread::spawn(move || {
        let mut root = AsyncSteps::new();
        nested_waiting(&mut root, &l2);
        let p = h.promise::<()>(root);
        p.cancel();
        p
    })
    .join()
    .unwrap();
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::CANCELED);
    assert!(entries(&l).is_empty());
    assert_eq!(tool.stats().steps, 0);
    assert_eq!(tool.stats().flows, 0);
}

#[test]
fn promise_cancel_while_waiting() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    nested_waiting(&mut root, &l);
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all();
    assert!(p.try_take().is_none());
    assert!(entries(&l).is_empty());
    p.cancel();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::CANCELED);
    assert_eq!(entries(&l), ["L2 cancel", "L1 cancel", "L0 cancel"]);
    assert_eq!(tool.pending().flows, 0);
    assert_eq!(tool.pending().timers, 0);
}

#[test]
fn promise_cancel_after_completion_keeps_result() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((8u8,)));
    let p = root.promise::<(u8,)>(&mut tool);
    tool.run_all();
    assert!(p.is_done());
    p.cancel();
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap().0, 8);
}

#[test]
fn a_second_external_completion_says_completed_or_ended() {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let log = seen.clone();
    root.add(move |s, ()| {
        let h = s.wait_external();
        // Completed, not ended yet: the completion is on its way.
        let mut log = log.lock().unwrap();
        log.push(format!("{:?}", h.success((1u8,))));
        log.push(format!("{:?}", h.success((2u8,))));
        log.push(format!("{:?}", h.error("Boom", "late")));
        Ok(())
    });
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (1,));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "Ok(())",
            "Err(Error { code: \"InternalError\", info: Some(\"external success(): \
             the step has already completed or ended\") })",
            "Err(Error { code: \"InternalError\", info: Some(\"external error(): \
             the step has already completed or ended\") })",
        ]
    );
}
