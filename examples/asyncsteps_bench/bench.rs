//! What a workload is, how one round of one side is timed, and the small
//! helpers the workloads share.

use std::time::{Duration, Instant};

pub use crate::stats::Stats;

/// Which implementation a measurement is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// This crate.
    Ours,
    /// The tokio peer.
    Tokio,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Tokio => "tokio",
        }
    }

    pub fn parse(s: &str) -> Option<Side> {
        match s {
            "ours" => Some(Side::Ours),
            "tokio" => Some(Side::Tokio),
            _ => None,
        }
    }
}

/// One timed batch: how many operations it did and how long the timed part
/// took (a workload may leave setup out, e.g. parking flows before timing
/// their completion).
pub struct Batch {
    pub ops: u64,
    pub time: Duration,
}

/// One side of one workload, set up for a number of loops (runtimes,
/// threads, servers are created once and reused by every batch).
pub trait Bench {
    fn batch(&mut self) -> Batch;
    /// What this side adds to the report after its rounds, if anything
    /// (ours on `contended-mutex`: the share of handovers that crossed
    /// loops).
    fn note(&self) -> Option<String> {
        None
    }
}

/// What a workload is built for.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// Loops (ours) and threads or workers (tokio).
    pub loops: usize,
    /// Smoke-run sizes.
    pub quick: bool,
    /// `Builder::spin` for our runtimes.
    pub spin: Duration,
    /// `Builder::pin_threads` for our runtimes.
    pub pin: bool,
}

impl Ctx {
    /// `full` normally, `quick` in a smoke run.
    pub fn size(&self, full: usize, quick: usize) -> usize {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// Sets up one side of a workload for a context.
pub type Make = Box<dyn Fn(Side, &Ctx) -> Box<dyn Bench>>;

/// A named workload with its tokio peer.
pub struct Workload {
    /// The name used on the command line and in the files.
    pub name: &'static str,
    /// Its group, also accepted on the command line.
    pub group: &'static str,
    /// What one operation is (a flow, a step, a round trip, ...).
    pub unit: &'static str,
    /// What our side does, in one line.
    pub what: &'static str,
    /// What the tokio peer does, in one line.
    pub peer: &'static str,
    /// Each round runs in a child process of its own and reports its peak
    /// RSS (workloads that hold many flows or timers at once).
    pub rss: bool,
    /// Run one untimed batch of each side first.
    pub warmup: bool,
    /// Sets up one side.
    pub make: Make,
}

/// One timed round of one side.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    pub ops: u64,
    pub secs: f64,
    pub rss_kib: Option<u64>,
}

impl Round {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-12)
    }
}

/// Runs whole batches until `duration` of wall time has passed (at least
/// one); the round's time is the sum of the batches' timed parts.
pub fn run_round(b: &mut dyn Bench, duration: Duration) -> Round {
    let start = Instant::now();
    let (mut ops, mut time) = (0u64, Duration::ZERO);
    loop {
        let r = b.batch();
        ops += r.ops;
        time += r.time;
        if start.elapsed() >= duration {
            break;
        }
    }
    Round {
        ops,
        secs: time.as_secs_f64(),
        rss_kib: None,
    }
}

/// Our runtime with `loops` loops (threads pinned to cores unless
/// `--no-pin`: the crate's default).
pub fn our_runtime(ctx: &Ctx) -> futoin_asyncsteps::runtime::Runtime {
    futoin_asyncsteps::runtime::Runtime::builder()
        .loops(ctx.loops)
        .spin(ctx.spin)
        .pin_threads(ctx.pin)
        .thread_name("bench-loop")
        .build()
        .expect("runtime")
}

/// A tokio `multi_thread` runtime with one worker per loop, with the I/O
/// and time drivers (what `#[tokio::main]` builds).
pub fn tokio_multi(loops: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(loops)
        .thread_name("bench-tokio")
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A [`Bench`] from a closure that owns its setup.
pub fn from_fn(f: impl FnMut() -> Batch + 'static) -> Box<dyn Bench> {
    struct FnBench<F>(F);
    impl<F: FnMut() -> Batch> Bench for FnBench<F> {
        fn batch(&mut self) -> Batch {
            (self.0)()
        }
    }
    Box::new(FnBench(f))
}
