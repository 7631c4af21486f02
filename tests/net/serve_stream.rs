//! `net::serve_stream`, a connection served in one step per request:
//! requests split across reads, the peer closing, a reply larger than the
//! socket buffer, a failing handler, many round trips on a runtime, and
//! an idle limit (on each wait, not on the connection).

use crate::tcp::{assert_one_step_per_round_trip, conn_flow, pair};
use crate::{assert_clean, echo_rounds};
use futoin_asyncsteps::io::net;
use futoin_asyncsteps::{error::codes, runtime::Runtime, AsyncTool, Error};
use std::io::{Read, Write};
use std::time::Duration;

/// A `serve_stream` handler answering each line with its length; `quit`
/// answers `bye` and closes.
fn line_lengths(input: &mut Vec<u8>, output: &mut Vec<u8>) -> Result<net::Then, Error> {
    while let Some(end) = input.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = input.drain(..=end).collect();
        if line == b"quit\n" {
            output.extend_from_slice(b"bye\n");
            return Ok(net::Then::Close);
        }
        output.extend_from_slice(format!("{}\n", line.len() - 1).as_bytes());
    }
    Ok(net::Then::Read)
}

#[test]
fn serve_stream_answers_requests_split_across_reads_then_closes() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    // max_read 3: a line takes several reads, some without a wait between.
    let root = conn_flow(conn, |s, c| {
        net::serve_stream(s, c, 3, line_lengths);
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let talker = std::thread::spawn(move || {
        for part in [&b"hel"[..], b"lo\nfu", b"toin\n", b"quit\n"] {
            client.write_all(part).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut reply = String::new();
        client.read_to_string(&mut reply).unwrap(); // EOF: the flow closed it
        reply
    });
    tool.block_on(p).unwrap();
    // The socket closes when the flow ends (it drops with the stack).
    assert_eq!(talker.join().unwrap(), "5\n6\nbye\n");
    assert_clean(&tool);
}

#[test]
fn serve_stream_writes_the_replies_then_ends_when_the_peer_closes() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, |s, c| {
        net::serve_stream(s, c, 1024, line_lengths);
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client.write_all(b"ab\nabcd\nxyz").unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    tool.block_on(p).unwrap();
    let mut reply = String::new();
    client.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, "2\n4\n", "the partial line is dropped");
    assert_clean(&tool);
}

#[test]
fn serve_stream_holds_a_large_reply_until_the_peer_reads_it() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    const LEN: usize = 8 << 20;
    let root = conn_flow(conn, |s, c| {
        net::serve_stream(s, c, 1024, |input, output| {
            // One request: "big\n" asks for LEN bytes.
            if input.ends_with(b"\n") {
                input.clear();
                output.extend((0..LEN).map(|i| (i % 251) as u8));
            }
            Ok(net::Then::Read)
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let reader = std::thread::spawn(move || {
        client.write_all(b"big\n").unwrap();
        let mut got = Vec::with_capacity(LEN);
        let mut buf = [0u8; 65536];
        while got.len() < LEN {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0, "early EOF at {}", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        drop(client); // all read: the server sees EOF and ends
        got
    });
    tool.block_on(p).unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got.len(), LEN);
    assert!(
        got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "the bytes arrived intact and in order"
    );
    assert_clean(&tool);
}

#[test]
fn serve_stream_fails_with_the_handlers_error() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, |s, c| {
        net::serve_stream(s, c, 1024, |input, _| {
            Err(Error::with_info(
                codes::INVALID_REQUEST,
                format!("refused {} bytes", input.len()),
            ))
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client.write_all(b"hello").unwrap();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INVALID_REQUEST);
    assert_eq!(e.info(), Some("refused 5 bytes"));
    assert_clean(&tool);
}

#[test]
fn serve_stream_echoes_many_round_trips_on_a_runtime() {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .build()
        .unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, |s, c| {
        net::serve_stream(s, c, 16, |input, output| {
            output.append(input);
            Ok(net::Then::Read)
        });
        Ok(())
    });
    let p = rt.spawn::<()>(root);
    echo_rounds(
        &mut client,
        (0..1000u32).map(|i| format!("round {i:04} of 1000, more than 16 bytes")),
    );
    drop(client);
    p.wait().unwrap();
}

/// An echo served with an idle limit.
fn idle_echo(idle: Duration) -> net::ServeOptions {
    let mut opts = net::ServeOptions::default();
    opts.idle_timeout = Some(idle);
    opts
}

/// A peer that keeps talking is not cut off, however long it talks: the
/// limit is on each wait, not on the connection. (Real time: the client
/// sends six messages 600 ms apart, 3.6 s in all against a 2 s limit; the
/// gaps leave 1.4 s of slack.)
#[test]
fn an_idle_limit_lets_a_talking_peer_go_on() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, |s, c| {
        net::serve_stream_with(s, c, idle_echo(Duration::from_secs(2)), |input, output| {
            output.append(input);
            Ok(net::Then::Read)
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let talker = std::thread::spawn(move || {
        let mut buf = [0u8; 2];
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(600));
            client.write_all(b"hi").unwrap();
            client.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"hi");
        }
        // Closing ends the server's step as a success.
    });
    tool.block_on(p).unwrap();
    talker.join().unwrap();
    assert_clean(&tool);
}

/// A peer that stops reading its replies: once the socket takes no more,
/// the write waits at most the limit, then the step fails with `Timeout`.
#[test]
fn an_idle_limit_cuts_off_a_peer_that_does_not_read() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, |s, c| {
        let opts = idle_echo(Duration::from_millis(100));
        net::serve_stream_with(s, c, opts, |input, output| {
            input.clear();
            output.resize(64 << 20, b'x'); // far more than socket buffers hold
            Ok(net::Then::Read)
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    client.write_all(b"go").unwrap();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::TIMEOUT);
    assert_clean(&tool);
}

/// Steps and flow activations of a connection served by `serve_stream`
/// that echoes `rounds` round trips of 64 bytes, one at a time, from
/// start to close.
fn echo_engine_work(rounds: usize) -> (u64, u64) {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, |s, c| {
        net::serve_stream(s, c, 4096, |input, output| {
            output.append(input);
            Ok(net::Then::Read)
        });
        Ok(())
    });
    let before = tool.stats();
    let p = root.promise::<()>(&mut tool);
    let talker = std::thread::spawn(move || {
        let msg: String = "x".repeat(64);
        echo_rounds(&mut client, std::iter::repeat_n(msg, rounds));
        // Closing ends the flow.
    });
    tool.block_on(p).unwrap();
    talker.join().unwrap();
    let after = tool.stats();
    assert_clean(&tool);
    (
        after.steps - before.steps,
        after.activations - before.activations,
    )
}

/// The server path costs what the protocol needs: one echo round trip is
/// one step (read what came, answer, write) in one activation of the
/// connection's flow (its socket became readable). Counted as the
/// difference between connections of 200 and 100 round trips, so the
/// connection's start and close cancel out.
#[test]
fn an_echo_round_trip_is_one_step_in_one_activation() {
    assert_one_step_per_round_trip(echo_engine_work(100), echo_engine_work(200));
}
