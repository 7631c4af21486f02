//! TCP echo and HTTP over loopback: our server (the connection flows of
//! `examples/echo_server.rs` and `examples/http_server.rs`) on a runtime of
//! L loops against a tokio server on L workers, both driven by the same
//! client: one `current_thread` tokio runtime on a thread of its own.

use crate::bench::{from_fn, our_runtime, tokio_multi, Batch, Ctx, Make, Side};
use crate::tokio_peer::{client_runtime, connect_all, tokio_echo, tokio_http, tokio_server};
use crate::{echo, http, serve};
use futoin_asyncsteps::io::mio;
use futoin_asyncsteps::runtime::Runtime;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MSG: usize = 64;

/// Our server: an acceptor on a runtime of `ctx.loops` loops handing each
/// connection to a flow from `serve_conn` on the least busy loop.
fn ours_server(
    ctx: &Ctx,
    serve_conn: impl Fn(mio::net::TcpStream) -> futoin_asyncsteps::AsyncSteps + Clone + Send + 'static,
) -> (Runtime, SocketAddr) {
    let rt = our_runtime(ctx);
    let l = mio::net::TcpListener::bind("127.0.0.1:0".parse().expect("address")).expect("bind");
    let addr = l.local_addr().expect("address");
    rt.execute(serve::acceptor(l, rt.handle(), serve_conn));
    (rt, addr)
}

/// Runs `conns` client connections to `addr` on one client thread, each
/// doing `per_conn` calls of `call`; connecting is not timed.
fn client<F, Fut>(addr: SocketAddr, conns: usize, per_conn: usize, call: F) -> Duration
where
    F: Fn(tokio::net::TcpStream, usize) -> Fut + Send + Copy + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    std::thread::spawn(move || {
        let rt = client_runtime();
        rt.block_on(async move {
            let streams = connect_all(addr, conns).await;
            let t = Instant::now();
            let tasks: Vec<_> = streams
                .into_iter()
                .map(|s| tokio::spawn(call(s, per_conn)))
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

/// `rounds` round trips of `MSG` bytes.
async fn echo_calls(mut s: tokio::net::TcpStream, rounds: usize) {
    let out = [7u8; MSG];
    let mut back = [0u8; MSG];
    for _ in 0..rounds {
        s.write_all(&out).await.expect("write");
        s.read_exact(&mut back).await.expect("read");
    }
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// `reqs` keep-alive `GET /` requests, one at a time, each read to the end
/// of its body (`Content-Length`).
async fn http_calls(mut s: tokio::net::TcpStream, reqs: usize) {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    for _ in 0..reqs {
        s.write_all(REQUEST).await.expect("write");
        loop {
            if let Some(total) = response_len(&buf) {
                assert!(buf.starts_with(b"HTTP/1.1 200"), "a 200 response");
                buf.drain(..total);
                break;
            }
            let n = s.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The length of the complete response at the front of `buf`, if it is all
/// there.
fn response_len(buf: &[u8]) -> Option<usize> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..end]).expect("ASCII head");
    let body: usize = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.trim().parse().expect("a length"));
    let total = end + 4 + body;
    (buf.len() >= total).then_some(total)
}

pub fn tcp_echo() -> Make {
    Box::new(|side, ctx| {
        let (conns, rounds) = if ctx.quick { (10, 50) } else { (50, 500) };
        let ops = (conns * rounds) as u64;
        match side {
            Side::Ours => {
                let served = Arc::new(AtomicU64::new(0));
                let (rt, addr) =
                    ours_server(ctx, move |c| echo::connection(c, served.clone(), None));
                from_fn(move || {
                    let _keep = &rt;
                    Batch {
                        ops,
                        time: client(addr, conns, rounds, echo_calls),
                    }
                })
            }
            Side::Tokio => {
                let (rt, addr) = tokio_server(tokio_multi(ctx.loops), tokio_echo);
                from_fn(move || {
                    let _keep = &rt;
                    Batch {
                        ops,
                        time: client(addr, conns, rounds, echo_calls),
                    }
                })
            }
        }
    })
}

pub fn http() -> Make {
    Box::new(|side, ctx| {
        let (conns, reqs) = if ctx.quick { (10, 20) } else { (100, 200) };
        let ops = (conns * reqs) as u64;
        match side {
            Side::Ours => {
                let (rt, addr) = ours_server(ctx, |c| http::connection(c, None));
                from_fn(move || {
                    let _keep = &rt;
                    Batch {
                        ops,
                        time: client(addr, conns, reqs, http_calls),
                    }
                })
            }
            Side::Tokio => {
                let (rt, addr) = tokio_server(tokio_multi(ctx.loops), tokio_http);
                from_fn(move || {
                    let _keep = &rt;
                    Batch {
                        ops,
                        time: client(addr, conns, reqs, http_calls),
                    }
                })
            }
        }
    })
}
