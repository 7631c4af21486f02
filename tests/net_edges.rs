//! Edge cases of the TCP helpers (`io::net`) and of `wait_io`: operations
//! that need no I/O complete at once whatever the socket's readiness, and
//! a source replaced in place on the stack is waited on as itself.

#[path = "common/tcp.rs"]
mod tcp;

use futoin_asyncsteps::io::{mio::Interest, net, Ready};
use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool};
use std::io::{Read, Write};
use std::time::Duration;
use tcp::{conn_flow, pair};

fn assert_clean(tool: &AsyncTool) {
    let st = tool.stats();
    assert_eq!((st.io, st.flows), (0, 0), "{st:?}");
}

#[test]
fn read_exact_zero_after_a_short_read() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, move |s, c| {
        s.set_timeout(Duration::from_millis(500));
        net::read_some(s, c, 64);
        s.add(move |s, (_,): (Vec<u8>,)| {
            net::read_exact(s, c, 0);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    client.write_all(b"hdr").unwrap();
    let r = tool
        .block_on(p)
        .map(|v| v.0)
        .map_err(|e| e.code().to_owned());
    assert_eq!(r, Ok(vec![]));
    assert_clean(&tool);
}

#[test]
fn read_exact_zero_on_a_closed_stream_is_empty() {
    let mut tool = AsyncTool::new().unwrap();
    let (client, conn) = pair();
    drop(client);
    let root = conn_flow(conn, move |s, c| {
        net::read_exact(s, c, 0);
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, Vec::<u8>::new());
    assert_clean(&tool);
}

#[test]
fn write_all_empty_after_a_timed_out_write() {
    let mut tool = AsyncTool::new().unwrap();
    let (_client, conn) = pair(); // never reads
    let root = conn_flow(conn, move |s, c| {
        s.add(move |s, ()| s.wait_io(c, Interest::WRITABLE));
        s.add_catch(
            move |s, _: (Ready,)| {
                s.set_timeout(Duration::from_millis(200));
                net::write_all(s, c, vec![7u8; 64 << 20]);
                Ok(())
            },
            |s, _| s.success(()),
        );
        s.add(move |s, ()| {
            s.set_timeout(Duration::from_millis(500));
            net::write_all(s, c, Vec::new());
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).map_err(|e| e.code().to_owned()), Ok(()));
    assert_clean(&tool);
}

#[test]
fn read_exact_grows_its_buffer_across_many_reads() {
    // More than the first allocation, in pieces: every byte in order.
    let n = (1 << 20) + 12_345;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, move |s, c| {
        s.set_timeout(Duration::from_secs(10)); // fails, not hangs
        net::read_exact(s, c, n);
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        for piece in sent.chunks(100_000) {
            client.write_all(piece).unwrap();
        }
        client
    });
    let got = tool.block_on(p).unwrap().0;
    assert_eq!((got.len(), got == data), (n, true));
    drop(writer.join().unwrap());
    assert_clean(&tool);
}

#[test]
fn a_source_replaced_in_place_is_registered_on_its_next_wait() {
    let mut tool = AsyncTool::new().unwrap();
    let (_c1, conn1) = pair();
    let (_c2, conn2) = pair();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.set_timeout(Duration::from_millis(500));
        let c = s.stack(conn1.take()?);
        s.add(move |s, ()| s.wait_io(c, Interest::WRITABLE));
        s.add(move |s, _: (Ready,)| {
            *s.stack_get(c)? = conn2.take()?;
            Ok(())
        });
        s.add(move |s, ()| s.wait_io(c, Interest::WRITABLE));
        Ok(())
    });
    let p = root.promise::<(Ready,)>(&mut tool);
    let r = tool.block_on(p).map(|(r,)| r.writable);
    assert_eq!(r.map_err(|e| e.code().to_owned()), Ok(true));
    assert_clean(&tool);
}

#[test]
fn a_replaced_socket_gets_its_own_data_and_the_helpers_go_on() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut c1, conn1) = pair();
    let (mut c2, conn2) = pair();
    c1.write_all(b"one").unwrap();
    c2.write_all(b"two").unwrap();
    let root = conn_flow(conn1, move |s, c| {
        s.set_timeout(Duration::from_secs(2)); // fails, not hangs
        s.add(move |s, ()| s.wait_io(c, Interest::WRITABLE)); // registers it
                                                              // A short read: the first socket is known to be drained.
        s.add(move |s, _: (Ready,)| {
            net::read_some(s, c, 64);
            Ok(())
        });
        s.add(move |s, (first,): (Vec<u8>,)| {
            assert_eq!(first, b"one");
            *s.stack_get(c)? = conn2.take()?;
            net::read_some(s, c, 64);
            Ok(())
        });
        s.add(move |s, (second,): (Vec<u8>,)| {
            assert_eq!(second, b"two");
            net::write_all(s, c, b"reply".to_vec());
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    let mut reply = [0u8; 5];
    c2.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"reply");
    assert_clean(&tool);
}

#[test]
fn a_source_replaced_while_another_step_waits_on_it_is_an_internal_error() {
    let mut tool = AsyncTool::new().unwrap();
    let (_c1, conn1) = pair();
    let (_c2, conn2) = pair();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.set_timeout(Duration::from_secs(10)); // fails, not hangs
        let c = s.stack(conn1.take()?);
        s.parallel()
            // Never readable: the client does not write.
            .add(move |s, ()| s.wait_io(c, Interest::READABLE))
            .add(move |s, ()| {
                // Runs after the sibling started waiting.
                *s.stack_get(c)? = conn2.take()?;
                s.add(move |s, ()| s.wait_io(c, Interest::WRITABLE));
                Ok(())
            });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR, "{:?}", e.info());
    assert!(
        e.info().is_some_and(|i| i.contains("replaced")),
        "{:?}",
        e.info()
    );
    assert_clean(&tool);
}

/// An ICMP "port unreachable" sets a UDP socket's error once; `recv`
/// reports and clears it. The next wait must sleep until a real event
/// (here: time out), not return at once with the old error for good.
#[test]
fn a_passing_socket_error_answers_one_wait_only() {
    use futoin_asyncsteps::io::mio;
    use futoin_asyncsteps::TakeOnce;
    let mut tool = AsyncTool::new().unwrap();
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(dead).unwrap();
    sock.set_nonblocking(true).unwrap();
    let sock = TakeOnce::new(mio::net::UdpSocket::from_std(sock));

    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let u = s.stack(sock.take()?);
        s.stack_get(u)?.send(b"x").unwrap();
        s.add(move |s, ()| s.wait_io(u, Interest::READABLE));
        s.add(move |s, (r,): (Ready,)| {
            assert!(r.error, "{r:?}");
            let mut b = [0u8; 8];
            let e = s.stack_get(u)?.recv(&mut b).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
            Ok(())
        });
        s.add(move |s, ()| {
            s.set_timeout(Duration::from_millis(200));
            s.wait_io(u, Interest::READABLE)
        });
        s.add(|_, (r,): (Ready,)| -> futoin_asyncsteps::StepResult {
            panic!("the second wait returned at once with {r:?}")
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::TIMEOUT, "{e:?}");
    assert_clean(&tool);
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
