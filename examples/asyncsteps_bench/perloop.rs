//! Single-loop workloads on L loops: L threads, each with its own loop
//! (ours: an `AsyncTool`; tokio: a `current_thread` runtime) and its own
//! copy of the workload's objects, all running a batch at the same time.

use crate::bench::{Batch, Bench};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// L threads that each run `run(&mut state, n)` when told to.
pub struct PerLoop {
    go: Vec<Sender<usize>>,
    done: Receiver<(Duration, u64)>,
    threads: Vec<JoinHandle<()>>,
    n: usize,
}

impl PerLoop {
    /// Starts `loops` threads; each builds its state with `init` (on its own
    /// thread: loops are not `Send`) and runs `run(state, n)` per batch.
    /// `run` returns the operations it did.
    pub fn new<S: 'static>(
        loops: usize,
        n: usize,
        init: fn() -> S,
        run: fn(&mut S, usize) -> u64,
    ) -> Self {
        let (done_tx, done) = channel();
        let mut go = Vec::new();
        let mut threads = Vec::new();
        for i in 0..loops {
            let (tx, rx) = channel::<usize>();
            go.push(tx);
            let done_tx = done_tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("bench-{i}"))
                    .spawn(move || {
                        let mut state = init();
                        while let Ok(n) = rx.recv() {
                            let t = Instant::now();
                            let ops = run(&mut state, n);
                            let el = t.elapsed();
                            if done_tx.send((el, ops)).is_err() {
                                return;
                            }
                        }
                    })
                    .expect("spawn a bench thread"),
            );
        }
        PerLoop {
            go,
            done,
            threads,
            n,
        }
    }
}

impl Bench for PerLoop {
    /// Every thread runs one batch; the time is the slowest thread's (each
    /// thread times itself, so the hand-over to the threads is not counted),
    /// the operations are all threads' together.
    fn batch(&mut self) -> Batch {
        for tx in &self.go {
            tx.send(self.n).expect("bench thread alive");
        }
        let (mut time, mut ops) = (Duration::ZERO, 0);
        for _ in 0..self.go.len() {
            let (t, o) = self.done.recv().expect("bench thread result");
            time = time.max(t);
            ops += o;
        }
        Batch { ops, time }
    }
}

impl Drop for PerLoop {
    fn drop(&mut self) {
        self.go.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
