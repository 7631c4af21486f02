//! The engine's cases for instruction counts: run a case for some
//! batches on one warm loop, under `valgrind --tool=callgrind`, and the
//! difference between two batch counts is what the batches cost (start-up
//! and the first, warming batch cancel out). `scripts/instructions.sh`
//! does that for every case and prints instructions per operation.
//!
//! ```text
//! cargo run --release --example instructions -- <case> <batches>
//! ```
//!
//! Cases (20,000 operations a batch; the same code `benches/engine.rs`
//! times, from `examples/common/engine_cases.rs`):
//! - `simple`: a root with one empty step, started detached and run to its end;
//! - `external`: a flow waits in `wait_external()`, is completed from the
//!   loop thread with an `i32`, and the next step reads it;
//! - `repeat-add`: a `repeat` iteration that adds a sub-step capturing its
//!   index;
//! - `error`: a `repeat` iteration that adds a step failing with a static
//!   error, recovered by its handler;
//! - `await`: a `repeat` iteration that awaits a future ready at once.

#[path = "common/engine_cases.rs"]
mod engine_cases;

use futoin_asyncsteps::AsyncTool;

/// Operations a batch.
const N: usize = 20_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let batches: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(1);
    let run: fn(&mut AsyncTool, usize) = match case.as_str() {
        "simple" => engine_cases::simple,
        "external" => engine_cases::external,
        "repeat-add" => engine_cases::repeat_add,
        "error" => engine_cases::error_recovered,
        "await" => engine_cases::await_ready,
        _ => {
            eprintln!("usage: instructions <simple|external|repeat-add|error|await> <batches>");
            std::process::exit(2);
        }
    };
    let mut tool = AsyncTool::new().expect("loop");
    for _ in 0..batches {
        run(&mut tool, N);
    }
}
