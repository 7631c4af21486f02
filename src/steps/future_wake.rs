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

    /// A waker for step `seq` of `strand` in `flow`: `old` (a former await's
    /// waker kept with a frame's resources) readdressed when nothing else
    /// holds it any more, else a new one. A clone still alive (a future
    /// that handed its waker on, say) keeps the old address: its late wake
    /// finds no step waiting there, and is ignored.
    pub(crate) fn reuse(
        old: Option<Arc<Self>>,
        inbox: &Arc<Inbox<Scheduler>>,
        flow: FlowKey,
        strand: u32,
        seq: u32,
    ) -> Arc<Self> {
        if let Some(mut w) = old {
            if let Some(m) = Arc::get_mut(&mut w) {
                debug_assert!(Arc::ptr_eq(&m.inbox, inbox), "a waker of another loop");
                m.flow = flow;
                m.strand = strand;
                m.seq = seq;
                *m.queued.get_mut() = false;
                return w;
            }
        }
        Self::new(inbox.clone(), flow, strand, seq)
    }

    /// Allows the next wake to queue a poll again; called right before polling.
    pub(crate) fn rearm(&self) {
        self.queued.store(false, Ordering::Release);
    }
}
