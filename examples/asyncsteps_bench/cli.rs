//! Command line options.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// Runs the benchmark workloads, each beside its tokio peer in the same
/// run (ours and tokio alternating round by round), on 1..N loops, and
/// writes a table, CSV/JSON of every round and SVG plots.
///
/// Ratios are ours ÷ tokio in operations per second: above 1 means this
/// crate is faster.
#[derive(Parser, Debug, Clone)]
#[command(name = "asyncsteps-bench", version)]
pub struct Cli {
    /// Workloads to run, by name or group (comma separated or repeated);
    /// see `--list`. Default: all of them.
    #[arg(short, long, value_delimiter = ',')]
    pub workloads: Vec<String>,

    /// Workloads to leave out, by name or group.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,

    /// Lists the workloads with what each does and its tokio peer, then exits.
    #[arg(short, long)]
    pub list: bool,

    /// Loop counts to run each workload on: a list (`1,2,4`) or a range
    /// (`1-4`). Default: 1 up to the number of cores.
    #[arg(long, value_parser = parse_loops)]
    pub loops: Option<LoopSet>,

    /// Timed rounds per side (ours and tokio alternate: A B A B ...).
    #[arg(short, long)]
    pub rounds: Option<usize>,

    /// Time per round and side, in milliseconds: a round runs whole
    /// batches until this much time has passed (at least one batch).
    #[arg(short, long, value_name = "MS")]
    pub duration: Option<u64>,

    /// Where the CSV, JSON and SVG files go [default: the package's
    /// target/asyncsteps-bench].
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// A smoke run: every workload at a small size, no warm-up, two short
    /// rounds per side; seconds on 2 cores.
    #[arg(short, long)]
    pub quick: bool,

    /// How long our idle loops poll before they park (`Builder::spin`), in
    /// microseconds. Default 10, the crate's default (0 parks at once).
    #[arg(long, default_value_t = 10, value_name = "US")]
    pub spin_us: u64,

    /// Do not pin our runtimes' loop threads to cores (the crate pins them
    /// by default; tokio does not pin). On a machine shared with other
    /// work, a pinned loop cannot move off a busy core.
    #[arg(long)]
    pub no_pin: bool,

    /// Skip the untimed warm-up batch of each side.
    #[arg(long)]
    pub no_warmup: bool,

    /// Redraws the SVG plots from the results.json kept in DIR (into
    /// `--out`, or DIR itself), without running anything.
    #[arg(long, value_name = "DIR")]
    pub replot: Option<PathBuf>,

    /// Internal: run one side of one workload in this process and print
    /// its round as JSON (used for the workloads that report peak RSS).
    #[arg(long, hide = true, value_name = "WORKLOAD:SIDE:LOOPS")]
    pub child: Option<String>,

    /// With `--child`: run exactly this many batches after the warm-up
    /// instead of a timed round (`scripts/instructions.sh` counts them
    /// under callgrind).
    #[arg(long, hide = true, value_name = "N")]
    pub batches: Option<usize>,
}

/// Loop counts, ascending, without duplicates.
#[derive(Debug, Clone)]
pub struct LoopSet(pub Vec<usize>);

fn parse_loops(s: &str) -> Result<LoopSet, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.trim().parse().map_err(|e| format!("{part}: {e}"))?;
            let b: usize = b.trim().parse().map_err(|e| format!("{part}: {e}"))?;
            if a > b {
                return Err(format!("{part}: empty range"));
            }
            v.extend(a..=b);
        } else {
            v.push(part.parse().map_err(|e| format!("{part}: {e}"))?);
        }
    }
    if v.is_empty() || v.contains(&0) || v.iter().any(|&n| n > 256) {
        return Err("loop counts are 1..=256".into());
    }
    v.sort_unstable();
    v.dedup();
    Ok(LoopSet(v))
}

/// The settings of a run, after defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub loops: Vec<usize>,
    pub rounds: usize,
    pub duration: Duration,
    pub quick: bool,
    pub warmup: bool,
    pub spin: Duration,
    pub pin: bool,
}

impl Cli {
    /// The output folder.
    pub fn out_dir(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/asyncsteps-bench")
        })
    }

    pub fn settings(&self) -> Settings {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Settings {
            loops: self
                .loops
                .clone()
                .map_or_else(|| (1..=cores).collect(), |l| l.0),
            rounds: self.rounds.unwrap_or(if self.quick { 2 } else { 5 }).max(1),
            duration: Duration::from_millis(self.duration.unwrap_or(if self.quick {
                10
            } else {
                500
            })),
            quick: self.quick,
            warmup: !self.no_warmup && !self.quick,
            spin: Duration::from_micros(self.spin_us),
            pin: !self.no_pin,
        }
    }
}
