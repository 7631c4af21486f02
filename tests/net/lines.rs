//! `net::read_until` and `net::read_line`: a line split over several
//! writes, several lines in one write (nothing past a delimiter is taken),
//! the end of stream before a delimiter, a line over the limit, a line
//! that is not UTF-8.

use crate::assert_clean;
use crate::tcp::{conn_flow, pair};
use futoin_asyncsteps::io::net;
use futoin_asyncsteps::{error::codes, AsyncTool};
use futoin_asyncsteps::{AsyncSteps, StackRef, Step, StepResult, TakeOnce};
use mio::net::TcpStream;
use std::io::Write;
use std::time::Duration;

/// [`conn_flow`] with a 5 s limit: a read that never ends fails the test
/// instead of hanging it.
fn limited<F>(conn: TakeOnce<TcpStream>, body: F) -> AsyncSteps
where
    F: FnOnce(&mut Step<'_>, StackRef<TcpStream>) -> StepResult + Clone + Send + 'static,
{
    conn_flow(conn, move |s, c| {
        s.set_timeout(Duration::from_secs(5));
        body(s, c)
    })
}

#[test]
fn a_line_split_over_writes_is_put_together() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = limited(conn, |s, c| {
        net::read_line(s, c, 64);
        Ok(())
    });
    let p = root.promise::<String>(&mut tool);
    client.write_all(b"hel").unwrap();
    for _ in 0..3 {
        tool.iterate(Some(Duration::ZERO)).unwrap(); // it waits for more
    }
    client.write_all(b"lo\nrest").unwrap();
    assert_eq!(tool.block_on(p).unwrap(), "hello\n");
    assert_clean(&tool);
}

#[test]
fn nothing_past_the_delimiter_is_taken() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = limited(conn, |s, c| {
        net::read_until(s, c, b';', 64);
        s.add(move |s, first: Vec<u8>| {
            net::read_exact(s, c, 3);
            s.add(move |s, rest: Vec<u8>| s.success((first, rest)));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(Vec<u8>, Vec<u8>)>(&mut tool);
    client.write_all(b"a;bcd").unwrap();
    let (first, rest) = tool.block_on(p).unwrap();
    assert_eq!(
        (first.as_slice(), rest.as_slice()),
        (&b"a;"[..], &b"bcd"[..])
    );
}

#[test]
fn the_end_of_stream_ends_the_line_short() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = limited(conn, |s, c| {
        net::read_line(s, c, 64);
        s.add(move |s, last: String| {
            net::read_line(s, c, 64);
            s.add(move |s, after: String| s.success((last, after)));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(String, String)>(&mut tool);
    client.write_all(b"no newline").unwrap();
    drop(client);
    let (last, after) = tool.block_on(p).unwrap();
    assert_eq!((last.as_str(), after.as_str()), ("no newline", ""));
}

#[test]
fn a_line_over_the_limit_and_one_not_utf8_are_errors() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = limited(conn, |s, c| {
        net::read_until(s, c, b'\n', 8);
        Ok(())
    });
    let p = root.promise::<Vec<u8>>(&mut tool);
    client.write_all(b"0123456789\n").unwrap();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::COMM_ERROR,
            Some("read_until: no delimiter in the first 8 bytes")
        )
    );

    let (mut client, conn) = pair();
    let root = limited(conn, |s, c| {
        net::read_line(s, c, 64);
        Ok(())
    });
    let p = root.promise::<String>(&mut tool);
    client.write_all(b"\xff\xfe\n").unwrap();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (codes::COMM_ERROR, Some("read_line: the line is not UTF-8"))
    );
    assert_clean(&tool);
}
