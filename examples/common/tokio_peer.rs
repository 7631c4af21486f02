//! The tokio peers of the network benchmarks (`benches/net.rs` and the
//! `asyncsteps-bench` harness): an accept loop spawning a task per
//! connection, and the echo and HTTP connections written as a tokio user
//! would (the HTTP one with the same request parser as ours, from
//! `http.rs`, which the including crate has as `crate::http`); and the
//! clients' connecting.

use std::future::Future;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A tokio server on `rt`: an accept loop spawning a task running
/// `serve_conn` per connection. Returns the runtime (drop it to stop) and
/// the address.
#[allow(dead_code)] // benches/net.rs names the address: tokio_server_on
pub fn tokio_server<F, Fut>(
    rt: tokio::runtime::Runtime,
    serve_conn: F,
) -> (tokio::runtime::Runtime, SocketAddr)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio_server_on(rt, "127.0.0.1:0".parse().expect("address"), serve_conn)
}

/// [`tokio_server`] on `addr`.
pub fn tokio_server_on<F, Fut>(
    rt: tokio::runtime::Runtime,
    addr: SocketAddr,
    serve_conn: F,
) -> (tokio::runtime::Runtime, SocketAddr)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .expect("bind");
    let addr = l.local_addr().expect("address");
    rt.spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                return;
            };
            drop(tokio::spawn(serve_conn(s)));
        }
    });
    (rt, addr)
}

/// The tokio echo connection.
pub async fn tokio_echo(mut s: tokio::net::TcpStream) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The tokio HTTP connection, with the same request parser as ours.
pub async fn tokio_http(mut s: tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut parser = crate::http::Parser::default();
    loop {
        let mut out = Vec::new();
        let close = parser.answer(&mut buf, &mut out);
        if !out.is_empty() && s.write_all(&out).await.is_err() {
            return;
        }
        if close {
            return;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The runtime a benchmark client thread drives its connections on.
pub fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime")
}

/// A benchmark client's `n` connections to `addr`, with `TCP_NODELAY`
/// (connected one after the other; not part of any timing).
pub async fn connect_all(addr: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        streams.push(s);
    }
    streams
}
