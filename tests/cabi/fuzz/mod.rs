//! Fuzzing of the C interface (FTN12 2.7) through its function tables, with
//! proptest. Every call goes through a `FutoInAsyncStepsAPI` table from
//! `unsafe extern "C" fn` callbacks, as a C program would make it.
//!
//! - `args_decoding_never_crashes_or_leaks`: arbitrary `FutoInArgs` (any
//!   type flags, strings of each width with arbitrary code units, lengths or
//!   NUL-terminated, NULL pointers, gaps) given to `success()`, inline or
//!   later from another thread or from the loop. The next C step gets the
//!   values exactly as a model of the header says (strings as UTF-8, arrays
//!   and custom objects untouched), may move some out or forward them, or
//!   the flow fails with the `InternalError` whose `error_info` the model
//!   predicts. Every cleanup runs exactly once, on the value it was given.
//! - `call_sequences_never_crash_hang_or_leak`: generated programs of
//!   vtable calls made inside step callbacks: sub-steps (NULL callbacks
//!   too), parallels and calls on their handles, state variables (whose
//!   allocate may call the handle again), stack memory of any size,
//!   success/handle_error with good and bad args and codes, timeouts,
//!   cancel callbacks (that may use their cancelled step's handle),
//!   external completion from the loop and from other threads, loop/repeat
//!   with break/continue and labels (NULL, unknown, not UTF-8), addSync
//!   with a Mutex, a Throttle, a foreign FutoInSync or NULL, scheduled
//!   callbacks and odd task handles, calls on stale handles, from other
//!   threads and with NULL handles, step calls made on the root, new
//!   instances freed in every documented way (from their own step, from a
//!   thread, from their unhandled-error callback, after the runtime), a
//!   root run twice, and execute() after the runtime was freed. Loops
//!   break by themselves after a few iterations, a waiting step always has
//!   a completion or a timeout, and a case stops adding work after
//!   `BUDGET` callbacks, so every program must end. Checked: each flow
//!   ends exactly once, nothing hangs (a case runs on a thread of its own,
//!   so even a deadlocked call is reported), documented return values
//!   (isValid, is_same_thread, NULL results for NULL or foreign handles, a
//!   cancelled task never runs), and after `futoin_runtime_free` every
//!   cleanup ran exactly once per allocation (values, state variables,
//!   stack blocks, foreign unlock per successful lock).
//! - `calls::regressions`: the bugs found, kept as regression tests.
//!
//! Memory errors that do not crash (a write to freed memory) are caught
//! under AddressSanitizer: `RUSTFLAGS=-Zsanitizer=address
//! ASAN_OPTIONS=allocator_may_return_null=1 cargo +nightly test --release
//! --target x86_64-unknown-linux-gnu --test cabi fuzz::` (the allocator
//! option lets the huge `stack()` requests fail as they do without it).
//!
//! Environment: `FUZZ_CASES` (cases per property; default 4000 args cases
//! and 2500 programs, about 30 s for a debug `cargo test --test cabi
//! fuzz::` on two cores; raise it for long runs), `FUZZ_SEED` (default
//! fixed, so a plain run is reproducible), `FUZZ_HANG_MS` (how long a flow
//! may take before it counts as hung; default 30000), `FUZZ_TRACE` (print
//! each case before it runs, for a crash that kills the process).

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{
    futoin_asyncsteps_new, futoin_mutex_new, futoin_runtime_free, futoin_runtime_new,
    futoin_sync_free, futoin_throttle_new, FutoInRuntime,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr};
use std::io::Write;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Shared plumbing
// ---------------------------------------------------------------------------

/// How long a flow may take before it counts as hung (`FUZZ_HANG_MS`).
fn hang() -> Duration {
    static H: OnceLock<Duration> = OnceLock::new();
    *H.get_or_init(|| Duration::from_millis(env_u64("FUZZ_HANG_MS", 30_000)))
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}")),
        Err(_) => default,
    }
}

/// A runner with `FUZZ_CASES` (or `default`) cases and a seed from
/// `FUZZ_SEED` mixed with `salt` (each property its own stream).
fn runner(default: u32, salt: u64) -> (TestRunner, u32, u64) {
    let cases = env_u64("FUZZ_CASES", default.into()) as u32;
    let seed = env_u64("FUZZ_SEED", 0x00F7_12C0);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&salt.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    (TestRunner::new_with_rng(config, rng), cases, seed)
}

/// Runs a whole case on a thread of its own: a call into the runtime that
/// never returns (a deadlock) is then reported as a hang instead of
/// blocking the test. A hung driver is left behind.
fn bounded<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, TestCaseError> + Send + 'static,
) -> Result<T, TestCaseError> {
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("cabi-fuzz-case".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })
        .expect("a driver thread");
    // The flow's own wait, the rerun's, and the shutdown.
    match rx.recv_timeout(hang() * 3 + Duration::from_secs(5)) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => Err(TestCaseError::fail(
            "a call into the runtime never returned (deadlock or hang)",
        )),
    }
}

/// With `FUZZ_TRACE` set, prints each case before it runs: the last one
/// printed is the culprit of a crash that kills the process before
/// proptest can shrink it.
fn trace(case: &impl std::fmt::Debug) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("FUZZ_TRACE").is_some()) {
        let _ = writeln!(std::io::stderr(), "case: {case:?}");
    }
}

/// Locks, also after a panic elsewhere (callbacks must never panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Calls the entry `$f` of the table of handle `$t` with the arguments
/// given (the handle itself, NULL or another one: the table is `$t`'s).
macro_rules! call {
    ($t:expr, $f:ident ( $($a:expr),* $(,)? )) => {{
        let t: *mut FutoInAsyncSteps = $t;
        // SAFETY: `t` is a handle the runtime gave out and still readable
        // (step handles are never freed; roots are used only before their
        // free), so its table is a live static.
        let f = unsafe { (*(*t).api).$f }.expect(concat!(stringify!($f), " entry"));
        // SAFETY: the entry of that table, with arguments its contract in
        // the header allows (NULL handles and bad input included: the
        // runtime documents what each gets).
        unsafe { f($($a),*) }
    }};
}

/// A raw pointer moved to another thread (the tests keep what it points to
/// alive until every such thread is joined).
#[derive(Clone, Copy)]
struct Addr(usize);
impl Addr {
    fn of<T>(p: *const T) -> Self {
        Addr(p as usize)
    }
    fn ptr<T>(self) -> *mut T {
        self.0 as *mut T
    }
}

/// What the test has seen, summed over all cases of a property.
#[derive(Clone, Default)]
struct Coverage(std::sync::Arc<Mutex<BTreeMap<String, u64>>>);
impl Coverage {
    fn hit(&self, k: impl Into<String>) {
        *lock(&self.0).entry(k.into()).or_default() += 1;
    }
    fn report(&self, what: &str) {
        let m = lock(&self.0);
        let line: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(std::io::stderr(), "{what} coverage: {}", line.join(", "));
    }
}

// ---- values: static types and a registry of every value made ---------------

/// Every type flag with and without a counting cleanup: `ty(flags, c)`.
fn ty(flags: u8, cleanup: bool) -> &'static FutoInType {
    static TABLE: OnceLock<&'static [FutoInType]> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let v: Vec<FutoInType> = (0..512usize)
            .map(|i| FutoInType {
                flags: (i % 256) as u8,
                cleanup: if i >= 256 { Some(count_cleanup) } else { None },
            })
            .collect();
        Box::leak(v.into_boxed_slice())
    });
    &t[flags as usize + if cleanup { 256 } else { 0 }]
}

/// A value given to the runtime: what its cleanup must see.
struct ValRec {
    case: u64,
    ty: usize,
    bits: u64,
    length: u32,
    /// Cleanups expected (0 for a type without one).
    expect: u32,
    hits: u32,
    changed: Option<String>,
}

static VALUES: Mutex<BTreeMap<u64, ValRec>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Cleanups of values no case knows (after their case ended, or twice
/// removed): always a bug.
static STRAY: AtomicUsize = AtomicUsize::new(0);
static NEXT_CASE: AtomicU64 = AtomicU64::new(1);

/// A value as plain numbers (it crosses threads): its `custom_data` is the
/// registry id the counting cleanup finds it by.
#[derive(Clone, Copy, Debug)]
struct RawVal {
    ty: usize,
    bits: u64,
    id: u64,
    length: u32,
}

impl RawVal {
    fn new(case: u64, t: &'static FutoInType, bits: u64, length: u32) -> Self {
        let id = NEXT_ID.fetch_add(1, SeqCst);
        let expect = t.cleanup.is_some() as u32;
        let ty = t as *const FutoInType as usize;
        lock(&VALUES).insert(
            id,
            ValRec {
                case,
                ty,
                bits,
                length,
                expect,
                hits: 0,
                changed: None,
            },
        );
        RawVal {
            ty,
            bits,
            id,
            length,
        }
    }

    fn to_c(self) -> FutoInBinaryValue {
        FutoInBinaryValue {
            type_: self.ty as *const FutoInType,
            v: FutoInValueData { u64: self.bits },
            custom_data: self.id as *mut c_void,
            length: self.length,
        }
    }
}

/// The cleanup of every value the tests make: counts, and checks that it
/// gets the value as it was given.
unsafe extern "C" fn count_cleanup(v: *mut FutoInBinaryValue) {
    // SAFETY: the runtime (or a test acting as C) calls a value's cleanup
    // with a pointer to the value.
    let v = unsafe { &*v };
    let id = v.custom_data as u64;
    // SAFETY: our values' unions are written whole (`RawVal::to_c`).
    let bits = unsafe { v.v.u64 };
    let mut m = lock(&VALUES);
    match m.get_mut(&id) {
        Some(r) => {
            r.hits += 1;
            if r.ty != v.type_ as usize || r.bits != bits || r.length != v.length {
                r.changed = Some(format!(
                    "cleanup got type {:#x} bits {bits:#x} length {}, was given type {:#x} \
                     bits {:#x} length {}",
                    v.type_ as usize, v.length, r.ty, r.bits, r.length
                ));
            }
        }
        None => {
            STRAY.fetch_add(1, SeqCst);
        }
    }
}

/// Removes the case's values from the registry; the problems found.
fn settle_values(case: u64) -> Vec<String> {
    let mut m = lock(&VALUES);
    let ids: Vec<u64> = m
        .iter()
        .filter(|(_, r)| r.case == case)
        .map(|(k, _)| *k)
        .collect();
    let mut bad = Vec::new();
    for id in ids {
        let r = m.remove(&id).expect("listed");
        if r.hits != r.expect {
            bad.push(format!(
                "value {id} (flags {:#04x}): cleanup ran {} times, expected {}",
                // SAFETY: `ty` is one of the static types of `ty()`.
                unsafe { (*(r.ty as *const FutoInType)).flags },
                r.hits,
                r.expect
            ));
        }
        if let Some(c) = r.changed {
            bad.push(format!("value {id}: {c}"));
        }
    }
    bad
}

/// `futoin_reset_binval`, as C code that moved a value out calls it.
fn reset_binval(v: &mut FutoInBinaryValue) {
    // SAFETY: a value the runtime gave (or we made): its type is NULL or a
    // live static type whose cleanup takes this value.
    if let Some(t) = unsafe { v.type_.as_ref() } {
        if let Some(f) = t.cleanup {
            // SAFETY: the value's own cleanup, once.
            unsafe { f(v) };
        }
    }
    *v = FutoInBinaryValue::EMPTY;
}

/// Zeroed memory arrays point into (never written; the runtime never reads
/// arrays, it passes them on).
static ARRAY_MEM: [u64; 1024] = [0; 1024];

/// A fresh runtime of `threads` loops; freed by `free_runtime`.
fn new_runtime(threads: u32) -> *mut FutoInRuntime {
    let rt = futoin_runtime_new(threads);
    assert!(!rt.is_null(), "futoin_runtime_new");
    rt
}

fn free_runtime(rt: *mut FutoInRuntime) {
    // SAFETY: a runtime from `new_runtime`, freed once, from the test
    // thread (not one of its loops).
    unsafe { futoin_runtime_free(rt) };
}

/// `stateVariable(bsi, NULL, "error_info", NULL, NULL)` as a Rust string.
fn error_info(bsi: *mut FutoInAsyncSteps) -> Option<String> {
    let p = call!(
        bsi,
        state_variable(bsi, null_mut(), c"error_info".as_ptr(), None, None)
    );
    (!p.is_null()).then(|| {
        // SAFETY: the runtime gives a NUL-terminated string or NULL, valid
        // until the next step runs.
        unsafe { CStr::from_ptr(p as *const c_char) }
            .to_string_lossy()
            .into()
    })
}

/// A C string argument as Rust text (for error codes).
fn text(p: *const c_char) -> String {
    if p.is_null() {
        return "<NULL>".into();
    }
    // SAFETY: the runtime gives NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// Declared after `call!`: a `macro_rules!` macro is in scope only below
// its definition.
mod args;
mod calls;
