//! The HTTP example's request handling (`examples/common/http.rs`):
//! framing that a proxy in front could not read another way (one
//! Content-Length, no whitespace before a colon, no Transfer-Encoding,
//! no bare CR or LF, a bare LF refused before the head is complete), one
//! `Host` (none only in HTTP/1.0), the `Connection` token list, the 64
//! KiB head limit whether or not the head is complete, `100 Continue` for
//! a client that expects it, no body in a refusal of `HEAD`, input arriving in
//! pieces (answered as if it came whole, each byte looked at a bounded
//! number of times), and, on real loopback sockets, the close after a
//! refusal: the client reads the whole answer and then the end of the
//! stream, not a reset, and the close stays bounded. Also the command
//! line's idle limit (`examples/common/serve.rs`).
//!
//! The answers and helpers here are shared by `parsing` and `sockets`.

mod parsing;
mod sockets;

use crate::http;

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 29\r\n\
    Connection: keep-alive\r\n\r\nHello from futoin-asyncsteps\n";

const OK_CLOSE: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 29\r\n\
    Connection: close\r\n\r\nHello from futoin-asyncsteps\n";

const NOT_FOUND: &str = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\
    Content-Length: 10\r\nConnection: keep-alive\r\n\r\nnot found\n";

const BAD_REQUEST: &str = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
    Content-Length: 12\r\nConnection: close\r\n\r\nbad request\n";

const BAD_LENGTH: &str = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
    Content-Length: 11\r\nConnection: close\r\n\r\nbad length\n";

const TOO_LARGE: &str = "HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain\r\n\
    Content-Length: 15\r\nConnection: close\r\n\r\nbody too large\n";

const HEAD_TOO_LARGE: &str = "HTTP/1.1 431 Request Header Fields Too Large\r\n\
    Content-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

const NOT_IMPLEMENTED: &str = "HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain\r\n\
    Content-Length: 20\r\nConnection: close\r\n\r\nno transfer codings\n";

/// The documented limits (`examples/http_server.rs`).
const MAX_HEAD: usize = 64 * 1024;

const MAX_BODY: usize = 1 << 20;

/// What the example answers to `request` arriving whole: whether the
/// connection closes after the answers, and their text.
fn answer(request: &[u8]) -> (bool, String) {
    let (close, text, _) = answer_leaving(request);
    (close, text)
}

/// [`answer`], and the bytes it leaves unanswered in the buffer.
fn answer_leaving(request: &[u8]) -> (bool, String, Vec<u8>) {
    let mut buf = request.to_vec();
    let mut out = Vec::new();
    let close = http::Parser::default().answer(&mut buf, &mut out);
    (close, String::from_utf8(out).unwrap(), buf)
}

/// What one connection's parser made of input fed in `pieces`, called
/// after each piece as a connection calls it, until it closes.
struct Fed {
    /// Whether it closed.
    close: bool,
    /// The answers' text.
    text: String,
    /// The input left unanswered: what stayed in the buffer, then the
    /// pieces not fed after the close.
    left: Vec<u8>,
    /// The bytes fed until it closed (all of them when it did not).
    fed: usize,
    /// The bytes the parser looked at (`Parser::examined`).
    examined: usize,
}

/// Feeds `pieces` to a new parser ([`Fed`]).
fn feed<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Fed {
    let mut parser = http::Parser::default();
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let (mut close, mut fed) = (false, 0);
    let mut pieces = pieces.into_iter();
    for piece in pieces.by_ref() {
        buf.extend_from_slice(piece);
        fed += piece.len();
        if parser.answer(&mut buf, &mut out) {
            close = true;
            break;
        }
    }
    pieces.for_each(|piece| buf.extend_from_slice(piece));
    Fed {
        close,
        text: String::from_utf8(out).unwrap(),
        left: buf,
        fed,
        examined: parser.examined(),
    }
}

/// [`feed`] one byte per call.
fn feed_bytes(input: &[u8]) -> Fed {
    feed(input.chunks(1))
}

/// A `GET /` head of exactly `len` bytes, its empty line included.
fn head_of(len: usize) -> Vec<u8> {
    let start = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    let end = b"\r\n\r\n";
    let mut head = start.to_vec();
    head.resize(len - end.len(), b'p');
    head.extend_from_slice(end);
    head
}
