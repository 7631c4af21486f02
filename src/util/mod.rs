//! Small helpers every layer uses: dropping values whose `Drop` may panic,
//! cache prefetch hints, values kept in place in a slot, taking from
//! crossbeam queues, telling threads apart. Nothing here uses the rest of the crate.

pub(crate) mod panic;
pub(crate) mod prefetch;
pub(crate) mod slot;
pub(crate) mod steal;
pub(crate) mod thread;
