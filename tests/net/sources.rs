//! `wait_io` sources on the step stack: a source replaced in place is
//! waited on as itself (registered on its next wait, its own data, the
//! helpers going on), replacing one another step waits on is an internal
//! error, and a socket error that passes answers one wait only.

use crate::assert_clean;
use crate::tcp::{conn_flow, pair};
use futoin_asyncsteps::io::{mio::Interest, net, Ready};
use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool};
use std::io::{Read, Write};
use std::time::Duration;

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

/// `io::mio` has mio's OS extensions: a Unix pipe (`io::mio::unix::pipe`)
/// is a source as a socket is.
#[cfg(unix)]
#[test]
fn a_unix_pipe_from_io_mio_is_a_source() {
    use futoin_asyncsteps::io::mio::unix::pipe;
    use futoin_asyncsteps::TakeOnce;
    let mut tool = AsyncTool::new().unwrap();
    let (mut tx, rx) = pipe::new().unwrap();
    let rx = TakeOnce::new(rx);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.set_timeout(Duration::from_secs(5)); // fails, not hangs
        let r = s.stack(rx.take()?);
        s.add(move |s, ()| s.wait_io(r, Interest::READABLE));
        s.add(move |s, (ready,): (Ready,)| {
            assert!(ready.readable);
            let mut buf = [0u8; 16];
            let n = s.stack_get(r)?.read(&mut buf)?;
            s.success(buf[..n].to_vec())
        });
        Ok(())
    });
    let p = root.promise::<Vec<u8>>(&mut tool);
    tx.write_all(b"through a pipe").unwrap();
    assert_eq!(tool.block_on(p).unwrap(), b"through a pipe");
    assert_clean(&tool);
}

/// `io::FdSource`: a descriptor the source owns (here a `std` Unix
/// socket), read and written after readiness waits, closed on drop (the
/// peer reads the end of stream), or given back.
#[cfg(unix)]
#[test]
fn an_owned_descriptor_is_a_source_that_reads_writes_and_closes() {
    use futoin_asyncsteps::io::FdSource;
    use futoin_asyncsteps::TakeOnce;
    use std::os::unix::net::UnixStream;
    let mut tool = AsyncTool::new().unwrap();
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    let src = TakeOnce::new(FdSource::new(theirs));
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        s.set_timeout(Duration::from_secs(5)); // fails, not hangs
        let fd = s.stack(src.take()?);
        s.add(move |s, ()| s.wait_io(fd, Interest::READABLE));
        s.add(move |s, _: Ready| {
            let mut buf = [0u8; 16];
            let n = s.stack_get(fd)?.read(&mut buf)?;
            assert_eq!(&buf[..n], b"ping");
            s.wait_io(fd, Interest::WRITABLE)
        });
        s.add(move |s, _: Ready| {
            s.stack_get(fd)?.write_all(b"pong")?;
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    ours.write_all(b"ping").unwrap();
    tool.block_on(p).unwrap();
    let mut got = Vec::new();
    ours.read_to_end(&mut got).unwrap(); // the flow's end closed it
    assert_eq!(got, b"pong");
    assert_clean(&tool);
    // Given back, it is the same descriptor.
    let (_a, b) = UnixStream::pair().unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&b);
    let back = FdSource::new(b).into_inner();
    assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&back), raw);
}
