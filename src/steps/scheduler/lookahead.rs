//! Look-ahead over the loop's queue of fired timeouts: while one is
//! handled, the flows of the next few are fetched into the cache in stages
//! (the loop core picks the entries, see `tool::Stage`; `util::prefetch`
//! says why). A flow whose timeout fires has waited for milliseconds and
//! is cold; reaching its step takes a chain of dependent loads (task slot,
//! flow slot, flow, frame buffer, what the frame points to). Every stage
//! goes through the checked slot lookup, so a stale entry costs a lookup
//! and nothing else.

use super::{FlowKey, Scheduler};
use crate::steps::flow::Flow;
use crate::tool::Stage;
use crate::util::prefetch::prefetch;

impl Scheduler {
    #[inline]
    fn flow_ref(&self, key: FlowKey) -> Option<&Flow> {
        self.flows.get(key)?.as_deref()
    }

    /// Fetches the part of `flow` that `stage` is for: the flow object
    /// first, then its current frame and state, then what the frame points
    /// to. Each stage's loads find the lines the stage before asked for.
    #[inline]
    pub(super) fn prefetch_timeout(&self, flow: FlowKey, stage: Stage) {
        let Some(f) = self.flow_ref(flow) else {
            return;
        };
        match stage {
            Stage::Far => prefetch(f, 3),
            Stage::Mid => f.prefetch_frame(),
            Stage::Near => f.prefetch_step(),
        }
    }
}
