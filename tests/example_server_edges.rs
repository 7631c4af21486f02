//! Edge cases of the example servers' shared code: the HTTP connection
//! flow (`examples/common/http.rs`) on loopback sockets, and the command
//! line's idle limit (`examples/common/serve.rs`).

#[path = "../examples/common/http.rs"]
mod http;
#[path = "../examples/common/serve.rs"]
mod serve;

use futoin_asyncsteps::AsyncTool;
use std::io::{Read, Write};
use std::time::Duration;

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
