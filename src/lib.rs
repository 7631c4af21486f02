//! # futoin-asyncsteps
//!
//! [FutoIn AsyncSteps (FTN12)](https://futoin.org/docs/asyncsteps/) for Rust:
//! asynchronous program flows built from *steps*, run by event loops with
//! one mio reactor per thread.
//!
//! ## Flows and steps
//!
//! A *flow* starts as a root [`AsyncSteps`]: a list of steps and an
//! initial [`State`], built before it runs (a model: it can be cloned and
//! run again). Each step is a callback that gets the execution API
//! ([`Step`]) and the previous step's result as typed args (a tuple of up
//! to four [`ArgValue`]s, see [`FromArgs`]). A step completes in exactly
//! one way:
//!
//! - it returns `Ok(())` having done nothing else: *implicit success*,
//!   the next step gets no args;
//! - it calls [`Step::success`] with result args for the next step;
//! - it returns an [`Error`] ([`Step::error`] builds one, `?` works): the
//!   error unwinds to the nearest handler;
//! - it adds sub-steps ([`Step::add`]); they run after it returns, and the
//!   last one's result becomes its result;
//! - it waits for an external event: [`Step::wait_external`] gives an
//!   [`ExternalHandle`] that any thread completes, [`Step::set_timeout`]
//!   limits the wait, [`Step::set_cancel`] undoes what the step started.
//!
//! ## Levels and error handlers
//!
//! A step's sub-steps form a *level* below it. A step added with
//! [`add_catch`](Step::add_catch) has an error handler that catches what
//! its level and every level below raise, like `try`/`catch` across
//! callbacks: the handler recovers with `success`, replaces the error,
//! adds steps, or lets it go on up. A timeout or a cancel covers a whole
//! sub-tree: cancel callbacks run innermost first. The flow's [`State`]
//! records `error_info`, `last_exception` and `async_stack` for the
//! handlers.
//!
//! ## Parallel steps and loops
//!
//! [`parallel`](Step::parallel) adds a step whose branches all start
//! together and whose first error cancels the others.
//! [`loop_`](Step::loop_), [`repeat`](Step::repeat) and
//! [`for_each`](Step::for_each) are steps whose body runs again and again,
//! with [`break_loop`](Step::break_loop) and
//! [`continue_loop`](Step::continue_loop) (and labels to reach an outer
//! loop).
//!
//! ## Event loops: where flows run
//!
//! A flow runs on one event loop and never leaves it, so the engine takes
//! no locks. [`AsyncTool`] is one loop on the calling thread (drive it with
//! `block_on`, `run_until_idle`, `iterate`, or give it a thread with
//! `AsyncTool::spawn`); its [`Scheduler`] is what steps reach with
//! [`Step::tool`] (immediate and deferred callbacks). [`TestTool`] is the
//! same loop on a virtual clock, for deterministic tests of time.
//! [`runtime::Runtime`] runs one loop per core and places each flow on one
//! of them. Another thread reaches a flow only through its loop's inbox:
//! an [`ExternalHandle`], a [`Promise`] (the flow's result: a `Future`, a
//! blocking `wait`, a cancel), a [`FlowHandle`], a [`ToolHandle`].
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
//! ## Synchronization, I/O, the C interface
//!
//! - [`sync`]: [`sync::Mutex`], [`sync::Throttle`] and [`sync::Limiter`]
//!   guard a step ([`Step::sync`]) for flows on any loop at once; a flow
//!   that has to wait parks its step, and no thread blocks.
//! - [`io`]: [`Step::wait_io`] waits, as a step, until a `mio` source the
//!   flow keeps on its stack is ready; [`io::net`] has TCP accept, read,
//!   write and connect as steps, and `serve_stream` for a server's
//!   connections.
//! - [`cabi`]: the FTN12 binary interface as a C ABI
//!   (`include/futoin_asyncsteps.h`), and `cabi::wrap` for Rust steps in a
//!   flow of another implementation.
//!
//! `docs/architecture.md` in the repository explains how the engine works
//! inside, layer by layer.
//!
//! ## FTN12 names in Rust
//!
#![doc = include_str!("../docs/ftn12-names.md")]
#![warn(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

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

pub use args::{ArgValue, Args, CustomValue, FromArgs, IntoArgs, SmallValue, Value};
pub use error::step_error::{Error, StepResult};
pub use error::WithCode;
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

#[cfg(test)]
mod readme {
    /// The crate docs include the name table from its own file; the README
    /// must hold the same text, so the two cannot drift apart.
    #[test]
    fn the_readme_holds_the_ftn12_name_table_of_the_crate_docs() {
        let names = include_str!("../docs/ftn12-names.md");
        let readme = include_str!("../README.md");
        assert!(
            readme.contains(&format!("## FTN12 names in Rust\n\n{names}")),
            "README.md's section \"FTN12 names in Rust\" differs from docs/ftn12-names.md"
        );
    }
}
