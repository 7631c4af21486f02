//! Loopback connections for the I/O tests (`tests/net/`).
#![allow(dead_code)] // each including test uses a part of it

use futoin_asyncsteps::{AsyncSteps, StackRef, Step, StepResult, TakeOnce};
use mio::net::TcpStream;

/// A connected pair: a blocking std client and a non-blocking mio server side.
pub fn pair() -> (std::net::TcpStream, TakeOnce<TcpStream>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (server, _) = l.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    (client, TakeOnce::new(TcpStream::from_std(server)))
}

/// A flow whose step keeps `server` on its stack and runs `body` with it.
pub fn conn_flow<F>(server: TakeOnce<TcpStream>, body: F) -> AsyncSteps
where
    F: FnOnce(&mut Step<'_>, StackRef<TcpStream>) -> StepResult + Clone + Send + 'static,
{
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let conn = s.stack(server.take()?);
        body(s, conn)
    });
    root
}
