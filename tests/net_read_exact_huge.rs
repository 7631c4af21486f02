//! `net::read_exact` with a length far beyond any memory (a length prefix
//! from a peer, say) reads as the bytes come: the peer's early close is
//! the usual `CommError`, and the process does not abort on an
//! allocation. A file of its own: an abort would end every test beside it.

#[path = "common/tcp.rs"]
mod tcp;

use futoin_asyncsteps::io::net;
use futoin_asyncsteps::{error::codes, AsyncTool};
use std::io::Write;
use std::time::Duration;
use tcp::{conn_flow, pair};

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
