//! [`TakeOnce`]: hands a value that is not `Clone` (a socket, a file) to a
//! root step, whose closures must be `Clone + Send`.

use crate::error::Error;
use std::sync::Arc;

/// A `Clone + Send` slot holding a value for one run of a root model.
///
/// Root steps ([`AsyncSteps::add`](crate::AsyncSteps::add)) must be
/// `Clone + Send` because a model may be cloned and run many times. A value
/// that is not `Clone`, like the connection a server flow serves, goes in a
/// `TakeOnce`; the step takes it out when it runs. Taking it a second time
/// (the model was cloned and ran again) is a clear `InternalError`.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TakeOnce, TestTool};
///
/// struct Conn(u32); // not Clone
/// let conn = TakeOnce::new(Conn(7));
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     let c = conn.take()?;
///     s.success((c.0,))
/// });
/// let mut tool = TestTool::new();
/// let twice = root.clone();
/// let p = root.promise(&mut tool);
/// assert_eq!(tool.block_on::<(u32,)>(p).unwrap().0, 7);
/// let p = twice.promise::<(u32,)>(&mut tool);
/// assert_eq!(tool.block_on(p).unwrap_err().code(), "InternalError");
/// ```
pub struct TakeOnce<T> {
    slot: Arc<parking_lot::Mutex<Option<T>>>,
}

impl<T> Clone for TakeOnce<T> {
    fn clone(&self) -> Self {
        TakeOnce {
            slot: self.slot.clone(),
        }
    }
}

impl<T> std::fmt::Debug for TakeOnce<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeOnce")
            .field("taken", &self.slot.lock().is_none())
            .finish()
    }
}

impl<T> TakeOnce<T> {
    /// Holds `value` until it is taken.
    pub fn new(value: T) -> Self {
        TakeOnce {
            slot: Arc::new(parking_lot::Mutex::new(Some(value))),
        }
    }

    /// Takes the value; `InternalError` when it was taken already.
    pub fn take(&self) -> Result<T, Error> {
        self.slot.lock().take().ok_or_else(|| {
            Error::internal("TakeOnce::take(): the value was taken already (the model ran twice?)")
        })
    }
}
