//! Running one step ([`Flow::exec`]): its callback (with the frame
//! deferred until something needs it), a parallel's branches, a loop's
//! first iteration, an awaited future's poll, and what follows the
//! callback (`after_call`, `after_frameless`).

use super::Flow;
use crate::error::Error;
use crate::steps::def::{Catch, Exec, StepDef};
use crate::steps::frame::{Act, Frame, Kind, ParState, WAIT};
use crate::steps::future_wake::FutureWake;
use crate::steps::scheduler::Scheduler;
use crate::steps::step::{Outcome, Pending, Step};
use crate::tool::panic_error;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll, Waker};

/// What an execute callback's run comes to: a recorded misuse or
/// `error()` (which fails the step even if the callback ignored the
/// returned `Err`), else a panic as `InternalError`, else what it returned.
#[inline(always)]
pub(super) fn call_result(
    r: Result<crate::error::StepResult, Box<dyn Any + Send>>,
    fails_with: Option<Error>,
) -> crate::error::StepResult {
    match (r, fails_with) {
        (_, Some(e)) => Err(e),
        (Ok(r), None) => r,
        (Err(p), None) => Err(panic_error("step", p)),
    }
}

impl Flow {
    #[inline(always)]
    pub(super) fn exec(&mut self, sched: &mut Scheduler, sid: u32, def: StepDef) -> Option<Act> {
        sched.steps += 1;
        sched.budget = sched.budget.saturating_sub(1);
        let StepDef { exec, catch } = def;
        if !matches!(exec, Exec::Fn(_)) {
            // Only execute callbacks take the previous step's args.
            sched.clear_args();
        }
        match exec {
            Exec::Fn(f) => {
                // The frame is pushed only if the callback needs it (see
                // `Step::frame_here`).
                let frame = Pending {
                    catch,
                    name: f.name(),
                };
                let mut step = Step::deferred(sched, self, sid, frame);
                let r = catch_unwind(AssertUnwindSafe(|| f.call(&mut step)));
                match step.into_parts() {
                    (out, None) => self.after_call(sched, sid, r, out),
                    (out, Some(frame)) => self.after_frameless(sched, sid, r, out, frame),
                }
            }
            Exec::Parallel(mut branches) => {
                self.push_frame(sid, catch, crate::steps::def::parallel_name, Kind::Parallel);
                if branches.is_empty() {
                    crate::steps::def::recycle_branch_list(branches);
                    self.pop_frame(sched, sid, false);
                    return Some(Act::Next);
                }
                let pseq = self.seq;
                // The frame's (recycled) list of branch ids, out while the
                // strands are made.
                let mut ids = std::mem::take(
                    &mut self
                        .top(sid)
                        .resources_in(&mut sched.spare_resources)
                        .special()
                        .par_ids,
                );
                let inline = self.start_branches(sched, sid, pseq, &mut branches, &mut ids);
                crate::steps::def::recycle_branch_list(branches);
                let f = self.top(sid);
                f.flags |= WAIT;
                let special = f.resources_in(&mut sched.spare_resources).special();
                special.par = Some(ParState {
                    remaining: ids.len() as u32,
                });
                special.par_ids = ids;
                if inline {
                    self.run_branches(sched, sid, pseq)
                } else {
                    None
                }
            }
            // (Rewrapped rather than bound whole: a binding of the whole
            // `exec` makes every arm copy it first.)
            Exec::Loop(iter) => self.start_loop(sched, sid, catch, Exec::Loop(iter)),
            Exec::LabeledLoop(b) => self.start_loop(sched, sid, catch, Exec::LabeledLoop(b)),
            Exec::Taken => {
                // Only ever below a loop frame's segment, never run.
                debug_assert!(false, "a running loop's step was run");
                Some(Act::Next)
            }
            Exec::Await(fut, name) => {
                self.push_frame(sid, catch, name, Kind::Await);
                let key = self.key;
                let f = self.top(sid);
                f.flags |= WAIT;
                let seq = f.seq;
                let special = f.resources_in(&mut sched.spare_resources).special();
                special.fut = Some(fut);
                special.wake = Some(FutureWake::reuse(
                    special.wake.take(),
                    &sched.core.inbox,
                    key,
                    sid,
                    seq,
                ));
                self.poll_future(sched, sid)
            }
        }
    }

    /// Starts a loop: its step (`exec`, the driver and the label) goes back
    /// where it was taken from, the top of the queue, and stays there
    /// while the loop runs, just below the loop frame's segment (a loop
    /// frame holds nothing else: no `Resources`). Popping the loop frame
    /// drops it (`pop_frame`). Then the first iteration runs.
    fn start_loop(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        catch: Option<Catch>,
        exec: Exec,
    ) -> Option<Act> {
        let def = StepDef { exec, catch: None };
        let name = def.name();
        // No reallocation: the step was just popped from this queue.
        self.st(sid).queue.push(def);
        self.push_frame(sid, catch, name, Kind::Loop);
        self.iterate(sched, sid)
    }

    pub(super) fn top(&mut self, sid: u32) -> &mut Frame {
        self.st(sid).frames.last_mut().expect("a frame")
    }

    pub(super) fn poll_future(&mut self, sched: &mut Scheduler, sid: u32) -> Option<Act> {
        let special = self.top(sid).resources.as_mut()?.special_mut()?;
        let (fut, wake) = (special.fut.as_mut()?, special.wake.as_ref()?);
        wake.rearm();
        let waker = Waker::from(wake.clone());
        let mut cx = Context::from_waker(&waker);
        let r = catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
        match r {
            Ok(Poll::Pending) => None,
            Ok(Poll::Ready(Ok(a))) => {
                self.pop_frame(sched, sid, false);
                sched.args = a;
                Some(Act::Next)
            }
            Ok(Poll::Ready(Err(e))) => Some(Act::Fail(e)),
            Err(p) => Some(Act::Fail(panic_error("awaited future", p))),
        }
    }

    /// [`after_call`](Self::after_call) for a step whose frame was never
    /// pushed: it added nothing and does not wait, so it has succeeded
    /// (its args, if any, in the register) unless it failed, and then its
    /// frame is pushed so the error is raised there, as if it had been
    /// there all along.
    #[inline(always)]
    fn after_frameless(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        r: Result<crate::error::StepResult, Box<dyn Any + Send>>,
        out: Outcome,
        frame: Pending,
    ) -> Option<Act> {
        // Adding sub-steps or waiting for I/O pushes the frame first: a
        // path that forgot would run its sub-steps on the parent's level.
        assert!(
            !out.added && !out.io_wait,
            "a step added sub-steps or waits without its frame"
        );
        match call_result(r, out.fails_with) {
            Ok(()) => {
                if !out.succeeded {
                    // Implicit success: the next step gets no args (spec 1.6).
                    sched.clear_args();
                }
                // A `sync` section done without a frame gave its lock back
                // as it returned (see `sync::in_place`).
                debug_assert!(sched.section.is_none() && sched.section_inner.is_none());
                drop(frame);
                Some(Act::Next)
            }
            Err(e) => {
                sched.clear_args();
                self.push_frame(sid, frame.catch, frame.name, Kind::Step);
                if sched.section.is_some() {
                    // A failed `sync` section unwinds holding its lock.
                    crate::steps::hold::adopt_section(sched, self, sid);
                }
                Some(Act::Fail(e))
            }
        }
    }

    /// Decides what follows a step's execute callback.
    #[inline(always)]
    pub(super) fn after_call(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        r: Result<crate::error::StepResult, Box<dyn Any + Send>>,
        out: Outcome,
    ) -> Option<Act> {
        let r = call_result(r, out.fails_with);
        let st = self.st(sid);
        let top = st.frames.last_mut().expect("a frame");
        let mut r = r;
        if out.added {
            st.queue[top.seg as usize..].reverse();
        }
        // Sub-steps or success() complete this step: a wait for an
        // external event is over, and later completions are refused. One
        // already accepted would be a second completion, as success()
        // after add() is.
        if out.added || out.succeeded {
            if let Some(w) = top.wait.take() {
                if !w.claim() && r.is_ok() {
                    r = Err(Error::internal(if out.added {
                        "an external completion and add() in the same step: \
                         sub-steps complete this step"
                    } else {
                        "an external completion and success() in the same step: \
                         a step completes once"
                    }));
                }
                sched.release_token(w);
            }
        }
        match r {
            Err(e) => {
                sched.clear_args();
                Some(Act::Fail(e))
            }
            Ok(()) if out.added => {
                if !out.forward {
                    sched.clear_args();
                }
                Some(Act::Next)
            }
            Ok(()) if out.succeeded => {
                self.pop_frame(sched, sid, false);
                Some(Act::Next)
            }
            Ok(()) if top.flags & WAIT != 0 => {
                sched.clear_args();
                None
            }
            Ok(()) => {
                // Implicit success: the next step gets no args (spec 1.6).
                sched.clear_args();
                self.pop_frame(sched, sid, false);
                Some(Act::Next)
            }
        }
    }
}
