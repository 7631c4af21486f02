//! Look-ahead over the loop's queue of fired timers: while one is handled,
//! the flows of the next few are fetched into the cache in stages (see
//! `tool::prefetch`). A flow whose timeout fires has waited for
//! milliseconds and is cold; reaching its step takes a chain of dependent
//! loads (task slot, flow slot, flow, frame buffer, what the frame points
//! to).
//! Every stage goes through the checked slot lookups, so a stale entry
//! costs a lookup and nothing else.

use super::{Entry, FlowKey, Scheduler, Task};
use crate::steps::flow::Flow;
use crate::util::prefetch::prefetch;

/// How far ahead each stage looks: the flow object first, then its current
/// frame and state, then what the frame points to. Each stage's loads find
/// the lines the stage before asked for.
const FAR: usize = 6;
const MID: usize = 3;
const NEAR: usize = 1;

impl Scheduler {
    #[inline]
    fn flow_ref(&self, key: FlowKey) -> Option<&Flow> {
        self.flows.get(key)?.as_deref()
    }

    /// The flow whose timeout the queued entry at `i` fires, if it does.
    #[inline]
    fn timeout_at(&self, i: usize) -> Option<&Flow> {
        let Entry::Task(h) = *self.queue.get(i)? else {
            return None;
        };
        match self.tasks.get(h)?.task {
            Task::Timeout { flow, .. } => self.flow_ref(flow),
            Task::User(_) => None,
        }
    }

    /// Fetches the parts of the flows whose timeouts are queued just
    /// behind the front entry. Only while a batch of fired timers is
    /// queued: a lone entry has nothing to overlap, and other entries are
    /// left alone because they are mostly warm (a flow that was just
    /// started or just ran), where the stages would cost about 80
    /// instructions an entry for nothing.
    #[inline]
    pub(super) fn look_ahead(&self) {
        let Some(f) = self.timeout_at(FAR) else {
            return; // fewer entries, a flow, a user callback or a cancelled one
        };
        prefetch(f, 3);
        if let Some(f) = self.timeout_at(MID) {
            f.prefetch_frame();
        }
        if let Some(f) = self.timeout_at(NEAR) {
            f.prefetch_step();
        }
    }
}
