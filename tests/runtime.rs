//! The multi-loop runtime: placement, pinning of flows to loops, cross-thread
//! completion and cancel, races, shutdown, panics, statistics.

use futoin_asyncsteps::runtime::{PinStatus, Runtime};
use futoin_asyncsteps::{error::codes, AsyncSteps, Error, ExternalHandle};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

mod common;
use common::*;

fn rt(loops: usize) -> Runtime {
    Runtime::builder()
        .loops(loops)
        .pin_threads(false)
        .on_unhandled_error(|_| {})
        .build()
        .expect("runtime")
}

/// Returns once loop `i` has finished the turn it was in.
fn sync_loop(rt: &Runtime, i: usize) {
    let (tx, rx) = mpsc::channel();
    rt.loop_handle(i)
        .unwrap()
        .call(move |_| tx.send(()).unwrap());
    rx.recv().unwrap();
}

/// Returns once every loop has finished the turn it was in: loops publish
/// their stats after each turn, so stats read after this include all that
/// the caller has observed so far.
fn sync_loops(rt: &Runtime) {
    for i in 0..rt.loops() {
        sync_loop(rt, i);
    }
}

/// `sync_loops` for every loop but `skip` (a loop that is blocked).
fn sync_loops_except(rt: &Runtime, skip: usize) {
    for i in (0..rt.loops()).filter(|&i| i != skip) {
        sync_loop(rt, i);
    }
}

/// A flow that, once started, tells `started` and then blocks its loop
/// until `go` is sent. Returns the flow, `started` and `go`.
fn blocker() -> (AsyncSteps, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (started_tx, started) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let mut root = AsyncSteps::new();
    root.add(move |_, ()| {
        started_tx.send(()).unwrap();
        go_rx.lock().unwrap().recv().unwrap();
        Ok(())
    });
    (root, started, go)
}

/// Blocks every loop of `rt` inside a step (a [`blocker`] each) and
/// returns once all are blocked; sending on gate `i` lets loop `i` go.
fn block_every_loop(rt: &Runtime) -> Vec<mpsc::Sender<()>> {
    let (mut started, mut gates) = (Vec::new(), Vec::new());
    for i in 0..rt.loops() {
        let (flow, s, go) = blocker();
        rt.loop_handle(i).unwrap().execute(flow);
        started.push(s);
        gates.push(go);
    }
    for s in started {
        s.recv().unwrap();
    }
    gates
}

/// After the loops have settled: each of the two loops was given half of
/// the `n` flows. What loop i was given = what it started of its own +
/// what its peer stole from it.
fn assert_placed_evenly(rt: &Runtime, n: usize) {
    sync_loops(rt);
    let st = rt.stats();
    let placed = |i: usize| st[i].started - st[i].stolen + st[1 - i].stolen;
    assert_eq!(
        (placed(0), placed(1)),
        (n as u64 / 2, n as u64 / 2),
        "{st:?}"
    );
}

/// A flow that parks in `wait_external` and sends its handle out; the next
/// step returns the value it was completed with, plus one.
fn waiter(tx: mpsc::Sender<ExternalHandle>) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        tx.send(s.wait_external()).unwrap();
        Ok(())
    });
    root.add(|s, (v,): (u32,)| s.success((v + 1,)));
    root
}

#[test]
fn builder_rejects_bad_loop_counts_and_defaults_work() {
    for n in [0, 1025] {
        let e = Runtime::builder().loops(n).build().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains(&format!("got {n}")), "{e}");
    }
    let rt = Runtime::new().unwrap();
    let cores = thread::available_parallelism().unwrap().get();
    assert_eq!(rt.loops(), cores);
    // Pinning is on by default: every loop says how it went, never `Off`.
    for st in rt.stats() {
        assert!(
            matches!(st.pin, PinStatus::Pinned(_) | PinStatus::Failed(_)),
            "{:?}",
            st.pin
        );
    }
}

#[test]
fn spawn_from_outside_waits_awaits_and_names_threads() {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .thread_name("rt-test")
        .build()
        .unwrap();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let name = thread::current().name().unwrap().to_owned();
        s.success((name,))
    });
    let (name,): (String,) = rt.spawn(root.clone()).wait().unwrap();
    assert!(name == "rt-test-0" || name == "rt-test-1", "{name}");

    // The same promise type is a Future.
    let fut = rt.spawn::<(String,)>(root);
    let exec = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (name,) = exec.block_on(fut).unwrap();
    assert!(name.starts_with("rt-test-"), "{name}");
}

/// (what ran, on which thread, did `is_same_thread()` say yes).
type Seen = Arc<Mutex<Vec<(&'static str, ThreadId, bool)>>>;

#[test]
fn every_callback_of_a_flow_runs_on_its_one_loop() {
    let rt = rt(2);
    let seen: Seen = Default::default();
    let (tx, rx) = mpsc::channel();
    let mut root = AsyncSteps::new();
    let sn = seen.clone();
    root.add(move |s, ()| {
        sn.lock()
            .unwrap()
            .push(("first", thread::current().id(), s.tool().is_same_thread()));
        let sn2 = sn.clone();
        s.add_catch(
            move |s, ()| {
                let sn3 = sn2.clone();
                s.set_cancel(move || {
                    sn3.lock()
                        .unwrap()
                        .push(("cancel", thread::current().id(), true))
                });
                s.set_timeout(Duration::from_millis(1));
                Ok(())
            },
            {
                let sn = sn.clone();
                move |s, e| {
                    assert_eq!(e.code(), codes::TIMEOUT);
                    sn.lock().unwrap().push((
                        "handler",
                        thread::current().id(),
                        s.tool().is_same_thread(),
                    ));
                    s.success(())
                }
            },
        );
        Ok(())
    });
    let sn = seen.clone();
    root.add(move |s, ()| {
        tx.send(s.wait_external()).unwrap();
        sn.lock()
            .unwrap()
            .push(("wait", thread::current().id(), s.tool().is_same_thread()));
        Ok(())
    });
    let sn = seen.clone();
    root.add(move |s, (v,): (u32,)| {
        sn.lock()
            .unwrap()
            .push(("last", thread::current().id(), s.tool().is_same_thread()));
        s.success((v,))
    });
    let p = rt.spawn::<(u32,)>(root);
    assert!(!p.is_same_thread());
    // Completed from a thread that is no loop at all.
    let h = rx.recv().unwrap();
    thread::spawn(move || h.success((7u32,)))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(p.wait().unwrap().0, 7);
    let seen = seen.lock().unwrap();
    let names: Vec<&str> = seen.iter().map(|e| e.0).collect();
    assert_eq!(names, ["first", "cancel", "handler", "wait", "last"]);
    let threads: HashSet<ThreadId> = seen.iter().map(|e| e.1).collect();
    assert_eq!(threads.len(), 1, "one flow, one loop thread");
    assert!(seen.iter().all(|e| e.2), "is_same_thread() in every step");
}

#[test]
fn flows_spawned_on_a_loop_start_there_unless_a_peer_stole_them() {
    let rt = rt(2);
    let h = rt.handle();
    const N: usize = 20;
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let parent = h.current_loop().expect("on a loop");
        let mut ps = Vec::new();
        for _ in 0..N {
            let mut child = AsyncSteps::new();
            let h2 = h.clone();
            child.add(move |s, ()| s.success((h2.current_loop().unwrap() as u32,)));
            ps.push(h.spawn::<(u32,)>(child));
        }
        s.await_future(async move {
            let mut same = 0u32;
            for p in ps {
                if p.await?.0 as usize == parent {
                    same += 1;
                }
            }
            Ok::<_, Error>((parent as u32, same))
        });
        Ok(())
    });
    let (parent, same): (u32, u32) = rt.spawn(root).wait().unwrap();
    sync_loops(&rt);
    let st = rt.stats();
    let other = 1 - parent as usize;
    // Whatever did not start on the parent's loop was stolen by the peer.
    assert_eq!(N as u64 - same as u64, st[other].stolen);
    assert_eq!(st[0].started + st[1].started, 1 + N as u64);
}

#[test]
fn a_dry_loop_steals_flows_a_blocked_loop_has_not_started() {
    let rt = rt(2);
    let h = rt.handle();
    const N: usize = 64;
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let me = h.current_loop().unwrap() as u32;
        let (tx, rx) = mpsc::channel();
        for _ in 0..N {
            let mut child = AsyncSteps::new();
            let (tx, h2) = (tx.clone(), h.clone());
            child.add(move |_, ()| {
                tx.send(h2.current_loop().unwrap() as u32).unwrap();
                Ok(())
            });
            h.execute(child);
        }
        // A backlog of up to LOCAL_BACKLOG flows does not wake a parked
        // peer (it would start them here after this step); this step
        // blocks, which steps must not do, so nudge the peer: once it runs
        // a turn it finds the backlog and steals it.
        h.loop_handle(1 - me as usize).unwrap().call(|_| {});
        // Block this loop until every child ran: only the peer can run them.
        let ran: Vec<u32> = (0..N).map(|_| rx.recv().unwrap()).collect();
        assert!(ran.iter().all(|&l| l != me), "{ran:?}");
        s.success((me,))
    });
    // Sent to loop 0 directly: the parent itself is never up for stealing.
    let (me,): (u32,) = rt.loop_handle(0).unwrap().promise(root).wait().unwrap();
    assert_eq!(me, 0);
    sync_loops(&rt);
    let st = rt.stats();
    assert_eq!(st[1 - me as usize].stolen, N as u64);
    assert_eq!(st[me as usize].stolen, 0);
}

#[test]
fn flows_from_outside_spread_and_all_complete() {
    let rt = rt(2);
    const N: usize = 2_000;
    let ps: Vec<_> = (0..N)
        .map(|i| {
            let mut root = AsyncSteps::new();
            root.add(move |s, ()| s.success((i as u64,)));
            rt.spawn::<(u64,)>(root)
        })
        .collect();
    let sum: u64 = ps.into_iter().map(|p| p.wait().unwrap().0).sum();
    assert_eq!(sum, (N as u64 - 1) * N as u64 / 2);
    sync_loops(&rt);
    let st = rt.stats();
    assert_eq!(st.iter().map(|s| s.started).sum::<u64>(), N as u64);
    assert!(st.iter().map(|s| s.steps).sum::<u64>() >= N as u64);
}

#[test]
fn flows_from_outside_are_placed_round_robin_while_loops_are_busy() {
    let rt = rt(2);
    const N: usize = 100;
    // Hold both loops inside a step so that none starts, steals or sleeps
    // while the flows are placed.
    let gates = block_every_loop(&rt);
    let ps: Vec<_> = (0..N)
        .map(|_| {
            let mut root = AsyncSteps::new();
            root.add(|s, ()| s.success(()));
            rt.spawn::<()>(root)
        })
        .collect();
    for g in gates {
        g.send(()).unwrap();
    }
    for p in ps {
        p.wait().unwrap();
    }
    assert_placed_evenly(&rt, N);
}

#[test]
fn a_thread_with_its_own_loop_may_wait_for_a_runtime_flow() {
    // Owning an unrelated AsyncTool is no reason to refuse: the flow runs
    // on the runtime's threads, never on this one.
    let _own = futoin_asyncsteps::AsyncTool::new().unwrap();
    let rt = rt(1);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((5u8,)));
    assert_eq!(rt.spawn::<(u8,)>(root).wait().unwrap(), (5,));
}

#[test]
fn spawn_balanced_from_a_loop_spreads_a_burst_evenly() {
    let rt = rt(2);
    const N: usize = 100;
    // Loop 1 runs a blocker; loop 0 runs the spawner. Neither starts the
    // new flows while the burst is placed, so placement is exact.
    let (flow, started, go_tx) = blocker();
    let blocked = rt.loop_handle(1).unwrap().promise::<()>(flow);
    started.recv().unwrap();
    sync_loops_except(&rt, 1);
    let h = rt.handle();
    let mut spawner = AsyncSteps::new();
    spawner.add(move |s, ()| {
        let ps: Vec<_> = (0..N)
            .map(|_| {
                let mut root = AsyncSteps::new();
                root.add(|s, ()| s.success(()));
                h.spawn_balanced::<()>(root)
            })
            .collect();
        go_tx.send(()).unwrap();
        s.await_future(async move {
            for p in ps {
                p.await?;
            }
            Ok::<_, Error>(())
        });
        Ok(())
    });
    rt.loop_handle(0)
        .unwrap()
        .promise::<()>(spawner)
        .wait()
        .unwrap();
    blocked.wait().unwrap();
    assert_placed_evenly(&rt, N);
}

#[test]
fn balanced_flows_wait_for_their_own_loop_and_are_never_stolen() {
    let rt = rt(2);
    const N: usize = 8;
    // Both loops blocked: the burst is placed on queues nobody takes from
    // yet, half on each loop (the loops' counts are equal and stay so).
    let gates = block_every_loop(&rt);
    let (tx, rx) = mpsc::channel();
    let h = rt.handle();
    let ps: Vec<_> = (0..N)
        .map(|_| {
            let (tx, h) = (tx.clone(), h.clone());
            let mut root = AsyncSteps::new();
            root.add(move |_, ()| {
                tx.send(h.current_loop().unwrap()).unwrap();
                Ok(())
            });
            rt.spawn_balanced::<()>(root)
        })
        .collect();
    // Loop 1 alone runs: its half, and nothing of loop 0's, however many
    // turns it goes through with nothing else to do.
    gates[1].send(()).unwrap();
    let first: Vec<usize> = (0..N / 2).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(first, [1; N / 2]);
    sync_loop(&rt, 1);
    sync_loop(&rt, 1);
    assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
    gates[0].send(()).unwrap();
    let rest: Vec<usize> = (0..N / 2).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(rest, [0; N / 2]);
    for p in ps {
        p.wait().unwrap();
    }
    sync_loops(&rt);
    let st = rt.stats();
    assert_eq!((st[0].stolen, st[1].stolen), (0, 0), "{st:?}");
    assert_eq!((st[0].started, st[1].started), (4, 4), "{st:?}");
}

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
