//! Timers and timeouts (spec 1.4, 2.6): a step's timeout over its whole
//! subtree, replaced or cleared; many timeouts falling due in one pass;
//! and deadlines far along virtual time.

#[path = "../common/mod.rs"]
mod common;

mod batches;
mod far_deadlines;
mod timeouts;
