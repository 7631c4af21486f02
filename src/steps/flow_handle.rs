//! [`FlowHandle`]: cancel a started flow from any thread.

use crate::steps::message::FlowMsg;
use crate::steps::scheduler::{FlowKey, Scheduler};
use crate::tool::{registry, Inbox};
use crate::util::thread::thread_mark;

/// A light handle of a started root flow: cancel it from any thread.
///
/// It does not keep the flow or its loop alive, and making or dropping
/// one costs no atomic operation (it names its loop by id, see
/// `cancel`): a flow started and left to run pays nothing for it.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| { s.wait_external(); Ok(()) });
/// let h = root.execute(&mut tool);
/// tool.run_all();
/// assert_eq!(tool.stats().flows, 1);
/// h.cancel();
/// tool.run_all();
/// assert_eq!(tool.stats().flows, 0);
/// ```
#[derive(Clone)]
pub struct FlowHandle {
    /// The loop's `Inbox::id` (looked up in `tool::registry`).
    pub(crate) loop_id: u64,
    /// The loop's owner thread (`Inbox::owner_mark`).
    pub(crate) thread_mark: usize,
    pub(crate) key: FlowKey,
}

impl std::fmt::Debug for FlowHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowHandle").finish_non_exhaustive()
    }
}

impl FlowHandle {
    /// Cancels the flow (spec root `cancel()`): on its next turn its cancel
    /// callbacks run innermost first and it ends. It does not wait for
    /// that. A flow that has ended, or whose loop is gone, is left as it
    /// is.
    ///
    /// The loop is found through a process-wide table of live loops, read
    /// under a read lock that is written only while a loop is made or
    /// dropped.
    pub fn cancel(&self) {
        if let Some(inbox) = registry::lookup::<Inbox<Scheduler>>(self.loop_id) {
            inbox.send(FlowMsg::Cancel(self.key).into_msg());
        }
    }

    /// True on the flow's loop thread.
    pub fn is_same_thread(&self) -> bool {
        self.thread_mark == thread_mark()
    }
}
