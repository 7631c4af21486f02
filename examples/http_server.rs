//! A minimal HTTP/1.1 server on all loops: `GET /` answers a small body,
//! anything else 404. Keep-alive and pipelining work: every complete
//! request in the buffer is answered, in order, before reading more. Each
//! connection is a root flow on the least busy loop.
//!
//! ```sh
//! cargo run --release --example http_server            # 127.0.0.1:8080
//! curl -i http://127.0.0.1:8080/
//! wrk -t2 -c100 -d10s http://127.0.0.1:8080/
//! ```
//!
//! Ctrl-C (SIGINT) or SIGTERM stops it cleanly (see `echo_server`).
//!
//! Limits, on purpose: request bodies are skipped by `Content-Length`
//! (chunked request bodies get 400 and the connection closes), and a
//! request head over 64 KiB gets 431 and the connection closes.

#[path = "common/serve.rs"]
mod serve;

use futoin_asyncsteps::io::net;
use futoin_asyncsteps::{AsyncSteps, Runtime, TakeOnce};
use mio::net::{TcpListener, TcpStream};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

const BODY: &[u8] = b"Hello from futoin-asyncsteps\n";
const MAX_HEAD: usize = 64 * 1024;

/// Answers every complete request at the front of `buf` (removing it),
/// appending the responses to `out`. Returns true when the connection is
/// to close after `out` is written.
fn answer(buf: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
    loop {
        let Some(end) = find(buf, b"\r\n\r\n") else {
            if buf.len() > MAX_HEAD {
                respond(out, "431 Request Header Fields Too Large", b"", false, true);
                return true;
            }
            return false; // wait for the rest of the head
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut req = lines.next().unwrap_or("").split(' ');
        let (method, path, version) = (
            req.next().unwrap_or(""),
            req.next().unwrap_or(""),
            req.next().unwrap_or(""),
        );
        if method.is_empty() || path.is_empty() || !version.starts_with("HTTP/1.") {
            respond(out, "400 Bad Request", b"bad request\n", false, true);
            return true;
        }
        let mut body_len = 0usize;
        let mut keep_alive = version == "HTTP/1.1";
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                match value.parse() {
                    Ok(n) => body_len = n,
                    Err(_) => {
                        respond(out, "400 Bad Request", b"bad length\n", false, true);
                        return true;
                    }
                }
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                respond(out, "400 Bad Request", b"no chunked bodies\n", false, true);
                return true;
            } else if name.eq_ignore_ascii_case("connection") {
                if value.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if value.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        }
        let total = end + 4 + body_len;
        if buf.len() < total {
            return false; // the body is not all here yet
        }
        buf.drain(..total);
        let head_only = method == "HEAD";
        if (method == "GET" || head_only) && path == "/" {
            respond(out, "200 OK", BODY, head_only, !keep_alive);
        } else {
            respond(out, "404 Not Found", b"not found\n", head_only, !keep_alive);
        }
        if !keep_alive {
            return true;
        }
    }
}

fn respond(out: &mut Vec<u8>, status: &str, body: &[u8], head_only: bool, close: bool) {
    let conn = if close { "close" } else { "keep-alive" };
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    if !head_only {
        out.extend_from_slice(body);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One connection: answer what is buffered, write it, read more.
fn connection(conn: TcpStream) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            let c = s.stack(conn.take()?);
            let buf = Rc::new(RefCell::new(Vec::new()));
            s.loop_(move |s| {
                let mut out = Vec::new();
                let close = answer(&mut buf.borrow_mut(), &mut out);
                if !out.is_empty() {
                    net::write_all(s, c, out);
                }
                if close {
                    s.add(|s, ()| s.break_loop());
                    return Ok(());
                }
                net::read_some(s, c, 16 * 1024);
                let buf = buf.clone();
                s.add(move |s, (data,): (Vec<u8>,)| {
                    if data.is_empty() {
                        return s.break_loop(); // the client closed
                    }
                    buf.borrow_mut().extend_from_slice(&data);
                    Ok(())
                });
                Ok(())
            });
            Ok(())
        },
        serve::end_quietly_on_comm_error,
    );
    root
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
        .parse()?;
    let rt = Runtime::new()?;
    let listener = TcpListener::bind(addr)?;
    println!(
        "http server on http://{} with {} loops; Ctrl-C to stop",
        listener.local_addr()?,
        rt.loops()
    );
    let stop = rt.spawn::<(i32,)>(serve::until_signal(Signals::new([SIGINT, SIGTERM])?));
    let accepting = rt.spawn::<()>(serve::acceptor(listener, rt.handle(), connection));
    let (sig,) = stop.wait()?;
    println!("signal {sig}: stopping");
    accepting.cancel();
    let _ = accepting.wait();
    rt.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelined_requests_are_answered_in_order() {
        let mut buf = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET".to_vec();
        let mut out = Vec::new();
        assert!(!answer(&mut buf, &mut out));
        let text = String::from_utf8(out).unwrap();
        let first = text.find("200 OK").unwrap();
        let second = text.find("404 Not Found").unwrap();
        assert!(first < second);
        assert_eq!(buf, b"GET", "the partial third request stays");
    }
}
