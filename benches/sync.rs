//! Sync benchmarks (Mutex, Throttle, Limiter), each beside a tokio peer in
//! the same run.
//!
//! Run with `cargo bench --bench sync`. The table times every case in
//! batches, ours and tokio alternating, and prints medians with min–max
//! and the ratio (tokio / ours: above 1 means ours is faster). Under
//! `cargo test --benches` everything runs once at a tiny size.
//!
//! Cases:
//! - `uncontended`: one flow on one loop, `repeat(N)` of `sync(mutex,
//!   empty step)`, vs. one tokio task doing `lock().await` on a
//!   `tokio::sync::Mutex` N times on a `current_thread` runtime. The same
//!   loop with a plain empty step (no sync) is printed as the baseline.
//! - `contended`: 1,000 flows × 1,000 critical sections on one Mutex(1)
//!   over a 2-loop runtime, vs. 1,000 tasks × 1,000 `lock().await` on a
//!   2-worker `multi_thread` runtime.
//! - `throttle` / `limiter`: the admission cost of a Throttle and a Limiter
//!   whose limits are never reached (one flow, `repeat(N)`), beside the
//!   Mutex figure.

mod common;
// The cross-loop workloads, shared with `benches/runtime.rs` and the harness.
#[path = "../examples/common/xloop.rs"]
mod xloop;

use common::{ab, full_run, profiling, table_header, Stats};
use futoin_asyncsteps::sync::{ISync, Limiter, LimiterOptions, Mutex, Throttle};
use futoin_asyncsteps::{runtime::Runtime, AsyncSteps, AsyncTool};
use std::hint::black_box;
use std::time::{Duration, Instant};
use xloop::{handover_share, ours_contended, synced_repeat, tokio_contended};

const UNCONTENDED_N: usize = 1_000_000;
const FLOWS: usize = 1_000;
const SECTIONS: usize = 1_000;

/// One flow running `repeat(n)` of a synced empty step (or a plain empty
/// step with `obj == None`).
fn ours_repeat<S: ISync + Clone>(tool: &mut AsyncTool, n: usize, obj: Option<&S>) -> Duration {
    let root = match obj {
        Some(o) => synced_repeat(n, o),
        None => {
            let mut root = AsyncSteps::new();
            root.repeat(n, |s, i| {
                s.add(move |_, ()| {
                    black_box(i);
                    Ok(())
                });
                Ok(())
            });
            root
        }
    };
    let t = Instant::now();
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("flow");
    t.elapsed()
}

fn tokio_uncontended(rt: &tokio::runtime::Runtime, n: usize) -> Duration {
    let m = tokio::sync::Mutex::new(());
    rt.block_on(async move {
        let t = Instant::now();
        for i in 0..n {
            let g = m.lock().await;
            black_box(i);
            drop(g);
        }
        t.elapsed()
    })
}

/// Per-op ns of `batches` batches of one side, after one untimed warm-up.
fn solo(batches: usize, ops: usize, mut a: impl FnMut() -> Duration) -> Stats {
    a();
    Stats::of(
        (0..batches)
            .map(|_| a().as_nanos() as f64 / ops as f64)
            .collect(),
    )
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn row(name: &str, ours: Stats, peer: Option<Stats>) {
    let ours_s = format!(
        "{:>9} ({:>8}–{:>8})",
        fmt_ns(ours.median),
        fmt_ns(ours.min),
        fmt_ns(ours.max)
    );
    match peer {
        Some(p) => println!(
            "{:<44} | {} | {:>9} ({:>8}–{:>8}) | {:>6.2}x",
            name,
            ours_s,
            fmt_ns(p.median),
            fmt_ns(p.min),
            fmt_ns(p.max),
            p.median / ours.median
        ),
        None => println!("{:<44} | {} | {:>30} |", name, ours_s, "-"),
    }
}

fn main() {
    if profiling() {
        return;
    }
    let full = full_run();
    let (batches, scale) = if full { (9, 1) } else { (1, 100) };
    let n = UNCONTENDED_N / scale;
    let (flows, sections) = (FLOWS / scale.min(10), SECTIONS / scale.min(10));

    table_header(batches, "case (time per op)", 44, 30);

    let mut tool = AsyncTool::new().expect("loop");
    let ct = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    let m = Mutex::new(1, None);
    let (o, t) = ab(
        batches,
        n,
        || ours_repeat(&mut tool, n, Some(&m)),
        || tokio_uncontended(&ct, n),
    );
    row(&format!("uncontended mutex, 1 loop ({n})"), o, Some(t));
    let mutex = o;
    let base = solo(batches, n, || ours_repeat::<Mutex>(&mut tool, n, None));
    row(&format!("  baseline: same loop, no sync ({n})"), base, None);
    let th = Throttle::new(u32::MAX, Duration::from_secs(1), None);
    let o = solo(batches, n, || ours_repeat(&mut tool, n, Some(&th)));
    row(&format!("throttle admission, never full ({n})"), o, None);
    let throttle = o;
    let l = Limiter::new(LimiterOptions {
        concurrent: u32::MAX,
        rate: u32::MAX,
        ..Default::default()
    });
    let o = solo(batches, n, || ours_repeat(&mut tool, n, Some(&l)));
    row(&format!("limiter admission, never full ({n})"), o, None);
    let limiter = o;

    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio");
    let ops = flows * sections;
    let mut contended = Vec::new();
    for spin in [0, 10] {
        let rt = Runtime::builder()
            .loops(2)
            .spin(Duration::from_micros(spin))
            .build()
            .expect("runtime");
        let (o, t) = ab(
            batches,
            ops,
            || ours_contended(&rt, flows, sections),
            || tokio_contended(&mt, flows, sections),
        );
        row(
            &format!("contended mutex, 2 loops, spin {spin}µs ({flows}x{sections})"),
            o,
            Some(t),
        );
        contended.push((o, t));
        // Every batch's handovers, over both loops (`LoopStats`).
        let (crossed, all) = handover_share(&rt);
        println!(
            "  handovers: {crossed} of {all} crossed loops ({:.0}%)",
            100.0 * crossed as f64 / all.max(1) as f64
        );
    }

    println!();
    println!(
        "uncontended: ours {:.1} M syncs/s ({:.1} ns over the plain step); \
         throttle {:.1} ns, limiter {:.1} ns per admission (over the plain step)",
        1e3 / mutex.median,
        mutex.median - base.median,
        throttle.median - base.median,
        limiter.median - base.median
    );
    println!(
        "contended: ours {:.2} / {:.2} M sections/s (spin 0 / 10µs, the default), tokio {:.2} M sections/s",
        1e3 / contended[0].0.median,
        1e3 / contended[1].0.median,
        1e3 / contended[0].1.median
    );
}
