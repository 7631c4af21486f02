//! [`FutureWake`]: the waker of a future a step awaits.

use crate::steps::message::FlowMsg;
use crate::steps::scheduler::{FlowKey, Scheduler};
use crate::tool::Inbox;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Wake;

/// Wakes an awaiting step through its loop's inbox.
pub(crate) struct FutureWake {
    inbox: Arc<Inbox<Scheduler>>,
    flow: FlowKey,
    strand: u32,
    seq: u32,
    queued: AtomicBool,
}

impl Wake for FutureWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.inbox.send(
                FlowMsg::Poll {
                    flow: self.flow,
                    strand: self.strand,
                    seq: self.seq,
                }
                .into_msg(),
            );
        }
    }
}

impl FutureWake {
    pub(crate) fn new(
        inbox: Arc<Inbox<Scheduler>>,
        flow: FlowKey,
        strand: u32,
        seq: u32,
    ) -> Arc<Self> {
        Arc::new(FutureWake {
            inbox,
            flow,
            strand,
            seq,
            queued: AtomicBool::new(false),
        })
    }

    /// Allows the next wake to queue a poll again; called right before polling.
    pub(crate) fn rearm(&self) {
        self.queued.store(false, Ordering::Release);
    }
}
