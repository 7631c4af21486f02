//! Heap allocations per operation once the loop's pools are warm, counted
//! with a counting global allocator (deterministic: it counts, it does not
//! time).
//!
//! Each case runs its operation in batches on one loop: a warm-up batch
//! fills the pools, then the allocations of a measured batch are counted on
//! the threads that take part (the loop's, and a completing thread's where
//! the case has one) and divided by the batch's operations. Run with
//! `cargo test --test allocations -- --nocapture` to see every figure.

// The engine bench's cases (the same code `scripts/instructions.sh`
// counts): a sync grant, a timer, the once-pending future.
#[path = "../examples/common/engine_cases.rs"]
mod engine_cases;

use engine_cases::YieldOnce;
use futoin_asyncsteps::sync::{Limiter, LimiterOptions, Mutex, Throttle};
use futoin_asyncsteps::{AsyncSteps, AsyncTool, Error, ExternalHandle, Step, StepResult};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

struct Counting;

/// Allocations (`alloc`, `alloc_zeroed`, `realloc`) by counted threads.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is forwarded unchanged to `System`; the counter is a
// plain atomic and the thread-local is const-initialised with no
// destructor, so nothing here allocates or unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(l) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc_zeroed(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: a block `System` gave out, with its layout.
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Relaxed);
        }
        // SAFETY: a block `System` gave out, with its layout.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Operations of a measured batch.
const OPS: usize = 2_000;

/// Allocations per operation of `batch(tool, n)` (which performs `n`
/// operations): after two warm-up batches, the allocations of a batch of
/// `2 * OPS` operations less those of one of `OPS`, divided by `OPS`, so
/// what a batch costs once (its root flow, its promise) cancels out.
fn per_op(tool: &mut AsyncTool, mut batch: impl FnMut(&mut AsyncTool, usize)) -> f64 {
    batch(tool, 2 * OPS);
    batch(tool, 2 * OPS);
    let mut count = |n| {
        let before = ALLOCS.load(Relaxed);
        COUNTED.with(|c| c.set(true));
        batch(tool, n);
        COUNTED.with(|c| c.set(false));
        ALLOCS.load(Relaxed) - before
    };
    let one = count(OPS);
    let two = count(2 * OPS);
    (two as f64 - one as f64) / OPS as f64
}

/// One flow a batch; `steps` makes its steps.
fn flows(tool: &mut AsyncTool, n: usize, steps: fn(&mut AsyncSteps)) {
    for _ in 0..n {
        let mut root = AsyncSteps::new();
        steps(&mut root);
        root.execute(tool);
    }
    tool.run_until_idle().expect("loop");
}

/// One flow whose `repeat(n)` body runs `body` once an operation.
fn repeated(tool: &mut AsyncTool, n: usize, body: fn(&mut Step<'_>) -> StepResult) {
    let mut root = AsyncSteps::new();
    root.repeat(n, move |s, _| body(s));
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

fn cases() -> Vec<(&'static str, f64)> {
    let mut tool = AsyncTool::new().expect("loop");
    tool.set_unhandled_error_hook(|e| panic!("unhandled: {e}"));
    let t = &mut tool;
    let m = Mutex::new(1, None);
    let th = Throttle::new(1_000_000, Duration::from_secs(3600), None);
    let l = Limiter::new(LimiterOptions {
        concurrent: 1,
        rate: 1_000_000,
        period: Duration::from_secs(3600),
        ..Default::default()
    });
    let mut out = vec![
        (
            "simple flow",
            per_op(t, |t, n| {
                flows(t, n, |r| {
                    r.add(|_, ()| Ok(()));
                })
            }),
        ),
        (
            "sub-step",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.add(|_, ()| Ok(()));
                    Ok(())
                })
            }),
        ),
        (
            "parallel of 2",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    let mut p = s.parallel();
                    for _ in 0..2 {
                        p.add(|_, ()| Ok(()));
                    }
                    Ok(())
                })
            }),
        ),
        (
            "parallel of 8",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    let mut p = s.parallel();
                    for _ in 0..8 {
                        p.add(|_, ()| Ok(()));
                    }
                    Ok(())
                })
            }),
        ),
        (
            "parallel of 2 in a new flow",
            per_op(t, |t, n| {
                flows(t, n, |r| {
                    r.parallel().add(|_, ()| Ok(())).add(|_, ()| Ok(()));
                    r.add(|_, ()| Ok(()));
                })
            }),
        ),
        (
            "loop iteration",
            per_op(t, |t, n| repeated(t, n, |_| Ok(()))),
        ),
        (
            "repeat(1)",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.repeat(1, |_, _| Ok(()));
                    Ok(())
                })
            }),
        ),
        (
            "error recovered at its level",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.add_catch(|s, ()| s.error("Failed", "here"), |s, _| s.success(()));
                    Ok(())
                })
            }),
        ),
        (
            "error recovered 3 levels up",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.add_catch(
                        |s, ()| {
                            s.add(|s, ()| {
                                s.add(|s, ()| s.error("Failed", "deep"));
                                Ok(())
                            });
                            Ok(())
                        },
                        |s, _| s.success(()),
                    );
                    Ok(())
                })
            }),
        ),
        (
            "await a ready future",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.await_future(async { Ok::<_, Error>(()) });
                    Ok(())
                })
            }),
        ),
        (
            "await a rejected future",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.add_catch(
                        |s, ()| {
                            s.await_future(async { Err::<(), _>(Error::new("Rejected")) });
                            Ok(())
                        },
                        |s, _| s.success(()),
                    );
                    Ok(())
                })
            }),
        ),
        (
            "await a once-pending future",
            per_op(t, |t, n| {
                repeated(t, n, |s| {
                    s.await_future(YieldOnce::default());
                    Ok(())
                })
            }),
        ),
        (
            // 4,000 flows await at once: more than the loop kept before
            // its pools followed the peak of flows.
            "await a once-pending future in each of many flows",
            per_op(t, |t, n| {
                flows(t, n, |r| {
                    r.add(|s, ()| {
                        s.await_future(YieldOnce::default());
                        Ok(())
                    });
                })
            }),
        ),
    ];
    out.push((
        "wait_external completed on the loop",
        per_op(t, |t, n| {
            flows(t, n, |r| {
                r.add(|s, ()| {
                    HANDLES.with_borrow_mut(|v| v.push(s.wait_external()));
                    Ok(())
                });
            });
            // Drained in place: the vector keeps its room for the next batch.
            HANDLES.with_borrow_mut(|hs| {
                for h in hs.drain(..) {
                    h.success(()).expect("complete");
                }
            });
            t.run_until_idle().expect("loop");
        }),
    ));
    out.push((
        "wait_external completed from another thread",
        per_op(t, |t, n| {
            flows(t, n, |r| {
                r.add(|s, ()| {
                    HANDLES.with_borrow_mut(|v| v.push(s.wait_external()));
                    Ok(())
                });
            });
            let mut hs = HANDLES.with_borrow_mut(std::mem::take);
            let counted = counted();
            // The vector comes back, empty, with its room for the next batch.
            let hs = std::thread::scope(|sc| {
                sc.spawn(move || {
                    COUNTED.with(|c| c.set(counted));
                    for h in hs.drain(..) {
                        h.success(()).expect("complete");
                    }
                    COUNTED.with(|c| c.set(false));
                    hs
                })
                .join()
                .expect("completing thread")
            });
            HANDLES.set(hs);
            t.run_until_idle().expect("loop");
        }),
    ));
    out.push(("wait_io readiness wait", per_op(t, readiness_waits)));
    out.push((
        "sync granted to a queued flow",
        per_op(t, engine_cases::sync_grant),
    ));
    out.push((
        "deferred timer completing a waiting step",
        per_op(t, engine_cases::timer),
    ));
    // Last: a Throttle's period timer stays pending on the loop (an hour).
    for (name, obj) in [
        ("sync on a free Mutex", Sync::M(m)),
        ("sync on a free Throttle", Sync::T(th)),
        ("sync on a free Limiter", Sync::L(l)),
    ] {
        let n = per_op(t, |t, n| {
            let mut root = AsyncSteps::new();
            let obj = obj.clone();
            root.repeat(n, move |s, _| {
                match &obj {
                    Sync::M(m) => s.sync(m, |_, ()| Ok(())),
                    Sync::T(th) => s.sync(th, |_, ()| Ok(())),
                    Sync::L(l) => s.sync(l, |_, ()| Ok(())),
                };
                Ok(())
            });
            let p = root.promise::<()>(t);
            t.block_on(p).expect("sync flow");
        });
        out.push((name, n));
    }
    out
}

/// One flow that waits `n` times for a readable socket, reading one byte
/// after each wait (a thread writes them, one at a time, as the flow
/// acknowledges them through a channel).
fn readiness_waits(tool: &mut AsyncTool, n: usize) {
    use futoin_asyncsteps::io::mio::{net::TcpStream, Interest};
    use futoin_asyncsteps::TakeOnce;
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client =
        std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("non-blocking");
    let server = TakeOnce::new(TcpStream::from_std(server));
    // Acknowledged through a counter and an unpark, which allocate
    // nothing (a channel allocates a block now and then).
    let acked = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = acked.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..n {
            client.write_all(b"x").expect("write");
            while seen.load(Relaxed) <= i {
                std::thread::park();
            }
        }
    });
    let ack = TakeOnce::new((acked, writer.thread().clone()));
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let conn = s.stack(server.take()?);
        let ack = s.stack(ack.take()?);
        // Iteration `i` reads byte `i - 1` (the wait before it said it is
        // there), acknowledges it, and waits for byte `i`.
        s.repeat(n + 1, move |s, i| {
            if i > 0 {
                let mut b = [0u8; 1];
                let got = s.stack_get(conn)?.read(&mut b).expect("read");
                assert_eq!(got, 1);
                let (acked, writer) = s.stack_get(ack)?;
                acked.fetch_add(1, Relaxed);
                writer.unpark();
            }
            if i < n {
                s.wait_io(conn, Interest::READABLE)?;
            }
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("readiness flow");
    writer.join().expect("writer");
}

#[derive(Clone)]
enum Sync {
    M(Mutex),
    T(Throttle),
    L(Limiter),
}

thread_local! {
    static HANDLES: RefCell<Vec<ExternalHandle>> = const { RefCell::new(Vec::new()) };
}

/// The most allocations per operation each case may make. The goal is 0
/// for all; a case above 0 gives the reason for what is left, and a change
/// that brings one down lowers its bound here.
const BOUNDS: &[(&str, f64)] = &[
    ("simple flow", 0.0),
    ("sub-step", 0.0),
    ("parallel of 2", 0.0),
    ("parallel of 8", 0.0),
    ("parallel of 2 in a new flow", 0.0),
    ("loop iteration", 0.0),
    ("repeat(1)", 0.0),
    ("error recovered at its level", 0.0),
    ("error recovered 3 levels up", 0.0),
    ("await a ready future", 0.0),
    ("await a rejected future", 0.0),
    ("await a once-pending future", 0.0),
    ("await a once-pending future in each of many flows", 0.0),
    ("wait_external completed on the loop", 0.0),
    // Was 0.016: the cross-thread queue allocated a block every 63
    // messages (crossbeam's `Injector`); it is now a double buffer.
    ("wait_external completed from another thread", 0.0),
    ("wait_io readiness wait", 0.0),
    // The sync object's queue of waiters (crossbeam's lock-free
    // `Injector`: the sync objects stay lock-free) allocates a block every
    // 63 waiters (0.016); a waiter's node comes from the thread's pool
    // (it was 1 more before).
    ("sync granted to a queued flow", 0.02),
    // Was 1: the loop boxed every `deferred` callback; one of a word (the
    // handle here) is now kept in place. What is left comes from real
    // time, not from the operation: a timer whose millisecond the loop's
    // wheel has not reached goes into that tick's slot, and a slot takes
    // a kept vector or, when the clock crossed more milliseconds during
    // the batch than ever before, a new one (0.001 in some runs: two
    // vectors in a batch of 2,000 timers). Regression: the bound was 0,
    // and this test failed in some runs.
    ("deferred timer completing a waiting step", 0.002),
    ("sync on a free Mutex", 0.0),
    ("sync on a free Throttle", 0.0),
    // Was 0.004: when the step budget ran out with the sync step (about
    // once in 250 iterations here), the Limiter's general path boxed its
    // own section (the Throttle and the made user's section, 56 bytes).
    ("sync on a free Limiter", 0.0),
];

#[test]
fn allocations_per_operation_once_warm() {
    let got = cases();
    for (name, n) in &got {
        println!("{name:<45} {n:.4}");
    }
    assert_eq!(got.len(), BOUNDS.len(), "a case without a bound");
    for ((name, n), (bound_name, bound)) in got.iter().zip(BOUNDS) {
        assert_eq!(name, bound_name);
        assert!(
            n <= bound,
            "{name}: {n:.2} allocations per operation, at most {bound} expected"
        );
    }
}
