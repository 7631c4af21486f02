//! Network benchmarks on loopback, each server beside a tokio peer in the
//! same run, both driven by the same client.
//!
//! Run with `cargo bench --bench net`. Under `cargo test --benches` the
//! echo case runs once at a tiny size and the HTTP case is skipped.
//!
//! Every case runs four servers, alternating (every other round in the
//! reverse order), 3 rounds each (`NET_ROUNDS` sets another number;
//! `NET_KEEPALIVE_ONLY=1` skips the `Connection: close` cases); medians,
//! and each server's median of its per-round ratios to tokio (the rounds
//! run the servers back to back, so a round's ratio leaves out a slow
//! phase of the machine):
//! ours on a 2-loop runtime with one listener whose acceptor hands each
//! connection to the least busy loop (`spread`), the same with the loop
//! threads not pinned to cores (`unpinned`), ours with one `SO_REUSEPORT`
//! listener per loop (`reuseport`), and tokio (`multi_thread`, 2 workers,
//! not pinned, an accept loop spawning a task per connection).
//!
//! The client (or `wrk`) shares the two cores with the server, and each
//! client shape runs twice: with one client thread, then with two.
//! - One client thread saturates first: it runs flat out while both
//!   servers have time to spare, so the figure is mostly how well the
//!   server leaves that thread alone. A pinned loop cannot move off the
//!   core the client is busy on, so there `unpinned` is the fair peer of
//!   tokio and `spread` shows what pinning costs.
//! - Two client threads (wrk's own default thread count) can use both
//!   cores, as the server does: the figure is the server's throughput
//!   under a load that does not run out first.
//!
//! - `echo`: 100 connections × 10,000 round trips of 64 bytes, with
//!   `examples/echo_server.rs`'s connection flow. Client: one
//!   `current_thread` tokio runtime per client thread, the connections
//!   split evenly, timed from the moment all are connected.
//! - `http`: `wrk -t1 -c100 -d5s` and `wrk -t2 -c100 -d5s` (keep-alive)
//!   against `examples/http_server.rs`'s connection flow and a tokio
//!   server using the same request parser; then the same with
//!   `Connection: close` (a new connection per request: the accept path).
//!   Skipped with a note when `wrk` is not installed (`apt-get install
//!   wrk`).
//!
//! For profiling one server alone (`strace -c -f`, `valgrind
//! --tool=callgrind`), `-- --serve <echo|http> <spread|unpinned|reuseport|tokio>
//! [ADDR]` serves until SIGINT or SIGTERM instead, on `ADDR`
//! (127.0.0.1:7007 by default), and `-- --echo-client [ADDR] [THREADS]`
//! runs the echo case's client alone against it.

mod common;
#[path = "../examples/common/echo.rs"]
mod echo;
#[path = "../examples/common/http.rs"]
mod http;
#[path = "../examples/common/serve.rs"]
mod serve;
#[path = "../examples/common/tokio_peer.rs"]
mod tokio_peer;

use common::{full_run, profiling, Stats};
use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
use serve::Spread;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_peer::{client_runtime, connect_all, tokio_echo, tokio_http, tokio_server_on};

const MSG: usize = 64;

fn tokio_mt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Our servers: a 2-loop runtime serving each connection with the flow
/// `serve_conn(conn)`, spread as `spread` says. Returns the runtime (drop
/// it to stop) and the address.
fn ours_server(
    spread: Spread,
    pin: bool,
    addr: SocketAddr,
    serve_conn: impl Fn(mio::net::TcpStream) -> AsyncSteps + Clone + Send + 'static,
) -> (Runtime, SocketAddr) {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(pin)
        .build()
        .expect("runtime");
    let (addr, _accepting) = serve::listen(&rt, addr, spread, serve_conn).expect("listen");
    (rt, addr)
}

/// A running server: its runtime (ours or tokio's); dropping it stops it.
type Server = Box<dyn std::any::Any>;

const SERVERS: [&str; 4] = ["spread", "unpinned", "reuseport", "tokio"];

/// Starts the server `which` (one of [`SERVERS`]) of `case` ("echo" or
/// "http") on `addr`.
fn start(case: &str, which: &str, addr: SocketAddr) -> (Server, SocketAddr) {
    let echo_conn = {
        let served = Arc::new(AtomicU64::new(0));
        move |c| echo::connection(c, served.clone(), None)
    };
    match (case, which) {
        ("echo", "tokio") => {
            let (rt, a) = tokio_server_on(tokio_mt(), addr, tokio_echo);
            (Box::new(rt) as Server, a)
        }
        ("http", "tokio") => {
            let (rt, a) = tokio_server_on(tokio_mt(), addr, tokio_http);
            (Box::new(rt) as Server, a)
        }
        (case, which) => {
            let (spread, pin) = match which {
                "spread" => (Spread::Accept, true),
                "unpinned" => (Spread::Accept, false),
                "reuseport" => (Spread::ReusePort, true),
                _ => panic!("unknown server {which:?}: one of {SERVERS:?}"),
            };
            let (rt, a) = match case {
                "echo" => ours_server(spread, pin, addr, echo_conn),
                "http" => ours_server(spread, pin, addr, |c| http::connection(c, None)),
                _ => panic!("unknown case {case:?}: echo or http"),
            };
            (Box::new(rt) as Server, a)
        }
    }
}

/// Rounds per case: `NET_ROUNDS` (at least 1), 3 by default. The spread
/// within one case on a shared 2-core machine is wide (see the module
/// docs); more rounds narrow the medians.
fn rounds_from_env() -> usize {
    match std::env::var("NET_ROUNDS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("NET_ROUNDS={v:?}: expected a whole number of rounds, at least 1"),
        },
        Err(_) => 3,
    }
}

/// `--serve CASE SERVER [ADDR]`: serve until SIGINT or SIGTERM.
fn serve_alone(args: &[String]) {
    let case = args.first().map_or("echo", String::as_str);
    let which = args.get(1).map_or("spread", String::as_str);
    let addr = args
        .get(2)
        .map_or("127.0.0.1:7007", String::as_str)
        .parse()
        .expect("address");
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).expect("signal");
    }
    let (server, addr) = start(case, which, addr);
    println!("{case} server ({which}) on {addr}; SIGINT to stop");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
}

/// `--echo-client ADDR [THREADS]`: the echo case's client (100
/// connections x 10,000 round trips) against a server started with
/// `--serve echo`; prints round trips/s.
fn echo_client_alone(args: &[String]) {
    let addr = args
        .first()
        .map_or("127.0.0.1:7007", String::as_str)
        .parse()
        .expect("address");
    let threads = args.get(1).map_or(Ok(1), |t| t.parse()).expect("threads");
    let (conns, rounds) = (100, 10_000);
    let t = client(addr, conns, rounds, threads);
    println!("{:.0}", (conns * rounds) as f64 / t.as_secs_f64());
}

/// `conns` connections each doing `rounds` round trips of `MSG` bytes,
/// driven by `threads` client threads (one `current_thread` runtime each,
/// the connections split evenly); returns the wall time from the moment
/// every thread has connected to the last round trip.
fn client(addr: SocketAddr, conns: usize, rounds: usize, threads: usize) -> Duration {
    let ready = Arc::new(std::sync::Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let share = conns / threads + usize::from(i < conns % threads);
            let ready = ready.clone();
            std::thread::spawn(move || client_thread(addr, share, rounds, &ready))
        })
        .collect();
    ready.wait();
    let t = Instant::now();
    for w in workers {
        w.join().expect("client thread");
    }
    t.elapsed()
}

/// One client thread of [`client`]: connects its `conns`, waits at
/// `ready` for the others, then runs the round trips.
fn client_thread(addr: SocketAddr, conns: usize, rounds: usize, ready: &std::sync::Barrier) {
    let rt = client_runtime();
    rt.block_on(async move {
        let streams = connect_all(addr, conns).await;
        ready.wait();
        let tasks: Vec<_> = streams
            .into_iter()
            .map(|mut s| {
                tokio::spawn(async move {
                    let out = [7u8; MSG];
                    let mut back = [0u8; MSG];
                    for _ in 0..rounds {
                        s.write_all(&out).await.expect("write");
                        s.read_exact(&mut back).await.expect("read");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("client task");
        }
    })
}

/// Requests/s `wrk` reports against `addr`, or `None` without wrk.
fn wrk(addr: SocketAddr, threads: usize, secs: u32, close: bool) -> Option<f64> {
    let mut cmd = Command::new("wrk");
    cmd.args([
        &format!("-t{threads}"),
        "-c100",
        &format!("-d{secs}s"),
        &format!("http://{addr}/"),
    ]);
    if close {
        cmd.args(["-H", "Connection: close"]);
    }
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs `measure` on each of [`SERVERS`] of `case`, alternating, `runs`
/// rounds; prints the medians. `None` from `measure` skips the case.
fn compare(
    case: &str,
    title: &str,
    runs: usize,
    measure: impl Fn(SocketAddr) -> Option<f64>,
) -> Option<()> {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let servers: Vec<_> = SERVERS.iter().map(|w| start(case, w, any)).collect();
    let mut figures = vec![Vec::new(); SERVERS.len()];
    for r in 0..runs {
        // Every other round runs the servers in the reverse order, so that
        // none always comes right after the same one (or always first).
        let order: Vec<usize> = if r % 2 == 0 {
            (0..SERVERS.len()).collect()
        } else {
            (0..SERVERS.len()).rev().collect()
        };
        for i in order {
            figures[i].push(measure(servers[i].1)?);
        }
    }
    drop(servers);
    println!(
        "{title}, median of {runs} (min-max); /tokio: ratio of medians, \
         and the median of the rounds' own ratios:"
    );
    let tokio_rounds = figures[SERVERS.len() - 1].clone();
    let tokio = Stats::of(tokio_rounds.clone()).median;
    for (name, v) in SERVERS.iter().zip(figures) {
        // Each round runs every server back to back: its own ratio
        // leaves out what changed between rounds.
        let paired = Stats::of(v.iter().zip(&tokio_rounds).map(|(o, t)| o / t).collect());
        let st = Stats::of(v);
        println!(
            "  {name:>9} {:>9.0} ({:.0}-{:.0})   /tokio {:.2}x, per round {:.2}x ({:.2}-{:.2})",
            st.median,
            st.min,
            st.max,
            st.median / tokio,
            paired.median,
            paired.min,
            paired.max
        );
    }
    Some(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        return serve_alone(&args[i + 1..]);
    }
    if let Some(i) = args.iter().position(|a| a == "--echo-client") {
        return echo_client_alone(&args[i + 1..]);
    }
    if profiling() {
        return;
    }
    let full = full_run();
    let (conns, rounds, runs) = if full {
        (100, 10_000, rounds_from_env())
    } else {
        (10, 100, 1)
    };
    let total = (conns * rounds) as f64;
    // One client thread, then two: one thread saturates before either
    // server does (it is the bottleneck: see the module docs), two let
    // the client use both cores as the server does.
    for threads in [1, 2] {
        compare(
            "echo",
            &format!(
                "echo, {conns} connections x {rounds} round trips of {MSG} B, \
                 {threads} client thread(s), round trips/s"
            ),
            runs,
            |addr| Some(total / client(addr, conns, rounds, threads).as_secs_f64()),
        );
    }
    if !full {
        return;
    }
    for threads in [1, 2] {
        for (close, what) in [(false, "keep-alive"), (true, "Connection: close")] {
            if close && std::env::var_os("NET_KEEPALIVE_ONLY").is_some() {
                continue;
            }
            let title = format!("http, wrk -t{threads} -c100 -d5s {what}, requests/s");
            if compare("http", &title, runs, |addr| wrk(addr, threads, 5, close)).is_none() {
                println!("http: skipped (wrk is not installed: apt-get install wrk)");
                return;
            }
        }
    }
}
