//! Cross-loop workloads shared by `benches/runtime.rs`, `benches/sync.rs`
//! and the `asyncsteps-bench` harness: a non-loop thread completing waiting
//! steps and flows contending on one mutex (each with its tokio peer), and
//! our side of a ping-pong between two loops (the peers differ: the bench
//! pits two `current_thread` runtimes, the harness one `multi_thread`).
//! Each includer uses a part of it.
#![allow(dead_code)]

use futoin_asyncsteps::sync::{ISync, Mutex};
use futoin_asyncsteps::{runtime::Runtime, ArgValue, AsyncSteps, ExternalHandle, Step, StepResult};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};

/// Counts down to zero; `wait` blocks until it gets there.
pub struct Latch {
    left: AtomicUsize,
    lock: std::sync::Mutex<()>,
    cv: Condvar,
}

impl Latch {
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(Latch {
            left: AtomicUsize::new(n),
            lock: std::sync::Mutex::new(()),
            cv: Condvar::new(),
        })
    }

    pub fn count_down(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.lock.lock().expect("latch lock");
            self.cv.notify_all();
        }
    }

    pub fn wait(&self) {
        let mut g = self.lock.lock().expect("latch lock");
        while self.left.load(Ordering::Acquire) != 0 {
            g = self.cv.wait(g).expect("latch wait");
        }
    }
}

/// Parks `n` flows in `wait_external()`, then completes them all from this
/// (non-loop) thread with an int the next step reads. Timed: from the
/// first completion to the end of the last flow.
pub fn ours_xthread(rt: &Runtime, n: usize) -> Duration {
    let handles = Arc::new(std::sync::Mutex::new(Vec::with_capacity(n)));
    let parked = Latch::new(n);
    let done = Latch::new(n);
    for _ in 0..n {
        let mut root = AsyncSteps::new();
        let (hs, p) = (handles.clone(), parked.clone());
        root.add(move |s, ()| {
            let h = s.wait_external();
            hs.lock().expect("handles").push(h);
            p.count_down();
            Ok(())
        });
        let d = done.clone();
        root.add(move |_, (v,): (u32,)| {
            black_box(v);
            d.count_down();
            Ok(())
        });
        rt.execute(root);
    }
    parked.wait();
    let hs: Vec<ExternalHandle> = std::mem::take(&mut *handles.lock().expect("handles"));
    let t = Instant::now();
    for (i, h) in hs.into_iter().enumerate() {
        h.success((i as u32,)).expect("the step waits");
    }
    done.wait();
    t.elapsed()
}

/// `n` tasks await a oneshot receiver; this thread fires every sender.
pub fn tokio_xthread(rt: &tokio::runtime::Runtime, n: usize) -> Duration {
    let parked = Latch::new(n);
    let done = Latch::new(n);
    let mut txs = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        txs.push(tx);
        let (p, d) = (parked.clone(), done.clone());
        drop(rt.spawn(async move {
            p.count_down();
            black_box(rx.await.expect("value"));
            d.count_down();
        }));
    }
    parked.wait();
    let t = Instant::now();
    for (i, tx) in txs.into_iter().enumerate() {
        tx.send(i as u32).expect("receiver alive");
    }
    done.wait();
    t.elapsed()
}

/// A flow running `repeat(n)` of an empty step synced on `obj`.
pub fn synced_repeat<S: ISync + Clone>(n: usize, obj: &S) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let o = obj.clone();
    root.repeat(n, move |s, i| {
        s.sync(&o, move |_, ()| {
            black_box(i);
            Ok(())
        });
        Ok(())
    });
    root
}

/// `flows` flows of `sections` synced empty steps on one `Mutex(1)`.
pub fn ours_contended(rt: &Runtime, flows: usize, sections: usize) -> Duration {
    let m = Mutex::new(1, None);
    let t = Instant::now();
    let ps: Vec<_> = (0..flows)
        .map(|_| rt.spawn::<()>(synced_repeat(sections, &m)))
        .collect();
    for p in ps {
        p.wait().expect("flow");
    }
    t.elapsed()
}

/// The sync handovers of `rt`'s loops so far: (crossed loops, all), read
/// once each loop has published its last turn's counts (an immediate
/// callback runs in the turn after the call that queues it).
pub fn handover_share(rt: &Runtime) -> (u64, u64) {
    for i in 0..rt.loops() {
        let (tx, rx) = std::sync::mpsc::channel();
        rt.loop_handle(i).expect("loop").call(move |sched| {
            sched.immediate(move |_| {
                let _ = tx.send(());
            });
        });
        rx.recv().expect("loop answers");
    }
    let st = rt.stats();
    let local: u64 = st.iter().map(|l| l.handovers_local).sum();
    let crossed: u64 = st.iter().map(|l| l.handovers_crossed).sum();
    (crossed, local + crossed)
}

/// The same shape on `tokio::sync::Mutex`.
pub fn tokio_contended(rt: &tokio::runtime::Runtime, flows: usize, sections: usize) -> Duration {
    let m = Arc::new(tokio::sync::Mutex::new(()));
    let t = Instant::now();
    rt.block_on(async move {
        let hs: Vec<_> = (0..flows)
            .map(|_| {
                let m = m.clone();
                tokio::spawn(async move {
                    for i in 0..sections {
                        let g = m.lock().await;
                        black_box(i);
                        drop(g);
                    }
                })
            })
            .collect();
        for h in hs {
            h.await.expect("task");
        }
    });
    t.elapsed()
}

// -------------------------------------------------------------- ping-pong

/// What a player hands the other: its own waiting step, or `None` to stop.
pub struct Ball(pub Option<ExternalHandle>);
impl ArgValue for Ball {}

pub type Slot = Arc<std::sync::Mutex<Option<ExternalHandle>>>;

/// One volley, as the steps of a loop iteration: complete the peer's
/// waiting step with our own next handle, wait, keep the handle that comes
/// back (or leave the loop on `None`).
pub fn volley(s: &mut Step<'_>, slot: &Slot) -> StepResult {
    let sl = slot.clone();
    s.add(move |s, ()| {
        let peer = sl.lock().expect("slot").take().expect("a ball to hit");
        let me = s.wait_external();
        peer.success((Ball(Some(me)),)).expect("the peer waits");
        Ok(())
    });
    let sl = slot.clone();
    s.add(move |s, (b,): (Ball,)| match b.0 {
        Some(h) => {
            *sl.lock().expect("slot") = Some(h);
            Ok(())
        }
        None => s.break_loop(),
    });
    Ok(())
}

/// Player B's steps after its first wait: keeps the handle of the ball
/// that comes, then volleys until a ball comes empty.
fn return_every_ball(b: &mut AsyncSteps) {
    let b_slot: Slot = Arc::default();
    let sl = b_slot.clone();
    b.add(move |_, (ball,): (Ball,)| {
        *sl.lock().expect("slot") = ball.0;
        Ok(())
    });
    b.loop_(move |s| volley(s, &b_slot));
}

/// Player A's steps once it holds B's handle in `slot`: `rounds`
/// volleys, then an empty ball that tells B to stop.
fn serve(a: &mut AsyncSteps, slot: Slot, rounds: usize) {
    let sl = slot.clone();
    a.repeat(rounds, move |s, _| volley(s, &sl));
    a.add(move |_, ()| {
        let peer = slot.lock().expect("slot").take().expect("B waits");
        peer.success((Ball(None),)).expect("B waits");
        Ok(())
    });
}

/// `rounds` round trips between a flow on loop 0 and one on loop 1 (the
/// same loop when there is one).
pub fn ours_ping(rt: &Runtime, rounds: usize) -> Duration {
    let (tx, rx) = std::sync::mpsc::channel();
    // B: publishes its first waiting step, then returns every ball.
    let mut b = AsyncSteps::new();
    b.add(move |s, ()| {
        tx.send(s.wait_external()).expect("main waits");
        Ok(())
    });
    return_every_ball(&mut b);
    let b_loop = 1 % rt.loops();
    let b_done = rt.loop_handle(b_loop).expect("loop").promise::<()>(b);
    let first = rx.recv().expect("B's first handle");

    // A: serves `rounds` times, then tells B to stop.
    let a_slot: Slot = Arc::new(std::sync::Mutex::new(Some(first)));
    let mut a = AsyncSteps::new();
    serve(&mut a, a_slot, rounds);
    let t = Instant::now();
    let a_done = rt.loop_handle(0).expect("loop 0").promise::<()>(a);
    a_done.wait().expect("A ends");
    let el = t.elapsed();
    b_done.wait().expect("B ends");
    el
}

/// `rounds` round trips between two flows that the runtime places: A is
/// spawned from this thread (placed as any flow from outside), and B from
/// A's first step (the default placement of a flow spawned on a loop: that
/// same loop, unless an idle peer steals it before it starts). B's first
/// step completes A's first wait with B's own handle; then they volley as
/// in [`ours_ping`]. Timed from B's answer to A's end.
pub fn ours_ping_placed(rt: &Runtime, rounds: usize) -> Duration {
    let (b_tx, b_rx) = std::sync::mpsc::channel();
    let h = rt.handle();
    let a_slot: Slot = Arc::default();
    let mut a = AsyncSteps::new();
    a.add(move |s, ()| {
        let me = s.wait_external();
        // B: hands its first waiting step to A, then returns every ball.
        let mut b = AsyncSteps::new();
        b.add(move |s, ()| {
            me.success((Ball(Some(s.wait_external())),))
                .expect("A waits");
            Ok(())
        });
        return_every_ball(&mut b);
        b_tx.send(h.spawn::<()>(b)).expect("main waits");
        Ok(())
    });
    // The clock starts once B has answered, as tokio's peer starts it
    // once B is spawned: placing and starting the pair is not timed.
    let start = Arc::new(std::sync::Mutex::new(None));
    let (sl, st) = (a_slot.clone(), start.clone());
    a.add(move |_, (ball,): (Ball,)| {
        *sl.lock().expect("slot") = ball.0;
        *st.lock().expect("clock") = Some(Instant::now());
        Ok(())
    });
    serve(&mut a, a_slot, rounds);
    let a_done = rt.spawn::<()>(a);
    let b_done = b_rx.recv().expect("B spawned");
    a_done.wait().expect("A ends");
    let t = start.lock().expect("clock").expect("A started");
    let el = t.elapsed();
    b_done.wait().expect("B ends");
    el
}
