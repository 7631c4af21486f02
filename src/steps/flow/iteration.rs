//! Running a loop's iterations. A body runs as a step whose frame is
//! deferred; what it adds goes on the loop's own level, so an iteration
//! that only adds steps (or does nothing) has no frame: a flow waiting in
//! a loop's body holds one frame less, and no frame is pushed and popped
//! per iteration. A body that needs its frame (it waits, sets a timeout
//! or a cancel callback, keeps a `stack()` value, fails) gets it as any
//! deferred step does. See `docs/architecture.md`, "Loops".

use super::Flow;
use crate::steps::def::{Exec, StepDef};
use crate::steps::frame::{Act, Kind};
use crate::steps::scheduler::Scheduler;
use crate::steps::step::{Pending, Step};
use std::panic::{catch_unwind, AssertUnwindSafe};

impl Flow {
    /// Runs loop iterations while they end at once, from the loop frame
    /// on top of `sid` (its segment empty).
    pub(super) fn iterate(&mut self, sched: &mut Scheduler, sid: u32) -> Option<Act> {
        loop {
            sched.steps += 1;
            sched.budget = sched.budget.saturating_sub(1);
            // The loop frame's index: a body's frame, if it needs one,
            // goes above it.
            let lp = self.st(sid).frames.len() - 1;
            let lf = &self.st(sid).frames[lp];
            let (name, base) = (lf.name, lf.seg);
            let mut iter = self.take_driver(sid, base);
            let (r, out, pending) = {
                let frame = Pending { catch: None, name };
                let mut step = Step::body(sched, self, sid, frame);
                // Fast path: a body that returned Ok without adding steps,
                // needing its frame or misusing the API ended like an
                // implicit success. The same `Step` serves the next
                // iteration while the step budget lasts; one
                // `catch_unwind` covers the run.
                // (`take_driver` only takes loops' drivers; anything else
                // would end the loop.)
                let r = match driver_of(&mut iter) {
                    Some(driver) => catch_unwind(AssertUnwindSafe(|| loop {
                        let r = driver.call(&mut step);
                        if !matches!(r, Some(Ok(()))) || !step.body_done_plain() {
                            break r;
                        }
                        if step.sched.budget == 0 {
                            break r;
                        }
                        step.sched.budget -= 1;
                        step.sched.steps += 1;
                    })),
                    None => Ok(None),
                };
                let (out, pending) = step.into_parts();
                (r, out, pending)
            };
            // The driver goes back before anything else runs: a step run
            // below (or a panic out of one) finds the loop's step whole.
            self.st(sid).queue[base as usize - 1].exec = iter;
            let res = match r {
                Ok(None) => {
                    // The loop condition ended the loop (a body that ended
                    // it has no frame: it returned without running).
                    if pending.is_none() {
                        self.pop_frame(sched, sid, false);
                    }
                    self.pop_frame(sched, sid, false);
                    sched.clear_args();
                    return Some(Act::Next);
                }
                Ok(Some(res)) => Ok(res),
                Err(p) => Err(p),
            };
            let added = out.added;
            let act = match pending {
                // The body's frame was pushed: it ends as any step.
                None => self.after_call(sched, sid, res, out),
                Some(frame) => self.after_body(sched, sid, res, out, frame, base),
            };
            if !added || !matches!(act, Some(Act::Next)) {
                return act;
            }
            // The body added sub-steps: run the first one here, as the
            // strand's loop would next (same checks, same `exec`). When it
            // ends at once and leaves the loop frame on top with nothing
            // queued, the next iteration runs here too. Only an execute
            // callback: a loop, parallel or await sub-step goes back to the
            // strand's loop, so nested loops never nest calls of this
            // function.
            if !self.may_run_next(sched, sid)
                || !matches!(
                    self.st(sid).queue.last(),
                    Some(StepDef {
                        exec: Exec::Fn(_),
                        ..
                    })
                )
            {
                return act;
            }
            let def = self.st(sid).queue.pop().expect("a sub-step was added");
            let act = self.exec_sub(sched, sid, def);
            if !matches!(act, Some(Act::Next)) || !self.loop_on_top(sched, sid, lp) {
                return act;
            }
        }
    }

    /// What follows a body that ran without its frame: it added steps
    /// (on the loop's level, from `base`), ended at once (a loop ignores
    /// its body's success args), or failed, and then gets its frame, as
    /// any deferred step that fails, with the steps it added in its
    /// segment (they are dropped as the error unwinds).
    fn after_body(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        r: Result<crate::error::StepResult, Box<dyn std::any::Any + Send>>,
        out: crate::steps::step::Outcome,
        frame: Pending,
        base: u32,
    ) -> Option<Act> {
        debug_assert!(!out.io_wait, "a readiness wait pushes the body's frame");
        match super::exec::call_result(r, out.fails_with) {
            Ok(()) => {
                if out.added {
                    self.st(sid).queue[base as usize..].reverse();
                    if !out.forward {
                        sched.clear_args();
                    }
                } else {
                    sched.clear_args();
                }
                Some(Act::Next)
            }
            Err(e) => {
                sched.clear_args();
                self.push_frame(sid, frame.catch, frame.name, Kind::Step);
                self.top(sid).seg = base;
                Some(Act::Fail(e))
            }
        }
    }

    /// [`exec`](Self::exec) for a loop iteration's sub-step, out of line so
    /// that the strand's own loop keeps its inlined copy.
    #[inline(never)]
    fn exec_sub(&mut self, sched: &mut Scheduler, sid: u32, def: StepDef) -> Option<Act> {
        self.exec(sched, sid, def)
    }

    /// Takes the driver out of the step of the loop whose segment starts
    /// at `seg` (it goes back before anything else runs).
    fn take_driver(&mut self, sid: u32, seg: u32) -> Exec {
        let def = &mut self.st(sid).queue[seg as usize - 1];
        let e = std::mem::replace(&mut def.exec, Exec::Taken);
        debug_assert!(
            matches!(e, Exec::Loop(_) | Exec::LabeledLoop(_)),
            "loop not re-entered"
        );
        e
    }

    /// Whether [`run_strand`](Self::run_strand) would run the next step of
    /// `sid` right after a step that went on (`Act::Next`): the strand is
    /// not a parallel branch that has yet to let its siblings start, and
    /// the step budget is not spent.
    #[inline]
    fn may_run_next(&mut self, sched: &Scheduler, sid: u32) -> bool {
        let st = self.st(sid);
        !(st.fresh && st.live) && sched.budget > 0
    }

    /// After an iteration's sub-step went on: whether the strand's loop
    /// would call [`iterate`](Self::iterate) next, the loop frame `lp` on
    /// top with nothing queued above it, and may go on at once. False:
    /// the strand's loop goes on from here (so does a spent step budget:
    /// the strand pauses there).
    #[inline]
    fn loop_on_top(&mut self, sched: &Scheduler, sid: u32, lp: usize) -> bool {
        if !self.may_run_next(sched, sid) {
            return false;
        }
        let st = self.st(sid);
        st.frames.len() == lp + 1
            && st.frames[lp].kind == Kind::Loop
            && st.queue.len() == st.frames[lp].seg as usize
    }
}

/// The driver of a loop's step.
#[inline(always)]
fn driver_of(e: &mut Exec) -> Option<&mut crate::steps::def::LoopIter> {
    match e {
        Exec::Loop(iter) => Some(iter),
        Exec::LabeledLoop(b) => Some(&mut b.0),
        _ => None,
    }
}
