//! Edge cases of the TCP helpers (`io::net`): operations that need no I/O
//! complete at once whatever the socket's readiness.

#[path = "common/tcp.rs"]
mod tcp;

use futoin_asyncsteps::io::{net, Interest, Ready};
use futoin_asyncsteps::AsyncTool;
use std::io::Write;
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
