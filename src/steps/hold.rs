//! A flow's stake in a shared object: the extension point the `sync`
//! layer plugs into. The engine keeps a [`Hold`] in the frame of the step
//! that took it and drops it when that step ends, however it ends; what
//! dropping it gives back is the object's own business ([`Guard`]).

use crate::steps::flow::Flow;
use crate::steps::frame::{Frame, HOLDS, IN_PLACE};
use crate::steps::scheduler::Scheduler;
use crate::steps::step::Step;
use std::sync::Arc;

/// What a shared object does when a flow's stake in it ends; `home` is
/// the id of the flow's loop (`Inbox::id`), which runs the call.
pub(crate) trait Guard: Send + Sync + 'static {
    /// A flow that was admitted leaves (a Mutex frees its slot).
    fn leave(&self, home: u64);
    /// A flow's place in the queue was cancelled before it was granted.
    fn place_cancelled(&self, home: u64);
}

/// A flow's place in a shared object's queue.
pub(crate) trait Place: Send + Sync + 'static {
    /// The place was granted: the flow is admitted.
    fn is_granted(&self) -> bool;
    /// Takes the place out of the queue; false when it was granted first
    /// (the flow was admitted and must leave instead).
    fn cancel(&self) -> bool;
    /// The flow's stake ended: the place may be kept for a later waiter
    /// (by default it is dropped).
    fn recycle(self: Arc<Self>) {}
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
    /// The flow's loop (`Inbox::id`): a flow never leaves it, so the
    /// stake ends there.
    home: u64,
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
    /// A stake of a flow of loop `home` in the object `id` behind `guard`,
    /// admitted already or not.
    pub(crate) fn new(id: usize, guard: Arc<dyn Guard>, held: bool, home: u64) -> Self {
        Hold {
            id,
            guard,
            state: if held {
                HoldState::Held
            } else {
                HoldState::Pending
            },
            home,
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
            HoldState::Held => self.guard.leave(self.home),
            HoldState::Queued(n) => {
                if n.cancel() {
                    self.guard.place_cancelled(self.home);
                } else {
                    self.guard.leave(self.home);
                }
                n.recycle();
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

/// A step's holds, for the `sync` layer.
impl Step<'_> {
    /// For sync object `id` (see [`Hold`]): whether this strand holds
    /// it in a step below this one, and how many holds of it its ancestor
    /// strands (the parents of a parallel branch) have.
    pub(crate) fn sync_holds(&self, id: usize) -> (bool, usize) {
        fn count(frames: &[Frame], id: usize) -> usize {
            frames
                .iter()
                .filter_map(|f| f.hold_part())
                .flat_map(|r| r.all_holds())
                .filter(|h| h.id == id && h.is_held())
                .count()
        }
        let Some(st) = self.flow.st_get(self.sid) else {
            return (false, 0);
        };
        // This step's own frame counts too: an `ISync` syncing twice on the
        // same object in one step re-enters.
        let own = count(&st.frames[..(self.depth + 1).min(st.frames.len())], id) > 0;
        let mut ancestors = 0;
        let mut parent = st.parent;
        while parent.1 != 0 {
            let Some(p) = self.flow.st_get(parent.0) else {
                break;
            };
            ancestors += count(&p.frames, id);
            parent = p.parent;
        }
        (own, ancestors)
    }

    /// Gives this step a stake in a sync object (see [`Hold`]).
    pub(crate) fn add_hold(&mut self, h: Hold) {
        self.frame_here();
        let f = &mut self.flow.st(self.sid).frames[self.depth];
        f.flags |= HOLDS;
        f.resources_in(&mut self.sched.spare_resources)
            .special()
            .holds
            .push(h);
    }

    /// True when this very step already has a stake in object `id` that is
    /// not admitted yet (it is about to wait for it).
    pub(crate) fn has_pending_hold(&self, id: usize) -> bool {
        self.flow
            .st_get(self.sid)
            .and_then(|st| st.frames.get(self.depth))
            .and_then(|f| f.resources.as_deref())
            .and_then(|x| x.special_ref())
            .is_some_and(|r| r.holds.iter().any(|h| h.id == id && !h.is_held()))
    }

    /// The stake in object `id` of the step that added this one (a sync
    /// step's wait step).
    ///
    /// The newest such stake: a step that takes the same object twice (a
    /// Throttle, whose every entry counts) has its admitted stake first and
    /// the one its wait step is for last (a step waits for an object at
    /// most once: `has_pending_hold`).
    pub(crate) fn parent_hold(&mut self, id: usize) -> Option<&mut Hold> {
        let d = self.depth.checked_sub(1)?;
        self.flow.st(self.sid).frames[d]
            .resources
            .as_mut()?
            .special_mut()?
            .holds
            .iter_mut()
            .rev()
            .find(|h| h.id == id)
    }
}
