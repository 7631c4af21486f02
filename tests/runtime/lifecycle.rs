//! A runtime flow's life across threads: external completions from many
//! threads, success, cancel and timeout racing (each flow ends once),
//! shutdown and drop of the runtime (flows cancelled on their loops or
//! answered, everything they held dropped), a panic on one loop, waiting
//! on a loop thread refused, cancel before and after start, and
//! statistics per loop (sync handovers on the loop and across loops too).

use crate::common::*;
use crate::{blocker, rt, sync_loops, waiter};
use futoin_asyncsteps::{error::codes, AsyncSteps, ExternalHandle};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

#[test]
fn external_success_storm_from_several_threads() {
    let rt = rt(2);
    const N: usize = 4_000;
    const THREADS: usize = 4;
    let (tx, rx) = mpsc::channel();
    let ps: Vec<_> = (0..N)
        .map(|_| rt.spawn::<(u32,)>(waiter(tx.clone())))
        .collect();
    let handles: Vec<ExternalHandle> = (0..N).map(|_| rx.recv().unwrap()).collect();
    let chunks: Vec<Vec<(usize, ExternalHandle)>> = {
        let mut c: Vec<Vec<_>> = (0..THREADS).map(|_| Vec::new()).collect();
        for (i, h) in handles.into_iter().enumerate() {
            c[i % THREADS].push((i, h));
        }
        c
    };
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                for (i, h) in chunk {
                    h.success((i as u32,)).unwrap();
                    // A second completion is refused, whatever the timing.
                    assert_eq!(
                        h.success((0u32,)).unwrap_err().code(),
                        codes::INTERNAL_ERROR
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // Each flow got the value of its own handle; they arrived in order of
    // the handles, which is the order the flows parked in, not spawn order.
    let mut got: Vec<u32> = ps.into_iter().map(|p| p.wait().unwrap().0).collect();
    got.sort_unstable();
    assert_eq!(got, (1..=N as u32).collect::<Vec<_>>());
    // Every flow has left its loop (each loop's own count, read on it).
    for l in 0..rt.loops() {
        let (tx, rx) = mpsc::channel();
        rt.loop_handle(l)
            .unwrap()
            .call(move |sched| tx.send(sched.stats().flows).unwrap());
        assert_eq!(rx.recv().unwrap(), 0, "loop {l}");
    }
}

/// Success from one thread, cancel from another and a timeout on the loop
/// all race for the same waiting step; every flow ends exactly once, with
/// one of the three outcomes, and its handlers agree with the result.
#[test]
fn success_cancel_and_timeout_race_and_each_flow_ends_once() {
    let rt = rt(2);
    const ROUNDS: usize = 300;
    let ends = Arc::new(AtomicUsize::new(0));
    let mut outcomes = [0usize; 3];
    for round in 0..ROUNDS {
        let (tx, rx) = mpsc::channel();
        let mut root = AsyncSteps::new();
        let e1 = ends.clone();
        root.add_catch(
            move |s, ()| {
                s.set_timeout(Duration::from_micros((round % 7) as u64 * 50));
                tx.send(s.wait_external()).unwrap();
                Ok(())
            },
            move |s, e| {
                assert_eq!(e.code(), codes::TIMEOUT);
                e1.fetch_add(1, Ordering::SeqCst);
                s.success((0u32,))
            },
        );
        let e2 = ends.clone();
        root.add(move |s, (v,): (u32,)| {
            if v == 1 {
                e2.fetch_add(1, Ordering::SeqCst);
            }
            s.success((v,))
        });
        let p = rt.spawn::<(u32,)>(root);
        let h = rx.recv().unwrap();
        let go = Arc::new(Barrier::new(2));
        let g = go.clone();
        let completer = thread::spawn(move || {
            g.wait();
            h.success((1u32,)).is_ok()
        });
        go.wait();
        if round % 2 == 0 {
            p.cancel();
        }
        let accepted = completer.join().unwrap();
        let before = ends.load(Ordering::SeqCst);
        match p.wait() {
            Ok((1,)) => {
                assert!(accepted);
                outcomes[0] += 1;
            }
            Ok((0,)) => outcomes[1] += 1,
            Ok((v,)) => panic!("unexpected value {v}"),
            Err(e) => {
                assert_eq!(e.code(), codes::CANCELED, "{e}");
                outcomes[2] += 1;
            }
        }
        // A cancelled flow ran no handler; the others ran exactly one.
        let after = ends.load(Ordering::SeqCst);
        assert!(after - before <= 1);
    }
    assert_eq!(outcomes.iter().sum::<usize>(), ROUNDS);
    assert_eq!(ends.load(Ordering::SeqCst), outcomes[0] + outcomes[1]);
}

#[test]
fn shutdown_cancels_running_flows_on_their_loops_and_answers_the_rest() {
    let rt = rt(2);
    let loop_threads: Arc<Mutex<HashSet<ThreadId>>> = Default::default();
    let cancels: Arc<Mutex<Vec<ThreadId>>> = Default::default();
    let (tx, rx) = mpsc::channel();
    let mut ps = Vec::new();
    for _ in 0..10 {
        let mut root = AsyncSteps::new();
        let (lt, cs, tx) = (loop_threads.clone(), cancels.clone(), tx.clone());
        root.add(move |s, ()| {
            lt.lock().unwrap().insert(thread::current().id());
            s.set_cancel(move || cs.lock().unwrap().push(thread::current().id()));
            tx.send(s.wait_external()).unwrap();
            Ok(())
        });
        ps.push(rt.spawn::<()>(root));
    }
    let handles: Vec<ExternalHandle> = (0..10).map(|_| rx.recv().unwrap()).collect();
    let h = rt.handle();
    rt.shutdown();
    for p in ps {
        let e = p.wait().unwrap_err();
        assert_eq!(e.code(), codes::CANCELED);
    }
    let cancels = cancels.lock().unwrap();
    assert_eq!(cancels.len(), 10);
    let lt = loop_threads.lock().unwrap();
    assert!(
        cancels.iter().all(|t| lt.contains(t)),
        "cancel ran on the flow's loop"
    );
    for h in handles {
        assert!(!h.is_valid());
        assert_eq!(
            h.success((1u32,)).unwrap_err().code(),
            codes::INTERNAL_ERROR
        );
    }
    // Spawning after shutdown is answered at once.
    assert!(h.is_closed());
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Ok(()));
    let e = h.spawn::<()>(root).wait().unwrap_err();
    assert_eq!(e.code(), codes::CANCELED);
    assert!(e.info().unwrap().contains("shut down"), "{e}");
}

#[test]
fn dropping_the_runtime_answers_flows_that_never_started() {
    let rt = rt(1);
    let h = rt.handle();
    // Occupy the only loop until shutdown has begun, so nothing else starts.
    let (running_tx, running) = mpsc::channel();
    let mut blocker = AsyncSteps::new();
    blocker.add(move |_, ()| {
        running_tx.send(()).unwrap();
        while !h.is_closed() {
            thread::yield_now();
        }
        Ok(())
    });
    let b = rt.spawn::<()>(blocker);
    running.recv().unwrap();
    let queued: Vec<_> = (0..50)
        .map(|_| {
            let mut root = AsyncSteps::new();
            root.add(|_, ()| Ok(()));
            rt.spawn::<()>(root)
        })
        .collect();
    drop(rt);
    b.wait().unwrap();
    for p in queued {
        let e = p.wait().unwrap_err();
        assert_eq!(e.code(), codes::CANCELED);
        assert_eq!(
            e.info(),
            Some("the runtime shut down before the flow started")
        );
    }
}

#[test]
fn a_panic_on_one_loop_fails_only_that_flow() {
    let rt = rt(2);
    let mut bad = AsyncSteps::new();
    bad.add(|_, ()| -> futoin_asyncsteps::StepResult { panic!("boom") });
    let e = rt.spawn::<()>(bad.clone()).wait().unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert!(e.info().unwrap().contains("boom"), "{e}");
    // Each loop runs a panicking flow, then still runs flows to the end.
    for l in 0..rt.loops() {
        let h = rt.loop_handle(l).unwrap();
        let e = h.promise::<()>(bad.clone()).wait().unwrap_err();
        assert_eq!(e.code(), codes::INTERNAL_ERROR);
        for i in 0..50u32 {
            let mut ok = AsyncSteps::new();
            let rh = rt.handle();
            ok.add(move |s, ()| s.success((i, rh.current_loop().unwrap() as u32)));
            let (v, on): (u32, u32) = h.promise(ok).wait().unwrap();
            assert_eq!((v, on), (i, l as u32));
        }
    }
}

#[test]
fn waiting_on_a_loop_thread_for_a_flow_is_refused_not_a_deadlock() {
    let rt = rt(1);
    let h = rt.handle();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let mut child = AsyncSteps::new();
        child.add(|_, ()| Ok(()));
        let p = h.spawn::<()>(child);
        let e = p.wait().unwrap_err();
        s.success((e.code().to_owned(), e.info().unwrap_or("").to_owned()))
    });
    let (code, info): (String, String) = rt.spawn(root).wait().unwrap();
    assert_eq!(code, codes::INTERNAL_ERROR);
    assert!(info.contains("deadlock"), "{info}");
}

#[test]
fn cancel_from_another_thread_before_and_after_start() {
    let rt = rt(1);
    // Before start: the only loop is blocked.
    let (flow, running, tx) = blocker();
    let b = rt.spawn::<()>(flow);
    running.recv().unwrap();
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.add(move |_, ()| {
        push(&l2, "ran");
        Ok(())
    });
    let p = rt.spawn::<()>(root);
    thread::scope(|s| {
        s.spawn(|| p.cancel());
    });
    tx.send(()).unwrap();
    b.wait().unwrap();
    assert_eq!(p.wait().unwrap_err().code(), codes::CANCELED);
    assert!(
        entries(&l).is_empty(),
        "a flow cancelled before start never runs"
    );

    // After start: waiting in a step with a cancel callback.
    let (tx, rx) = mpsc::channel();
    let mut root = AsyncSteps::new();
    let l3 = l.clone();
    root.add(move |s, ()| {
        let l4 = l3.clone();
        s.set_cancel(move || push(&l4, "cancel"));
        tx.send(s.wait_external()).unwrap();
        Ok(())
    });
    let p = rt.spawn::<()>(root);
    let h = rx.recv().unwrap();
    thread::scope(|s| {
        s.spawn(|| p.cancel());
    });
    assert_eq!(p.wait().unwrap_err().code(), codes::CANCELED);
    assert_eq!(entries(&l), ["cancel"]);
    assert!(!h.is_valid());
}

#[test]
fn stats_count_flows_steps_and_timers_per_loop() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.tool().deferred(Duration::from_secs(3600), |_| {});
        tx.send(s.wait_external()).unwrap();
        Ok(())
    });
    let p = rt.spawn::<()>(root);
    let h = rx.recv().unwrap();
    sync_loops(&rt);
    let st = &rt.stats()[0];
    assert_eq!((st.index, st.flows, st.timers, st.started), (0, 1, 1, 1));
    assert!(st.steps >= 1);
    h.success(()).unwrap();
    p.wait().unwrap();
}

/// A flow on `loop_` holding `m` until the handle it sends out is
/// completed.
fn holder(
    rt: &futoin_asyncsteps::runtime::Runtime,
    loop_: usize,
    m: &futoin_asyncsteps::sync::Mutex,
) -> (ExternalHandle, futoin_asyncsteps::Promise<()>) {
    let (tx, rx) = mpsc::channel();
    let mut root = AsyncSteps::new();
    root.sync(m, move |s, ()| {
        tx.send(s.wait_external()).unwrap();
        Ok(())
    });
    let p = rt.loop_handle(loop_).unwrap().promise::<()>(root);
    (rx.recv().unwrap(), p)
}

/// A flow on `loop_` that syncs on `m`; returns once it has queued: a
/// flow started on the same loop after it runs once its first turn (the
/// sync step and the step that queues) is over.
fn queued(
    rt: &futoin_asyncsteps::runtime::Runtime,
    loop_: usize,
    m: &futoin_asyncsteps::sync::Mutex,
) -> futoin_asyncsteps::Promise<()> {
    let mut root = AsyncSteps::new();
    root.sync(m, |_, ()| Ok(()));
    let h = rt.loop_handle(loop_).unwrap();
    let p = h.promise::<()>(root);
    let mut after = AsyncSteps::new();
    after.add(|_, ()| Ok(()));
    h.promise::<()>(after).wait().unwrap();
    p
}

#[test]
fn stats_count_sync_handovers_on_the_loop_and_across_loops() {
    let rt = rt(2);
    let m = futoin_asyncsteps::sync::Mutex::new(1, None);
    // Held on loop 1, a waiter on loop 0: the release crosses loops.
    let (h, held) = holder(&rt, 1, &m);
    let waiting = queued(&rt, 0, &m);
    assert_eq!(m.counts(), (1, 1));
    h.success(()).unwrap();
    held.wait().unwrap();
    waiting.wait().unwrap();
    // Held on loop 0, a waiter on loop 0: the release stays on the loop.
    let (h, held) = holder(&rt, 0, &m);
    let waiting = queued(&rt, 0, &m);
    h.success(()).unwrap();
    held.wait().unwrap();
    waiting.wait().unwrap();
    sync_loops(&rt);
    let st = rt.stats();
    let counts = |i: usize| (st[i].handovers_local, st[i].handovers_crossed);
    assert_eq!((counts(0), counts(1)), ((1, 0), (0, 1)), "{st:?}");
}

#[test]
fn shutdown_drops_everything_flows_held() {
    let l = log();
    let rt = rt(2);
    let (tx, rx) = mpsc::channel();
    for i in 0..4 {
        let mut root = AsyncSteps::new();
        let (l2, tx) = (l.clone(), tx.clone());
        root.add(move |s, ()| {
            // Held by the step (stack), by the flow (state) and by a closure.
            s.stack(Guard(l2.clone(), "stack"));
            s.state().set("guard", Arc::new(Guard(l2.clone(), "state")));
            let g = Guard(l2.clone(), "closure");
            s.set_cancel(move || drop(g));
            tx.send(s.wait_external()).unwrap();
            Ok(())
        });
        if i % 2 == 0 {
            rt.execute(root);
        } else {
            drop(rt.spawn::<()>(root));
        }
    }
    let handles: Vec<ExternalHandle> = (0..4).map(|_| rx.recv().unwrap()).collect();
    drop(rt);
    let mut got = entries(&l);
    got.sort();
    let mut want: Vec<String> = ["closure", "stack", "state"]
        .iter()
        .flat_map(|w| std::iter::repeat_n(format!("drop {w}"), 4))
        .collect();
    want.sort();
    assert_eq!(got, want);
    drop(handles);
}
