//! The event loop (spec 2.6 AsyncTool): the [`Scheduler`](scheduler::Scheduler)
//! core, the mio-driven [`AsyncTool`](async_tool::AsyncTool), and
//! [`ToolHandle`](handle::ToolHandle) for other threads.

pub(crate) mod async_tool;
pub(crate) mod handle;
pub(crate) mod handshake;
pub(crate) mod registry;
pub(crate) mod scheduler;
pub(crate) mod shared;
pub(crate) mod timers;

use crate::error::Error;
use crate::util::panic::{message, Payload};

/// Turns a panic payload into an `InternalError` saying where it happened
/// (`what`); the payload is dropped here, safely.
pub(crate) fn panic_error(what: &str, p: Payload) -> Error {
    Error::internal(format!("panic in {what}: {}", message(p)))
}
