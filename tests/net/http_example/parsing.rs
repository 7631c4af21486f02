//! The HTTP example's request parsing, fed bytes without sockets:
//! framing, `Host`, `Connection`, the head limit, input arriving in
//! pieces, `Expect: 100-continue` and refusals of `HEAD`.

use super::*;

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
