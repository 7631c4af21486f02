//! The step engine (spec 1.1-1.14, 2.2): parallel steps, external
//! completion and cancel, awaited futures and promises, models, the step
//! stack, args, and how many steps one activation runs.

#[path = "../common/mod.rs"]
mod common;

mod args;
mod await_future;
mod bursts;
mod external;
mod models;
mod parallel;
mod stack;
mod user_facing;
