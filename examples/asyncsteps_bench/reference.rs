//! The reference implementations' benchmark cases: the JavaScript set
//! (one flow per operation, built and run on one loop) and the C++ set
//! ("Simple", "Parallel", "ParallelWaitLoop"). On L loops each case runs
//! on L threads at once, each with its own loop and its own objects
//! ([`crate::perloop`]); the tokio peers run on `current_thread` runtimes
//! the same way (no I/O or time driver: none of these cases needs one, and
//! it is tokio's fastest configuration).
//!
//! Ours builds each flow's model and executes it, as the reference
//! benchmarks do; the tokio peer builds and spawns one task per flow.
//! Where the reference case ends with a `done()` step, both sides end with
//! a step (statement) that counts the operation, and the batch checks the
//! count.

use crate::bench::{Make, Side};
use crate::perloop::PerLoop;
use futoin_asyncsteps::sync::{Limiter, LimiterOptions, Mutex, Throttle};
use futoin_asyncsteps::{AsyncSteps, AsyncTool, Error, ExternalHandle, Pairs, Step, StepResult};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{oneshot, Semaphore};

// ------------------------------------------------------------------ state

/// One of our loops with the sync objects of the reference benchmark
/// (each loop has its own: the cases are single-loop ones).
pub struct Ours {
    tool: AsyncTool,
    mutex: Mutex,
    throttle: Throttle,
    limiter: Limiter,
}

fn ours_init() -> Ours {
    let mut tool = AsyncTool::new().expect("loop");
    // "error handling" ends flows with an error nobody handles.
    tool.set_unhandled_error_hook(|_| {});
    Ours {
        tool,
        mutex: Mutex::new(1, None),
        // Never full: the admission cost only (the reference resets the
        // period before each flow, which this API does not offer).
        throttle: Throttle::new(u32::MAX, Duration::from_secs(1), None),
        limiter: Limiter::new(LimiterOptions {
            concurrent: u32::MAX,
            rate: u32::MAX,
            ..Default::default()
        }),
    }
}

/// One tokio `current_thread` runtime with the peers' sync objects.
pub struct Tok {
    rt: tokio::runtime::Runtime,
    mutex: Arc<tokio::sync::Mutex<()>>,
    /// The throttle peer: a token bucket (permits taken and forgotten; a
    /// refill task would add them back each period, never needed here).
    rate: Arc<Semaphore>,
    /// The limiter's concurrency part.
    conc: Arc<Semaphore>,
}

fn tok_init() -> Tok {
    Tok {
        rt: tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("tokio runtime"),
        mutex: Arc::new(tokio::sync::Mutex::new(())),
        rate: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
        conc: Arc::new(Semaphore::new(u32::MAX as usize)),
    }
}

thread_local! {
    /// Operations that reached their last step, on this thread.
    static DONE: Cell<u64> = const { Cell::new(0) };
    /// Waiting steps, as the C++ benchmark keeps them in a deque.
    static HANDLES: RefCell<Vec<ExternalHandle>> = const { RefCell::new(Vec::new()) };
    /// The tokio peers' senders, likewise.
    static SENDERS: RefCell<Vec<oneshot::Sender<i32>>> = const { RefCell::new(Vec::new()) };
    /// The C++ benchmarks' `remaining` counter.
    static REMAINING: Cell<i64> = const { Cell::new(0) };
}

fn done() {
    DONE.set(DONE.get() + 1);
}

fn take_done() -> u64 {
    DONE.replace(0)
}

/// The last step of a flow: counts it (the reference's `done()`).
fn done_step(_: &mut Step<'_>, _: ()) -> StepResult {
    done();
    Ok(())
}

fn empty_step(_: &mut Step<'_>, _: ()) -> StepResult {
    Ok(())
}

/// The error the tokio peers raise: what a Rust program would define (a
/// plain type, no allocation).
#[derive(Debug)]
pub struct AppError {
    pub code: &'static str,
    pub info: &'static str,
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.info)
    }
}

impl std::error::Error for AppError {}

fn app_error() -> AppError {
    AppError {
        code: "SomeError",
        info: "SomeInfo",
    }
}

// ---------------------------------------------------------------- drivers

/// Executes `n` flows from `make`, then runs the loop until it is idle.
fn flows(o: &mut Ours, n: usize, mut make: impl FnMut() -> AsyncSteps) -> u64 {
    for _ in 0..n {
        make().execute(&mut o.tool);
    }
    o.tool.run_until_idle().expect("loop");
    n as u64
}

/// Executes `n` flows that each end with [`done_step`], runs the loop until
/// all are done and checks the count.
fn counted_flows(o: &mut Ours, n: usize, mut make: impl FnMut() -> AsyncSteps) -> u64 {
    take_done();
    for _ in 0..n {
        make().execute(&mut o.tool);
    }
    while DONE.get() < n as u64 {
        o.tool.iterate(None).expect("loop");
    }
    assert_eq!(take_done(), n as u64, "every flow reached its last step");
    n as u64
}

/// Spawns `n` detached tasks, then awaits one more spawned last: the
/// `current_thread` run queue is FIFO, so by then all have run.
fn tasks<F>(t: &Tok, n: usize, mut make: impl FnMut() -> F) -> u64
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    t.rt.block_on(async move {
        for _ in 0..n {
            drop(tokio::spawn(make()));
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    n as u64
}

/// Spawns `n` detached tasks that each call [`done`] last, and waits until
/// all have.
fn counted_tasks<F>(t: &Tok, n: usize, mut make: impl FnMut() -> F) -> u64
where
    F: Future<Output = ()> + Send + 'static,
{
    take_done();
    t.rt.block_on(async move {
        for _ in 0..n {
            drop(tokio::spawn(make()));
        }
        while DONE.get() < n as u64 {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(take_done(), n as u64, "every task reached its end");
    n as u64
}

// ------------------------------------------------------------ the JS set

pub fn ours_simple_execute(o: &mut Ours, n: usize) -> u64 {
    flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(empty_step);
        r
    })
}

pub fn tokio_simple_execute(t: &mut Tok, n: usize) -> u64 {
    tasks(t, n, || async {})
}

pub fn ours_add_step(_: &mut Ours, n: usize) -> u64 {
    for _ in 0..n {
        let mut r = AsyncSteps::new();
        r.add(empty_step);
        black_box(r);
    }
    n as u64
}

type BoxFut = Pin<Box<dyn Future<Output = ()> + Send>>;

pub fn tokio_add_step(_: &mut Tok, n: usize) -> u64 {
    for _ in 0..n {
        let f: BoxFut = Box::pin(async {});
        drop(black_box(f));
    }
    n as u64
}

pub fn ours_add_step_catch(_: &mut Ours, n: usize) -> u64 {
    for _ in 0..n {
        let mut r = AsyncSteps::new();
        r.add_catch(empty_step, |_, _| Ok(()));
        black_box(r);
    }
    n as u64
}

pub fn tokio_add_step_catch(_: &mut Tok, n: usize) -> u64 {
    for _ in 0..n {
        let f: BoxFut = Box::pin(async {
            if let Err(e) = async { Ok::<(), AppError>(()) }.await {
                black_box(e);
            }
        });
        drop(black_box(f));
    }
    n as u64
}

pub fn ours_inner_add_step(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.add(empty_step);
            Ok(())
        });
        r.add(done_step);
        r
    })
}

async fn inner_step() {
    black_box(());
}

pub fn tokio_inner_add_step(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        inner_step().await;
        done();
    })
}

pub fn ours_success_step(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.success_step(());
        r.add(done_step);
        r
    })
}

pub fn ours_inner_success_step(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.success_step(());
            Ok(())
        });
        r.add(done_step);
        r
    })
}

async fn success_value() -> u32 {
    black_box(1)
}

pub fn tokio_success_step(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        black_box(success_value().await);
        done();
    })
}

pub fn tokio_inner_success_step(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        black_box(async { success_value().await }.await);
        done();
    })
}

pub fn ours_parallel(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.parallel().add(empty_step).add(empty_step);
        r.add(done_step);
        r
    })
}

pub fn tokio_parallel(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        tokio::join!(inner_step(), inner_step());
        done();
    })
}

pub fn ours_error_handling(o: &mut Ours, n: usize) -> u64 {
    flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| s.error("SomeError", "SomeInfo"));
        r
    })
}

pub fn tokio_error_handling(t: &mut Tok, n: usize) -> u64 {
    // A detached task whose output is an error nobody reads.
    tasks(t, n, || async {
        Err::<(), AppError>(black_box(app_error()))
    })
}

pub fn ours_error_recovery(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add_catch(
            |s, ()| s.error("SomeError", "SomeInfo"),
            |s, _| s.success(()),
        );
        r.add(done_step);
        r
    })
}

async fn fails() -> Result<(), AppError> {
    Err(black_box(app_error()))
}

pub fn tokio_error_recovery(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        if let Err(e) = fails().await {
            black_box(e);
        }
        done();
    })
}

pub fn ours_error_recovery3(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add_catch(
            |s, ()| {
                s.add(|s, ()| {
                    s.add(|s, ()| s.error("SomeError", "SomeInfo"));
                    Ok(())
                });
                Ok(())
            },
            |s, _| s.success(()),
        );
        r.add(done_step);
        r
    })
}

async fn level2() -> Result<(), AppError> {
    fails().await?;
    Ok(())
}

async fn level1() -> Result<(), AppError> {
    level2().await?;
    Ok(())
}

pub fn tokio_error_recovery3(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        if let Err(e) = level1().await {
            black_box(e);
        }
        done();
    })
}

pub fn ours_cancel(o: &mut Ours, n: usize) -> u64 {
    for _ in 0..n {
        let mut r = AsyncSteps::new();
        r.add(empty_step).add(empty_step);
        r.execute(&mut o.tool).cancel();
    }
    o.tool.run_until_idle().expect("loop");
    n as u64
}

pub fn tokio_cancel(t: &mut Tok, n: usize) -> u64 {
    t.rt.block_on(async move {
        for _ in 0..n {
            tokio::spawn(async {
                inner_step().await;
                inner_step().await;
            })
            .abort();
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    n as u64
}

fn ours_repeat(o: &mut Ours, n: usize, count: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.repeat(count, |_, i| {
            black_box(i);
            Ok(())
        });
        r.add(done_step);
        r
    })
}

/// The peer of an empty loop body: one `consume_budget().await` per
/// iteration, tokio's cooperative yield point (a task yields every 128
/// units, as a flow yields every 1024 steps). An always-ready await would
/// compile to a plain `for` loop and measure nothing of the runtime.
fn tokio_repeat(t: &mut Tok, n: usize, count: usize) -> u64 {
    counted_tasks(t, n, move || async move {
        for i in 0..count {
            black_box(i);
            tokio::task::consume_budget().await;
        }
        done();
    })
}

pub fn ours_repeat1(o: &mut Ours, n: usize) -> u64 {
    ours_repeat(o, n, 1)
}

pub fn tokio_repeat1(t: &mut Tok, n: usize) -> u64 {
    tokio_repeat(t, n, 1)
}

pub fn ours_repeat1000(o: &mut Ours, n: usize) -> u64 {
    ours_repeat(o, n, 1000)
}

pub fn tokio_repeat1000(t: &mut Tok, n: usize) -> u64 {
    tokio_repeat(t, n, 1000)
}

// The reference's test data: 1000 items, built once.

fn items_vec() -> &'static Vec<u32> {
    static V: OnceLock<Vec<u32>> = OnceLock::new();
    V.get_or_init(|| (1..=1000).rev().collect())
}

fn items_map() -> &'static BTreeMap<String, u32> {
    static M: OnceLock<BTreeMap<String, u32>> = OnceLock::new();
    M.get_or_init(|| (1..=1000).map(|i| (format!("key_{i}"), i)).collect())
}

fn items_hash() -> &'static HashMap<String, u32> {
    static M: OnceLock<HashMap<String, u32>> = OnceLock::new();
    M.get_or_init(|| (1..=1000).map(|i| (format!("key_{i}"), i)).collect())
}

pub fn ours_for_each_vec(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.for_each(Pairs(items_vec().iter().enumerate()), |_, k, v| {
                black_box((k, v));
                Ok(())
            });
            Ok(())
        });
        r.add(done_step);
        r
    })
}

pub fn tokio_for_each_vec(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        for (k, v) in items_vec().iter().enumerate() {
            black_box((k, v));
            tokio::task::consume_budget().await;
        }
        done();
    })
}

pub fn ours_for_each_map(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.for_each(Pairs(items_map().iter()), |_, k, v| {
                black_box((k, v));
                Ok(())
            });
            Ok(())
        });
        r.add(done_step);
        r
    })
}

pub fn tokio_for_each_map(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        for (k, v) in items_map().iter() {
            black_box((k, v));
            tokio::task::consume_budget().await;
        }
        done();
    })
}

pub fn ours_for_each_hash(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.for_each(Pairs(items_hash().iter()), |_, k, v| {
                black_box((k, v));
                Ok(())
            });
            Ok(())
        });
        r.add(done_step);
        r
    })
}

pub fn tokio_for_each_hash(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        for (k, v) in items_hash().iter() {
            black_box((k, v));
            tokio::task::consume_budget().await;
        }
        done();
    })
}

pub fn ours_await_ready(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.await_future(std::future::ready(Ok::<_, Error>((true,))));
            Ok(())
        });
        r.add(|_, (v,): (bool,)| {
            black_box(v);
            done();
            Ok(())
        });
        r
    })
}

pub fn tokio_await_ready(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        let v = std::future::ready(Ok::<bool, AppError>(true)).await;
        black_box(v.is_ok());
        done();
    })
}

pub fn ours_await_rejected(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.await_future_catch(
                std::future::ready(Err::<(bool,), _>(Error::with_info("Fail", "rejected"))),
                |s, _| s.success(()),
            );
            Ok(())
        });
        r.add(done_step);
        r
    })
}

pub fn tokio_await_rejected(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        match std::future::ready(Err::<bool, AppError>(app_error())).await {
            Ok(v) => {
                black_box(v);
            }
            Err(e) => {
                black_box(e);
            }
        }
        done();
    })
}

/// Pending once (waking itself at once), then ready: a future whose value
/// comes a loop turn later.
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = Result<(), Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0 {
            Poll::Ready(Ok(()))
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

pub fn ours_await_yield(o: &mut Ours, n: usize) -> u64 {
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            s.await_future(YieldOnce::default());
            Ok(())
        });
        r.add(done_step);
        r
    })
}

pub fn tokio_await_yield(t: &mut Tok, n: usize) -> u64 {
    counted_tasks(t, n, || async {
        tokio::task::yield_now().await;
        done();
    })
}

pub fn ours_sync_mutex(o: &mut Ours, n: usize) -> u64 {
    let m = o.mutex.clone();
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.sync(&m, empty_step);
        r.add(done_step);
        r
    })
}

pub fn tokio_sync_mutex(t: &mut Tok, n: usize) -> u64 {
    let m = t.mutex.clone();
    counted_tasks(t, n, || {
        let m = m.clone();
        async move {
            let g = m.lock().await;
            black_box(&g);
            drop(g);
            done();
        }
    })
}

/// One "Mutex blocking" operation: A holds the mutex while B, started
/// inside A's section, queues for it (B tells A it is about to, then
/// syncs); A then leaves and B gets the mutex. B's last step starts the
/// next operation, so operations run one after another, as the reference
/// runs each after the previous one's `done()`.
fn ours_blocking_op(m: Mutex, left: usize) -> AsyncSteps {
    let m2 = m.clone();
    let mut a = AsyncSteps::new();
    a.sync(&m, move |s, ()| {
        let me = s.wait_external();
        let mut b = AsyncSteps::new();
        let m3 = m2.clone();
        b.add(move |_, ()| {
            me.success(()).expect("A waits");
            Ok(())
        });
        b.sync(&m2, empty_step);
        b.add(move |s, ()| {
            done();
            if left > 1 {
                ours_blocking_op(m3, left - 1).execute(s.tool());
            }
            Ok(())
        });
        b.execute(s.tool());
        Ok(())
    });
    a
}

pub fn ours_sync_mutex_blocking(o: &mut Ours, n: usize) -> u64 {
    take_done();
    ours_blocking_op(o.mutex.clone(), n).execute(&mut o.tool);
    while DONE.get() < n as u64 {
        o.tool.iterate(None).expect("loop");
    }
    assert_eq!(take_done(), n as u64, "every operation ended");
    n as u64
}

fn tokio_blocking_op(m: Arc<tokio::sync::Mutex<()>>, left: usize) -> BoxFut {
    Box::pin(async move {
        let g = m.lock().await;
        let (tx, rx) = oneshot::channel::<()>();
        let m2 = m.clone();
        drop(tokio::spawn(async move {
            tx.send(()).expect("A waits");
            let g = m2.lock().await;
            black_box(&g);
            drop(g);
            done();
            if left > 1 {
                drop(tokio::spawn(tokio_blocking_op(m2, left - 1)));
            }
        }));
        rx.await.expect("B started");
        drop(g);
    })
}

pub fn tokio_sync_mutex_blocking(t: &mut Tok, n: usize) -> u64 {
    take_done();
    let m = t.mutex.clone();
    t.rt.block_on(async move {
        drop(tokio::spawn(tokio_blocking_op(m, n)));
        while DONE.get() < n as u64 {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(take_done(), n as u64);
    n as u64
}

pub fn ours_sync_throttle(o: &mut Ours, n: usize) -> u64 {
    let th = o.throttle.clone();
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.sync(&th, empty_step);
        r.add(done_step);
        r
    })
}

pub fn tokio_sync_throttle(t: &mut Tok, n: usize) -> u64 {
    let rate = t.rate.clone();
    counted_tasks(t, n, || {
        let rate = rate.clone();
        async move {
            rate.acquire().await.expect("open").forget();
            done();
        }
    })
}

pub fn ours_sync_limiter(o: &mut Ours, n: usize) -> u64 {
    let l = o.limiter.clone();
    counted_flows(o, n, || {
        let mut r = AsyncSteps::new();
        r.sync(&l, empty_step);
        r.add(done_step);
        r
    })
}

pub fn tokio_sync_limiter(t: &mut Tok, n: usize) -> u64 {
    let (rate, conc) = (t.rate.clone(), t.conc.clone());
    counted_tasks(t, n, || {
        let (rate, conc) = (rate.clone(), conc.clone());
        async move {
            let c = conc.acquire().await.expect("open");
            rate.acquire().await.expect("open").forget();
            black_box(&c);
            drop(c);
            done();
        }
    })
}

// ----------------------------------------------------------- the C++ set

/// "Simple": start one flow and turn the loop once, flow after flow.
pub fn ours_cpp_simple(o: &mut Ours, n: usize) -> u64 {
    for _ in 0..n {
        let mut r = AsyncSteps::new();
        r.add(empty_step);
        r.execute(&mut o.tool);
        o.tool.iterate(Some(Duration::ZERO)).expect("loop");
    }
    o.tool.run_until_idle().expect("loop");
    n as u64
}

/// Spawn one task and await it, task after task.
pub fn tokio_cpp_simple(t: &mut Tok, n: usize) -> u64 {
    t.rt.block_on(async move {
        for _ in 0..n {
            tokio::spawn(async {}).await.expect("task");
        }
    });
    n as u64
}

/// "Parallel": `n` flows wait in `wait_external()`; all are then completed
/// with 1 from the loop thread, which the next step subtracts.
pub fn ours_cpp_parallel(o: &mut Ours, n: usize) -> u64 {
    REMAINING.set(n as i64);
    for _ in 0..n {
        let mut r = AsyncSteps::new();
        r.add(|s, ()| {
            let h = s.wait_external();
            HANDLES.with_borrow_mut(|v| v.push(h));
            Ok(())
        });
        r.add(|_, (v,): (i32,)| {
            REMAINING.set(REMAINING.get() - i64::from(v));
            Ok(())
        });
        r.execute(&mut o.tool);
    }
    o.tool.run_until_idle().expect("loop");
    for h in HANDLES.take() {
        h.success((1i32,)).expect("the step waits");
    }
    o.tool.run_until_idle().expect("loop");
    assert_eq!(REMAINING.get(), 0, "every flow completed");
    n as u64
}

pub fn tokio_cpp_parallel(t: &mut Tok, n: usize) -> u64 {
    REMAINING.set(n as i64);
    t.rt.block_on(async move {
        for _ in 0..n {
            let (tx, rx) = oneshot::channel::<i32>();
            SENDERS.with_borrow_mut(|v| v.push(tx));
            drop(tokio::spawn(async move {
                let v = rx.await.expect("value");
                REMAINING.set(REMAINING.get() - i64::from(v));
            }));
        }
        // Every task runs up to its await (FIFO).
        tokio::spawn(async {}).await.expect("barrier");
        for tx in SENDERS.take() {
            tx.send(1).expect("receiver alive");
        }
        tokio::spawn(async {}).await.expect("last task");
    });
    assert_eq!(REMAINING.get(), 0, "every task completed");
    n as u64
}

thread_local! {
    /// Completions counted by the wait-loop flows.
    static COMPLETED: Cell<u64> = const { Cell::new(0) };
}

/// Iterations of each wait-loop flow per batch.
const WAIT_LOOP_ITERS: usize = 10;

/// "ParallelWaitLoop": `flows` flows each loop on "wait, then subtract the
/// value"; a driver flow loops completing every waiting step with 1 until
/// `remaining` (flows × iterations) is used up, then stops them all with 0.
pub fn ours_cpp_wait_loop(o: &mut Ours, flows: usize) -> u64 {
    REMAINING.set((flows * WAIT_LOOP_ITERS) as i64);
    COMPLETED.set(0);
    for _ in 0..flows {
        let mut r = AsyncSteps::new();
        r.loop_(|s| {
            s.add(|s, ()| {
                let h = s.wait_external();
                HANDLES.with_borrow_mut(|v| v.push(h));
                Ok(())
            });
            s.add(|s, (v,): (i32,)| {
                if v == 0 {
                    return s.break_loop();
                }
                REMAINING.set(REMAINING.get() - i64::from(v));
                COMPLETED.set(COMPLETED.get() + 1);
                Ok(())
            });
            Ok(())
        });
        r.execute(&mut o.tool);
    }
    let mut d = AsyncSteps::new();
    d.loop_(move |s| {
        let stop = REMAINING.get() <= 0;
        if stop && HANDLES.with_borrow(Vec::len) < flows {
            return Ok(()); // let the last ones park
        }
        let v = i32::from(!stop);
        for h in HANDLES.take() {
            h.success((v,)).expect("the step waits");
        }
        if stop {
            return s.break_loop();
        }
        Ok(())
    });
    d.execute(&mut o.tool);
    o.tool.run_until_idle().expect("loop");
    assert!(HANDLES.with_borrow(Vec::is_empty));
    COMPLETED.get()
}

pub fn tokio_cpp_wait_loop(t: &mut Tok, flows: usize) -> u64 {
    REMAINING.set((flows * WAIT_LOOP_ITERS) as i64);
    COMPLETED.set(0);
    t.rt.block_on(async move {
        for _ in 0..flows {
            drop(tokio::spawn(async {
                loop {
                    let (tx, rx) = oneshot::channel::<i32>();
                    SENDERS.with_borrow_mut(|v| v.push(tx));
                    let v = rx.await.expect("value");
                    if v == 0 {
                        break;
                    }
                    REMAINING.set(REMAINING.get() - i64::from(v));
                    COMPLETED.set(COMPLETED.get() + 1);
                }
            }));
        }
        tokio::spawn(async move {
            loop {
                let stop = REMAINING.get() <= 0;
                if !stop || SENDERS.with_borrow(Vec::len) == flows {
                    let v = i32::from(!stop);
                    for tx in SENDERS.take() {
                        tx.send(v).expect("receiver alive");
                    }
                    if stop {
                        break;
                    }
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("driver");
        // The stopped tasks were woken before this one is spawned.
        tokio::spawn(async {}).await.expect("last task");
    });
    assert!(SENDERS.with_borrow(Vec::is_empty));
    COMPLETED.get()
}

// ---------------------------------------------------------------- builder

/// A workload's `make` for a single-loop case: `full`/`quick` operations
/// per loop per batch.
pub fn per_loop(
    ours: fn(&mut Ours, usize) -> u64,
    tokio: fn(&mut Tok, usize) -> u64,
    full: usize,
    quick: usize,
) -> Make {
    Box::new(move |side, ctx| {
        let n = ctx.size(full, quick);
        match side {
            Side::Ours => Box::new(PerLoop::new(ctx.loops, n, ours_init, ours)),
            Side::Tokio => Box::new(PerLoop::new(ctx.loops, n, tok_init, tokio)),
        }
    })
}
