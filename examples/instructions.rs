//! The engine's cases for instruction counts: run a case for some
//! batches on one warm loop, under `valgrind --tool=callgrind`, and the
//! difference between two batch counts is what the batches cost (start-up
//! and the first, warming batch cancel out). `scripts/instructions.sh`
//! does that for every case and prints instructions per operation
//! (`--peer CASE...`: beside the case's tokio peer).
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
//!
//! The resume path, one case per kind of event that wakes a waiting step
//! (each operation is one park, one resume and the step after it):
//! - `external-thread`: as `external`, but another OS thread completes the
//!   waiting flows (joined before the loop runs on, so every completion is
//!   in the loop's inbox when it does and the count does not depend on how
//!   the threads interleave): the sender's side is counted too;
//! - `future-wake`: a `repeat` iteration that awaits a future pending
//!   once, which wakes itself (`wake_by_ref`) and is ready when polled
//!   again (less `await` is the wake and the resume);
//! - `timer`: a `repeat` iteration that waits in `wait_external()` and is
//!   completed by a zero-delay `deferred` callback of the loop, the
//!   cheapest public way for a step to wait for a timer (the callback, of
//!   one word, is kept in place: no allocation);
//! - `timer-timeout`: a `repeat` iteration that adds a step waiting on
//!   `set_timeout(Duration::ZERO)` alone, whose handler recovers the
//!   `Timeout` (the engine's own timer, no allocation, but an error and
//!   its unwinding);
//! - `sync-grant`: a flow holds a `Mutex(1)` in a section that waits while
//!   20,000 flows queue for it in `sync`; the holder is completed, and each
//!   section's end hands the slot to the next waiter (one handover an
//!   operation, with the waiting flow's start, its park in `sync` and its
//!   end, as in `external`);
//! - `io`: a `repeat` iteration that reads the byte the previous wait
//!   announced, writes the next one into the other end of a Unix socket
//!   pair, and waits for its end to be readable (`wait_io`): the loop's
//!   poll finds it and resumes the flow (the `Ready` result is kept in
//!   place: no allocation).
//!
//! Their tokio peers are in `examples/instructions_tokio.rs`, a binary of
//! their own, so the peers' code does not move how this one's functions
//! fall into codegen units (it moved our counts by up to 4%).

#[path = "common/engine_cases.rs"]
mod engine_cases;

use futoin_asyncsteps::AsyncTool;

/// Operations a batch.
const N: usize = 20_000;

/// Runs `<case> <batches>` on one loop; the first batch warms it.
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
        "external-thread" => engine_cases::external_thread,
        "future-wake" => engine_cases::future_wake,
        "timer" => engine_cases::timer,
        "timer-timeout" => engine_cases::timer_timeout,
        "sync-grant" => engine_cases::sync_grant,
        #[cfg(unix)]
        "io" => engine_cases::io_readable,
        _ => {
            eprintln!(
                "usage: instructions <simple|external|repeat-add|error|await|external-thread|\
                 future-wake|timer|timer-timeout|sync-grant|io> <batches>"
            );
            std::process::exit(2);
        }
    };
    let mut tool = AsyncTool::new().expect("loop");
    for _ in 0..batches {
        run(&mut tool, N);
    }
}
