//! The event loop (spec 2.6 AsyncTool): the [`Scheduler`](scheduler::Scheduler)
//! core, the mio-driven [`AsyncTool`](async_tool::AsyncTool), and
//! [`ToolHandle`](handle::ToolHandle) for other threads.

pub(crate) mod async_tool;
pub(crate) mod handle;
pub(crate) mod handshake;
pub(crate) mod prefetch;
pub(crate) mod registry;
pub(crate) mod scheduler;
pub(crate) mod shared;
pub(crate) mod timers;
