//! Step programs: the AST both interpreters run, and its proptest generator.
//!
//! A program is a list of level-0 nodes plus an optional root cancel time.
//! Every callback is data: what it does through the execution API, in
//! order (`Op`s), then how it returns (`End`). Ids (steps, handlers, cancel
//! callbacks, external waits) are unique in a program and name the trace
//! events; they are assigned by [`number`] after generation.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

/// Identifies a callback of the program in the trace.
pub type Id = u32;

/// Loop labels. `Z` is never given to a loop: breaking or continuing it
/// reaches handlers as a plain `LoopBreak`/`LoopCont` error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    A,
    B,
    Z,
}

impl Label {
    pub fn name(self) -> &'static str {
        match self {
            Label::A => "A",
            Label::B => "B",
            Label::Z => "Z",
        }
    }
}

/// User error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    E1,
    E2,
    E3,
}

impl Code {
    pub fn name(self) -> &'static str {
        match self {
            Code::E1 => "E1",
            Code::E2 => "E2",
            Code::E3 => "E3",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Level-0 steps, added to the root `AsyncSteps` before it runs.
    pub root: Vec<Node>,
    /// Root `cancel()` at this virtual time (ms), if any.
    pub cancel_at: Option<u64>,
}

/// Something a callback (or the root) adds.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// `add(func)` / `add(func, onerror)`.
    Step {
        spec: StepSpec,
        handler: Option<Handler>,
    },
    /// `parallel()` / `parallel(onerror)` with its branches.
    Parallel {
        branches: Vec<Branch>,
        handler: Option<Handler>,
    },
    /// `loop`, `repeat` or `forEach`, optionally labelled; `body` runs once
    /// per iteration.
    Loop {
        kind: LoopKind,
        label: Option<Label>,
        body: StepSpec,
    },
    /// `successStep(args)`.
    SuccessStep(Vec<i32>),
}

/// One branch of a parallel step.
#[derive(Clone, Debug, PartialEq)]
pub struct Branch {
    pub spec: StepSpec,
    pub handler: Option<Handler>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum LoopKind {
    /// `loop(func)`: the body breaks by itself from iteration `max` on (a
    /// guard that only calls `break()`, so every program ends).
    Loop { max: usize },
    /// `repeat(count, func)`.
    Repeat { count: usize },
    /// `forEach(items, func)` over a list: the body gets (index, item).
    ForEach { items: Vec<i32> },
}

/// An execute callback.
#[derive(Clone, Debug, PartialEq)]
pub struct StepSpec {
    pub id: Id,
    /// What the callback calls, in order.
    pub ops: Vec<Op>,
    /// How it returns.
    pub end: End,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `setCancel(cb)`; the callback logs its id.
    Cancel { id: Id },
    /// `setTimeout(ms)`.
    Timeout { ms: u64 },
    /// `waitExternal()`, completed `after` ms later by a deferred callback
    /// with `success(args)` or `error(code)` (whose acceptance is logged);
    /// `after: None`: completed at once, inside the callback (spec 3.5: the
    /// external call may answer synchronously). A step with such a wait
    /// always returns normally.
    Wait {
        id: Id,
        after: Option<u64>,
        result: Result<Vec<i32>, Code>,
    },
    /// Calls the root's `cancel()` from inside the callback.
    CancelRoot,
    /// `add()`, `parallel()`, a loop or `successStep()`.
    Add(Node),
}

#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// Returns normally (implicit success unless it added or waits).
    Implicit,
    /// `success(args)`.
    Success(Vec<i32>),
    /// `error(code)`.
    Error(Code),
    /// `break([label])`.
    Break(Option<Label>),
    /// `continue([label])`.
    Continue(Option<Label>),
    /// Depends on the iteration of the innermost enclosing loop body that
    /// created this step (0 outside loops): `ends[iter % len]`. Never nested.
    ByIter(Vec<End>),
}

impl End {
    /// The end taken in iteration context `iter`.
    pub fn at(&self, iter: usize) -> &End {
        match self {
            End::ByIter(v) => &v[iter % v.len()],
            e => e,
        }
    }
}

/// An error callback.
#[derive(Clone, Debug, PartialEq)]
pub struct Handler {
    pub id: Id,
    pub ops: Vec<HOp>,
    pub end: HEnd,
}

#[derive(Clone, Debug, PartialEq)]
pub enum HOp {
    /// `add()` etc. in the handler: runs on the failed step's level.
    Add(Node),
    /// `setCancel()` in a handler: not allowed (reported as InternalError).
    Misuse,
}

#[derive(Clone, Debug, PartialEq)]
pub enum HEnd {
    /// Returns: unwinding goes on with the same error (or, after `add()`,
    /// the added steps run).
    Silent,
    /// `success(args)`: recovered.
    Success(Vec<i32>),
    /// `error(code)`: a new error.
    Error(Code),
    /// `error(code)` with the code it got.
    Rethrow,
    Break(Option<Label>),
    Continue(Option<Label>),
}

// ------------------------------------------------------------------ ids

/// Assigns unique ids (preorder, from 1) to every step, handler, cancel
/// callback and external wait.
pub fn number(p: &mut Program) {
    let mut next = 0;
    for n in &mut p.root {
        number_node(n, &mut next);
    }
}

fn fresh(next: &mut Id) -> Id {
    *next += 1;
    *next
}

fn number_node(n: &mut Node, next: &mut Id) {
    match n {
        Node::Step { spec, handler } => {
            number_spec(spec, next);
            if let Some(h) = handler {
                number_handler(h, next);
            }
        }
        Node::Parallel { branches, handler } => {
            for b in branches {
                number_spec(&mut b.spec, next);
                if let Some(h) = &mut b.handler {
                    number_handler(h, next);
                }
            }
            if let Some(h) = handler {
                number_handler(h, next);
            }
        }
        Node::Loop { body, .. } => number_spec(body, next),
        Node::SuccessStep(_) => {}
    }
}

fn number_spec(s: &mut StepSpec, next: &mut Id) {
    s.id = fresh(next);
    for op in &mut s.ops {
        match op {
            Op::Cancel { id } | Op::Wait { id, .. } => *id = fresh(next),
            Op::Timeout { .. } | Op::CancelRoot => {}
            Op::Add(n) => number_node(n, next),
        }
    }
}

fn number_handler(h: &mut Handler, next: &mut Id) {
    h.id = fresh(next);
    for op in &mut h.ops {
        if let HOp::Add(n) = op {
            number_node(n, next);
        }
    }
}

// ------------------------------------------------------------------ generator

/// Default nesting depth of generated programs (levels of `add` inside
/// callbacks).
pub const DEPTH: u32 = 3;

/// Random programs: up to 5 level-0 nodes nested up to `depth` levels, and
/// a root cancel in one program of four.
pub fn program(depth: u32) -> impl Strategy<Value = Program> {
    (
        vec(node(depth, false), 1..=5),
        option::weighted(0.25, prop::sample::select(vec![0u64, 5, 10, 15, 20, 30])),
    )
        .prop_map(|(root, cancel_at)| {
            let mut p = Program { root, cancel_at };
            number(&mut p);
            p
        })
}

fn args() -> impl Strategy<Value = Vec<i32>> + Clone {
    vec(0i32..100, 0..=2)
}

fn code() -> impl Strategy<Value = Code> + Clone {
    prop_oneof![Just(Code::E1), Just(Code::E2), Just(Code::E3)]
}

/// Labels a break/continue may name: none (innermost loop), a loop's
/// label, or one no loop has.
fn target() -> impl Strategy<Value = Option<Label>> + Clone {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(Label::A)),
        1 => Just(Some(Label::B)),
        1 => Just(Some(Label::Z)),
    ]
}

/// Small sets of times, so that events often fall on the same instant.
fn timeout_ms() -> impl Strategy<Value = u64> + Clone {
    prop::sample::select(vec![0u64, 5, 10, 20])
}

fn wait_ms() -> impl Strategy<Value = u64> + Clone {
    prop::sample::select(vec![0u64, 5, 10, 15])
}

/// How a callback returns; break/continue mostly inside loop bodies (and
/// the steps they add), where they usually find their loop.
fn simple_end(in_loop: bool) -> BoxedStrategy<End> {
    let (k, ctl) = if in_loop { (1, 3) } else { (2, 1) };
    prop_oneof![
        12 * k => Just(End::Implicit),
        5 * k => args().prop_map(End::Success),
        2 * k => code().prop_map(End::Error),
        ctl => target().prop_map(End::Break),
        ctl => target().prop_map(End::Continue),
    ]
    .boxed()
}

/// A callback that added sub-steps must not call `success()` or `error()`
/// (spec 1): most such ends become a plain return, so that only some
/// programs test that rule.
fn tame(end: End, keep: bool) -> End {
    match end {
        End::Success(_) | End::Error(_) if !keep => End::Implicit,
        End::ByIter(v) => End::ByIter(v.into_iter().map(|e| tame(e, keep)).collect()),
        e => e,
    }
}

fn end(in_loop: bool) -> BoxedStrategy<End> {
    let by_iter = if in_loop { 4 } else { 1 };
    prop_oneof![
        16 => simple_end(in_loop),
        by_iter => vec(simple_end(in_loop), 1..=3).prop_map(End::ByIter),
    ]
    .boxed()
}

fn wait_op() -> impl Strategy<Value = Op> + Clone {
    (
        option::weighted(0.8, wait_ms()),
        prop_oneof![3 => args().prop_map(Ok), 1 => code().prop_map(Err)],
    )
        .prop_map(|(after, result)| Op::Wait {
            id: 0,
            after,
            result,
        })
}

fn deferred_wait_op() -> impl Strategy<Value = Op> + Clone {
    (
        wait_ms(),
        prop_oneof![1 => args().prop_map(Ok), 1 => code().prop_map(Err)],
    )
        .prop_map(|(after, result)| Op::Wait {
            id: 0,
            after: Some(after),
            result,
        })
}

fn cancel_op() -> impl Strategy<Value = Op> + Clone {
    Just(Op::Cancel { id: 0 })
}

fn timeout_op() -> impl Strategy<Value = Op> + Clone {
    timeout_ms().prop_map(|ms| Op::Timeout { ms })
}

/// An execute callback. Either it adds sub-steps (with cancel callbacks and
/// timeouts covering them, and sometimes a deferred external completion,
/// which the spec does not allow once sub-steps are added), or it waits for
/// external completions.
fn spec(child: Option<BoxedStrategy<Node>>, in_loop: bool) -> BoxedStrategy<StepSpec> {
    let waiting = vec(
        prop_oneof![
            8 => cancel_op(),
            8 => timeout_op(),
            24 => wait_op(),
            1 => Just(Op::CancelRoot),
        ],
        0..=3,
    );
    let ops = match child {
        Some(child) => {
            let adding = vec(
                prop_oneof![
                    8 => cancel_op(),
                    8 => timeout_op(),
                    32 => child.prop_map(Op::Add),
                    1 => Just(Op::CancelRoot),
                    2 => deferred_wait_op(),
                ],
                0..=4,
            );
            prop_oneof![3 => adding, 2 => waiting].boxed()
        }
        None => waiting.boxed(),
    };
    (ops, end(in_loop), prop::bool::weighted(0.15))
        .prop_map(|(ops, end, keep)| {
            let added = ops.iter().any(|o| matches!(o, Op::Add(_)));
            let sync = ops
                .iter()
                .any(|o| matches!(o, Op::Wait { after: None, .. }));
            let end = if sync {
                End::Implicit
            } else if added {
                tame(end, keep)
            } else {
                end
            };
            StepSpec { id: 0, ops, end }
        })
        .boxed()
}

fn handler(child: Option<BoxedStrategy<Node>>, in_loop: bool) -> BoxedStrategy<Handler> {
    let ops = match child {
        Some(child) => vec(
            prop_oneof![16 => child.prop_map(HOp::Add), 1 => Just(HOp::Misuse)],
            0..=2,
        )
        .boxed(),
        None => prop_oneof![16 => Just(vec![]), 1 => Just(vec![HOp::Misuse])].boxed(),
    };
    let ctl = if in_loop { 2 } else { 1 };
    let end = prop_oneof![
        3 => Just(HEnd::Silent),
        5 => args().prop_map(HEnd::Success),
        2 => code().prop_map(HEnd::Error),
        2 => Just(HEnd::Rethrow),
        ctl => target().prop_map(HEnd::Break),
        ctl => target().prop_map(HEnd::Continue),
    ];
    (ops, end, prop::bool::weighted(0.15))
        .prop_map(|(ops, end, keep)| {
            let added = ops.iter().any(|o| matches!(o, HOp::Add(_)));
            let end = match end {
                HEnd::Success(_) | HEnd::Error(_) | HEnd::Rethrow if added && !keep => HEnd::Silent,
                e => e,
            };
            Handler { id: 0, ops, end }
        })
        .boxed()
}

/// Loops of 0 to 3 iterations (long ones: [`busy_loop`]).
fn loop_kind() -> impl Strategy<Value = LoopKind> + Clone {
    prop_oneof![
        (0usize..=3).prop_map(|max| LoopKind::Loop { max }),
        (0usize..=3).prop_map(|count| LoopKind::Repeat { count }),
        vec(0i32..100, 0..=3).prop_map(|items| LoopKind::ForEach { items }),
    ]
}

/// A long loop whose iterations never wait: more than the engine's step
/// budget (1024 steps per activation) in one go, so the flow yields to the
/// loop's timers and messages, and to its other strands, while it runs
/// (`loop` ends by its guard's `break()` after 1100 iterations).
fn busy_loop() -> BoxedStrategy<Node> {
    let sub = prop_oneof![
        args().prop_map(Node::SuccessStep),
        (args(), any::<bool>()).prop_map(|(a, ok)| Node::Step {
            spec: StepSpec {
                id: 0,
                ops: vec![],
                end: if ok { End::Success(a) } else { End::Implicit },
            },
            handler: None,
        }),
    ];
    let body = (
        vec(sub.prop_map(Op::Add), 0..=1),
        prop_oneof![3 => Just(End::Implicit), 1 => args().prop_map(End::Success)],
    )
        .prop_map(|(ops, end)| StepSpec { id: 0, ops, end });
    let kind = prop_oneof![
        Just(LoopKind::Repeat { count: 1100 }),
        Just(LoopKind::Loop { max: 1100 }),
        Just(LoopKind::Repeat { count: 2100 }),
    ];
    let label = prop_oneof![Just(None), Just(Some(Label::A))];
    (kind, label, body)
        .prop_map(|(kind, label, body)| Node::Loop { kind, label, body })
        .boxed()
}

/// A node whose callbacks nest at most `depth` more levels; `in_loop`: it
/// is created inside a loop body.
pub fn node(depth: u32, in_loop: bool) -> BoxedStrategy<Node> {
    let child = (depth > 0).then(|| node(depth - 1, in_loop));
    let body_child = (depth > 0).then(|| node(depth - 1, true));
    let spec_s = spec(child.clone(), in_loop);
    let opt_handler = option::weighted(0.6, handler(child, in_loop));
    let step = (spec_s.clone(), opt_handler.clone())
        .prop_map(|(spec, handler)| Node::Step { spec, handler });
    let branch = (spec_s, opt_handler.clone()).prop_map(|(spec, handler)| Branch { spec, handler });
    let parallel = (vec(branch, 0..=3), opt_handler)
        .prop_map(|(branches, handler)| Node::Parallel { branches, handler });
    let label = prop_oneof![
        2 => Just(None),
        1 => Just(Some(Label::A)),
        1 => Just(Some(Label::B)),
    ];
    let lp = (loop_kind(), label, spec(body_child, true))
        .prop_map(|(kind, label, body)| Node::Loop { kind, label, body });
    let plain = prop_oneof![
        12 => step,
        2 => args().prop_map(Node::SuccessStep),
        4 => parallel,
        4 => lp,
    ];
    if in_loop {
        plain.boxed()
    } else {
        prop_oneof![22 => plain, 1 => busy_loop()].boxed()
    }
}
