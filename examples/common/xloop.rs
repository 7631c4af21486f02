//! Cross-loop workloads shared by `benches/runtime.rs`, `benches/sync.rs`
//! and the `asyncsteps-bench` harness, each beside its tokio peer: a
//! non-loop thread completing waiting steps, and flows contending on one
//! mutex. Each includer uses a part of it.
#![allow(dead_code)]

use futoin_asyncsteps::sync::{ISync, Mutex};
use futoin_asyncsteps::{AsyncSteps, ExternalHandle, Runtime};
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
