//! The event loop (spec 2.6 AsyncTool): the [`Scheduler`](scheduler::Scheduler)
//! core, the mio-driven [`AsyncTool`](async_tool::AsyncTool), and
//! [`ToolHandle`](handle::ToolHandle) for other threads.

pub mod async_tool;
pub mod handle;
pub(crate) mod handshake;
pub(crate) mod prefetch;
pub(crate) mod registry;
pub mod scheduler;
pub(crate) mod shared;
pub(crate) mod timers;
