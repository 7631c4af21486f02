//! A parallel step's branches: starting them, and a branch's end.
//!
//! A parallel step's branches all start together (spec 1.4): each runs
//! its first step in order, behind the strands of the flow that were ready
//! before, and a branch with more to do (sub-steps, a wait) goes on after
//! its siblings started. When no other strand of the flow is ready, that
//! order is the same as running each branch's first step right away,
//! inside the parallel step's own activation, so the branches start in
//! place then: a branch that completes at once never enters the ready
//! queue, and when every branch completed while they were started, the
//! parallel step completes in place too and its strand goes on with the
//! next step, with no queue entry at all. Otherwise (other strands ready,
//! or a parallel started while another starts its branches) they queue.

use super::Flow;
use crate::args::Args;
use crate::error::Error;
use crate::steps::def::StepDef;
use crate::steps::frame::{Act, Queued, Strand};
use crate::steps::scheduler::Scheduler;

/// The parallel step whose branches are being started in place, and how
/// it came out if all its branches ended meanwhile (the loop's, since a
/// loop drives one flow at a time).
#[derive(Default)]
pub(crate) struct Starting {
    /// (strand, seq) of the parallel frame; seq 0 (no frame has it): none.
    at: (u32, u32),
    /// Set by the last branch to end (`Ok`) or the first to fail.
    outcome: Option<Result<(), Error>>,
}

impl Flow {
    /// Makes a strand for each branch of the parallel frame `pseq` on top
    /// of `sid`, with their (strand, gen) in `ids`. True when the caller is
    /// to start them in place ([`run_branches`](Self::run_branches), once
    /// the frame holds the ids); else they are queued already.
    pub(super) fn start_branches(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        pseq: u32,
        branches: &mut Vec<StepDef>,
        ids: &mut Vec<(u32, u32)>,
    ) -> bool {
        let inline = sched.starting.at.1 == 0
            && self.branching.as_ref().is_none_or(|br| br.ready.is_empty());
        for b in branches.drain(..) {
            let bid = self.new_strand(sid, pseq);
            let st = self.st(bid);
            st.queue.push(b);
            ids.push((bid, st.gen));
            if !inline {
                self.push_ready(bid, Queued::Next(Args::new()));
            }
        }
        inline
    }

    /// Runs the first step of each branch of the parallel frame `pseq` on
    /// `sid`, in order, after [`start_branches`](Self::start_branches)
    /// made them (in place). `Some` when the parallel step is over.
    pub(super) fn run_branches(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        pseq: u32,
    ) -> Option<Act> {
        sched.starting = Starting {
            at: (sid, pseq),
            outcome: None,
        };
        let mut i = 0;
        while sched.starting.outcome.is_none() {
            // The ids stay in the parallel frame (a failing branch takes
            // them to cancel its siblings): read the next one there.
            let Some((b, g)) = self.par_id(sid, pseq, i) else {
                break;
            };
            i += 1;
            let st = self.st(b);
            if st.live && st.gen == g {
                sched.clear_args();
                // A branch's strand never ends the flow: it has a parent.
                let _ = self.run_strand(sched, b, Act::Next);
            }
        }
        let outcome = std::mem::take(&mut sched.starting).outcome;
        match outcome? {
            Ok(()) => Some(Act::Next),
            Err(e) => Some(Act::Up(e)),
        }
    }

    /// Branch `i` of the parallel frame `pseq` on top of `sid`.
    fn par_id(&self, sid: u32, pseq: u32, i: usize) -> Option<(u32, u32)> {
        let f = self.st_get(sid)?.frames.last().filter(|f| f.seq == pseq)?;
        f.resources
            .as_ref()?
            .special
            .as_ref()?
            .par_ids
            .get(i)
            .copied()
    }

    pub(super) fn new_strand(&mut self, parent: u32, pseq: u32) -> u32 {
        let br = self.branching();
        let id = match br.free.pop() {
            Some(id) => id,
            None => {
                br.branches.push(Strand::default());
                br.branches.len() as u32
            }
        };
        let st = self.st(id);
        st.live = true;
        st.fresh = true;
        st.parent = (parent, pseq);
        id
    }

    /// Cancels the branches of `ids` (strand, generation) still running.
    pub(super) fn cancel_branches(&mut self, sched: &mut Scheduler, ids: &[(u32, u32)]) {
        for &(b, g) in ids {
            let st = self.st(b);
            if st.live && st.gen == g {
                self.cancel_strand(sched, b);
            }
        }
    }

    /// [`strand_done`](Self::strand_done) for a parallel branch.
    pub(super) fn branch_done(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        res: Result<(), Error>,
    ) -> Option<Act> {
        let Some((psid, pseq)) = self.st(sid).parent() else {
            self.release_strand(sid);
            return Some(Act::End(res));
        };
        self.release_strand(sid);
        sched.clear_args();
        let pst = self.st(psid);
        let pf = pst.frames.last_mut().filter(|f| f.seq == pseq)?;
        let special = pf
            .resources
            .as_mut()
            .and_then(|x| x.special_mut())
            .filter(|r| r.par.is_some())?;
        let outcome = match res {
            Ok(_) => {
                let par = special.par.as_mut().expect("checked");
                par.remaining -= 1;
                if par.remaining > 0 {
                    return None;
                }
                self.pop_frame(sched, psid, false);
                Ok(())
            }
            Err(e) => {
                let branches = std::mem::take(&mut special.par_ids);
                self.cancel_branches(sched, &branches);
                Err(e)
            }
        };
        if sched.starting.at == (psid, pseq) {
            // Its branches are being started: the parallel step goes on in
            // place (`run_branches`).
            sched.starting.outcome = Some(outcome);
        } else {
            self.push_ready(
                psid,
                match outcome {
                    Ok(()) => Queued::Next(Args::new()),
                    Err(e) => Queued::Up(e),
                },
            );
        }
        None
    }
}
