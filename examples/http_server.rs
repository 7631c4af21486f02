//! A minimal HTTP/1.1 server on all loops: `GET /` answers a small body,
//! anything else 404. Keep-alive and pipelining work: every complete
//! request in the buffer is answered, in order, before reading more. Each
//! connection is a root flow on the least busy loop (or, with
//! `--reuseport`, on the loop whose `SO_REUSEPORT` listener accepted it;
//! see `docs/net.md`).
//!
//! ```sh
//! cargo run --release --example http_server            # 127.0.0.1:8080
//! cargo run --release --example http_server -- --reuseport
//! cargo run --release --example http_server -- --no-pin  # loops not pinned to cores
//! cargo run --release --example http_server -- --idle-timeout=60
//! curl -i http://127.0.0.1:8080/
//! wrk -t2 -c100 -d10s http://127.0.0.1:8080/
//! ```
//!
//! Ctrl-C (SIGINT) or SIGTERM stops it cleanly (see `echo_server`).
//!
//! Limits, on purpose: request bodies are skipped by `Content-Length` up to
//! 1 MiB (larger ones get 413; a `Transfer-Encoding` gets 501), a request
//! head over 64 KiB gets 431 whether or not all of it has arrived, a
//! request that could be framed more than one way (lengths that differ,
//! whitespace before a colon, a bare CR or LF, a folded line) gets 400, and
//! so does an HTTP/1.1 request without a `Host` field or any request with
//! two (RFC 9112 §3.2).
//! Each of these answers closes the connection in stages (RFC 9112 §9.6):
//! the server shuts down its writing half, then reads and drops what the
//! client still sends for up to a second or 4 MiB, so that the client reads
//! the answer instead of a reset.
//!
//! `Connection: close` anywhere in the header's list closes after the
//! answer; an HTTP/1.0 request keeps the connection when the list has
//! `keep-alive`.
//!
//! `--idle-timeout=SECS` lets go of a client that sends nothing (no
//! request, or not the rest of one) or reads nothing of a blocked answer
//! for that long (`net::ServeOptions::idle_timeout`); without it, such a
//! client holds its connection for good. Each wait then has a timer of its
//! own (about 700 instructions a request), so it is off by default, as in
//! the benchmarks, whose tokio peers have no limit either.

#[path = "common/http.rs"]
mod http;
#[path = "common/serve.rs"]
mod serve;

use serve::Spread;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use std::net::SocketAddr;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
        .parse()?;
    let spread = Spread::from_args();
    let rt = serve::runtime_from_args()?;
    let stop = rt.spawn::<(i32,)>(serve::until_signal(Signals::new([SIGINT, SIGTERM])?));
    let idle = serve::idle_from_args().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let (addr, accepting) = serve::listen(&rt, addr, spread, move |c| http::connection(c, idle))?;
    println!(
        "http server on http://{addr} with {} loops ({spread:?}); Ctrl-C to stop",
        rt.loops()
    );
    let (sig,) = stop.wait()?;
    println!("signal {sig}: stopping");
    for a in accepting {
        a.cancel();
        let _ = a.wait();
    }
    rt.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::http::Parser;

    /// Answers `buf` as a connection's first input.
    fn answer(buf: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
        Parser::default().answer(buf, out)
    }

    #[test]
    fn pipelined_requests_are_answered_in_order() {
        let mut buf =
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET".to_vec();
        let mut out = Vec::new();
        assert!(!answer(&mut buf, &mut out));
        let text = String::from_utf8(out).unwrap();
        let first = text.find("200 OK").unwrap();
        let second = text.find("404 Not Found").unwrap();
        assert!(first < second);
        assert_eq!(buf, b"GET", "the partial third request stays");
    }

    #[test]
    fn a_huge_content_length_is_refused_not_buffered() {
        let mut buf =
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n".to_vec();
        let mut out = Vec::new();
        assert!(answer(&mut buf, &mut out), "the connection closes");
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 413 "));
    }
}
