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
//! - Named tests at the end: the bugs found, kept as regression tests.
//!
//! Memory errors that do not crash (a write to freed memory) are caught
//! under AddressSanitizer: `RUSTFLAGS=-Zsanitizer=address
//! ASAN_OPTIONS=allocator_may_return_null=1 cargo +nightly test --release
//! --target x86_64-unknown-linux-gnu --test cabi_fuzz` (the allocator
//! option lets the huge `stack()` requests fail as they do without it).
//!
//! Environment: `FUZZ_CASES` (cases per property; default 4000 args cases
//! and 2500 programs, about 30 s for a debug `cargo test --test cabi_fuzz`
//! on two cores; raise it for long runs), `FUZZ_SEED` (default fixed, so a
//! plain run is reproducible), `FUZZ_HANG_MS` (how long a flow may take
//! before it counts as hung; default 30000), `FUZZ_TRACE` (print each case
//! before it runs, for a crash that kills the process).

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

// ---------------------------------------------------------------------------
// Part 1: args decoding
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Units {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

/// How a string says where it ends.
#[derive(Clone, Copy, Debug)]
enum Term {
    /// `length` code units (no NUL after them).
    Len,
    /// `length` 0: up to the first NUL.
    Nul,
    /// `p` NULL, `length` 0: the empty string.
    NullPtr,
    /// `p` NULL with a length: refused.
    NullPtrLen(u32),
}

#[derive(Clone, Debug)]
enum Payload {
    /// A primitive (or a value of unknown flags, never read).
    Bits(u64),
    Str(Units, Term),
    /// An array (`p` into `ARRAY_MEM`, or NULL) or a custom object (`p`
    /// anything: opaque).
    Pass {
        p: Option<u16>,
        raw: u64,
        length: u32,
    },
}

#[derive(Clone, Debug)]
struct Slot {
    flags: u8,
    cleanup: bool,
    payload: Payload,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Unknown,
    Prim,
    Str,
    Array,
    Custom,
}

/// The header's reading of type flags.
fn class(flags: u8) -> Class {
    let (base, complex) = (flags & FTN_BASE_TYPE_MASK, flags & FTN_COMPLEX_TYPE_MASK);
    match (complex, base) {
        (FTN_TYPE_ARRAY, b) if b != 0 => Class::Array,
        (0, FTN_TYPE_CUSTOM_OBJECT) => Class::Custom,
        (0, FTN_TYPE_STRING..=FTN_TYPE_STRING32) => Class::Str,
        (0, b) if b >= FTN_TYPE_BOOL => Class::Prim,
        _ => Class::Unknown,
    }
}

/// Where `success()` is called.
#[derive(Clone, Copy, Debug)]
enum SendMode {
    /// In the step's callback.
    Inline,
    /// After waitExternal(), from a thread that runs no loop.
    Thread,
    /// After waitExternal(), from the loop (a sched_immediate callback).
    Sched,
}

/// What a receiving step does with its args (bit i of a mask: slot i).
#[derive(Clone, Copy, Debug)]
enum Recv {
    /// Leaves them: the runtime resets them.
    Keep,
    /// Moves these out (and resets them itself, as C would).
    MoveOut(u8),
    /// Moves these out, then forwards the rest with success().
    Forward(u8),
}

#[derive(Clone, Debug)]
struct ArgsCase {
    slots: [Option<Slot>; 4],
    send: SendMode,
    recv1: Recv,
    recv2: Recv,
}

fn units(base: u8) -> BoxedStrategy<Units> {
    match base {
        FTN_TYPE_STRING => prop_oneof![
            3 => any::<String>().prop_map(|s| Units::U8(s.into_bytes())),
            3 => vec(any::<u8>(), 0..12).prop_map(Units::U8),
            2 => vec(
                prop_oneof![
                    Just(vec![0xED, 0xA0, 0x80]), // an encoded surrogate
                    Just(vec![0xC0, 0x80]),       // overlong NUL
                    Just(vec![0xE2, 0x82]),       // truncated
                    Just(vec![0xF4, 0x90, 0x80, 0x80]), // past U+10FFFF
                    Just(vec![0x80]),
                    Just(vec![0xFF]),
                    "[a-z\u{e9}\u{1F600}]".prop_map(String::into_bytes),
                ],
                0..5
            )
            .prop_map(|v| Units::U8(v.concat())),
        ]
        .boxed(),
        FTN_TYPE_STRING16 => prop_oneof![
            3 => any::<String>().prop_map(|s| Units::U16(s.encode_utf16().collect())),
            2 => vec(any::<u16>(), 0..10).prop_map(Units::U16),
            3 => vec(prop_oneof![0xD800u16..0xE000, 0x20u16..0x80, Just(0u16)], 0..8)
                .prop_map(Units::U16),
        ]
        .boxed(),
        _ => prop_oneof![
            3 => any::<String>().prop_map(|s| Units::U32(s.chars().map(u32::from).collect())),
            2 => vec(any::<u32>(), 0..8).prop_map(Units::U32),
            3 => vec(
                prop_oneof![
                    0xD800u32..0xE000,
                    0x10_FFFEu32..0x11_0002,
                    0x20u32..0x80,
                    Just(0u32)
                ],
                0..8
            )
            .prop_map(Units::U32),
        ]
        .boxed(),
    }
}

fn term() -> impl Strategy<Value = Term> {
    prop_oneof![
        4 => Just(Term::Len),
        3 => Just(Term::Nul),
        1 => Just(Term::NullPtr),
        1 => (1u32..6).prop_map(Term::NullPtrLen),
    ]
}

fn slot_for(flags: u8) -> BoxedStrategy<Slot> {
    let cleanup = prop::bool::weighted(0.85);
    match class(flags) {
        Class::Prim | Class::Unknown => (cleanup, any::<u64>())
            .prop_map(move |(cleanup, x)| Slot {
                flags,
                cleanup,
                // A C bool is 0 or 1.
                payload: Payload::Bits(if flags == FTN_TYPE_BOOL { x & 1 } else { x }),
            })
            .boxed(),
        Class::Str => (cleanup, units(flags), term())
            .prop_map(move |(cleanup, u, t)| Slot {
                flags,
                cleanup,
                payload: Payload::Str(u, t),
            })
            .boxed(),
        Class::Array | Class::Custom => (
            cleanup,
            prop::option::weighted(0.8, 0u16..512),
            any::<u64>(),
            prop_oneof![Just(0u32), 1u32..64, Just(u32::MAX)],
        )
            .prop_map(move |(cleanup, p, raw, length)| Slot {
                flags,
                cleanup,
                payload: Payload::Pass { p, raw, length },
            })
            .boxed(),
    }
}

fn slot() -> impl Strategy<Value = Slot> {
    prop_oneof![
        1 => any::<u8>().prop_flat_map(slot_for),
        5 => (FTN_TYPE_STRING..=FTN_TYPE_STRING32).prop_flat_map(slot_for),
        3 => (FTN_TYPE_BOOL..=FTN_TYPE_DOUBLE).prop_flat_map(slot_for),
        2 => (0x11u8..=0x1F).prop_flat_map(slot_for),
        1 => Just(FTN_TYPE_CUSTOM_OBJECT).prop_flat_map(slot_for),
    ]
}

/// Four slots: mostly the first `k` set; sometimes any of them (gaps).
fn slots() -> impl Strategy<Value = [Option<Slot>; 4]> {
    prop_oneof![
        3 => ([slot(), slot(), slot(), slot()], 0usize..=4).prop_map(|(s, k)| {
            let mut i = 0;
            s.map(|v| {
                i += 1;
                (i <= k).then_some(v)
            })
        }),
        1 => [
            prop::option::of(slot()),
            prop::option::of(slot()),
            prop::option::of(slot()),
            prop::option::of(slot()),
        ],
    ]
}

fn recv() -> impl Strategy<Value = Recv> {
    prop_oneof![
        2 => Just(Recv::Keep),
        2 => (0u8..16).prop_map(Recv::MoveOut),
        3 => prop_oneof![Just(0u8), 0u8..16].prop_map(Recv::Forward),
    ]
}

fn args_case() -> impl Strategy<Value = ArgsCase> {
    (
        slots(),
        prop_oneof![
            3 => Just(SendMode::Inline),
            1 => Just(SendMode::Thread),
            1 => Just(SendMode::Sched),
        ],
        recv(),
        prop_oneof![Just(Recv::Keep), (0u8..16).prop_map(Recv::MoveOut)],
    )
        .prop_map(|(slots, send, recv1, recv2)| ArgsCase {
            slots,
            send,
            recv1,
            recv2,
        })
}

/// A value as a C step receives it.
#[derive(Clone, Debug, PartialEq)]
enum Got {
    /// A primitive: its flags and its bits (zero-extended).
    Prim { flags: u8, bits: u64 },
    /// A STRING, checked to be NUL-terminated UTF-8.
    Str(String),
    /// An array or a custom object: exactly what was sent.
    Pass {
        ty: usize,
        bits: u64,
        custom: u64,
        length: u32,
    },
}

/// The bits of a primitive of base `base` in the low bytes of `x`.
fn prim_bits(base: u8, x: u64) -> u64 {
    match base {
        FTN_TYPE_BOOL | FTN_TYPE_INT8 | FTN_TYPE_UINT8 => x & 0xFF,
        FTN_TYPE_INT16 | FTN_TYPE_UINT16 => x & 0xFFFF,
        FTN_TYPE_INT32 | FTN_TYPE_UINT32 | FTN_TYPE_FLOAT => x & 0xFFFF_FFFF,
        _ => x,
    }
}

/// Reads slot `v` as a C step would.
fn read_got(v: &FutoInBinaryValue) -> Result<Got, String> {
    // SAFETY: a slot the runtime filled: NULL or a live type.
    let Some(t) = (unsafe { v.type_.as_ref() }) else {
        return Err("empty slot".into());
    };
    let flags = t.flags;
    match class(flags) {
        Class::Prim => {
            // SAFETY: the member of the union the flags name (the others
            // may be uninitialised).
            let bits = unsafe {
                match flags {
                    FTN_TYPE_BOOL => v.v.b as u64,
                    FTN_TYPE_INT8 => v.v.i8 as u8 as u64,
                    FTN_TYPE_UINT8 => v.v.u8 as u64,
                    FTN_TYPE_INT16 => v.v.i16 as u16 as u64,
                    FTN_TYPE_UINT16 => v.v.u16 as u64,
                    FTN_TYPE_INT32 => v.v.i32 as u32 as u64,
                    FTN_TYPE_UINT32 => v.v.u32 as u64,
                    FTN_TYPE_FLOAT => v.v.f.to_bits() as u64,
                    FTN_TYPE_DOUBLE => v.v.d.to_bits(),
                    FTN_TYPE_INT64 => v.v.i64 as u64,
                    _ => v.v.u64,
                }
            };
            Ok(Got::Prim { flags, bits })
        }
        Class::Str if flags == FTN_TYPE_STRING => {
            // SAFETY: a STRING given to C: `length` bytes and a NUL.
            let b = unsafe {
                let p = v.v.p as *const u8;
                if p.is_null() {
                    return Err("STRING with a NULL pointer".into());
                }
                if *p.add(v.length as usize) != 0 {
                    return Err("STRING not NUL-terminated".into());
                }
                std::slice::from_raw_parts(p, v.length as usize)
            };
            String::from_utf8(b.to_vec())
                .map(Got::Str)
                .map_err(|e| format!("STRING given to C is not UTF-8: {e}"))
        }
        Class::Array | Class::Custom => Ok(Got::Pass {
            ty: t as *const FutoInType as usize,
            // SAFETY: pass-through values are ours, written whole.
            bits: unsafe { v.v.u64 },
            custom: v.custom_data as u64,
            length: v.length,
        }),
        _ => Err(format!("a value of flags {flags:#04x} given to C")),
    }
}

/// The string a test buffer holds, as the header reads it.
fn decode(u: &Units, term: Term) -> Result<String, String> {
    match term {
        Term::NullPtr => return Ok(String::new()),
        Term::NullPtrLen(_) => return Err("NULL string with a length".into()),
        Term::Len | Term::Nul => {}
    }
    fn upto<T: Copy + Default + PartialEq>(v: &[T], term: Term) -> &[T] {
        match term {
            Term::Nul => &v[..v.iter().position(|c| *c == T::default()).unwrap_or(v.len())],
            _ => v,
        }
    }
    match u {
        Units::U8(v) => std::str::from_utf8(upto(v, term))
            .map(str::to_owned)
            .map_err(|e| format!("STRING is not valid UTF-8 ({e})")),
        Units::U16(v) => String::from_utf16(upto(v, term))
            .map_err(|_| "STRING16 is not valid UTF-16".to_string()),
        Units::U32(v) => upto(v, term)
            .iter()
            .map(|&c| char::from_u32(c).ok_or_else(|| format!("STRING32 has {c:#x}, not a char")))
            .collect(),
    }
}

/// The buffer of a string slot (only kept alive by the case).
type Buf = Box<dyn std::any::Any>;

/// Builds slot `s`: its buffer (if any) and its value.
fn build_slot(case: u64, s: &Slot) -> (Option<Buf>, RawVal) {
    let t = ty(s.flags, s.cleanup);
    match &s.payload {
        Payload::Bits(x) => (None, RawVal::new(case, t, *x, 0)),
        Payload::Pass { p, raw, length } => {
            let bits = match (class(s.flags), p) {
                (Class::Custom, _) => *raw,
                (_, Some(off)) => ARRAY_MEM[*off as usize..].as_ptr() as u64,
                (_, None) => 0,
            };
            (None, RawVal::new(case, t, bits, *length))
        }
        Payload::Str(u, term) => {
            if let Term::NullPtr | Term::NullPtrLen(_) = term {
                let n = match term {
                    Term::NullPtrLen(n) => *n,
                    _ => 0,
                };
                return (None, RawVal::new(case, t, 0, n));
            }
            fn prep<T: Copy + Default + PartialEq>(v: &[T], term: Term) -> (Box<[T]>, u32) {
                match term {
                    Term::Len if !v.is_empty() => (v.into(), v.len() as u32),
                    _ => {
                        let end = v.iter().position(|c| *c == T::default()).unwrap_or(v.len());
                        let mut b = v[..end].to_vec();
                        b.push(T::default());
                        (b.into_boxed_slice(), 0)
                    }
                }
            }
            let (buf, p, n) = match u {
                Units::U8(v) => {
                    let (b, n) = prep(v, *term);
                    let p = b.as_ptr() as u64;
                    (Box::new(b) as Buf, p, n)
                }
                Units::U16(v) => {
                    let (b, n) = prep(v, *term);
                    let p = b.as_ptr() as u64;
                    (Box::new(b) as Buf, p, n)
                }
                Units::U32(v) => {
                    let (b, n) = prep(v, *term);
                    let p = b.as_ptr() as u64;
                    (Box::new(b) as Buf, p, n)
                }
            };
            (Some(buf), RawVal::new(case, t, p, n))
        }
    }
}

/// What the runtime must make of the slots: the values the next step gets,
/// or the `error_info` of the `InternalError`.
fn model(slots: &[Option<(Slot, RawVal)>]) -> Result<Vec<Got>, String> {
    let mut ended = None;
    let mut out = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let Some((s, raw)) = s else {
            ended.get_or_insert(i);
            continue;
        };
        if let Some(e) = ended {
            return Err(format!("args: slot {i}: set after the empty slot {e}"));
        }
        let got = match (class(s.flags), &s.payload) {
            (Class::Unknown, _) => Err(format!("unknown type flags {:#04x}", s.flags)),
            (Class::Prim, Payload::Bits(x)) => Ok(Got::Prim {
                flags: s.flags,
                bits: prim_bits(s.flags, *x),
            }),
            (Class::Str, Payload::Str(u, t)) => decode(u, *t).map(Got::Str),
            (Class::Array | Class::Custom, Payload::Pass { .. }) => Ok(Got::Pass {
                ty: raw.ty,
                bits: raw.bits,
                custom: raw.id,
                length: raw.length,
            }),
            _ => unreachable!("payloads follow the class"),
        };
        out.push(got.map_err(|m| format!("args: slot {i}: {m}"))?);
    }
    Ok(out)
}

/// (stage, code, error_info) of each error handler call.
type Handled = Vec<(&'static str, String, Option<String>)>;

/// What one args case recorded.
#[derive(Default, Debug)]
struct Rec1 {
    recv1: Option<Vec<Result<Got, String>>>,
    recv2: Option<Vec<Result<Got, String>>>,
    /// (stage, code, error_info) of each error handler call.
    handled: Handled,
    ends: Vec<String>,
    violations: Vec<String>,
}

struct Ctx1 {
    spec: ArgsCase,
    raw: [Option<RawVal>; 4],
    _bufs: Vec<Buf>,
    rec: Mutex<Rec1>,
    done: Mutex<Sender<()>>,
    /// The waiting step, for a completion from the loop.
    waiting: AtomicUsize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Ctx1 {
    fn violation(&self, v: impl Into<String>) {
        lock(&self.rec).violations.push(v.into());
    }
    fn end(&self, how: String) {
        lock(&self.rec).ends.push(how);
        let _ = lock(&self.done).send(());
    }
    /// The case's args, made again for each send.
    fn args(&self) -> FutoInArgs {
        let mut a = FutoInArgs::EMPTY;
        for (i, r) in self.raw.iter().enumerate() {
            if let Some(r) = r {
                a.args[i] = r.to_c();
            }
        }
        a
    }
    /// success() with the case's args on `bsi`; the args must come back
    /// reset.
    fn send(&self, bsi: *mut FutoInAsyncSteps) {
        let mut a = self.args();
        call!(bsi, success(bsi, &mut a));
        if a.args.iter().any(|v| !v.type_.is_null()) {
            self.violation("success() left values in the args");
        }
    }
}

/// Ctx1 of a callback's `data`.
///
/// # Safety
/// `data` is the `Ctx1` the case passed, alive until the runtime is freed.
unsafe fn ctx1<'a>(data: *mut c_void) -> &'a Ctx1 {
    // SAFETY: caller's contract.
    unsafe { &*(data as *const Ctx1) }
}

unsafe extern "C" fn a_send(bsi: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    match c.spec.send {
        SendMode::Inline => c.send(bsi),
        SendMode::Thread => {
            call!(bsi, wait_external(bsi));
            let (b, d) = (Addr::of(bsi), Addr::of(c));
            *lock(&c.thread) = Some(std::thread::spawn(move || {
                // SAFETY: the context outlives this thread (joined before
                // the case ends); the handle is never freed.
                unsafe { ctx1(d.ptr()) }.send(b.ptr());
            }));
        }
        SendMode::Sched => {
            call!(bsi, wait_external(bsi));
            c.waiting.store(bsi as usize, SeqCst);
            let h = call!(bsi, sched_immediate(bsi, data, Some(a_send_later)));
            if call!(bsi, sched_is_valid(bsi, &h as *const _ as *mut _)) != 1 {
                c.violation("a task just scheduled is not valid");
            }
        }
    }
}

unsafe extern "C" fn a_send_later(data: *mut c_void) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    c.send(c.waiting.load(SeqCst) as *mut FutoInAsyncSteps);
}

unsafe extern "C" fn a_handler(bsi: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    let stage = if lock(&c.rec).recv1.is_some() {
        "recv1"
    } else {
        "send"
    };
    let info = error_info(bsi);
    lock(&c.rec).handled.push((stage, text(code), info));
}

/// A receiving step: reads the four slots, then does what `r` says.
fn receive(
    bsi: *mut FutoInAsyncSteps,
    args: *const FutoInArgs,
    r: Recv,
) -> Vec<Result<Got, String>> {
    // SAFETY: the args the runtime gave this callback; the header lets the
    // callback move values out of them (and forward them).
    let a = unsafe { &mut *(args as *mut FutoInArgs) };
    let got: Vec<Result<Got, String>> = a
        .args
        .iter()
        .take_while(|v| !v.type_.is_null())
        .map(read_got)
        .collect();
    if let Recv::MoveOut(mask) | Recv::Forward(mask) = r {
        for (i, v) in a.args.iter_mut().enumerate() {
            if mask & (1 << i) != 0 && !v.type_.is_null() {
                // Move out: copy, empty the slot, then reset our copy.
                let mut mine = std::mem::replace(v, FutoInBinaryValue::EMPTY);
                reset_binval(&mut mine);
            }
        }
    }
    if let Recv::Forward(_) = r {
        call!(bsi, success(bsi, a));
    }
    got
}

unsafe extern "C" fn a_recv1(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    // Recorded first: a forward error reaches the handler during success().
    let peek: Vec<Result<Got, String>> = {
        // SAFETY: the args of this callback.
        let a = unsafe { &*args };
        a.args
            .iter()
            .take_while(|v| !v.type_.is_null())
            .map(read_got)
            .collect()
    };
    lock(&c.rec).recv1 = Some(peek);
    receive(bsi, args, c.spec.recv1);
    // SAFETY: as above.
    if unsafe { &*args }.args.iter().any(|v| !v.type_.is_null())
        && matches!(c.spec.recv1, Recv::Forward(_))
    {
        c.violation("forwarding success() left values in the args");
    }
}

unsafe extern "C" fn a_recv2(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the case's context.
    let c = unsafe { ctx1(data) };
    let got = receive(bsi, args, c.spec.recv2);
    lock(&c.rec).recv2 = Some(got);
}

unsafe extern "C" fn a_last(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: the case's context.
    unsafe { ctx1(data) }.end("ok".into());
}

unsafe extern "C" fn a_unhandled(_: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: the case's context.
    unsafe { ctx1(data) }.end(text(code));
}

/// What the flow must record for `spec` with values `expected`.
fn expected_outcome(
    spec: &ArgsCase,
    expected: &Result<Vec<Got>, String>,
) -> (Option<Vec<Got>>, Option<Vec<Got>>, Handled, String) {
    const IE: &str = "InternalError";
    let vals = match expected {
        Err(m) => {
            return (
                None,
                None,
                vec![("send", IE.into(), Some(m.clone()))],
                IE.into(),
            )
        }
        Ok(v) => v.clone(),
    };
    let Recv::Forward(mask) = spec.recv1 else {
        return (Some(vals), Some(vec![]), vec![], "ok".into());
    };
    // The forwarded slots: the received ones, minus those moved out.
    let mut ended = None;
    let mut fwd = Vec::new();
    for i in 0..4 {
        let set = i < vals.len() && mask & (1 << i) == 0;
        if !set {
            ended.get_or_insert(i);
        } else if let Some(e) = ended {
            let m = format!("args: slot {i}: set after the empty slot {e}");
            return (
                Some(vals),
                None,
                vec![("recv1", IE.into(), Some(m))],
                IE.into(),
            );
        } else {
            fwd.push(vals[i].clone());
        }
    }
    (Some(vals), Some(fwd), vec![], "ok".into())
}

fn run_args_case(spec: &ArgsCase, cov: &Coverage) -> Result<(), TestCaseError> {
    let case = NEXT_CASE.fetch_add(1, SeqCst);
    let mut bufs = Vec::new();
    let mut raw = [None; 4];
    let mut built = Vec::new();
    for (i, s) in spec.slots.iter().enumerate() {
        match s {
            Some(s) => {
                let (b, r) = build_slot(case, s);
                bufs.extend(b);
                raw[i] = Some(r);
                built.push(Some((s.clone(), r)));
            }
            None => built.push(None),
        }
    }
    let expected = model(&built);
    let (tx, rx) = channel();
    let ctx = Box::new(Ctx1 {
        spec: spec.clone(),
        raw,
        _bufs: bufs,
        rec: Mutex::new(Rec1::default()),
        done: Mutex::new(tx),
        waiting: AtomicUsize::new(0),
        thread: Mutex::new(None),
    });
    let data = &*ctx as *const Ctx1 as *mut c_void;
    let rt = new_runtime(1);
    // SAFETY: a live runtime.
    let root = unsafe { futoin_asyncsteps_new(rt) };
    call!(root, add(root, data, Some(a_send), Some(a_handler)));
    call!(root, add(root, data, Some(a_recv1), Some(a_handler)));
    call!(root, add(root, data, Some(a_recv2), None));
    call!(root, add(root, data, Some(a_last), None));
    call!(root, execute(root, data, Some(a_unhandled)));
    let ended = rx.recv_timeout(hang()).is_ok();
    call!(root, free(root));
    if let Some(t) = lock(&ctx.thread).take() {
        t.join().expect("the sending thread");
    }
    free_runtime(rt);
    let leaks = settle_values(case);
    let rec = std::mem::take(&mut *lock(&ctx.rec));
    drop(ctx);

    prop_assert!(ended, "the flow did not end in {:?}: {rec:?}", hang());
    prop_assert!(rec.violations.is_empty(), "{:?}", rec.violations);
    prop_assert!(leaks.is_empty(), "{leaks:?}");
    let (r1, r2, handled, end) = expected_outcome(spec, &expected);
    let ok = |v: Option<Vec<Got>>| v.map(|v| v.into_iter().map(Ok).collect::<Vec<_>>());
    prop_assert_eq!(rec.recv1, ok(r1), "values the first step got");
    prop_assert_eq!(rec.recv2, ok(r2), "values the second step got");
    prop_assert_eq!(rec.handled, handled, "errors handled");
    prop_assert_eq!(&rec.ends, &vec![end.clone()], "flow ends");
    cov.hit(match &expected {
        Ok(v) => format!("ok with {} values", v.len()),
        Err(m) => m
            .split(": ")
            .nth(2)
            .unwrap_or(m)
            .split([' ', '('])
            .take(2)
            .collect::<Vec<_>>()
            .join(" "),
    });
    if end != "ok" && expected.is_ok() {
        cov.hit("forward with a gap");
    }
    Ok(())
}

#[test]
fn args_decoding_never_crashes_or_leaks() {
    let (mut runner, cases, seed) = runner(4000, 1);
    let cov = Coverage::default();
    let ran = AtomicUsize::new(0);
    let started = Instant::now();
    let res = runner.run(&args_case(), |spec| {
        ran.fetch_add(1, SeqCst);
        trace(&spec);
        let cov = cov.clone();
        bounded(move || run_args_case(&spec, &cov))
    });
    let _ = writeln!(
        std::io::stderr(),
        "cabi_fuzz args: {} cases ran ({cases} asked, seed {seed}) in {:.1?}",
        ran.load(SeqCst),
        started.elapsed()
    );
    cov.report("cabi_fuzz args");
    assert_eq!(STRAY.load(SeqCst), 0, "cleanups of values no case knows");
    if let Err(e) = res {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------
// Part 2: call sequences
// ---------------------------------------------------------------------------

/// Callbacks (handle binds) a case runs before it drains: below the
/// runtime's handle quarantine (256), so a stale handle is never reused
/// within a case and the stale-handle calls stay exact.
const BUDGET: usize = 150;

/// Args given to success() (values with counting cleanups).
#[derive(Clone, Copy, Debug)]
enum ArgsK {
    /// A NULL `FutoInArgs*`.
    Null,
    /// Four empty slots.
    Empty,
    Int,
    /// A NUL-terminated STRING and an int.
    Str,
    Array,
    Custom,
    /// STRING, INT32, ARRAY|INT32, CUSTOM_OBJECT.
    Four,
    /// Unknown type flags: InternalError.
    Unknown,
    /// A value after an empty slot: InternalError.
    Gap,
    /// A STRING that is not UTF-8: InternalError.
    BadUtf8,
}

#[derive(Clone, Copy, Debug)]
enum Code {
    Null,
    User,
    Internal,
    LoopBreak,
    Timeout,
    Empty,
    BadUtf8,
}

#[derive(Clone, Copy, Debug)]
enum Label {
    Null,
    L0,
    L1,
    Unknown,
    BadUtf8,
}

#[derive(Clone, Copy, Debug)]
enum Name {
    A,
    B,
    ErrorInfo,
    LastException,
    Null,
    Empty,
    BadUtf8,
}

/// How a callback ends, after its calls.
#[derive(Clone, Debug)]
enum End {
    Return,
    Success(ArgsK),
    Error(Code, bool),
    Break(Label),
    Continue(Label),
    /// success() with the args the callback got (NULL in handlers/loops).
    Forward,
}

/// The body of one callback: calls on its handle, then how it ends.
#[derive(Clone, Debug)]
struct Node {
    ops: Vec<Op>,
    end: End,
}

static EMPTY_NODE: Node = Node {
    ops: Vec::new(),
    end: End::Return,
};

/// A sub-step: its body, its error handler, and whether add() gets a NULL
/// execute callback.
#[derive(Clone, Debug)]
struct Sub {
    node: Node,
    eh: Option<Node>,
    null_cb: bool,
}

/// Where an external completion comes from.
#[derive(Clone, Copy, Debug)]
enum Via {
    Sched,
    Deferred(u32),
    Thread,
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Ok(ArgsK),
    Err(Code),
}

#[derive(Clone, Copy, Debug)]
enum SyncK {
    Mutex,
    /// futoin_throttle_new(1, 1 ms, no queue limit)
    Throttle,
    Null,
    /// A FutoInSync of "another implementation": lock/unlock counted.
    Foreign,
    /// The same, whose lock fails the step.
    ForeignFail,
}

/// FutoInHandle values that were not (all) made for this call.
#[derive(Clone, Copy, Debug)]
enum OddHandle {
    Null,
    Empty,
    Garbage(u64, i64),
    /// One scheduled earlier in the case (maybe run, maybe of another loop).
    Kept(u8),
    /// A kept one with another version in its key.
    Mutated(u8, u8),
}

/// A call on a handle that is not the running callback's.
#[derive(Clone, Copy, Debug)]
enum Other {
    IsValid,
    Success(ArgsK),
    HandleError(Code),
    Add,
    Stack,
    StateVar,
    Sched,
    SameThread,
    WaitExternal,
    Parallel,
    SetTimeout,
    Loop,
}

/// A call with a NULL handle through a live handle's table.
#[derive(Clone, Copy, Debug)]
enum NullCall {
    IsValid,
    RootId,
    Success(ArgsK),
    HandleError,
    Add,
    Parallel,
    Stack,
    StateVar,
    Sched,
    SameThread,
    NewInstance,
    Free,
    Loop,
    WaitExternal,
    Break,
    AddSync,
    SchedIsValid,
}

/// What a cancel callback does with its (cancelled) step's handle.
#[derive(Clone, Copy, Debug)]
enum CancelAct {
    Nothing,
    Success(ArgsK),
    Error,
    Sched,
}

/// When (and from where) a new instance is freed.
#[derive(Clone, Copy, Debug)]
enum FreeRoot {
    /// Right after execute, in the step that made it.
    Now,
    /// By the test, after the main flow ended.
    Later,
    /// By the first step of its own flow.
    OwnStep,
    /// From another thread, right away.
    Thread,
    /// By its unhandled-error callback (else later).
    Unhandled,
    /// After futoin_runtime_free.
    AfterRuntime,
}

#[derive(Clone, Copy, Debug)]
enum StepOnly {
    Execute,
    Cancel,
    Free,
}

#[derive(Clone, Debug)]
enum Op {
    Add(Sub),
    Parallel {
        eh: Option<Node>,
        branches: Vec<Sub>,
        /// A call other than add() on the parallel's handle.
        misuse: Option<Other>,
    },
    StateVar {
        name: Name,
        alloc: bool,
        cleanup: bool,
        /// allocate() calls this handle again (stateVariable, add, ...).
        reenter: bool,
    },
    Stack {
        size: usize,
        cleanup: bool,
    },
    Success(ArgsK),
    HandleError(Code, bool),
    SetTimeout(u32),
    SetCancel {
        null: bool,
        act: CancelAct,
    },
    WaitExternal,
    /// Completes this step later (it waits or not).
    Complete(Via, Outcome),
    Loop {
        label: Label,
        /// `repeat(count)`, else `loop`.
        repeat: Option<usize>,
        /// Iterations before the body breaks (NULL label) by itself.
        cap: u8,
        body: Node,
        null_body: bool,
    },
    Break(Label),
    Continue(Label),
    AddSync(SyncK, Sub),
    /// rootId, isValid, is_same_thread (checked).
    Info,
    NewInstance {
        run: Option<Sub>,
        free: FreeRoot,
    },
    Sched {
        delay: Option<u32>,
        cancel: bool,
        null_cb: bool,
    },
    OddHandle(OddHandle),
    /// A call on a handle kept from an earlier callback of the case.
    Stale(u8, Other),
    /// A call on this callback's handle from another thread (while the
    /// callback runs, or after).
    FromThread(Other),
    NullBsi(NullCall),
    OnStep(StepOnly),
}

/// A call on a step entry made on the root (before execute).
#[derive(Clone, Copy, Debug)]
enum Poison {
    Stack,
    Success(ArgsK),
    HandleError,
    SetTimeout,
    SetCancel,
    WaitExternal,
    Loop,
    Repeat,
    Break,
    Continue,
}

#[derive(Clone, Copy, Debug)]
enum RootNull {
    Add,
    Execute,
    Free,
    Parallel,
    StateVar,
    Sched,
    IsValid,
    Cancel,
}

#[derive(Clone, Debug)]
enum RootOp {
    Add(Sub),
    Parallel {
        eh: Option<Node>,
        branches: Vec<Sub>,
        /// success() (and other no-ops) on the parallel's handle.
        misuse: Option<ArgsK>,
    },
    StateVar {
        name: Name,
        alloc: bool,
        cleanup: bool,
        reenter: bool,
    },
    Poison(Poison),
    AddSync(SyncK, Sub),
    Sched(Option<u32>),
    NewInstanceFree,
    Info,
    NullBsi(RootNull),
}

/// Calls on the root from the test thread while its flow runs (or just
/// ended).
#[derive(Clone, Copy, Debug)]
enum RunOp {
    Execute,
    Info,
    StateVar(Name),
    Sched,
    /// add() on a parallel handle of the root made before execute.
    ParAdd,
}

#[derive(Clone, Debug)]
struct Prog {
    threads: u32,
    /// futoin_mutex_new(max, max_queue)
    mutex: (u32, u32),
    root: Vec<RootOp>,
    running: Vec<RunOp>,
    /// The unhandled-error callback frees the root.
    free_in_unhandled: bool,
    /// The unhandled-error callback calls execute() again (a no-op).
    reexecute_in_unhandled: bool,
    /// Once the flow ended: this sub-step and the last step are added,
    /// and the root runs again.
    rerun: Option<Sub>,
    /// A root made before futoin_runtime_free and executed after it.
    execute_after_free: bool,
}

// ---- generators -------------------------------------------------------------

/// Mostly values the runtime takes; sometimes ones it refuses.
fn args_k() -> impl Strategy<Value = ArgsK> {
    prop_oneof![
        4 => Just(ArgsK::Null),
        1 => Just(ArgsK::Empty),
        3 => Just(ArgsK::Int),
        3 => Just(ArgsK::Str),
        2 => Just(ArgsK::Array),
        2 => Just(ArgsK::Custom),
        3 => Just(ArgsK::Four),
        1 => prop_oneof![Just(ArgsK::Unknown), Just(ArgsK::Gap), Just(ArgsK::BadUtf8)],
    ]
}

fn code() -> impl Strategy<Value = Code> {
    prop_oneof![
        1 => Just(Code::Null),
        12 => Just(Code::User),
        1 => Just(Code::Internal),
        1 => Just(Code::LoopBreak),
        1 => Just(Code::Timeout),
        1 => Just(Code::Empty),
        1 => Just(Code::BadUtf8),
    ]
}

fn label() -> impl Strategy<Value = Label> {
    prop_oneof![
        6 => Just(Label::Null),
        4 => Just(Label::L0),
        4 => Just(Label::L1),
        2 => Just(Label::Unknown),
        1 => Just(Label::BadUtf8),
    ]
}

fn name() -> impl Strategy<Value = Name> {
    prop_oneof![
        8 => Just(Name::A),
        4 => Just(Name::B),
        4 => Just(Name::ErrorInfo),
        2 => Just(Name::LastException),
        1 => Just(Name::Null),
        2 => Just(Name::Empty),
        1 => Just(Name::BadUtf8),
    ]
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        12 => Just(End::Return),
        4 => args_k().prop_map(End::Success),
        2 => (code(), any::<bool>()).prop_map(|(c, i)| End::Error(c, i)),
        1 => prop_oneof![label().prop_map(End::Break), label().prop_map(End::Continue)],
        2 => Just(End::Forward),
    ]
}

/// How a loop body ends.
fn body_end() -> impl Strategy<Value = End> {
    prop_oneof![
        6 => Just(End::Return),
        1 => args_k().prop_map(End::Success),
        1 => (code(), any::<bool>()).prop_map(|(c, i)| End::Error(c, i)),
        2 => label().prop_map(End::Break),
        2 => label().prop_map(End::Continue),
    ]
}

/// How an error handler ends: mostly recovering.
fn handler_end() -> impl Strategy<Value = End> {
    prop_oneof![
        3 => Just(End::Return),
        6 => args_k().prop_map(End::Success),
        2 => (code(), any::<bool>()).prop_map(|(c, i)| End::Error(c, i)),
        1 => label().prop_map(End::Break),
        1 => label().prop_map(End::Continue),
    ]
}

fn other() -> impl Strategy<Value = Other> {
    prop_oneof![
        Just(Other::IsValid),
        args_k().prop_map(Other::Success),
        code().prop_map(Other::HandleError),
        Just(Other::Add),
        Just(Other::Stack),
        Just(Other::StateVar),
        Just(Other::Sched),
        Just(Other::SameThread),
        Just(Other::WaitExternal),
        Just(Other::Parallel),
        Just(Other::SetTimeout),
        Just(Other::Loop),
    ]
}

fn null_call() -> impl Strategy<Value = NullCall> {
    prop_oneof![
        Just(NullCall::IsValid),
        Just(NullCall::RootId),
        args_k().prop_map(NullCall::Success),
        Just(NullCall::HandleError),
        Just(NullCall::Add),
        Just(NullCall::Parallel),
        Just(NullCall::Stack),
        Just(NullCall::StateVar),
        Just(NullCall::Sched),
        Just(NullCall::SameThread),
        Just(NullCall::NewInstance),
        Just(NullCall::Free),
        Just(NullCall::Loop),
        Just(NullCall::WaitExternal),
        Just(NullCall::Break),
        Just(NullCall::AddSync),
        Just(NullCall::SchedIsValid),
    ]
}

fn stack_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => prop_oneof![Just(0usize), Just(1), Just(7), Just(16), Just(100), Just(4096)],
        1 => Just(1 << 20),
        1 => prop_oneof![Just(1 << 44), Just(isize::MAX as usize - 8), Just(usize::MAX)],
    ]
}

fn leaf_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (
            name(),
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.2)
        )
            .prop_map(|(name, alloc, cleanup, reenter)| Op::StateVar {
                name,
                alloc,
                cleanup,
                reenter
            }),
        3 => (stack_size(), prop::bool::weighted(0.8))
            .prop_map(|(size, cleanup)| Op::Stack { size, cleanup }),
        1 => args_k().prop_map(Op::Success),
        1 => (code(), any::<bool>()).prop_map(|(c, i)| Op::HandleError(c, i)),
        1 => prop_oneof![Just(0u32), Just(1), Just(3)].prop_map(Op::SetTimeout),
        1 => (
            prop::bool::weighted(0.1),
            prop_oneof![
                3 => Just(CancelAct::Nothing),
                1 => args_k().prop_map(CancelAct::Success),
                1 => Just(CancelAct::Error),
                1 => Just(CancelAct::Sched),
            ],
        )
            .prop_map(|(null, act)| Op::SetCancel { null, act }),
        2 => Just(Op::WaitExternal),
        3 => (
            prop_oneof![
                2 => Just(Via::Sched),
                1 => (0u32..3).prop_map(Via::Deferred),
                2 => Just(Via::Thread),
            ],
            prop_oneof![
                3 => args_k().prop_map(Outcome::Ok),
                1 => code().prop_map(Outcome::Err),
            ],
        )
            .prop_map(|(v, o)| Op::Complete(v, o)),
        1 => prop_oneof![label().prop_map(Op::Break), label().prop_map(Op::Continue)],
        2 => Just(Op::Info),
        2 => (
            prop_oneof![Just(None), Just(Some(0u32)), Just(Some(1)), Just(Some(3_600_000))],
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(delay, cancel, null_cb)| Op::Sched { delay, cancel, null_cb }),
        1 => prop_oneof![
            Just(OddHandle::Null),
            Just(OddHandle::Empty),
            (any::<u64>(), any::<i64>()).prop_map(|(a, b)| OddHandle::Garbage(a, b)),
            any::<u8>().prop_map(OddHandle::Kept),
            (any::<u8>(), 1u8..8).prop_map(|(k, v)| OddHandle::Mutated(k, v)),
        ]
        .prop_map(Op::OddHandle),
        2 => (any::<u8>(), other()).prop_map(|(i, c)| Op::Stale(i, c)),
        1 => other().prop_map(Op::FromThread),
        1 => null_call().prop_map(Op::NullBsi),
        1 => prop_oneof![
            1 => Just(StepOnly::Execute),
            1 => Just(StepOnly::Cancel),
            2 => Just(StepOnly::Free),
        ]
        .prop_map(Op::OnStep),
    ]
}

/// A waiting step (waitExternal, setCancel) with no completion that is
/// sure to come gets a timeout, so every generated program ends.
fn ensure_ends(mut n: Node) -> Node {
    let first_wait = n
        .ops
        .iter()
        .position(|o| matches!(o, Op::WaitExternal | Op::SetCancel { null: false, .. }));
    if let Some(w) = first_wait {
        let timeout = n.ops.iter().any(|o| matches!(o, Op::SetTimeout(_)));
        let from_loop = n
            .ops
            .iter()
            .any(|o| matches!(o, Op::Complete(Via::Sched | Via::Deferred(_), _)));
        let thread_after = n.ops[w..]
            .iter()
            .any(|o| matches!(o, Op::Complete(Via::Thread, _)));
        if !timeout && !from_loop && !thread_after {
            n.ops.push(Op::SetTimeout(2));
        }
    }
    n
}

/// Mostly no success() after sub-steps were added (a misuse that ends the
/// flow at once), sometimes one.
fn consistent(ops: Vec<Op>, end: End, keep: bool) -> Node {
    let adds = ops.iter().any(|o| {
        matches!(
            o,
            Op::Add(_) | Op::Parallel { .. } | Op::Loop { .. } | Op::AddSync(..)
        )
    });
    let end = match end {
        End::Success(_) | End::Forward if adds && keep => End::Return,
        e => e,
    };
    ensure_ends(Node { ops, end })
}

fn node(d: u32) -> BoxedStrategy<Node> {
    (vec(op(d), 0..5), end(), prop::bool::weighted(0.9))
        .prop_map(|(ops, end, keep)| consistent(ops, end, keep))
        .boxed()
}

fn body(d: u32) -> BoxedStrategy<Node> {
    (vec(op(d), 0..4), body_end(), prop::bool::weighted(0.9))
        .prop_map(|(ops, end, keep)| consistent(ops, end, keep))
        .boxed()
}

fn handler(d: u32) -> BoxedStrategy<Node> {
    (vec(op(d), 0..3), handler_end(), prop::bool::weighted(0.9))
        .prop_map(|(ops, end, keep)| consistent(ops, end, keep))
        .boxed()
}

fn sub(d: u32) -> BoxedStrategy<Sub> {
    (
        node(d),
        prop::option::weighted(0.45, handler(d)),
        prop::bool::weighted(0.02),
    )
        .prop_map(|(node, eh, null_cb)| Sub { node, eh, null_cb })
        .boxed()
}

fn sync_k() -> impl Strategy<Value = SyncK> {
    prop_oneof![
        8 => Just(SyncK::Mutex),
        2 => Just(SyncK::Throttle),
        1 => Just(SyncK::Null),
        4 => Just(SyncK::Foreign),
        1 => Just(SyncK::ForeignFail),
    ]
}

fn op(d: u32) -> BoxedStrategy<Op> {
    if d == 0 {
        return leaf_op().boxed();
    }
    let s = sub(d - 1);
    let n = body(d - 1);
    prop_oneof![
        8 => leaf_op(),
        5 => s.clone().prop_map(Op::Add),
        2 => (
            prop::option::weighted(0.3, handler(d - 1)),
            vec(s.clone(), 0..4),
            prop::option::weighted(0.05, other()),
        )
            .prop_map(|(eh, branches, misuse)| Op::Parallel { eh, branches, misuse }),
        2 => (
            label(),
            prop::option::weighted(
                0.5,
                prop_oneof![Just(0usize), Just(1), Just(3), Just(usize::MAX)]
            ),
            0u8..4,
            n,
            prop::bool::weighted(0.03),
        )
            .prop_map(|(label, repeat, cap, body, null_body)| Op::Loop {
                label,
                repeat,
                cap,
                body,
                null_body,
            }),
        2 => (sync_k(), s.clone()).prop_map(|(k, s)| Op::AddSync(k, s)),
        1 => (
            prop::option::weighted(0.7, s),
            prop_oneof![
                Just(FreeRoot::Now),
                Just(FreeRoot::Later),
                Just(FreeRoot::OwnStep),
                Just(FreeRoot::Thread),
                Just(FreeRoot::Unhandled),
                Just(FreeRoot::AfterRuntime),
            ],
        )
            .prop_map(|(run, free)| Op::NewInstance { run, free }),
    ]
    .boxed()
}

/// Nesting of generated programs.
const DEPTH: u32 = 3;

fn root_op() -> impl Strategy<Value = RootOp> {
    let s = sub(DEPTH - 1);
    prop_oneof![
        30 => s.clone().prop_map(RootOp::Add),
        2 => (
            prop::option::weighted(0.3, handler(DEPTH - 1)),
            vec(s.clone(), 0..4),
            prop::option::weighted(0.2, args_k()),
        )
            .prop_map(|(eh, branches, misuse)| RootOp::Parallel { eh, branches, misuse }),
        1 => (
            name(),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.3)
        )
            .prop_map(|(name, alloc, cleanup, reenter)| RootOp::StateVar {
                name,
                alloc,
                cleanup,
                reenter
            }),
        1 => prop_oneof![
            Just(Poison::Stack),
            args_k().prop_map(Poison::Success),
            Just(Poison::HandleError),
            Just(Poison::SetTimeout),
            Just(Poison::SetCancel),
            Just(Poison::WaitExternal),
            Just(Poison::Loop),
            Just(Poison::Repeat),
            Just(Poison::Break),
            Just(Poison::Continue),
        ]
        .prop_map(RootOp::Poison),
        2 => (sync_k(), s).prop_map(|(k, s)| RootOp::AddSync(k, s)),
        1 => prop_oneof![Just(None), Just(Some(0u32)), Just(Some(3_600_000))].prop_map(RootOp::Sched),
        1 => Just(RootOp::NewInstanceFree),
        1 => Just(RootOp::Info),
        1 => prop_oneof![
            Just(RootNull::Add),
            Just(RootNull::Execute),
            Just(RootNull::Free),
            Just(RootNull::Parallel),
            Just(RootNull::StateVar),
            Just(RootNull::Sched),
            Just(RootNull::IsValid),
            Just(RootNull::Cancel),
        ]
        .prop_map(RootOp::NullBsi),
    ]
}

fn prog() -> impl Strategy<Value = Prog> {
    (
        prop_oneof![2 => Just(1u32), 1 => Just(2u32)],
        prop_oneof![
            6 => Just((1u32, u32::MAX)),
            1 => Just((1u32, 0u32)),
            2 => Just((2u32, u32::MAX)),
            1 => Just((0u32, u32::MAX)),
        ],
        vec(root_op(), 1..6),
        vec(
            prop_oneof![
                Just(RunOp::Execute),
                Just(RunOp::Info),
                name().prop_map(RunOp::StateVar),
                Just(RunOp::Sched),
                Just(RunOp::ParAdd),
            ],
            0..3,
        ),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.2, sub(DEPTH - 1)),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(threads, mutex, root, running, free_in_unhandled, reexec, rerun, exec_after)| {
                // The root may be gone once the flow ends: nothing on it
                // then. A second execute while it runs is a no-op, but
                // after it ended it runs the (empty) model: no rerun then.
                let mut running = if free_in_unhandled { vec![] } else { running };
                // A branch added through a root parallel's handle after
                // the flow ended (it may end before these calls: they run
                // on the test thread) makes the next run fail with
                // InternalError (a stale handle, tests/cabi_defects.rs); an
                // execute() then starts that run, whose unhandled error
                // this program cannot tell from a real one: not both.
                if running.iter().any(|r| matches!(r, RunOp::ParAdd)) {
                    running.retain(|r| !matches!(r, RunOp::Execute));
                }
                let rerun = rerun.filter(|_| {
                    !free_in_unhandled && !running.iter().any(|r| matches!(r, RunOp::Execute))
                });
                Prog {
                    threads,
                    mutex,
                    root,
                    running,
                    free_in_unhandled,
                    reexecute_in_unhandled: reexec,
                    rerun,
                    execute_after_free: exec_after,
                }
            },
        )
}

// ---- C strings ----------------------------------------------------------------

static HELLO: &[u8] = b"hello\0";
static NOT_UTF8: &[u8] = b"\xff\xfe\0";

fn code_ptr(c: Code) -> *const c_char {
    match c {
        Code::Null => null(),
        Code::User => c"Custom".as_ptr(),
        Code::Internal => c"InternalError".as_ptr(),
        Code::LoopBreak => c"LoopBreak".as_ptr(),
        Code::Timeout => c"Timeout".as_ptr(),
        Code::Empty => c"".as_ptr(),
        Code::BadUtf8 => NOT_UTF8.as_ptr().cast(),
    }
}

fn label_ptr(l: Label) -> *const c_char {
    match l {
        Label::Null => null(),
        Label::L0 => c"L0".as_ptr(),
        Label::L1 => c"L1".as_ptr(),
        Label::Unknown => c"nowhere".as_ptr(),
        Label::BadUtf8 => NOT_UTF8.as_ptr().cast(),
    }
}

fn name_ptr(n: Name) -> *const c_char {
    match n {
        Name::A => c"a".as_ptr(),
        Name::B => c"b".as_ptr(),
        Name::ErrorInfo => c"error_info".as_ptr(),
        Name::LastException => c"last_exception".as_ptr(),
        Name::Null => null(),
        Name::Empty => c"".as_ptr(),
        Name::BadUtf8 => NOT_UTF8.as_ptr().cast(),
    }
}

// ---- the case context -------------------------------------------------------

/// What a callback's `data` points to (boxed in the case's arena).
struct Tok {
    ctx: *const Ctx,
    kind: TokKind,
}

enum TokKind {
    Step {
        node: *const Node,
        eh: *const Node,
    },
    Loop {
        body: *const Node,
        cap: usize,
        n: AtomicUsize,
    },
    Task(usize),
    Cancel(usize, CancelAct),
    /// stateVariable's data: whether its cleanup was given, whether
    /// allocate may be called at all, and a handle allocate calls again.
    Var {
        cleanup: bool,
        never: bool,
        reenter: usize,
    },
    Main,
    SubFlow(usize),
    /// The first step of sub-flow N: frees its own root.
    FreeOwn(usize),
    /// A root executed after its runtime was freed.
    AfterFree,
    /// A callback that must never run.
    Never,
}

/// A scheduled callback.
#[derive(Default)]
struct TaskRec {
    ran: u32,
    cancelled: bool,
    never: bool,
    /// Completes the waiting step `bsi` when it runs.
    complete: Option<(usize, Outcome)>,
}

/// A FutoInSync of another implementation: counts lock and unlock.
#[repr(C)]
struct ForeignSync {
    hdr: FutoInSync,
    ctx: *const Ctx,
    fail: bool,
}

static FOREIGN_API: FutoInSyncAPI = FutoInSyncAPI {
    lock: Some(f_lock),
    unlock: Some(f_unlock),
};

/// A root made by newInstance().
struct SubRec {
    root: usize,
    free: FreeRoot,
    freed: AtomicBool,
    /// The step that made it is done with it: the test may free it.
    ready: AtomicBool,
    ends: Mutex<Vec<String>>,
}

impl SubRec {
    /// Frees the root unless someone did already.
    fn free(&self) {
        if !self.freed.swap(true, SeqCst) {
            let r = self.root as *mut FutoInAsyncSteps;
            call!(r, free(r));
        }
    }
}

/// Stack blocks with a cleanup, by address: the case that made them.
static BLOCKS: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

struct Ctx {
    case: u64,
    /// Boxed: C holds their addresses.
    #[allow(clippy::vec_box)]
    arena: Mutex<Vec<Box<Tok>>>,
    binds: AtomicUsize,
    handles: Mutex<Vec<usize>>,
    /// Counting tasks' handles (data1, data3), for odd-handle calls.
    kept: Mutex<Vec<(usize, isize)>>,
    tasks: Mutex<Vec<TaskRec>>,
    cancels: Mutex<Vec<u32>>,
    vars_live: Mutex<HashSet<usize>>,
    vars_made: AtomicUsize,
    vars_freed: AtomicUsize,
    stacks_made: AtomicUsize,
    stacks_freed: AtomicUsize,
    locks: AtomicUsize,
    lock_fails: AtomicUsize,
    unlocks: AtomicUsize,
    ends: Mutex<Vec<String>>,
    subs: Mutex<Vec<std::sync::Arc<SubRec>>>,
    after_free_ends: Mutex<Vec<String>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    violations: Mutex<Vec<String>>,
    done: Mutex<Sender<()>>,
    mutex: *mut FutoInSync,
    throttle: *mut FutoInSync,
    foreign: [Box<ForeignSync>; 2],
    free_in_unhandled: bool,
    reexecute_in_unhandled: bool,
    main_root: AtomicUsize,
    root_freed: AtomicBool,
    cov: Mutex<HashMap<&'static str, u64>>,
}

impl Ctx {
    fn new(case: u64, p: &Prog, done: Sender<()>) -> Box<Ctx> {
        let mut c = Box::new(Ctx {
            case,
            arena: Mutex::new(Vec::new()),
            binds: AtomicUsize::new(0),
            handles: Mutex::new(Vec::new()),
            kept: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            cancels: Mutex::new(Vec::new()),
            vars_live: Mutex::new(HashSet::new()),
            vars_made: AtomicUsize::new(0),
            vars_freed: AtomicUsize::new(0),
            stacks_made: AtomicUsize::new(0),
            stacks_freed: AtomicUsize::new(0),
            locks: AtomicUsize::new(0),
            lock_fails: AtomicUsize::new(0),
            unlocks: AtomicUsize::new(0),
            ends: Mutex::new(Vec::new()),
            subs: Mutex::new(Vec::new()),
            after_free_ends: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            done: Mutex::new(done),
            mutex: futoin_mutex_new(p.mutex.0, p.mutex.1),
            throttle: futoin_throttle_new(1, 1, u32::MAX),
            foreign: [false, true].map(|fail| {
                Box::new(ForeignSync {
                    hdr: FutoInSync { api: &FOREIGN_API },
                    ctx: null(),
                    fail,
                })
            }),
            free_in_unhandled: p.free_in_unhandled,
            reexecute_in_unhandled: p.reexecute_in_unhandled,
            main_root: AtomicUsize::new(0),
            root_freed: AtomicBool::new(false),
            cov: Mutex::new(HashMap::new()),
        });
        let me = &*c as *const Ctx;
        for f in &mut c.foreign {
            f.ctx = me;
        }
        c
    }

    fn violation(&self, v: impl Into<String>) {
        lock(&self.violations).push(v.into());
    }

    fn hit(&self, k: &'static str) {
        *lock(&self.cov).entry(k).or_default() += 1;
    }

    /// A `data` pointer for a callback, alive until the case ends.
    fn tok(&self, kind: TokKind) -> *mut c_void {
        let t = Box::new(Tok { ctx: self, kind });
        let p = &*t as *const Tok as *mut c_void;
        lock(&self.arena).push(t);
        p
    }

    fn step_tok(&self, node: &Node, eh: Option<&Node>) -> *mut c_void {
        self.tok(TokKind::Step {
            node,
            eh: eh.map_or(null(), |e| e as *const Node),
        })
    }

    fn task(&self, r: TaskRec) -> (*mut c_void, usize) {
        let mut t = lock(&self.tasks);
        t.push(r);
        let i = t.len() - 1;
        drop(t);
        (self.tok(TokKind::Task(i)), i)
    }

    fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        lock(&self.threads).push(std::thread::spawn(f));
    }

    /// A callback starts on `bsi`: false once the case is over its budget
    /// (the callback then does nothing, and loop bodies break).
    fn enter(&self, bsi: *mut FutoInAsyncSteps) -> bool {
        let n = self.binds.fetch_add(1, SeqCst);
        lock(&self.handles).push(bsi as usize);
        if call!(bsi, is_valid(bsi)) != 1 {
            self.violation("isValid() is not 1 in the handle's own callback");
        }
        if call!(bsi, is_same_thread(bsi)) != 1 {
            self.violation("is_same_thread() is not 1 in the handle's own callback");
        }
        n < BUDGET
    }

    /// A FutoInArgs of kind `k` (None for a NULL pointer); every value
    /// counts its cleanup.
    fn args(&self, k: ArgsK) -> Option<FutoInArgs> {
        let c = self.case;
        let int = |x| RawVal::new(c, ty(FTN_TYPE_INT32, true), x, 0).to_c();
        let s = |b: &'static [u8]| {
            RawVal::new(c, ty(FTN_TYPE_STRING, true), b.as_ptr() as u64, 0).to_c()
        };
        let arr = || {
            let t = ty(FTN_TYPE_ARRAY | FTN_TYPE_INT32, true);
            RawVal::new(c, t, ARRAY_MEM.as_ptr() as u64, 4).to_c()
        };
        let obj = || RawVal::new(c, ty(FTN_TYPE_CUSTOM_OBJECT, true), 0xC0FFEE, 0).to_c();
        let mut a = FutoInArgs::EMPTY;
        match k {
            ArgsK::Null => return None,
            ArgsK::Empty => {}
            ArgsK::Int => a.args[0] = int(42),
            ArgsK::Str => {
                a.args[0] = s(HELLO);
                a.args[1] = int(7);
            }
            ArgsK::Array => a.args[0] = arr(),
            ArgsK::Custom => a.args[0] = obj(),
            ArgsK::Four => {
                a.args = [s(HELLO), int(1), arr(), obj()];
            }
            ArgsK::Unknown => a.args[0] = RawVal::new(c, ty(0xF0, true), 1, 0).to_c(),
            ArgsK::Gap => a.args[1] = int(3),
            ArgsK::BadUtf8 => a.args[0] = s(NOT_UTF8),
        }
        Some(a)
    }

    /// success() with args of kind `k` on `bsi`; the args must come back
    /// reset, whatever the handle.
    fn success(&self, bsi: *mut FutoInAsyncSteps, table: *mut FutoInAsyncSteps, k: ArgsK) {
        match self.args(k) {
            None => call!(table, success(bsi, null_mut())),
            Some(mut a) => {
                call!(table, success(bsi, &mut a));
                if a.args.iter().any(|v| !v.type_.is_null()) {
                    self.violation("success() left values in the args");
                }
            }
        }
    }

    fn complete(&self, bsi: *mut FutoInAsyncSteps, o: Outcome) {
        match o {
            Outcome::Ok(k) => self.success(bsi, bsi, k),
            Outcome::Err(c) => call!(bsi, handle_error(bsi, code_ptr(c), null())),
        }
    }

    fn sync_ptr(&self, k: SyncK) -> *mut FutoInSync {
        match k {
            SyncK::Mutex => self.mutex,
            SyncK::Throttle => self.throttle,
            SyncK::Null => null_mut(),
            SyncK::Foreign => &*self.foreign[0] as *const ForeignSync as *mut FutoInSync,
            SyncK::ForeignFail => &*self.foreign[1] as *const ForeignSync as *mut FutoInSync,
        }
    }

    /// add() of `s` on `h` (a step, a parallel's or a root's handle).
    fn add_sub(&self, h: *mut FutoInAsyncSteps, s: &Sub) {
        let d = self.step_tok(&s.node, s.eh.as_ref());
        let f: ExecuteCallback = if s.null_cb { None } else { Some(c_step) };
        let eh: ErrorCallback = s.eh.as_ref().map(|_| c_catch as _);
        call!(h, add(h, d, f, eh));
    }

    fn add_sync(&self, h: *mut FutoInAsyncSteps, k: SyncK, s: &Sub) {
        let d = self.step_tok(&s.node, s.eh.as_ref());
        let f: ExecuteCallback = if s.null_cb { None } else { Some(c_step) };
        let eh: ErrorCallback = s.eh.as_ref().map(|_| c_catch as _);
        call!(h, add_sync(h, self.sync_ptr(k), d, f, eh));
    }

    #[allow(clippy::too_many_arguments)]
    fn state_var(
        &self,
        h: *mut FutoInAsyncSteps,
        table: *mut FutoInAsyncSteps,
        name: Name,
        alloc: bool,
        cleanup: bool,
        never: bool,
        reenter: bool,
    ) -> *mut c_void {
        let reenter = if reenter { h as usize } else { 0 };
        let d = self.tok(TokKind::Var {
            cleanup,
            never,
            reenter,
        });
        let a: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void> =
            alloc.then_some(c_alloc as _);
        let c: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)> =
            cleanup.then_some(c_var_cleanup as _);
        let p = call!(table, state_variable(h, d, name_ptr(name), a, c));
        if let (Name::ErrorInfo | Name::LastException, false) = (name, p.is_null()) {
            // SAFETY: the predefined names give a NUL-terminated string.
            let _ = unsafe { CStr::from_ptr(p as *const c_char) }
                .to_bytes()
                .len();
        }
        p
    }

    /// Scheduling through `table` with handle `h`: the handle it returned
    /// and the task's index.
    fn sched(
        &self,
        h: *mut FutoInAsyncSteps,
        table: *mut FutoInAsyncSteps,
        delay: Option<u32>,
        rec: TaskRec,
        null_cb: bool,
    ) -> (FutoInHandle, usize) {
        let (d, i) = self.task(rec);
        let cb: SchedCallback = if null_cb { None } else { Some(c_task) };
        let h = match delay {
            None => call!(table, sched_immediate(h, d, cb)),
            Some(ms) => call!(table, sched_deferred(h, ms, d, cb)),
        };
        (h, i)
    }

    /// A call on `h`, which is not the running callback's handle (a stale
    /// one, or a parallel's).
    fn other(&self, h: *mut FutoInAsyncSteps, c: Other) {
        match c {
            Other::IsValid => {
                call!(h, is_valid(h));
            }
            Other::Success(k) => self.success(h, h, k),
            Other::HandleError(code) => call!(h, handle_error(h, code_ptr(code), null())),
            Other::Add => {
                let d = self.step_tok(&EMPTY_NODE, None);
                call!(h, add(h, d, Some(c_step), None));
            }
            Other::Stack => {
                let p = call!(h, stack(h, 16, Some(c_stack_cleanup)));
                if !p.is_null() {
                    self.violation("stack() gave memory through another callback's handle");
                }
            }
            Other::StateVar => {
                self.state_var(h, h, Name::A, true, true, false, false);
            }
            Other::Sched => {
                self.sched(h, h, None, TaskRec::default(), false);
            }
            Other::SameThread => {
                call!(h, is_same_thread(h));
            }
            Other::WaitExternal => call!(h, wait_external(h)),
            Other::Parallel => {
                let p = call!(h, parallel(h, null_mut(), None));
                if !p.is_null() {
                    self.violation("parallel() through another callback's handle");
                }
            }
            Other::SetTimeout => call!(h, set_timeout(h, 1)),
            Other::Loop => {
                let d = self.tok(TokKind::Loop {
                    body: &EMPTY_NODE,
                    cap: 1,
                    n: AtomicUsize::new(0),
                });
                call!(h, loop_(h, d, Some(c_loop), null()));
            }
        }
    }

    /// A NULL handle through `t`'s table.
    fn null_call(&self, t: *mut FutoInAsyncSteps, c: NullCall) {
        let n = null_mut();
        match c {
            NullCall::IsValid => {
                if call!(t, is_valid(n)) != 0 {
                    self.violation("isValid(NULL) != 0");
                }
            }
            NullCall::RootId => {
                if call!(t, root_id(n)) != 0 {
                    self.violation("rootId(NULL) != 0");
                }
            }
            NullCall::Success(k) => self.success(n, t, k),
            NullCall::HandleError => call!(t, handle_error(n, c"Custom".as_ptr(), null())),
            NullCall::Add => {
                let d = self.tok(TokKind::Never);
                call!(t, add(n, d, Some(c_never_step), Some(c_never_catch)));
            }
            NullCall::Parallel => {
                if !call!(t, parallel(n, null_mut(), None)).is_null() {
                    self.violation("parallel(NULL) gave a handle");
                }
            }
            NullCall::Stack => {
                if !call!(t, stack(n, 8, Some(c_stack_cleanup))).is_null() {
                    self.violation("stack(NULL) gave memory");
                }
            }
            NullCall::StateVar => {
                if !self
                    .state_var(n, t, Name::A, true, true, true, false)
                    .is_null()
                {
                    self.violation("stateVariable(NULL) gave a value");
                }
            }
            NullCall::Sched => {
                let (h, _) = self.sched(
                    n,
                    t,
                    None,
                    TaskRec {
                        never: true,
                        ..TaskRec::default()
                    },
                    false,
                );
                if h != FutoInHandle::EMPTY {
                    self.violation("sched_immediate(NULL) gave a handle");
                }
            }
            NullCall::SameThread => {
                if call!(t, is_same_thread(n)) != 0 {
                    self.violation("is_same_thread(NULL) != 0");
                }
            }
            NullCall::NewInstance => {
                if !call!(t, new_instance(n)).is_null() {
                    self.violation("newInstance(NULL) gave a root");
                }
            }
            NullCall::Free => call!(t, free(n)),
            NullCall::Loop => {
                let d = self.tok(TokKind::Never);
                call!(t, loop_(n, d, Some(c_never_loop), null()));
            }
            NullCall::WaitExternal => call!(t, wait_external(n)),
            NullCall::Break => call!(t, break_loop(n, null())),
            NullCall::AddSync => {
                let d = self.tok(TokKind::Never);
                call!(t, add_sync(n, self.mutex, d, Some(c_never_step), None));
            }
            NullCall::SchedIsValid => {
                let mut h = FutoInHandle::EMPTY;
                if call!(t, sched_is_valid(n, &mut h)) != 0 {
                    self.violation("sched_is_valid(NULL, ...) != 0");
                }
                call!(t, sched_cancel(n, &mut h));
            }
        }
    }

    /// One call of a step callback's program on its handle `bsi`.
    fn op(&self, bsi: *mut FutoInAsyncSteps, op: &Op) {
        match op {
            Op::Add(s) => {
                self.hit("add");
                self.add_sub(bsi, s);
            }
            Op::Parallel {
                eh,
                branches,
                misuse,
            } => {
                self.hit("parallel");
                let d = self.step_tok(&EMPTY_NODE, eh.as_ref());
                let ehc: ErrorCallback = eh.as_ref().map(|_| c_catch as _);
                let ph = call!(bsi, parallel(bsi, d, ehc));
                if ph.is_null() {
                    self.hit("parallel refused");
                    return;
                }
                self.binds.fetch_add(1, SeqCst);
                lock(&self.handles).push(ph as usize);
                for b in branches {
                    self.add_sub(ph, b);
                }
                if let Some(m) = misuse {
                    self.other(ph, *m);
                }
            }
            Op::StateVar {
                name,
                alloc,
                cleanup,
                reenter,
            } => {
                self.hit("stateVariable");
                let p = self.state_var(bsi, bsi, *name, *alloc, *cleanup, false, *reenter);
                if !p.is_null() && matches!(name, Name::A | Name::B | Name::Empty) {
                    // The same name again: the same value, no allocate.
                    let q = self.state_var(bsi, bsi, *name, true, true, true, false);
                    if p != q {
                        self.violation("stateVariable() gave another value for the same name");
                    }
                }
            }
            Op::Stack { size, cleanup } => {
                self.hit("stack");
                let cb: Option<unsafe extern "C" fn(*mut c_void)> =
                    cleanup.then_some(c_stack_cleanup as _);
                let p = call!(bsi, stack(bsi, *size, cb)) as *mut u8;
                if p.is_null() {
                    self.hit("stack NULL");
                    return;
                }
                if p as usize % 16 != 0 {
                    self.violation(format!("stack({size}) not 16-byte aligned"));
                }
                let n = (*size).min(64);
                // SAFETY: stack() gave `size` bytes; we touch at most 64.
                let m = unsafe { std::slice::from_raw_parts_mut(p, n) };
                if m.iter().any(|b| *b != 0) {
                    self.violation(format!("stack({size}) not zeroed"));
                }
                m.fill(0xAB);
                if *cleanup {
                    self.stacks_made.fetch_add(1, SeqCst);
                    lock(&BLOCKS).insert(p as usize, self as *const Ctx as usize);
                }
            }
            Op::Success(k) => {
                self.hit("success");
                self.success(bsi, bsi, *k);
            }
            Op::HandleError(c, info) => {
                self.hit("handle_error");
                let i = if *info { c"fuzz info".as_ptr() } else { null() };
                call!(bsi, handle_error(bsi, code_ptr(*c), i));
            }
            Op::SetTimeout(ms) => {
                self.hit("setTimeout");
                call!(bsi, set_timeout(bsi, *ms));
            }
            Op::SetCancel { null, act } => {
                self.hit("setCancel");
                let i = {
                    let mut c = lock(&self.cancels);
                    c.push(0);
                    c.len() - 1
                };
                let d = self.tok(TokKind::Cancel(i, *act));
                let cb: CancelCallback = if *null { None } else { Some(c_cancel) };
                call!(bsi, set_cancel(bsi, d, cb));
            }
            Op::WaitExternal => {
                self.hit("waitExternal");
                call!(bsi, wait_external(bsi));
            }
            Op::Complete(via, o) => {
                let rec = || TaskRec {
                    complete: Some((bsi as usize, *o)),
                    ..TaskRec::default()
                };
                match via {
                    Via::Sched => {
                        self.hit("complete from the loop");
                        self.sched(bsi, bsi, None, rec(), false);
                    }
                    Via::Deferred(ms) => {
                        self.hit("complete from the loop, deferred");
                        self.sched(bsi, bsi, Some(*ms), rec(), false);
                    }
                    Via::Thread => {
                        self.hit("complete from a thread");
                        let (c, b, o) = (Addr::of(self), Addr::of(bsi), *o);
                        self.spawn(move || {
                            // SAFETY: the context outlives the case's
                            // threads (joined before it is dropped).
                            let ctx = unsafe { &*c.ptr::<Ctx>() };
                            ctx.complete(b.ptr(), o);
                        });
                    }
                }
            }
            Op::Loop {
                label,
                repeat,
                cap,
                body,
                null_body,
            } => {
                self.hit(if repeat.is_some() { "repeat" } else { "loop" });
                let d = self.tok(TokKind::Loop {
                    body,
                    cap: (*cap).into(),
                    n: AtomicUsize::new(0),
                });
                match repeat {
                    Some(count) => {
                        let f: RepeatCallback = if *null_body { None } else { Some(c_repeat) };
                        call!(bsi, repeat(bsi, d, *count, f, label_ptr(*label)));
                    }
                    None => {
                        let f: LoopCallback = if *null_body { None } else { Some(c_loop) };
                        call!(bsi, loop_(bsi, d, f, label_ptr(*label)));
                    }
                }
            }
            Op::Break(l) => {
                self.hit("breakLoop");
                call!(bsi, break_loop(bsi, label_ptr(*l)));
            }
            Op::Continue(l) => {
                self.hit("continueLoop");
                call!(bsi, continue_loop(bsi, label_ptr(*l)));
            }
            Op::AddSync(k, s) => {
                self.hit("addSync");
                self.add_sync(bsi, *k, s);
            }
            Op::Info => {
                self.hit("info");
                call!(bsi, root_id(bsi));
                if call!(bsi, is_valid(bsi)) != 1 {
                    self.violation("isValid() != 1 in a callback");
                }
                if call!(bsi, is_same_thread(bsi)) != 1 {
                    self.violation("is_same_thread() != 1 in a callback");
                }
            }
            Op::NewInstance { run, free } => {
                self.hit("newInstance");
                let r = call!(bsi, new_instance(bsi));
                if r.is_null() {
                    self.violation("newInstance() in a running flow gave NULL");
                    return;
                }
                let sub = std::sync::Arc::new(SubRec {
                    root: r as usize,
                    free: *free,
                    freed: AtomicBool::new(false),
                    ready: AtomicBool::new(false),
                    ends: Mutex::new(Vec::new()),
                });
                let i = {
                    let mut v = lock(&self.subs);
                    v.push(sub.clone());
                    v.len() - 1
                };
                if let Some(s) = run {
                    self.hit("sub-flow");
                    if let FreeRoot::OwnStep = free {
                        let d = self.tok(TokKind::FreeOwn(i));
                        call!(r, add(r, d, Some(c_free_own), None));
                    }
                    self.add_sub(r, s);
                    let d = self.tok(TokKind::SubFlow(i));
                    call!(r, add(r, d, Some(c_last), None));
                    call!(r, execute(r, d, Some(c_unhandled)));
                }
                sub.ready.store(true, SeqCst);
                match free {
                    FreeRoot::Now => sub.free(),
                    FreeRoot::Thread => self.spawn(move || sub.free()),
                    _ => {}
                }
            }
            Op::Sched {
                delay,
                cancel,
                null_cb,
            } => {
                self.hit("sched");
                let (mut h, i) = self.sched(bsi, bsi, *delay, TaskRec::default(), *null_cb);
                if *null_cb {
                    if h != FutoInHandle::EMPTY {
                        self.violation("a NULL scheduled callback gave a handle");
                    }
                    return;
                }
                if call!(bsi, sched_is_valid(bsi, &mut h)) != 1 {
                    self.violation("a task just scheduled is not valid");
                }
                if *cancel {
                    lock(&self.tasks)[i].cancelled = true;
                    call!(bsi, sched_cancel(bsi, &mut h));
                    if call!(bsi, sched_is_valid(bsi, &mut h)) != 0 {
                        self.violation("a cancelled task is still valid");
                    }
                    call!(bsi, sched_cancel(bsi, &mut h));
                } else {
                    lock(&self.kept).push((h.data1 as usize, h.data3));
                }
            }
            Op::OddHandle(o) => {
                self.hit("odd task handle");
                let kept = lock(&self.kept).clone();
                let pick = |k: u8| kept.get(k as usize % kept.len().max(1)).copied();
                let mut h = FutoInHandle::EMPTY;
                let hp: *mut FutoInHandle = match o {
                    OddHandle::Null => null_mut(),
                    OddHandle::Empty => &mut h,
                    OddHandle::Garbage(a, b) => {
                        h.data1 = *a as *mut c_void;
                        h.data3 = *b as isize;
                        &mut h
                    }
                    OddHandle::Kept(k) => {
                        if let Some((a, b)) = pick(*k) {
                            h.data1 = a as *mut c_void;
                            h.data3 = b;
                        }
                        &mut h
                    }
                    OddHandle::Mutated(k, v) => {
                        if let Some((a, b)) = pick(*k) {
                            h.data1 = a as *mut c_void;
                            // Another version of the same slot (high
                            // bits: never one the slot reaches in a case).
                            h.data3 = b ^ ((*v as isize) << 56);
                        }
                        &mut h
                    }
                };
                let valid = call!(bsi, sched_is_valid(bsi, hp));
                if valid != 0 && !matches!(o, OddHandle::Kept(_)) {
                    self.violation(format!("sched_is_valid({o:?}) != 0"));
                }
                call!(bsi, sched_cancel(bsi, hp));
            }
            Op::Stale(k, c) => {
                // Exact only while no handle was reused (see BUDGET).
                if self.binds.load(SeqCst) >= BUDGET {
                    return;
                }
                let hs = lock(&self.handles).clone();
                let hs: Vec<usize> = hs.into_iter().filter(|h| *h != bsi as usize).collect();
                if let Some(h) = hs.get(*k as usize % hs.len().max(1)) {
                    self.hit("call on another handle");
                    self.other(*h as *mut FutoInAsyncSteps, *c);
                }
            }
            Op::FromThread(o) => {
                self.hit("call from another thread");
                let (c, b, o) = (Addr::of(self), Addr::of(bsi), *o);
                self.spawn(move || {
                    // SAFETY: the context outlives the case's threads.
                    unsafe { &*c.ptr::<Ctx>() }.other(b.ptr(), o);
                });
            }
            Op::NullBsi(c) => {
                self.hit("NULL handle");
                self.null_call(bsi, *c);
            }
            Op::OnStep(c) => {
                self.hit("root call on a step");
                match c {
                    StepOnly::Execute => {
                        let d = self.tok(TokKind::Never);
                        call!(bsi, execute(bsi, d, Some(c_unhandled)));
                    }
                    StepOnly::Cancel => call!(bsi, cancel(bsi)),
                    StepOnly::Free => call!(bsi, free(bsi)),
                }
            }
        }
    }

    /// A callback's program: its calls, then its end. `args` is what an
    /// execute callback got (NULL for handlers and loop bodies).
    fn run(&self, bsi: *mut FutoInAsyncSteps, n: &Node, args: *const FutoInArgs) {
        for o in &n.ops {
            self.op(bsi, o);
        }
        match &n.end {
            End::Return => {}
            End::Success(k) => self.success(bsi, bsi, *k),
            End::Error(c, info) => {
                let i = if *info { c"fuzz info".as_ptr() } else { null() };
                call!(bsi, handle_error(bsi, code_ptr(*c), i));
            }
            End::Break(l) => call!(bsi, break_loop(bsi, label_ptr(*l))),
            End::Continue(l) => call!(bsi, continue_loop(bsi, label_ptr(*l))),
            End::Forward => {
                self.hit("forward args");
                call!(bsi, success(bsi, args as *mut FutoInArgs));
            }
        }
    }

    fn end(&self, how: String) {
        lock(&self.ends).push(how);
        let _ = lock(&self.done).send(());
    }
}

/// The token behind a callback's `data`.
///
/// # Safety
/// `data` came from `Ctx::tok` of a case that is still running.
unsafe fn tok<'a>(data: *mut c_void) -> (&'a Ctx, &'a TokKind) {
    // SAFETY: caller's contract: arena boxes and their context live until
    // the runtime is freed and the case's threads are joined.
    unsafe {
        let t = &*(data as *const Tok);
        (&*t.ctx, &t.kind)
    }
}

unsafe extern "C" fn c_step(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Step { node, .. } = k else {
        return c.violation("c_step with another token");
    };
    if c.enter(bsi) {
        // SAFETY: nodes belong to the case's program, alive until it ends.
        c.run(bsi, unsafe { &**node }, args);
    }
}

unsafe extern "C" fn c_catch(bsi: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Step { eh, .. } = k else {
        return c.violation("c_catch with another token");
    };
    if code.is_null() {
        c.violation("an error handler got a NULL code");
    }
    let _ = text(code);
    if eh.is_null() {
        return c.violation("c_catch without a handler node");
    }
    if c.enter(bsi) {
        c.hit("error handler");
        // SAFETY: as in c_step.
        c.run(bsi, unsafe { &**eh }, null());
    }
}

/// A loop body: breaks by itself after `cap` iterations (or once the case
/// is over its budget).
fn loop_body(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: Option<usize>) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Loop { body, cap, n } = k else {
        return c.violation("a loop body with another token");
    };
    let it = n.fetch_add(1, SeqCst);
    if let Some(i) = i {
        if i != it {
            c.violation(format!("repeat gave i={i} on call {it}"));
        }
    }
    if !c.enter(bsi) || it >= *cap {
        call!(bsi, break_loop(bsi, null()));
        return;
    }
    c.hit("loop body");
    // SAFETY: as in c_step.
    c.run(bsi, unsafe { &**body }, null());
}

unsafe extern "C" fn c_loop(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    loop_body(bsi, data, None);
}

unsafe extern "C" fn c_repeat(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: usize) {
    loop_body(bsi, data, Some(i));
}

unsafe extern "C" fn c_task(data: *mut c_void) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Task(i) = k else {
        return c.violation("c_task with another token");
    };
    let complete = {
        let mut t = lock(&c.tasks);
        let r = &mut t[*i];
        r.ran += 1;
        if r.ran > 1 || r.cancelled || r.never {
            let m = format!(
                "task ran {} times (cancelled {}, never {})",
                r.ran, r.cancelled, r.never
            );
            drop(t);
            return c.violation(m);
        }
        r.complete
    };
    c.hit("task ran");
    if let Some((bsi, o)) = complete {
        c.complete(bsi as *mut FutoInAsyncSteps, o);
    }
}

unsafe extern "C" fn c_cancel(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Cancel(i, act) = k else {
        return c.violation("c_cancel with another token");
    };
    c.hit("cancel callback");
    let n = {
        let mut v = lock(&c.cancels);
        v[*i] += 1;
        v[*i]
    };
    if n > 1 {
        c.violation(format!("a cancel callback ran {n} times"));
    }
    // The cancelled step's handle, from inside its cancel callback.
    match act {
        CancelAct::Nothing => {}
        CancelAct::Success(k) => c.success(bsi, bsi, *k),
        CancelAct::Error => call!(bsi, handle_error(bsi, c"Custom".as_ptr(), null())),
        CancelAct::Sched => {
            c.sched(bsi, bsi, None, TaskRec::default(), false);
        }
    }
}

unsafe extern "C" fn c_alloc(data: *mut c_void) -> *mut c_void {
    static NO_CLEANUP: u64 = 0;
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Var {
        cleanup,
        never,
        reenter,
    } = k
    else {
        c.violation("c_alloc with another token");
        return null_mut();
    };
    if *never {
        c.violation("stateVariable() allocated where it must not");
    }
    if *reenter != 0 {
        // Back into the runtime from allocate(): the handle being asked.
        c.hit("re-entrant allocate");
        let h = *reenter as *mut FutoInAsyncSteps;
        c.state_var(h, h, Name::A, true, true, false, false);
        call!(h, is_valid(h));
        call!(h, root_id(h));
        let d = c.step_tok(&EMPTY_NODE, None);
        call!(h, add(h, d, Some(c_step), None));
    }
    if !cleanup {
        return &NO_CLEANUP as *const u64 as *mut c_void;
    }
    c.hit("state variable made");
    c.vars_made.fetch_add(1, SeqCst);
    let p = Box::into_raw(Box::new(0x5EED_u64)) as *mut c_void;
    lock(&c.vars_live).insert(p as usize);
    p
}

unsafe extern "C" fn c_var_cleanup(data: *mut c_void, value: *mut c_void) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Var { cleanup: true, .. } = k else {
        return c.violation("a state variable cleanup with another token");
    };
    if !lock(&c.vars_live).remove(&(value as usize)) {
        return c.violation(format!(
            "state variable cleanup of {value:?}: not made, or twice"
        ));
    }
    c.vars_freed.fetch_add(1, SeqCst);
    // SAFETY: made by c_alloc as a Box<u64>, cleaned up once (checked).
    drop(unsafe { Box::from_raw(value as *mut u64) });
}

unsafe extern "C" fn c_stack_cleanup(value: *mut c_void) {
    match lock(&BLOCKS).remove(&(value as usize)) {
        Some(ctx) => {
            // SAFETY: the block's case is alive while its blocks are.
            unsafe { &*(ctx as *const Ctx) }
                .stacks_freed
                .fetch_add(1, SeqCst);
        }
        None => {
            STRAY.fetch_add(1, SeqCst);
        }
    }
}

unsafe extern "C" fn c_last(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    match k {
        TokKind::Main => c.end("ok".into()),
        TokKind::SubFlow(i) => {
            let s = lock(&c.subs)[*i].clone();
            lock(&s.ends).push("ok".into());
        }
        _ => c.violation("c_last with another token"),
    }
}

unsafe extern "C" fn c_unhandled(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    match k {
        TokKind::Main => {
            if c.main_root.load(SeqCst) != bsi as usize {
                c.violation("unhandled_error did not get the root's handle");
            }
            if c.reexecute_in_unhandled {
                // The flow still runs: a no-op.
                let d = c.tok(TokKind::Never);
                call!(bsi, execute(bsi, d, Some(c_unhandled)));
            }
            if c.free_in_unhandled {
                c.root_freed.store(true, SeqCst);
                call!(bsi, free(bsi));
            }
            c.end(text(code));
        }
        TokKind::SubFlow(i) => {
            let s = lock(&c.subs)[*i].clone();
            if s.root != bsi as usize {
                c.violation("a sub-flow's unhandled_error did not get its root");
            }
            lock(&s.ends).push(text(code));
            if let FreeRoot::Unhandled = s.free {
                s.free();
            }
        }
        TokKind::AfterFree => lock(&c.after_free_ends).push(text(code)),
        _ => c.violation(format!(
            "an unhandled_error that must not run ran ({})",
            text(code)
        )),
    }
}

unsafe extern "C" fn c_free_own(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::FreeOwn(i) = k else {
        return c.violation("c_free_own with another token");
    };
    c.hit("root freed by its own step");
    let s = lock(&c.subs)[*i].clone();
    s.free();
}

unsafe extern "C" fn c_never_step(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    // SAFETY: a token of the case.
    unsafe { tok(data) }
        .0
        .violation("a step added through a NULL handle ran");
}

unsafe extern "C" fn c_never_catch(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const c_char) {
    // SAFETY: a token of the case.
    unsafe { tok(data) }
        .0
        .violation("a handler added through a NULL handle ran");
}

unsafe extern "C" fn c_never_loop(_: *mut FutoInAsyncSteps, data: *mut c_void) {
    // SAFETY: a token of the case.
    unsafe { tok(data) }
        .0
        .violation("a loop added through a NULL handle ran");
}

unsafe extern "C" fn f_lock(bsi: *mut FutoInAsyncSteps, sync: *mut FutoInSync) {
    // SAFETY: our ForeignSync, alive until the case ends.
    let s = unsafe { &*(sync as *const ForeignSync) };
    // SAFETY: its context, alive as long.
    let c = unsafe { &*s.ctx };
    c.binds.fetch_add(1, SeqCst);
    c.hit("foreign lock");
    c.locks.fetch_add(1, SeqCst);
    if s.fail {
        c.lock_fails.fetch_add(1, SeqCst);
        call!(bsi, handle_error(bsi, c"LockFailed".as_ptr(), null()));
    }
}

unsafe extern "C" fn f_unlock(_: *mut FutoInAsyncSteps, sync: *mut FutoInSync) {
    // SAFETY: as in f_lock.
    let s = unsafe { &*(sync as *const ForeignSync) };
    // SAFETY: as in f_lock.
    let c = unsafe { &*s.ctx };
    c.binds.fetch_add(1, SeqCst);
    c.unlocks.fetch_add(1, SeqCst);
}

// ---- running a program ------------------------------------------------------

/// Root-level calls before execute (the root's handle `r`).
fn do_root_op(c: &Ctx, r: *mut FutoInAsyncSteps, op: &RootOp, pars: &mut Vec<usize>) {
    match op {
        RootOp::Add(s) => c.add_sub(r, s),
        RootOp::Parallel {
            eh,
            branches,
            misuse,
        } => {
            let d = c.step_tok(&EMPTY_NODE, eh.as_ref());
            let ehc: ErrorCallback = eh.as_ref().map(|_| c_catch as _);
            let ph = call!(r, parallel(r, d, ehc));
            if ph.is_null() {
                return c.violation("parallel() on an idle root gave NULL");
            }
            pars.push(ph as usize);
            for b in branches {
                c.add_sub(ph, b);
            }
            if let Some(k) = misuse {
                c.success(ph, ph, *k);
                if !call!(ph, stack(ph, 8, Some(c_stack_cleanup))).is_null() {
                    c.violation("stack() on a root's parallel gave memory");
                }
                if call!(ph, is_valid(ph)) != 0 {
                    c.violation("isValid() of a root's parallel handle != 0");
                }
            }
        }
        RootOp::StateVar {
            name,
            alloc,
            cleanup,
            reenter,
        } => {
            c.state_var(r, r, *name, *alloc, *cleanup, false, *reenter);
        }
        RootOp::Poison(p) => {
            c.hit("step call on a root");
            match p {
                Poison::Stack => {
                    if !call!(r, stack(r, 16, Some(c_stack_cleanup))).is_null() {
                        c.violation("stack() on a root gave memory");
                    }
                }
                Poison::Success(k) => c.success(r, r, *k),
                Poison::HandleError => call!(r, handle_error(r, c"Custom".as_ptr(), null())),
                Poison::SetTimeout => call!(r, set_timeout(r, 1)),
                Poison::SetCancel => {
                    let d = c.tok(TokKind::Never);
                    call!(r, set_cancel(r, d, Some(c_cancel)));
                }
                Poison::WaitExternal => call!(r, wait_external(r)),
                Poison::Loop => {
                    let d = c.tok(TokKind::Never);
                    call!(r, loop_(r, d, Some(c_never_loop), null()));
                }
                Poison::Repeat => {
                    let d = c.tok(TokKind::Never);
                    call!(r, repeat(r, d, 3, Some(c_repeat), null()));
                }
                Poison::Break => call!(r, break_loop(r, null())),
                Poison::Continue => call!(r, continue_loop(r, c"L0".as_ptr())),
            }
        }
        RootOp::AddSync(k, s) => c.add_sync(r, *k, s),
        RootOp::Sched(delay) => {
            let (h, _) = c.sched(r, r, *delay, TaskRec::default(), false);
            if h != FutoInHandle::EMPTY {
                c.violation("scheduling on a root gave a handle");
            }
        }
        RootOp::NewInstanceFree => {
            let n = call!(r, new_instance(r));
            if n.is_null() {
                return c.violation("newInstance() on a root gave NULL");
            }
            call!(n, free(n));
        }
        RootOp::Info => {
            if call!(r, is_valid(r)) != 1 {
                c.violation("isValid(root) != 1");
            }
            if call!(r, root_id(r)) % 2 == 0 {
                c.violation("a root's id is not odd");
            }
            if call!(r, is_same_thread(r)) != 0 {
                c.violation("is_same_thread(root) != 0 on the test thread");
            }
        }
        RootOp::NullBsi(k) => {
            let n = null_mut();
            match k {
                RootNull::Add => {
                    let d = c.tok(TokKind::Never);
                    call!(r, add(n, d, Some(c_never_step), None));
                }
                RootNull::Execute => {
                    let d = c.tok(TokKind::Never);
                    call!(r, execute(n, d, Some(c_unhandled)));
                }
                RootNull::Free => call!(r, free(n)),
                RootNull::Parallel => {
                    if !call!(r, parallel(n, null_mut(), None)).is_null() {
                        c.violation("root parallel(NULL) gave a handle");
                    }
                }
                RootNull::StateVar => {
                    if !c
                        .state_var(n, r, Name::A, true, true, true, false)
                        .is_null()
                    {
                        c.violation("root stateVariable(NULL) gave a value");
                    }
                }
                RootNull::Sched => {
                    let rec = TaskRec {
                        never: true,
                        ..TaskRec::default()
                    };
                    c.sched(n, r, None, rec, false);
                }
                RootNull::IsValid => {
                    if call!(r, is_valid(n)) != 0 {
                        c.violation("root isValid(NULL) != 0");
                    }
                }
                RootNull::Cancel => call!(r, cancel(n)),
            }
        }
    }
}

/// What a program did, for the coverage report.
struct Ran {
    end: String,
    cov: HashMap<&'static str, u64>,
    binds: usize,
}

fn run_prog(p: &Prog) -> Result<Ran, TestCaseError> {
    let case = NEXT_CASE.fetch_add(1, SeqCst);
    let (tx, rx): (Sender<()>, Receiver<()>) = channel();
    let ctx = Ctx::new(case, p, tx);
    let c = &*ctx;
    let rt = new_runtime(p.threads);
    // SAFETY: a live runtime.
    let root = unsafe { futoin_asyncsteps_new(rt) };
    c.main_root.store(root as usize, SeqCst);
    let mut pars = Vec::new();
    for o in &p.root {
        do_root_op(c, root, o, &mut pars);
    }
    let main = c.tok(TokKind::Main);
    call!(root, add(root, main, Some(c_last), None));
    call!(root, execute(root, main, Some(c_unhandled)));
    for o in &p.running {
        match o {
            RunOp::Execute => {
                let d = c.tok(TokKind::Never);
                call!(root, execute(root, d, Some(c_unhandled)));
            }
            RunOp::Info => {
                if call!(root, is_valid(root)) != 1 {
                    c.violation("isValid(root) != 1 while it runs");
                }
                if call!(root, is_same_thread(root)) != 0 {
                    c.violation("is_same_thread(root) != 0 on the test thread");
                }
            }
            RunOp::StateVar(n) => {
                c.state_var(root, root, *n, true, true, false, false);
            }
            RunOp::Sched => {
                c.sched(root, root, None, TaskRec::default(), false);
            }
            RunOp::ParAdd => {
                if let Some(ph) = pars.first() {
                    let ph = *ph as *mut FutoInAsyncSteps;
                    c.add_sub(
                        ph,
                        &Sub {
                            node: EMPTY_NODE.clone(),
                            eh: None,
                            null_cb: false,
                        },
                    );
                }
            }
        }
    }
    let mut ended = rx.recv_timeout(hang()).is_ok();
    let mut runs = 1;
    if let (Some(s), true) = (&p.rerun, ended) {
        // Again, once the first flow is over: the last step (or the
        // unhandled-error callback) runs before the root is idle, and
        // execute() on a running root is a no-op, so it is asked until it
        // starts (an execute that finds the model empty is harmless).
        runs = 2;
        c.add_sub(root, s);
        call!(root, add(root, main, Some(c_last), None));
        let until = Instant::now() + hang();
        ended = loop {
            call!(root, execute(root, main, Some(c_unhandled)));
            if rx.recv_timeout(Duration::from_millis(10)).is_ok() {
                break true;
            }
            if Instant::now() > until {
                break false;
            }
        };
    }
    let late = p.execute_after_free.then(|| {
        // SAFETY: a live runtime.
        let l = unsafe { futoin_asyncsteps_new(rt) };
        let d = c.tok(TokKind::Never);
        call!(l, add(l, d, Some(c_never_step), None));
        l
    });
    if !c.root_freed.load(SeqCst) {
        call!(root, free(root));
    }
    // Sub-flows may still run (and make roots): only roots whose maker is
    // done with them now, the others once no step can run.
    let subs = lock(&c.subs).clone();
    for s in &subs {
        if s.ready.load(SeqCst) && !matches!(s.free, FreeRoot::AfterRuntime) {
            s.free();
        }
    }
    let join = || loop {
        let t = lock(&c.threads).pop();
        match t {
            Some(t) => t.join().expect("a completion thread"),
            None => break,
        }
    };
    join();
    free_runtime(rt);
    join();
    let subs = lock(&c.subs).clone();
    for s in &subs {
        s.free();
    }
    if let Some(l) = late {
        let d = c.tok(TokKind::AfterFree);
        call!(l, execute(l, d, Some(c_unhandled)));
        call!(l, free(l));
        let e = lock(&c.after_free_ends).clone();
        if e != ["InternalError"] {
            c.violation(format!("execute() after the runtime was freed: {e:?}"));
        }
    }
    // SAFETY: made by futoin_mutex_new/futoin_throttle_new; no flow is
    // left to use them.
    unsafe {
        futoin_sync_free(c.mutex);
        futoin_sync_free(c.throttle);
    }

    let mut bad = std::mem::take(&mut *lock(&c.violations));
    bad.extend(settle_values(case));
    let ends = lock(&c.ends).clone();
    if !ended {
        bad.push(format!("the flow did not end in {:?}", hang()));
    } else if ends.len() != runs {
        bad.push(format!(
            "the flow ended {} times in {runs} runs: {ends:?}",
            ends.len()
        ));
    }
    for (i, s) in subs.iter().enumerate() {
        let e = lock(&s.ends);
        if e.len() > 1 {
            bad.push(format!("sub-flow {i} ended {} times: {e:?}", e.len()));
        }
    }
    drop(subs);
    let (made, freed) = (c.vars_made.load(SeqCst), c.vars_freed.load(SeqCst));
    if made != freed || !lock(&c.vars_live).is_empty() {
        bad.push(format!(
            "state variables: {made} allocated, {freed} cleaned up"
        ));
    }
    let (made, freed) = (c.stacks_made.load(SeqCst), c.stacks_freed.load(SeqCst));
    let me = c as *const Ctx as usize;
    let left = {
        let mut b = lock(&BLOCKS);
        let mine: Vec<usize> = b
            .iter()
            .filter(|(_, v)| **v == me)
            .map(|(k, _)| *k)
            .collect();
        for k in &mine {
            b.remove(k);
        }
        mine.len()
    };
    if made != freed || left != 0 {
        bad.push(format!(
            "stack blocks: {made} with a cleanup, {freed} cleaned up"
        ));
    }
    let (locks, fails, unlocks) = (
        c.locks.load(SeqCst),
        c.lock_fails.load(SeqCst),
        c.unlocks.load(SeqCst),
    );
    if locks - fails != unlocks {
        bad.push(format!(
            "foreign sync: {locks} locks ({fails} failed), {unlocks} unlocks"
        ));
    }
    let ran = Ran {
        end: ends.first().cloned().unwrap_or_else(|| "<none>".into()),
        cov: std::mem::take(&mut *lock(&c.cov)),
        binds: c.binds.load(SeqCst),
    };
    drop(ctx);
    prop_assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(ran)
}

#[test]
fn call_sequences_never_crash_hang_or_leak() {
    let (mut runner, cases, seed) = runner(2500, 2);
    let cov = Coverage::default();
    let ran = AtomicUsize::new(0);
    let binds = AtomicUsize::new(0);
    let started = Instant::now();
    let res = runner.run(&prog(), |p| {
        ran.fetch_add(1, SeqCst);
        trace(&p);
        let r = bounded(move || run_prog(&p))?;
        binds.fetch_add(r.binds, SeqCst);
        cov.hit(format!("end {}", r.end));
        cov.hit(match r.binds {
            0 => "callbacks 0",
            1..=3 => "callbacks 1-3",
            4..=10 => "callbacks 4-10",
            11..=30 => "callbacks 11-30",
            31..BUDGET => "callbacks 31+",
            _ => "callbacks over budget",
        });
        for (k, v) in r.cov {
            *lock(&cov.0).entry(k.to_string()).or_default() += v;
        }
        Ok(())
    });
    let _ = writeln!(
        std::io::stderr(),
        "cabi_fuzz calls: {} programs ran ({cases} asked, seed {seed}), {} callbacks, in {:.1?}",
        ran.load(SeqCst),
        binds.load(SeqCst),
        started.elapsed()
    );
    cov.report("cabi_fuzz calls");
    assert_eq!(STRAY.load(SeqCst), 0, "cleanups no case knows");
    if let Err(e) = res {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------
// Regression tests: shrunk programs worth keeping
// ---------------------------------------------------------------------------

fn prog_of(root: Vec<RootOp>) -> Prog {
    Prog {
        threads: 1,
        mutex: (1, u32::MAX),
        root,
        running: vec![],
        free_in_unhandled: false,
        reexecute_in_unhandled: false,
        rerun: None,
        execute_after_free: false,
    }
}

/// Shrunk by `call_sequences_never_crash_hang_or_leak` to this one call:
/// stateVariable() on a root ran the caller's allocate() with the root's
/// lock held, so an allocate() that calls the same root again (here
/// stateVariable() of the same or another name, isValid(), rootId(),
/// add()) deadlocked. Fixed in `cabi/root.rs`: a new variable is made with
/// the lock released (and dropped, with its cleanup, if the name was made
/// meanwhile or the root started running).
#[test]
fn root_state_variable_allocate_may_call_the_root() {
    for (name, cleanup) in [
        (Name::A, false),
        (Name::A, true),
        (Name::B, false),
        (Name::B, true),
    ] {
        let p = prog_of(vec![RootOp::StateVar {
            name,
            alloc: true,
            cleanup,
            reenter: true,
        }]);
        let r = bounded(move || run_prog(&p))
            .unwrap_or_else(|e| panic!("{name:?}, cleanup {cleanup}: {e}"));
        assert_eq!(r.end, "ok");
        assert_eq!(r.cov.get("re-entrant allocate"), Some(&1));
        // The step allocate() added ran.
        assert_eq!(r.binds, 1);
    }
}

/// The same from a step: allocate() calls its step's handle again.
#[test]
fn step_state_variable_allocate_may_call_the_step() {
    let op = |name, cleanup| Op::StateVar {
        name,
        alloc: true,
        cleanup,
        reenter: true,
    };
    let node = Node {
        ops: vec![op(Name::A, true), op(Name::B, true), op(Name::A, false)],
        end: End::Return,
    };
    let p = prog_of(vec![RootOp::Add(Sub {
        node,
        eh: None,
        null_cb: false,
    })]);
    let r = bounded(move || run_prog(&p)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.end, "ok");
    assert_eq!(r.cov.get("re-entrant allocate"), Some(&2));
}

/// Found by `call_sequences_never_crash_hang_or_leak` in a release build
/// (a double free reported by malloc), pinned down with AddressSanitizer:
/// execute() went on using the root after it had started the flow, but the
/// flow may end, and C free the root (from its unhandled-error callback,
/// as the header allows, or from a step), before execute() returns: a use
/// after free. Fixed in `cabi/root.rs`: execute() holds a reference of its
/// own. It is a race, made likely here: each flow fails at once and frees
/// its root; its loop sleeps until execute() wakes it, and two spinning
/// threads keep the cores busy, so the woken loop often preempts the
/// thread in execute(). With AddressSanitizer
/// (`RUSTFLAGS=-Zsanitizer=address cargo +nightly test --release --target
/// x86_64-unknown-linux-gnu --test cabi_fuzz`) the unfixed code fails it
/// on most runs; without, a use after free is silent or a crash.
#[test]
fn root_freed_by_its_unhandled_callback_while_execute_returns() {
    const FLOWS: usize = 3_000;
    unsafe extern "C" fn free_root(
        bsi: *mut FutoInAsyncSteps,
        data: *mut c_void,
        _: *const c_char,
    ) {
        call!(bsi, free(bsi));
        // SAFETY: the test's sender, alive until every flow reported.
        let _ = lock(unsafe { &*(data as *const Mutex<Sender<()>>) }).send(());
    }
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let spinners: Vec<JoinHandle<()>> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let data = &tx as *const Mutex<Sender<()>> as *mut c_void;
    let rt = new_runtime(1);
    for i in 0..FLOWS {
        // SAFETY: a live runtime.
        let r = unsafe { futoin_asyncsteps_new(rt) };
        // A NULL execute callback: the flow fails at once.
        call!(r, add(r, null_mut(), None, None));
        call!(r, execute(r, data, Some(free_root)));
        // `r` may be gone already: not touched again.
        if rx.recv_timeout(hang()).is_err() {
            stop.store(true, SeqCst);
            panic!("flow {i} did not end");
        }
    }
    stop.store(true, SeqCst);
    for t in spinners {
        t.join().expect("a spinning thread");
    }
    free_runtime(rt);
}
