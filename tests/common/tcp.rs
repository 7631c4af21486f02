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

/// Asserts that 100 more round trips on a connection (`more`, of 200,
/// less `base`, of 100: each the steps and flow activations of a whole
/// connection, so its start and close cancel out) cost one step in one
/// activation each.
///
/// Exactly 100 each on a quiet machine. The socket's readiness is the
/// kernel's, not ours: a rare extra wake-up (a request that arrived in
/// two pieces on a loaded machine) adds one to either connection, so the
/// difference may move a little either way; two per round trip would add
/// 100. (Regression: the bound was 100..=105, and an extra wake-up in
/// the connection of 100 made the difference 99 on a busy CI machine.)
pub fn assert_one_step_per_round_trip(base: (u64, u64), more: (u64, u64)) {
    let (steps, activations) = (more.0 - base.0, more.1 - base.1);
    assert!(
        (95..=105).contains(&steps) && (95..=105).contains(&activations),
        "steps {steps}, activations {activations} for 100 round trips"
    );
}
