//! Engine benchmarks, each case against a tokio `current_thread` peer.
//!
//! Run with `cargo bench --bench engine`. Criterion groups run first; then
//! `medians_table` times every case again with its own loop: 15 batches
//! of each side, ours and tokio alternating batch by batch (so a slow phase
//! of the machine falls on both), and prints
//! `name | ours median (min–max) | tokio median (min–max) | ratio` (ratio =
//! tokio / ours, so above 1 means we are faster), followed by the
//! pending-timers scaling check.
//!
//! Cases:
//! - `simple_flow`: a root with one empty step, started and run to the end
//!   (10_000 per batch) vs. spawning 10_000 empty detached tokio tasks.
//! - `repeat`: one flow running `repeat(10_000_000)` with an empty body vs.
//!   one tokio task looping 10M times over `tokio::task::consume_budget()`.
//! - `external`: 30_000 flows parking in `wait_external()`, completed from
//!   the loop thread with an `i32` read by the next step, vs. 30_000 tokio
//!   tasks awaiting a `oneshot::Receiver<i32>`.
//! - timers: one flow with a parallel of N branches, each waiting on
//!   `set_timeout(1 + i % 100 ms)` and recovering in its error handler, for
//!   N = 100k and 1M.

mod common;
#[path = "../examples/common/engine_cases.rs"]
mod engine_cases;

use common::{ab, full_run, profiling, table_header, Stats};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futoin_asyncsteps::{AsyncSteps, AsyncTool, TestTool};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIMPLE_N: usize = 10_000;
const REPEAT_N: usize = 10_000_000;
const EXTERNAL_N: usize = 30_000;
const BATCHES: usize = 15;

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime")
}

// ---------------------------------------------------------------- a. simple

/// Spawns `n` empty detached tasks, then awaits one more task spawned last:
/// the current-thread scheduler runs its queue in FIFO order, so when the
/// last one has run, all others have too (checked by `verify_peers`).
fn tokio_simple(rt: &tokio::runtime::Runtime, n: usize) {
    rt.block_on(async move {
        for _ in 0..n {
            drop(tokio::spawn(async {}));
        }
        tokio::spawn(async {}).await.expect("last task");
    });
}

// ---------------------------------------------------------------- b. repeat

fn ours_repeat(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |_, i| {
        black_box(i);
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

/// The peer loop: each iteration awaits `consume_budget()`, tokio's
/// cooperative-scheduling point. It is the closest analogue of one empty
/// step: a real await that costs a budget unit and makes the task yield to
/// the scheduler every 128 units, just as a flow yields every `BURST` steps.
/// (Awaiting an always-ready future would compile down to a bare `for` loop
/// and measure nothing of the runtime.)
fn tokio_repeat(rt: &tokio::runtime::Runtime, n: usize) {
    rt.block_on(async move {
        tokio::spawn(async move {
            for i in 0..n {
                black_box(i);
                tokio::task::consume_budget().await;
            }
        })
        .await
        .expect("loop task");
    });
}

// -------------------------------------------------------------- c. external

/// `n` tasks each await a oneshot receiver and read the value; then every
/// sender sends, and a last task spawned after the sends is awaited (FIFO:
/// all woken tasks have run by then).
fn tokio_external(rt: &tokio::runtime::Runtime, n: usize) {
    rt.block_on(async move {
        let mut txs = Vec::with_capacity(n);
        for _ in 0..n {
            let (tx, rx) = tokio::sync::oneshot::channel::<i32>();
            txs.push(tx);
            drop(tokio::spawn(async move {
                let v = rx.await.expect("value");
                black_box(v);
            }));
        }
        // Let every task run up to its await.
        tokio::spawn(async {}).await.expect("barrier");
        for (i, tx) in txs.into_iter().enumerate() {
            tx.send(i as i32).expect("receiver alive");
        }
        tokio::spawn(async {}).await.expect("last task");
    });
}

// ---------------------------------------------------------------- timers

/// One flow with a parallel of `n` branches, each waiting on a timeout of
/// `1 + i % 100` ms and recovering in its error handler.
fn timers_flow(n: usize) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let mut p = s.parallel();
        for i in 0..n {
            p.add_catch(
                move |s, ()| {
                    s.set_timeout(Duration::from_millis(1 + (i % 100) as u64));
                    Ok(())
                },
                |s, _| s.success(()),
            );
        }
        Ok(())
    });
    root
}

/// Real loop: includes up to ~100 ms of actually waiting for the timers.
fn ours_timers_real(n: usize) -> Duration {
    let mut tool = AsyncTool::new().expect("loop");
    let t = Instant::now();
    let p = timers_flow(n).promise::<()>(&mut tool);
    tool.block_on(p).expect("timers flow");
    t.elapsed()
}

/// Virtual time: the same flow on a `TestTool`, so only CPU cost counts.
fn ours_timers_virtual(n: usize) -> Duration {
    let mut tool = TestTool::new();
    let t = Instant::now();
    let p = timers_flow(n).promise::<()>(&mut tool);
    tool.block_on(p).expect("timers flow");
    t.elapsed()
}

// -------------------------------------------------------------- criterion

fn crit_simple(c: &mut Criterion) {
    let mut g = c.benchmark_group("simple_flow");
    g.throughput(Throughput::Elements(SIMPLE_N as u64));
    let mut tool = AsyncTool::new().expect("loop");
    g.bench_function("ours", |b| {
        b.iter(|| engine_cases::simple(&mut tool, SIMPLE_N))
    });
    let rt = tokio_rt();
    g.bench_function("tokio", |b| b.iter(|| tokio_simple(&rt, SIMPLE_N)));
    g.finish();
}

fn crit_repeat(c: &mut Criterion) {
    // Criterion samples a tenth of the table's loop to keep the run short.
    let n = REPEAT_N / 10;
    let mut g = c.benchmark_group("repeat");
    g.throughput(Throughput::Elements(n as u64));
    let mut tool = AsyncTool::new().expect("loop");
    g.bench_function("ours", |b| b.iter(|| ours_repeat(&mut tool, n)));
    let rt = tokio_rt();
    g.bench_function("tokio", |b| b.iter(|| tokio_repeat(&rt, n)));
    g.finish();
}

fn crit_external(c: &mut Criterion) {
    let mut g = c.benchmark_group("external");
    g.throughput(Throughput::Elements(EXTERNAL_N as u64));
    let mut tool = AsyncTool::new().expect("loop");
    g.bench_function("ours", |b| {
        b.iter(|| engine_cases::external(&mut tool, EXTERNAL_N))
    });
    let rt = tokio_rt();
    g.bench_function("tokio", |b| b.iter(|| tokio_external(&rt, EXTERNAL_N)));
    g.finish();
}

fn crit_timers(c: &mut Criterion) {
    let mut g = c.benchmark_group("timers_virtual");
    let n = 100_000;
    g.throughput(Throughput::Elements(n as u64));
    g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
        b.iter(|| ours_timers_virtual(n))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = crit_simple, crit_repeat, crit_external, crit_timers
}

// ------------------------------------------------------------ the table

/// Times one side's batch of work.
fn timed(mut run: impl FnMut()) -> impl FnMut() -> Duration {
    move || {
        let t = Instant::now();
        run();
        t.elapsed()
    }
}

/// Checks once, outside the timings, that the peers really run every task.
fn verify_peers(rt: &tokio::runtime::Runtime) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    rt.block_on(async move {
        for _ in 0..1000 {
            let d = d.clone();
            drop(tokio::spawn(async move {
                d.fetch_add(1, Ordering::Relaxed);
            }));
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    assert_eq!(
        done.load(Ordering::Relaxed),
        1000,
        "FIFO barrier in tokio_simple"
    );
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    rt.block_on(async move {
        let mut txs = Vec::new();
        for _ in 0..1000 {
            let (tx, rx) = tokio::sync::oneshot::channel::<i32>();
            txs.push(tx);
            let d = d.clone();
            drop(tokio::spawn(async move {
                rx.await.expect("value");
                d.fetch_add(1, Ordering::Relaxed);
            }));
        }
        tokio::spawn(async {}).await.expect("barrier");
        for tx in txs {
            tx.send(1).expect("receiver alive");
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    assert_eq!(
        done.load(Ordering::Relaxed),
        1000,
        "FIFO barrier in tokio_external"
    );
}

const TIMER_RUNS: usize = 3;

/// Median duration of `runs` runs.
fn median_of(runs: usize, mut run: impl FnMut() -> Duration) -> Duration {
    let mut v: Vec<Duration> = (0..runs).map(|_| run()).collect();
    v.sort();
    v[v.len() / 2]
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.2} ns")
    }
}

/// Prints the medians table and the timers check. Listed in
/// `criterion_main!` as if it were a group, so it runs after the groups.
/// Under `cargo test --benches` (no `--bench` flag) it runs tiny sizes;
/// with criterion's `--profile-time` (for a profiler) it is skipped.
fn medians_table() {
    if profiling() {
        return;
    }
    let full = full_run();
    let (batches, scale) = if full { (BATCHES, 1) } else { (1, 100) };
    let simple_n = SIMPLE_N / scale;
    let repeat_n = REPEAT_N / scale;
    let external_n = EXTERNAL_N / scale;

    let rt = tokio_rt();
    verify_peers(&rt);
    let mut tool = AsyncTool::new().expect("loop");

    let rows = [
        (
            format!("a. simple flow (per flow, {simple_n}/batch)"),
            ab(
                batches,
                simple_n,
                timed(|| engine_cases::simple(&mut tool, simple_n)),
                timed(|| tokio_simple(&rt, simple_n)),
            ),
        ),
        (
            format!("b. repeat (per iteration, {repeat_n}/batch)"),
            ab(
                batches,
                repeat_n,
                timed(|| ours_repeat(&mut tool, repeat_n)),
                timed(|| tokio_repeat(&rt, repeat_n)),
            ),
        ),
        (
            format!("c. external completion (per flow, {external_n}/batch)"),
            ab(
                batches,
                external_n,
                timed(|| engine_cases::external(&mut tool, external_n)),
                timed(|| tokio_external(&rt, external_n)),
            ),
        ),
    ];

    println!();
    table_header(batches, "name", 48, 31);
    let cell = |s: &Stats| {
        format!(
            "{:>9} ({:>9}–{:>9})",
            fmt_ns(s.median),
            fmt_ns(s.min),
            fmt_ns(s.max)
        )
    };
    for (name, (ours, tokio)) in &rows {
        println!(
            "{:<48} | {} | {} | {:>6.2}x",
            name,
            cell(ours),
            cell(tokio),
            tokio.median / ours.median
        );
    }
    let (rep, rep_tokio) = (&rows[1].1 .0, &rows[1].1 .1);
    println!(
        "repeat: ours {:.1} M iterations/s, tokio {:.1} M iterations/s",
        1e3 / rep.median,
        1e3 / rep_tokio.median
    );

    // Timers: 100k vs 1M pending at once; median of 3 runs each (one 1M
    // run takes seconds). The real-loop figure includes waiting for the
    // last timer (up to 100 ms after the branches started).
    let sizes: &[usize] = if full {
        &[100_000, 1_000_000]
    } else {
        &[1_000, 10_000]
    };
    println!();
    println!(
        "pending timers (median of {TIMER_RUNS} runs): one flow, parallel of N branches, \
         set_timeout(1 + i % 100 ms), recovered"
    );
    println!(
        "{:>9} | {:>12} | {:>12} | {:>14} | {:>14}",
        "N", "real total", "real /timer", "virtual total", "virtual /timer"
    );
    let mut per = Vec::new();
    for &n in sizes {
        let real = median_of(TIMER_RUNS, || ours_timers_real(n));
        let virt = median_of(TIMER_RUNS, || ours_timers_virtual(n));
        let (rp, vp) = (
            real.as_nanos() as f64 / n as f64,
            virt.as_nanos() as f64 / n as f64,
        );
        per.push((rp, vp));
        println!(
            "{:>9} | {:>12} | {:>12} | {:>14} | {:>14}",
            n,
            fmt_ns(real.as_nanos() as f64),
            fmt_ns(rp),
            fmt_ns(virt.as_nanos() as f64),
            fmt_ns(vp)
        );
    }
    println!(
        "per-timer cost ratio {}/{}: real {:.2}, virtual {:.2} (1.00 = linear scaling)",
        sizes[1],
        sizes[0],
        per[1].0 / per[0].0,
        per[1].1 / per[0].1
    );
}

criterion_main!(benches, medians_table);
