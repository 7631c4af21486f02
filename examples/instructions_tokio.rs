//! The tokio peers of the cases of `examples/instructions.rs`
//! (`examples/common/tokio_cases.rs`), counted the same way, on
//! a `current_thread` runtime with its I/O and time drivers, built once like
//! our loop. Where ours runs the loop until idle, the peer awaits a task
//! spawned last (the local run queue is FIFO), unless said otherwise:
//! - `simple`: `n` empty tasks spawned detached;
//! - `external`: `n` tasks await a `oneshot::Receiver<i32>`; once all
//!   are parked, the runtime thread sends on every sender;
//! - `external-thread`: the same, the sends on another OS thread
//!   joined before the runtime runs on (the last waiting task, sent to last,
//!   ends the batch: those wakes go to the FIFO inject queue);
//! - `future-wake`: one task awaits the same once-pending future `n`
//!   times;
//! - `timer`: one task awaits `sleep(Duration::ZERO)` `n` times; tokio
//!   rounds the deadline up to the next millisecond tick, so each one
//!   registers a timer and parks the thread until that tick (about 1 ms
//!   of real time an operation);
//! - `timer-timeout`: one task awaits `timeout(Duration::ZERO,
//!   pending())` `n` times and recovers the `Elapsed` (the same timer);
//! - `sync-grant`: a task holds a `tokio::sync::Mutex` while `n` tasks
//!   queue in `lock().await`; its release and each guard's drop hand the
//!   lock to the next waiter (the runtime thread awaits the holder, then
//!   takes the lock last: it is fair);
//! - `io`: one task reads the byte (`read` into a 2-byte buffer: the
//!   short read clears the readiness), writes the next one from the other,
//!   unregistered end of the pair and awaits `readable()`, `n` times.
//!
//! ```text
//! cargo run --release --example instructions_tokio -- <case> <batches>
//! ```
//!
//! `scripts/instructions.sh --peer CASE...` counts both sides. A binary of
//! its own: in the same binary as ours, the peers moved how our functions
//! fall into codegen units, and our counts with them (up to 4%).

#[path = "common/tokio_cases.rs"]
mod tokio_cases;

/// Operations a batch (as `examples/instructions.rs`).
const N: usize = 20_000;

/// Runs `<case> <batches>` on one `current_thread` runtime, made once; the
/// first batch warms it.
fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let batches: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(1);
    let run: fn(&tokio::runtime::Runtime, usize) = match case.as_str() {
        "simple" => tokio_cases::simple,
        "external" => tokio_cases::external,
        "external-thread" => tokio_cases::external_thread,
        "future-wake" => tokio_cases::future_wake,
        "timer" => tokio_cases::timer,
        "timer-timeout" => tokio_cases::timer_timeout,
        "sync-grant" => tokio_cases::sync_grant,
        #[cfg(unix)]
        "io" => tokio_cases::io_readable,
        _ => {
            eprintln!(
                "usage: instructions_tokio <simple|external|external-thread|future-wake|timer|\
                 timer-timeout|sync-grant|io> <batches>"
            );
            std::process::exit(2);
        }
    };
    let rt = tokio_cases::runtime();
    for _ in 0..batches {
        run(&rt, N);
    }
}
