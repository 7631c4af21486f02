//! The loops that run flows (spec 2.6): `AsyncTool` on real time and mio,
//! `TestTool` on virtual time, and their handles. Immediates and deferred
//! callbacks, cancel, how one pass or turn runs its messages, handles and
//! promises used from other threads and other loops.

#[path = "../common/mod.rs"]
mod common;

mod async_tool;
mod handles;
mod passes;
mod test_tool;
mod turns;
