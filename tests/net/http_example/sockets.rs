//! The HTTP example's connection flow on real loopback sockets:
//! pipelined requests, refusals that close (the client reads the whole
//! answer, then the end of the stream, not a reset), clients let go or
//! cut off, an idle limit, a close that lingers while a pipelined request
//! is still unread, and the command line's `--idle-timeout` values.

use super::*;
use crate::{http, serve, tcp};
use futoin_asyncsteps::{AsyncTool, Promise};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

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

/// A connected pair whose server side takes a few MiB in its receive
/// queue, so that a client can queue that much before the server reads.
/// The server side is left blocking, for [`wait_queued`].
fn roomy_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket2::SockRef::from(&l)
        .set_recv_buffer_size(4 << 20)
        .unwrap();
    let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    socket2::SockRef::from(&client)
        .set_send_buffer_size(4 << 20)
        .unwrap();
    // Linux reports twice the size asked for, clamped by the host's
    // `net.core.rmem_max`.
    let room = socket2::SockRef::from(&l).recv_buffer_size().unwrap();
    assert!(
        room >= 2 << 20,
        "the test queues 256 KiB unread: it needs net.core.rmem_max of at \
         least 1 MiB (receive buffer {room} B)"
    );
    let (server, _) = l.accept().unwrap();
    (client, server)
}

/// Blocks until `n` bytes the client sent are in the server's receive
/// queue (a peek that waits for all of them), so that what one read of
/// the server gets is known.
fn wait_queued(server: &std::net::TcpStream, n: usize) {
    server
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); n];
    let k = socket2::SockRef::from(server)
        .recv_with_flags(&mut buf, libc::MSG_PEEK | libc::MSG_WAITALL)
        .expect("the request queued within 20 s");
    assert_eq!(k, n);
}

/// A request that asks to close, exactly as long as the server's reads of
/// one turn (16 reads of 16 KiB), followed by another request still
/// unread in the socket: the connection closes in stages, so the client
/// reads the answer and then the end of the stream, not a reset.
#[test]
fn a_close_with_a_pipelined_request_still_unread_lingers() {
    const TURN: usize = 16 * 16 * 1024;
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, server) = roomy_pair();
    let head = |n: usize| {
        format!("POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {n:06}\r\n\r\n")
    };
    let body = TURN - head(0).len();
    let mut request = head(body).into_bytes();
    request.resize(TURN, b'x');
    request.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let total = request.len();
    let mut sender = client.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        sender.write_all(&request)?;
        sender.shutdown(std::net::Shutdown::Write)
    });
    wait_queued(&server, total);
    writer.join().unwrap().unwrap();
    server.set_nonblocking(true).unwrap();
    let conn = futoin_asyncsteps::io::mio::net::TcpStream::from_std(server);
    let p = http::connection(conn, None).promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    let mut got = Vec::new();
    let read = client.read_to_end(&mut got);
    let text = String::from_utf8(got).unwrap();
    assert!(read.is_ok(), "{read:?} after {text:?}");
    assert_eq!(
        text,
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\
         Connection: close\r\n\r\nnot found\n"
    );
    let st = tool.stats();
    assert_eq!((st.io, st.flows, st.timers), (0, 0, 0), "{st:?}");
}

/// `--idle-timeout=SECS` takes seconds from a nanosecond to a day; a value
/// that would make a zero limit (every wait failing at once) is refused.
#[test]
fn idle_timeout_values() {
    assert_eq!(serve::parse_idle("1.5"), Ok(Duration::from_millis(1500)));
    assert_eq!(serve::parse_idle("1e-9"), Ok(Duration::from_nanos(1)));
    assert_eq!(serve::parse_idle("86400"), Ok(Duration::from_secs(86_400)));
    for bad in ["0", "1e-10", "-1", "86400.5", "inf", "NaN", "", "5s"] {
        assert_eq!(
            serve::parse_idle(bad),
            Err(format!(
                "--idle-timeout wants seconds, from 0.000000001 to 86400; got {bad:?}"
            )),
            "{bad}"
        );
    }
}

/// Steps and flow activations of one keep-alive connection of the
/// example's HTTP flow answering `requests` `GET /`, one at a time.
fn keep_alive_engine_work(requests: usize) -> (u64, u64) {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = tcp::pair();
    let before = tool.stats();
    let p = http::connection(conn.take().unwrap(), None).promise::<()>(&mut tool);
    let peer = std::thread::spawn(move || {
        let mut answer = vec![0u8; OK.len()];
        for _ in 0..requests {
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            client.read_exact(&mut answer).unwrap();
            assert_eq!(answer, OK.as_bytes());
        }
        // Closing ends the connection's flow.
    });
    tool.block_on(p).unwrap();
    peer.join().unwrap();
    let after = tool.stats();
    (
        after.steps - before.steps,
        after.activations - before.activations,
    )
}

/// A keep-alive request costs what the protocol needs: one step (parse,
/// answer, write) in one activation (the socket became readable).
/// Counted as the difference between connections of 200 and 100
/// requests, so the connection's start and close cancel out.
#[test]
fn a_keep_alive_request_is_one_step_in_one_activation() {
    tcp::assert_one_step_per_round_trip(keep_alive_engine_work(100), keep_alive_engine_work(200));
}
