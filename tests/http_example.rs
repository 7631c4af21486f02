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
//! stream, not a reset, and the close stays bounded.

#[path = "../examples/common/http.rs"]
mod http;
#[path = "../examples/common/serve.rs"]
mod serve;
#[path = "common/tcp.rs"]
mod tcp;

use futoin_asyncsteps::{AsyncTool, Promise};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

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

// -- framing (RFC 9112 §5, §6) --

#[test]
fn differing_content_lengths_are_refused_not_smuggled() {
    // Read with the first length, the body is a second request.
    let smuggled = "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n";
    for lengths in [
        format!("Content-Length: {}\r\nContent-Length: 0", smuggled.len()),
        format!("Content-Length: 0\r\nContent-Length: {}", smuggled.len()),
        format!("Content-Length: {}, 0", smuggled.len()),
    ] {
        let req = format!("POST / HTTP/1.1\r\nHost: x\r\n{lengths}\r\n\r\n{smuggled}");
        let (close, text, left) = answer_leaving(req.as_bytes());
        assert_eq!((close, text.as_str()), (true, BAD_LENGTH), "{lengths}");
        assert_eq!(left, req.as_bytes(), "the refused request stays unanswered");
    }
}

#[test]
fn identical_content_lengths_are_one_length() {
    for lengths in [
        "Content-Length: 5\r\nContent-Length: 5",
        "Content-Length: 5, 5",
        "Content-Length:5 ,\t5",
    ] {
        let req = format!(
            "GET / HTTP/1.1\r\nHost: x\r\n{lengths}\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        assert_eq!(
            answer(req.as_bytes()),
            (false, format!("{OK}{NOT_FOUND}")),
            "{lengths}"
        );
    }
}

#[test]
fn whitespace_before_the_colon_is_refused() {
    for name in ["Content-Length :", "Content-Length\t:", " Content-Length:"] {
        let req = format!(
            "POST / HTTP/1.1\r\nHost: x\r\n{name} 23\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        assert_eq!(
            answer(req.as_bytes()),
            (true, BAD_REQUEST.into()),
            "{name:?}"
        );
    }
}

#[test]
fn a_content_length_that_is_not_a_number_or_overflows_is_refused() {
    for value in [
        "+5",
        "-1",
        "5x",
        "0x10",
        "1 2",
        "",
        ",",
        "5,",
        "18446744073709551616",
        "99999999999999999999999999",
    ] {
        let req = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {value}\r\n\r\nhello");
        assert_eq!(
            answer(req.as_bytes()),
            (true, BAD_LENGTH.into()),
            "{value:?}"
        );
    }
    // A length that fits but is over the limit is too large, not bad.
    let req = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n";
    assert_eq!(answer(req), (true, TOO_LARGE.into()));
}

#[test]
fn a_transfer_encoding_is_not_implemented_and_closes() {
    for fields in [
        "Transfer-Encoding: chunked",
        "transfer-encoding: gzip, chunked",
        "Content-Length: 3\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 3",
    ] {
        let req = format!("POST / HTTP/1.1\r\nHost: x\r\n{fields}\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        let (close, text, left) = answer_leaving(req.as_bytes());
        assert_eq!((close, text.as_str()), (true, NOT_IMPLEMENTED), "{fields}");
        assert_eq!(left, req.as_bytes());
    }
}

#[test]
fn malformed_lines_in_the_head_are_refused() {
    for head in [
        "GET / HTTP/1.1\r\nHost: x\r\nno colon here",
        "GET / HTTP/1.1\r\nHost: x\r\n: no name",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded: into X-A",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\nContent-Length: 5",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\rContent-Length: 5",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b",
        "GET / HTTP/1.1\r\nHost: x\r\nX(A): 1",
        "GET /  HTTP/1.1\r\nHost: x",
        "GET / HTTP/1.1 extra\r\nHost: x",
        "GET / HTTP/2.0\r\nHost: x",
        " GET / HTTP/1.1\r\nHost: x",
    ] {
        let req = format!("{head}\r\n\r\n");
        assert_eq!(
            answer(req.as_bytes()),
            (true, BAD_REQUEST.into()),
            "{head:?}"
        );
    }
}

#[test]
fn a_bare_lf_is_refused_without_waiting_for_the_head_to_end() {
    for req in [
        "GET / HTTP/1.1\nHost: x\n\n",
        "GET / HTTP/1.1\nHost: x\nX-A: 1\nContent-Length: 0\n\nGET / HTTP/1.1\n\n",
        "GET / HTTP/1.1\r\nHost: x\nX-A: 1\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\n\r\n\r\n",
        "\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "\r\n\nGET",
    ] {
        let (close, text, left) = answer_leaving(req.as_bytes());
        assert_eq!((close, text.as_str()), (true, BAD_REQUEST), "{req:?}");
        let b = req.as_bytes();
        let start = if b.starts_with(b"\r\n") { 2 } else { 0 };
        assert_eq!(left, &b[start..], "{req:?}");
        // Arriving a byte at a time, it is refused at the bare LF.
        let bare = (start..b.len())
            .find(|&i| b[i] == b'\n' && (i == start || b[i - 1] != b'\r'))
            .unwrap();
        let fed = feed_bytes(b);
        assert_eq!(
            (fed.close, fed.text.as_str()),
            (true, BAD_REQUEST),
            "{req:?}"
        );
        assert_eq!(fed.fed, bare + 1, "{req:?}");
    }
}

#[test]
fn empty_lines_before_a_request_are_skipped() {
    let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n\r\n";
    assert_eq!(
        answer_leaving(req),
        (false, format!("{OK}{OK}"), Vec::new())
    );
}

// -- Host (RFC 9112 §3.2) --

#[test]
fn an_http_1_1_request_without_a_host_or_any_with_two_is_refused() {
    for (version, fields) in [
        ("1.1", ""),
        ("1.1", "X-Host: x\r\nHosts: x\r\nHos: x\r\nH0st: x\r\n"),
        ("1.1", "Host: x\r\nHost: x\r\n"),
        ("1.1", "Host: x\r\nX-A: 1\r\nhost: y\r\n"),
        ("1.0", "Host: x\r\nHOST: x\r\n"),
    ] {
        let req = format!("GET / HTTP/{version}\r\n{fields}\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let (close, text, left) = answer_leaving(req.as_bytes());
        assert_eq!((close, text.as_str()), (true, BAD_REQUEST), "{req:?}");
        assert_eq!(left, req.as_bytes(), "{req:?}");
    }
}

#[test]
fn one_host_or_none_in_http_1_0_is_answered() {
    for req in [
        "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nhOsT:example.com:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost:\r\n\r\n", // an empty host (RFC 9112 §3.2)
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    ] {
        assert_eq!(answer(req.as_bytes()), (false, OK.into()), "{req:?}");
    }
    let req = b"GET / HTTP/1.0\r\n\r\n";
    assert_eq!(answer(req), (true, OK_CLOSE.into()));
    // Fields named like Host are other fields.
    for name in ["X-Host", "Hosts", "Hos", "H0st", "Ho^t"] {
        let req = format!("GET / HTTP/1.1\r\nHost: x\r\n{name}: y\r\n\r\n");
        assert_eq!(answer(req.as_bytes()), (false, OK.into()), "{name}");
    }
}

// -- Connection (RFC 9110 §7.6.1, RFC 9112 §9.3) --

#[test]
fn close_anywhere_in_the_connection_list_closes() {
    for fields in [
        "Connection: TE, close",
        "Connection: close,TE",
        "Connection: Upgrade ,\tCLOSE ",
        "Connection: keep-alive\r\nConnection: Close",
        "Connection: keep-alive, close",
    ] {
        let req = format!(
            "GET / HTTP/1.1\r\nHost: x\r\n{fields}\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        let (close, text, left) = answer_leaving(req.as_bytes());
        assert_eq!((close, text.as_str()), (true, OK_CLOSE), "{fields}");
        assert_eq!(
            left, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "nothing after the close is answered"
        );
    }
    // A token that only contains "close" is another token.
    let req = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: closed, x-close\r\n\r\n";
    assert_eq!(answer(req), (false, OK.into()));
}

#[test]
fn http_1_0_keeps_the_connection_for_a_keep_alive_token() {
    for (fields, close) in [
        ("", true),
        ("Connection: keep-alive\r\n", false),
        ("Connection: TE, Keep-Alive\r\n", false),
        ("Connection: keep-alive, close\r\n", true),
    ] {
        let req = format!("GET / HTTP/1.0\r\n{fields}\r\n");
        let expect = if close { OK_CLOSE } else { OK };
        assert_eq!(answer(req.as_bytes()), (close, expect.into()), "{fields:?}");
    }
}

// -- the head limit --

/// A `GET /` head of exactly `len` bytes, its empty line included.
fn head_of(len: usize) -> Vec<u8> {
    let start = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    let end = b"\r\n\r\n";
    let mut head = start.to_vec();
    head.resize(len - end.len(), b'p');
    head.extend_from_slice(end);
    head
}

#[test]
fn a_complete_head_over_the_limit_gets_431() {
    let (close, text, left) = answer_leaving(&head_of(100 * 1024));
    assert_eq!((close, text.as_str()), (true, HEAD_TOO_LARGE));
    assert_eq!(left.len(), 100 * 1024);
    assert_eq!(
        answer(&head_of(MAX_HEAD + 1)),
        (true, HEAD_TOO_LARGE.into())
    );
    assert_eq!(
        answer(&head_of(MAX_HEAD)),
        (false, OK.into()),
        "at the limit"
    );
}

#[test]
fn an_incomplete_head_gets_431_once_it_reaches_the_limit() {
    let head = head_of(MAX_HEAD + 1);
    assert_eq!(answer(&head[..MAX_HEAD - 1]), (false, String::new()));
    assert_eq!(answer(&head[..MAX_HEAD]), (true, HEAD_TOO_LARGE.into()));
    // After an answered request, the limit counts from the next head.
    let mut two = head_of(MAX_HEAD);
    two.extend_from_slice(&head[..MAX_HEAD - 1]);
    assert_eq!(
        answer_leaving(&two),
        (false, OK.into(), head[..MAX_HEAD - 1].to_vec())
    );
}

// -- input arriving in pieces --

#[test]
fn a_head_arriving_a_byte_at_a_time_is_scanned_once() {
    let head = head_of(MAX_HEAD - 16);
    let fed = feed_bytes(&head);
    assert_eq!((fed.close, fed.text.as_str()), (false, OK));
    assert!(fed.left.is_empty());
    // Scanned once for its end, then parsed once; rescanning what came
    // before at each call would look at about 2 GiB.
    assert!(
        fed.examined <= 2 * head.len(),
        "{} bytes looked at for a head of {}",
        fed.examined,
        head.len()
    );
    // An incomplete one gets 431 at the limit, a byte at a time too.
    let head = head_of(MAX_HEAD + 1);
    let fed = feed_bytes(&head);
    assert_eq!((fed.close, fed.text.as_str()), (true, HEAD_TOO_LARGE));
    assert_eq!((fed.fed, fed.left.len()), (MAX_HEAD, head.len()));
    assert!(fed.examined <= MAX_HEAD, "{}", fed.examined);
}

#[test]
fn a_body_arriving_a_byte_at_a_time_after_a_large_head_is_waited_on_once() {
    let body = vec![b'b'; 4096];
    let mut post = format!(
        "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nX-Pad: ",
        body.len()
    )
    .into_bytes();
    post.resize(60 * 1024 - 4, b'p');
    post.extend_from_slice(b"\r\n\r\n");
    let head = post.len();
    post.extend_from_slice(&body);
    post.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let fed = feed_bytes(&post);
    assert_eq!(
        (fed.close, fed.text, fed.left),
        (false, format!("{NOT_FOUND}{OK}"), vec![])
    );
    // The head scanned and parsed once, not again at each byte of the
    // body (about 500 MiB).
    assert!(
        fed.examined <= 2 * post.len(),
        "{} bytes looked at for a head of {head} and a body of {}",
        fed.examined,
        body.len()
    );
}

#[test]
fn a_lone_cr_then_its_lf_before_a_request_line_is_an_empty_line() {
    let get = &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..];
    for pieces in [
        vec![&b"\r"[..], b"\n", get],
        vec![b"\r", b"\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"],
        vec![b"\r", b"\n\r", b"\n", get],
        vec![get, b"\r", b"\n", get],
    ] {
        let fed = feed(pieces.iter().copied());
        let expect = if pieces[0] == get {
            format!("{OK}{OK}")
        } else {
            OK.into()
        };
        assert_eq!((fed.close, fed.text, fed.left), (false, expect, vec![]));
    }
    // The LF after the lone CR ends an empty line: a second LF is bare.
    let fed = feed([&b"\r"[..], b"\n\n"]);
    assert_eq!((fed.close, fed.text.as_str()), (true, BAD_REQUEST));
    assert_eq!(fed.left, b"\n");
}

/// Request streams that a connection may get: pipelined requests with
/// bodies and empty lines between them, ending with a request that
/// closes, with a refusal, or with a request still arriving.
const STREAMS: &[&[u8]] = &[
    b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n\
      POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\nhe\r\nl\no\
      \r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\n\
      GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
      GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n\
      GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\
      POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n\r\n\r\
      GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\nGET / HTTP/1.1\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\
      GET / HTTP/1.1\r\nX: a\rb\r\nHost: x\r\n\r\n",
    b"HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n\r\n\
      POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody\
      GET / HTTP/1.1\r\nHost: x\r\n",
];

#[test]
fn input_split_anywhere_is_answered_as_if_it_came_whole() {
    for stream in STREAMS {
        let whole = feed([*stream]);
        assert!(!whole.text.is_empty());
        for split in 1..stream.len() {
            let (a, b) = stream.split_at(split);
            let fed = feed([a, b]);
            let got = (fed.close, &fed.text, &fed.left);
            assert_eq!(got, (whole.close, &whole.text, &whole.left), "at {split}");
        }
        for size in [1, 2, 3, 5, 7] {
            let fed = feed(stream.chunks(size));
            let got = (fed.close, &fed.text, &fed.left);
            assert_eq!(got, (whole.close, &whole.text, &whole.left), "by {size}");
            assert!(fed.examined <= 2 * stream.len(), "by {size}");
        }
    }
}

// -- the connection flow on loopback sockets --

/// Serves one connection with the example's flow on this thread while a
/// client thread sends `request`, closes its writing half and reads until
/// the end. Returns the client's write result and read result, and what
/// it read.
fn exchange(request: Vec<u8>) -> (io::Result<()>, io::Result<usize>, String) {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = tcp::pair();
    let p = http::connection(conn.take().unwrap(), None).promise::<()>(&mut tool);
    let peer = std::thread::spawn(move || {
        let sent = client
            .write_all(&request)
            .and_then(|()| client.shutdown(Shutdown::Write));
        let mut got = Vec::new();
        let read = client.read_to_end(&mut got);
        (sent, read, got)
    });
    tool.block_on(p).unwrap();
    let (sent, read, got) = peer.join().unwrap();
    let st = tool.stats();
    assert_eq!((st.io, st.flows, st.timers), (0, 0, 0), "{st:?}");
    (sent, read, String::from_utf8(got).unwrap())
}

#[test]
fn pipelined_requests_are_answered_until_the_client_closes() {
    let (sent, read, text) = exchange(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\nHEAD /x HTTP/1.1\r\nHost: x\r\n\r\nGET /".to_vec(),
    );
    sent.unwrap();
    read.unwrap();
    let head_404 = &NOT_FOUND[..NOT_FOUND.len() - "not found\n".len()];
    assert_eq!(text, format!("{OK}{head_404}"));
}

#[test]
fn a_client_sending_a_body_too_large_reads_the_413_then_the_end() {
    let mut request = format!(
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    )
    .into_bytes();
    request.resize(request.len() + MAX_BODY + 1, b'x');
    let (sent, read, text) = exchange(request);
    sent.expect("the server reads the refused body instead of resetting");
    read.expect("the answer, then the end of the stream, not a reset");
    assert_eq!(text, TOO_LARGE);
}

#[test]
fn a_client_sending_a_head_too_large_reads_the_431_then_the_end() {
    let (sent, read, text) = exchange(head_of(512 * 1024));
    sent.expect("the server reads the rest of the head instead of resetting");
    read.expect("the answer, then the end of the stream, not a reset");
    assert_eq!(text, HEAD_TOO_LARGE);
}

#[test]
fn a_bad_request_among_pipelined_ones_is_answered_in_order_then_closes() {
    let mut request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nBAD\r\n\r\n".to_vec();
    request.resize(request.len() + 256 * 1024, b'x'); // still arriving
    let (sent, read, text) = exchange(request);
    sent.unwrap();
    read.unwrap();
    assert_eq!(text, format!("{OK}{BAD_REQUEST}"));
}

/// Runs the example's flow until it ends, failing after `limit`.
fn run_within(tool: &mut AsyncTool, p: &Promise<()>, limit: Duration) {
    let start = Instant::now();
    while !p.is_done() {
        assert!(
            start.elapsed() < limit,
            "the flow still runs after {limit:?}"
        );
        tool.iterate(Some(Duration::from_millis(50))).unwrap();
    }
}

#[test]
fn a_refused_client_that_neither_sends_nor_closes_is_let_go() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = tcp::pair();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n")
        .unwrap();
    let p = http::connection(conn.take().unwrap(), None).promise::<()>(&mut tool);
    run_within(&mut tool, &p, Duration::from_secs(30));
    let mut got = String::new();
    client.read_to_string(&mut got).unwrap();
    assert_eq!(got, BAD_LENGTH);
    let st = tool.stats();
    assert_eq!((st.io, st.flows, st.timers), (0, 0, 0), "{st:?}");
}

#[test]
fn a_refused_client_that_keeps_sending_is_cut_off() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = tcp::pair();
    client
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
        .unwrap();
    let p = http::connection(conn.take().unwrap(), None).promise::<()>(&mut tool);
    let mut sender = client.try_clone().unwrap();
    let flood = std::thread::spawn(move || {
        let chunk = [b'x'; 64 * 1024];
        loop {
            if let Err(e) = sender.write_all(&chunk) {
                return e; // the server closed with the flood unread
            }
        }
    });
    run_within(&mut tool, &p, Duration::from_secs(30));
    let e = flood.join().unwrap();
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ),
        "{e:?}"
    );
}

#[test]
fn a_close_the_client_asked_for_does_not_linger() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = tcp::pair();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let p = http::connection(conn.take().unwrap(), None).promise::<()>(&mut tool);
    // The request is there already: the flow ends without waiting for
    // the client (who neither sends nor closes) or a timer.
    for _ in 0..1000 {
        if p.is_done() {
            break;
        }
        tool.iterate(Some(Duration::ZERO)).unwrap();
    }
    assert!(p.is_done(), "the flow waits after a clean close");
    let mut got = String::new();
    client.read_to_string(&mut got).unwrap();
    assert_eq!(got, OK_CLOSE);
}

// -- Expect: 100-continue (RFC 9110 §10.1.1) --

const CONTINUE: &str = "HTTP/1.1 100 Continue\r\n\r\n";

#[test]
fn a_client_expecting_100_continue_gets_it_before_sending_the_body() {
    let head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
    let f = feed([&head[..], b"hello"]);
    assert!(!f.close);
    assert_eq!(f.text, format!("{CONTINUE}{NOT_FOUND}"));
    assert!(f.left.is_empty());
    // Arriving a byte at a time, the interim answer is still sent once.
    let mut whole = head.to_vec();
    whole.extend_from_slice(b"hello");
    let f = feed(whole.chunks(1));
    assert_eq!(f.text, format!("{CONTINUE}{NOT_FOUND}"));
}

#[test]
fn a_100_continue_keeps_its_place_after_earlier_answers() {
    let head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\
        POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nexpect:  100-Continue \r\n\r\n";
    let f = feed([&head[..], b"ok", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]);
    assert_eq!(f.text, format!("{OK}{CONTINUE}{NOT_FOUND}{OK}"));
}

#[test]
fn no_100_continue_when_it_is_not_needed() {
    for req in [
        // The body came with the head.
        &b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nok"[..],
        // No body.
        b"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
        // HTTP/1.0 clients' expectations are ignored.
        b"POST / HTTP/1.0\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
        // Another expectation.
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: something\r\n\r\n",
    ] {
        let (_, text, _) = answer_leaving(req);
        assert!(
            !text.contains("100 Continue"),
            "{}",
            String::from_utf8_lossy(req)
        );
    }
}

#[test]
fn a_refused_head_request_gets_no_body() {
    let req = b"HEAD / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (close, text) = answer(req);
    assert!(close);
    assert_eq!(
        text,
        NOT_IMPLEMENTED
            .strip_suffix("no transfer codings\n")
            .unwrap()
    );
}

/// With an idle limit, a client that sends half a head and then nothing
/// is let go quietly: the flow ends without an error, the client reads the
/// end of the stream, and nothing is left on the loop. (Without a limit it
/// held the connection for good.)
#[test]
fn an_idle_client_is_let_go_with_an_idle_limit() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = tcp::pair();
    client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let idle = Some(Duration::from_millis(100));
    let p = http::connection(conn.take().unwrap(), idle).promise::<()>(&mut tool);
    run_within(&mut tool, &p, Duration::from_secs(30));
    tool.block_on(p).unwrap();
    let mut got = String::new();
    client.read_to_string(&mut got).unwrap();
    assert_eq!(got, "");
    let st = tool.stats();
    assert_eq!((st.io, st.flows, st.timers), (0, 0, 0), "{st:?}");
}
