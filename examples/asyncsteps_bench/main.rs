//! `asyncsteps-bench`: the multi-core benchmark harness.
//!
//! ```sh
//! cargo run --release --example asyncsteps-bench             # everything
//! cargo run --release --example asyncsteps-bench -- --quick  # smoke run
//! cargo run --release --example asyncsteps-bench -- --list
//! cargo run --release --example asyncsteps-bench -- -w js,scaling --loops 1-2 -r 7
//! ```
//!
//! Runs each named workload on 1..N loops beside its tokio peer in the same
//! process run: for each workload and loop count, both sides are set up,
//! each runs one untimed warm-up batch, then timed rounds alternate ours,
//! tokio, ours, tokio, ... (a round runs whole batches for `--duration`).
//! It prints a table (median ops/s with min–max, ns/op, ratio ours ÷
//! tokio, peak RSS where it applies) and writes `rounds.csv`,
//! `summary.csv`, `results.json`, `summary.md`, `table.txt`, `scaling.svg`
//! and `ratios.svg` to the output folder (`--replot DIR` redraws the plots
//! from a kept `results.json`). Workloads that hold many flows
//! at once run each round in a child process (this binary, `--child`), so
//! that its peak RSS is its own. See `docs/benchmarks.md`.

mod bench;
mod cli;
mod cross;
mod net;
mod perloop;
mod plot;
mod reference;
mod report;
mod sys;
mod workloads;

// The connection flows of the server examples, shared with `benches/net.rs`.
#[path = "../common/echo.rs"]
mod echo;
#[path = "../common/http.rs"]
mod http;
#[path = "../common/serve.rs"]
mod serve;
#[path = "../common/tokio_peer.rs"]
mod tokio_peer;
// The cross-loop workloads, shared with `benches/runtime.rs` and `benches/sync.rs`.
#[path = "../common/xloop.rs"]
mod xloop;
// Median, min and max, shared with the criterion benches.
#[path = "../common/stats.rs"]
mod stats;

use bench::{run_round, Ctx, Round, Side, Workload};
use clap::Parser;
use cli::{Cli, Settings};
use indicatif::{ProgressBar, ProgressStyle};
use report::Measured;
use serde::Serialize;
use std::process::{Command, ExitCode};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = if cli.list {
        list();
        Ok(())
    } else if let Some(dir) = cli.replot.clone() {
        replot(&cli, &dir)
    } else if let Some(spec) = cli.child.clone() {
        child(&cli, &spec)
    } else {
        run(&cli)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("asyncsteps-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn list() {
    let all = workloads::all();
    for (group, about) in workloads::GROUPS {
        println!("{group}: {about}");
        for w in all.iter().filter(|w| w.group == *group) {
            println!(
                "  {:<24} per {}{}: {}",
                w.name,
                w.unit,
                if w.rss { " (peak RSS)" } else { "" },
                w.what
            );
            println!("  {:<24} tokio: {}", "", w.peer);
        }
        println!();
    }
    println!("Pick with -w NAME|GROUP[,...]; leave out with --skip.");
}

/// `--replot DIR`: the plots again, from a kept `results.json`.
fn replot(cli: &Cli, dir: &std::path::Path) -> AnyResult<()> {
    #[derive(serde::Deserialize)]
    struct Kept {
        summary: Vec<report::Row>,
    }
    let kept: Kept = serde_json::from_str(&std::fs::read_to_string(dir.join("results.json"))?)?;
    let out = cli.out.clone().unwrap_or_else(|| dir.to_path_buf());
    std::fs::create_dir_all(&out)?;
    let mut files = Vec::new();
    if plot::scaling(&out.join("scaling.svg"), &kept.summary, "scaling")? {
        files.push("scaling.svg");
    }
    plot::ratios(&out.join("ratios.svg"), &kept.summary)?;
    files.push("ratios.svg");
    println!("wrote {} in {}", files.join(", "), out.display());
    Ok(())
}

/// The workloads named on the command line (names or groups), in the
/// registry's order.
fn select(cli: &Cli) -> AnyResult<Vec<Workload>> {
    let all = workloads::all();
    let known = |n: &str| all.iter().any(|w| w.name == n || w.group == n);
    for n in cli.workloads.iter().chain(&cli.skip) {
        if !known(n) {
            return Err(format!("unknown workload or group '{n}' (see --list)").into());
        }
    }
    let picked = |w: &Workload, names: &[String]| names.iter().any(|n| n == w.name || n == w.group);
    Ok(all
        .into_iter()
        .filter(|w| cli.workloads.is_empty() || picked(w, &cli.workloads))
        .filter(|w| !picked(w, &cli.skip))
        .collect())
}

/// What a child process prints: one round of one side.
#[derive(Serialize, serde::Deserialize)]
struct ChildRound {
    ops: u64,
    secs: f64,
    rss_kib: Option<u64>,
}

/// `--child WORKLOAD:SIDE:LOOPS`: runs one round and prints it as JSON.
fn child(cli: &Cli, spec: &str) -> AnyResult<()> {
    let mut it = spec.split(':');
    let (Some(name), Some(side), Some(loops), None) = (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(format!("bad --child spec '{spec}'").into());
    };
    let side = Side::parse(side).ok_or("bad side")?;
    let loops: usize = loops.parse()?;
    let s = cli.settings();
    let w = workloads::all()
        .into_iter()
        .find(|w| w.name == name)
        .ok_or("unknown workload")?;
    let ctx = Ctx {
        loops,
        quick: s.quick,
        spin: s.spin,
        pin: s.pin,
    };
    let mut b = (w.make)(side, &ctx);
    if w.warmup && s.warmup {
        b.batch();
    }
    let r = match cli.batches {
        Some(n) => {
            let mut r = Round {
                ops: 0,
                secs: 0.0,
                rss_kib: None,
            };
            for _ in 0..n {
                let one = b.batch();
                r.ops += one.ops;
                r.secs += one.time.as_secs_f64();
            }
            r
        }
        None => run_round(&mut *b, s.duration),
    };
    drop(b);
    let out = ChildRound {
        ops: r.ops,
        secs: r.secs,
        rss_kib: sys::peak_rss_kib(),
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Runs one round of one side in a child process.
fn child_round(w: &Workload, side: Side, loops: usize, s: &Settings) -> AnyResult<Round> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("--child")
        .arg(format!("{}:{}:{loops}", w.name, side.name()))
        .arg("--duration")
        .arg(s.duration.as_millis().to_string())
        .arg("--spin-us")
        .arg(s.spin.as_micros().to_string());
    if s.quick {
        cmd.arg("--quick");
    }
    if !s.warmup {
        cmd.arg("--no-warmup");
    }
    if !s.pin {
        cmd.arg("--no-pin");
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "{} ({}, {loops} loops) failed in its child process: {}\n{}",
            w.name,
            side.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().ok_or("no output from the child")?;
    let c: ChildRound = serde_json::from_str(line)?;
    Ok(Round {
        ops: c.ops,
        secs: c.secs,
        rss_kib: c.rss_kib,
    })
}

/// Both sides of one workload on one loop count, alternating.
fn measure(w: &Workload, loops: usize, s: &Settings, pb: &ProgressBar) -> AnyResult<Measured> {
    let (mut ours, mut tokio) = (Vec::new(), Vec::new());
    let mut ours_note = None;
    let msg = |what: &str| pb.set_message(format!("{} on {loops} loop(s): {what}", w.name));
    if w.rss {
        for r in 1..=s.rounds {
            msg(&format!("ours, round {r}/{}", s.rounds));
            ours.push(child_round(w, Side::Ours, loops, s)?);
            pb.inc(1);
            msg(&format!("tokio, round {r}/{}", s.rounds));
            tokio.push(child_round(w, Side::Tokio, loops, s)?);
            pb.inc(1);
        }
    } else {
        let ctx = Ctx {
            loops,
            quick: s.quick,
            spin: s.spin,
            pin: s.pin,
        };
        msg("setting up");
        let mut a = (w.make)(Side::Ours, &ctx);
        let mut b = (w.make)(Side::Tokio, &ctx);
        if w.warmup && s.warmup {
            msg("warm-up");
            a.batch();
            pb.inc(1);
            b.batch();
            pb.inc(1);
        }
        for r in 1..=s.rounds {
            msg(&format!("ours, round {r}/{}", s.rounds));
            ours.push(run_round(&mut *a, s.duration));
            pb.inc(1);
            msg(&format!("tokio, round {r}/{}", s.rounds));
            tokio.push(run_round(&mut *b, s.duration));
            pb.inc(1);
        }
        ours_note = a.note();
    }
    Ok(Measured {
        workload: w.name,
        group: w.group,
        unit: w.unit,
        loops,
        ours,
        tokio,
        ours_note,
    })
}

#[derive(Serialize)]
struct Meta {
    crate_version: &'static str,
    profile: &'static str,
    command: Vec<String>,
    started_unix: u64,
    wall_secs: f64,
    cpus: usize,
    cpu_model: Option<String>,
    kernel: Option<String>,
    load_avg_before: Option<[f64; 3]>,
    load_avg_after: Option<[f64; 3]>,
    loops: Vec<usize>,
    rounds: usize,
    duration_ms: u128,
    quick: bool,
    warmup: bool,
    spin_us: u128,
    pinned: bool,
}

#[derive(Serialize)]
struct WorkloadInfo {
    name: &'static str,
    group: &'static str,
    unit: &'static str,
    what: &'static str,
    tokio_peer: &'static str,
    peak_rss: bool,
}

#[derive(Serialize)]
struct Output<'a> {
    meta: Meta,
    workloads: Vec<WorkloadInfo>,
    summary: &'a [report::Row],
    rounds: Vec<report::RoundRecord>,
}

fn run(cli: &Cli) -> AnyResult<()> {
    let s = cli.settings();
    let sel = select(cli)?;
    if sel.is_empty() {
        return Err("no workload selected".into());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let load_before = sys::load_avg();
    println!(
        "asyncsteps-bench: {} workload(s) on {:?} loop(s), {} round(s) of {} ms per side{}; {cpus} CPUs, {profile} build, our loops {}",
        sel.len(),
        s.loops,
        s.rounds,
        s.duration.as_millis(),
        if s.quick { " (quick)" } else { "" },
        if s.pin { "pinned" } else { "not pinned" },
    );
    if profile == "debug" {
        println!("note: a debug build; use --release for figures worth keeping");
    }
    if let Some(l) = load_before {
        println!(
            "load average {:.2} {:.2} {:.2}{}",
            l[0],
            l[1],
            l[2],
            if l[0] > 0.3 * cpus as f64 {
                " (the machine is busy: expect noisy figures)"
            } else {
                ""
            }
        );
    }
    let started = SystemTime::now();
    let t0 = Instant::now();

    let ticks: u64 = sel
        .iter()
        .map(|w| {
            let warm = if w.warmup && s.warmup && !w.rss { 2 } else { 0 };
            (warm + 2 * s.rounds as u64) * s.loops.len() as u64
        })
        .sum();
    let pb = ProgressBar::new(ticks);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")?
            .progress_chars("=> "),
    );
    let mut measured = Vec::new();
    for w in &sel {
        for &loops in &s.loops {
            let m = measure(w, loops, &s, &pb)?;
            let mut line = report::line(&m.row());
            if let Some(n) = &m.ours_note {
                line = format!("{line}\n    ours: {n}");
            }
            // Above the bar on a terminal; a plain line in a log.
            pb.suspend(|| println!("{line}"));
            measured.push(m);
        }
    }
    pb.finish_and_clear();
    let wall = t0.elapsed();
    let load_after = sys::load_avg();

    let rows: Vec<report::Row> = measured.iter().map(Measured::row).collect();
    let table = report::table(&rows);
    println!();
    println!("ratio = ours ops/s ÷ tokio ops/s (above 1: ours is faster); ns/op = 1e9 / median ops/s, all loops together");
    print!("{table}");
    println!(
        "took {:.1} s; load average before {} / after {}",
        wall.as_secs_f64(),
        load_before.map_or("?".into(), |l| format!("{:.2}", l[0])),
        load_after.map_or("?".into(), |l| format!("{:.2}", l[0])),
    );

    // The files.
    let out = &cli.out_dir();
    std::fs::create_dir_all(out)?;
    let meta = Meta {
        crate_version: env!("CARGO_PKG_VERSION"),
        profile,
        command: std::env::args().collect(),
        started_unix: started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        wall_secs: wall.as_secs_f64(),
        cpus,
        cpu_model: sys::cpu_model(),
        kernel: sys::kernel(),
        load_avg_before: load_before,
        load_avg_after: load_after,
        loops: s.loops.clone(),
        rounds: s.rounds,
        duration_ms: s.duration.as_millis(),
        quick: s.quick,
        warmup: s.warmup,
        spin_us: s.spin.as_micros(),
        pinned: s.pin,
    };
    let rounds = report::round_records(&measured);
    report::write_rounds_csv(&out.join("rounds.csv"), &rounds)?;
    report::write_summary_csv(&out.join("summary.csv"), &rows)?;
    let json = Output {
        meta,
        workloads: sel
            .iter()
            .map(|w| WorkloadInfo {
                name: w.name,
                group: w.group,
                unit: w.unit,
                what: w.what,
                tokio_peer: w.peer,
                peak_rss: w.rss,
            })
            .collect(),
        summary: &rows,
        rounds,
    };
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    std::fs::write(out.join("summary.md"), report::markdown(&rows))?;
    std::fs::write(out.join("table.txt"), &table)?;
    let mut files = vec![
        "rounds.csv",
        "summary.csv",
        "results.json",
        "summary.md",
        "table.txt",
    ];
    if plot::scaling(&out.join("scaling.svg"), &rows, "scaling")? {
        files.push("scaling.svg");
    }
    plot::ratios(&out.join("ratios.svg"), &rows)?;
    files.push("ratios.svg");
    println!("wrote {} in {}", files.join(", "), out.display());
    Ok(())
}
