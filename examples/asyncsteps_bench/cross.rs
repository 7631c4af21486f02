//! Workloads across loops: one `Runtime` of L loops against one tokio
//! `multi_thread` runtime of L workers.

use crate::bench::{from_fn, our_runtime, tokio_multi, Batch, Ctx, Make, Side};
use crate::xloop::{
    ours_contended, ours_ping, ours_xthread, tokio_contended, tokio_xthread, Latch,
};
use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
use std::hint::black_box;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- xthread

pub fn xthread() -> Make {
    Box::new(|side, ctx| {
        let n = ctx.size(100_000, 2_000);
        match side {
            Side::Ours => {
                let rt = our_runtime(ctx);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: ours_xthread(&rt, n),
                })
            }
            Side::Tokio => {
                let rt = tokio_multi(ctx.loops);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: tokio_xthread(&rt, n),
                })
            }
        }
    })
}

// -------------------------------------------------------------- ping-pong

/// Two tasks on the `multi_thread` runtime passing a counter over two
/// `mpsc` channels of capacity 1.
fn tokio_ping(rt: &tokio::runtime::Runtime, rounds: usize) -> Duration {
    rt.block_on(async move {
        let (tx_ab, mut rx_ab) = tokio::sync::mpsc::channel::<usize>(1);
        let (tx_ba, mut rx_ba) = tokio::sync::mpsc::channel::<usize>(1);
        let b = tokio::spawn(async move {
            while let Some(v) = rx_ab.recv().await {
                tx_ba.send(v).await.expect("A listens");
            }
        });
        let a = tokio::spawn(async move {
            let t = Instant::now();
            for i in 0..rounds {
                tx_ab.send(i).await.expect("B listens");
                black_box(rx_ba.recv().await.expect("B answers"));
            }
            t.elapsed()
        });
        let el = a.await.expect("A");
        b.await.expect("B");
        el
    })
}

pub fn ping_pong() -> Make {
    Box::new(|side, ctx| {
        let n = ctx.size(20_000, 500);
        match side {
            Side::Ours => {
                let rt = our_runtime(ctx);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: ours_ping(&rt, n),
                })
            }
            Side::Tokio => {
                let rt = tokio_multi(ctx.loops);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: tokio_ping(&rt, n),
                })
            }
        }
    })
}

// -------------------------------------------------------- contended mutex

pub fn contended_mutex() -> Make {
    Box::new(|side, ctx| {
        let (flows, sections) = if ctx.quick { (20, 20) } else { (100, 200) };
        let ops = (flows * sections) as u64;
        match side {
            Side::Ours => {
                let rt = our_runtime(ctx);
                from_fn(move || Batch {
                    ops,
                    time: ours_contended(&rt, flows, sections),
                })
            }
            Side::Tokio => {
                let rt = tokio_multi(ctx.loops);
                from_fn(move || Batch {
                    ops,
                    time: tokio_contended(&rt, flows, sections),
                })
            }
        }
    })
}

// ---------------------------------------------------------------- scaling

fn ours_scale(rt: &Runtime, flows: usize, iters: usize) -> Duration {
    let done = Latch::new(flows);
    let t = Instant::now();
    for f in 0..flows {
        let mut root = AsyncSteps::new();
        root.repeat(iters, move |_, i| {
            black_box(i.wrapping_mul(f));
            Ok(())
        });
        let d = done.clone();
        root.add(move |_, ()| {
            d.count_down();
            Ok(())
        });
        rt.execute(root);
    }
    done.wait();
    t.elapsed()
}

fn tokio_scale(rt: &tokio::runtime::Runtime, flows: usize, iters: usize) -> Duration {
    let done = Latch::new(flows);
    let t = Instant::now();
    for f in 0..flows {
        let d = done.clone();
        drop(rt.spawn(async move {
            for i in 0..iters {
                black_box(i.wrapping_mul(f));
                tokio::task::consume_budget().await;
            }
            d.count_down();
        }));
    }
    done.wait();
    t.elapsed()
}

pub fn scaling() -> Make {
    Box::new(|side, ctx| {
        let (flows, iters) = if ctx.quick {
            (200, 500)
        } else {
            (2_000, 5_000)
        };
        let ops = (flows * iters) as u64;
        match side {
            Side::Ours => {
                let rt = our_runtime(ctx);
                from_fn(move || Batch {
                    ops,
                    time: ours_scale(&rt, flows, iters),
                })
            }
            Side::Tokio => {
                let rt = tokio_multi(ctx.loops);
                from_fn(move || Batch {
                    ops,
                    time: tokio_scale(&rt, flows, iters),
                })
            }
        }
    })
}

// ----------------------------------------------------------------- timers

fn timer_ms(i: usize) -> u64 {
    1 + (i % 100) as u64
}

/// `n` root flows, each waiting on `set_timeout(1..=100 ms)` and
/// recovering in its error handler. Timed from the first spawn to the last
/// flow's end (so it includes up to 100 ms of waiting).
fn ours_timers(rt: &Runtime, n: usize) -> Duration {
    let done = Latch::new(n);
    let t = Instant::now();
    for i in 0..n {
        let mut root = AsyncSteps::new();
        let d = done.clone();
        root.add_catch(
            move |s, ()| {
                s.set_timeout(Duration::from_millis(timer_ms(i)));
                Ok(())
            },
            move |s, _| {
                d.count_down();
                s.success(())
            },
        );
        rt.execute(root);
    }
    done.wait();
    t.elapsed()
}

fn tokio_timers(rt: &tokio::runtime::Runtime, n: usize) -> Duration {
    let done = Latch::new(n);
    let t = Instant::now();
    for i in 0..n {
        let d = done.clone();
        drop(rt.spawn(async move {
            tokio::time::sleep(Duration::from_millis(timer_ms(i))).await;
            d.count_down();
        }));
    }
    done.wait();
    t.elapsed()
}

pub fn timers() -> Make {
    Box::new(|side, ctx: &Ctx| {
        let n = ctx.size(1_000_000, 10_000);
        match side {
            Side::Ours => {
                let rt = our_runtime(ctx);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: ours_timers(&rt, n),
                })
            }
            Side::Tokio => {
                let rt = tokio_multi(ctx.loops);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: tokio_timers(&rt, n),
                })
            }
        }
    })
}
