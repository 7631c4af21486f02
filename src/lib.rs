//! # futoin-asyncsteps
//!
//! [FutoIn AsyncSteps (FTN12)](https://futoin.org/docs/asyncsteps/) for Rust:
//! asynchronous program flows built from *steps*, run by an event loop
//! ([`AsyncTool`]) with one mio reactor per thread.
//!
//! A flow is a root [`AsyncSteps`]. Each step is a callback that gets the
//! execution API ([`Step`]) and the previous step's result; it completes by
//! returning (implicit success), by [`Step::success`], by returning an
//! error, by adding sub-steps, or by waiting for an external event.
//! Error handlers work like `try`/`catch` across steps, timeouts and cancel
//! callbacks cover whole sub-trees, and parallel steps and loops are steps too.
//!
//! ```
//! use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool};
//! use std::time::Duration;
//!
//! let mut tool = AsyncTool::new()?;
//! let mut root = AsyncSteps::new();
//! root.add_catch(
//!     |s, ()| {
//!         // Wait for something that never comes, with a time limit.
//!         s.set_timeout(Duration::from_millis(5));
//!         Ok(())
//!     },
//!     |s, e| {
//!         assert_eq!(e.code(), codes::TIMEOUT);
//!         s.success(("recovered".to_string(),))
//!     },
//! );
//! root.add(|s, (msg,): (String,)| s.success((msg.len(),)));
//!
//! let p = root.promise(&mut tool);
//! let (len,): (usize,) = tool.block_on(p)?;
//! assert_eq!(len, 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See `README.md` for the table of FTN12 names and `docs/architecture.md`
//! for how the engine works.

#![warn(missing_docs)]

mod args;
pub mod cabi;
pub mod error;
pub mod io;
pub mod runtime;
mod state;
mod steps;
pub mod sync;
mod testing;
mod tool;
mod util;

pub use args::{ArgValue, Args, CustomValue, FromArgs, IntoArgs, Value};
pub use error::step_error::{Error, StepResult};
pub use state::State;
pub use steps::async_tool::AsyncTool;
pub use steps::external::ExternalHandle;
pub use steps::flow_handle::FlowHandle;
pub use steps::loops::{LoopItems, Pairs};
pub use steps::model::{AsyncSteps, ModelParallel};
pub use steps::parallel::Parallel;
pub use steps::promise::Promise;
pub use steps::scheduler::{Scheduler, Stats};
pub use steps::step::{StackRef, Step};
pub use steps::take_once::TakeOnce;
pub use steps::tool_handle::ToolHandle;
pub use testing::TestTool;
pub use tool::TaskHandle;

/// The README's code blocks, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
