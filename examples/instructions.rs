//! The engine's cases for instruction counts: run a case for some
//! batches on one warm loop, under `valgrind --tool=callgrind`, and the
//! difference between two batch counts is what the batches cost (start-up
//! and the first, warming batch cancel out). `scripts/instructions.sh`
//! does that for every case and prints instructions per operation
//! (`--peer CASE...`: beside the case's tokio peer, `tokio-CASE`).
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
//! Their tokio peers, `tokio-<case>` (`examples/common/tokio_cases.rs`), on
//! a `current_thread` runtime with its I/O and time drivers, built once like
//! our loop. Where ours runs the loop until idle, the peer awaits a task
//! spawned last (the local run queue is FIFO), unless said otherwise:
//! - `tokio-simple`: `n` empty tasks spawned detached;
//! - `tokio-external`: `n` tasks await a `oneshot::Receiver<i32>`; once all
//!   are parked, the runtime thread sends on every sender;
//! - `tokio-external-thread`: the same, the sends on another OS thread
//!   joined before the runtime runs on (the last waiting task, sent to last,
//!   ends the batch: those wakes go to the FIFO inject queue);
//! - `tokio-future-wake`: one task awaits the same once-pending future `n`
//!   times;
//! - `tokio-timer`: one task awaits `sleep(Duration::ZERO)` `n` times; tokio
//!   rounds the deadline up to the next millisecond tick, so each one
//!   registers a timer and parks the thread until that tick (about 1 ms
//!   of real time an operation);
//! - `tokio-timer-timeout`: one task awaits `timeout(Duration::ZERO,
//!   pending())` `n` times and recovers the `Elapsed` (the same timer);
//! - `tokio-sync-grant`: a task holds a `tokio::sync::Mutex` while `n` tasks
//!   queue in `lock().await`; its release and each guard's drop hand the
//!   lock to the next waiter (the runtime thread awaits the holder, then
//!   takes the lock last: it is fair);
//! - `tokio-io`: one task reads the byte (`read` into a 2-byte buffer: the
//!   short read clears the readiness), writes the next one from the other,
//!   unregistered end of the pair and awaits `readable()`, `n` times.

#[path = "common/engine_cases.rs"]
mod engine_cases;
#[path = "common/tokio_cases.rs"]
mod tokio_cases;

use futoin_asyncsteps::AsyncTool;

/// Operations a batch.
const N: usize = 20_000;

/// A case of one side.
enum Case {
    /// Ours, on one warm loop.
    Ours(fn(&mut AsyncTool, usize)),
    /// Tokio's, on one warm `current_thread` runtime.
    Tokio(fn(&tokio::runtime::Runtime, usize)),
}

/// The case named `name`, if there is one.
fn case(name: &str) -> Option<Case> {
    use Case::{Ours, Tokio};
    Some(match name {
        "simple" => Ours(engine_cases::simple),
        "external" => Ours(engine_cases::external),
        "repeat-add" => Ours(engine_cases::repeat_add),
        "error" => Ours(engine_cases::error_recovered),
        "await" => Ours(engine_cases::await_ready),
        "external-thread" => Ours(engine_cases::external_thread),
        "future-wake" => Ours(engine_cases::future_wake),
        "timer" => Ours(engine_cases::timer),
        "timer-timeout" => Ours(engine_cases::timer_timeout),
        "sync-grant" => Ours(engine_cases::sync_grant),
        #[cfg(unix)]
        "io" => Ours(engine_cases::io_readable),
        "tokio-simple" => Tokio(tokio_cases::simple),
        "tokio-external" => Tokio(tokio_cases::external),
        "tokio-external-thread" => Tokio(tokio_cases::external_thread),
        "tokio-future-wake" => Tokio(tokio_cases::future_wake),
        "tokio-timer" => Tokio(tokio_cases::timer),
        "tokio-timer-timeout" => Tokio(tokio_cases::timer_timeout),
        "tokio-sync-grant" => Tokio(tokio_cases::sync_grant),
        #[cfg(unix)]
        "tokio-io" => Tokio(tokio_cases::io_readable),
        _ => return None,
    })
}

/// Runs `<case> <batches>`: the loop (or runtime) is made once, and the
/// first batch warms it.
fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_default();
    let batches: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(1);
    let Some(run) = case(&name) else {
        eprintln!(
            "usage: instructions <simple|external|repeat-add|error|await|external-thread|\
             future-wake|timer|timer-timeout|sync-grant|io> <batches>\n       \
             instructions tokio-<simple|external|external-thread|future-wake|timer|\
             timer-timeout|sync-grant|io> <batches>"
        );
        std::process::exit(2);
    };
    match run {
        Case::Ours(run) => {
            let mut tool = AsyncTool::new().expect("loop");
            for _ in 0..batches {
                run(&mut tool, N);
            }
        }
        Case::Tokio(run) => {
            let rt = tokio_cases::runtime();
            for _ in 0..batches {
                run(&rt, N);
            }
        }
    }
}
