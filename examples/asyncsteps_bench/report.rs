//! Results: the terminal table, and the files (CSV, JSON, Markdown).

use crate::bench::{Round, Side, Stats};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Every round of one workload on one loop count.
pub struct Measured {
    pub workload: &'static str,
    pub group: &'static str,
    pub unit: &'static str,
    pub loops: usize,
    pub ours: Vec<Round>,
    pub tokio: Vec<Round>,
    /// Our side's note, printed under its line (see `Bench::note`).
    pub ours_note: Option<String>,
}

/// One line of the summary: medians (min–max) over the rounds.
#[derive(Serialize, serde::Deserialize, Clone)]
pub struct Row {
    pub workload: String,
    pub group: String,
    pub unit: String,
    pub loops: usize,
    pub rounds: usize,
    /// Operations per second (all loops together).
    pub ours_ops_per_s: Stats,
    pub tokio_ops_per_s: Stats,
    /// Wall time per operation: 1e9 / the median ops/s.
    pub ours_ns_per_op: f64,
    pub tokio_ns_per_op: f64,
    /// Ours ÷ tokio of the median ops/s: above 1, ours is faster.
    pub ratio: f64,
    /// Min and max of the round-by-round ratios (round i of ours against
    /// round i of tokio, which ran right after it).
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// Median peak RSS of the rounds' processes, MiB (workloads run in
    /// child processes only).
    pub ours_peak_rss_mib: Option<f64>,
    pub tokio_peak_rss_mib: Option<f64>,
}

fn rss_mib(rounds: &[Round]) -> Option<f64> {
    let v: Option<Vec<f64>> = rounds
        .iter()
        .map(|r| r.rss_kib.map(|k| k as f64 / 1024.0))
        .collect();
    v.filter(|v| !v.is_empty()).map(|v| Stats::of(v).median)
}

impl Measured {
    pub fn row(&self) -> Row {
        let o = Stats::of(self.ours.iter().map(Round::ops_per_s).collect());
        let t = Stats::of(self.tokio.iter().map(Round::ops_per_s).collect());
        let pair = Stats::of(
            self.ours
                .iter()
                .zip(&self.tokio)
                .map(|(a, b)| a.ops_per_s() / b.ops_per_s())
                .collect(),
        );
        Row {
            workload: self.workload.to_string(),
            group: self.group.to_string(),
            unit: self.unit.to_string(),
            loops: self.loops,
            rounds: self.ours.len(),
            ours_ops_per_s: o,
            tokio_ops_per_s: t,
            ours_ns_per_op: 1e9 / o.median,
            tokio_ns_per_op: 1e9 / t.median,
            ratio: o.median / t.median,
            ratio_min: pair.min,
            ratio_max: pair.max,
            ours_peak_rss_mib: rss_mib(&self.ours),
            tokio_peak_rss_mib: rss_mib(&self.tokio),
        }
    }
}

/// One round, as written to `rounds.csv` and `results.json`.
#[derive(Serialize)]
pub struct RoundRecord {
    pub workload: &'static str,
    pub loops: usize,
    pub side: Side,
    pub round: usize,
    pub ops: u64,
    pub secs: f64,
    pub ops_per_s: f64,
    pub ns_per_op: f64,
    pub peak_rss_kib: Option<u64>,
}

pub fn round_records(m: &[Measured]) -> Vec<RoundRecord> {
    let mut out = Vec::new();
    for w in m {
        for (i, (o, t)) in w.ours.iter().zip(&w.tokio).enumerate() {
            for (side, r) in [(Side::Ours, o), (Side::Tokio, t)] {
                out.push(RoundRecord {
                    workload: w.workload,
                    loops: w.loops,
                    side,
                    round: i + 1,
                    ops: r.ops,
                    secs: r.secs,
                    ops_per_s: r.ops_per_s(),
                    ns_per_op: r.secs * 1e9 / r.ops.max(1) as f64,
                    peak_rss_kib: r.rss_kib,
                });
            }
        }
    }
    out
}

/// `1.23M`, `456k`, `78.9`.
pub fn fmt_rate(v: f64) -> String {
    let (x, s) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    three_digits(x, s)
}

/// `x` with three significant digits (for `x` ≥ 1), then `suffix`.
fn three_digits(x: f64, suffix: &str) -> String {
    let decimals = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.decimals$}{suffix}")
}

/// `12.3 ns`, `4.56 µs`, `1.23 ms`.
pub fn fmt_ns(ns: f64) -> String {
    let (x, u) = if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    three_digits(x, &format!(" {u}"))
}

/// `1.23x`; small ratios keep two significant digits (`0.012x`).
pub fn fmt_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.1}x")
    } else if r >= 0.1 {
        format!("{r:.2}x")
    } else if r >= 0.01 {
        format!("{r:.3}x")
    } else {
        format!("{r:.4}x")
    }
}

fn fmt_stats(s: &Stats) -> String {
    format!(
        "{} ({}–{})",
        fmt_rate(s.median),
        fmt_rate(s.min),
        fmt_rate(s.max)
    )
}

fn fmt_rss(r: &Row) -> String {
    match (r.ours_peak_rss_mib, r.tokio_peak_rss_mib) {
        (Some(o), Some(t)) => format!("{o:.0} / {t:.0} MiB"),
        _ => "-".into(),
    }
}

/// One short line for a finished workload (shown above the progress bar).
pub fn line(r: &Row) -> String {
    format!(
        "{:<24} {:>2} loop{}  ours {:>8}/s  tokio {:>8}/s  ours/tokio {:>7}{}",
        r.workload,
        r.loops,
        if r.loops == 1 { " " } else { "s" },
        fmt_rate(r.ours_ops_per_s.median),
        fmt_rate(r.tokio_ops_per_s.median),
        fmt_ratio(r.ratio),
        match (r.ours_peak_rss_mib, r.tokio_peak_rss_mib) {
            (Some(o), Some(t)) => format!("  RSS {o:.0}/{t:.0} MiB"),
            _ => String::new(),
        }
    )
}

/// The terminal table.
pub fn table(rows: &[Row]) -> String {
    let head = [
        "workload",
        "loops",
        "ours ops/s (min–max)",
        "ours ns/op",
        "tokio ops/s (min–max)",
        "tokio ns/op",
        "ours/tokio",
        "peak RSS ours/tokio",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.workload.to_string(),
                r.loops.to_string(),
                fmt_stats(&r.ours_ops_per_s),
                fmt_ns(r.ours_ns_per_op),
                fmt_stats(&r.tokio_ops_per_s),
                fmt_ns(r.tokio_ns_per_op),
                fmt_ratio(r.ratio),
                fmt_rss(r),
            ]
        })
        .collect();
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for c in &cells {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.chars().count());
        }
    }
    let pad = |s: &str, n: usize, right: bool| {
        let fill = " ".repeat(n.saturating_sub(s.chars().count()));
        if right {
            format!("{fill}{s}")
        } else {
            format!("{s}{fill}")
        }
    };
    let mut out = String::new();
    let fmt_line = |c: &[String]| {
        c.iter()
            .enumerate()
            .map(|(i, s)| pad(s, w[i], i > 0))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let head: Vec<String> = head.iter().map(|s| s.to_string()).collect();
    let _ = writeln!(out, "{}", fmt_line(&head));
    let _ = writeln!(
        out,
        "{}",
        w.iter()
            .map(|&n| "-".repeat(n))
            .collect::<Vec<_>>()
            .join("-|-")
    );
    for c in &cells {
        let _ = writeln!(out, "{}", fmt_line(c));
    }
    out
}

/// The same table in Markdown (for docs/benchmarks.md).
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | loops | ours ops/s (min–max) | ours ns/op | tokio ops/s (min–max) | tokio ns/op | ours/tokio | peak RSS ours / tokio |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.loops,
            fmt_stats(&r.ours_ops_per_s),
            fmt_ns(r.ours_ns_per_op),
            fmt_stats(&r.tokio_ops_per_s),
            fmt_ns(r.tokio_ns_per_op),
            fmt_ratio(r.ratio),
            fmt_rss(r)
        );
    }
    out
}

/// `summary.csv`: one line per workload and loop count.
pub fn write_summary_csv(path: &Path, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record([
        "workload",
        "group",
        "unit",
        "loops",
        "rounds",
        "ours_ops_per_s_median",
        "ours_ops_per_s_min",
        "ours_ops_per_s_max",
        "ours_ns_per_op",
        "tokio_ops_per_s_median",
        "tokio_ops_per_s_min",
        "tokio_ops_per_s_max",
        "tokio_ns_per_op",
        "ratio",
        "ratio_min",
        "ratio_max",
        "ours_peak_rss_mib",
        "tokio_peak_rss_mib",
    ])?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
    for r in rows {
        w.write_record([
            r.workload.to_string(),
            r.group.to_string(),
            r.unit.to_string(),
            r.loops.to_string(),
            r.rounds.to_string(),
            format!("{:.1}", r.ours_ops_per_s.median),
            format!("{:.1}", r.ours_ops_per_s.min),
            format!("{:.1}", r.ours_ops_per_s.max),
            format!("{:.2}", r.ours_ns_per_op),
            format!("{:.1}", r.tokio_ops_per_s.median),
            format!("{:.1}", r.tokio_ops_per_s.min),
            format!("{:.1}", r.tokio_ops_per_s.max),
            format!("{:.2}", r.tokio_ns_per_op),
            format!("{:.4}", r.ratio),
            format!("{:.4}", r.ratio_min),
            format!("{:.4}", r.ratio_max),
            opt(r.ours_peak_rss_mib),
            opt(r.tokio_peak_rss_mib),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// `rounds.csv`: every round of every side.
pub fn write_rounds_csv(
    path: &Path,
    rounds: &[RoundRecord],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut w = csv::Writer::from_path(path)?;
    for r in rounds {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}
