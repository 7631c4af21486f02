//! A flow's stake in a shared object: the extension point the `sync`
//! layer plugs into. The engine keeps a [`Hold`] in the frame of the step
//! that took it and drops it when that step ends, however it ends; what
//! dropping it gives back is the object's own business ([`Guard`]).

use crate::steps::flow::Flow;
use crate::steps::frame::{HOLDS, IN_PLACE};
use crate::steps::scheduler::Scheduler;
use std::sync::Arc;

/// What a shared object does when a flow's stake in it ends.
pub(crate) trait Guard: Send + Sync + 'static {
    /// A flow that was admitted leaves (a Mutex frees its slot).
    fn leave(&self);
    /// A flow's place in the queue was cancelled before it was granted.
    fn place_cancelled(&self);
}

/// A flow's place in a shared object's queue.
pub(crate) trait Place: Send + Sync + 'static {
    /// The place was granted: the flow is admitted.
    fn is_granted(&self) -> bool;
    /// Takes the place out of the queue; false when it was granted first
    /// (the flow was admitted and must leave instead).
    fn cancel(&self) -> bool;
}

/// A flow's stake in a shared object, kept in a step's frame so it is
/// dropped when that step ends in any way (success, error, cancel,
/// timeout, or the flow dropped at shutdown). A section run in place
/// without a frame keeps it in the loop's register until it returns (see
/// `Scheduler::section`).
pub(crate) struct Hold {
    /// Identity of the object (address of its shared core).
    pub(crate) id: usize,
    guard: Arc<dyn Guard>,
    state: HoldState,
}

/// Where a flow stands with the object.
pub(crate) enum HoldState {
    /// Not admitted yet, not queued.
    Pending,
    /// Admitted.
    Held,
    /// Queued; admitted once its place is granted.
    Queued(Arc<dyn Place>),
}

impl Hold {
    /// A stake in the object `id` behind `guard`, admitted already or not.
    pub(crate) fn new(id: usize, guard: Arc<dyn Guard>, held: bool) -> Self {
        Hold {
            id,
            guard,
            state: if held {
                HoldState::Held
            } else {
                HoldState::Pending
            },
        }
    }

    /// True when this flow is inside (a queued place counts once granted).
    pub(crate) fn is_held(&self) -> bool {
        match &self.state {
            HoldState::Pending => false,
            HoldState::Held => true,
            HoldState::Queued(n) => n.is_granted(),
        }
    }

    /// Records how the flow stands now (it got in, or queued).
    pub(crate) fn set_state(&mut self, state: HoldState) {
        self.state = state;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.state, HoldState::Pending) {
            HoldState::Pending => {}
            HoldState::Held => self.guard.leave(),
            HoldState::Queued(n) => {
                if n.cancel() {
                    self.guard.place_cancelled();
                } else {
                    self.guard.leave();
                }
            }
        }
    }
}

/// Moves the hold of a frameless section (`Scheduler::section`, and the
/// inner one of `Scheduler::section_inner`) into its step's frame, just
/// pushed on top of strand `sid`: from here on the frame holds the lock,
/// as if the section had started on it.
#[cold]
#[inline(never)]
pub(crate) fn adopt_section(sched: &mut Scheduler, flow: &mut Flow, sid: u32) {
    let Some(held) = sched.section.take() else {
        debug_assert!(false, "a frameless section without its hold");
        return;
    };
    let f = flow
        .st(sid)
        .frames
        .last_mut()
        .expect("the frame just pushed");
    let inner = sched.section_inner.take();
    f.flags |= if inner.is_some() {
        IN_PLACE | HOLDS
    } else {
        IN_PLACE
    };
    let special = f.resources_in(&mut sched.spare_resources).special();
    special.in_place = Some(held);
    if let Some((hold, via)) = inner {
        // Given back before `in_place`, as the frame ends; on
        // `async_stack`, `via` comes between the step and the section, as
        // on the general path.
        special.holds.push(hold);
        special.in_place_via = Some(via);
    }
}
