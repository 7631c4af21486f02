//! Small helpers every layer uses: dropping values whose `Drop` may panic,
//! cache prefetch hints, telling threads apart. Nothing here knows of
//! loops, flows or errors.

pub(crate) mod panic;
pub(crate) mod prefetch;
pub(crate) mod thread;
