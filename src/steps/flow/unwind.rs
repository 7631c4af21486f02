//! Walking the levels down: a step's timeout, error unwinding through the
//! handlers (spec 1.2, 1.2.1) with the error recorded in the state, and
//! `break`/`continue` reaching their loop. See `docs/architecture.md`,
//! "Unwinding" and "Cancel and timeouts".

use super::Flow;
use crate::error::{Control, Error};
use crate::steps::def::{Exec, StepDef};
use crate::steps::frame::{Act, Frame, Kind, HANDLED, HOLDS, IN_PLACE, WAIT};
use crate::steps::scheduler::Scheduler;
use crate::steps::step::Step;
use crate::tool::panic_error;
use std::panic::{catch_unwind, AssertUnwindSafe};

impl Flow {
    /// A timeout fired for step `seq`: cancel it and everything above it,
    /// innermost first, then raise `Timeout` at its level.
    pub(super) fn timeout(&mut self, sched: &mut Scheduler, sid: u32, seq: u32) -> Option<Act> {
        let st = self.st_get(sid).filter(|s| s.live)?;
        let k = st.frames.iter().rposition(|f| f.seq == seq)?;
        let top_is_k = k + 1 == st.frames.len();
        st.frames[k].timer?;
        if top_is_k {
            if let Some(w) = &st.frames[k].wait {
                if !w.claim() {
                    return None; // an external completion won and is on its way
                }
            }
        }
        while self.st(sid).frames.len() > k + 1 {
            self.pop_frame(sched, sid, true);
        }
        let st = self.st(sid);
        let mut f = st.frames.pop().expect("frame k");
        st.queue.truncate(f.seg as usize);
        f.timer = None;
        // The timeout claimed the token above: it is this step's end, and
        // its cancel callback runs.
        if let Some(w) = f.wait.take() {
            sched.release_token(w);
        }
        self.end_frame(sched, &mut f, true);
        f.flags &= !WAIT;
        let st = self.st(sid);
        st.frames.push(f);
        Some(Act::Fail(Error::timeout()))
    }

    /// Records `err` in the state with the `async_stack` of strand `sid`:
    /// the frame names from the root down through the parent strands.
    fn record_error(&mut self, sched: &mut Scheduler, sid: u32, err: &Error) {
        // The state is moved out while the frames are read (no allocation:
        // an empty `State` is `None`).
        let mut state = std::mem::take(&mut self.state);
        let strand = |id: u32| self.st_get(id).expect("live strand");
        state.record_error(&mut sched.states, err, |out| {
            let mut chain: smallvec::SmallVec<[u32; 4]> = smallvec::smallvec![sid];
            let mut cur = sid;
            while let Some((p, _)) = strand(cur).parent() {
                chain.push(p);
                cur = p;
            }
            for (i, s) in chain.iter().rev().enumerate() {
                let frames = &strand(*s).frames;
                let upto = if i + 1 < chain.len() {
                    let (_, pseq) = strand(chain[chain.len() - 2 - i]).parent().expect("child");
                    frames
                        .iter()
                        .position(|f| f.seq == pseq)
                        .map_or(frames.len(), |p| p + 1)
                } else {
                    frames.len()
                };
                for f in &frames[..upto] {
                    out.push(f.name);
                    if f.flags & IN_PLACE != 0 {
                        // The critical section it runs in place.
                        if let Some(r) = f.resources.as_ref().and_then(|x| x.special_ref()) {
                            if let Some(via) = r.in_place_via {
                                out.push(via);
                            }
                            if let Some((_, section)) = &r.in_place {
                                out.push(*section);
                            }
                        }
                    }
                }
            }
        });
        self.state = state;
    }

    /// Error handling (spec 1.2): walk the levels down from the top frame
    /// (which raised `err`) to the first one with a handler.
    pub(super) fn unwind(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        mut err: Error,
        record: bool,
    ) -> Option<Act> {
        if *err.control_ref() != Control::None {
            match self.loop_control(sched, sid, &err, true) {
                Some(act) => return Some(act),
                None if self.loop_outside(sid, err.control_ref()) => {
                    return self.leave_branch(sched, sid, err);
                }
                None => {
                    // No loop to break: the args it carried go.
                    sched.break_args = None;
                    err = err.into_plain();
                }
            }
        }
        sched.clear_args();
        if record {
            self.record_error(sched, sid, &err);
        }
        let mut origin = true;
        loop {
            let st = self.st(sid);
            let Some(top) = st.frames.last_mut() else {
                return self.strand_done(sched, sid, Err(err));
            };
            st.queue.truncate(top.seg as usize);
            let catch = if top.flags & HANDLED == 0 {
                top.catch.take()
            } else {
                None
            };
            let Some(catch) = catch else {
                self.pop_frame(sched, sid, !origin);
                origin = false;
                continue;
            };
            let mut f = self.st(sid).frames.pop().expect("top");
            self.end_frame(sched, &mut f, !origin);
            if f.flags & HOLDS != 0 {
                // A step that took sync stakes itself (a direct
                // `ISync::sync`) failed: a place it took in a queue goes
                // (spec 1.11: a waiter that timed out leaves the queue);
                // a lock it got stays with the step until it ends.
                f.drop_waiting_holds();
            }
            f.flags = (f.flags | HANDLED) & !WAIT;
            let st = self.st(sid);
            st.frames.push(f);
            let depth = st.frames.len() - 1;
            let mut step = Step::new(sched, self, sid, depth, true);
            let r = catch_unwind(AssertUnwindSafe(|| catch.call(&mut step, &err)));
            let out = step.into_outcome();
            let r = match (r, out.fails_with) {
                (_, Some(e)) => Err(e),
                (Ok(r), None) => r,
                (Err(p), None) => Err(panic_error("error handler", p)),
            };
            let st = self.st(sid);
            let top = st.frames.last_mut().expect("handler frame");
            if out.added {
                st.queue[top.seg as usize..].reverse();
            }
            match r {
                Err(e2) => {
                    let st = self.st(sid);
                    let below = &st.frames[..st.frames.len() - 1];
                    if matching_loop(below, &st.queue, e2.control_ref()).is_some() {
                        self.pop_frame(sched, sid, false);
                        // break/continue from a handler: the frames below did
                        // not raise it, so they are all cancelled on the way.
                        return self.loop_control(sched, sid, &e2, false);
                    }
                    if self.loop_outside(sid, e2.control_ref()) {
                        return self.leave_branch(sched, sid, e2);
                    }
                    // Recorded while the handled step is still on the
                    // stack: `async_stack` ends with it, as for an error
                    // its own callback raised.
                    let e2 = e2.into_plain();
                    self.record_error(sched, sid, &e2);
                    self.pop_frame(sched, sid, false);
                    err = e2;
                }
                Ok(()) if out.added => {
                    // Args a handler forwarded to its first sub-step (a sync
                    // section added from a handler) stay; others are stale.
                    if !out.forward {
                        sched.clear_args();
                    }
                    return Some(Act::Next);
                }
                Ok(()) => {
                    self.pop_frame(sched, sid, false);
                    if out.succeeded {
                        return Some(Act::Next);
                    }
                }
            }
            origin = false;
        }
    }

    /// True when a break/continue that matched no loop in parallel branch
    /// `sid` has one in an enclosing strand: a loop outside the parallel
    /// step (spec 2.2.4: a labelled break exits the loop of that label,
    /// however deep; an unlabelled one the innermost loop).
    fn loop_outside(&self, sid: u32, control: &Control) -> bool {
        let mut cur = sid;
        while let Some((p, _)) = self.st_get(cur).and_then(|s| s.parent()) {
            match self.st_get(p) {
                Some(ps) if matching_loop(&ps.frames, &ps.queue, control).is_some() => return true,
                Some(_) => cur = p,
                None => return false,
            }
        }
        false
    }

    /// Ends branch `sid` with a break/continue for a loop outside it: its
    /// frames go (the one that raised it, on top, without its cancel
    /// callback; the others cancelled), and the error,
    /// still a break/continue, fails the parallel step
    /// (`branch_done`: the siblings are cancelled), whose strand then
    /// unwinds to that loop the same way, skipping the handlers between.
    fn leave_branch(&mut self, sched: &mut Scheduler, sid: u32, err: Error) -> Option<Act> {
        self.pop_frame(sched, sid, false);
        while !self.st(sid).frames.is_empty() {
            self.pop_frame(sched, sid, true);
        }
        sched.clear_args();
        self.strand_done(sched, sid, Err(err))
    }

    /// break/continue: find the matching loop in this strand. With
    /// `origin_on_top`, the top frame raised it and ends without its cancel
    /// callback; every other frame above the loop is cancelled.
    fn loop_control(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        err: &Error,
        origin_on_top: bool,
    ) -> Option<Act> {
        let brk = matches!(err.control_ref(), Control::Break(_));
        let st = self.st(sid);
        let l = matching_loop(&st.frames, &st.queue, err.control_ref())?;
        if origin_on_top && self.st(sid).frames.len() > l + 1 {
            self.pop_frame(sched, sid, false);
        }
        while self.st(sid).frames.len() > l + 1 {
            self.pop_frame(sched, sid, true);
        }
        if brk {
            self.pop_frame(sched, sid, false);
        } else {
            let st = self.st(sid);
            let seg = st.frames[l].seg as usize;
            st.queue.truncate(seg);
        }
        sched.clear_args();
        if let Some(a) = sched.break_args.take() {
            if brk {
                // `break_with`: the loop's result, for the step after it.
                sched.args = a;
            }
        }
        Some(Act::Next)
    }
}

/// The index of the innermost `Loop` frame in `frames` that a
/// break/continue with `control` reaches (with its label, if any); `None`
/// for a plain error or when no loop matches.
/// The innermost of `frames` that is a loop `control` reaches (with its
/// label, if it names one); `queue` is their strand's, where each loop's
/// own step (with its label) sits just below its frame's segment.
fn matching_loop(frames: &[Frame], queue: &[StepDef], control: &Control) -> Option<usize> {
    let label = match control {
        Control::Break(l) | Control::Continue(l) => l.as_deref(),
        Control::None => return None,
    };
    frames.iter().rposition(|f| {
        f.kind == Kind::Loop
            && match label {
                None => true,
                Some(want) => {
                    let step = (f.seg as usize).checked_sub(1).and_then(|i| queue.get(i));
                    matches!(step, Some(StepDef { exec: Exec::LabeledLoop(b), .. }) if b.1 == want)
                }
            }
    })
}
