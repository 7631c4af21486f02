//! Runtime benchmarks, each case against a tokio peer in the same run.
//!
//! Run with `cargo bench --bench runtime`. Criterion groups run first
//! (cross-thread completion and ping-pong); then a table times every case
//! again, ours and tokio alternating batch by batch (A/B/A/B), and prints
//! medians with min–max and the ratio (tokio / ours for times, so above 1
//! means ours is faster). Under `cargo test --benches` everything runs once
//! at a tiny size, to keep the code working.
//!
//! Cases:
//! - `xthread`: N flows wait in `wait_external()` on a 2-loop runtime; a
//!   non-loop thread completes all of them with an int the next step reads.
//!   Timed: from the first completion to the last flow's end. Peer: N tasks
//!   on a 2-worker `multi_thread` runtime awaiting a `oneshot`, all fired
//!   from the non-runtime thread.
//! - `ping-pong`: two flows on two different loops pass an external handle
//!   back and forth (each completes the other's waiting step with its own
//!   next handle). Measured with `spin` 0 and 10 µs (the default). Peer: two tasks on two
//!   `current_thread` runtimes on their own threads, over two `mpsc`
//!   channels.
//! - `scaling`: N independent flows, each `repeat(ITERS)` of a tiny
//!   computation, on a 1-loop and a 2-loop runtime. Peer: the same on
//!   `multi_thread` with 1 and 2 workers (`consume_budget` per iteration).
//!   Printed beside it: what two plain threads of independent work gain
//!   on this machine, the ceiling for any runtime.
//! - `timers`: 1,000,000 root flows each waiting on `set_timeout(1..=100 ms)`
//!   and recovering, vs. 1,000,000 tasks each awaiting `tokio::time::sleep`
//!   of the same length. Each run is a child process (this binary re-run),
//!   which reports its time and its peak RSS (`VmHWM`).

mod common;
// The cross-loop workloads, shared with `benches/sync.rs` and the harness.
#[path = "../examples/common/xloop.rs"]
mod xloop;

use common::{ab, full_run, profiling, table_header, Stats};
use criterion::{Criterion, Throughput};
use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};
use xloop::{ours_ping, ours_xthread, tokio_xthread, Latch};

const XTHREAD_N: usize = 1_000_000;
const PING_N: usize = 100_000;
const SCALE_FLOWS: usize = 2_000;
const SCALE_ITERS: usize = 5_000;
const TIMERS_N: usize = 1_000_000;
const CHILD_ENV: &str = "FUTOIN_RUNTIME_BENCH_CHILD";

// ---------------------------------------------------------------- helpers

fn runtime(loops: usize, spin: Duration) -> Runtime {
    Runtime::builder()
        .loops(loops)
        .spin(spin)
        .thread_name(format!("bench-{loops}"))
        .build()
        .expect("runtime")
}

fn tokio_mt(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A current-thread runtime; `io` adds the I/O and time drivers, so an idle
/// thread parks in epoll (as our loops do) instead of on a condvar.
fn tokio_ct(io: bool) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_current_thread();
    if io {
        b.enable_all();
    }
    b.build().expect("tokio runtime")
}

// ---------------------------------------------------------------- xthread

// -------------------------------------------------------------- ping-pong

/// Two current-thread runtimes, each on its own thread, one task each,
/// passing a counter over two `mpsc` channels.
fn tokio_ping(rounds: usize, io: bool) -> Duration {
    let (tx_ab, mut rx_ab) = tokio::sync::mpsc::channel::<usize>(1);
    let (tx_ba, mut rx_ba) = tokio::sync::mpsc::channel::<usize>(1);
    let b = std::thread::spawn(move || {
        tokio_ct(io).block_on(async move {
            while let Some(v) = rx_ab.recv().await {
                tx_ba.send(v).await.expect("A listens");
            }
        })
    });
    let el = std::thread::spawn(move || {
        tokio_ct(io).block_on(async move {
            let t = Instant::now();
            for i in 0..rounds {
                tx_ab.send(i).await.expect("B listens");
                black_box(rx_ba.recv().await.expect("B answers"));
            }
            t.elapsed()
        })
    })
    .join()
    .expect("A thread");
    b.join().expect("B thread");
    el
}

// ---------------------------------------------------------------- scaling

fn ours_scale(rt: &Runtime, flows: usize, iters: usize) -> Duration {
    let done = Latch::new(flows);
    let t = Instant::now();
    for f in 0..flows {
        let mut root = AsyncSteps::new();
        root.repeat(iters, move |_, i| {
            black_box(i.wrapping_mul(f));
            Ok(())
        });
        let d = done.clone();
        root.add(move |_, ()| {
            d.count_down();
            Ok(())
        });
        rt.execute(root);
    }
    done.wait();
    t.elapsed()
}

fn tokio_scale(rt: &tokio::runtime::Runtime, flows: usize, iters: usize) -> Duration {
    let done = Latch::new(flows);
    let t = Instant::now();
    for f in 0..flows {
        let d = done.clone();
        drop(rt.spawn(async move {
            for i in 0..iters {
                black_box(i.wrapping_mul(f));
                tokio::task::consume_budget().await;
            }
            d.count_down();
        }));
    }
    done.wait();
    t.elapsed()
}

/// What two threads gain on this machine with no runtime at all: `n`
/// rounds of eight independent add/shift chains (register-only, so they
/// use the core's ALUs fully and touch no shared memory) on one thread,
/// then the same on each of two threads at once. The median of `batches`
/// ratios of `2 x one / two`; 2.00 when the two cores are truly
/// independent. (On a VM whose two CPUs are at times scheduled on
/// siblings of one physical core it is much lower, and no runtime can
/// scale better than this.)
fn machine_scaling(batches: usize, n: u64) -> f64 {
    fn work(n: u64) -> u64 {
        let mut x = [1u64, 2, 3, 4, 5, 6, 7, 8];
        for i in 0..n {
            for v in &mut x {
                *v = v.wrapping_add(i ^ (*v >> 3));
            }
        }
        x.iter().fold(0, |a, b| a ^ b)
    }
    let mut ratios: Vec<f64> = (0..batches.max(1))
        .map(|_| {
            let t = Instant::now();
            black_box(work(black_box(n)));
            let one = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let hs: Vec<_> = (0..2)
                .map(|_| std::thread::spawn(move || black_box(work(black_box(n)))))
                .collect();
            for h in hs {
                h.join().expect("worker");
            }
            2.0 * one / t.elapsed().as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

// ----------------------------------------------------------------- timers

fn timer_ms(i: usize) -> u64 {
    1 + (i % 100) as u64
}

fn ours_timers(n: usize) -> Duration {
    let rt = Runtime::new().expect("runtime");
    let done = Latch::new(n);
    let t = Instant::now();
    for i in 0..n {
        let mut root = AsyncSteps::new();
        let d = done.clone();
        root.add_catch(
            move |s, ()| {
                s.set_timeout(Duration::from_millis(timer_ms(i)));
                Ok(())
            },
            move |s, _| {
                d.count_down();
                s.success(())
            },
        );
        rt.execute(root);
    }
    done.wait();
    t.elapsed()
}

fn tokio_timers(n: usize) -> Duration {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let done = Latch::new(n);
    let t = Instant::now();
    for i in 0..n {
        let d = done.clone();
        drop(rt.spawn(async move {
            tokio::time::sleep(Duration::from_millis(timer_ms(i))).await;
            d.count_down();
        }));
    }
    done.wait();
    t.elapsed()
}

/// Peak resident set of this process, in KiB.
fn vm_hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The child side: runs one timers case and prints `nanos kib`.
fn child(spec: &str) {
    let (side, n) = spec.split_once(':').expect("side:n");
    let n: usize = n.parse().expect("n");
    let el = match side {
        "ours" => ours_timers(n),
        "tokio" => tokio_timers(n),
        other => panic!("unknown side {other}"),
    };
    println!("{} {}", el.as_nanos(), vm_hwm_kib());
}

/// Runs one timers case in a fresh process: (time, peak RSS in KiB).
fn timers_in_child(side: &str, n: usize) -> (Duration, u64) {
    let out = Command::new(std::env::current_exe().expect("own path"))
        .env(CHILD_ENV, format!("{side}:{n}"))
        .output()
        .expect("child runs");
    assert!(out.status.success(), "child failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    let ns: u64 = it.next().and_then(|v| v.parse().ok()).expect("nanos");
    let kib: u64 = it.next().and_then(|v| v.parse().ok()).expect("kib");
    (Duration::from_nanos(ns), kib)
}

// -------------------------------------------------------------- criterion

fn criterion_groups(c: &mut Criterion) {
    let n = 100_000;
    let rt = runtime(2, Duration::ZERO);
    let trt = tokio_mt(2);
    let mut g = c.benchmark_group("xthread");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("ours", |b| {
        b.iter_custom(|it| (0..it).map(|_| ours_xthread(&rt, n)).sum())
    });
    g.bench_function("tokio", |b| {
        b.iter_custom(|it| (0..it).map(|_| tokio_xthread(&trt, n)).sum())
    });
    g.finish();

    let rounds = 10_000;
    let mut g = c.benchmark_group("ping_pong");
    g.throughput(Throughput::Elements(rounds as u64));
    g.bench_function("ours", |b| {
        b.iter_custom(|it| (0..it).map(|_| ours_ping(&rt, rounds)).sum())
    });
    g.bench_function("tokio", |b| {
        b.iter_custom(|it| (0..it).map(|_| tokio_ping(rounds, false)).sum())
    });
    g.finish();
}

// ------------------------------------------------------------ the table

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn row(name: &str, ours: Stats, peer: Stats) {
    println!(
        "{:<46} | {:>9} ({:>9}–{:>9}) | {:>9} ({:>9}–{:>9}) | {:>6.2}x",
        name,
        fmt_ns(ours.median),
        fmt_ns(ours.min),
        fmt_ns(ours.max),
        fmt_ns(peer.median),
        fmt_ns(peer.min),
        fmt_ns(peer.max),
        peer.median / ours.median
    );
}

fn table() {
    if profiling() {
        return;
    }
    let full = full_run();
    let (batches, scale) = if full { (7, 1) } else { (1, 100) };
    let xn = XTHREAD_N / scale;
    let pn = PING_N / scale;
    let sflows = SCALE_FLOWS / scale.min(10);
    let tn = TIMERS_N / scale;

    println!();
    table_header(batches, "case (time per op)", 46, 33);

    let trt2 = tokio_mt(2);
    let mut xthread = Vec::new();
    let mut ping = Vec::new();
    for spin in [0, 10] {
        let rt2 = runtime(2, Duration::from_micros(spin));
        let (o, t) = ab(
            batches,
            xn,
            || ours_xthread(&rt2, xn),
            || tokio_xthread(&trt2, xn),
        );
        row(&format!("xthread completion, spin {spin}µs ({xn})"), o, t);
        xthread.push(o);
        for io in [false, true] {
            let park = if io { "epoll" } else { "condvar" };
            let (o, t) = ab(batches, pn, || ours_ping(&rt2, pn), || tokio_ping(pn, io));
            row(
                &format!("ping-pong, spin {spin}µs, tokio {park} ({pn})"),
                o,
                t,
            );
            ping.push((o, t));
        }
    }

    let ops = sflows * SCALE_ITERS;
    let mut scaling = Vec::new();
    for loops in [1, 2] {
        let rt = runtime(loops, Duration::ZERO);
        let trt = tokio_mt(loops);
        let (o, t) = ab(
            batches,
            ops,
            || ours_scale(&rt, sflows, SCALE_ITERS),
            || tokio_scale(&trt, sflows, SCALE_ITERS),
        );
        row(
            &format!("scaling {loops} loop(s), {sflows}x{SCALE_ITERS} steps"),
            o,
            t,
        );
        scaling.push((o, t));
    }
    drop(trt2);

    println!();
    println!(
        "xthread: ours {:.2} / {:.2} M completions/s (spin 0 / 10µs, the default)",
        1e3 / xthread[0].median,
        1e3 / xthread[1].median
    );
    println!(
        "ping-pong: ours {:.0} / {:.0} round trips/s (spin 0 / 10µs, the default); \
         tokio {:.0} (condvar park) / {:.0} (epoll park)",
        1e9 / ping[0].0.median,
        1e9 / ping[2].0.median,
        1e9 / ping[0].1.median,
        1e9 / ping[1].1.median
    );
    println!(
        "scaling 1 -> 2 loops: ours {:.2}x, tokio {:.2}x; the machine itself: {:.2}x \
         (two threads of independent register-only work, median of {batches})",
        scaling[0].0.median / scaling[1].0.median,
        scaling[0].1.median / scaling[1].1.median,
        machine_scaling(batches, if full { 20_000_000 } else { 200_000 })
    );

    // Timers: each run in a fresh process, so peak RSS is its own.
    let runs = if full { 3 } else { 1 };
    let (mut ot, mut tt, mut om, mut tm) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (d, k) = timers_in_child("ours", tn);
        ot.push(d.as_nanos() as f64);
        om.push(k as f64);
        let (d, k) = timers_in_child("tokio", tn);
        tt.push(d.as_nanos() as f64);
        tm.push(k as f64);
    }
    let (ot, tt, om, tm) = (Stats::of(ot), Stats::of(tt), Stats::of(om), Stats::of(tm));
    println!();
    println!("{tn} timers of 1..=100 ms, one flow/task each, median of {runs} child processes");
    println!(
        "  time: ours {} tokio {} (ours/tokio {:.2}); peak RSS: ours {:.1} MiB tokio {:.1} MiB (ours/tokio {:.2})",
        fmt_ns(ot.median),
        fmt_ns(tt.median),
        ot.median / tt.median,
        om.median / 1024.0,
        tm.median / 1024.0,
        om.median / tm.median
    );
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    criterion_groups(&mut c);
    c.final_summary();
    table();
}
