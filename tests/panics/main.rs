//! Panics in users' code: in callbacks, handlers, cancel callbacks and
//! loop bodies, and in the `Drop`s of values the engine holds (several at
//! once too). The flow ends with `InternalError`, every value is dropped,
//! and the loop and its other flows go on.

#[path = "../common/mod.rs"]
mod common;

mod drops;
mod in_user_code;
mod two_at_once;
