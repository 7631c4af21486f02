//! Soak test: millions of root flows over all loops of a `Runtime`, with
//! external completions from plain threads, root cancels, timeouts, a
//! `Mutex` shared by every loop, and TCP connections over loopback. Every
//! flow must end exactly once with an outcome its plan allows, and the
//! process must not grow.
//!
//! Opt-in (every test here is `#[ignore]`):
//!
//! ```text
//! cargo test --release --test soak -- --ignored --nocapture
//! ```
//!
//! Scale and bounds (environment variables; `_` and `,` allowed in numbers):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `SOAK_FLOWS` | 1,000,000 | flows in the measured round |
//! | `SOAK_WARMUP` | max(50,000, flows / 10), at most `SOAK_FLOWS` | flows in the warm-up round |
//! | `SOAK_SECS` | 600 | time cap of each round: no new flow starts after it; the flows started so far are drained and checked |
//! | `SOAK_WINDOW` | 4096 | flows in flight at once |
//! | `SOAK_LOOPS` | number of cores | loops of the runtime |
//! | `SOAK_THREADS` | 4 | plain threads completing `wait_external` handles |
//! | `SOAK_SEED` | 0x5eed | seed of the generators (the same seed gives the same plans) |
//! | `SOAK_KINDS` | all | the kinds of flows to run, comma-separated: `plain`, `external`, `timer`, `locked`, `socket` |
//!
//! Each flow gets a plan from a xorshift generator seeded with the seed and
//! its id: a plain flow (sub-steps, a `repeat`, a `parallel`), a wait for
//! an external completion (done by a pool thread, at once or after a
//! random delay, with a success or an error, sometimes racing a timeout), a
//! wait that only a timeout ends (sometimes recovered by a handler), a
//! section of a `Mutex(2)` with a queue of at most 256, shared by all loops
//! (held until an immediate callback, a timer or an external completion,
//! sometimes under a timeout),
//! or a TCP client (connect, write, read the echo, read the server's close;
//! 8% of them close early on purpose, after nothing or half the message)
//! served by one accept loop per runtime loop (`io::net`). The feeder
//! thread also cancels some flows: some at once (often before they start),
//! some after a random delay from 1 µs to 65 ms (log-uniform, so that
//! cancels land in every stage of a flow, queued, started or nearly done).
//!
//! Checks:
//! - started == ended: every promise settles (a flow that does not settle
//!   within 60 s of the last progress fails the test, listing them);
//! - no flow ends twice: the flow's last step and its outer error handler
//!   each mark a per-flow atomic flag, and exactly the one that matches the
//!   promise's outcome must have run, once (a root-cancelled flow: none);
//!   a settled promise is kept for the next 8192 settlements and must then
//!   still answer "already taken" (a second completion would replace it);
//! - each outcome is one the flow's plan allows, success values exact;
//! - the Mutex never admits more than 2 at once and ends empty; every
//!   accepted connection's server flow ends, failing (`CommError`) for
//!   each client that left early and for no other reason than that or a
//!   client's cancel; no unhandled error is reported; no flow is left on a
//!   loop;
//! - memory: the resident set size (VmRSS, `/proc/self/status`) read with
//!   the runtime idle after the measured round grows by at most 10% over
//!   the one read, idle, after the warm-up round (only growth fails). The
//!   warm-up exists so that everything that legitimately stays allocated
//!   already exists when the "before" figure is taken: first every loop is
//!   filled with as many flows at once as the rounds can ever put on one
//!   loop (2 x window + 16, each deep, with queued steps and a timer), so
//!   each loop's pool of ended flows, wait tokens, flow table and timer
//!   wheel reach their high-water mark (a loop keeps its pool, up to its
//!   peak of flows, giving back only what is beyond 65,536 after 10 s
//!   quiet; without this a rare new peak of
//!   flows on one loop would look like growth); then a warm-up round runs
//!   the same mix as the measured round, so the allocator's per-thread
//!   arenas and the sockets' and channels' buffers exist too. The per-flow
//!   bookkeeping of both rounds is allocated and touched before that.
//!
//! The summary table is printed at the end (flows, duration, flows/s,
//! outcomes by code, cancels, per-kind outcomes, RSS).

use futoin_asyncsteps::io::net;
use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::sync::Mutex;
use futoin_asyncsteps::{error::codes, AsyncSteps, Error, ExternalHandle, Promise, Step, TakeOnce};
use mio::net::{TcpListener, TcpStream};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Configuration and a small generator
// ---------------------------------------------------------------------------

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.replace(['_', ','], "");
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        }
        Err(_) => default,
    }
}

struct Config {
    flows: u64,
    warmup: u64,
    cap: Duration,
    window: usize,
    loops: usize,
    threads: usize,
    seed: u64,
}

impl Config {
    fn from_env() -> Self {
        let flows = env_num("SOAK_FLOWS", 1_000_000);
        let cores = thread::available_parallelism().map_or(2, |n| n.get()) as u64;
        Config {
            flows,
            warmup: env_num("SOAK_WARMUP", (flows / 10).max(50_000)).min(flows),
            cap: Duration::from_secs(env_num("SOAK_SECS", 600)),
            window: env_num("SOAK_WINDOW", 4096).max(1) as usize,
            loops: env_num("SOAK_LOOPS", cores).max(1) as usize,
            threads: env_num("SOAK_THREADS", 4).max(1) as usize,
            seed: env_num("SOAK_SEED", 0x5eed),
        }
    }
}

/// xorshift64* with a splitmix64-scrambled seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

// ---------------------------------------------------------------------------
// Plans: what a flow does, and which outcomes it may end with
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Plain,
    External,
    Timer,
    Locked,
    Socket,
}

#[derive(Clone, Copy, Debug)]
struct Plan {
    kind: Kind,
    /// Plain: `repeat` count; Locked: how the section is held (0: until
    /// an immediate callback of the loop, 1: a timer of up to 1 ms, 2: an
    /// external completion by a pool thread); Socket: 0 a full echo, 1 the
    /// client closes once connected, 2 it closes after half the message
    /// (the server flow then fails with `CommError`).
    n: u64,
    /// Plain: parallel branches.
    branches: u64,
    timeout: Option<Duration>,
    /// Timer: a handler turns the timeout into a success.
    recover: bool,
    /// Locked: the section waits for a pool thread (n == 2).
    external: bool,
    /// Socket: which listener.
    listener: usize,
}

/// The kinds and their weights (percent of the flows) by default.
const MIX: [(Kind, u64); 5] = [
    (Kind::Plain, 33),
    (Kind::External, 30),
    (Kind::Timer, 15),
    (Kind::Locked, 12),
    (Kind::Socket, 10),
];

/// The mix of `SOAK_KINDS` (a comma-separated subset of the kinds'
/// names, lowercase), else all of them.
fn mix_from_env() -> Vec<(Kind, u64)> {
    let Ok(v) = std::env::var("SOAK_KINDS") else {
        return MIX.to_vec();
    };
    let want: Vec<String> = v.split(',').map(|k| k.trim().to_lowercase()).collect();
    let mix: Vec<_> = MIX
        .iter()
        .copied()
        .filter(|(k, _)| want.contains(&format!("{k:?}").to_lowercase()))
        .collect();
    assert!(
        !mix.is_empty(),
        "SOAK_KINDS={v}: no known kind (plain, external, timer, locked, socket)"
    );
    mix
}

fn plan(seed: u64, id: u64, listeners: usize, mix: &[(Kind, u64)]) -> Plan {
    let mut r = Rng::new(seed ^ id.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let mut pick = r.below(mix.iter().map(|m| m.1).sum());
    let mut kind = mix[0].0;
    for &(k, w) in mix {
        if pick < w {
            kind = k;
            break;
        }
        pick -= w;
    }
    let ms = |r: &mut Rng, max: u64| Duration::from_micros(r.below(max * 1000 + 1));
    let mut p = Plan {
        kind,
        n: 0,
        branches: 0,
        timeout: None,
        recover: false,
        external: false,
        listener: 0,
    };
    match kind {
        Kind::Plain => {
            p.n = r.below(21);
            p.branches = r.below(4);
        }
        Kind::External => {
            if r.chance(30) {
                p.timeout = Some(ms(&mut r, 3));
            }
        }
        Kind::Timer => {
            p.timeout = Some(ms(&mut r, 2));
            p.recover = r.chance(50);
        }
        Kind::Locked => {
            p.n = r.below(3);
            p.external = p.n == 2;
            if r.chance(30) {
                p.timeout = Some(Duration::from_millis(1) + ms(&mut r, 4));
            }
        }
        Kind::Socket => {
            p.listener = r.below(listeners as u64) as usize;
            p.n = match r.below(100) {
                0..=3 => 1,
                4..=7 => 2,
                _ => 0,
            };
        }
    }
    p
}

/// The success value a flow of this plan ends with.
fn expected_value(id: u64, p: &Plan) -> u64 {
    match p.kind {
        Kind::Plain => id + p.n + 10 * p.branches,
        Kind::External => external_value(id) + 1,
        Kind::Timer => id + 7,
        Kind::Locked => id + 3,
        Kind::Socket => id + 5,
    }
}

fn external_value(id: u64) -> u64 {
    id.wrapping_mul(2) + 1
}

/// Whether the plan allows ending with `code`.
fn allowed_error(p: &Plan, code: &str, targeted: bool) -> bool {
    if code == codes::CANCELED {
        return targeted;
    }
    match p.kind {
        Kind::Plain | Kind::Socket => false,
        Kind::External => code == EXT_ERROR || (code == codes::TIMEOUT && p.timeout.is_some()),
        Kind::Timer => code == codes::TIMEOUT && !p.recover,
        Kind::Locked => {
            code == codes::DEFENSE_REJECTED
                || (code == codes::TIMEOUT && p.timeout.is_some())
                || (code == EXT_ERROR && p.external)
        }
    }
}

/// The error a pool thread completes some handles with.
const EXT_ERROR: &str = "SoakExternal";
/// The Mutex shared by every loop: at most this many inside.
const MUTEX_MAX: u32 = 2;
const MUTEX_QUEUE: u32 = 256;
/// Bytes a socket client sends and expects back.
const MSG: usize = 32;

// Per-flow flags (one byte each).
const FINAL: u8 = 1;
const HANDLER: u8 = 1 << 2;
const MARKS: u8 = 0b1111;
const TARGETED: u8 = 1 << 7;

// ---------------------------------------------------------------------------
// Shared state of the flows
// ---------------------------------------------------------------------------

/// A handle for a pool thread to complete with `value` (or an error).
struct Job {
    handle: ExternalHandle,
    value: u64,
}

#[derive(Default)]
struct PoolStats {
    sent: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
}

#[derive(Default)]
struct ServerStats {
    accepted: AtomicU64,
    ended: AtomicU64,
    errors: Counts,
}

/// Counts by error code, shared by threads (rare events: a lock is fine).
#[derive(Default)]
struct Counts(std::sync::Mutex<BTreeMap<String, u64>>);

impl Counts {
    fn add(&self, code: &str) {
        *self.0.lock().unwrap().entry(code.to_owned()).or_default() += 1;
    }
    fn get(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap().clone()
    }
}

struct Ctx {
    seed: u64,
    mix: Vec<(Kind, u64)>,
    /// Per-flow flags: FINAL / HANDLER marks (2 bits each) and TARGETED.
    flags: Vec<AtomicU8>,
    pool: Vec<mpsc::Sender<Job>>,
    mutex: Mutex,
    inside: AtomicUsize,
    inside_peak: AtomicUsize,
    addrs: Vec<SocketAddr>,
    server: ServerStats,
    cancel_callbacks: AtomicU64,
}

impl Ctx {
    fn plan(&self, id: u64) -> Plan {
        plan(self.seed, id, self.addrs.len(), &self.mix)
    }

    fn mark(&self, id: u64, m: u8) {
        self.flags[id as usize].fetch_add(m, Relaxed);
    }

    fn to_pool(&self, id: u64, handle: ExternalHandle, value: u64) {
        let t = (id as usize).wrapping_mul(7) % self.pool.len();
        // A send fails only once the pool is gone (never while flows run).
        let _ = self.pool[t].send(Job { handle, value });
    }
}

/// Counts a flow inside the Mutex while it lives on the section's stack.
struct Inside(Arc<Ctx>);

impl Inside {
    fn enter(c: &Arc<Ctx>) -> Self {
        let n = c.inside.fetch_add(1, Relaxed) + 1;
        c.inside_peak.fetch_max(n, Relaxed);
        Inside(c.clone())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Relaxed);
    }
}

// ---------------------------------------------------------------------------
// The flows
// ---------------------------------------------------------------------------

/// The root of flow `id`: the plan's body under an outer error handler,
/// then a last step; both mark the flow's flags.
fn flow(ctx: &Arc<Ctx>, id: u64) -> AsyncSteps {
    let p = ctx.plan(id);
    let mut root = AsyncSteps::new();
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    root.add_catch(
        move |s, ()| {
            body(&c1, s, id, p);
            Ok(())
        },
        move |_, _| {
            c2.mark(id, HANDLER);
            Ok(()) // the error goes on: the flow fails with it
        },
    );
    root.add(move |s, (v,): (u64,)| {
        c3.mark(id, FINAL);
        s.success((v,))
    });
    root
}

/// Adds the plan's steps; the last one succeeds with `(value,)`.
fn body(ctx: &Arc<Ctx>, s: &mut Step<'_>, id: u64, p: Plan) {
    match p.kind {
        Kind::Plain => {
            s.state().set("acc", id);
            s.repeat(p.n as usize, |s, _| {
                *s.state().get_mut::<u64>("acc").unwrap() += 1;
                Ok(())
            });
            if p.branches > 0 {
                let mut par = s.parallel();
                for _ in 0..p.branches {
                    par.add(|s, ()| {
                        s.add(|s, ()| {
                            *s.state().get_mut::<u64>("acc").unwrap() += 10;
                            Ok(())
                        });
                        Ok(())
                    });
                }
            }
            s.add(|s, ()| {
                let v = *s.state().get::<u64>("acc").unwrap();
                s.success((v,))
            });
        }
        Kind::External => {
            let c = ctx.clone();
            s.add(move |s, ()| {
                if let Some(t) = p.timeout {
                    s.set_timeout(t);
                }
                let h = s.wait_external();
                c.to_pool(id, h, external_value(id));
                Ok(())
            });
            s.add(|s, (v,): (u64,)| s.success((v + 1,)));
        }
        Kind::Timer => {
            let t = p.timeout.expect("a timer has a timeout");
            let c = ctx.clone();
            let wait = move |s: &mut Step<'_>, ()| {
                s.set_timeout(t);
                let c = c.clone();
                s.set_cancel(move || {
                    c.cancel_callbacks.fetch_add(1, Relaxed);
                });
                Ok(())
            };
            if p.recover {
                s.add_catch(wait, move |s, e| {
                    if e.code() == codes::TIMEOUT {
                        s.success((id + 7,))
                    } else {
                        Ok(())
                    }
                });
            } else {
                s.add(wait);
            }
        }
        Kind::Locked => {
            let c = ctx.clone();
            s.add(move |s, ()| {
                if let Some(t) = p.timeout {
                    s.set_timeout(t);
                }
                let m = c.mutex.clone();
                let c = c.clone();
                s.sync(&m, move |s, ()| {
                    s.stack(Inside::enter(&c));
                    let c = c.clone();
                    s.add(move |s, ()| {
                        let h = s.wait_external();
                        match p.n {
                            0 => {
                                s.tool().immediate(move |_| {
                                    let _ = h.success((0u64,));
                                });
                            }
                            1 => {
                                let d = Duration::from_micros(id % 1000);
                                s.tool().deferred(d, move |_| {
                                    let _ = h.success((0u64,));
                                });
                            }
                            _ => c.to_pool(id, h, 0),
                        }
                        Ok(())
                    });
                    s.add(move |s, (_,): (u64,)| s.success((id + 3,)));
                    Ok(())
                });
                Ok(())
            });
        }
        Kind::Socket => {
            let addr = ctx.addrs[p.listener];
            s.add(move |s, ()| {
                net::connect(s, addr, Duration::from_secs(10));
                Ok(())
            });
            s.add(move |s, (conn,): (TcpStream,)| {
                let c = s.stack(conn);
                let msg = message(id);
                if p.n != 0 {
                    // Leaves early: the connection closes with this step.
                    let part = if p.n == 1 { 0 } else { MSG / 2 };
                    net::write_all(s, c, msg[..part].to_vec());
                    s.add(move |s, ()| s.success((id + 5,)));
                    return Ok(());
                }
                net::write_all(s, c, msg.clone());
                net::read_exact(s, c, MSG);
                s.add(move |s, (back,): (Vec<u8>,)| {
                    if back != msg {
                        return s.error("SoakMismatch", "the echo differs");
                    }
                    // The server closes after the echo: end of stream.
                    net::read_some(s, c, 16);
                    Ok(())
                });
                s.add(move |s, (rest,): (Vec<u8>,)| {
                    if !rest.is_empty() {
                        return s.error("SoakMismatch", "bytes after the echo");
                    }
                    s.success((id + 5,))
                });
                Ok(())
            });
        }
    }
}

fn message(id: u64) -> Vec<u8> {
    let mut m = id.to_le_bytes().to_vec();
    m.extend((0..MSG - 8).map(|i| (id as u8).wrapping_add(i as u8)));
    m
}

/// One server flow per accepted connection: read a message, echo it,
/// close. Errors (a client cancelled mid-way) are counted and recovered.
fn server_flow(ctx: &Arc<Ctx>, conn: TcpStream) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let (c1, c2) = (ctx.clone(), ctx.clone());
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            s.set_timeout(Duration::from_secs(30));
            let c = s.stack(conn.take()?);
            net::read_exact(s, c, MSG);
            s.add(move |s, (msg,): (Vec<u8>,)| {
                net::write_all(s, c, msg);
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            c1.server.errors.add(e.code());
            s.success(())
        },
    );
    root.add(move |_, ()| {
        c2.server.ended.fetch_add(1, Relaxed);
        Ok(())
    });
    root
}

/// Accepts connections on its loop until cancelled.
fn acceptor(
    ctx: &Arc<Ctx>,
    listener: TcpListener,
    rt: futoin_asyncsteps::runtime::RuntimeHandle,
) -> AsyncSteps {
    let listener = TakeOnce::new(listener);
    let ctx = ctx.clone();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let l = s.stack(listener.take()?);
        let (ctx, rt) = (ctx.clone(), rt.clone());
        s.loop_(move |s| {
            net::accept(s, l);
            let (ctx, rt) = (ctx.clone(), rt.clone());
            s.add(move |_, (conn, _peer): (TcpStream, SocketAddr)| {
                ctx.server.accepted.fetch_add(1, Relaxed);
                rt.execute(server_flow(&ctx, conn));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    root
}

/// A pool thread: completes handles, about half at once and the rest in a
/// shuffled batch up to ~1 ms later; one in ten with an error.
fn pool_thread(rx: mpsc::Receiver<Job>, seed: u64, stats: Arc<PoolStats>) {
    let mut r = Rng::new(seed);
    let mut later: Vec<Job> = Vec::new();
    let mut flushed = Instant::now();
    let complete = |r: &mut Rng, j: Job| {
        let res = if r.chance(10) {
            stats.errors.fetch_add(1, Relaxed);
            j.handle
                .error(EXT_ERROR, "completed with an error by a pool thread")
        } else {
            j.handle.success((j.value,))
        };
        stats.sent.fetch_add(1, Relaxed);
        if res.is_err() {
            // The step ended first (timeout or cancel).
            stats.refused.fetch_add(1, Relaxed);
        }
    };
    loop {
        match rx.recv_timeout(Duration::from_micros(500)) {
            Ok(j) if r.chance(50) => complete(&mut r, j),
            Ok(j) => later.push(j),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if !later.is_empty() && (later.len() >= 64 || flushed.elapsed() >= Duration::from_millis(1))
        {
            for i in (1..later.len()).rev() {
                later.swap(i, r.below(i as u64 + 1) as usize);
            }
            for j in later.drain(..) {
                complete(&mut r, j);
            }
            flushed = Instant::now();
        }
    }
    for j in later {
        complete(&mut r, j);
    }
}

// ---------------------------------------------------------------------------
// The feeder: spawns, cancels, collects and checks
// ---------------------------------------------------------------------------

/// Wakes the feeder with the id of a promise that settled.
struct Notify {
    id: u64,
    tx: mpsc::Sender<u64>,
}

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        let _ = self.tx.send(self.id);
    }
}

#[derive(Default)]
struct KindTally {
    flows: u64,
    ok: u64,
    errors: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Tally {
    started: u64,
    ended: u64,
    ok: u64,
    errors: BTreeMap<String, u64>,
    cancels_sent: u64,
    kinds: BTreeMap<Kind, KindTally>,
    /// Socket clients that closed early and ended with success.
    socket_early: u64,
    /// Outcomes the plan does not allow, wrong values, flags that disagree.
    bad: u64,
    ended_twice: u64,
    examples: Vec<String>,
    elapsed: Duration,
    capped: bool,
}

impl Tally {
    fn bad(&mut self, what: String) {
        self.bad += 1;
        if self.examples.len() < 20 {
            self.examples.push(what);
        }
    }
}

/// How many settled promises are kept to see that none settles again.
const GRAVEYARD: usize = 8192;
/// No progress for this long with flows in flight: they are stuck.
const STALL: Duration = Duration::from_secs(60);

/// Checks one settled flow.
fn record(ctx: &Ctx, t: &mut Tally, id: u64, r: Result<(u64,), Error>) {
    t.ended += 1;
    let p = ctx.plan(id);
    let flags = ctx.flags[id as usize].load(Relaxed);
    let targeted = flags & TARGETED != 0;
    let marks = flags & MARKS;
    let k = t.kinds.entry(p.kind).or_default();
    k.flows += 1;
    match r {
        Ok((v,)) => {
            t.ok += 1;
            k.ok += 1;
            if p.kind == Kind::Socket && p.n != 0 {
                t.socket_early += 1;
            }
            if v != expected_value(id, &p) {
                t.bad(format!(
                    "flow {id} {p:?}: value {v}, expected {}",
                    expected_value(id, &p)
                ));
            }
            if marks != FINAL {
                t.bad(format!("flow {id} {p:?}: success with flags {marks:#06b}"));
            }
        }
        Err(e) => {
            let code = e.code().to_owned();
            *t.errors.entry(code.clone()).or_default() += 1;
            *k.errors.entry(code.clone()).or_default() += 1;
            if !allowed_error(&p, &code, targeted) {
                t.bad(format!("flow {id} {p:?} (targeted: {targeted}): {e}"));
            }
            let want = if code == codes::CANCELED { 0 } else { HANDLER };
            if marks != want {
                t.bad(format!("flow {id} {p:?}: {e} with flags {marks:#06b}"));
            }
        }
    }
    if marks & !(FINAL | HANDLER) != 0 {
        t.ended_twice += 1;
    }
}

/// A promise settled a while ago must still say its result was taken.
fn check_buried(t: &mut Tally, id: u64, mut p: Promise<(u64,)>) {
    match p.try_take() {
        Some(Err(e)) if e.code() == codes::INTERNAL_ERROR => {}
        other => {
            t.ended_twice += 1;
            let other = other.map(|r| r.map_err(|e| e.to_string()));
            t.bad(format!("flow {id} settled again: {other:?}"));
        }
    }
}

/// The feeder's view of the flows in flight and of the recently settled.
struct Flight<'a> {
    ctx: &'a Ctx,
    wake_tx: mpsc::Sender<u64>,
    inflight: HashMap<u64, Promise<(u64,)>>,
    graveyard: VecDeque<(u64, Promise<(u64,)>)>,
}

impl Flight<'_> {
    /// Polls `p` with a waker that reports `id`: records it when it has
    /// settled, else keeps it in flight.
    fn poll(&mut self, t: &mut Tally, id: u64, mut p: Promise<(u64,)>) -> bool {
        let waker = Waker::from(Arc::new(Notify {
            id,
            tx: self.wake_tx.clone(),
        }));
        match Pin::new(&mut p).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(res) => {
                record(self.ctx, t, id, res);
                self.graveyard.push_back((id, p));
                if self.graveyard.len() > GRAVEYARD {
                    let (id, p) = self.graveyard.pop_front().expect("non-empty");
                    check_buried(t, id, p);
                }
                true
            }
            Poll::Pending => {
                self.inflight.insert(id, p);
                false
            }
        }
    }
}

/// Runs flows `first..first + n` (starting none after `deadline`) and
/// returns what happened once all of them have settled.
fn run_round(
    rt: &Runtime,
    ctx: &Arc<Ctx>,
    cfg: &Config,
    first: u64,
    n: u64,
    deadline: Instant,
) -> Tally {
    let start = Instant::now();
    let mut t = Tally::default();
    let mut r = Rng::new(cfg.seed ^ first ^ 0xFEED);
    let (wake_tx, wake_rx) = mpsc::channel::<u64>();
    let mut f = Flight {
        ctx,
        wake_tx,
        inflight: HashMap::with_capacity(cfg.window * 2),
        graveyard: VecDeque::with_capacity(GRAVEYARD + 1),
    };
    let mut cancels: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let (mut next, end) = (first, first + n);
    let mut last_progress = Instant::now();
    loop {
        // Feed up to the window.
        while f.inflight.len() < cfg.window && next < end && !t.capped {
            if (next - first) % 256 == 0 && Instant::now() >= deadline {
                t.capped = true;
                break;
            }
            let id = next;
            next += 1;
            let p = rt.spawn::<(u64,)>(flow(ctx, id));
            t.started += 1;
            match r.below(100) {
                // Cancelled at once: often before a loop starts it.
                0..=2 => {
                    ctx.flags[id as usize].fetch_or(TARGETED, Relaxed);
                    t.cancels_sent += 1;
                    p.cancel();
                }
                // Cancelled 1 µs to 65 ms later, if still running.
                3..=5 => {
                    let at = Instant::now() + Duration::from_micros(1 << r.below(17));
                    cancels.push(Reverse((at, id)));
                }
                _ => {}
            }
            f.poll(&mut t, id, p);
        }
        let feeding = next < end && !t.capped;
        // Cancels that are due (all of them once nothing is in flight).
        let now = Instant::now();
        while let Some(&Reverse((at, id))) = cancels.peek() {
            if at > now && !f.inflight.is_empty() {
                break;
            }
            cancels.pop();
            if let Some(p) = f.inflight.get(&id) {
                ctx.flags[id as usize].fetch_or(TARGETED, Relaxed);
                t.cancels_sent += 1;
                p.cancel();
            }
        }
        if !feeding && f.inflight.is_empty() {
            break;
        }
        // Collect what settled.
        let wait = cancels
            .peek()
            .map_or(Duration::from_millis(5), |Reverse((at, _))| {
                at.saturating_duration_since(now)
            })
            .min(Duration::from_millis(5));
        let mut woken = wake_rx.recv_timeout(wait).ok();
        while let Some(id) = woken {
            if let Some(p) = f.inflight.remove(&id) {
                if f.poll(&mut t, id, p) {
                    last_progress = Instant::now();
                }
            }
            woken = wake_rx.try_recv().ok();
        }
        if !f.inflight.is_empty() && last_progress.elapsed() > STALL {
            let mut stuck: Vec<_> = f.inflight.keys().copied().collect();
            stuck.sort_unstable();
            let shown: Vec<String> = stuck
                .iter()
                .take(20)
                .map(|&id| {
                    let fl = ctx.flags[id as usize].load(Relaxed);
                    format!("{id} {:?} flags {fl:#010b}", ctx.plan(id))
                })
                .collect();
            panic!(
                "{} flows did not settle within {STALL:?} of the last progress \
                 (loops: {:?}); the first ones:\n{}",
                stuck.len(),
                rt.stats(),
                shown.join("\n")
            );
        }
    }
    for (id, p) in std::mem::take(&mut f.graveyard) {
        check_buried(&mut t, id, p);
    }
    t.elapsed = start.elapsed();
    t
}

// ---------------------------------------------------------------------------
// Idle, RSS, report
// ---------------------------------------------------------------------------

/// Resident set size in KiB, from `/proc/self/status`.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Live flows on each loop, read on the loop itself.
fn live_flows(rt: &Runtime) -> Vec<usize> {
    (0..rt.loops())
        .map(|i| {
            let (tx, rx) = mpsc::channel();
            rt.loop_handle(i)
                .unwrap()
                .call(move |s| tx.send(s.stats().flows).unwrap());
            rx.recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("loop {i} does not answer"))
        })
        .collect()
}

/// Adds a step `depth` levels deep, each level with two more steps queued
/// behind it; the innermost waits (with a timer armed) for its handle,
/// which goes out through `tx`.
fn deep(s: &mut Step<'_>, tx: mpsc::Sender<ExternalHandle>, depth: u32) {
    if depth == 0 {
        s.set_timeout(Duration::from_secs(120));
        tx.send(s.wait_external()).expect("the filler waits");
        return;
    }
    s.add(move |s, ()| {
        deep(s, tx, depth - 1);
        Ok(())
    });
    s.add(|_, ()| Ok(()));
    s.add(|_, ()| Ok(()));
}

/// Grows what a loop keeps to the high-water mark of its live flows (its
/// pool of ended flows and their step and frame buffers, wait tokens, its
/// flow table, its timers) to what the rounds can reach: `n` flows parked
/// at once on every loop, each 10 levels deep with 20 steps queued and a
/// timer, then all completed. A loop keeps these (its pool up to its peak
/// of flows; beyond 65,536 only until it has been quiet for 10 s), so
/// without this a rare new peak of flows on a
/// loop in the measured round would look like growth.
fn fill_pools(rt: &Runtime, n: usize) {
    let (tx, rx) = mpsc::channel();
    let mut ps = Vec::with_capacity(n * rt.loops());
    for l in 0..rt.loops() {
        let h = rt.loop_handle(l).unwrap();
        for _ in 0..n {
            let tx = tx.clone();
            let mut root = AsyncSteps::new();
            root.add(move |s, ()| {
                deep(s, tx, 10);
                Ok(())
            });
            ps.push(h.promise::<()>(root));
        }
    }
    let handles: Vec<ExternalHandle> = (0..ps.len())
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(60))
                .expect("every filler parks")
        })
        .collect();
    for h in handles {
        h.success(()).expect("the filler still waits");
    }
    for p in ps {
        p.wait().expect("a filler flow");
    }
}

/// Waits until only the acceptors run (one per loop) and every accepted
/// connection's server flow has ended.
fn wait_idle(rt: &Runtime, ctx: &Ctx) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let live = live_flows(rt);
        let s = &ctx.server;
        let (acc, ended) = (s.accepted.load(Relaxed), s.ended.load(Relaxed));
        if live.iter().all(|&n| n == 1) && acc == ended {
            return;
        }
        assert!(
            Instant::now() < until,
            "not idle after 60 s: live flows per loop {live:?}, connections accepted {acc}, \
             server flows ended {ended}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn fmt_n(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_codes(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {}", fmt_n(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Report<'a> {
    cfg: &'a Config,
    warm: &'a Tally,
    main: &'a Tally,
    rss: [u64; 4],
    pool: &'a PoolStats,
    ctx: &'a Ctx,
    loops: Vec<futoin_asyncsteps::runtime::LoopStats>,
}

fn print_report(r: &Report<'_>) {
    let (cfg, m) = (r.cfg, r.main);
    let secs = m.elapsed.as_secs_f64();
    let row = |k: &str, v: String| println!("| {k} | {v} |");
    println!();
    println!("## soak summary");
    println!();
    println!("| | |");
    println!("|---|---|");
    row(
        "setup",
        format!(
            "{} loops, {} completer threads, window {}, seed {:#x}",
            cfg.loops, cfg.threads, cfg.window, cfg.seed
        ),
    );
    let capped = |t: &Tally| {
        if t.capped {
            format!(" (time cap of {} s reached)", cfg.cap.as_secs())
        } else {
            String::new()
        }
    };
    row(
        "warm-up round",
        format!(
            "{} flows in {:.1} s{}",
            fmt_n(r.warm.ended),
            r.warm.elapsed.as_secs_f64(),
            capped(r.warm)
        ),
    );
    row(
        "flows (measured round)",
        format!(
            "{} started, {} ended{}",
            fmt_n(m.started),
            fmt_n(m.ended),
            capped(m)
        ),
    );
    row("duration", format!("{secs:.2} s"));
    row("flows/s", fmt_n((m.ended as f64 / secs) as u64));
    row("successes", fmt_n(m.ok));
    let mut errs = m.errors.clone();
    let canceled = errs.remove(codes::CANCELED).unwrap_or(0);
    row("errors by code", fmt_codes(&errs));
    row(
        "cancels",
        format!(
            "{} sent, {} flows ended Canceled",
            fmt_n(m.cancels_sent),
            fmt_n(canceled)
        ),
    );
    for (k, kt) in &m.kinds {
        row(
            &format!("kind {k:?}"),
            format!(
                "{} flows: {} ok; {}",
                fmt_n(kt.flows),
                fmt_n(kt.ok),
                fmt_codes(&kt.errors)
            ),
        );
    }
    row(
        "external completions (both rounds)",
        format!(
            "{} sent ({} as errors), {} refused (the step had ended)",
            fmt_n(r.pool.sent.load(Relaxed)),
            fmt_n(r.pool.errors.load(Relaxed)),
            fmt_n(r.pool.refused.load(Relaxed))
        ),
    );
    row(
        "mutex (both rounds)",
        format!(
            "peak inside {} (max {MUTEX_MAX}), cancel callbacks run {}",
            r.ctx.inside_peak.load(Relaxed),
            fmt_n(r.ctx.cancel_callbacks.load(Relaxed))
        ),
    );
    row(
        "connections (both rounds)",
        format!(
            "{} accepted, {} server flows ended; server errors: {} \
             ({} clients left early on purpose)",
            fmt_n(r.ctx.server.accepted.load(Relaxed)),
            fmt_n(r.ctx.server.ended.load(Relaxed)),
            fmt_codes(&r.ctx.server.errors.get()),
            fmt_n(r.warm.socket_early + r.main.socket_early)
        ),
    );
    for l in &r.loops {
        row(
            &format!("loop {}", l.index),
            format!(
                "{} flows started ({} stolen), {} steps",
                fmt_n(l.started),
                fmt_n(l.stolen),
                fmt_n(l.steps)
            ),
        );
    }
    let [before, after, dropped, start] = r.rss;
    row(
        "RSS",
        format!(
            "at start {} KiB; before (idle after warm-up) {} KiB; after (idle after the \
             measured round) {} KiB ({:+.1}%); after the runtime was dropped {} KiB",
            fmt_n(start),
            fmt_n(before),
            fmt_n(after),
            (after as f64 - before as f64) * 100.0 / before as f64,
            fmt_n(dropped)
        ),
    );
    row(
        "checks",
        format!(
            "outcomes not allowed / wrong values / flags: {}; ended twice: {}",
            m.bad + r.warm.bad,
            m.ended_twice + r.warm.ended_twice
        ),
    );
    println!();
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

#[test]
#[ignore = "soak test: cargo test --release --test soak -- --ignored --nocapture"]
fn soak_mixed_flows_end_exactly_once_and_memory_stays_flat() {
    let cfg = Config::from_env();
    let rss_start = rss_kib();
    println!(
        "soak: {} + {} warm-up flows, {} loops, {} completer threads, window {}, \
         time cap {} s, seed {:#x}",
        fmt_n(cfg.flows),
        fmt_n(cfg.warmup),
        cfg.loops,
        cfg.threads,
        cfg.window,
        cfg.cap.as_secs(),
        cfg.seed
    );

    let unhandled = Arc::new(Counts::default());
    let u = unhandled.clone();
    let rt = Runtime::builder()
        .loops(cfg.loops)
        .thread_name("soak-loop")
        .on_unhandled_error(move |e| u.add(&e.to_string()))
        .build()
        .expect("runtime");

    let pool_stats = Arc::new(PoolStats::default());
    let mut senders = Vec::new();
    let mut pool = Vec::new();
    for i in 0..cfg.threads {
        let (tx, rx) = mpsc::channel();
        senders.push(tx);
        let (st, seed) = (pool_stats.clone(), cfg.seed ^ ((i as u64 + 1) << 40));
        pool.push(
            thread::Builder::new()
                .name(format!("soak-pool-{i}"))
                .spawn(move || pool_thread(rx, seed, st))
                .unwrap(),
        );
    }
    let listeners: Vec<TcpListener> = (0..cfg.loops)
        .map(|_| TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind"))
        .collect();
    let total = cfg.warmup + cfg.flows;
    // Touched up front, so the bookkeeping is in the "before" figure.
    let flags: Vec<AtomicU8> = (0..total).map(|_| AtomicU8::new(0)).collect();
    let ctx = Arc::new(Ctx {
        seed: cfg.seed,
        mix: mix_from_env(),
        flags,
        pool: senders,
        mutex: Mutex::new(MUTEX_MAX, Some(MUTEX_QUEUE)),
        inside: AtomicUsize::new(0),
        inside_peak: AtomicUsize::new(0),
        addrs: listeners.iter().map(|l| l.local_addr().unwrap()).collect(),
        server: ServerStats::default(),
        cancel_callbacks: AtomicU64::new(0),
    });
    let acceptors: Vec<Promise<()>> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            rt.loop_handle(i)
                .unwrap()
                .promise(acceptor(&ctx, l, rt.handle()))
        })
        .collect();

    // At most `window` flows of the rounds run at once, plus a server flow
    // for each socket client among them and an acceptor per loop; all of
    // them may end up on one loop.
    fill_pools(&rt, 2 * cfg.window + 16);
    let warm = run_round(&rt, &ctx, &cfg, 0, cfg.warmup, Instant::now() + cfg.cap);
    wait_idle(&rt, &ctx);
    let rss_before = rss_kib();

    let main = run_round(
        &rt,
        &ctx,
        &cfg,
        cfg.warmup,
        cfg.flows,
        Instant::now() + cfg.cap,
    );
    wait_idle(&rt, &ctx);
    let rss_after = rss_kib();
    let mutex_counts = ctx.mutex.counts();
    let inside_peak = ctx.inside_peak.load(Relaxed);

    for a in &acceptors {
        a.cancel();
    }
    for a in acceptors {
        let e = a.wait().expect_err("an acceptor runs until cancelled");
        assert_eq!(e.code(), codes::CANCELED, "acceptor: {e}");
    }
    let live = live_flows(&rt);
    let loops = rt.stats();
    rt.shutdown();
    // The flows held the only other references to the context; its pool
    // senders go now, and the pool threads finish.
    let mut ctx = Arc::into_inner(ctx).expect("no flow holds the context any more");
    drop(std::mem::take(&mut ctx.pool));
    for t in pool {
        t.join().expect("pool thread");
    }
    let rss_dropped = rss_kib();
    print_report(&Report {
        cfg: &cfg,
        warm: &warm,
        main: &main,
        rss: [rss_before, rss_after, rss_dropped, rss_start],
        pool: &pool_stats,
        ctx: &ctx,
        loops,
    });

    for (name, t) in [("warm-up", &warm), ("measured", &main)] {
        assert_eq!(t.started, t.ended, "{name}: started != ended");
        assert_eq!(t.ended_twice, 0, "{name}: flows ended twice");
        assert_eq!(
            t.bad,
            0,
            "{name}: unexpected outcomes, the first ones:\n{}",
            t.examples.join("\n")
        );
    }
    assert!(
        main.ended > 0,
        "the time cap left no time for the measured round"
    );
    assert_eq!(live, vec![0; cfg.loops], "flows left on the loops");
    assert!(
        inside_peak <= MUTEX_MAX as usize,
        "mutex peak {inside_peak}"
    );
    assert_eq!(mutex_counts, (0, 0), "the mutex ends empty");
    assert_eq!(
        ctx.server.accepted.load(Relaxed),
        ctx.server.ended.load(Relaxed),
        "server flows"
    );
    // A server flow fails (CommError) for each client that left early, and
    // may for a client cancelled mid-way; for nothing else.
    let mut server_errors = ctx.server.errors.get();
    let comm = server_errors.remove(codes::COMM_ERROR).unwrap_or(0);
    let early = warm.socket_early + main.socket_early;
    let cancelled: u64 = [&warm, &main]
        .iter()
        .filter_map(|t| t.kinds.get(&Kind::Socket))
        .filter_map(|k| k.errors.get(codes::CANCELED))
        .sum();
    assert_eq!(server_errors, BTreeMap::new(), "server flow errors");
    assert!(
        (early..=early + cancelled).contains(&comm),
        "server CommErrors {comm}: {early} clients left early, {cancelled} were cancelled"
    );
    assert_eq!(unhandled.get(), BTreeMap::new(), "unhandled errors");
    assert!(
        rss_after as f64 <= rss_before as f64 * 1.10,
        "RSS grew by more than 10%: {rss_before} KiB -> {rss_after} KiB"
    );
}
