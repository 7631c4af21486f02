//! [`ToolHandle`]: post work to a loop from any thread.

use crate::args::FromArgs;
use crate::steps::message::FlowMsg;
use crate::steps::model::AsyncSteps;
use crate::steps::promise::{Completion, Promise};
use crate::steps::scheduler::Scheduler;
use crate::tool::{Inbox, Msg};
use std::sync::Arc;
use std::time::Duration;

/// A `Send + Sync + Clone` handle of one loop. Everything it does is queued in
/// the loop's inbox and never blocks the caller.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, AsyncTool};
/// let mut tool = AsyncTool::new()?;
/// let h = tool.handle();
/// let p = std::thread::spawn(move || {
///     let mut root = AsyncSteps::new();
///     root.add(|s, ()| s.success((9u32,)));
///     h.promise::<(u32,)>(root)
/// }).join().unwrap();
/// assert_eq!(tool.block_on(p).unwrap().0, 9);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct ToolHandle {
    pub(crate) inbox: Arc<Inbox<Scheduler>>,
}

impl std::fmt::Debug for ToolHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHandle").finish_non_exhaustive()
    }
}

impl ToolHandle {
    /// Runs `f` on the loop.
    pub fn call(&self, f: impl FnOnce(&mut Scheduler) + Send + 'static) {
        self.inbox.send(Msg::Call(Box::new(f)));
    }

    /// Runs `f` on the loop after `delay` (spec `deferred` on a foreign
    /// loop); never blocks. The timer is set when the loop receives the
    /// message, so the delay counts from then.
    ///
    /// ```
    /// use futoin_asyncsteps::AsyncTool;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let (h, thread) = AsyncTool::spawn("timer-loop")?;
    /// let (tx, rx) = mpsc::channel();
    /// h.deferred(Duration::from_millis(2), move |_| tx.send("late").unwrap());
    /// assert_eq!(rx.recv().unwrap(), "late");
    /// h.stop();
    /// thread.join().unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn deferred(&self, delay: Duration, f: impl FnOnce(&mut Scheduler) + Send + 'static) {
        self.call(move |s| {
            s.deferred(delay, f);
        });
    }

    /// Starts a flow on the loop; unhandled errors go to its hook.
    pub fn execute(&self, root: AsyncSteps) {
        self.inbox
            .send(FlowMsg::Execute(Box::new(root), None).into_msg());
    }

    /// Starts a flow on the loop and returns its result.
    pub fn promise<T: FromArgs>(&self, root: AsyncSteps) -> Promise<T> {
        let c = Completion::new(Some(self.inbox.clone()));
        self.inbox
            .send(FlowMsg::Execute(Box::new(root), Some(c.clone())).into_msg());
        Promise::new(c)
    }

    /// Makes a loop in [`run`](crate::AsyncTool::run) mode return.
    pub fn stop(&self) {
        self.inbox.send(Msg::Stop);
    }

    /// True on the loop's own thread.
    pub fn is_same_thread(&self) -> bool {
        self.inbox.is_same_thread()
    }
}
