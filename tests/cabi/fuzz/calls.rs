//! Part 2 of the fuzzing: call sequences (`call_sequences_never_crash_hang_or_leak`,
//! see the parent module), and in `regressions` the shrunk programs worth
//! keeping.

use super::*;

// ---------------------------------------------------------------------------
// Part 2: call sequences
// ---------------------------------------------------------------------------

/// Callbacks (handle binds) a case runs before it drains: below the
/// runtime's handle quarantine (256), so a stale handle is never reused
/// within a case and the stale-handle calls stay exact.
const BUDGET: usize = 150;

/// Args given to success() (values with counting cleanups).
#[derive(Clone, Copy, Debug)]
enum ArgsK {
    /// A NULL `FutoInArgs*`.
    Null,
    /// Four empty slots.
    Empty,
    Int,
    /// A NUL-terminated STRING and an int.
    Str,
    Array,
    Custom,
    /// STRING, INT32, ARRAY|INT32, CUSTOM_OBJECT.
    Four,
    /// Unknown type flags: InternalError.
    Unknown,
    /// A value after an empty slot: InternalError.
    Gap,
    /// A STRING that is not UTF-8: InternalError.
    BadUtf8,
}

#[derive(Clone, Copy, Debug)]
enum Code {
    Null,
    User,
    Internal,
    LoopBreak,
    Timeout,
    Empty,
    BadUtf8,
}

#[derive(Clone, Copy, Debug)]
enum Label {
    Null,
    L0,
    L1,
    Unknown,
    BadUtf8,
}

#[derive(Clone, Copy, Debug)]
enum Name {
    A,
    B,
    ErrorInfo,
    LastException,
    Null,
    Empty,
    BadUtf8,
}

/// How a callback ends, after its calls.
#[derive(Clone, Debug)]
enum End {
    Return,
    Success(ArgsK),
    Error(Code, bool),
    Break(Label),
    Continue(Label),
    /// success() with the args the callback got (NULL in handlers/loops).
    Forward,
}

/// The body of one callback: calls on its handle, then how it ends.
#[derive(Clone, Debug)]
struct Node {
    ops: Vec<Op>,
    end: End,
}

static EMPTY_NODE: Node = Node {
    ops: Vec::new(),
    end: End::Return,
};

/// A sub-step: its body, its error handler, and whether add() gets a NULL
/// execute callback.
#[derive(Clone, Debug)]
struct Sub {
    node: Node,
    eh: Option<Node>,
    null_cb: bool,
}

/// Where an external completion comes from.
#[derive(Clone, Copy, Debug)]
enum Via {
    Sched,
    Deferred(u32),
    Thread,
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Ok(ArgsK),
    Err(Code),
}

#[derive(Clone, Copy, Debug)]
enum SyncK {
    Mutex,
    /// futoin_throttle_new(1, 1 ms, no queue limit)
    Throttle,
    Null,
    /// A FutoInSync of "another implementation": lock/unlock counted.
    Foreign,
    /// The same, whose lock fails the step.
    ForeignFail,
}

/// FutoInHandle values that were not (all) made for this call.
#[derive(Clone, Copy, Debug)]
enum OddHandle {
    Null,
    Empty,
    Garbage(u64, i64),
    /// One scheduled earlier in the case (maybe run, maybe of another loop).
    Kept(u8),
    /// A kept one with another version in its key.
    Mutated(u8, u8),
}

/// A call on a handle that is not the running callback's.
#[derive(Clone, Copy, Debug)]
enum Other {
    IsValid,
    Success(ArgsK),
    HandleError(Code),
    Add,
    Stack,
    StateVar,
    Sched,
    SameThread,
    WaitExternal,
    Parallel,
    SetTimeout,
    Loop,
}

/// A call with a NULL handle through a live handle's table.
#[derive(Clone, Copy, Debug)]
enum NullCall {
    IsValid,
    RootId,
    Success(ArgsK),
    HandleError,
    Add,
    Parallel,
    Stack,
    StateVar,
    Sched,
    SameThread,
    NewInstance,
    Free,
    Loop,
    WaitExternal,
    Break,
    AddSync,
    SchedIsValid,
}

/// What a cancel callback does with its (cancelled) step's handle.
#[derive(Clone, Copy, Debug)]
enum CancelAct {
    Nothing,
    Success(ArgsK),
    Error,
    Sched,
}

/// When (and from where) a new instance is freed.
#[derive(Clone, Copy, Debug)]
enum FreeRoot {
    /// Right after execute, in the step that made it.
    Now,
    /// By the test, after the main flow ended.
    Later,
    /// By the first step of its own flow.
    OwnStep,
    /// From another thread, right away.
    Thread,
    /// By its unhandled-error callback (else later).
    Unhandled,
    /// After futoin_runtime_free.
    AfterRuntime,
}

#[derive(Clone, Copy, Debug)]
enum StepOnly {
    Execute,
    Cancel,
    Free,
}

#[derive(Clone, Debug)]
enum Op {
    Add(Sub),
    Parallel {
        eh: Option<Node>,
        branches: Vec<Sub>,
        /// A call other than add() on the parallel's handle.
        misuse: Option<Other>,
    },
    StateVar {
        name: Name,
        alloc: bool,
        cleanup: bool,
        /// allocate() calls this handle again (stateVariable, add, ...).
        reenter: bool,
    },
    Stack {
        size: usize,
        cleanup: bool,
    },
    Success(ArgsK),
    HandleError(Code, bool),
    SetTimeout(u32),
    SetCancel {
        null: bool,
        act: CancelAct,
    },
    WaitExternal,
    /// Completes this step later (it waits or not).
    Complete(Via, Outcome),
    Loop {
        label: Label,
        /// `repeat(count)`, else `loop`.
        repeat: Option<usize>,
        /// Iterations before the body breaks (NULL label) by itself.
        cap: u8,
        body: Node,
        null_body: bool,
    },
    Break(Label),
    Continue(Label),
    AddSync(SyncK, Sub),
    /// rootId, isValid, is_same_thread (checked).
    Info,
    NewInstance {
        run: Option<Sub>,
        free: FreeRoot,
    },
    Sched {
        delay: Option<u32>,
        cancel: bool,
        null_cb: bool,
    },
    OddHandle(OddHandle),
    /// A call on a handle kept from an earlier callback of the case.
    Stale(u8, Other),
    /// A call on this callback's handle from another thread (while the
    /// callback runs, or after).
    FromThread(Other),
    NullBsi(NullCall),
    OnStep(StepOnly),
}

/// A call on a step entry made on the root (before execute).
#[derive(Clone, Copy, Debug)]
enum Poison {
    Stack,
    Success(ArgsK),
    HandleError,
    SetTimeout,
    SetCancel,
    WaitExternal,
    Loop,
    Repeat,
    Break,
    Continue,
}

#[derive(Clone, Copy, Debug)]
enum RootNull {
    Add,
    Execute,
    Free,
    Parallel,
    StateVar,
    Sched,
    IsValid,
    Cancel,
}

#[derive(Clone, Debug)]
enum RootOp {
    Add(Sub),
    Parallel {
        eh: Option<Node>,
        branches: Vec<Sub>,
        /// success() (and other no-ops) on the parallel's handle.
        misuse: Option<ArgsK>,
    },
    StateVar {
        name: Name,
        alloc: bool,
        cleanup: bool,
        reenter: bool,
    },
    Poison(Poison),
    AddSync(SyncK, Sub),
    Sched(Option<u32>),
    NewInstanceFree,
    Info,
    NullBsi(RootNull),
}

/// Calls on the root from the test thread while its flow runs (or just
/// ended).
#[derive(Clone, Copy, Debug)]
enum RunOp {
    Execute,
    Info,
    StateVar(Name),
    Sched,
    /// add() on a parallel handle of the root made before execute.
    ParAdd,
}

#[derive(Clone, Debug)]
struct Prog {
    threads: u32,
    /// futoin_mutex_new(max, max_queue)
    mutex: (u32, u32),
    root: Vec<RootOp>,
    running: Vec<RunOp>,
    /// The unhandled-error callback frees the root.
    free_in_unhandled: bool,
    /// The unhandled-error callback calls execute() again (a no-op).
    reexecute_in_unhandled: bool,
    /// Once the flow ended: this sub-step and the last step are added,
    /// and the root runs again.
    rerun: Option<Sub>,
    /// A root made before futoin_runtime_free and executed after it.
    execute_after_free: bool,
}

// ---- generators -------------------------------------------------------------

/// Mostly values the runtime takes; sometimes ones it refuses.
fn args_k() -> impl Strategy<Value = ArgsK> {
    prop_oneof![
        4 => Just(ArgsK::Null),
        1 => Just(ArgsK::Empty),
        3 => Just(ArgsK::Int),
        3 => Just(ArgsK::Str),
        2 => Just(ArgsK::Array),
        2 => Just(ArgsK::Custom),
        3 => Just(ArgsK::Four),
        1 => prop_oneof![Just(ArgsK::Unknown), Just(ArgsK::Gap), Just(ArgsK::BadUtf8)],
    ]
}

fn code() -> impl Strategy<Value = Code> {
    prop_oneof![
        1 => Just(Code::Null),
        12 => Just(Code::User),
        1 => Just(Code::Internal),
        1 => Just(Code::LoopBreak),
        1 => Just(Code::Timeout),
        1 => Just(Code::Empty),
        1 => Just(Code::BadUtf8),
    ]
}

fn label() -> impl Strategy<Value = Label> {
    prop_oneof![
        6 => Just(Label::Null),
        4 => Just(Label::L0),
        4 => Just(Label::L1),
        2 => Just(Label::Unknown),
        1 => Just(Label::BadUtf8),
    ]
}

fn name() -> impl Strategy<Value = Name> {
    prop_oneof![
        8 => Just(Name::A),
        4 => Just(Name::B),
        4 => Just(Name::ErrorInfo),
        2 => Just(Name::LastException),
        1 => Just(Name::Null),
        2 => Just(Name::Empty),
        1 => Just(Name::BadUtf8),
    ]
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        12 => Just(End::Return),
        4 => args_k().prop_map(End::Success),
        2 => (code(), any::<bool>()).prop_map(|(c, i)| End::Error(c, i)),
        1 => prop_oneof![label().prop_map(End::Break), label().prop_map(End::Continue)],
        2 => Just(End::Forward),
    ]
}

/// How a loop body ends.
fn body_end() -> impl Strategy<Value = End> {
    prop_oneof![
        6 => Just(End::Return),
        1 => args_k().prop_map(End::Success),
        1 => (code(), any::<bool>()).prop_map(|(c, i)| End::Error(c, i)),
        2 => label().prop_map(End::Break),
        2 => label().prop_map(End::Continue),
    ]
}

/// How an error handler ends: mostly recovering.
fn handler_end() -> impl Strategy<Value = End> {
    prop_oneof![
        3 => Just(End::Return),
        6 => args_k().prop_map(End::Success),
        2 => (code(), any::<bool>()).prop_map(|(c, i)| End::Error(c, i)),
        1 => label().prop_map(End::Break),
        1 => label().prop_map(End::Continue),
    ]
}

fn other() -> impl Strategy<Value = Other> {
    prop_oneof![
        Just(Other::IsValid),
        args_k().prop_map(Other::Success),
        code().prop_map(Other::HandleError),
        Just(Other::Add),
        Just(Other::Stack),
        Just(Other::StateVar),
        Just(Other::Sched),
        Just(Other::SameThread),
        Just(Other::WaitExternal),
        Just(Other::Parallel),
        Just(Other::SetTimeout),
        Just(Other::Loop),
    ]
}

fn null_call() -> impl Strategy<Value = NullCall> {
    prop_oneof![
        Just(NullCall::IsValid),
        Just(NullCall::RootId),
        args_k().prop_map(NullCall::Success),
        Just(NullCall::HandleError),
        Just(NullCall::Add),
        Just(NullCall::Parallel),
        Just(NullCall::Stack),
        Just(NullCall::StateVar),
        Just(NullCall::Sched),
        Just(NullCall::SameThread),
        Just(NullCall::NewInstance),
        Just(NullCall::Free),
        Just(NullCall::Loop),
        Just(NullCall::WaitExternal),
        Just(NullCall::Break),
        Just(NullCall::AddSync),
        Just(NullCall::SchedIsValid),
    ]
}

fn stack_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => prop_oneof![Just(0usize), Just(1), Just(7), Just(16), Just(100), Just(4096)],
        1 => Just(1 << 20),
        1 => prop_oneof![Just(1 << 44), Just(isize::MAX as usize - 8), Just(usize::MAX)],
    ]
}

fn leaf_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (
            name(),
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.2)
        )
            .prop_map(|(name, alloc, cleanup, reenter)| Op::StateVar {
                name,
                alloc,
                cleanup,
                reenter
            }),
        3 => (stack_size(), prop::bool::weighted(0.8))
            .prop_map(|(size, cleanup)| Op::Stack { size, cleanup }),
        1 => args_k().prop_map(Op::Success),
        1 => (code(), any::<bool>()).prop_map(|(c, i)| Op::HandleError(c, i)),
        1 => prop_oneof![Just(0u32), Just(1), Just(3)].prop_map(Op::SetTimeout),
        1 => (
            prop::bool::weighted(0.1),
            prop_oneof![
                3 => Just(CancelAct::Nothing),
                1 => args_k().prop_map(CancelAct::Success),
                1 => Just(CancelAct::Error),
                1 => Just(CancelAct::Sched),
            ],
        )
            .prop_map(|(null, act)| Op::SetCancel { null, act }),
        2 => Just(Op::WaitExternal),
        3 => (
            prop_oneof![
                2 => Just(Via::Sched),
                1 => (0u32..3).prop_map(Via::Deferred),
                2 => Just(Via::Thread),
            ],
            prop_oneof![
                3 => args_k().prop_map(Outcome::Ok),
                1 => code().prop_map(Outcome::Err),
            ],
        )
            .prop_map(|(v, o)| Op::Complete(v, o)),
        1 => prop_oneof![label().prop_map(Op::Break), label().prop_map(Op::Continue)],
        2 => Just(Op::Info),
        2 => (
            prop_oneof![Just(None), Just(Some(0u32)), Just(Some(1)), Just(Some(3_600_000))],
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(delay, cancel, null_cb)| Op::Sched { delay, cancel, null_cb }),
        1 => prop_oneof![
            Just(OddHandle::Null),
            Just(OddHandle::Empty),
            (any::<u64>(), any::<i64>()).prop_map(|(a, b)| OddHandle::Garbage(a, b)),
            any::<u8>().prop_map(OddHandle::Kept),
            (any::<u8>(), 1u8..8).prop_map(|(k, v)| OddHandle::Mutated(k, v)),
        ]
        .prop_map(Op::OddHandle),
        2 => (any::<u8>(), other()).prop_map(|(i, c)| Op::Stale(i, c)),
        1 => other().prop_map(Op::FromThread),
        1 => null_call().prop_map(Op::NullBsi),
        1 => prop_oneof![
            1 => Just(StepOnly::Execute),
            1 => Just(StepOnly::Cancel),
            2 => Just(StepOnly::Free),
        ]
        .prop_map(Op::OnStep),
    ]
}

/// A waiting step (waitExternal, setCancel) with no completion that is
/// sure to come gets a timeout, so every generated program ends.
fn ensure_ends(mut n: Node) -> Node {
    let first_wait = n
        .ops
        .iter()
        .position(|o| matches!(o, Op::WaitExternal | Op::SetCancel { null: false, .. }));
    if let Some(w) = first_wait {
        let timeout = n.ops.iter().any(|o| matches!(o, Op::SetTimeout(_)));
        let from_loop = n
            .ops
            .iter()
            .any(|o| matches!(o, Op::Complete(Via::Sched | Via::Deferred(_), _)));
        let thread_after = n.ops[w..]
            .iter()
            .any(|o| matches!(o, Op::Complete(Via::Thread, _)));
        if !timeout && !from_loop && !thread_after {
            n.ops.push(Op::SetTimeout(2));
        }
    }
    n
}

/// Mostly no success() after sub-steps were added (a misuse that ends the
/// flow at once), sometimes one.
fn consistent(ops: Vec<Op>, end: End, keep: bool) -> Node {
    let adds = ops.iter().any(|o| {
        matches!(
            o,
            Op::Add(_) | Op::Parallel { .. } | Op::Loop { .. } | Op::AddSync(..)
        )
    });
    let end = match end {
        End::Success(_) | End::Forward if adds && keep => End::Return,
        e => e,
    };
    ensure_ends(Node { ops, end })
}

fn node(d: u32) -> BoxedStrategy<Node> {
    (vec(op(d), 0..5), end(), prop::bool::weighted(0.9))
        .prop_map(|(ops, end, keep)| consistent(ops, end, keep))
        .boxed()
}

fn body(d: u32) -> BoxedStrategy<Node> {
    (vec(op(d), 0..4), body_end(), prop::bool::weighted(0.9))
        .prop_map(|(ops, end, keep)| consistent(ops, end, keep))
        .boxed()
}

fn handler(d: u32) -> BoxedStrategy<Node> {
    (vec(op(d), 0..3), handler_end(), prop::bool::weighted(0.9))
        .prop_map(|(ops, end, keep)| consistent(ops, end, keep))
        .boxed()
}

fn sub(d: u32) -> BoxedStrategy<Sub> {
    (
        node(d),
        prop::option::weighted(0.45, handler(d)),
        prop::bool::weighted(0.02),
    )
        .prop_map(|(node, eh, null_cb)| Sub { node, eh, null_cb })
        .boxed()
}

fn sync_k() -> impl Strategy<Value = SyncK> {
    prop_oneof![
        8 => Just(SyncK::Mutex),
        2 => Just(SyncK::Throttle),
        1 => Just(SyncK::Null),
        4 => Just(SyncK::Foreign),
        1 => Just(SyncK::ForeignFail),
    ]
}

fn op(d: u32) -> BoxedStrategy<Op> {
    if d == 0 {
        return leaf_op().boxed();
    }
    let s = sub(d - 1);
    let n = body(d - 1);
    prop_oneof![
        8 => leaf_op(),
        5 => s.clone().prop_map(Op::Add),
        2 => (
            prop::option::weighted(0.3, handler(d - 1)),
            vec(s.clone(), 0..4),
            prop::option::weighted(0.05, other()),
        )
            .prop_map(|(eh, branches, misuse)| Op::Parallel { eh, branches, misuse }),
        2 => (
            label(),
            prop::option::weighted(
                0.5,
                prop_oneof![Just(0usize), Just(1), Just(3), Just(usize::MAX)]
            ),
            0u8..4,
            n,
            prop::bool::weighted(0.03),
        )
            .prop_map(|(label, repeat, cap, body, null_body)| Op::Loop {
                label,
                repeat,
                cap,
                body,
                null_body,
            }),
        2 => (sync_k(), s.clone()).prop_map(|(k, s)| Op::AddSync(k, s)),
        1 => (
            prop::option::weighted(0.7, s),
            prop_oneof![
                Just(FreeRoot::Now),
                Just(FreeRoot::Later),
                Just(FreeRoot::OwnStep),
                Just(FreeRoot::Thread),
                Just(FreeRoot::Unhandled),
                Just(FreeRoot::AfterRuntime),
            ],
        )
            .prop_map(|(run, free)| Op::NewInstance { run, free }),
    ]
    .boxed()
}

/// Nesting of generated programs.
const DEPTH: u32 = 3;

fn root_op() -> impl Strategy<Value = RootOp> {
    let s = sub(DEPTH - 1);
    prop_oneof![
        30 => s.clone().prop_map(RootOp::Add),
        2 => (
            prop::option::weighted(0.3, handler(DEPTH - 1)),
            vec(s.clone(), 0..4),
            prop::option::weighted(0.2, args_k()),
        )
            .prop_map(|(eh, branches, misuse)| RootOp::Parallel { eh, branches, misuse }),
        1 => (
            name(),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.3)
        )
            .prop_map(|(name, alloc, cleanup, reenter)| RootOp::StateVar {
                name,
                alloc,
                cleanup,
                reenter
            }),
        1 => prop_oneof![
            Just(Poison::Stack),
            args_k().prop_map(Poison::Success),
            Just(Poison::HandleError),
            Just(Poison::SetTimeout),
            Just(Poison::SetCancel),
            Just(Poison::WaitExternal),
            Just(Poison::Loop),
            Just(Poison::Repeat),
            Just(Poison::Break),
            Just(Poison::Continue),
        ]
        .prop_map(RootOp::Poison),
        2 => (sync_k(), s).prop_map(|(k, s)| RootOp::AddSync(k, s)),
        1 => prop_oneof![Just(None), Just(Some(0u32)), Just(Some(3_600_000))].prop_map(RootOp::Sched),
        1 => Just(RootOp::NewInstanceFree),
        1 => Just(RootOp::Info),
        1 => prop_oneof![
            Just(RootNull::Add),
            Just(RootNull::Execute),
            Just(RootNull::Free),
            Just(RootNull::Parallel),
            Just(RootNull::StateVar),
            Just(RootNull::Sched),
            Just(RootNull::IsValid),
            Just(RootNull::Cancel),
        ]
        .prop_map(RootOp::NullBsi),
    ]
}

fn prog() -> impl Strategy<Value = Prog> {
    (
        prop_oneof![2 => Just(1u32), 1 => Just(2u32)],
        prop_oneof![
            6 => Just((1u32, u32::MAX)),
            1 => Just((1u32, 0u32)),
            2 => Just((2u32, u32::MAX)),
            1 => Just((0u32, u32::MAX)),
        ],
        vec(root_op(), 1..6),
        vec(
            prop_oneof![
                Just(RunOp::Execute),
                Just(RunOp::Info),
                name().prop_map(RunOp::StateVar),
                Just(RunOp::Sched),
                Just(RunOp::ParAdd),
            ],
            0..3,
        ),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.2, sub(DEPTH - 1)),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(threads, mutex, root, running, free_in_unhandled, reexec, rerun, exec_after)| {
                // The root may be gone once the flow ends: nothing on it
                // then. A second execute while it runs is a no-op, but
                // after it ended it runs the (empty) model: no rerun then.
                let mut running = if free_in_unhandled { vec![] } else { running };
                // A branch added through a root parallel's handle after
                // the flow ended (it may end before these calls: they run
                // on the test thread) makes the next run fail with
                // InternalError (a stale handle, tests/cabi_defects.rs); an
                // execute() then starts that run, whose unhandled error
                // this program cannot tell from a real one: not both.
                if running.iter().any(|r| matches!(r, RunOp::ParAdd)) {
                    running.retain(|r| !matches!(r, RunOp::Execute));
                }
                let rerun = rerun.filter(|_| {
                    !free_in_unhandled && !running.iter().any(|r| matches!(r, RunOp::Execute))
                });
                Prog {
                    threads,
                    mutex,
                    root,
                    running,
                    free_in_unhandled,
                    reexecute_in_unhandled: reexec,
                    rerun,
                    execute_after_free: exec_after,
                }
            },
        )
}

// ---- C strings ----------------------------------------------------------------

static HELLO: &[u8] = b"hello\0";
static NOT_UTF8: &[u8] = b"\xff\xfe\0";

fn code_ptr(c: Code) -> *const c_char {
    match c {
        Code::Null => null(),
        Code::User => c"Custom".as_ptr(),
        Code::Internal => c"InternalError".as_ptr(),
        Code::LoopBreak => c"LoopBreak".as_ptr(),
        Code::Timeout => c"Timeout".as_ptr(),
        Code::Empty => c"".as_ptr(),
        Code::BadUtf8 => NOT_UTF8.as_ptr().cast(),
    }
}

fn label_ptr(l: Label) -> *const c_char {
    match l {
        Label::Null => null(),
        Label::L0 => c"L0".as_ptr(),
        Label::L1 => c"L1".as_ptr(),
        Label::Unknown => c"nowhere".as_ptr(),
        Label::BadUtf8 => NOT_UTF8.as_ptr().cast(),
    }
}

fn name_ptr(n: Name) -> *const c_char {
    match n {
        Name::A => c"a".as_ptr(),
        Name::B => c"b".as_ptr(),
        Name::ErrorInfo => c"error_info".as_ptr(),
        Name::LastException => c"last_exception".as_ptr(),
        Name::Null => null(),
        Name::Empty => c"".as_ptr(),
        Name::BadUtf8 => NOT_UTF8.as_ptr().cast(),
    }
}

// ---- the case context -------------------------------------------------------

/// What a callback's `data` points to (boxed in the case's arena).
struct Tok {
    ctx: *const Ctx,
    kind: TokKind,
}

enum TokKind {
    Step {
        node: *const Node,
        eh: *const Node,
    },
    Loop {
        body: *const Node,
        cap: usize,
        n: AtomicUsize,
    },
    Task(usize),
    Cancel(usize, CancelAct),
    /// stateVariable's data: whether its cleanup was given, whether
    /// allocate may be called at all, and a handle allocate calls again.
    Var {
        cleanup: bool,
        never: bool,
        reenter: usize,
    },
    Main,
    SubFlow(usize),
    /// The first step of sub-flow N: frees its own root.
    FreeOwn(usize),
    /// A root executed after its runtime was freed.
    AfterFree,
    /// A callback that must never run.
    Never,
}

/// A scheduled callback.
#[derive(Default)]
struct TaskRec {
    ran: u32,
    cancelled: bool,
    never: bool,
    /// Completes the waiting step `bsi` when it runs.
    complete: Option<(usize, Outcome)>,
}

/// A FutoInSync of another implementation: counts lock and unlock.
#[repr(C)]
struct ForeignSync {
    hdr: FutoInSync,
    ctx: *const Ctx,
    fail: bool,
}

static FOREIGN_API: FutoInSyncAPI = FutoInSyncAPI {
    lock: Some(f_lock),
    unlock: Some(f_unlock),
};

/// A root made by newInstance().
struct SubRec {
    root: usize,
    free: FreeRoot,
    freed: AtomicBool,
    /// The step that made it is done with it: the test may free it.
    ready: AtomicBool,
    ends: Mutex<Vec<String>>,
}

impl SubRec {
    /// Frees the root unless someone did already.
    fn free(&self) {
        if !self.freed.swap(true, SeqCst) {
            let r = self.root as *mut FutoInAsyncSteps;
            call!(r, free(r));
        }
    }
}

/// Stack blocks with a cleanup, by address: the case that made them.
static BLOCKS: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

struct Ctx {
    case: u64,
    /// Boxed: C holds their addresses.
    #[allow(clippy::vec_box)]
    arena: Mutex<Vec<Box<Tok>>>,
    binds: AtomicUsize,
    handles: Mutex<Vec<usize>>,
    /// Counting tasks' handles (data1, data3), for odd-handle calls.
    kept: Mutex<Vec<(usize, isize)>>,
    tasks: Mutex<Vec<TaskRec>>,
    cancels: Mutex<Vec<u32>>,
    vars_live: Mutex<HashSet<usize>>,
    vars_made: AtomicUsize,
    vars_freed: AtomicUsize,
    stacks_made: AtomicUsize,
    stacks_freed: AtomicUsize,
    locks: AtomicUsize,
    lock_fails: AtomicUsize,
    unlocks: AtomicUsize,
    ends: Mutex<Vec<String>>,
    subs: Mutex<Vec<std::sync::Arc<SubRec>>>,
    after_free_ends: Mutex<Vec<String>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    violations: Mutex<Vec<String>>,
    done: Mutex<Sender<()>>,
    mutex: *mut FutoInSync,
    throttle: *mut FutoInSync,
    foreign: [Box<ForeignSync>; 2],
    free_in_unhandled: bool,
    reexecute_in_unhandled: bool,
    main_root: AtomicUsize,
    root_freed: AtomicBool,
    cov: Mutex<HashMap<&'static str, u64>>,
}

impl Ctx {
    fn new(case: u64, p: &Prog, done: Sender<()>) -> Box<Ctx> {
        let mut c = Box::new(Ctx {
            case,
            arena: Mutex::new(Vec::new()),
            binds: AtomicUsize::new(0),
            handles: Mutex::new(Vec::new()),
            kept: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            cancels: Mutex::new(Vec::new()),
            vars_live: Mutex::new(HashSet::new()),
            vars_made: AtomicUsize::new(0),
            vars_freed: AtomicUsize::new(0),
            stacks_made: AtomicUsize::new(0),
            stacks_freed: AtomicUsize::new(0),
            locks: AtomicUsize::new(0),
            lock_fails: AtomicUsize::new(0),
            unlocks: AtomicUsize::new(0),
            ends: Mutex::new(Vec::new()),
            subs: Mutex::new(Vec::new()),
            after_free_ends: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            done: Mutex::new(done),
            mutex: futoin_mutex_new(p.mutex.0, p.mutex.1),
            throttle: futoin_throttle_new(1, 1, u32::MAX),
            foreign: [false, true].map(|fail| {
                Box::new(ForeignSync {
                    hdr: FutoInSync { api: &FOREIGN_API },
                    ctx: null(),
                    fail,
                })
            }),
            free_in_unhandled: p.free_in_unhandled,
            reexecute_in_unhandled: p.reexecute_in_unhandled,
            main_root: AtomicUsize::new(0),
            root_freed: AtomicBool::new(false),
            cov: Mutex::new(HashMap::new()),
        });
        let me = &*c as *const Ctx;
        for f in &mut c.foreign {
            f.ctx = me;
        }
        c
    }

    fn violation(&self, v: impl Into<String>) {
        lock(&self.violations).push(v.into());
    }

    fn hit(&self, k: &'static str) {
        *lock(&self.cov).entry(k).or_default() += 1;
    }

    /// A `data` pointer for a callback, alive until the case ends.
    fn tok(&self, kind: TokKind) -> *mut c_void {
        let t = Box::new(Tok { ctx: self, kind });
        let p = &*t as *const Tok as *mut c_void;
        lock(&self.arena).push(t);
        p
    }

    fn step_tok(&self, node: &Node, eh: Option<&Node>) -> *mut c_void {
        self.tok(TokKind::Step {
            node,
            eh: eh.map_or(null(), |e| e as *const Node),
        })
    }

    fn task(&self, r: TaskRec) -> (*mut c_void, usize) {
        let mut t = lock(&self.tasks);
        t.push(r);
        let i = t.len() - 1;
        drop(t);
        (self.tok(TokKind::Task(i)), i)
    }

    fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        lock(&self.threads).push(std::thread::spawn(f));
    }

    /// A callback starts on `bsi`: false once the case is over its budget
    /// (the callback then does nothing, and loop bodies break).
    fn enter(&self, bsi: *mut FutoInAsyncSteps) -> bool {
        let n = self.binds.fetch_add(1, SeqCst);
        lock(&self.handles).push(bsi as usize);
        if call!(bsi, is_valid(bsi)) != 1 {
            self.violation("isValid() is not 1 in the handle's own callback");
        }
        if call!(bsi, is_same_thread(bsi)) != 1 {
            self.violation("is_same_thread() is not 1 in the handle's own callback");
        }
        n < BUDGET
    }

    /// A FutoInArgs of kind `k` (None for a NULL pointer); every value
    /// counts its cleanup.
    fn args(&self, k: ArgsK) -> Option<FutoInArgs> {
        let c = self.case;
        let int = |x| RawVal::new(c, ty(FTN_TYPE_INT32, true), x, 0).to_c();
        let s = |b: &'static [u8]| {
            RawVal::new(c, ty(FTN_TYPE_STRING, true), b.as_ptr() as u64, 0).to_c()
        };
        let arr = || {
            let t = ty(FTN_TYPE_ARRAY | FTN_TYPE_INT32, true);
            RawVal::new(c, t, ARRAY_MEM.as_ptr() as u64, 4).to_c()
        };
        let obj = || RawVal::new(c, ty(FTN_TYPE_CUSTOM_OBJECT, true), 0xC0FFEE, 0).to_c();
        let mut a = FutoInArgs::EMPTY;
        match k {
            ArgsK::Null => return None,
            ArgsK::Empty => {}
            ArgsK::Int => a.args[0] = int(42),
            ArgsK::Str => {
                a.args[0] = s(HELLO);
                a.args[1] = int(7);
            }
            ArgsK::Array => a.args[0] = arr(),
            ArgsK::Custom => a.args[0] = obj(),
            ArgsK::Four => {
                a.args = [s(HELLO), int(1), arr(), obj()];
            }
            ArgsK::Unknown => a.args[0] = RawVal::new(c, ty(0xF0, true), 1, 0).to_c(),
            ArgsK::Gap => a.args[1] = int(3),
            ArgsK::BadUtf8 => a.args[0] = s(NOT_UTF8),
        }
        Some(a)
    }

    /// success() with args of kind `k` on `bsi`; the args must come back
    /// reset, whatever the handle.
    fn success(&self, bsi: *mut FutoInAsyncSteps, table: *mut FutoInAsyncSteps, k: ArgsK) {
        match self.args(k) {
            None => call!(table, success(bsi, null_mut())),
            Some(mut a) => {
                call!(table, success(bsi, &mut a));
                if a.args.iter().any(|v| !v.type_.is_null()) {
                    self.violation("success() left values in the args");
                }
            }
        }
    }

    fn complete(&self, bsi: *mut FutoInAsyncSteps, o: Outcome) {
        match o {
            Outcome::Ok(k) => self.success(bsi, bsi, k),
            Outcome::Err(c) => call!(bsi, handle_error(bsi, code_ptr(c), null())),
        }
    }

    fn sync_ptr(&self, k: SyncK) -> *mut FutoInSync {
        match k {
            SyncK::Mutex => self.mutex,
            SyncK::Throttle => self.throttle,
            SyncK::Null => null_mut(),
            SyncK::Foreign => &*self.foreign[0] as *const ForeignSync as *mut FutoInSync,
            SyncK::ForeignFail => &*self.foreign[1] as *const ForeignSync as *mut FutoInSync,
        }
    }

    /// add() of `s` on `h` (a step, a parallel's or a root's handle).
    fn add_sub(&self, h: *mut FutoInAsyncSteps, s: &Sub) {
        let d = self.step_tok(&s.node, s.eh.as_ref());
        let f: ExecuteCallback = if s.null_cb { None } else { Some(c_step) };
        let eh: ErrorCallback = s.eh.as_ref().map(|_| c_catch as _);
        call!(h, add(h, d, f, eh));
    }

    fn add_sync(&self, h: *mut FutoInAsyncSteps, k: SyncK, s: &Sub) {
        let d = self.step_tok(&s.node, s.eh.as_ref());
        let f: ExecuteCallback = if s.null_cb { None } else { Some(c_step) };
        let eh: ErrorCallback = s.eh.as_ref().map(|_| c_catch as _);
        call!(h, add_sync(h, self.sync_ptr(k), d, f, eh));
    }

    #[allow(clippy::too_many_arguments)]
    fn state_var(
        &self,
        h: *mut FutoInAsyncSteps,
        table: *mut FutoInAsyncSteps,
        name: Name,
        alloc: bool,
        cleanup: bool,
        never: bool,
        reenter: bool,
    ) -> *mut c_void {
        let reenter = if reenter { h as usize } else { 0 };
        let d = self.tok(TokKind::Var {
            cleanup,
            never,
            reenter,
        });
        let a: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void> =
            alloc.then_some(c_alloc as _);
        let c: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)> =
            cleanup.then_some(c_var_cleanup as _);
        let p = call!(table, state_variable(h, d, name_ptr(name), a, c));
        if let (Name::ErrorInfo | Name::LastException, false) = (name, p.is_null()) {
            // SAFETY: the predefined names give a NUL-terminated string.
            let _ = unsafe { CStr::from_ptr(p as *const c_char) }
                .to_bytes()
                .len();
        }
        p
    }

    /// Scheduling through `table` with handle `h`: the handle it returned
    /// and the task's index.
    fn sched(
        &self,
        h: *mut FutoInAsyncSteps,
        table: *mut FutoInAsyncSteps,
        delay: Option<u32>,
        rec: TaskRec,
        null_cb: bool,
    ) -> (FutoInHandle, usize) {
        let (d, i) = self.task(rec);
        let cb: SchedCallback = if null_cb { None } else { Some(c_task) };
        let h = match delay {
            None => call!(table, sched_immediate(h, d, cb)),
            Some(ms) => call!(table, sched_deferred(h, ms, d, cb)),
        };
        (h, i)
    }

    /// A call on `h`, which is not the running callback's handle (a stale
    /// one, or a parallel's).
    fn other(&self, h: *mut FutoInAsyncSteps, c: Other) {
        match c {
            Other::IsValid => {
                call!(h, is_valid(h));
            }
            Other::Success(k) => self.success(h, h, k),
            Other::HandleError(code) => call!(h, handle_error(h, code_ptr(code), null())),
            Other::Add => {
                let d = self.step_tok(&EMPTY_NODE, None);
                call!(h, add(h, d, Some(c_step), None));
            }
            Other::Stack => {
                let p = call!(h, stack(h, 16, Some(c_stack_cleanup)));
                if !p.is_null() {
                    self.violation("stack() gave memory through another callback's handle");
                }
            }
            Other::StateVar => {
                self.state_var(h, h, Name::A, true, true, false, false);
            }
            Other::Sched => {
                self.sched(h, h, None, TaskRec::default(), false);
            }
            Other::SameThread => {
                call!(h, is_same_thread(h));
            }
            Other::WaitExternal => call!(h, wait_external(h)),
            Other::Parallel => {
                let p = call!(h, parallel(h, null_mut(), None));
                if !p.is_null() {
                    self.violation("parallel() through another callback's handle");
                }
            }
            Other::SetTimeout => call!(h, set_timeout(h, 1)),
            Other::Loop => {
                let d = self.tok(TokKind::Loop {
                    body: &EMPTY_NODE,
                    cap: 1,
                    n: AtomicUsize::new(0),
                });
                call!(h, loop_(h, d, Some(c_loop), null()));
            }
        }
    }

    /// A NULL handle through `t`'s table.
    fn null_call(&self, t: *mut FutoInAsyncSteps, c: NullCall) {
        let n = null_mut();
        match c {
            NullCall::IsValid => {
                if call!(t, is_valid(n)) != 0 {
                    self.violation("isValid(NULL) != 0");
                }
            }
            NullCall::RootId => {
                if call!(t, root_id(n)) != 0 {
                    self.violation("rootId(NULL) != 0");
                }
            }
            NullCall::Success(k) => self.success(n, t, k),
            NullCall::HandleError => call!(t, handle_error(n, c"Custom".as_ptr(), null())),
            NullCall::Add => {
                let d = self.tok(TokKind::Never);
                call!(t, add(n, d, Some(c_never_step), Some(c_never_catch)));
            }
            NullCall::Parallel => {
                if !call!(t, parallel(n, null_mut(), None)).is_null() {
                    self.violation("parallel(NULL) gave a handle");
                }
            }
            NullCall::Stack => {
                if !call!(t, stack(n, 8, Some(c_stack_cleanup))).is_null() {
                    self.violation("stack(NULL) gave memory");
                }
            }
            NullCall::StateVar => {
                if !self
                    .state_var(n, t, Name::A, true, true, true, false)
                    .is_null()
                {
                    self.violation("stateVariable(NULL) gave a value");
                }
            }
            NullCall::Sched => {
                let (h, _) = self.sched(
                    n,
                    t,
                    None,
                    TaskRec {
                        never: true,
                        ..TaskRec::default()
                    },
                    false,
                );
                if h != FutoInHandle::EMPTY {
                    self.violation("sched_immediate(NULL) gave a handle");
                }
            }
            NullCall::SameThread => {
                if call!(t, is_same_thread(n)) != 0 {
                    self.violation("is_same_thread(NULL) != 0");
                }
            }
            NullCall::NewInstance => {
                if !call!(t, new_instance(n)).is_null() {
                    self.violation("newInstance(NULL) gave a root");
                }
            }
            NullCall::Free => call!(t, free(n)),
            NullCall::Loop => {
                let d = self.tok(TokKind::Never);
                call!(t, loop_(n, d, Some(c_never_loop), null()));
            }
            NullCall::WaitExternal => call!(t, wait_external(n)),
            NullCall::Break => call!(t, break_loop(n, null())),
            NullCall::AddSync => {
                let d = self.tok(TokKind::Never);
                call!(t, add_sync(n, self.mutex, d, Some(c_never_step), None));
            }
            NullCall::SchedIsValid => {
                let mut h = FutoInHandle::EMPTY;
                if call!(t, sched_is_valid(n, &mut h)) != 0 {
                    self.violation("sched_is_valid(NULL, ...) != 0");
                }
                call!(t, sched_cancel(n, &mut h));
            }
        }
    }

    /// One call of a step callback's program on its handle `bsi`.
    fn op(&self, bsi: *mut FutoInAsyncSteps, op: &Op) {
        match op {
            Op::Add(s) => {
                self.hit("add");
                self.add_sub(bsi, s);
            }
            Op::Parallel {
                eh,
                branches,
                misuse,
            } => {
                self.hit("parallel");
                let d = self.step_tok(&EMPTY_NODE, eh.as_ref());
                let ehc: ErrorCallback = eh.as_ref().map(|_| c_catch as _);
                let ph = call!(bsi, parallel(bsi, d, ehc));
                if ph.is_null() {
                    self.hit("parallel refused");
                    return;
                }
                self.binds.fetch_add(1, SeqCst);
                lock(&self.handles).push(ph as usize);
                for b in branches {
                    self.add_sub(ph, b);
                }
                if let Some(m) = misuse {
                    self.other(ph, *m);
                }
            }
            Op::StateVar {
                name,
                alloc,
                cleanup,
                reenter,
            } => {
                self.hit("stateVariable");
                let p = self.state_var(bsi, bsi, *name, *alloc, *cleanup, false, *reenter);
                if !p.is_null() && matches!(name, Name::A | Name::B | Name::Empty) {
                    // The same name again: the same value, no allocate.
                    let q = self.state_var(bsi, bsi, *name, true, true, true, false);
                    if p != q {
                        self.violation("stateVariable() gave another value for the same name");
                    }
                }
            }
            Op::Stack { size, cleanup } => {
                self.hit("stack");
                let cb: Option<unsafe extern "C" fn(*mut c_void)> =
                    cleanup.then_some(c_stack_cleanup as _);
                let p = call!(bsi, stack(bsi, *size, cb)) as *mut u8;
                if p.is_null() {
                    self.hit("stack NULL");
                    return;
                }
                if p as usize % 16 != 0 {
                    self.violation(format!("stack({size}) not 16-byte aligned"));
                }
                let n = (*size).min(64);
                // SAFETY: stack() gave `size` bytes; we touch at most 64.
                let m = unsafe { std::slice::from_raw_parts_mut(p, n) };
                if m.iter().any(|b| *b != 0) {
                    self.violation(format!("stack({size}) not zeroed"));
                }
                m.fill(0xAB);
                if *cleanup {
                    self.stacks_made.fetch_add(1, SeqCst);
                    lock(&BLOCKS).insert(p as usize, self as *const Ctx as usize);
                }
            }
            Op::Success(k) => {
                self.hit("success");
                self.success(bsi, bsi, *k);
            }
            Op::HandleError(c, info) => {
                self.hit("handle_error");
                let i = if *info { c"fuzz info".as_ptr() } else { null() };
                call!(bsi, handle_error(bsi, code_ptr(*c), i));
            }
            Op::SetTimeout(ms) => {
                self.hit("setTimeout");
                call!(bsi, set_timeout(bsi, *ms));
            }
            Op::SetCancel { null, act } => {
                self.hit("setCancel");
                let i = {
                    let mut c = lock(&self.cancels);
                    c.push(0);
                    c.len() - 1
                };
                let d = self.tok(TokKind::Cancel(i, *act));
                let cb: CancelCallback = if *null { None } else { Some(c_cancel) };
                call!(bsi, set_cancel(bsi, d, cb));
            }
            Op::WaitExternal => {
                self.hit("waitExternal");
                call!(bsi, wait_external(bsi));
            }
            Op::Complete(via, o) => {
                let rec = || TaskRec {
                    complete: Some((bsi as usize, *o)),
                    ..TaskRec::default()
                };
                match via {
                    Via::Sched => {
                        self.hit("complete from the loop");
                        self.sched(bsi, bsi, None, rec(), false);
                    }
                    Via::Deferred(ms) => {
                        self.hit("complete from the loop, deferred");
                        self.sched(bsi, bsi, Some(*ms), rec(), false);
                    }
                    Via::Thread => {
                        self.hit("complete from a thread");
                        let (c, b, o) = (Addr::of(self), Addr::of(bsi), *o);
                        self.spawn(move || {
                            // SAFETY: the context outlives the case's
                            // threads (joined before it is dropped).
                            let ctx = unsafe { &*c.ptr::<Ctx>() };
                            ctx.complete(b.ptr(), o);
                        });
                    }
                }
            }
            Op::Loop {
                label,
                repeat,
                cap,
                body,
                null_body,
            } => {
                self.hit(if repeat.is_some() { "repeat" } else { "loop" });
                let d = self.tok(TokKind::Loop {
                    body,
                    cap: (*cap).into(),
                    n: AtomicUsize::new(0),
                });
                match repeat {
                    Some(count) => {
                        let f: RepeatCallback = if *null_body { None } else { Some(c_repeat) };
                        call!(bsi, repeat(bsi, d, *count, f, label_ptr(*label)));
                    }
                    None => {
                        let f: LoopCallback = if *null_body { None } else { Some(c_loop) };
                        call!(bsi, loop_(bsi, d, f, label_ptr(*label)));
                    }
                }
            }
            Op::Break(l) => {
                self.hit("breakLoop");
                call!(bsi, break_loop(bsi, label_ptr(*l)));
            }
            Op::Continue(l) => {
                self.hit("continueLoop");
                call!(bsi, continue_loop(bsi, label_ptr(*l)));
            }
            Op::AddSync(k, s) => {
                self.hit("addSync");
                self.add_sync(bsi, *k, s);
            }
            Op::Info => {
                self.hit("info");
                call!(bsi, root_id(bsi));
                if call!(bsi, is_valid(bsi)) != 1 {
                    self.violation("isValid() != 1 in a callback");
                }
                if call!(bsi, is_same_thread(bsi)) != 1 {
                    self.violation("is_same_thread() != 1 in a callback");
                }
            }
            Op::NewInstance { run, free } => {
                self.hit("newInstance");
                let r = call!(bsi, new_instance(bsi));
                if r.is_null() {
                    self.violation("newInstance() in a running flow gave NULL");
                    return;
                }
                let sub = std::sync::Arc::new(SubRec {
                    root: r as usize,
                    free: *free,
                    freed: AtomicBool::new(false),
                    ready: AtomicBool::new(false),
                    ends: Mutex::new(Vec::new()),
                });
                let i = {
                    let mut v = lock(&self.subs);
                    v.push(sub.clone());
                    v.len() - 1
                };
                if let Some(s) = run {
                    self.hit("sub-flow");
                    if let FreeRoot::OwnStep = free {
                        let d = self.tok(TokKind::FreeOwn(i));
                        call!(r, add(r, d, Some(c_free_own), None));
                    }
                    self.add_sub(r, s);
                    let d = self.tok(TokKind::SubFlow(i));
                    call!(r, add(r, d, Some(c_last), None));
                    call!(r, execute(r, d, Some(c_unhandled)));
                }
                sub.ready.store(true, SeqCst);
                match free {
                    FreeRoot::Now => sub.free(),
                    FreeRoot::Thread => self.spawn(move || sub.free()),
                    _ => {}
                }
            }
            Op::Sched {
                delay,
                cancel,
                null_cb,
            } => {
                self.hit("sched");
                let (mut h, i) = self.sched(bsi, bsi, *delay, TaskRec::default(), *null_cb);
                if *null_cb {
                    if h != FutoInHandle::EMPTY {
                        self.violation("a NULL scheduled callback gave a handle");
                    }
                    return;
                }
                if call!(bsi, sched_is_valid(bsi, &mut h)) != 1 {
                    self.violation("a task just scheduled is not valid");
                }
                if *cancel {
                    lock(&self.tasks)[i].cancelled = true;
                    call!(bsi, sched_cancel(bsi, &mut h));
                    if call!(bsi, sched_is_valid(bsi, &mut h)) != 0 {
                        self.violation("a cancelled task is still valid");
                    }
                    call!(bsi, sched_cancel(bsi, &mut h));
                } else {
                    lock(&self.kept).push((h.data1 as usize, h.data3));
                }
            }
            Op::OddHandle(o) => {
                self.hit("odd task handle");
                let kept = lock(&self.kept).clone();
                let pick = |k: u8| kept.get(k as usize % kept.len().max(1)).copied();
                let mut h = FutoInHandle::EMPTY;
                let hp: *mut FutoInHandle = match o {
                    OddHandle::Null => null_mut(),
                    OddHandle::Empty => &mut h,
                    OddHandle::Garbage(a, b) => {
                        h.data1 = *a as *mut c_void;
                        h.data3 = *b as isize;
                        &mut h
                    }
                    OddHandle::Kept(k) => {
                        if let Some((a, b)) = pick(*k) {
                            h.data1 = a as *mut c_void;
                            h.data3 = b;
                        }
                        &mut h
                    }
                    OddHandle::Mutated(k, v) => {
                        if let Some((a, b)) = pick(*k) {
                            h.data1 = a as *mut c_void;
                            // Another version of the same slot (high
                            // bits: never one the slot reaches in a case).
                            h.data3 = b ^ ((*v as isize) << 56);
                        }
                        &mut h
                    }
                };
                let valid = call!(bsi, sched_is_valid(bsi, hp));
                if valid != 0 && !matches!(o, OddHandle::Kept(_)) {
                    self.violation(format!("sched_is_valid({o:?}) != 0"));
                }
                call!(bsi, sched_cancel(bsi, hp));
            }
            Op::Stale(k, c) => {
                // Exact only while no handle was reused (see BUDGET).
                if self.binds.load(SeqCst) >= BUDGET {
                    return;
                }
                let hs = lock(&self.handles).clone();
                let hs: Vec<usize> = hs.into_iter().filter(|h| *h != bsi as usize).collect();
                if let Some(h) = hs.get(*k as usize % hs.len().max(1)) {
                    self.hit("call on another handle");
                    self.other(*h as *mut FutoInAsyncSteps, *c);
                }
            }
            Op::FromThread(o) => {
                self.hit("call from another thread");
                let (c, b, o) = (Addr::of(self), Addr::of(bsi), *o);
                self.spawn(move || {
                    // SAFETY: the context outlives the case's threads.
                    unsafe { &*c.ptr::<Ctx>() }.other(b.ptr(), o);
                });
            }
            Op::NullBsi(c) => {
                self.hit("NULL handle");
                self.null_call(bsi, *c);
            }
            Op::OnStep(c) => {
                self.hit("root call on a step");
                match c {
                    StepOnly::Execute => {
                        let d = self.tok(TokKind::Never);
                        call!(bsi, execute(bsi, d, Some(c_unhandled)));
                    }
                    StepOnly::Cancel => call!(bsi, cancel(bsi)),
                    StepOnly::Free => call!(bsi, free(bsi)),
                }
            }
        }
    }

    /// A callback's program: its calls, then its end. `args` is what an
    /// execute callback got (NULL for handlers and loop bodies).
    fn run(&self, bsi: *mut FutoInAsyncSteps, n: &Node, args: *const FutoInArgs) {
        for o in &n.ops {
            self.op(bsi, o);
        }
        match &n.end {
            End::Return => {}
            End::Success(k) => self.success(bsi, bsi, *k),
            End::Error(c, info) => {
                let i = if *info { c"fuzz info".as_ptr() } else { null() };
                call!(bsi, handle_error(bsi, code_ptr(*c), i));
            }
            End::Break(l) => call!(bsi, break_loop(bsi, label_ptr(*l))),
            End::Continue(l) => call!(bsi, continue_loop(bsi, label_ptr(*l))),
            End::Forward => {
                self.hit("forward args");
                call!(bsi, success(bsi, args as *mut FutoInArgs));
            }
        }
    }

    fn end(&self, how: String) {
        lock(&self.ends).push(how);
        let _ = lock(&self.done).send(());
    }
}

/// The token behind a callback's `data`.
///
/// # Safety
/// `data` came from `Ctx::tok` of a case that is still running.
unsafe fn tok<'a>(data: *mut c_void) -> (&'a Ctx, &'a TokKind) {
    // SAFETY: caller's contract: arena boxes and their context live until
    // the runtime is freed and the case's threads are joined.
    unsafe {
        let t = &*(data as *const Tok);
        (&*t.ctx, &t.kind)
    }
}

unsafe extern "C" fn c_step(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Step { node, .. } = k else {
        return c.violation("c_step with another token");
    };
    if c.enter(bsi) {
        // SAFETY: nodes belong to the case's program, alive until it ends.
        c.run(bsi, unsafe { &**node }, args);
    }
}

unsafe extern "C" fn c_catch(bsi: *mut FutoInAsyncSteps, data: *mut c_void, code: *const c_char) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Step { eh, .. } = k else {
        return c.violation("c_catch with another token");
    };
    if code.is_null() {
        c.violation("an error handler got a NULL code");
    }
    let _ = text(code);
    if eh.is_null() {
        return c.violation("c_catch without a handler node");
    }
    if c.enter(bsi) {
        c.hit("error handler");
        // SAFETY: as in c_step.
        c.run(bsi, unsafe { &**eh }, null());
    }
}

/// A loop body: breaks by itself after `cap` iterations (or once the case
/// is over its budget).
fn loop_body(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: Option<usize>) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Loop { body, cap, n } = k else {
        return c.violation("a loop body with another token");
    };
    let it = n.fetch_add(1, SeqCst);
    if let Some(i) = i {
        if i != it {
            c.violation(format!("repeat gave i={i} on call {it}"));
        }
    }
    if !c.enter(bsi) || it >= *cap {
        call!(bsi, break_loop(bsi, null()));
        return;
    }
    c.hit("loop body");
    // SAFETY: as in c_step.
    c.run(bsi, unsafe { &**body }, null());
}

unsafe extern "C" fn c_loop(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    loop_body(bsi, data, None);
}

unsafe extern "C" fn c_repeat(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: usize) {
    loop_body(bsi, data, Some(i));
}

unsafe extern "C" fn c_task(data: *mut c_void) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Task(i) = k else {
        return c.violation("c_task with another token");
    };
    let complete = {
        let mut t = lock(&c.tasks);
        let r = &mut t[*i];
        r.ran += 1;
        if r.ran > 1 || r.cancelled || r.never {
            let m = format!(
                "task ran {} times (cancelled {}, never {})",
                r.ran, r.cancelled, r.never
            );
            drop(t);
            return c.violation(m);
        }
        r.complete
    };
    c.hit("task ran");
    if let Some((bsi, o)) = complete {
        c.complete(bsi as *mut FutoInAsyncSteps, o);
    }
}

unsafe extern "C" fn c_cancel(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Cancel(i, act) = k else {
        return c.violation("c_cancel with another token");
    };
    c.hit("cancel callback");
    let n = {
        let mut v = lock(&c.cancels);
        v[*i] += 1;
        v[*i]
    };
    if n > 1 {
        c.violation(format!("a cancel callback ran {n} times"));
    }
    // The cancelled step's handle, from inside its cancel callback.
    match act {
        CancelAct::Nothing => {}
        CancelAct::Success(k) => c.success(bsi, bsi, *k),
        CancelAct::Error => call!(bsi, handle_error(bsi, c"Custom".as_ptr(), null())),
        CancelAct::Sched => {
            c.sched(bsi, bsi, None, TaskRec::default(), false);
        }
    }
}

unsafe extern "C" fn c_alloc(data: *mut c_void) -> *mut c_void {
    static NO_CLEANUP: u64 = 0;
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Var {
        cleanup,
        never,
        reenter,
    } = k
    else {
        c.violation("c_alloc with another token");
        return null_mut();
    };
    if *never {
        c.violation("stateVariable() allocated where it must not");
    }
    if *reenter != 0 {
        // Back into the runtime from allocate(): the handle being asked.
        c.hit("re-entrant allocate");
        let h = *reenter as *mut FutoInAsyncSteps;
        c.state_var(h, h, Name::A, true, true, false, false);
        call!(h, is_valid(h));
        call!(h, root_id(h));
        let d = c.step_tok(&EMPTY_NODE, None);
        call!(h, add(h, d, Some(c_step), None));
    }
    if !cleanup {
        return &NO_CLEANUP as *const u64 as *mut c_void;
    }
    c.hit("state variable made");
    c.vars_made.fetch_add(1, SeqCst);
    let p = Box::into_raw(Box::new(0x5EED_u64)) as *mut c_void;
    lock(&c.vars_live).insert(p as usize);
    p
}

unsafe extern "C" fn c_var_cleanup(data: *mut c_void, value: *mut c_void) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::Var { cleanup: true, .. } = k else {
        return c.violation("a state variable cleanup with another token");
    };
    if !lock(&c.vars_live).remove(&(value as usize)) {
        return c.violation(format!(
            "state variable cleanup of {value:?}: not made, or twice"
        ));
    }
    c.vars_freed.fetch_add(1, SeqCst);
    // SAFETY: made by c_alloc as a Box<u64>, cleaned up once (checked).
    drop(unsafe { Box::from_raw(value as *mut u64) });
}

unsafe extern "C" fn c_stack_cleanup(value: *mut c_void) {
    match lock(&BLOCKS).remove(&(value as usize)) {
        Some(ctx) => {
            // SAFETY: the block's case is alive while its blocks are.
            unsafe { &*(ctx as *const Ctx) }
                .stacks_freed
                .fetch_add(1, SeqCst);
        }
        None => {
            STRAY.fetch_add(1, SeqCst);
        }
    }
}

unsafe extern "C" fn c_last(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    match k {
        TokKind::Main => c.end("ok".into()),
        TokKind::SubFlow(i) => {
            let s = lock(&c.subs)[*i].clone();
            lock(&s.ends).push("ok".into());
        }
        _ => c.violation("c_last with another token"),
    }
}

unsafe extern "C" fn c_unhandled(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    match k {
        TokKind::Main => {
            if c.main_root.load(SeqCst) != bsi as usize {
                c.violation("unhandled_error did not get the root's handle");
            }
            if c.reexecute_in_unhandled {
                // The flow still runs: a no-op.
                let d = c.tok(TokKind::Never);
                call!(bsi, execute(bsi, d, Some(c_unhandled)));
            }
            if c.free_in_unhandled {
                c.root_freed.store(true, SeqCst);
                call!(bsi, free(bsi));
            }
            c.end(text(code));
        }
        TokKind::SubFlow(i) => {
            let s = lock(&c.subs)[*i].clone();
            if s.root != bsi as usize {
                c.violation("a sub-flow's unhandled_error did not get its root");
            }
            lock(&s.ends).push(text(code));
            if let FreeRoot::Unhandled = s.free {
                s.free();
            }
        }
        TokKind::AfterFree => lock(&c.after_free_ends).push(text(code)),
        _ => c.violation(format!(
            "an unhandled_error that must not run ran ({})",
            text(code)
        )),
    }
}

unsafe extern "C" fn c_free_own(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    // SAFETY: a token of the case.
    let (c, k) = unsafe { tok(data) };
    let TokKind::FreeOwn(i) = k else {
        return c.violation("c_free_own with another token");
    };
    c.hit("root freed by its own step");
    let s = lock(&c.subs)[*i].clone();
    s.free();
}

unsafe extern "C" fn c_never_step(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    // SAFETY: a token of the case.
    unsafe { tok(data) }
        .0
        .violation("a step added through a NULL handle ran");
}

unsafe extern "C" fn c_never_catch(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const c_char) {
    // SAFETY: a token of the case.
    unsafe { tok(data) }
        .0
        .violation("a handler added through a NULL handle ran");
}

unsafe extern "C" fn c_never_loop(_: *mut FutoInAsyncSteps, data: *mut c_void) {
    // SAFETY: a token of the case.
    unsafe { tok(data) }
        .0
        .violation("a loop added through a NULL handle ran");
}

unsafe extern "C" fn f_lock(bsi: *mut FutoInAsyncSteps, sync: *mut FutoInSync) {
    // SAFETY: our ForeignSync, alive until the case ends.
    let s = unsafe { &*(sync as *const ForeignSync) };
    // SAFETY: its context, alive as long.
    let c = unsafe { &*s.ctx };
    c.binds.fetch_add(1, SeqCst);
    c.hit("foreign lock");
    c.locks.fetch_add(1, SeqCst);
    if s.fail {
        c.lock_fails.fetch_add(1, SeqCst);
        call!(bsi, handle_error(bsi, c"LockFailed".as_ptr(), null()));
    }
}

unsafe extern "C" fn f_unlock(_: *mut FutoInAsyncSteps, sync: *mut FutoInSync) {
    // SAFETY: as in f_lock.
    let s = unsafe { &*(sync as *const ForeignSync) };
    // SAFETY: as in f_lock.
    let c = unsafe { &*s.ctx };
    c.binds.fetch_add(1, SeqCst);
    c.unlocks.fetch_add(1, SeqCst);
}

// ---- running a program ------------------------------------------------------

/// Root-level calls before execute (the root's handle `r`).
fn do_root_op(c: &Ctx, r: *mut FutoInAsyncSteps, op: &RootOp, pars: &mut Vec<usize>) {
    match op {
        RootOp::Add(s) => c.add_sub(r, s),
        RootOp::Parallel {
            eh,
            branches,
            misuse,
        } => {
            let d = c.step_tok(&EMPTY_NODE, eh.as_ref());
            let ehc: ErrorCallback = eh.as_ref().map(|_| c_catch as _);
            let ph = call!(r, parallel(r, d, ehc));
            if ph.is_null() {
                return c.violation("parallel() on an idle root gave NULL");
            }
            pars.push(ph as usize);
            for b in branches {
                c.add_sub(ph, b);
            }
            if let Some(k) = misuse {
                c.success(ph, ph, *k);
                if !call!(ph, stack(ph, 8, Some(c_stack_cleanup))).is_null() {
                    c.violation("stack() on a root's parallel gave memory");
                }
                if call!(ph, is_valid(ph)) != 0 {
                    c.violation("isValid() of a root's parallel handle != 0");
                }
            }
        }
        RootOp::StateVar {
            name,
            alloc,
            cleanup,
            reenter,
        } => {
            c.state_var(r, r, *name, *alloc, *cleanup, false, *reenter);
        }
        RootOp::Poison(p) => {
            c.hit("step call on a root");
            match p {
                Poison::Stack => {
                    if !call!(r, stack(r, 16, Some(c_stack_cleanup))).is_null() {
                        c.violation("stack() on a root gave memory");
                    }
                }
                Poison::Success(k) => c.success(r, r, *k),
                Poison::HandleError => call!(r, handle_error(r, c"Custom".as_ptr(), null())),
                Poison::SetTimeout => call!(r, set_timeout(r, 1)),
                Poison::SetCancel => {
                    let d = c.tok(TokKind::Never);
                    call!(r, set_cancel(r, d, Some(c_cancel)));
                }
                Poison::WaitExternal => call!(r, wait_external(r)),
                Poison::Loop => {
                    let d = c.tok(TokKind::Never);
                    call!(r, loop_(r, d, Some(c_never_loop), null()));
                }
                Poison::Repeat => {
                    let d = c.tok(TokKind::Never);
                    call!(r, repeat(r, d, 3, Some(c_repeat), null()));
                }
                Poison::Break => call!(r, break_loop(r, null())),
                Poison::Continue => call!(r, continue_loop(r, c"L0".as_ptr())),
            }
        }
        RootOp::AddSync(k, s) => c.add_sync(r, *k, s),
        RootOp::Sched(delay) => {
            let (h, _) = c.sched(r, r, *delay, TaskRec::default(), false);
            if h != FutoInHandle::EMPTY {
                c.violation("scheduling on a root gave a handle");
            }
        }
        RootOp::NewInstanceFree => {
            let n = call!(r, new_instance(r));
            if n.is_null() {
                return c.violation("newInstance() on a root gave NULL");
            }
            call!(n, free(n));
        }
        RootOp::Info => {
            if call!(r, is_valid(r)) != 1 {
                c.violation("isValid(root) != 1");
            }
            if call!(r, root_id(r)) % 2 == 0 {
                c.violation("a root's id is not odd");
            }
            if call!(r, is_same_thread(r)) != 0 {
                c.violation("is_same_thread(root) != 0 on the test thread");
            }
        }
        RootOp::NullBsi(k) => {
            let n = null_mut();
            match k {
                RootNull::Add => {
                    let d = c.tok(TokKind::Never);
                    call!(r, add(n, d, Some(c_never_step), None));
                }
                RootNull::Execute => {
                    let d = c.tok(TokKind::Never);
                    call!(r, execute(n, d, Some(c_unhandled)));
                }
                RootNull::Free => call!(r, free(n)),
                RootNull::Parallel => {
                    if !call!(r, parallel(n, null_mut(), None)).is_null() {
                        c.violation("root parallel(NULL) gave a handle");
                    }
                }
                RootNull::StateVar => {
                    if !c
                        .state_var(n, r, Name::A, true, true, true, false)
                        .is_null()
                    {
                        c.violation("root stateVariable(NULL) gave a value");
                    }
                }
                RootNull::Sched => {
                    let rec = TaskRec {
                        never: true,
                        ..TaskRec::default()
                    };
                    c.sched(n, r, None, rec, false);
                }
                RootNull::IsValid => {
                    if call!(r, is_valid(n)) != 0 {
                        c.violation("root isValid(NULL) != 0");
                    }
                }
                RootNull::Cancel => call!(r, cancel(n)),
            }
        }
    }
}

/// What a program did, for the coverage report.
struct Ran {
    end: String,
    cov: HashMap<&'static str, u64>,
    binds: usize,
}

fn run_prog(p: &Prog) -> Result<Ran, TestCaseError> {
    let case = NEXT_CASE.fetch_add(1, SeqCst);
    let (tx, rx): (Sender<()>, Receiver<()>) = channel();
    let ctx = Ctx::new(case, p, tx);
    let c = &*ctx;
    let rt = new_runtime(p.threads);
    // SAFETY: a live runtime.
    let root = unsafe { futoin_asyncsteps_new(rt) };
    c.main_root.store(root as usize, SeqCst);
    let mut pars = Vec::new();
    for o in &p.root {
        do_root_op(c, root, o, &mut pars);
    }
    let main = c.tok(TokKind::Main);
    call!(root, add(root, main, Some(c_last), None));
    call!(root, execute(root, main, Some(c_unhandled)));
    for o in &p.running {
        match o {
            RunOp::Execute => {
                let d = c.tok(TokKind::Never);
                call!(root, execute(root, d, Some(c_unhandled)));
            }
            RunOp::Info => {
                if call!(root, is_valid(root)) != 1 {
                    c.violation("isValid(root) != 1 while it runs");
                }
                if call!(root, is_same_thread(root)) != 0 {
                    c.violation("is_same_thread(root) != 0 on the test thread");
                }
            }
            RunOp::StateVar(n) => {
                c.state_var(root, root, *n, true, true, false, false);
            }
            RunOp::Sched => {
                c.sched(root, root, None, TaskRec::default(), false);
            }
            RunOp::ParAdd => {
                if let Some(ph) = pars.first() {
                    let ph = *ph as *mut FutoInAsyncSteps;
                    c.add_sub(
                        ph,
                        &Sub {
                            node: EMPTY_NODE.clone(),
                            eh: None,
                            null_cb: false,
                        },
                    );
                }
            }
        }
    }
    let mut ended = rx.recv_timeout(hang()).is_ok();
    let mut runs = 1;
    if let (Some(s), true) = (&p.rerun, ended) {
        // Again, once the first flow is over: the last step (or the
        // unhandled-error callback) runs before the root is idle, and
        // execute() on a running root is a no-op, so it is asked until it
        // starts (an execute that finds the model empty is harmless).
        runs = 2;
        c.add_sub(root, s);
        call!(root, add(root, main, Some(c_last), None));
        let until = Instant::now() + hang();
        ended = loop {
            call!(root, execute(root, main, Some(c_unhandled)));
            if rx.recv_timeout(Duration::from_millis(10)).is_ok() {
                break true;
            }
            if Instant::now() > until {
                break false;
            }
        };
    }
    let late = p.execute_after_free.then(|| {
        // SAFETY: a live runtime.
        let l = unsafe { futoin_asyncsteps_new(rt) };
        let d = c.tok(TokKind::Never);
        call!(l, add(l, d, Some(c_never_step), None));
        l
    });
    if !c.root_freed.load(SeqCst) {
        call!(root, free(root));
    }
    // Sub-flows may still run (and make roots): only roots whose maker is
    // done with them now, the others once no step can run.
    let subs = lock(&c.subs).clone();
    for s in &subs {
        if s.ready.load(SeqCst) && !matches!(s.free, FreeRoot::AfterRuntime) {
            s.free();
        }
    }
    let join = || loop {
        let t = lock(&c.threads).pop();
        match t {
            Some(t) => t.join().expect("a completion thread"),
            None => break,
        }
    };
    join();
    free_runtime(rt);
    join();
    let subs = lock(&c.subs).clone();
    for s in &subs {
        s.free();
    }
    if let Some(l) = late {
        let d = c.tok(TokKind::AfterFree);
        call!(l, execute(l, d, Some(c_unhandled)));
        call!(l, free(l));
        let e = lock(&c.after_free_ends).clone();
        if e != ["InternalError"] {
            c.violation(format!("execute() after the runtime was freed: {e:?}"));
        }
    }
    // SAFETY: made by futoin_mutex_new/futoin_throttle_new; no flow is
    // left to use them.
    unsafe {
        futoin_sync_free(c.mutex);
        futoin_sync_free(c.throttle);
    }

    let mut bad = std::mem::take(&mut *lock(&c.violations));
    bad.extend(settle_values(case));
    let ends = lock(&c.ends).clone();
    if !ended {
        bad.push(format!("the flow did not end in {:?}", hang()));
    } else if ends.len() != runs {
        bad.push(format!(
            "the flow ended {} times in {runs} runs: {ends:?}",
            ends.len()
        ));
    }
    for (i, s) in subs.iter().enumerate() {
        let e = lock(&s.ends);
        if e.len() > 1 {
            bad.push(format!("sub-flow {i} ended {} times: {e:?}", e.len()));
        }
    }
    drop(subs);
    let (made, freed) = (c.vars_made.load(SeqCst), c.vars_freed.load(SeqCst));
    if made != freed || !lock(&c.vars_live).is_empty() {
        bad.push(format!(
            "state variables: {made} allocated, {freed} cleaned up"
        ));
    }
    let (made, freed) = (c.stacks_made.load(SeqCst), c.stacks_freed.load(SeqCst));
    let me = c as *const Ctx as usize;
    let left = {
        let mut b = lock(&BLOCKS);
        let mine: Vec<usize> = b
            .iter()
            .filter(|(_, v)| **v == me)
            .map(|(k, _)| *k)
            .collect();
        for k in &mine {
            b.remove(k);
        }
        mine.len()
    };
    if made != freed || left != 0 {
        bad.push(format!(
            "stack blocks: {made} with a cleanup, {freed} cleaned up"
        ));
    }
    let (locks, fails, unlocks) = (
        c.locks.load(SeqCst),
        c.lock_fails.load(SeqCst),
        c.unlocks.load(SeqCst),
    );
    if locks - fails != unlocks {
        bad.push(format!(
            "foreign sync: {locks} locks ({fails} failed), {unlocks} unlocks"
        ));
    }
    let ran = Ran {
        end: ends.first().cloned().unwrap_or_else(|| "<none>".into()),
        cov: std::mem::take(&mut *lock(&c.cov)),
        binds: c.binds.load(SeqCst),
    };
    drop(ctx);
    prop_assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(ran)
}

#[test]
fn call_sequences_never_crash_hang_or_leak() {
    let (mut runner, cases, seed) = runner(2500, 2);
    let cov = Coverage::default();
    let ran = AtomicUsize::new(0);
    let binds = AtomicUsize::new(0);
    let started = Instant::now();
    let res = runner.run(&prog(), |p| {
        ran.fetch_add(1, SeqCst);
        trace(&p);
        let r = bounded(move || run_prog(&p))?;
        binds.fetch_add(r.binds, SeqCst);
        cov.hit(format!("end {}", r.end));
        cov.hit(match r.binds {
            0 => "callbacks 0",
            1..=3 => "callbacks 1-3",
            4..=10 => "callbacks 4-10",
            11..=30 => "callbacks 11-30",
            31..BUDGET => "callbacks 31+",
            _ => "callbacks over budget",
        });
        for (k, v) in r.cov {
            *lock(&cov.0).entry(k.to_string()).or_default() += v;
        }
        Ok(())
    });
    let _ = writeln!(
        std::io::stderr(),
        "cabi_fuzz calls: {} programs ran ({cases} asked, seed {seed}), {} callbacks, in {:.1?}",
        ran.load(SeqCst),
        binds.load(SeqCst),
        started.elapsed()
    );
    cov.report("cabi_fuzz calls");
    assert_eq!(STRAY.load(SeqCst), 0, "cleanups no case knows");
    if let Err(e) = res {
        panic!("{e}");
    }
}

mod regressions;
