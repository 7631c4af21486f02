//! Running a loop's iterations: each one a frame above the loop frame,
//! with two shortcuts that keep that frame for the next iteration instead
//! of popping it and pushing a new one. A body that returns at once with
//! nothing added reuses it (`Step::recycle`), and so does a body whose
//! added execute callback runs right after it and ends at once. See
//! `docs/architecture.md`, "Loops".

use super::Flow;
use crate::steps::def::{Exec, StepDef};
use crate::steps::frame::{Act, Frame, Kind, LoopState};
use crate::steps::scheduler::Scheduler;
use crate::steps::step::{Outcome, Step};
use std::panic::{catch_unwind, AssertUnwindSafe};

impl Flow {
    /// Runs one loop iteration as a new frame above the loop frame.
    pub(super) fn iterate(&mut self, sched: &mut Scheduler, sid: u32) -> Option<Act> {
        sched.steps += 1;
        sched.budget = sched.budget.saturating_sub(1);
        let lf = self.top(sid);
        let name = lf.name;
        let mut iter = Self::take_body(lf);
        self.push_frame(sid, None, name, Kind::Step);
        let depth = self.st(sid).frames.len() - 1;
        loop {
            let (r, out) = {
                let mut step = Step::new(sched, self, sid, depth, false);
                // Fast path: an iteration that returned Ok without adding
                // steps, waiting or misusing the API ended like an implicit
                // success (a loop ignores its body's success args). The same
                // frame and `Step` serve the next iteration, with a fresh seq
                // so stale references stay detectable. One `catch_unwind`
                // covers the run.
                let r = catch_unwind(AssertUnwindSafe(|| loop {
                    let r = iter.call(&mut step);
                    if !matches!(r, Some(Ok(()))) {
                        break (r, false);
                    }
                    match step.recycle() {
                        Some(true) => {}
                        Some(false) => break (r, true),
                        None => break (r, false),
                    }
                }));
                match r {
                    Ok((r, true)) => (Ok(r), Outcome::default()),
                    Ok((r, false)) => (Ok(r), step.into_outcome()),
                    Err(p) => (Err(p), step.into_outcome()),
                }
            };
            // The iterator goes back before anything else runs: a step run
            // below (or a panic out of one) finds the loop state whole.
            Self::loop_state(&mut self.st(sid).frames[depth - 1])
                .expect("loop state")
                .iter = Some(iter);
            let res = match r {
                Ok(None) => {
                    self.pop_frame(sched, sid, false);
                    self.pop_frame(sched, sid, false);
                    sched.clear_args();
                    return Some(Act::Next);
                }
                Ok(Some(res)) => Ok(res),
                Err(p) => Err(p),
            };
            let added = out.added;
            let act = self.after_call(sched, sid, res, out);
            if !added || !matches!(act, Some(Act::Next)) {
                return act;
            }
            // The body added sub-steps: run the first one here, as the
            // strand's loop would next (same checks, same `exec`). When it
            // ends at once and leaves the iteration's frame plain with
            // nothing queued, that frame serves the next iteration instead
            // of being popped and pushed again (see `next_iteration`).
            // Only an execute callback: a loop, parallel or await sub-step
            // goes back to the strand's loop, so nested loops never nest
            // calls of this function.
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
            if !matches!(act, Some(Act::Next)) || !self.next_iteration(sched, sid, depth) {
                return act;
            }
            iter = Self::take_body(&mut self.st(sid).frames[depth - 1]);
        }
    }

    /// [`exec`](Self::exec) for a loop iteration's sub-step, out of line so
    /// that the strand's own loop keeps its inlined copy.
    #[inline(never)]
    fn exec_sub(&mut self, sched: &mut Scheduler, sid: u32, def: StepDef) -> Option<Act> {
        self.exec(sched, sid, def)
    }

    /// The loop state of a loop frame.
    fn loop_state(f: &mut Frame) -> Option<&mut LoopState> {
        f.resources.as_mut().and_then(|x| x.lp.as_mut())
    }

    /// Takes the body out of loop frame `f` for an iteration (it goes back
    /// before anything else runs).
    fn take_body(f: &mut Frame) -> crate::steps::def::LoopIter {
        Self::loop_state(f)
            .expect("loop state")
            .iter
            .take()
            .expect("loop not re-entered")
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

    /// After the sub-step of iteration frame `depth` went on: when nothing
    /// more is queued in that frame and it is plain (no wait, timer, `Resources`
    /// or flag), renews it for the next iteration, as popping it and
    /// pushing the next iteration's frame would (a fresh seq, the next
    /// step counted; the args register is left as popping leaves it).
    /// False: the strand's loop goes on from here (so does a spent step
    /// budget: the strand pauses there).
    #[inline]
    fn next_iteration(&mut self, sched: &mut Scheduler, sid: u32, depth: usize) -> bool {
        if !self.may_run_next(sched, sid) {
            return false;
        }
        let seq = self.next_seq();
        let st = self.st(sid);
        // The `frames.len()` and `wait` checks are defensive: a sub-step
        // that went on with its own frame still on top left steps queued,
        // and `after_call` took the body's wait token.
        if st.frames.len() != depth + 1 {
            return false;
        }
        let f = &mut st.frames[depth];
        if st.queue.len() != f.seg as usize || !f.is_plain() {
            return false;
        }
        f.seq = seq;
        self.seq = seq;
        sched.budget -= 1;
        sched.steps += 1;
        true
    }
}
