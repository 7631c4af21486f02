//! Network I/O on real loopback sockets: readiness as a step (`wait_io`),
//! the TCP helpers (`io::net`) and `serve_stream`, sources replaced on the
//! stack, and the HTTP example server's request handling and connections.

#[path = "../common/mod.rs"]
mod common;
#[path = "../../examples/common/http.rs"]
mod http;
#[path = "../../examples/common/serve.rs"]
mod serve;
#[path = "../common/tcp.rs"]
mod tcp;

mod http_example;
mod lines;
mod readiness;
mod serve_stream;
mod sources;
mod streams;

use futoin_asyncsteps::AsyncTool;

fn assert_clean(tool: &AsyncTool) {
    let st = tool.stats();
    assert_eq!((st.io, st.flows), (0, 0), "{st:?}");
}

/// Sends each message and expects it back, one round trip at a time.
fn echo_rounds(client: &mut std::net::TcpStream, msgs: impl Iterator<Item = String>) {
    use std::io::{Read, Write};
    for msg in msgs {
        client.write_all(msg.as_bytes()).unwrap();
        let mut back = vec![0u8; msg.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, msg.as_bytes());
    }
}
