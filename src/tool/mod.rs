//! The event loop (spec 2.6 AsyncTool): [`Scheduler`] core, the mio-driven
//! [`AsyncTool`], and [`ToolHandle`] for other threads.

pub mod async_tool;
pub mod handle;
pub mod scheduler;
pub(crate) mod shared;
