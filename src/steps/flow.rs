//! The engine: one root flow, its strands and levels, and how steps run,
//! complete, unwind and get cancelled. See `docs/architecture.md`.

use crate::error::{codes, Error};
use crate::state::State;
use crate::steps::def::StepDef;
use crate::steps::frame::{Act, Frame, Kind, Queued, Resources, Strand, HANDLED, WAIT};
use crate::steps::promise::Completion;
use crate::steps::scheduler::{FlowKey, Scheduler, BURST};
use std::collections::VecDeque;
use std::sync::Arc;

// A parallel step's branches: starting them, and a branch's end.
mod branches;
pub(crate) use branches::Starting;
// Ending frames and strands: cancel callbacks, timers, tokens, branches.
mod ending;
// Running one step: its callback, a parallel's branches, a loop's start,
// an awaited future's poll, and what follows the callback.
mod exec;
// Loop iterations and the shortcuts that keep their frame.
mod iteration;
// Errors, timeouts and loop control: walking the levels down.
mod unwind;
// Prefetch hints for a flow about to be driven.
mod lookahead;

/// Why a flow is being driven.
pub(crate) enum Resume {
    /// Continue with the strands that are ready.
    Ready,
    /// External completion of a waiting step: `None` for success, whose
    /// args the caller has put in the args register; `Some` for an error.
    Complete {
        strand: u32,
        seq: u32,
        err: Option<Error>,
    },
    /// A step's timeout fired.
    Timeout { strand: u32, seq: u32 },
    /// A step's sleep ended (`Step::sleep`): it succeeds with no args.
    Wake { strand: u32, seq: u32 },
    /// An awaited future was woken.
    Poll { strand: u32, seq: u32 },
    /// Root cancel.
    Cancel,
}

/// A panic that ends the whole flow with this error (raised where the
/// flow cannot go on, e.g. in a cancel callback; `Scheduler::drive` turns
/// it into the flow's result).
pub(crate) struct FlowPanic(pub(crate) Error);

/// A flow's branching: the strands other than the main one (parallel
/// branches) and the queue of strands ready to run. Needed only by
/// parallel steps and by flows that yield, so allocated on first use and
/// kept with the pooled flow; the few other parts a plain flow never needs
/// live here too (`done`, `seq_end`).
#[derive(Default)]
pub(crate) struct Branching {
    /// Branch strands; strand id `n` is `branches[n - 1]`.
    branches: Vec<Strand>,
    free: Vec<u32>,
    /// (strand, its (gen, ticket) when queued, what to do).
    ready: VecDeque<(u32, (u32, u32), Queued)>,
    /// Per strand id (0 = main): bumped when the strand's entry in `ready`
    /// becomes obsolete, so that entry is skipped when popped. Kept here,
    /// not in `Strand`, because only flows with a ready queue need it.
    tickets: Vec<u32>,
    /// Who waits for the result (a promise): kept here, not in `Flow`, so
    /// the flow object of a plain root stays small.
    done: Option<Arc<Completion>>,
    /// After the seqs have wrapped (`Flow::wrapped`): the first seq above
    /// `seq` that a live frame still has (0: none), where `next_seq`
    /// looks again.
    seq_end: u32,
}

/// A pooled flow keeps up to this many branch strands, with their
/// buffers, for the parallel steps of its next use.
const BRANCHES_KEEP: usize = 8;

impl Branching {
    /// Empties the branch strands for the flow's next use, keeping the
    /// first [`BRANCHES_KEEP`] with their small buffers: a flow that runs a
    /// parallel step allocates nothing for its branches once the loop's
    /// flows are warm. Every kept strand is free again, lowest id first.
    fn keep_branches(&mut self) {
        if self.branches.is_empty() {
            // A flow that only yielded or was waited for: nothing to keep.
            return;
        }
        self.branches.truncate(BRANCHES_KEEP);
        for st in &mut self.branches {
            if !st.frames.is_empty() {
                st.frames.clear();
            }
            if !st.queue.is_empty() {
                st.queue.clear();
            }
            st.frames.shrink_to(8);
            st.queue.shrink_to(16);
            st.parent = (0, 0);
            st.live = false;
            st.fresh = false;
            st.gen = st.gen.wrapping_add(1);
        }
        self.free.clear();
        self.free.extend((1..=self.branches.len() as u32).rev());
    }

    fn ticket(&self, sid: u32) -> u32 {
        self.tickets.get(sid as usize).copied().unwrap_or(0)
    }

    fn bump_ticket(&mut self, sid: u32) {
        let i = sid as usize;
        if self.tickets.len() <= i {
            self.tickets.resize(i + 1, 0);
        }
        self.tickets[i] = self.tickets[i].wrapping_add(1);
    }
}

/// One root flow on its loop.
#[derive(Default)]
pub(crate) struct Flow {
    pub key: FlowKey,
    main: Strand,
    branching: Option<Box<Branching>>,
    pub state: State,
    /// The seq of the newest frame ([`next_seq`](Self::next_seq)).
    pub seq: u32,
    /// The seqs have wrapped: `next_seq` takes its slow path, which keeps
    /// its bound in `Branching::seq_end`.
    wrapped: bool,
    /// The main strand has not run yet.
    start: bool,
    /// The flow ended by root cancel (not an error to report).
    canceled: bool,
    /// An entry for this flow is in the loop's queue (the loop core's
    /// `Entry::Engine`).
    pub queued: bool,
}

impl Flow {
    /// Takes every sync hold out of the flow's frames (a flow about to be
    /// leaked after a panicking `Drop` must still give its slots back).
    pub(crate) fn take_holds(&mut self) -> Vec<crate::steps::hold::Hold> {
        fn take(st: &mut Strand, out: &mut Vec<crate::steps::hold::Hold>) {
            for f in &mut st.frames {
                if let Some(r) = f.resources.as_mut().and_then(|x| x.special_mut()) {
                    out.extend(r.in_place.take().map(|(h, _)| h));
                    out.extend(r.holds.drain(..));
                }
            }
        }
        let mut out = Vec::new();
        take(&mut self.main, &mut out);
        if let Some(br) = &mut self.branching {
            for b in &mut br.branches {
                take(b, &mut out);
            }
        }
        out
    }

    #[inline]
    pub(crate) fn init<A: smallvec::Array<Item = StepDef>>(
        &mut self,
        mut steps: smallvec::SmallVec<A>,
        state: State,
    ) {
        let q = &mut self.main.queue;
        if steps.len() == 1 && !steps.spilled() && q.capacity() > 0 {
            // The usual root: one step in place, and a pooled queue with
            // room (empty: the flow was reset). No loop, no reserve: 18
            // instructions less per simple flow.
            if let Some(s) = steps.pop() {
                q.push(s);
            }
            // Empty and inline: it owns nothing, so skip its drop.
            std::mem::forget(steps);
        } else if steps.spilled() && q.capacity() < steps.len() {
            // Adopt the model's heap buffer as the queue.
            steps.reverse();
            *q = steps.into_vec();
        } else {
            // Reuse the pooled queue (exact room for a cold flow). Popping
            // the model's steps pushes them reversed, as the queue wants.
            q.reserve_exact(steps.len());
            while let Some(s) = steps.pop() {
                q.push(s);
            }
            if !steps.spilled() {
                // Empty and inline: it owns nothing, so skip its drop.
                std::mem::forget(steps);
            }
        }
        self.main.live = true;
        self.state.adopt(state);
        self.start = true;
    }

    /// Who waits for the result (set once the flow has its key).
    #[inline]
    pub(crate) fn set_done(&mut self, done: Option<Arc<Completion>>) {
        if done.is_some() {
            self.branching().done = done;
        }
    }

    /// Clears the flow for reuse, keeping allocations.
    #[inline]
    pub(crate) fn reset(&mut self) {
        let m = &mut self.main;
        if !m.frames.is_empty() {
            m.frames.clear();
        }
        if !m.queue.is_empty() {
            m.queue.clear();
        }
        // A pooled flow keeps small buffers only.
        m.frames.shrink_to(8);
        if m.queue.capacity() > 16 {
            m.queue.shrink_to_fit();
        }
        m.parent = (0, 0);
        m.live = false;
        m.fresh = false;
        m.gen = m.gen.wrapping_add(1);
        if let Some(br) = &mut self.branching {
            br.keep_branches();
            br.ready.clear();
            br.done = None;
            br.seq_end = 0;
        }
        self.seq = 0;
        self.wrapped = false;
        self.start = false;
        self.canceled = false;
        self.queued = false;
        // Last, so the flow is reset when a value's Drop panics (raised
        // again for `Scheduler::drive`, which then does not pool the flow).
        if let Some(p) = self.state.clear_catching() {
            std::panic::resume_unwind(p);
        }
    }

    /// Ends every frame of every strand after a panic left the flow
    /// unable to go on: cancel callbacks run, timers, I/O registrations,
    /// external handles and sync slots go back. A panic in here is the
    /// caller's to catch; calling again goes on where it stopped (each
    /// frame is removed before its activity is ended).
    pub(crate) fn teardown(&mut self, sched: &mut Scheduler) {
        if self.main.live || !self.main.frames.is_empty() {
            self.cancel_strand(sched, 0);
        }
        let n = self.branching.as_ref().map_or(0, |s| s.branches.len());
        for b in 1..=n as u32 {
            if !self.st(b).frames.is_empty() {
                self.cancel_strand(sched, b);
            }
        }
    }

    /// True when the flow ended through root cancel.
    pub(crate) fn was_canceled(&self) -> bool {
        self.canceled
    }

    pub(crate) fn has_ready(&self) -> bool {
        self.start || self.branching.as_ref().is_some_and(|s| !s.ready.is_empty())
    }

    /// Who waits for the result.
    pub(crate) fn take_done(&mut self) -> Option<Arc<Completion>> {
        self.branching.as_mut()?.done.take()
    }

    #[inline]
    pub(crate) fn st(&mut self, sid: u32) -> &mut Strand {
        match sid {
            0 => &mut self.main,
            n => &mut self.branching.as_mut().expect("branch strand").branches[n as usize - 1],
        }
    }

    #[inline]
    pub(crate) fn st_get(&self, sid: u32) -> Option<&Strand> {
        match sid {
            0 => Some(&self.main),
            n => self.branching.as_ref()?.branches.get(n as usize - 1),
        }
    }

    pub(super) fn branching(&mut self) -> &mut Branching {
        self.branching.get_or_insert_with(Default::default)
    }

    /// Queues strand `sid` at the back of the ready queue.
    pub(super) fn push_ready(&mut self, sid: u32, act: Queued) {
        let gen = self.st(sid).gen;
        let br = self.branching();
        let mark = (gen, br.ticket(sid));
        br.ready.push_back((sid, mark, act));
    }

    /// Runs until every strand waits, the flow ends, or the burst is spent.
    /// Returns the flow's result when it has ended; on success its args
    /// are left in the args register (moved out only when someone waits
    /// for them).
    #[inline]
    pub(crate) fn drive(
        &mut self,
        sched: &mut Scheduler,
        resume: Resume,
    ) -> Option<Result<(), Error>> {
        sched.budget = BURST;
        if sched.break_args.is_some() {
            sched.break_args = None; // a break's, left by a panic
        }
        // Whatever an earlier activation left in the args register is stale
        // (a successful completion brings its args there).
        if !matches!(resume, Resume::Complete { err: None, .. }) {
            sched.clear_args();
        }
        let first = match resume {
            Resume::Ready if self.start => {
                self.start = false;
                Some((0, Act::Next))
            }
            Resume::Ready => None,
            Resume::Complete { strand, seq, err } => match self.top_waiting(strand, seq) {
                Some(_) => Some((
                    strand,
                    match err {
                        None => {
                            self.pop_frame(sched, strand, false);
                            Act::Next
                        }
                        Some(e) => Act::Fail(e),
                    },
                )),
                None => {
                    sched.clear_args();
                    None
                }
            },
            Resume::Timeout { strand, seq } => {
                let act = self.timeout(sched, strand, seq);
                if act.is_some() {
                    // The strand may have been parked mid-run (step budget):
                    // that continuation is obsolete now. O(1): its ready
                    // entry carries the old ticket and is skipped when
                    // popped (a scan here made a storm of timeouts
                    // quadratic in the number of parked branches).
                    if let Some(br) = &mut self.branching {
                        br.bump_ticket(strand);
                    }
                }
                act.map(|a| (strand, a))
            }
            Resume::Wake { strand, seq } => {
                let wakes = self.top_waiting(strand, seq).is_some() && {
                    let f = self.st(strand).frames.last_mut().expect("the waiting step");
                    f.timer = None; // fired
                                    // A handle of the step that completed it first wins.
                    f.wait.as_ref().is_none_or(|w| w.claim())
                };
                wakes.then(|| {
                    self.pop_frame(sched, strand, false);
                    (strand, Act::Next)
                })
            }
            Resume::Poll { strand, seq } => {
                if self.top_waiting(strand, seq) == Some(Kind::Await) {
                    self.poll_future(sched, strand).map(|a| (strand, a))
                } else {
                    None
                }
            }
            Resume::Cancel => {
                self.cancel_strand(sched, 0);
                self.canceled = true;
                return Some(Err(Error::with_info(codes::CANCELED, "flow cancelled")));
            }
        };
        if let Some((sid, act)) = first {
            // Resuming may already have spent the budget: a frame ended on
            // the way handed a sync slot to a waiter of this loop (see
            // `Scheduler::recycle_resources`), which then goes first.
            let r = if sched.budget == 0 && matches!(act, Act::Next) {
                self.pause(sched, sid, act)
            } else {
                self.run_strand(sched, sid, act)
            };
            if r.is_some() {
                return r;
            }
        }
        while sched.budget > 0 {
            let Some((sid, mark, act)) = self.branching.as_mut().and_then(|s| s.ready.pop_front())
            else {
                break;
            };
            let ticket = self.branching.as_ref().map_or(0, |s| s.ticket(sid));
            match self.st_get(sid) {
                Some(st) if st.live && (st.gen, ticket) == mark => {}
                _ => continue,
            }
            let act = match act {
                Queued::Next(a) => {
                    sched.args = a;
                    Act::Next
                }
                Queued::Fail(e) => Act::Fail(e),
                Queued::Up(e) => Act::Up(e),
            };
            if let Some(r) = self.run_strand(sched, sid, act) {
                return Some(r);
            }
        }
        None
    }

    /// Kind of the top frame of `strand` if it is the waiting step `seq`.
    fn top_waiting(&self, strand: u32, seq: u32) -> Option<Kind> {
        let st = self.st_get(strand)?;
        let f = st.frames.last()?;
        (st.live && f.seq == seq && f.flags & WAIT != 0 && f.flags & HANDLED == 0).then_some(f.kind)
    }

    /// Runs one strand until it waits or ends; the flow's result when the
    /// main strand ends (success args in the register).
    fn run_strand(
        &mut self,
        sched: &mut Scheduler,
        sid: u32,
        mut act: Act,
    ) -> Option<Result<(), Error>> {
        loop {
            let next = match act {
                Act::Next => self.next(sched, sid),
                Act::Fail(e) => self.unwind(sched, sid, e, true),
                Act::Up(e) => self.unwind(sched, sid, e, false),
                Act::End(r) => return Some(r),
            };
            match next {
                None => return None,
                Some(a) => act = a,
            }
            let st = self.st(sid);
            // Errors are handled at once; only going on to a next step waits.
            // A branch with nothing left (no level, no step) just ends: its
            // siblings started already (they were queued with it), and its
            // end only counts it done.
            if st.fresh && st.live && matches!(act, Act::Next) {
                st.fresh = false;
                if !(st.frames.is_empty() && st.queue.is_empty()) {
                    let a = std::mem::take(&mut sched.args);
                    self.push_ready(sid, Queued::Next(a));
                    return None;
                }
            }
            // Only going on to a next step waits for the next activation:
            // an error is unwound at once, since the frame that raised it
            // still waits (its token, timer, future) until then.
            if sched.budget == 0 && matches!(act, Act::Next) {
                return self.pause(sched, sid, act);
            }
        }
    }

    /// Parks strand `sid` in the ready queue with what it was about to do
    /// (the budget is spent); an `End` is the flow's result. Callers park
    /// only `Act::Next`: errors are unwound at once.
    ///
    /// A next step goes to the back, behind the other ready strands: a
    /// parallel branch that never waits would otherwise be taken first at
    /// every activation and starve its siblings (a busy loop waiting for a
    /// sibling's flag would never end).
    fn pause(&mut self, sched: &mut Scheduler, sid: u32, act: Act) -> Option<Result<(), Error>> {
        let q = match act {
            Act::Next => Queued::Next(std::mem::take(&mut sched.args)),
            Act::Fail(e) => Queued::Fail(e),
            Act::Up(e) => Queued::Up(e),
            Act::End(r) => return Some(r),
        };
        self.push_ready(sid, q);
        None
    }

    /// Runs the next step of the top level, or completes the top frame.
    fn next(&mut self, sched: &mut Scheduler, sid: u32) -> Option<Act> {
        let st = self.st(sid);
        let (seg, kind) = match st.frames.last() {
            Some(f) => (f.seg as usize, Some(f.kind)),
            None => (0, None),
        };
        if st.queue.len() > seg {
            let def = st.queue.pop().expect("len checked");
            return self.exec(sched, sid, def);
        }
        match kind {
            None => self.strand_done(sched, sid, Ok(())),
            Some(Kind::Loop) => self.iterate(sched, sid),
            Some(_) => {
                self.pop_frame(sched, sid, false);
                Some(Act::Next)
            }
        }
    }

    /// The seq for the next frame (or a frame's next iteration); the
    /// caller stores it in `seq` when it uses it. Seqs are never 0 (that
    /// marks "no parent" in a strand) and never one a live frame has: a
    /// frame is found by its seq (`find_frame`, timeouts, completions).
    #[inline(always)]
    pub(crate) fn next_seq(&mut self) -> u32 {
        match self.seq.checked_add(1) {
            Some(s) if !self.wrapped => s,
            _ => self.next_seq_wrapped(),
        }
    }

    /// [`next_seq`](Self::next_seq) once the u32 seqs have run out (a flow
    /// that made 2^32 frames, such as a server's long loop) or reached a
    /// seq a live frame kept from before: the next seq, going round past
    /// 0, that no live frame has, and where the next such one is.
    #[cold]
    #[inline(never)]
    fn next_seq_wrapped(&mut self) -> u32 {
        if let Some(s) = self.seq.checked_add(1) {
            // `seq_end` 0 (nothing reserved) wraps to the largest u32.
            if self.wrapped && s <= self.branching().seq_end.wrapping_sub(1) {
                return s;
            }
        }
        let mut live: Vec<u32> = self.main.frames.iter().map(|f| f.seq).collect();
        if let Some(br) = &self.branching {
            for b in br.branches.iter().filter(|b| b.live) {
                live.extend(b.frames.iter().map(|f| f.seq));
            }
        }
        live.sort_unstable();
        let mut s = self.seq.checked_add(1).unwrap_or(1);
        while live.binary_search(&s).is_ok() {
            s = s.checked_add(1).unwrap_or(1);
        }
        let i = live.partition_point(|&x| x <= s);
        self.branching().seq_end = live.get(i).copied().unwrap_or(0);
        self.wrapped = true;
        s
    }

    #[inline(always)]
    pub(crate) fn push_frame(
        &mut self,
        sid: u32,
        def_catch: Option<crate::steps::def::Catch>,
        name: crate::steps::def::NameFn,
        kind: Kind,
    ) {
        self.seq = self.next_seq();
        let seq = self.seq;
        let st = self.st(sid);
        let cap = st.frames.capacity();
        if cap < 4 && st.frames.len() == cap {
            // A flow waiting at level 0 keeps one frame, one waiting in a
            // step of a loop's body two (the loop's and the waiting
            // step's: the body has none), three or four under more levels:
            // grow one at a time to four, then double (to eight, not six).
            st.frames.reserve_exact(1);
        }
        st.frames.push(Frame {
            seg: st.queue.len() as u32,
            seq,
            kind,
            flags: 0,
            catch: def_catch,
            name,
            wait: None,
            timer: None,
            resources: None,
        });
    }

    /// Values allocated with `Step::stack` in frame `seq` of `sid` or an ancestor.
    pub(crate) fn find_frame(&mut self, sid: u32, seq: u32) -> Option<&mut Frame> {
        let mut cur = sid;
        loop {
            let st = self.st_get(cur)?;
            match st.frames.iter().rposition(|f| f.seq == seq) {
                Some(i) => return self.st(cur).frames.get_mut(i),
                None => cur = st.parent()?.0,
            }
        }
    }

    /// The `Resources` of frame `depth` of strand `sid`, from the loop's pool
    /// on first use.
    #[allow(clippy::vec_box)] // the pool moves boxes in and out whole
    pub(crate) fn resources_of(
        &mut self,
        pool: &mut Vec<Box<Resources>>,
        sid: u32,
        depth: usize,
    ) -> &mut Resources {
        self.st(sid).frames[depth].resources_in(pool)
    }
}

#[cfg(test)]
mod tests;
