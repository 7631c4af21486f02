//! The tokio peers of the resume-path cases of `engine_cases.rs`, counted
//! by `examples/instructions.rs` as `tokio-<case>`: each is written as a
//! tokio user would, in the shape of ours (one task where ours has one
//! flow, `n` tasks where ours starts `n` flows), on a `current_thread`
//! runtime (ours runs one loop on one thread).
//!
//! Where all tasks are in the runtime's local queue, "run until all ended"
//! is a task spawned last and awaited: the current-thread scheduler runs
//! its local queue in FIFO order, so when that task has run, every task
//! queued before it has too (the approach of `tokio_simple` and
//! `tokio_external` in `benches/engine.rs`). Each case checks at its end
//! that no task is left alive.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// The runtime the tokio cases run on: one thread, I/O and time drivers.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Asserts that every task of the batch has ended.
fn all_ended(rt: &Runtime) {
    assert_eq!(rt.metrics().num_alive_tasks(), 0, "tasks left alive");
}

/// Spawns `n` empty detached tasks, then awaits one more task spawned last
/// (FIFO: when it has run, all others have). Ours: `n` detached flows of
/// one empty step.
pub fn simple(rt: &Runtime, n: usize) {
    rt.block_on(async move {
        for _ in 0..n {
            drop(tokio::spawn(async {}));
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    all_ended(rt);
}

/// Spawns `n` detached tasks that each await a oneshot receiver and read
/// the `i32`; returns their senders.
fn start_waiting(n: usize) -> Vec<oneshot::Sender<i32>> {
    let mut txs = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = oneshot::channel::<i32>();
        txs.push(tx);
        drop(tokio::spawn(async move {
            let v = rx.await.expect("value");
            black_box(v);
        }));
    }
    txs
}

/// `n` tasks each await a oneshot receiver; once all have parked (a task
/// spawned after them has run), every sender sends its index from the
/// runtime thread, and a last task spawned after the sends is awaited
/// (FIFO: the woken tasks have run by then). Ours: `external`.
pub fn external(rt: &Runtime, n: usize) {
    rt.block_on(async move {
        let txs = start_waiting(n);
        // Let every task run up to its await.
        tokio::spawn(async {}).await.expect("barrier");
        for (i, tx) in txs.into_iter().enumerate() {
            tx.send(i as i32).expect("receiver alive");
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    all_ended(rt);
}

/// As [`external`], but another OS thread sends, and is joined before the
/// runtime runs on (ours: `external_thread`). Wakes from outside the
/// runtime go to its inject queue, which a task spawned from the runtime
/// thread would overtake, so the last task is one more waiting task of
/// the same shape whose sender the thread sends on last: the inject queue
/// is FIFO too, so when it has run, all others have.
pub fn external_thread(rt: &Runtime, n: usize) {
    rt.block_on(async move {
        let mut txs = start_waiting(n);
        let (tx, rx) = oneshot::channel::<i32>();
        txs.push(tx);
        let last = tokio::spawn(async move {
            let v = rx.await.expect("value");
            black_box(v);
        });
        tokio::spawn(async {}).await.expect("barrier");
        std::thread::scope(|sc| {
            sc.spawn(move || {
                for (i, tx) in txs.into_iter().enumerate() {
                    tx.send(i as i32).expect("receiver alive");
                }
            })
            .join()
            .expect("sending thread");
        });
        last.await.expect("last task");
    });
    all_ended(rt);
}

/// A future that is pending once, waking itself with `wake_by_ref`, then
/// ready: `YieldOnce` of `engine_cases.rs` with a plain `()` output.
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// One task awaiting [`YieldOnce`] `n` times (ours: one flow whose
/// `repeat(n)` body awaits it): the wake while polled queues the task
/// again, and the scheduler polls it once more.
pub fn future_wake(rt: &Runtime, n: usize) {
    in_one_task(rt, async move {
        for _ in 0..n {
            YieldOnce::default().await;
        }
    });
}

/// Runs `f` as one task of `rt` (as ours runs one flow) until it ends.
fn in_one_task(rt: &Runtime, f: impl Future<Output = ()> + Send + 'static) {
    rt.block_on(async move { tokio::spawn(f).await.expect("loop task") });
    all_ended(rt);
}

/// One task awaiting `tokio::time::sleep(Duration::ZERO)` `n` times (ours:
/// a `repeat(n)` iteration completed by a zero-delay `deferred` callback).
///
/// `sleep(ZERO)` is tokio's zero-delay timer wait and it does register a
/// timer: the deadline (now) is rounded up to the next millisecond tick,
/// while the wheel has only processed up to the tick of its last turn
/// (rounded down), so the entry goes into the wheel and fires when the
/// driver reaches the next tick (it completes at once only when the
/// clock is exactly on a tick). Each iteration therefore parks the thread
/// in the driver until the next millisecond, fires the entry and wakes
/// the task: about 1 ms of real time an operation, which the instruction
/// count does not see beyond the park and its return. Ours runs a zero
/// delay on the next loop pass without waiting for a clock tick.
/// `yield_now()` would not touch the timer at all, and a paused clock
/// would not be the runtime as users run it, so this is the shape.
pub fn timer(rt: &Runtime, n: usize) {
    in_one_task(rt, async move {
        for _ in 0..n {
            tokio::time::sleep(Duration::ZERO).await;
        }
    });
}

/// One task awaiting `tokio::time::timeout(Duration::ZERO, pending())`
/// `n` times and recovering the `Elapsed` error (ours: a `repeat(n)`
/// iteration with a step on `set_timeout(ZERO)` whose handler recovers
/// the `Timeout`). The timer is registered and fires as in [`timer`]:
/// about 1 ms of real time an operation.
pub fn timer_timeout(rt: &Runtime, n: usize) {
    in_one_task(rt, async move {
        for _ in 0..n {
            let r = tokio::time::timeout(Duration::ZERO, std::future::pending::<()>()).await;
            assert!(r.is_err(), "the timeout fires");
        }
    });
}

thread_local! {
    /// Sections the waiting tasks of [`sync_grant`] ran (all tasks run on
    /// the runtime thread).
    static GRANTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A task holds a `tokio::sync::Mutex` while it awaits a oneshot receiver;
/// `n` tasks then queue in `lock().await`, and the holder's sender sends:
/// it releases the lock to the first waiter, whose guard drop at its end
/// hands it to the next (ours: `sync_grant`). The runtime thread awaits
/// the holder (ours: `block_on` of its promise), then takes the lock once
/// more: the lock is fair (FIFO), so it gets it after every waiter's
/// section (ours: `run_until_idle`).
pub fn sync_grant(rt: &Runtime, n: usize) {
    rt.block_on(async move {
        let m = Arc::new(tokio::sync::Mutex::new(()));
        let (tx, rx) = oneshot::channel::<()>();
        let holder = {
            let m = m.clone();
            tokio::spawn(async move {
                let _g = m.lock().await;
                rx.await.expect("release");
            })
        };
        // The holder takes the lock and waits.
        tokio::spawn(async {}).await.expect("barrier");
        GRANTED.set(0);
        for _ in 0..n {
            let m = m.clone();
            drop(tokio::spawn(async move {
                let _g = m.lock().await;
                GRANTED.set(GRANTED.get() + 1);
            }));
        }
        // Every waiter queues in `lock()`.
        tokio::spawn(async {}).await.expect("barrier");
        assert_eq!(GRANTED.get(), 0, "the waiters wait");
        tx.send(()).expect("holder waits");
        holder.await.expect("holder");
        drop(m.lock().await);
        assert_eq!(GRANTED.get(), n);
    });
    all_ended(rt);
}

/// One task that waits `n` times for a Unix socket to be readable (ours:
/// `io_readable`): each iteration reads the byte the wait before it
/// announced, writes the next one from the other end, and awaits
/// `readable()`; the driver's poll finds it readable and wakes the task.
///
/// As in ours, only the reading end is registered with the runtime
/// (`from_std` of one end of a std socket pair); the other end is a
/// blocking std socket written directly. The byte is read with
/// `AsyncReadExt::read` into a 2-byte buffer: the data is there, so it
/// completes at once with one `read` call, and its short read clears the
/// cached readiness (tokio does that on epoll), so `readable()` waits for
/// the driver's poll. `try_read` keeps the readiness after a successful
/// read, so `readable()` would return at once, without a park.
#[cfg(unix)]
pub fn io_readable(rt: &Runtime, n: usize) {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    in_one_task(rt, async move {
        let mut conn = tokio::net::UnixStream::from_std(ours).expect("register");
        for i in 0..n {
            if i > 0 {
                let mut b = [0u8; 2];
                let got = conn.read(&mut b).await.expect("read");
                assert_eq!((got, b[0]), (1, (i - 1) as u8));
            }
            theirs.write_all(&[i as u8]).expect("write");
            conn.readable().await.expect("readable");
        }
        let mut b = [0u8; 2];
        let got = conn.read(&mut b).await.expect("read");
        assert_eq!((got, b[0]), (1, (n - 1) as u8));
    });
}
