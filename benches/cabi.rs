//! The C interface (spec 2.7 binary vtable) against the Rust API, in the
//! same run.
//!
//! Run with `cargo bench --bench cabi`. The table times each case in
//! batches of one flow, the vtable side and the Rust side taking turns
//! (A B, B A, A B, ...), and prints per side the median time per loop
//! iteration with min–max and iterations/s, then the ratio vtable / Rust
//! (the cost of going through the C vtable; the goal is below 2) twice: of
//! the two medians, and as the median (min–max) of the ratios of
//! neighbouring batches, which a change of the machine's speed between
//! batches disturbs less. Under `cargo test --benches` everything runs
//! once at a tiny size, to keep the code working.
//!
//! The peer here is the crate's own Rust API on the same kind of runtime,
//! not tokio: the question is what the C vtable adds over the Rust calls it
//! wraps (the Rust API against tokio is in the `engine` bench).
//!
//! Both sides run one root flow on a 1-loop runtime (the vtable side's from
//! `futoin_runtime_new(1)`, the Rust side's from `Runtime::builder().loops(1)`,
//! both with the defaults otherwise, so both loop threads are pinned to core
//! 0; only one of them is busy at a time). One step of the flow adds
//! `repeat(N)`; a last step sends on a channel, which the timing thread
//! waits for. Timed: creating the root, adding its steps, starting it, all
//! N iterations, and the wake-up of the waiting thread (with N = 100,000
//! the start and the wake-up are a few microseconds of 10–40 ms).
//!
//! Cases:
//! - `sub-step + success(INT32)`: each iteration's body adds one sub-step
//!   that completes with one `i32` (the iteration index). Vtable: the body
//!   is a `RepeatCallback` calling `api->add`, the sub-step an
//!   `ExecuteCallback` calling `api->success` with one `FTN_TYPE_INT32`
//!   value. Rust: `s.repeat(N, |s, i| { s.add(move |s, ()| s.success((i
//!   as i32,))); Ok(()) })`.
//! - `empty body`: the body does nothing (implicit success): the
//!   per-iteration floor of a C callback against a Rust closure.
//!
//! All C-style callbacks are `unsafe extern "C" fn`s written in Rust, called
//! by the runtime through the same vtable a C program gets.

mod common;

use common::{full_run, profiling, Stats};
use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{
    futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new, FutoInRuntime,
};
use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
use std::ffi::{c_char, c_void, CStr};
use std::hint::black_box;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

const N: usize = 100_000;
const BATCHES: usize = 25;

/// How a flow ended: `Ok`, or the code of the error no handler took.
type End = Result<(), String>;

/// The loop body of a case.
#[derive(Clone, Copy)]
enum Body {
    /// Adds a sub-step that calls `success` with one `i32`.
    SubStep,
    /// Does nothing.
    Empty,
}

// ------------------------------------------------------------ vtable side

static INT32: FutoInType = FutoInType {
    flags: FTN_TYPE_INT32,
    cleanup: None,
};

/// What the vtable side's callbacks get as `data`: it lives in `main` until
/// after `futoin_runtime_free` has joined the loop thread, so it outlives
/// every callback that can get its address.
struct CCtx {
    tx: Sender<End>,
    n: usize,
}

// The loop thread reads a `CCtx` that `main` owns: it must be `Sync`.
const _: fn() = || {
    fn is_sync<T: Sync>() {}
    is_sync::<CCtx>();
};

/// The vtable of a handle.
///
/// # Safety
/// `bsi` is a live handle of this runtime: a root from
/// `futoin_asyncsteps_new` not yet freed, or the handle a running callback
/// got. Either starts with an `api` pointer to a static table.
unsafe fn api<'a>(bsi: *mut FutoInAsyncSteps) -> &'a FutoInAsyncStepsAPI {
    // SAFETY: caller's contract: a live handle, readable up to its `api`
    // field, which points to a table that lives for the whole program.
    unsafe { &*(*bsi).api }
}

/// The step that adds the loop (`data` is the `CCtx`).
unsafe extern "C" fn c_outer_sub(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    // SAFETY: `data` is the `CCtx` given to add(), alive until after the
    // runtime is freed; `bsi` is this callback's live handle, and the
    // `repeat` entry is always set.
    unsafe {
        let n = (*(data as *const CCtx)).n;
        api(bsi).repeat.unwrap()(
            bsi,
            std::ptr::null_mut(),
            n,
            Some(c_body_sub),
            std::ptr::null(),
        );
    }
}

/// [`c_outer_sub`] with the empty body.
unsafe extern "C" fn c_outer_empty(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    // SAFETY: as in `c_outer_sub`.
    unsafe {
        let n = (*(data as *const CCtx)).n;
        api(bsi).repeat.unwrap()(
            bsi,
            std::ptr::null_mut(),
            n,
            Some(c_body_empty),
            std::ptr::null(),
        );
    }
}

/// One iteration: adds the sub-step, passing the index as its `data` (an
/// integer in a pointer, never dereferenced).
unsafe extern "C" fn c_body_sub(bsi: *mut FutoInAsyncSteps, _: *mut c_void, i: usize) {
    // SAFETY: `bsi` is this callback's live handle; the `add` entry is
    // always set.
    unsafe { api(bsi).add.unwrap()(bsi, i as *mut c_void, Some(c_produce), None) };
}

/// One iteration doing nothing (implicit success).
unsafe extern "C" fn c_body_empty(_: *mut FutoInAsyncSteps, _: *mut c_void, i: usize) {
    black_box(i);
}

/// The sub-step: success with one INT32, the index carried in `data`.
unsafe extern "C" fn c_produce(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let mut out = FutoInArgs::EMPTY;
    out.args[0].type_ = &INT32;
    out.args[0].v.i32 = data as usize as i32;
    // SAFETY: `bsi` is this callback's live handle; `out` holds one INT32
    // (a static type without cleanup) and lives across the call.
    unsafe { api(bsi).success.unwrap()(bsi, &mut out) };
}

/// The last step: reports the end.
unsafe extern "C" fn c_done(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: `data` is the `CCtx` given to add(), alive until after the
    // runtime is freed.
    let ctx = unsafe { &*(data as *const CCtx) };
    ctx.tx.send(Ok(())).expect("the bench waits");
}

/// The unhandled-error callback: reports the error.
unsafe extern "C" fn c_unhandled(_: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: `data` is the `CCtx` given to execute(), alive until after the
    // runtime is freed; `code` is a NUL-terminated string valid during the
    // call.
    let (ctx, code) = unsafe { (&*(data as *const CCtx), CStr::from_ptr(code)) };
    let _ = ctx.tx.send(Err(code.to_string_lossy().into_owned()));
}

/// One flow of `ctx.n` iterations through the vtable, from creating the
/// root to the last step's message.
///
/// # Safety
/// `rt` is a live runtime from `futoin_runtime_new`, and `ctx` stays alive
/// (not moved or dropped) until `rt` has been freed: the flow's callbacks
/// get its address.
unsafe fn c_run(rt: *mut FutoInRuntime, ctx: &CCtx, rx: &Receiver<End>, body: Body) -> Duration {
    let data = ctx as *const CCtx as *mut c_void;
    let outer = match body {
        Body::SubStep => c_outer_sub,
        Body::Empty => c_outer_empty,
    };
    let t = Instant::now();
    // SAFETY: `rt` is live (caller's contract); `root` is checked non-NULL
    // and every call goes through its own vtable (all entries set), with
    // callbacks of the right signatures; `data` is `ctx`, which outlives
    // the runtime (caller's contract), so every callback can use it.
    let root = unsafe {
        let root = futoin_asyncsteps_new(rt);
        assert!(!root.is_null(), "futoin_asyncsteps_new");
        let api = api(root);
        api.add.unwrap()(root, data, Some(outer), None);
        api.add.unwrap()(root, data, Some(c_done), None);
        api.execute.unwrap()(root, data, Some(c_unhandled));
        root
    };
    let end = rx.recv().expect("the flow reports");
    let el = t.elapsed();
    // SAFETY: the root from `futoin_asyncsteps_new`, not freed yet, and
    // freed once (a root may be freed at any time, even while it runs).
    unsafe { api(root).free.unwrap()(root) };
    end.expect("the flow ends without error");
    el
}

// -------------------------------------------------------------- Rust side

/// The same flow through the Rust API.
fn rust_run(rt: &Runtime, tx: &Sender<End>, rx: &Receiver<End>, n: usize, body: Body) -> Duration {
    let t = Instant::now();
    let mut root = AsyncSteps::new();
    let etx = tx.clone();
    root.add_catch(
        move |s, ()| {
            match body {
                Body::SubStep => s.repeat(n, |s, i| {
                    s.add(move |s, ()| s.success((i as i32,)));
                    Ok(())
                }),
                Body::Empty => s.repeat(n, |_, i| {
                    black_box(i);
                    Ok(())
                }),
            };
            Ok(())
        },
        move |_, e| {
            let _ = etx.send(Err(e.code().to_owned()));
            Ok(())
        },
    );
    let dtx = tx.clone();
    root.add(move |_, ()| {
        dtx.send(Ok(())).expect("the bench waits");
        Ok(())
    });
    rt.execute_balanced(root);
    let end = rx.recv().expect("the flow reports");
    let el = t.elapsed();
    end.expect("the flow ends without error");
    el
}

// ------------------------------------------------------------ the table

/// Per-iteration ns of `batches` batches of each side, after one untimed
/// warm-up of each, and the ratio `a / b` of each pair of neighbouring
/// batches. The two sides take turns going first (A B, B A, A B, ...), so
/// a drift of the machine's speed weighs on both alike; the median of the
/// pair ratios is robust to a slow phase that hits one pair.
fn ab_paired(
    batches: usize,
    ops: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> (Stats, Stats, Stats) {
    a();
    b();
    let per_op = |d: Duration| d.as_nanos() as f64 / ops as f64;
    let (mut va, mut vb, mut vr) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..batches {
        let (x, y) = if k % 2 == 0 {
            let x = per_op(a());
            (x, per_op(b()))
        } else {
            let y = per_op(b());
            (per_op(a()), y)
        };
        va.push(x);
        vb.push(y);
        vr.push(x / y);
    }
    (Stats::of(va), Stats::of(vb), Stats::of(vr))
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn side(s: Stats) -> String {
    format!(
        "{:>8} ({:>8}–{:>8}) {:>6.2} M/s",
        fmt_ns(s.median),
        fmt_ns(s.min),
        fmt_ns(s.max),
        1e3 / s.median
    )
}

fn main() {
    if profiling() {
        return;
    }
    let full = full_run();
    let (batches, n) = if full { (BATCHES, N) } else { (1, N / 100) };

    let crt = futoin_runtime_new(1);
    assert!(!crt.is_null(), "futoin_runtime_new");
    let rrt = Runtime::builder()
        .loops(1)
        .thread_name("bench-rust")
        .build()
        .expect("runtime");
    let (ctx_tx, ctx_rx) = channel();
    let ctx = Box::new(CCtx { tx: ctx_tx, n });
    let (rtx, rrx) = channel();

    println!(
        "medians of {batches} batches of one flow with repeat({n}) on a 1-loop runtime, vtable \
         and Rust alternating (min–max in brackets); ratio = vtable / Rust of the medians, \
         pairs = median (min–max) of the ratios of neighbouring batches; goal < 2"
    );
    println!(
        "{:<26} | {:^38} | {:^38} | {:>5} | {:^19}",
        "case (time per iteration)", "C vtable", "Rust API", "ratio", "pairs"
    );
    println!(
        "{:-<26}-|-{:-<38}-|-{:-<38}-|-{:->5}-|-{:-<19}",
        "", "", "", "", ""
    );

    let mut rows = Vec::new();
    for (name, body) in [
        ("sub-step + success(INT32)", Body::SubStep),
        ("empty body", Body::Empty),
    ] {
        let (c, r, pairs) = ab_paired(
            batches,
            n,
            // SAFETY: `crt` is live until the end of `main`; `ctx` is
            // boxed and dropped only after `futoin_runtime_free(crt)`.
            || unsafe { c_run(crt, &ctx, &ctx_rx, body) },
            || rust_run(&rrt, &rtx, &rrx, n, body),
        );
        println!(
            "{:<26} | {} | {} | {:>4.2}x | {:>4.2}x ({:.2}–{:.2})",
            name,
            side(c),
            side(r),
            c.median / r.median,
            pairs.median,
            pairs.min,
            pairs.max
        );
        rows.push((name, c, r, pairs));
    }

    println!();
    for (name, c, r, pairs) in &rows {
        println!(
            "{name}: vtable {:.2} M iterations/s, Rust {:.2} M iterations/s, \
             +{:.1} ns per iteration through the vtable; ratio {:.2} (pairs {:.2}: {})",
            1e3 / c.median,
            1e3 / r.median,
            c.median - r.median,
            c.median / r.median,
            pairs.median,
            if pairs.median < 2.0 {
                "under 2"
            } else {
                "over the goal of 2"
            }
        );
    }

    drop(rrt);
    // SAFETY: the runtime from `futoin_runtime_new`, freed once, from a
    // thread that is not one of its loops; every root was freed.
    unsafe { futoin_runtime_free(crt) };
    // Only now: the loop thread is joined, no callback can use `ctx`.
    drop(ctx);
}
