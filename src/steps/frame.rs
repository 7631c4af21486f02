//! Frames (one per executing step, i.e. one per level) and strands (one
//! sequential line of levels: the root flow, or one parallel branch).

use crate::args::Args;
use crate::error::Error;
use crate::steps::def::{BoxFuture, Catch, NameFn, StepDef};
use crate::steps::external::WaitToken;
use crate::steps::future_wake::FutureWake;
use crate::tool::TaskKey;
use crate::util::panic::{drain_caught, drop_caught, rethrow, Payload};
use std::any::Any;
use std::sync::Arc;

/// What kind of step a frame runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Step,
    Parallel,
    Loop,
    Await,
}

/// The step waits for an external event (no implicit success).
pub(crate) const WAIT: u8 = 1;
/// The error handler of this frame has been taken (it never runs twice).
pub(crate) const HANDLED: u8 = 2;
/// A `sync` step that runs its critical section in place (see
/// `Special::in_place`).
pub(crate) const IN_PLACE: u8 = 4;
/// The step took a stake in a sync object (`Special::holds`; set by
/// `Step::add_hold`, and kept while the frame lives, even once its
/// waiting holds are dropped before its error handler runs). With
/// `IN_PLACE`, it marks every frame that may hold a sync object, so a walk
/// looking for holds skips the frames without either.
pub(crate) const HOLDS: u8 = 8;
/// The flags of a frame that may hold a sync object.
pub(crate) const MAY_HOLD: u8 = IN_PLACE | HOLDS;

/// A step's cancel callback; it gets the loop (see `Step::set_cancel_sched`).
pub(crate) type CancelFn = Box<dyn FnOnce(&mut crate::steps::scheduler::Scheduler)>;

/// What a step owns while it runs, released when it ends: its cancel
/// callback, its `stack()` values, and what special steps keep
/// ([`Special`]). Most steps never need any: allocated on first use (from
/// the loop's pool). Kept small, so a step with a cancel callback or a
/// `stack()` value costs little. (A step's timeout is in its `Frame`:
/// setting one needs no `Resources`.)
#[derive(Default)]
pub(crate) struct Resources {
    pub cancel: Option<CancelFn>,
    pub stack: Vec<Box<dyn Any>>,
    /// Allocated on first use; kept with the `Resources` when it is recycled.
    pub special: Option<Box<Special>>,
}

/// Dropped outside [`Resources::reset`] (a frame dropped whole, as when a
/// strand or a flow goes): emptied by `reset` first, which drops the user
/// values one at a time, so two panicking values, or one while the thread
/// unwinds, do not abort the process. What is left runs no user code.
impl Drop for Resources {
    fn drop(&mut self) {
        if self.cancel.is_some() || !self.stack.is_empty() || self.special.is_some() {
            self.reset(|| 0);
        }
    }
}

/// The resources only special steps keep: sync holds, an I/O wait and
/// registered sources, a parallel step's state, an awaited future.
#[derive(Default)]
pub(crate) struct Special {
    /// A `sync` step's stakes in sync objects (usually one; an `ISync`
    /// that takes several objects in one step gets one each). Released
    /// when the frame goes, however it goes.
    pub holds: smallvec::SmallVec<[crate::steps::hold::Hold; 1]>,
    /// A `sync` step that found its lock free and runs the critical
    /// section as its own body (frame flag `IN_PLACE`): its stake, and the
    /// section's name, which follows the step's own on `async_stack` as if
    /// the section were a sub-step. After `holds`, so the holds the section
    /// takes are given back first, as from a sub-step's frame.
    pub in_place: Option<(crate::steps::hold::Hold, NameFn)>,
    /// With `in_place`: the name shown between the step's and the
    /// section's, of the object's own section that the general path runs
    /// the section in (a Limiter's Throttle inside its Mutex).
    pub in_place_via: Option<NameFn>,
    /// An I/O readiness wait of this step (`Step::wait_io`).
    pub io: Option<crate::steps::io_wait::IoWait>,
    /// Sources on this frame's stack registered with the reactor.
    pub sources: smallvec::SmallVec<[crate::steps::io_wait::Registered; 1]>,
    pub par: Option<ParState>,
    /// A parallel step's branch strands as (index, generation). Kept,
    /// emptied, when the `Special` part is recycled (up to
    /// `PAR_IDS_KEEP`), so a parallel step allocates no list once warm.
    pub par_ids: Vec<(u32, u32)>,
    /// An awaited future.
    pub fut: Option<BoxFuture>,
    /// The waker of the awaited future; kept when the `Special` part is
    /// recycled, and readdressed for the next await whose frame gets it
    /// when no clone of it is left (see `FutureWake::reuse`).
    pub wake: Option<Arc<FutureWake>>,
}

pub(crate) struct ParState {
    /// Branches still running (their ids are in `Special::par_ids`).
    pub remaining: u32,
}

/// One level: the step that executes and owns the sub-steps queued above
/// `seg` in its strand's queue.
pub(crate) struct Frame {
    pub seg: u32,
    pub seq: u32,
    pub kind: Kind,
    pub flags: u8,
    pub catch: Option<Catch>,
    pub name: NameFn,
    pub wait: Option<Arc<WaitToken>>,
    /// The step's timeout (`set_timeout`), kept in the frame itself: a
    /// step that only sets a timeout needs no `Resources`.
    pub timer: Option<TaskKey>,
    pub resources: Option<Box<Resources>>,
}

impl Frame {
    /// The `Special` part of a frame that may keep sync holds (in
    /// `Special::holds` and, for a section run in place, `Special::in_place`;
    /// see [`Special::all_holds`]). Frames never flagged as holding one are
    /// skipped without looking into their `Resources`.
    #[inline]
    pub(crate) fn hold_part(&self) -> Option<&Special> {
        if self.flags & MAY_HOLD == 0 {
            return None;
        }
        self.resources.as_deref()?.special_ref()
    }

    /// Drops the sync stakes not admitted (yet) of a frame that lives on
    /// (its handler is about to run): a queued one leaves its queue. An
    /// admitted one stays until the frame ends, so the frame's `stack()`
    /// values still end before it, as always. Not for a frame running its
    /// section in place: an engine `sync` step has no handler.
    pub(crate) fn drop_waiting_holds(&mut self) {
        debug_assert!(
            self.flags & IN_PLACE == 0,
            "an in-place section's frame has no handler"
        );
        if let Some(r) = self.resources.as_deref_mut().and_then(|x| x.special_mut()) {
            r.holds.retain(|h| h.is_held());
        }
    }

    /// This frame's `Resources`, taken from `pool` (the loop's recycled ones)
    /// on first use.
    #[inline]
    #[allow(clippy::vec_box)] // the pool moves boxes in and out whole
    pub(crate) fn resources_in(&mut self, pool: &mut Vec<Box<Resources>>) -> &mut Resources {
        self.resources
            .get_or_insert_with(|| pool.pop().unwrap_or_default())
    }
}

impl Special {
    /// Every stake of the frame in sync objects (see [`Hold`](crate::steps::hold::Hold)).
    #[inline]
    pub(crate) fn all_holds(&self) -> impl Iterator<Item = &crate::steps::hold::Hold> {
        self.holds
            .iter()
            .chain(self.in_place.as_ref().map(|p| &p.0))
    }
}

impl Resources {
    /// The [`Special`] part, allocated on first use.
    pub(crate) fn special(&mut self) -> &mut Special {
        self.special.get_or_insert_with(Default::default)
    }

    /// The [`Special`] part, if it was ever allocated.
    #[inline]
    pub(crate) fn special_mut(&mut self) -> Option<&mut Special> {
        self.special.as_deref_mut()
    }

    /// The [`Special`] part, if it was ever allocated.
    #[inline]
    pub(crate) fn special_ref(&self) -> Option<&Special> {
        self.special.as_deref()
    }

    /// Empties it for reuse, dropping what it holds in field order (as
    /// dropping it would). A panicking `Drop` of a `stack()` value goes to
    /// the caller once everything else is dropped (the first of several;
    /// see [`util::panic`](crate::util::panic)).
    ///
    /// Returns true when giving back its sync slots posted a message to
    /// the loop's own queue (a grant to a waiter of this loop):
    /// `local_len` is read just before and after the slots go, so a
    /// message another value's `Drop` posts does not count.
    pub(crate) fn reset(&mut self, mut local_len: impl FnMut() -> usize) -> bool {
        let mut first = None;
        if let Some(c) = self.cancel.take() {
            drop_caught(c, &mut first);
        }
        if !self.stack.is_empty() {
            drain_caught(&mut self.stack, &mut first);
        }
        if self.stack.capacity() > STACK_KEEP {
            self.stack = Vec::new();
        }
        let granted = self.reset_special(&mut local_len, &mut first);
        rethrow(first);
        granted
    }

    /// The `Special` part of [`reset`](Self::reset); a panicking user `Drop`
    /// (an awaited future) is kept in `first`.
    fn reset_special(
        &mut self,
        local_len: &mut impl FnMut() -> usize,
        first: &mut Option<Payload>,
    ) -> bool {
        let mut granted = false;
        if let Some(r) = self.special.as_deref_mut() {
            // Each part is tested first: most are empty, and a test is
            // cheaper than a call into the part's drop glue.
            if !r.holds.is_empty() || r.in_place.is_some() {
                let before = local_len();
                if !r.holds.is_empty() {
                    r.holds.clear();
                }
                if r.in_place.is_some() {
                    r.in_place = None;
                    r.in_place_via = None;
                }
                granted = local_len() > before;
            }
            if r.io.is_some() {
                r.io = None;
            }
            if !r.sources.is_empty() {
                r.sources.clear();
            }
            if r.par.is_some() {
                r.par = None;
            }
            if !r.par_ids.is_empty() {
                r.par_ids.clear();
            }
            if r.par_ids.capacity() > PAR_IDS_KEEP {
                r.par_ids = Vec::new();
            }
            if let Some(f) = r.fut.take() {
                drop_caught(f, first);
            }
        }
        granted
    }
}

/// A recycled `Special` part keeps room for this many parallel branches.
const PAR_IDS_KEEP: usize = 64;

/// A recycled `Resources` keeps its `stack()` buffer up to this many slots.
const STACK_KEEP: usize = 8;

/// A sequential line of execution. Sub-steps of all its levels share one
/// queue: each level's pending steps form a segment, stored reversed so the
/// next step is popped from the end; deeper levels sit above shallower ones.
#[derive(Default)]
pub(crate) struct Strand {
    /// The frames (hot: read on every step, so a plain vector).
    pub frames: Vec<Frame>,
    /// A plain vector, like `frames`: an inline slot would save a cold
    /// flow one allocation, but every push and pop would pay a check of
    /// where the items live (about 50 instructions per simple flow). A
    /// pooled flow keeps the buffer.
    pub queue: Vec<StepDef>,
    /// (parent strand, seq of the parallel frame waiting for this branch);
    /// seq 0 (never used by a frame) means "no parent": the main strand.
    pub parent: (u32, u32),
    pub gen: u32,
    pub live: bool,
    /// A new parallel branch: it runs one step, then lets its siblings
    /// start before going on (all branches start together, spec 1).
    pub fresh: bool,
}

impl Strand {
    /// The parent strand and its waiting parallel frame, for a branch.
    #[inline]
    pub(crate) fn parent(&self) -> Option<(u32, u32)> {
        (self.parent.1 != 0).then_some(self.parent)
    }
}

/// What a strand does next. Success args travel in the loop's args
/// register ([`Scheduler`](crate::Scheduler) `args`), not in `Act`.
pub(crate) enum Act {
    /// Run the next step at the top level; its args are in the register.
    Next,
    /// Raise this error at the top frame (which raised it itself).
    Fail(Error),
    /// An error from a failed parallel branch, already recorded in the state
    /// (so `async_stack` keeps naming the branch step that raised it).
    Up(Error),
    /// The main strand has ended: `Ok` with the result args in the
    /// register, or the error.
    End(Result<(), Error>),
}

/// An `Act` parked in a flow's ready queue, with its args.
pub(crate) enum Queued {
    Next(Args),
    Fail(Error),
    Up(Error),
}
