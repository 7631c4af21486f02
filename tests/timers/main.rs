//! Timers and timeouts (spec 1.4, 2.6): a step's timeout over its whole
//! subtree, replaced or cleared; many timeouts falling due in one pass;
//! deadlines far along virtual time; and `Step::sleep`.

#[path = "../common/mod.rs"]
mod common;

mod batches;
mod far_deadlines;
mod sleep;
mod timeouts;
