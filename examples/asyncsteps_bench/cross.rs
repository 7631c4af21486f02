//! Workloads across loops: one `Runtime` of L loops against one tokio
//! `multi_thread` runtime of L workers.

use crate::bench::{from_fn, our_runtime, tokio_multi, Batch, Bench, Ctx, Make, Side};
use crate::xloop::{
    handover_share, ours_contended, ours_ping, ours_ping_placed, ours_xthread, tokio_contended,
    tokio_xthread, Latch,
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

/// Player B of the tokio ping-pongs: returns every counter until A's
/// sender closes.
async fn tokio_player_b(
    mut rx_ab: tokio::sync::mpsc::Receiver<usize>,
    tx_ba: tokio::sync::mpsc::Sender<usize>,
) {
    while let Some(v) = rx_ab.recv().await {
        tx_ba.send(v).await.expect("A listens");
    }
}

/// Player A of the tokio ping-pongs: `rounds` round trips, timed.
async fn tokio_player_a(
    tx_ab: tokio::sync::mpsc::Sender<usize>,
    mut rx_ba: tokio::sync::mpsc::Receiver<usize>,
    rounds: usize,
) -> Duration {
    let t = Instant::now();
    for i in 0..rounds {
        tx_ab.send(i).await.expect("B listens");
        black_box(rx_ba.recv().await.expect("B answers"));
    }
    t.elapsed()
}

/// Two tasks on the `multi_thread` runtime passing a counter over two
/// `mpsc` channels of capacity 1, both spawned from outside (tokio places
/// them, and usually runs both on one worker).
fn tokio_ping(rt: &tokio::runtime::Runtime, rounds: usize) -> Duration {
    rt.block_on(async move {
        let (tx_ab, rx_ab) = tokio::sync::mpsc::channel::<usize>(1);
        let (tx_ba, rx_ba) = tokio::sync::mpsc::channel::<usize>(1);
        let b = tokio::spawn(tokio_player_b(rx_ab, tx_ba));
        let a = tokio::spawn(tokio_player_a(tx_ab, rx_ba, rounds));
        let el = a.await.expect("A");
        b.await.expect("B");
        el
    })
}

/// The same two tasks on the `multi_thread` runtime, B spawned by A (tokio
/// puts it on A's worker, which may lose it to an idle worker's steal).
fn tokio_ping_placed(rt: &tokio::runtime::Runtime, rounds: usize) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move {
            let (tx_ab, rx_ab) = tokio::sync::mpsc::channel::<usize>(1);
            let (tx_ba, rx_ba) = tokio::sync::mpsc::channel::<usize>(1);
            let b = tokio::spawn(tokio_player_b(rx_ab, tx_ba));
            let el = tokio_player_a(tx_ab, rx_ba, rounds).await;
            b.await.expect("B");
            el
        })
        .await
        .expect("A")
    })
}

/// One `current_thread` runtime per thread of the pinned ping-pong.
pub struct PinnedTokio {
    rts: Vec<tokio::runtime::Runtime>,
    pin: bool,
}

impl PinnedTokio {
    /// `loops` runtimes (at most two are used); their threads go to cores
    /// 0 and 1 when `pin`, as our loops do.
    fn new(loops: usize, pin: bool) -> Self {
        let rts = (0..loops.clamp(1, 2))
            .map(|_| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime")
            })
            .collect();
        PinnedTokio { rts, pin }
    }
}

/// Pins the calling thread to core `i` when asked to (and the core
/// exists).
fn pin_to(i: usize, pin: bool) {
    if pin {
        if let Some(c) = core_affinity::get_core_ids().and_then(|ids| ids.get(i).copied()) {
            core_affinity::set_for_current(c);
        }
    }
}

/// A and B each on a `current_thread` runtime of its own thread (both on
/// one when there is one): tokio's side of our two loops, one flow each.
fn tokio_ping_pinned(p: &PinnedTokio, rounds: usize) -> Duration {
    let (tx_ab, rx_ab) = tokio::sync::mpsc::channel::<usize>(1);
    let (tx_ba, rx_ba) = tokio::sync::mpsc::channel::<usize>(1);
    // Each player is a task of its runtime (as with `multi_thread`), which
    // the runtime's thread awaits.
    match &p.rts[..] {
        // On a thread of its own, pinned as our one loop is.
        [rt] => std::thread::scope(|sc| {
            sc.spawn(|| {
                pin_to(0, p.pin);
                rt.block_on(async move {
                    let b = tokio::spawn(tokio_player_b(rx_ab, tx_ba));
                    let el = tokio::spawn(tokio_player_a(tx_ab, rx_ba, rounds))
                        .await
                        .expect("A");
                    b.await.expect("B");
                    el
                })
            })
            .join()
            .expect("A")
        }),
        [ra, rb, ..] => std::thread::scope(|sc| {
            sc.spawn(|| {
                pin_to(1, p.pin);
                rb.block_on(rb.spawn(tokio_player_b(rx_ab, tx_ba)))
                    .expect("B");
            });
            sc.spawn(|| {
                pin_to(0, p.pin);
                ra.block_on(ra.spawn(tokio_player_a(tx_ab, rx_ba, rounds)))
                    .expect("A")
            })
            .join()
            .expect("A")
        }),
        [] => unreachable!("at least one runtime"),
    }
}

/// The tokio side of a ping-pong: runs `n` round trips, timed.
type Peer = Box<dyn Fn(usize) -> Duration>;

/// A ping-pong workload of 20,000 round trips a batch: `ours` on our
/// runtime, and the tokio side `peer` makes for the context.
fn ping_pong_with(ours: fn(&Runtime, usize) -> Duration, peer: fn(&Ctx) -> Peer) -> Make {
    Box::new(move |side, ctx| {
        let n = ctx.size(20_000, 500);
        match side {
            Side::Ours => {
                let rt = our_runtime(ctx);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: ours(&rt, n),
                })
            }
            Side::Tokio => {
                let run = peer(ctx);
                from_fn(move || Batch {
                    ops: n as u64,
                    time: run(n),
                })
            }
        }
    })
}

/// Ours: A on loop 0, B on loop 1 (the same loop with one); tokio: both
/// tasks spawned from outside onto `multi_thread` (it places them).
pub fn ping_pong_split() -> Make {
    ping_pong_with(ours_ping, |ctx| {
        let rt = tokio_multi(ctx.loops);
        Box::new(move |n| tokio_ping(&rt, n))
    })
}

/// Each side pinned to two threads: ours, A on loop 0 and B on loop 1;
/// tokio, A and B each on a `current_thread` runtime on its own thread
/// (one of each with one loop).
pub fn ping_pong_pinned() -> Make {
    ping_pong_with(ours_ping, |ctx| {
        let p = PinnedTokio::new(ctx.loops, ctx.pin);
        Box::new(move |n| tokio_ping_pinned(&p, n))
    })
}

/// Each side placing the partner itself: ours, A spawned from outside and
/// B from A's step (default placement); tokio, A spawned onto
/// `multi_thread` and B by A (`tokio::spawn`).
pub fn ping_pong_placed() -> Make {
    ping_pong_with(ours_ping_placed, |ctx| {
        let rt = tokio_multi(ctx.loops);
        Box::new(move |n| tokio_ping_placed(&rt, n))
    })
}

// -------------------------------------------------------- contended mutex

/// Our side of `contended-mutex`, which notes the share of the Mutex's
/// handovers that crossed loops.
struct Contended {
    rt: Runtime,
    flows: usize,
    sections: usize,
}

impl Bench for Contended {
    fn batch(&mut self) -> Batch {
        Batch {
            ops: (self.flows * self.sections) as u64,
            time: ours_contended(&self.rt, self.flows, self.sections),
        }
    }

    fn note(&self) -> Option<String> {
        let (crossed, all) = handover_share(&self.rt);
        (all > 0).then(|| {
            format!(
                "{crossed} of {all} handovers crossed loops ({:.0}%)",
                100.0 * crossed as f64 / all as f64
            )
        })
    }
}

pub fn contended_mutex() -> Make {
    Box::new(|side, ctx| {
        let (flows, sections) = if ctx.quick { (20, 20) } else { (100, 200) };
        let ops = (flows * sections) as u64;
        match side {
            Side::Ours => Box::new(Contended {
                rt: our_runtime(ctx),
                flows,
                sections,
            }),
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
