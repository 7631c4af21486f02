//! The reference interpreter: a plain model of FTN12 semantics (spec
//! sections cited inline), with the engine's documented choices where the
//! spec leaves room (each marked "engine choice").
//!
//! A flow is a set of *strands* (the root line and one per parallel
//! branch). A strand is a stack of frames, one per executing step (spec
//! 1.1 levels); each frame owns the queue of sub-steps its callback added.
//! Nothing here is optimised: frames are looked up by id, args
//! travel with each transition, and every step gets its own frame.
//!
//! The loop around the flow is modelled as `TestTool` documents it (the
//! passes of `AsyncTool`): one event at a time, in turns. A turn moves the
//! timers that are due to the back of the loop's queue, runs the messages
//! that were waiting when it began (external completions and cancels are
//! messages), all of them, then those sent meanwhile, batch after batch,
//! until a batch finds none or `DRAIN_MAX` have run (or the first batch,
//! if it was longer), then every entry that was queued
//! before those messages ran; what the turn queues, and the messages past
//! the bound or sent while its entries run, wait for the next turn. When
//! no turn finds anything, the clock jumps to the next timer.
//! Timers are ordered by (time, creation order). The flow runs one
//! *activation* per event: the event's own transition, then the strands
//! that are ready, in FIFO order, until all wait or the activation's step
//! budget (1024, engine choice) is spent; then the flow yields and goes to
//! the back of the loop's queue.

use super::program::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;

pub const INTERNAL: &str = "InternalError";
pub const TIMEOUT: &str = "Timeout";
pub const LOOP_BREAK: &str = "LoopBreak";
pub const LOOP_CONT: &str = "LoopCont";
pub const CANCELED: &str = "Canceled";

/// One observable event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    /// An execute callback was entered with these args (loop bodies: the
    /// iteration index, or index and item) at virtual time `at` (ms).
    Enter { id: Id, args: Vec<i64>, at: u64 },
    /// An error handler was entered with this error code.
    Handler { id: Id, code: String, at: u64 },
    /// A cancel callback ran.
    Cancel { id: Id },
    /// An external completion was attempted: accepted or refused.
    Ext { id: Id, accepted: bool },
}

impl fmt::Display for Ev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ev::Enter { id, args, at } => write!(f, "enter {id} {args:?} @{at}"),
            Ev::Handler { id, code, at } => write!(f, "handler {id} {code} @{at}"),
            Ev::Cancel { id } => write!(f, "cancel {id}"),
            Ev::Ext { id, accepted } => {
                write!(
                    f,
                    "ext {id} {}",
                    if *accepted { "accepted" } else { "refused" }
                )
            }
        }
    }
}

/// How the root ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Res {
    Ok(Vec<i64>),
    Err(String),
    /// Still waiting when nothing is left to happen.
    Hung,
}

/// A run: the trace, the root's result with the time it was known, and
/// the clock once every event has run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub trace: Vec<Ev>,
    pub result: Res,
    pub done_at: u64,
    pub clock: u64,
}

impl Outcome {
    /// One line per event, then the result and the clock.
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self.trace.iter().map(ToString::to_string).collect();
        v.push(match &self.result {
            Res::Ok(a) => format!("result ok {a:?} @{}", self.done_at),
            Res::Err(c) => format!("result error {c} @{}", self.done_at),
            Res::Hung => format!("result hung @{}", self.done_at),
        });
        v.push(format!("clock {}", self.clock));
        v
    }
}

/// What the model reports besides the outcome.
#[derive(Clone, Debug)]
pub struct Report {
    pub outcome: Outcome,
    /// The program ran more than [`STEP_LIMIT`] steps: not comparable.
    pub aborted: bool,
    /// Activations that ended with their step budget spent.
    pub yields: u64,
    /// External completions made inside the waiting step's callback.
    pub sync_completions: u64,
}

/// Steps a program may run in all (long loops nested in long loops are
/// cut short: their outcome is not compared).
pub const STEP_LIMIT: u64 = 30_000;

/// Steps one activation of a flow may run before it yields (engine
/// choice: `BURST`, documented in docs/architecture.md, The loop).
pub const BURST: u32 = 1024;

/// Runs `prog` in the model.
pub fn run(prog: &Program) -> Report {
    let mut m = Model {
        now: 0,
        order: 0,
        tasks: BTreeMap::new(),
        pending: BTreeSet::new(),
        queue: VecDeque::new(),
        msgs: VecDeque::new(),
        turn: None,
        strands: Vec::new(),
        where_is: HashMap::new(),
        ready: VecDeque::new(),
        start: true,
        queued: true,
        budget: 0,
        steps: 0,
        aborted: false,
        trace: Vec::new(),
        result: None,
        uid: 0,
        yields: 0,
        sync_completions: 0,
    };
    // The root cancel is a deferred callback created before the flow
    // starts: first among the timers of its instant.
    if let Some(t) = prog.cancel_at {
        m.add_task(t, Task::Cancel);
    }
    // execute(): the flow is queued on the loop; its level-0 steps run on
    // the first turn. A level-0 loop is added by a step (`AsyncSteps::loop_`
    // etc. wrap it in one).
    m.strands.push(Strand {
        frames: Vec::new(),
        base: prog
            .root
            .iter()
            .map(|n| match n {
                Node::Loop { .. } => Pending::RootLoop(n),
                n => Pending::Node(n, 0),
            })
            .collect(),
        parent: None,
        live: true,
        fresh: false,
    });
    m.queue.push_back(Entry::Flow);
    while !m.aborted && m.run_one() {}
    let (result, done_at) = m.result.clone().unwrap_or((Res::Hung, m.now));
    Report {
        outcome: Outcome {
            trace: m.trace,
            result,
            done_at,
            clock: m.now,
        },
        aborted: m.aborted,
        yields: m.yields,
        sync_completions: m.sync_completions,
    }
}

// ------------------------------------------------------------------ state

type TimerKey = (u64, u64);

/// A deferred callback (or a step's timeout) on the loop.
enum Task<'p> {
    /// The test's root cancel.
    Cancel,
    Timeout {
        frame: u64,
    },
    /// A deferred external completion.
    Ext {
        frame: u64,
        id: Id,
        result: &'p Result<Vec<i32>, Code>,
    },
}

/// A message to the loop (processed before anything else).
enum Msg {
    Complete {
        frame: u64,
        result: Result<Vec<i64>, String>,
    },
    Cancel,
}

/// An entry of the loop's queue.
enum Entry {
    /// The flow has ready strands (or has not started).
    Flow,
    Task(TimerKey),
}

/// Why the flow runs.
enum Resume {
    Ready,
    Complete {
        frame: u64,
        result: Result<Vec<i64>, String>,
    },
    Timeout {
        key: TimerKey,
        frame: u64,
    },
    Cancel,
}

/// Loop control carried by an error (spec 2.2.4 break/continue "raise a
/// special exception").
#[derive(Clone, Debug)]
enum Ctl {
    Break(Option<Label>),
    Continue(Option<Label>),
}

#[derive(Clone, Debug)]
struct Err {
    code: String,
    ctl: Option<Ctl>,
}

fn plain(code: &str) -> Err {
    Err {
        code: code.to_string(),
        ctl: None,
    }
}

fn control(c: Ctl) -> Err {
    let code = match c {
        Ctl::Break(_) => LOOP_BREAK,
        Ctl::Continue(_) => LOOP_CONT,
    };
    Err {
        code: code.to_string(),
        ctl: Some(c),
    }
}

/// What a strand does next.
enum Act {
    /// Go on with the next step; the args are the previous step's result.
    Next(Vec<i64>),
    /// Raise at the top frame (which raised it).
    Fail(Err),
    /// The error of a failed parallel branch, raised at the parallel frame.
    Up(Err),
}

/// A queued step and the iteration context it was created in.
#[derive(Clone, Copy)]
enum Pending<'p> {
    Node(&'p Node, usize),
    Branch(&'p Branch, usize),
    /// A level-0 loop: a step that adds it.
    RootLoop(&'p Node),
}

enum Kind<'p> {
    Step,
    Par {
        branches: Vec<usize>,
        remaining: usize,
    },
    Loop {
        kind: &'p LoopKind,
        label: Option<Label>,
        body: &'p StepSpec,
        /// Iterations started so far.
        next: usize,
    },
}

struct Frame<'p> {
    uid: u64,
    kind: Kind<'p>,
    /// Sub-steps added by the callback (or by the handler), not run yet.
    queue: VecDeque<Pending<'p>>,
    /// The error handler, until it is used (it never runs twice, 1.2.1).
    handler: Option<(&'p Handler, usize)>,
    /// The cancel callback, until it runs or the step's activity ends.
    cancel: Option<Id>,
    timer: Option<TimerKey>,
    /// No implicit success (setTimeout/setCancel/waitExternal, 1.6).
    waiting: bool,
    /// waitExternal() was called: `Some(claimed)`, where `claimed` means
    /// an external completion was accepted (and is on its way).
    token: Option<bool>,
}

struct Strand<'p> {
    frames: Vec<Frame<'p>>,
    /// Level-0 steps of this strand (the root's, or the branch step).
    base: VecDeque<Pending<'p>>,
    /// For a branch: (parent strand, uid of the parallel frame).
    parent: Option<(usize, u64)>,
    live: bool,
    /// A new branch that has not yet gone on after its first step.
    fresh: bool,
}

/// The result of running a callback.
struct Call {
    res: Result<Option<Vec<i64>>, Err>,
    added: bool,
}

/// At most this many messages run in one turn, or the first batch whole
/// if it is longer (engine choice: the loop's `DRAIN_MAX`).
const DRAIN_MAX: usize = 64;

/// What is left of a turn of the loop.
struct Turn {
    /// Messages of the current batch not run yet.
    batch: usize,
    /// Messages the turn has run.
    ran: usize,
    /// How many the turn may run: `DRAIN_MAX`, or its first batch.
    limit: usize,
    /// `ran` when the current batch was taken.
    batch_start: usize,
    /// The messages of the turn are over.
    msgs_done: bool,
    /// Queue entries that were waiting when the turn began, not looked at
    /// yet.
    entries: usize,
}

struct Model<'p> {
    // The loop.
    now: u64,
    order: u64,
    /// Scheduled callbacks still to run (cancelled ones are removed).
    tasks: BTreeMap<TimerKey, Task<'p>>,
    /// Those of `tasks` not yet due (not yet moved to `queue`).
    pending: BTreeSet<TimerKey>,
    queue: VecDeque<Entry>,
    msgs: VecDeque<Msg>,
    /// The current turn; `None` between turns.
    turn: Option<Turn>,
    // The flow.
    strands: Vec<Strand<'p>>,
    /// Frame uid -> strand.
    where_is: HashMap<u64, usize>,
    ready: VecDeque<(usize, Act)>,
    start: bool,
    /// An `Entry::Flow` is in the loop's queue.
    queued: bool,
    budget: u32,
    steps: u64,
    aborted: bool,
    trace: Vec<Ev>,
    result: Option<(Res, u64)>,
    uid: u64,
    yields: u64,
    sync_completions: u64,
}

fn ints(v: &[i32]) -> Vec<i64> {
    v.iter().map(|&x| i64::from(x)).collect()
}

impl<'p> Model<'p> {
    // -------------------------------------------------------------- the loop

    fn add_task(&mut self, at: u64, t: Task<'p>) -> TimerKey {
        self.order += 1;
        let key = (at, self.order);
        self.tasks.insert(key, t);
        self.pending.insert(key);
        key
    }

    fn cancel_task(&mut self, key: TimerKey) {
        self.tasks.remove(&key);
        self.pending.remove(&key);
    }

    /// One event (`TestTool::run_one`); false when nothing is left.
    fn run_one(&mut self) -> bool {
        if self.run_ready_one() {
            return true;
        }
        let Some(&(at, _)) = self.pending.first() else {
            return false;
        };
        self.now = at;
        self.run_ready_one()
    }

    /// One event due now: the rest of the current turn, else a new turn
    /// (due timers to the queue, then the messages waiting and those sent
    /// meanwhile, batch after batch, up to `DRAIN_MAX` (or the first batch
    /// if longer), then the entries
    /// queued before them).
    fn run_ready_one(&mut self) -> bool {
        for _ in 0..2 {
            if self.turn.is_none() {
                self.fire_due();
                self.turn = Some(Turn {
                    batch: self.msgs.len(),
                    ran: 0,
                    limit: DRAIN_MAX.max(self.msgs.len()),
                    batch_start: 0,
                    msgs_done: false,
                    entries: self.queue.len(),
                });
            }
            let queued = self.msgs.len();
            let t = self.turn.as_mut().expect("a turn");
            while !t.msgs_done {
                if t.ran >= t.limit {
                    t.msgs_done = true;
                } else if t.batch > 0 {
                    t.batch -= 1;
                    t.ran += 1;
                    self.run_msg();
                    return true;
                } else if t.ran == t.batch_start {
                    // A batch that found nothing.
                    t.msgs_done = true;
                } else {
                    t.batch = queued;
                    t.batch_start = t.ran;
                }
            }
            while self.turn.as_ref().expect("a turn").entries > 0 {
                self.turn.as_mut().expect("a turn").entries -= 1;
                if self.run_front() {
                    return true;
                }
            }
            self.turn = None;
        }
        false
    }

    /// Runs the first message.
    fn run_msg(&mut self) {
        match self.msgs.pop_front().expect("a message of the turn") {
            Msg::Complete { frame, result } => self.drive(Resume::Complete { frame, result }),
            Msg::Cancel => self.drive(Resume::Cancel),
        }
    }

    /// Moves the timers that are due to the back of the queue, in order.
    fn fire_due(&mut self) {
        while let Some(&key) = self.pending.first() {
            if key.0 > self.now {
                break;
            }
            self.pending.remove(&key);
            self.queue.push_back(Entry::Task(key));
        }
    }

    /// Runs the first queue entry; false when there is none or it is dead
    /// (a task cancelled after it fell due, the flow's entry after it
    /// ended).
    fn run_front(&mut self) -> bool {
        if let Some(e) = self.queue.pop_front() {
            match e {
                // An entry of a flow that ended while it was queued is dead.
                Entry::Flow if self.result.is_some() => return false,
                Entry::Flow => self.drive(Resume::Ready),
                Entry::Task(key) => {
                    let Some(t) = self.tasks.remove(&key) else {
                        return false;
                    };
                    match t {
                        Task::Cancel => self.msgs.push_back(Msg::Cancel),
                        Task::Timeout { frame } => self.drive(Resume::Timeout { key, frame }),
                        Task::Ext { frame, id, result } => {
                            let result = match result {
                                Ok(a) => Ok(ints(a)),
                                Err(c) => Err(c.name().to_string()),
                            };
                            self.complete_external(frame, id, result);
                        }
                    }
                }
            }
            return true;
        }
        false
    }

    /// An external `success()`/`error()` (2.2.2, 1.3): accepted only while
    /// the step waits (not while sub-steps it added run, spec 1) and no
    /// completion was accepted before; it reaches the flow as a message
    /// (engine choice: never inside a running callback).
    fn complete_external(&mut self, uid: u64, id: Id, result: Result<Vec<i64>, String>) {
        let open = match self.find(uid) {
            Some((sid, k)) if self.result.is_none() => {
                let running_sub_steps = k + 1 < self.strands[sid].frames.len();
                let mut open = self.strands[sid].frames[k].token == Some(false);
                if open && running_sub_steps {
                    open = false;
                }
                if open {
                    self.strands[sid].frames[k].token = Some(true);
                }
                open
            }
            _ => false,
        };
        self.trace.push(Ev::Ext { id, accepted: open });
        if open {
            self.msgs.push_back(Msg::Complete { frame: uid, result });
        }
    }

    // -------------------------------------------------------------- the flow

    /// One activation: the event's own transition, then the ready strands
    /// while the step budget lasts; the flow goes back to the loop's queue
    /// when strands are still ready.
    fn drive(&mut self, r: Resume) {
        if self.result.is_some() {
            return;
        }
        if matches!(r, Resume::Ready) {
            self.queued = false;
        }
        self.budget = BURST;
        match r {
            Resume::Ready => {
                if self.start {
                    self.start = false;
                    self.run_strand(0, Act::Next(vec![]));
                }
            }
            // Applied only to the step still waiting on top of its strand.
            Resume::Complete { frame, result } => {
                if let Some(sid) = self.top_waiting(frame) {
                    match result {
                        Ok(a) => {
                            self.pop_frame(sid, false);
                            self.run_strand(sid, Act::Next(a));
                        }
                        Err(c) => self.run_strand(sid, Act::Fail(plain(&c))),
                    }
                }
            }
            Resume::Timeout { key, frame } => {
                if let Some(sid) = self.timeout(key, frame) {
                    // What the strand was about to do when it yielded
                    // belongs to the steps just cancelled.
                    self.ready.retain(|(s, _)| *s != sid);
                    self.run_strand(sid, Act::Fail(plain(TIMEOUT)));
                }
            }
            // Control API cancel(): every step still running is cancelled,
            // innermost first (cancel callbacks run), and the flow ends.
            Resume::Cancel => {
                self.cancel_strand(0);
                self.result = Some((Res::Err(CANCELED.into()), self.now));
                return;
            }
        }
        while self.result.is_none() && self.budget > 0 && !self.aborted {
            let Some((sid, act)) = self.ready.pop_front() else {
                break;
            };
            if self.strands[sid].live {
                self.run_strand(sid, act);
            }
        }
        if self.budget == 0 && self.result.is_none() {
            self.yields += 1;
        }
        if self.result.is_none() && !self.queued && (self.start || !self.ready.is_empty()) {
            self.queued = true;
            self.queue.push_back(Entry::Flow);
        }
    }

    fn find(&self, uid: u64) -> Option<(usize, usize)> {
        let sid = *self.where_is.get(&uid)?;
        let st = &self.strands[sid];
        if !st.live {
            return None;
        }
        st.frames
            .iter()
            .position(|f| f.uid == uid)
            .map(|k| (sid, k))
    }

    fn top_waiting(&self, uid: u64) -> Option<usize> {
        let (sid, k) = self.find(uid)?;
        let f = &self.strands[sid].frames[k];
        (k + 1 == self.strands[sid].frames.len() && f.waiting).then_some(sid)
    }

    /// setTimeout (2.2.2): on expiry the step and everything it runs are
    /// cancelled, innermost first, then `Timeout` is raised at the step, so
    /// its own handler sees it first. A waiting step whose external
    /// completion was accepted first is left to that completion.
    fn timeout(&mut self, key: TimerKey, uid: u64) -> Option<usize> {
        let (sid, k) = self.find(uid).expect("a live timeout has its step");
        let frames = &self.strands[sid].frames;
        assert_eq!(frames[k].timer, Some(key));
        if k + 1 == frames.len() && frames[k].token == Some(true) {
            return None;
        }
        while self.strands[sid].frames.len() > k + 1 {
            self.pop_frame(sid, true);
        }
        self.strands[sid].frames[k].queue.clear();
        self.end_activity(sid, k, true);
        self.strands[sid].frames[k].waiting = false;
        Some(sid)
    }

    // -------------------------------------------------------------- strands

    /// Runs a strand until it waits or ends. Engine choice for "parallel
    /// steps start all together" (spec 1): a new branch runs its first step
    /// (and handles its errors at once), and the first time it would go on
    /// to a next step it goes to the back of the ready queue instead, so
    /// every branch has run its first step before any runs its second; a
    /// branch with nothing left after its first step ends at once.
    /// When the step budget is spent, a next step waits at the back of the
    /// ready queue (so a branch that never waits cannot starve its
    /// siblings); an error is unwound at once, as the step that raised it
    /// still waits (its external handle, timer) until its handler has run.
    fn run_strand(&mut self, sid: usize, mut act: Act) {
        loop {
            let next = match act {
                Act::Next(a) => self.next(sid, a),
                Act::Fail(e) | Act::Up(e) => self.unwind(sid, e),
            };
            if self.result.is_some() || self.aborted {
                return;
            }
            let Some(a) = next else { return };
            let st = &mut self.strands[sid];
            if st.fresh && st.live && matches!(a, Act::Next(_)) {
                st.fresh = false;
                // Engine choice: a branch with nothing left (no level, no
                // step) ends at once; its siblings were queued with it.
                if !(st.frames.is_empty() && st.base.is_empty()) {
                    self.ready.push_back((sid, a));
                    return;
                }
            }
            if self.budget == 0 && matches!(a, Act::Next(_)) {
                self.ready.push_back((sid, a));
                return;
            }
            act = a;
        }
    }

    /// Counts a step against the activation's budget.
    fn count(&mut self) {
        self.budget = self.budget.saturating_sub(1);
        self.steps += 1;
        if self.steps > STEP_LIMIT {
            self.aborted = true;
        }
    }

    /// Spec 1.1: the next queued step of the top level runs; when a level
    /// has run all its steps, the step that added them completes with the
    /// last one's result (a loop starts its next iteration instead).
    fn next(&mut self, sid: usize, args: Vec<i64>) -> Option<Act> {
        let st = &mut self.strands[sid];
        let queued = match st.frames.last_mut() {
            Some(f) => f.queue.pop_front(),
            None => st.base.pop_front(),
        };
        if let Some(p) = queued {
            return self.exec(sid, p, args);
        }
        match self.strands[sid].frames.last().map(|f| &f.kind) {
            None => self.strand_done(sid, Ok(args)),
            Some(Kind::Loop { .. }) => self.iterate(sid),
            Some(_) => {
                self.pop_frame(sid, false);
                Some(Act::Next(args))
            }
        }
    }

    fn push_frame(
        &mut self,
        sid: usize,
        kind: Kind<'p>,
        handler: Option<(&'p Handler, usize)>,
    ) -> u64 {
        self.uid += 1;
        self.where_is.insert(self.uid, sid);
        self.strands[sid].frames.push(Frame {
            uid: self.uid,
            kind,
            queue: VecDeque::new(),
            handler,
            cancel: None,
            timer: None,
            waiting: false,
            token: None,
        });
        self.uid
    }

    fn top(&mut self, sid: usize) -> &mut Frame<'p> {
        self.strands[sid].frames.last_mut().expect("a frame")
    }

    fn exec(&mut self, sid: usize, p: Pending<'p>, args: Vec<i64>) -> Option<Act> {
        self.count();
        let (spec, handler, iter) = match p {
            Pending::Branch(b, iter) => (&b.spec, &b.handler, iter),
            Pending::Node(Node::Step { spec, handler }, iter) => (spec, handler, iter),
            Pending::RootLoop(n) => {
                self.push_frame(sid, Kind::Step, None);
                self.top(sid).queue.push_back(Pending::Node(n, 0));
                return Some(Act::Next(vec![]));
            }
            Pending::Node(Node::SuccessStep(a), _) => {
                // successStep(args) = add((as) => as.success(args)) (1.12).
                self.push_frame(sid, Kind::Step, None);
                self.pop_frame(sid, false);
                return Some(Act::Next(ints(a)));
            }
            Pending::Node(Node::Parallel { branches, handler }, iter) => {
                // The parallel step takes no args; its branches start with
                // none, in order; it completes with none (2.2.1).
                let uid = self.push_frame(
                    sid,
                    Kind::Par {
                        branches: vec![],
                        remaining: branches.len(),
                    },
                    handler.as_ref().map(|h| (h, iter)),
                );
                if branches.is_empty() {
                    self.pop_frame(sid, false);
                    return Some(Act::Next(vec![]));
                }
                let mut ids = Vec::new();
                for b in branches {
                    let bid = self.strands.len();
                    self.strands.push(Strand {
                        frames: Vec::new(),
                        base: VecDeque::from([Pending::Branch(b, iter)]),
                        parent: Some((sid, uid)),
                        live: true,
                        fresh: true,
                    });
                    self.ready.push_back((bid, Act::Next(vec![])));
                    ids.push(bid);
                }
                let f = self.top(sid);
                f.kind = Kind::Par {
                    branches: ids,
                    remaining: branches.len(),
                };
                f.waiting = true;
                return None;
            }
            Pending::Node(Node::Loop { kind, label, body }, _) => {
                self.push_frame(
                    sid,
                    Kind::Loop {
                        kind,
                        label: *label,
                        body,
                        next: 0,
                    },
                    None,
                );
                return self.iterate(sid);
            }
        };
        self.push_frame(sid, Kind::Step, handler.as_ref().map(|h| (h, iter)));
        let c = self.call_step(sid, spec, args, iter);
        self.after_call(sid, c)
    }

    /// Runs an execute callback on the top frame.
    fn call_step(&mut self, sid: usize, spec: &'p StepSpec, args: Vec<i64>, iter: usize) -> Call {
        self.trace.push(Ev::Enter {
            id: spec.id,
            args,
            at: self.now,
        });
        let uid = self.top(sid).uid;
        let mut added = false;
        for op in &spec.ops {
            match op {
                Op::Cancel { id } => {
                    let f = self.top(sid);
                    f.cancel = Some(*id); // a second call replaces it
                    f.waiting = true;
                }
                Op::Timeout { ms } => {
                    let key = self.add_task(self.now + ms, Task::Timeout { frame: uid });
                    let f = self.top(sid);
                    let old = f.timer.replace(key); // a second call replaces it
                    f.waiting = true;
                    if let Some(old) = old {
                        self.cancel_task(old);
                    }
                }
                Op::Wait { id, after, result } => {
                    let f = self.top(sid);
                    f.waiting = true;
                    f.token.get_or_insert(false); // one wait per step
                    match after {
                        Some(after) => {
                            self.add_task(
                                self.now + after,
                                Task::Ext {
                                    frame: uid,
                                    id: *id,
                                    result,
                                },
                            );
                        }
                        None => {
                            self.sync_completions += 1;
                            let result = match result {
                                Ok(a) => Ok(ints(a)),
                                Err(c) => Err(c.name().to_string()),
                            };
                            self.complete_external(uid, *id, result);
                        }
                    }
                }
                Op::CancelRoot => self.msgs.push_back(Msg::Cancel),
                Op::Add(n) => {
                    self.top(sid).queue.push_back(Pending::Node(n, iter));
                    added = true;
                }
            }
        }
        let res = match spec.end.at(iter) {
            End::Implicit => Ok(None),
            // Spec 1: success() after add() is InternalError.
            End::Success(_) if added => Err(plain(INTERNAL)),
            End::Success(a) => Ok(Some(ints(a))),
            End::Error(c) => self.error_after(added, c.name()),
            // Engine choice: break/continue after add() is loop control as
            // anywhere (the added steps never run); the spec does not say.
            End::Break(l) => Err(control(Ctl::Break(*l))),
            End::Continue(l) => Err(control(Ctl::Continue(*l))),
            End::ByIter(_) => unreachable!("ByIter is never nested"),
        };
        Call { res, added }
    }
    /// `error(code)` from a callback; after `add()` the spec makes it an
    /// InternalError (1, 2.1).
    fn error_after(&mut self, added: bool, code: &str) -> Result<Option<Vec<i64>>, Err> {
        if !added {
            return Err(plain(code));
        }
        Err(plain(INTERNAL))
    }

    /// What follows an execute callback (2.1 execute_callback behaviour).
    fn after_call(&mut self, sid: usize, c: Call) -> Option<Act> {
        match c.res {
            Err(e) => Some(Act::Fail(e)),
            // Sub-steps run after the callback returns; the first gets no args.
            Ok(_) if c.added => Some(Act::Next(vec![])),
            Ok(Some(a)) => {
                self.pop_frame(sid, false);
                Some(Act::Next(a))
            }
            // Waits for a completion, a timeout or a cancel.
            Ok(None) if self.top(sid).waiting => None,
            // Implicit success (1.6): the next step gets no args.
            Ok(None) => {
                self.pop_frame(sid, false);
                Some(Act::Next(vec![]))
            }
        }
    }

    /// Starts the next iteration of the loop on top (1.8). Each iteration
    /// is a step of its own; the loop completes with no args.
    fn iterate(&mut self, sid: usize) -> Option<Act> {
        self.count();
        let Kind::Loop {
            kind, body, next, ..
        } = &mut self.top(sid).kind
        else {
            unreachable!("a loop frame")
        };
        let body = *body;
        let i = *next;
        *next += 1;
        let args = match kind {
            LoopKind::Loop { max } if i >= *max => {
                // The program's guard: a body that only calls break().
                self.push_frame(sid, Kind::Step, None);
                let c = Call {
                    res: Err(control(Ctl::Break(None))),
                    added: false,
                };
                return self.after_call(sid, c);
            }
            LoopKind::Loop { .. } => vec![i as i64],
            LoopKind::Repeat { count } if i < *count => vec![i as i64],
            LoopKind::ForEach { items } if i < items.len() => {
                vec![i as i64, i64::from(items[i])]
            }
            LoopKind::Repeat { .. } | LoopKind::ForEach { .. } => {
                // Normal termination is seen as success() (1.8.1).
                self.pop_frame(sid, false);
                return Some(Act::Next(vec![]));
            }
        };
        self.push_frame(sid, Kind::Step, None);
        let c = self.call_step(sid, body, args, i);
        self.after_call(sid, c)
    }

    /// Error handling (1.2, 1.2.1, 2.1 error_callback): walk the levels
    /// down from the frame that raised to the first unused handler.
    fn unwind(&mut self, sid: usize, mut e: Err) -> Option<Act> {
        if e.ctl.is_some() {
            if let Some(a) = self.loop_control(sid, &e, true) {
                return Some(a);
            }
            // No such loop in this strand, but one outside the parallel
            // step this branch belongs to: the branch ends with it.
            if self.loop_outside(sid, &e) {
                return self.leave_branch(sid, e);
            }
            // Engine choice: no enclosing loop at all with that label (or
            // none at all): a plain LoopBreak/LoopCont error.
            e.ctl = None;
        }
        let mut origin = true;
        loop {
            let Some(top) = self.strands[sid].frames.last_mut() else {
                return self.strand_done(sid, Err(e));
            };
            // Pending sub-steps of a failed level never run.
            top.queue.clear();
            let Some((h, iter)) = top.handler.take() else {
                // A step the error passes through is cancelled (its cancel
                // callback runs), except the one that raised it.
                self.pop_frame(sid, !origin);
                origin = false;
                continue;
            };
            // The step's own activity ends before its handler runs: timer,
            // external wait, cancel callback (run unless it raised).
            let k = self.strands[sid].frames.len() - 1;
            self.end_activity(sid, k, !origin);
            self.strands[sid].frames[k].waiting = false;
            let c = self.call_handler(sid, h, &e.code, iter);
            match c.res {
                Err(mut e2) => {
                    if e2.ctl.is_some() {
                        // Engine choice: break/continue from a handler is
                        // loop control too.
                        let frames = &self.strands[sid].frames;
                        if find_loop(&frames[..frames.len() - 1], &e2).is_some() {
                            self.pop_frame(sid, false);
                            return self.loop_control(sid, &e2, false);
                        }
                        if self.loop_outside(sid, &e2) {
                            return self.leave_branch(sid, e2);
                        }
                        e2.ctl = None;
                    }
                    self.pop_frame(sid, false);
                    e = e2;
                }
                // 1.2.1: steps added in a handler run on the failed step's
                // level (as its sub-steps), and their result is its result.
                Ok(_) if c.added => return Some(Act::Next(vec![])),
                Ok(Some(a)) => {
                    self.pop_frame(sid, false);
                    return Some(Act::Next(a));
                }
                Ok(None) => {
                    self.pop_frame(sid, false);
                }
            }
            origin = false;
        }
    }

    /// Runs an error callback on the top frame.
    fn call_handler(&mut self, sid: usize, h: &'p Handler, code: &str, iter: usize) -> Call {
        self.trace.push(Ev::Handler {
            id: h.id,
            code: code.to_string(),
            at: self.now,
        });
        let mut added = false;
        let mut misuse = false;
        for op in &h.ops {
            match op {
                HOp::Add(n) => {
                    self.top(sid).queue.push_back(Pending::Node(n, iter));
                    added = true;
                }
                // setCancel() belongs to the execution API of execute
                // callbacks only (2.2.2); a violation is InternalError.
                HOp::Misuse => misuse = true,
            }
        }
        let res = if misuse {
            Err(plain(INTERNAL))
        } else {
            match &h.end {
                HEnd::Silent => Ok(None),
                HEnd::Success(_) if added => Err(plain(INTERNAL)),
                HEnd::Success(a) => Ok(Some(ints(a))),
                HEnd::Error(c) => self.error_after(added, c.name()),
                // A plain `Err` (not `error()`): not checked against
                // add() (engine docs of `Step::error`).
                HEnd::Rethrow => Err(plain(code)),
                HEnd::Break(l) => Err(control(Ctl::Break(*l))),
                HEnd::Continue(l) => Err(control(Ctl::Continue(*l))),
            }
        };
        Call { res, added }
    }

    /// break/continue (2.2.4): find the innermost loop of this strand (with
    /// that label, if any); the steps above it are cancelled, except the one
    /// that raised it; break completes the loop, continue starts its next
    /// iteration. Handlers on the way are not called (engine choice: the
    /// spec handles the special exception "internally").
    fn loop_control(&mut self, sid: usize, e: &Err, origin_on_top: bool) -> Option<Act> {
        let brk = matches!(e.ctl, Some(Ctl::Break(_)));
        let l = find_loop(&self.strands[sid].frames, e)?;
        if origin_on_top && self.strands[sid].frames.len() > l + 1 {
            self.pop_frame(sid, false);
        }
        while self.strands[sid].frames.len() > l + 1 {
            self.pop_frame(sid, true);
        }
        if brk {
            self.pop_frame(sid, false);
        } else {
            self.top(sid).queue.clear();
        }
        Some(Act::Next(vec![]))
    }

    /// True when a break/continue that found no loop in branch `sid` has
    /// one in an enclosing strand (outside its parallel step). Spec 2.2.4:
    /// a labelled break exits the loop of that label, however deep.
    fn loop_outside(&self, sid: usize, e: &Err) -> bool {
        let mut cur = sid;
        while let Some((p, _)) = self.strands[cur].parent {
            if find_loop(&self.strands[p].frames, e).is_some() {
                return true;
            }
            cur = p;
        }
        false
    }

    /// The branch ends with the break/continue for a loop outside it: the
    /// step that raised it ends without its cancel callback, the others
    /// are cancelled, and the parallel step fails with it (its siblings
    /// cancelled), which unwinds to that loop the same way.
    fn leave_branch(&mut self, sid: usize, e: Err) -> Option<Act> {
        self.pop_frame(sid, false);
        while !self.strands[sid].frames.is_empty() {
            self.pop_frame(sid, true);
        }
        self.strand_done(sid, Err(e))
    }

    /// A strand ran out of steps, or failed with no handler left. The root
    /// strand ends the flow; a branch reports to its parallel step: when
    /// all succeeded it completes (no args); the first failure cancels the
    /// other branches and raises the error at the parallel step (1.4). The
    /// parallel step goes on at the back of the ready queue.
    fn strand_done(&mut self, sid: usize, res: Result<Vec<i64>, Err>) -> Option<Act> {
        let st = &mut self.strands[sid];
        st.live = false;
        st.fresh = false;
        let Some((psid, puid)) = st.parent else {
            let r = match res {
                Ok(a) => Res::Ok(a),
                Err(e) => Res::Err(e.code),
            };
            self.result = Some((r, self.now));
            return None;
        };
        let pf = self.top(psid);
        assert_eq!(
            pf.uid, puid,
            "a branch ends while its parallel step is on top"
        );
        let Kind::Par {
            branches,
            remaining,
        } = &mut pf.kind
        else {
            unreachable!("a parallel frame")
        };
        match res {
            Ok(_) => {
                *remaining -= 1;
                if *remaining == 0 {
                    self.pop_frame(psid, false);
                    self.ready.push_back((psid, Act::Next(vec![])));
                }
            }
            Err(e) => {
                for b in std::mem::take(branches) {
                    if self.strands[b].live {
                        self.cancel_strand(b);
                    }
                }
                self.ready.push_back((psid, Act::Up(e)));
            }
        }
        None
    }

    /// Cancels every step of a strand, innermost first.
    fn cancel_strand(&mut self, sid: usize) {
        while !self.strands[sid].frames.is_empty() {
            self.pop_frame(sid, true);
        }
        self.strands[sid].live = false;
        self.strands[sid].fresh = false;
    }

    fn pop_frame(&mut self, sid: usize, cancel: bool) {
        let k = self.strands[sid].frames.len() - 1;
        self.end_activity(sid, k, cancel);
        let f = self.strands[sid].frames.pop().expect("a frame");
        self.where_is.remove(&f.uid);
        if let Kind::Par { branches, .. } = &f.kind {
            assert!(
                branches.iter().all(|&b| !self.strands[b].live),
                "model: a parallel step ended with live branches"
            );
        }
    }

    /// Ends what a step is doing: its timer and external wait; with
    /// `cancel`, its parallel branches are cancelled and then its cancel
    /// callback runs; otherwise the callback is dropped unrun.
    fn end_activity(&mut self, sid: usize, k: usize, cancel: bool) {
        let f = &mut self.strands[sid].frames[k];
        let timer = f.timer.take();
        let cb = f.cancel.take();
        let completed = f.token.take() == Some(true);
        let branches = match (&mut f.kind, cancel) {
            (Kind::Par { branches, .. }, true) => std::mem::take(branches),
            _ => Vec::new(),
        };
        if let Some(t) = timer {
            self.cancel_task(t);
        }
        if cancel {
            for b in branches {
                if self.strands[b].live {
                    self.cancel_strand(b);
                }
            }
            if let Some(id) = cb {
                // A step whose external completion was accepted has
                // completed: it is not cancelled as well (docs).
                if !completed {
                    self.trace.push(Ev::Cancel { id });
                }
            }
        }
    }
}

/// The innermost loop in `frames` that the break/continue `e` reaches
/// (with its label, if it has one).
fn find_loop(frames: &[Frame], e: &Err) -> Option<usize> {
    let want = match &e.ctl {
        Some(Ctl::Break(l)) | Some(Ctl::Continue(l)) => *l,
        None => return None,
    };
    frames.iter().rposition(|f| match &f.kind {
        Kind::Loop { label, .. } => want.is_none() || *label == want,
        _ => false,
    })
}
