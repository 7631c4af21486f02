//! Network benchmarks on loopback, each server beside a tokio peer in the
//! same run, both driven by the same client.
//!
//! Run with `cargo bench --bench net`. Under `cargo test --benches` the
//! echo case runs once at a tiny size and the HTTP case is skipped.
//!
//! - `echo`: 100 connections × 10,000 round trips of 64 bytes. Servers:
//!   `examples/echo_server.rs`'s connection flow on a 2-loop runtime, and a
//!   tokio echo server (`multi_thread`, 2 workers, a task per connection).
//!   Client: one `current_thread` tokio runtime on its own thread driving
//!   all connections. Ours and tokio alternate, 3 rounds each; medians.
//! - `http`: `wrk -t1 -c100 -d5s` (keep-alive) against
//!   `examples/http_server.rs`'s connection flow and against a tokio server
//!   using the same request parser, alternating, 3 rounds each. Skipped
//!   with a note when `wrk` is not installed (`apt-get install wrk`).

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
use futoin_asyncsteps::Runtime;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_peer::{tokio_echo, tokio_http, tokio_server};

const MSG: usize = 64;

fn tokio_mt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Our servers: an acceptor on a 2-loop runtime handing each connection to
/// `conn`. Returns the runtime (drop it to stop) and the address.
fn ours_server(
    serve_conn: impl Fn(mio::net::TcpStream) -> futoin_asyncsteps::AsyncSteps + Clone + Send + 'static,
) -> (Runtime, SocketAddr) {
    let rt = Runtime::builder().loops(2).build().expect("runtime");
    let l = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let addr = l.local_addr().unwrap();
    rt.execute(serve::acceptor(l, rt.handle(), serve_conn));
    (rt, addr)
}

/// `conns` connections each doing `rounds` round trips of `MSG` bytes, all
/// on one client thread; returns the wall time.
fn client(addr: SocketAddr, conns: usize, rounds: usize) -> Duration {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        rt.block_on(async move {
            let mut streams = Vec::new();
            for _ in 0..conns {
                let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                s.set_nodelay(true).unwrap();
                streams.push(s);
            }
            let t = Instant::now();
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
            t.elapsed()
        })
    })
    .join()
    .expect("client thread")
}

/// Prints the medians (min-max) of ours and tokio, and their ratio.
fn print_medians(ours: Vec<f64>, tokio: Vec<f64>) {
    let (o, t) = (Stats::of(ours), Stats::of(tokio));
    println!(
        "  ours {:.0} ({:.0}-{:.0})   tokio {:.0} ({:.0}-{:.0})   ours/tokio {:.2}x",
        o.median,
        o.min,
        o.max,
        t.median,
        t.min,
        t.max,
        o.median / t.median
    );
}

/// Requests/s `wrk` reports against `addr`, or `None` without wrk.
fn wrk(addr: SocketAddr, secs: u32) -> Option<f64> {
    let out = Command::new("wrk")
        .args([
            "-t1",
            "-c100",
            &format!("-d{secs}s"),
            &format!("http://{addr}/"),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
}

fn main() {
    if profiling() {
        return;
    }
    let full = full_run();
    let (conns, rounds, runs) = if full { (100, 10_000, 3) } else { (10, 100, 1) };

    let served = Arc::new(AtomicU64::new(0));
    let (ours_rt, ours_addr) = ours_server(move |c| echo::connection(c, served.clone()));
    let (tokio_rt, tokio_addr) = tokio_server(tokio_mt(), tokio_echo);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    let total = (conns * rounds) as f64;
    for _ in 0..runs {
        o.push(total / client(ours_addr, conns, rounds).as_secs_f64());
        t.push(total / client(tokio_addr, conns, rounds).as_secs_f64());
    }
    drop(ours_rt);
    drop(tokio_rt);
    println!(
        "echo, {conns} connections x {rounds} round trips of {MSG} B, median of {runs} \
         (min-max), round trips/s:"
    );
    print_medians(o, t);

    if !full {
        return;
    }
    let (ours_rt, ours_addr) = ours_server(http::connection);
    let (tokio_rt, tokio_addr) = tokio_server(tokio_mt(), tokio_http);
    let (mut o, mut t) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        match (wrk(ours_addr, 5), wrk(tokio_addr, 5)) {
            (Some(a), Some(b)) => {
                o.push(a);
                t.push(b);
            }
            _ => {
                println!("http: skipped (wrk is not installed: apt-get install wrk)");
                return;
            }
        }
    }
    drop(ours_rt);
    drop(tokio_rt);
    println!("http, wrk -t1 -c100 -d5s keep-alive, median of {runs} (min-max), requests/s:");
    print_medians(o, t);
}
