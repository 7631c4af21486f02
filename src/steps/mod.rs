//! The engine: flows and their steps, levels, parallel steps and loops;
//! the per-loop [`Scheduler`](scheduler::Scheduler) on top of the loop
//! core; how a waiting step is resumed (external handles, promises,
//! futures, the inbox messages that carry them); and the extension points
//! the `sync` and `io` layers plug into (a [`Hold`](hold::Hold), an
//! [`IoWait`](io_wait::IoWait)).

pub(crate) mod async_tool;
pub(crate) mod await_box;
pub(crate) mod catch;
pub(crate) mod def;
pub(crate) mod external;
pub(crate) mod flow;
pub(crate) mod flow_handle;
pub(crate) mod frame;
pub(crate) mod future_wake;
pub(crate) mod hold;
pub(crate) mod inline;
pub(crate) mod io_wait;
pub(crate) mod loop_iter;
pub(crate) mod loops;
pub(crate) mod message;
pub(crate) mod model;
pub(crate) mod parallel;
pub(crate) mod promise;
pub(crate) mod scheduler;
pub(crate) mod step;
pub(crate) mod take_once;
pub(crate) mod tool_handle;
