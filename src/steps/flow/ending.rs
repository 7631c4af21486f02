//! Ending the levels of a flow: popping a frame (its timer, wait token,
//! I/O registrations, cancel callback and parallel branches), releasing
//! strands, and what happens when a strand runs out of steps. See
//! `docs/architecture.md`, "Running a step" and "Parallel".

use super::{Flow, FlowPanic};
use crate::error::Error;
use crate::steps::frame::{Act, Frame, Kind};
use crate::steps::io_wait::IoWaiter;
use crate::steps::scheduler::Scheduler;
use crate::tool::panic_error;
use crate::tool::Reactor;
use crate::util::panic::{call_caught, rethrow};
use std::panic::{catch_unwind, AssertUnwindSafe};

impl Flow {
    /// Removes the top frame of `sid`. With `cancel`, its cancel callback
    /// runs first (and a parallel frame cancels its branches).
    #[inline(always)]
    pub(crate) fn pop_frame(&mut self, sched: &mut Scheduler, sid: u32, cancel: bool) {
        let st = self.st(sid);
        let Some(f) = st.frames.pop() else {
            return;
        };
        // A loop's own step sits just below its segment (see `start_loop`):
        // it goes with the loop.
        let keep = f.seg as usize - usize::from(f.kind == Kind::Loop);
        if st.queue.len() > keep {
            st.queue.truncate(keep);
        }
        // A plain frame (no wait token, nothing in `Resources`) has no activity
        // to end: the common case stays inline.
        if f.wait.is_some() || f.timer.is_some() || f.resources.is_some() {
            self.end_popped(sched, f, cancel);
        } else {
            // Every field is named (a new one must be looked at here): of
            // those that need dropping, only the handler can be set, so the
            // two `None`s are forgotten instead of going through the
            // frame's drop glue.
            let Frame {
                seg: _,
                seq: _,
                kind: _,
                flags: _,
                catch,
                name: _,
                wait,
                timer: _,
                resources,
            } = f;
            drop(catch);
            std::mem::forget((wait, resources));
        }
    }

    /// Ends a popped frame that has a wait token, a timer or `Resources`.
    fn end_popped(&mut self, sched: &mut Scheduler, mut f: Frame, cancel: bool) {
        self.end_frame(sched, &mut f, cancel);
        if let Some(x) = f.resources.take() {
            sched.recycle_resources(x);
        }
    }

    /// Ends the activity of a frame: cancel callback (when cancelling),
    /// branches, timer, external handle. The frame itself may stay.
    pub(super) fn end_frame(&mut self, sched: &mut Scheduler, f: &mut Frame, mut cancel: bool) {
        if let Some(w) = f.wait.take() {
            // An external completion already accepted (on its way in the
            // inbox) means the step's activity is over: exactly one of
            // "completed externally" and "cancelled" happens, so no cancel
            // callback. The frame still ends (its flow is unwinding).
            if cancel && !w.claim() {
                cancel = false;
            }
            sched.release_token(w);
        }
        if let Some(t) = f.timer.take() {
            sched.cancel_task(t);
        }
        let Some(x) = f.resources.as_mut() else {
            return;
        };
        if let (Some(io), Some(special)) = (sched.core.io.as_mut(), x.special.as_deref_mut()) {
            if let Some(w) = special.io.take() {
                io.end_wait(w.key, |who| (who.strand, who.seq) == (w.strand, w.seq));
            }
            if !special.sources.is_empty() {
                deregister_sources(io, special, &mut x.stack);
            }
        }
        if cancel {
            if let Some(special) = x.special_mut().filter(|r| r.par.is_some()) {
                special.par = None;
                let mut ids = std::mem::take(&mut special.par_ids);
                self.cancel_branches(sched, &ids);
                // The emptied list goes back for the frame's next use.
                ids.clear();
                if let Some(special) = f.resources.as_mut().and_then(|x| x.special_mut()) {
                    special.par_ids = ids;
                }
            }
            let x = f.resources.as_mut().expect("checked");
            // Cancelling an awaiting step drops its future (spec 1.13).
            if let Some(r) = x.special_mut() {
                r.fut = None;
            }
            if let Some(c) = x.cancel.take() {
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| c(sched))) {
                    // The flow cannot go on unwinding as if the external
                    // activity were cancelled: it ends with InternalError,
                    // and `Scheduler::drive` tears down the rest.
                    std::panic::resume_unwind(Box::new(FlowPanic(panic_error(
                        "cancel callback",
                        p,
                    ))));
                }
            }
        } else if let Some(x) = f.resources.as_mut() {
            // The step's activity ended without a cancel: its callback is
            // never to run later.
            x.cancel = None;
        }
    }

    #[inline(always)]
    pub(super) fn release_strand(&mut self, sid: u32) {
        let st = self.st(sid);
        st.live = false;
        st.fresh = false;
        st.gen = st.gen.wrapping_add(1);
        // Usually both are empty already: skip the drop loops then.
        if !st.queue.is_empty() {
            st.queue.clear();
        }
        if !st.frames.is_empty() {
            st.frames.clear();
        }
        st.parent = (0, 0);
        if sid != 0 {
            self.branching().free.push(sid);
        }
    }

    /// Cancels every frame of a strand, innermost first, and releases it.
    pub(crate) fn cancel_strand(&mut self, sched: &mut Scheduler, sid: u32) {
        while !self.st(sid).frames.is_empty() {
            self.pop_frame(sched, sid, true);
        }
        self.release_strand(sid);
    }

    /// A strand ran out of steps, or failed with nothing left to handle it.
    /// For the main strand this ends the flow: the result comes back as
    /// [`Act::End`].
    /// `Ok`: its result args are in the register.
    #[inline]
    pub(super) fn strand_done(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        res: Result<(), Error>,
    ) -> Option<Act> {
        if sid == 0 {
            // The main strand has no parent: the flow ends.
            self.release_strand(0);
            return Some(Act::End(res));
        }
        self.branch_done(sched, sid, res)
    }
}

/// Deregisters the sources a frame owns while they live, each on its own:
/// a user source whose `deregister` panics must not leave the others
/// registered (the first panic goes on afterwards and fails the flow).
/// Out of line: most frames own none, and `end_frame` stays small.
#[cold]
#[inline(never)]
fn deregister_sources(
    io: &mut Reactor<IoWaiter>,
    special: &mut crate::steps::frame::Special,
    stack: &mut [Box<dyn std::any::Any>],
) {
    let mut first = None;
    for r in std::mem::take(&mut special.sources) {
        match stack.get_mut(r.idx as usize) {
            Some(v) => call_caught(|| (r.deregister)(&mut **v, io, r.key), &mut first),
            None => io.forget(r.key),
        }
    }
    rethrow(first);
}
