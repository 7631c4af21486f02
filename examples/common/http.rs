//! The HTTP/1.1 handling of `examples/http_server.rs`, shared with the
//! network benchmark (whose tokio peer uses the same parser).

use futoin_asyncsteps::io::net::{self, Then};
use futoin_asyncsteps::{AsyncSteps, TakeOnce};
use mio::net::TcpStream;

const BODY: &[u8] = b"Hello from futoin-asyncsteps\n";
const MAX_HEAD: usize = 64 * 1024;
/// Request bodies are skipped; larger ones than this are refused (413).
const MAX_BODY: usize = 1 << 20;

/// Answers every complete request at the front of `buf` (removing it),
/// appending the responses to `out`. Returns true when the connection is
/// to close after `out` is written.
pub fn answer(buf: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
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
        if body_len > MAX_BODY {
            respond(
                out,
                "413 Content Too Large",
                b"body too large\n",
                false,
                true,
            );
            return true;
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

/// One connection: answer every complete request that has arrived, write
/// the responses, read more (one step per request: `serve_stream`).
pub fn connection(conn: TcpStream) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            let c = s.stack(conn.take()?);
            net::serve_stream(s, c, 16 * 1024, |input, output| {
                Ok(if answer(input, output) {
                    Then::Close
                } else {
                    Then::Read
                })
            });
            Ok(())
        },
        crate::serve::end_quietly_on_comm_error,
    );
    root
}
