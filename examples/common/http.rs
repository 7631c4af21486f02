//! The HTTP/1.1 handling of `examples/http_server.rs`, shared with the
//! network benchmark (whose tokio peer uses the same parser).
//!
//! A request is framed one way only (RFC 9112), so that a proxy in front
//! cannot read it differently: the head is CRLF-delimited lines of at
//! most [`MAX_HEAD`] bytes in all, every field line is `name: value` with
//! a token for a name, and the body is sized by `Content-Length` alone
//! (repeated, it must repeat the same number). A request has one `Host`
//! field, which only HTTP/1.0 may leave out (RFC 9112 §3.2). Anything
//! else (a missing or repeated `Host`, a bare CR or LF, a folded line,
//! whitespace before a colon, a length that is not digits, a
//! `Transfer-Encoding`) is refused, and a refusal closes the connection
//! after its answer, in stages ([`linger`]). A bare LF is refused as soon
//! as it arrives, without waiting for the rest of a head that a client
//! ending its lines with LF alone would never complete.
//!
//! An HTTP/1.1 request that expects `100-continue` and whose body did not
//! come with its head gets `100 Continue` at once, in its place among the
//! answers. A refusal of a `HEAD` request has no body, as its answer would
//! not.
//!
//! A connection's [`Parser`] looks at its input once however it arrives:
//! the scan for the end of a head resumes where it stopped, and a head is
//! parsed once, however many reads its body takes.

use futoin_asyncsteps::io::mio::net::TcpStream;
use futoin_asyncsteps::io::mio::Interest;
use futoin_asyncsteps::io::net::{self, ServeOptions, Then};
use futoin_asyncsteps::{error::codes, AsyncSteps, StackRef, Step, TakeOnce};
use std::cell::Cell;
use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::rc::Rc;
use std::time::Duration;

const BODY: &[u8] = b"Hello from futoin-asyncsteps\n";
/// The largest request head, counting its request line, its field lines
/// and the empty line that ends it; a larger one is refused (431),
/// whether or not all of it has arrived.
const MAX_HEAD: usize = 64 * 1024;
/// Request bodies are skipped; larger ones than this are refused (413).
const MAX_BODY: usize = 1 << 20;
/// How long a connection closing with input unanswered reads what the
/// client still sends before it closes ([`linger`]).
const LINGER: Duration = Duration::from_secs(1);
/// How much of that it reads at most: a refused body up to a few times
/// the limit, so that its client still reads the answer.
const LINGER_BYTES: usize = 4 * MAX_BODY;

/// The status line and body of an answer that refuses a request.
type Refusal = (&'static str, &'static [u8]);

const BAD_REQUEST: Refusal = ("400 Bad Request", b"bad request\n");
const BAD_LENGTH: Refusal = ("400 Bad Request", b"bad length\n");
const TOO_LARGE: Refusal = ("413 Content Too Large", b"body too large\n");
const HEAD_TOO_LARGE: Refusal = ("431 Request Header Fields Too Large", b"");
const NO_CODINGS: Refusal = ("501 Not Implemented", b"no transfer codings\n");

/// What a request head asks for.
#[derive(Clone, Copy)]
struct Request {
    /// `GET /` or `HEAD /`: the body is there.
    found: bool,
    /// `HEAD`: the answer has no body.
    head_only: bool,
    /// The request body's length, to skip.
    body_len: u64,
    /// The connection stays open after the answer.
    keep_alive: bool,
    /// An HTTP/1.1 client waits for `100 Continue` before it sends the
    /// body (`Expect: 100-continue`, RFC 9110 §10.1.1).
    expect_continue: bool,
}

/// One connection's request parser. Between calls of [`Parser::answer`]
/// it keeps how far the front request's head has been scanned for its
/// end and, once that head is read, what it asks until its body is all
/// there, so that input arriving in small pieces is looked at once.
#[derive(Default)]
pub struct Parser {
    /// How many bytes of the front request's head (from its first byte,
    /// after the empty lines before it) have been scanned without
    /// finding its end.
    scanned: usize,
    /// The front request, once its head is read and while its body is
    /// incomplete: its length with its body, and what it asks.
    pending: Option<(usize, Request)>,
    /// How many bytes the head scans and head parses have looked at.
    #[cfg(test)]
    examined: usize,
}

impl Parser {
    /// Answers every complete request at the front of `buf` (removing
    /// it), appending the responses to `out`. Returns true when the
    /// connection is to close after `out` is written. A refused request
    /// is answered and stays in `buf`, as does anything after a request
    /// that closes: what is left in `buf` then is input that the client
    /// may still be sending the rest of.
    ///
    /// Between calls, `buf` keeps what the last call left in it, with
    /// the input read since appended.
    pub fn answer(&mut self, buf: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
        let mut at = 0;
        let close = loop {
            let (total, req) = match self.pending {
                Some(pending) => pending,
                None => {
                    // Empty lines before a request line are skipped (RFC
                    // 9112 §2.2); the head then starts after them.
                    while buf[at..].starts_with(b"\r\n") {
                        at += 2;
                        self.scanned = 0;
                    }
                    let rest = &buf[at..];
                    if rest.is_empty() {
                        break false;
                    }
                    // A refusal of a HEAD request has no body either.
                    let head_only = rest.starts_with(b"HEAD ");
                    let end = match self.head_end(rest) {
                        Ok(Some(end)) => end,
                        Ok(None) => break false, // wait for the rest of the head
                        Err(refusal) => {
                            refuse(out, refusal, head_only);
                            break true;
                        }
                    };
                    self.examine(end);
                    let req = match parse(&rest[..end]) {
                        Ok(req) => req,
                        Err(refusal) => {
                            refuse(out, refusal, head_only);
                            break true;
                        }
                    };
                    if req.body_len > MAX_BODY as u64 {
                        refuse(out, TOO_LARGE, head_only);
                        break true;
                    }
                    let total = end + 4 + req.body_len as usize;
                    if req.expect_continue && buf.len() - at < total {
                        // Its client waits for this before the body (once:
                        // the head is parsed once). Its place in `out`
                        // keeps the answers in order.
                        out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    (total, req)
                }
            };
            if buf.len() - at < total {
                // The body is not all here yet.
                self.pending = Some((total, req));
                break false;
            }
            self.pending = None;
            at += total;
            let (status, body) = if req.found {
                ("200 OK", BODY)
            } else {
                ("404 Not Found", &b"not found\n"[..])
            };
            respond(out, status, body, req.head_only, !req.keep_alive);
            if !req.keep_alive {
                break true;
            }
        };
        buf.drain(..at);
        close
    }

    /// The length of the head at the front of `rest` without the CRLF
    /// CRLF that ends it, or `None` while that has not arrived. The scan
    /// resumes where the last one stopped: it walks the LFs, each of
    /// which must end a CRLF (a bare LF is refused at once, complete head
    /// or not), and the first that ends a CRLF CRLF ends the head. Only
    /// the first [`MAX_HEAD`] bytes are scanned; a head not ended within
    /// them is refused (431).
    fn head_end(&mut self, rest: &[u8]) -> Result<Option<usize>, Refusal> {
        let head = &rest[..rest.len().min(MAX_HEAD)];
        let mut from = self.scanned;
        self.examine(head.len() - from);
        while let Some(lf) = head[from..].iter().position(|&b| b == b'\n') {
            let lf = from + lf;
            if lf == 0 || head[lf - 1] != b'\r' {
                return Err(BAD_REQUEST);
            }
            if lf >= 3 && head[lf - 3..lf - 1] == *b"\r\n" {
                self.scanned = 0;
                return Ok(Some(lf - 3));
            }
            from = lf + 1;
        }
        if rest.len() >= MAX_HEAD {
            return Err(HEAD_TOO_LARGE);
        }
        self.scanned = head.len();
        Ok(None)
    }

    /// Counts `n` bytes looked at, in the tests' builds only.
    #[inline(always)]
    fn examine(&mut self, n: usize) {
        #[cfg(test)]
        {
            self.examined += n;
        }
        let _ = n;
    }

    /// How many bytes the head scans and head parses have looked at (the
    /// tests bound it by a small multiple of the input).
    #[cfg(test)]
    #[allow(dead_code)] // only tests/net/http_example/ reads it
    pub fn examined(&self) -> usize {
        self.examined
    }
}

/// Reads a request head: `head` is the request line and the field lines,
/// without the CRLF that ends the last line and the empty line.
fn parse(head: &[u8]) -> Result<Request, Refusal> {
    if !plain_lines(head) {
        return Err(BAD_REQUEST);
    }
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let mut words = lines.next().unwrap_or(b"").split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(BAD_REQUEST);
    };
    let http_1_0 = match version {
        b"HTTP/1.0" => true,
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', d] if d.is_ascii_digit() => false,
        _ => return Err(BAD_REQUEST),
    };
    if !is_token(method) || target.is_empty() {
        return Err(BAD_REQUEST);
    }
    let (mut length, mut close, mut keep, mut host) = (None, false, false, false);
    let mut expect_continue = false;
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(BAD_REQUEST);
        };
        // A token: no whitespace before the colon, nor a folded line.
        let name = &line[..colon];
        if !is_token(name) {
            return Err(BAD_REQUEST);
        }
        let value = &line[colon + 1..];
        if is_host(name) {
            // One Host field at most (RFC 9112 §3.2).
            if host {
                return Err(BAD_REQUEST);
            }
            host = true;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // A list of the same number may stand for one (RFC 9110 §8.6).
            for item in value.split(|&b| b == b',') {
                let n = decimal(trim(item)).ok_or(BAD_LENGTH)?;
                if length.is_some_and(|m| m != n) {
                    return Err(BAD_LENGTH);
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err(NO_CODINGS);
        } else if name.eq_ignore_ascii_case(b"expect") {
            // HTTP/1.0 clients' expectations are ignored (RFC 9110 §10.1.1).
            expect_continue |= !http_1_0 && trim(value).eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&b| b == b',').map(trim) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    // An HTTP/1.1 request names its host; HTTP/1.0 may leave it out.
    if !host && !http_1_0 {
        return Err(BAD_REQUEST);
    }
    let head_only = method == b"HEAD";
    Ok(Request {
        found: (head_only || method == b"GET") && target == b"/",
        head_only,
        body_len: length.unwrap_or(0),
        keep_alive: !close && (keep || !http_1_0),
        expect_continue: expect_continue && length.is_some_and(|n| n > 0),
    })
}

/// True when every CR in `head` starts a CRLF, every LF ends one, and no
/// other control character but HTAB is there.
fn plain_lines(head: &[u8]) -> bool {
    let mut cr = false; // the byte before was a CR
    for &b in head {
        if cr != (b == b'\n') || (b < b' ' && !matches!(b, b'\t' | b'\r' | b'\n')) || b == 0x7f {
            return false;
        }
        cr = b == b'\r';
    }
    !cr
}

/// `name` is `Host` in any case, compared as one word: `| 0x20` turns
/// an upper case letter into its lower case, and only the two cases of a
/// letter turn into that letter.
fn is_host(name: &[u8]) -> bool {
    match <[u8; 4]>::try_from(name) {
        Ok(name) => u32::from_ne_bytes(name) | 0x2020_2020 == u32::from_ne_bytes(*b"host"),
        Err(_) => false,
    }
}

/// A non-empty run of token characters (RFC 9110 §5.6.2).
fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `s` without the spaces and tabs around it.
fn trim(s: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// A number of one or more decimal digits; `None` for anything else or
/// for one over `u64::MAX`.
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Appends the answer of a refusal, which closes the connection (without
/// its body for a HEAD request).
fn refuse(out: &mut Vec<u8>, (status, body): Refusal, head_only: bool) {
    respond(out, status, body, head_only, true);
}

/// Appends an answer with `body` (only its length when `head_only`).
fn respond(out: &mut Vec<u8>, status: &str, body: &[u8], head_only: bool, close: bool) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = body.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    let conn: &[u8] = if close {
        b"\r\nConnection: close\r\n\r\n"
    } else {
        b"\r\nConnection: keep-alive\r\n\r\n"
    };
    out.extend_from_slice(conn);
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// One connection: answer every complete request that has arrived, write
/// the responses, read more (one step per request: `serve_stream`). When
/// it closes with input unanswered (a refusal, or requests after one
/// that closes), it closes in stages ([`linger`]). With an `idle` limit,
/// it is closed quietly when the client sends nothing (no request, or not
/// the rest of one) or reads nothing of a blocked answer for that long.
pub fn connection(conn: TcpStream, idle: Option<Duration>) -> AsyncSteps {
    let conn = TakeOnce::new(conn);
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            let c = s.stack(conn.take()?);
            // Whether it closes with input unanswered.
            let unanswered = Rc::new(Cell::new(false));
            let closing_with = unanswered.clone();
            let mut parser = Parser::default();
            let mut opts = ServeOptions::default();
            opts.idle_timeout = idle;
            net::serve_stream_with(s, c, opts, move |input, output| {
                Ok(if parser.answer(input, output) {
                    closing_with.set(!input.is_empty());
                    Then::Close
                } else {
                    Then::Read
                })
            });
            s.add(move |s, ()| {
                // Input may also wait unread in the socket: the reads of a
                // turn stop after a number of full ones, and more may have
                // come since.
                if unanswered.get() || unread_input(s.stack_get(c)?) {
                    linger(s, c);
                }
                Ok(())
            });
            Ok(())
        },
        crate::serve::end_quietly_on_peer_error,
    );
    root
}

/// True when the client has sent bytes that `conn` has not read yet (or
/// a peek cannot tell): closing now would reset the connection.
fn unread_input(conn: &TcpStream) -> bool {
    loop {
        match conn.peek(&mut [0u8; 1]) {
            Ok(n) => return n > 0,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return e.kind() != ErrorKind::WouldBlock,
        }
    }
}

/// Closes `conn`, whose client may still be sending, in stages (RFC 9112
/// §9.6): shuts down the writing half, so that the client reads the
/// answers written and then the end of the stream, then reads and drops
/// what the client sends until it closes its half, [`LINGER_BYTES`] came
/// or [`LINGER`] passed. Closing at once with input unread would make the
/// kernel reset the connection, and the client could lose the answer
/// before reading it. The socket closes when the step owning it ends.
fn linger(s: &mut Step<'_>, conn: StackRef<TcpStream>) {
    s.add_catch(
        move |s, ()| {
            if s.stack_get(conn)?.shutdown(Shutdown::Write).is_err() {
                return s.success(()); // the connection is gone already
            }
            s.set_timeout(LINGER);
            let mut left = LINGER_BYTES;
            s.loop_(move |s| {
                let c = s.stack_get(conn)?;
                let mut buf = [0u8; 16 * 1024];
                loop {
                    match c.read(&mut buf) {
                        Ok(n) if n > 0 && n < left => left -= n,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            return s.wait_io(conn, Interest::READABLE)
                        }
                        // The end of the stream, the cap, or a reset.
                        _ => return s.break_loop(),
                    }
                }
            });
            Ok(())
        },
        |s, e| {
            if e.code() == codes::TIMEOUT {
                s.success(())
            } else {
                Ok(())
            }
        },
    );
}
