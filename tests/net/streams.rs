//! The TCP helpers (`io::net`) on real loopback sockets: partial reads
//! from a slow client, a client that disconnects mid-request, a peer
//! reset, end of stream, a large write over many writable events, a read
//! timeout, cancel of a flow blocked in a read, connect failures, many
//! concurrent clients on a runtime, reads and writes of nothing (done at
//! once whatever the socket's readiness), a buffer that grows across
//! reads, and a length far beyond any memory. Registrations and flows
//! count back to zero.

use crate::tcp::{conn_flow, pair};
use crate::{assert_clean, echo_rounds};
use futoin_asyncsteps::io::{mio::Interest, net, Ready};
use futoin_asyncsteps::{error::codes, runtime::Runtime, AsyncSteps, AsyncTool, Error, TakeOnce};
use mio::net::{TcpListener, TcpStream};
use std::io::{Read, Write};
use std::time::Duration;

/// A flow that reads exactly `n` bytes from `conn` with an optional limit.
fn reader(conn: TakeOnce<TcpStream>, n: usize, limit: Option<Duration>) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        if let Some(d) = limit {
            s.set_timeout(d);
        }
        let c = s.stack(conn.take()?);
        net::read_exact(s, c, n);
        Ok(())
    });
    root
}

#[test]
fn read_exact_gathers_bytes_a_slow_client_trickles() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let p = reader(conn, 10, None).promise::<(Vec<u8>,)>(&mut tool);
    let writer = std::thread::spawn(move || {
        for b in b"0123456789" {
            client.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        client
    });
    assert_eq!(tool.block_on(p).unwrap().0, b"0123456789");
    writer.join().unwrap();
    assert_clean(&tool);
}

#[test]
fn a_client_that_leaves_mid_request_is_a_comm_error() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    client.write_all(b"abc").unwrap();
    drop(client);
    let p = reader(conn, 10, None).promise::<(Vec<u8>,)>(&mut tool);
    let e: Error = tool.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::COMM_ERROR,
            Some("read_exact: the peer closed after 3 of 10 bytes")
        )
    );
    assert_clean(&tool);
}

#[test]
fn end_of_stream_is_an_empty_read() {
    let mut tool = AsyncTool::new().unwrap();
    let (client, conn) = pair();
    drop(client);
    let root = conn_flow(conn, |s, c| {
        net::read_some(s, c, 64);
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, Vec::<u8>::new());
    assert_clean(&tool);
}

#[test]
fn a_reset_by_the_peer_is_a_comm_error() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    // Data the client never reads makes its close send a reset.
    let root = conn_flow(conn, |s, c| {
        net::write_all(s, c, b"unread".to_vec());
        s.add(move |s, ()| {
            net::read_some(s, c, 64);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    // Let the server write, then close the client with the data unread.
    while !client_has_data(&mut client) {
        tool.iterate(Some(Duration::from_millis(5))).unwrap();
    }
    drop(client);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::COMM_ERROR);
    assert!(
        e.info().is_some_and(|i| i.starts_with("read: ")),
        "{:?}",
        e.info()
    );
    assert_clean(&tool);
}

/// True once the server's bytes are in the client's receive buffer.
fn client_has_data(c: &mut std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    c.set_nonblocking(true).unwrap();
    let r = matches!(c.peek(&mut b), Ok(n) if n > 0);
    c.set_nonblocking(false).unwrap();
    r
}

#[test]
fn a_large_write_spans_many_writable_events() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    const LEN: usize = 8 << 20;
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let expect = data.clone();
    let root = conn_flow(conn, move |s, c| {
        net::write_all(s, c, data.clone());
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(LEN);
        let mut buf = [0u8; 65536];
        while got.len() < LEN {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0, "early EOF at {}", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    tool.block_on(p).unwrap();
    assert!(reader.join().unwrap() == expect, "the bytes arrived intact");
    assert_clean(&tool);
}

#[test]
fn a_read_timeout_fails_the_read_and_deregisters() {
    let mut tool = AsyncTool::new().unwrap();
    let (_client, conn) = pair();
    let p = reader(conn, 4, Some(Duration::from_millis(20))).promise::<(Vec<u8>,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_clean(&tool);
}

#[test]
fn cancel_of_a_flow_blocked_in_a_read() {
    let mut tool = AsyncTool::new().unwrap();
    let (_client, conn) = pair();
    let p = reader(conn, 4, None).promise::<(Vec<u8>,)>(&mut tool);
    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(tool.stats().io, 1);
    p.cancel();
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::CANCELED);
    assert_clean(&tool);
}

#[test]
fn connect_to_a_closed_port_is_a_connect_error() {
    let mut tool = AsyncTool::new().unwrap();
    // A port that was just free: nothing listens there.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        net::connect(s, addr, Duration::from_secs(5));
        Ok(())
    });
    let p = root.promise::<(TcpStream,)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::CONNECT_ERROR, "{:?}", e.info());
    assert!(e.info().is_some_and(|i| i.starts_with("connect: ")));
    #[cfg(target_os = "linux")]
    assert_eq!(e.info(), Some("connect: Connection refused (os error 111)"));
    assert_clean(&tool);
}

#[test]
fn many_clients_served_by_flows_spread_over_the_loops() {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .build()
        .unwrap();
    const CLIENTS: usize = 40;
    let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = TakeOnce::new(listener);
    let h = rt.handle();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    // The acceptor: one root flow per accepted connection, echoing one line.
    let mut acceptor = AsyncSteps::new();
    acceptor.add(move |s, ()| {
        let l = s.stack(listener.take()?);
        let (h, done_tx) = (h.clone(), done_tx.clone());
        s.repeat(CLIENTS, move |s, _| {
            net::accept(s, l);
            let (h, done_tx) = (h.clone(), done_tx.clone());
            s.add(move |_, (conn, _peer): (TcpStream, std::net::SocketAddr)| {
                let conn = TakeOnce::new(conn);
                let done_tx = std::sync::Arc::new(std::sync::Mutex::new(done_tx));
                let mut echo = AsyncSteps::new();
                echo.add(move |s, ()| {
                    let c = s.stack(conn.take()?);
                    net::read_exact(s, c, 8);
                    s.add(move |s, (msg,): (Vec<u8>,)| {
                        net::write_all(s, c, msg);
                        Ok(())
                    });
                    Ok(())
                });
                echo.add(move |_, ()| {
                    done_tx.lock().unwrap().send(()).unwrap();
                    Ok(())
                });
                h.execute(echo);
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let accepted = rt.spawn::<()>(acceptor);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                let msg = format!("client{i:02}");
                c.write_all(msg.as_bytes()).unwrap();
                let mut back = [0u8; 8];
                c.read_exact(&mut back).unwrap();
                assert_eq!(&back, msg.as_bytes());
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    accepted.wait().unwrap();
    for _ in 0..CLIENTS {
        done_rx.recv().unwrap();
    }
    // Each loop's own live counters, read on the loop (the published
    // `rt.stats()` lag by up to one turn).
    let live: Vec<_> = (0..rt.loops())
        .map(|i| {
            let (tx, rx) = std::sync::mpsc::channel();
            rt.loop_handle(i)
                .unwrap()
                .call(move |sched| tx.send(sched.stats()).unwrap());
            rx.recv().unwrap()
        })
        .collect();
    assert!(live.iter().all(|s| s.flows == 0), "{live:?}");
}

#[test]
fn a_read_after_a_short_read_waits_and_gets_what_came_meanwhile() {
    let mut tool = AsyncTool::new().unwrap();
    let (client, conn) = pair();
    let client = std::sync::Arc::new(std::sync::Mutex::new(client));
    client.lock().unwrap().write_all(b"a").unwrap();
    let writer = client.clone();
    let root = conn_flow(conn, move |s, c| {
        s.set_timeout(Duration::from_secs(10)); // a lost wake-up fails, not hangs
                                                // Registers the socket (writable at once).
        s.add(move |s, ()| s.wait_io(c, futoin_asyncsteps::io::mio::Interest::WRITABLE));
        // A short read: the helpers now know the socket is drained.
        s.add(move |s, _: (futoin_asyncsteps::io::Ready,)| {
            net::read_some(s, c, 64);
            Ok(())
        });
        // Data arrives while no step waits and before any poll...
        s.add(move |s, (first,): (Vec<u8>,)| {
            assert_eq!(first, b"a");
            writer.lock().unwrap().write_all(b"b").unwrap();
            // ...and the next read (which waits first) still gets it.
            net::read_some(s, c, 64);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, b"b");
    assert_clean(&tool);
}

#[test]
fn request_response_with_read_some_and_write_all_many_times() {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .build()
        .unwrap();
    let (mut client, conn) = pair();
    // Each read_some after the first short read waits before reading.
    let root = conn_flow(conn, |s, c| {
        s.loop_(move |s| {
            net::read_some(s, c, 1024);
            s.add(move |s, (data,): (Vec<u8>,)| {
                if data.is_empty() {
                    return s.break_loop();
                }
                net::write_all(s, c, data);
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let p = rt.spawn::<()>(root);
    echo_rounds(&mut client, (0..500u32).map(|i| format!("request {i:03}")));
    drop(client);
    p.wait().unwrap();
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

/// `net::read_exact` with a length far beyond any memory (a length prefix
/// from a peer, say) reads as the bytes come: the peer's early close is
/// the usual `CommError`, and the process does not abort on an
/// allocation. (This test was a binary of its own: an abort here ends
/// every test of the binary beside it.)
#[test]
fn read_exact_of_a_huge_length_ends_with_the_early_close() {
    let mut tool = AsyncTool::new().unwrap();
    let (mut client, conn) = pair();
    let root = conn_flow(conn, move |s, c| {
        s.set_timeout(Duration::from_secs(10)); // fails, not hangs
        net::read_exact(s, c, 1 << 40);
        Ok(())
    });
    let p = root.promise::<(Vec<u8>,)>(&mut tool);
    client.write_all(b"abc").unwrap();
    drop(client);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::COMM_ERROR,
            Some("read_exact: the peer closed after 3 of 1099511627776 bytes")
        )
    );
    let st = tool.stats();
    assert_eq!((st.io, st.flows), (0, 0), "{st:?}");
}
