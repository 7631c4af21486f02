//! The multi-loop runtime: placement, pinning of flows to loops, cross-thread
//! completion and cancel, races, shutdown, panics, statistics, and bad
//! settings and misuse around loops and runtimes.
//!
//! The helpers here are shared by `placement` and `lifecycle`.

#[path = "../common/mod.rs"]
mod common;

mod graceful;
mod lifecycle;
mod misuse;
mod placement;

use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::{AsyncSteps, ExternalHandle};
use std::sync::{mpsc, Arc, Mutex};

fn rt(loops: usize) -> Runtime {
    Runtime::builder()
        .loops(loops)
        .pin_threads(false)
        .on_unhandled_error(|_| {})
        .build()
        .expect("runtime")
}

/// Returns once loop `i` has finished the turn it was in, and published
/// that turn's stats: the call queues an immediate callback, which runs
/// in the next turn, and that one answers. (Defect: the call answered
/// itself, and a call sent while a turn runs is run in that same turn,
/// before the stats of what the turn did are published.)
fn sync_loop(rt: &Runtime, i: usize) {
    let (tx, rx) = mpsc::channel();
    rt.loop_handle(i).unwrap().call(move |sched| {
        sched.immediate(move |_| tx.send(()).unwrap());
    });
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
