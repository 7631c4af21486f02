//! Helpers shared by the table-printing benchmarks: how the binary was run,
//! and medians of batches with ours and the peer alternating.
#![allow(dead_code)]

use std::time::Duration;

/// Criterion's `--profile-time` (a profiler run): the tables are skipped.
pub fn profiling() -> bool {
    std::env::args().any(|a| a == "--profile-time")
}

/// `cargo bench` passes `--bench`; `cargo test --benches` does not, and
/// then every case runs once at a tiny size.
pub fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

// Median, min and max, shared with the `asyncsteps-bench` harness.
#[path = "../../examples/common/stats.rs"]
mod stats;
pub use stats::Stats;

/// Per-op ns of `batches` batches of each side, alternating, after one
/// untimed warm-up of each.
pub fn ab(
    batches: usize,
    ops: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> (Stats, Stats) {
    a();
    b();
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    for _ in 0..batches {
        va.push(a().as_nanos() as f64 / ops as f64);
        vb.push(b().as_nanos() as f64 / ops as f64);
    }
    (Stats::of(va), Stats::of(vb))
}

/// Prints the head of a medians table whose ours/tokio batches alternate:
/// the legend, then `first | ours | tokio | ratio` with the first column
/// `name_w` wide and the two figure columns `col_w` wide.
pub fn table_header(batches: usize, first: &str, name_w: usize, col_w: usize) {
    println!(
        "medians of {batches} batches, ours and tokio alternating (min–max in brackets; \
         ratio = tokio / ours, > 1 means ours is faster)"
    );
    println!(
        "{first:<name_w$} | {:^col_w$} | {:^col_w$} | {:>7}",
        "ours", "tokio", "ratio"
    );
    println!(
        "{:-<name_w$}-|-{:-<col_w$}-|-{:-<col_w$}-|-{:->7}",
        "", "", "", ""
    );
}
