//! Prefetch hints for a flow the loop is about to drive (see
//! `util::prefetch`): its current frame, then what that frame points to.
//! Only addresses are computed here; nothing is changed.

use super::Flow;
use crate::util::prefetch::prefetch;

impl Flow {
    /// Second stage: the flow object is in the cache; fetch the main
    /// strand's current frame and the flow's state.
    #[inline]
    pub(crate) fn prefetch_frame(&self) {
        if let Some(f) = self.main.frames.last() {
            prefetch(f, 1);
        }
        self.state.prefetch();
    }

    /// Last stage: the current frame is in the cache; fetch what it owns
    /// (its `Resources`, its error handler's closure, its wait token).
    #[inline]
    pub(crate) fn prefetch_step(&self) {
        let Some(f) = self.main.frames.last() else {
            return;
        };
        if let Some(x) = &f.resources {
            prefetch(&**x, 1);
        }
        if let Some(c) = &f.catch {
            c.prefetch();
        }
        if let Some(w) = &f.wait {
            prefetch(&**w, 1);
        }
    }
}
