//! Waiting for a quiet runtime and stopping gracefully: `wait_idle`
//! returns once every flow (children spawned by flows too) has ended;
//! `shutdown_timeout` takes no new flow, lets the running ones end in
//! time, and cancels what is still running after it; both refuse to wait
//! on one of the runtime's own loops.

use crate::rt;
use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::{error::codes, AsyncSteps};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A flow that signals `started`, sleeps `d`, then counts itself done.
fn sleeper(started: &mpsc::Sender<()>, d: Duration, done: &Arc<AtomicUsize>) -> AsyncSteps {
    let (tx, done) = (started.clone(), done.clone());
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let _ = tx.send(());
        s.sleep(d);
        Ok(())
    });
    root.add(move |_, ()| {
        done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    root
}

#[test]
fn wait_idle_returns_once_every_flow_and_its_children_ended() {
    let rt = rt(2);
    let done = Arc::new(AtomicUsize::new(0));
    let (tx, _rx) = mpsc::channel();
    for _ in 0..4 {
        // A flow that spawns three children, then sleeps itself.
        let mut root = AsyncSteps::new();
        let (h, tx2, d2) = (rt.handle(), tx.clone(), done.clone());
        root.add(move |_, ()| {
            // Children spawned from a loop thread start on that loop.
            for _ in 0..3 {
                h.execute(sleeper(&tx2, Duration::from_millis(5), &d2));
            }
            Ok(())
        });
        root.add(|s, ()| {
            s.sleep(Duration::from_millis(10));
            Ok(())
        });
        let d3 = done.clone();
        root.add(move |_, ()| {
            d3.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        rt.execute(root);
    }
    assert!(rt.wait_idle());
    assert_eq!(done.load(Ordering::SeqCst), 4 * 3 + 4);
    assert!(rt.stats().iter().all(|l| l.flows == 0));
    // Idle already: at once.
    assert!(rt.wait_idle());
}

#[test]
fn shutdown_timeout_lets_running_flows_end_and_refuses_new_ones() {
    let rt = rt(2);
    let (tx, rx) = mpsc::channel();
    let done = Arc::new(AtomicUsize::new(0));
    let ps: Vec<_> = (0..4)
        .map(|_| rt.spawn::<()>(sleeper(&tx, Duration::from_millis(20), &done)))
        .collect();
    for _ in 0..4 {
        rx.recv().unwrap();
    }
    // A flow spawned while the runtime stops is refused.
    let h = rt.handle();
    let (late_tx, late_rx) = mpsc::channel();
    let spawner = std::thread::spawn(move || {
        // Waits until the runtime has closed: a flow whose first step
        // runs would send.
        loop {
            let mut root = AsyncSteps::new();
            let t = late_tx.clone();
            root.add(move |_, ()| {
                let _ = t.send(());
                Ok(())
            });
            let p = h.spawn::<()>(root);
            if let Err(e) = p.wait() {
                return e.code().to_owned();
            }
        }
    });
    assert!(
        rt.shutdown_timeout(Duration::from_secs(60)),
        "all ended in time"
    );
    assert_eq!(spawner.join().unwrap(), codes::CANCELED);
    drop(late_rx);
    assert_eq!(done.load(Ordering::SeqCst), 4);
    for p in ps {
        p.wait().unwrap();
    }
}

#[test]
fn shutdown_timeout_cancels_what_still_runs_after_it() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel();
    let mut stuck = AsyncSteps::new();
    stuck.add(move |s, ()| {
        let _ = tx.send(());
        s.wait_external(); // never completed
        Ok(())
    });
    let p = rt.spawn::<()>(stuck);
    rx.recv().unwrap();
    let t = Instant::now();
    assert!(!rt.shutdown_timeout(Duration::from_millis(50)));
    assert!(t.elapsed() >= Duration::from_millis(50), "it waited");
    assert_eq!(p.wait().unwrap_err().code(), codes::CANCELED);
}

#[test]
fn waiting_on_a_loop_of_the_runtime_is_refused_at_once() {
    let rt = rt(1);
    let shared: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let mut root = AsyncSteps::new();
    let sh = shared.clone();
    root.add(move |_, ()| {
        let rt = sh.lock().unwrap().take().expect("the runtime");
        let idle = rt.wait_idle();
        let ended = rt.shutdown_timeout(Duration::from_secs(3600));
        tx.send((idle, ended)).unwrap();
        Ok(())
    });
    let h = rt.handle();
    *shared.lock().unwrap() = Some(rt);
    let p = h.spawn::<()>(root);
    assert_eq!(rx.recv().unwrap(), (false, false));
    // The flow that stopped its own runtime was cancelled with it, or had
    // ended.
    let _ = p.wait();
}

/// Regression test for a defect found in review (failed before its fix):
/// a flow taken from a loop's queue was counted only once started, so
/// `wait_idle` could see no flow anywhere while one was about to start.
/// Two chains of flows, each executing the next and ending at once.
#[test]
fn wait_idle_sees_a_flow_between_its_queue_and_its_start() {
    fn link(
        h: futoin_asyncsteps::runtime::RuntimeHandle,
        left: usize,
        done: Arc<AtomicUsize>,
    ) -> AsyncSteps {
        let mut root = AsyncSteps::new();
        root.add(move |_, ()| {
            done.fetch_add(1, Ordering::SeqCst);
            if left > 1 {
                h.execute(link(h.clone(), left - 1, done.clone()));
            }
            Ok(())
        });
        root
    }
    let rt = rt(2);
    for round in 0..500 {
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            rt.execute(link(rt.handle(), 20, done.clone()));
        }
        assert!(rt.wait_idle());
        assert_eq!(done.load(Ordering::SeqCst), 40, "round {round}");
    }
}

/// Regression test for a defect found by CI (the `Runtime::stats` doc
/// test failed once): counting a job in `flows` before taking it from a
/// queue showed a flow on an idle loop while it looked for work. The
/// count of a job being taken is kept apart; `flows` counts flows.
#[test]
fn an_idle_runtime_shows_no_flow_while_its_loops_look_for_work() {
    let rt = rt(2);
    for _ in 0..20_000 {
        assert!(rt.stats().iter().all(|l| l.flows == 0));
    }
}
