//! [`Step`]: the execution API handed to step callbacks (spec 2.2.2, 2.2.4).

use crate::args::{Args, FromArgs, IntoArgs};
use crate::error::{Error, StepResult};
use crate::state::State;
use crate::steps::def::{self, name_of, Exec, StepDef};

use crate::steps::flow::Flow;
use crate::steps::frame::Kind;
use crate::steps::model::AsyncSteps;
use crate::steps::parallel::Parallel;
use crate::steps::scheduler::Scheduler;
use std::borrow::Cow;
use std::future::Future;

// A step's `stack()` values and their references.
mod stack;
// Waiting for an event: timeouts, cancel callbacks, external handles.
mod waiting;

pub use stack::StackRef;

/// What a callback did through its [`Step`].
#[derive(Default)]
pub(crate) struct Outcome {
    /// `success()` was called; its args are in the loop's args register.
    pub succeeded: bool,
    pub added: bool,
    /// The args register holds args for the first sub-step
    /// (`add_with_args`): keep them when the callback returns.
    pub forward: bool,
    /// `wait_io()` was called: the step's result is the readiness.
    pub io_wait: bool,
    /// The step is the engine's own `sync` step on a `Limiter` and has done
    /// nothing else yet: the first `sync::enter` it reaches may run the
    /// section in place (and clears this).
    pub engine_sync: bool,
    /// `fails_with` holds a misuse's `InternalError` (it stays: later
    /// `error()` calls do not replace it).
    pub misused: bool,
    /// The step is a model's level-0 loop step (`AsyncSteps::loop_` and
    /// kin), about to add its loop (see `Step::push_loop`).
    pub model_loop: bool,
    /// The error the step fails with whatever its callback returns: the
    /// first misuse, else the last `error()` it raised.
    pub fails_with: Option<Error>,
}

/// The execution API of one running step: given as `&mut Step` to every
/// execute and error callback.
///
/// A callback completes in one of these ways (spec 2.1):
/// - returns `Ok(())` without anything else: implicit success (spec 1.6);
/// - calls [`success`](Step::success) with result args;
/// - returns an error ([`error`](Step::error), `?`, or any `Err`);
/// - adds sub-steps ([`add`](Step::add), [`parallel`](Step::parallel), loops):
///   they run after the callback returns, and the last one's result becomes
///   this step's result;
/// - waits for an external event ([`wait_external`](Step::wait_external),
///   [`set_timeout`](Step::set_timeout), [`set_cancel`](Step::set_cancel)).
///
/// Misuse (success twice, success after add, ...) fails the step with an
/// `InternalError` whose info says what was wrong, even when the callback
/// ignores the returned `Err`.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
///
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| {
///     s.add(|s, ()| s.success((2i32, 3i32)));
///     s.add(|s, (a, b): (i32, i32)| s.success((a * b,)));
///     Ok(())
/// });
/// let p = root.promise(&mut tool);
/// let (v,): (i32,) = tool.block_on(p).unwrap();
/// assert_eq!(v, 6);
/// ```
pub struct Step<'a> {
    pub(crate) sched: &'a mut Scheduler,
    pub(crate) flow: &'a mut Flow,
    pub(crate) sid: u32,
    /// Index of this step's frame in its strand (see `pending`).
    pub(crate) depth: usize,
    handler: bool,
    /// This step's frame, not pushed yet: a plain step that completes at
    /// once needs none. Whatever needs the frame pushes it first
    /// ([`frame_here`](Step::frame_here)); `depth` is where it goes.
    pending: Option<Pending>,
    /// A loop body ([`Step::body`]): the length of the strand's queue when
    /// it began. Its sub-steps go there, on the loop's level, with no
    /// frame of the body's own until something else needs one; that frame
    /// then starts its segment here, below the sub-steps already added.
    base: Option<u32>,
    out: Outcome,
}

/// What a deferred frame is made of (see `Step::pending`).
pub(crate) struct Pending {
    pub catch: Option<def::Catch>,
    pub name: def::NameFn,
}

/// Which step this is: its callback's type name, its strand (0: the main
/// one; each parallel branch has its own), its level (0: a root step) and
/// whether it runs an error handler.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, Step, StepResult, TestTool};
/// fn check_user(s: &mut Step<'_>, (): ()) -> StepResult {
///     let shown = format!("{s:?}");
///     s.success((shown,))
/// }
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(check_user);
/// let p = root.promise::<(String,)>(&mut tool);
/// let shown = tool.block_on(p).unwrap().0;
/// assert!(shown.starts_with("Step { step: \""));
/// assert!(shown.ends_with("::check_user\", strand: 0, level: 0, in_error_handler: false }"));
/// ```
impl std::fmt::Debug for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match &self.pending {
            Some(p) => (p.name)(),
            None => self
                .flow
                .st_get(self.sid)
                .and_then(|st| st.frames.get(self.depth))
                .map_or("?", |fr| (fr.name)()),
        };
        f.debug_struct("Step")
            .field("step", &name)
            .field("strand", &self.sid)
            .field("level", &self.depth)
            .field("in_error_handler", &self.handler)
            .finish()
    }
}

impl<'a> Step<'a> {
    pub(crate) fn new(
        sched: &'a mut Scheduler,
        flow: &'a mut Flow,
        sid: u32,
        depth: usize,
        handler: bool,
    ) -> Self {
        Step {
            sched,
            flow,
            sid,
            depth,
            handler,
            pending: None,
            base: None,
            out: Outcome {
                succeeded: false,
                added: false,
                forward: false,
                io_wait: false,
                engine_sync: false,
                misused: false,
                model_loop: false,
                fails_with: None,
            },
        }
    }

    /// A step whose frame is pushed only when something needs it (see
    /// `pending`): its frame would go at the top of strand `sid`.
    #[inline]
    pub(crate) fn deferred(
        sched: &'a mut Scheduler,
        flow: &'a mut Flow,
        sid: u32,
        frame: Pending,
    ) -> Self {
        let depth = flow.st(sid).frames.len();
        let mut s = Step::new(sched, flow, sid, depth, false);
        s.pending = Some(frame);
        s
    }

    /// A loop iteration's body (see `base`): deferred as any step, and
    /// what it adds goes on the loop's level while no frame is needed.
    #[inline]
    pub(crate) fn body(
        sched: &'a mut Scheduler,
        flow: &'a mut Flow,
        sid: u32,
        frame: Pending,
    ) -> Self {
        let base = flow.st(sid).queue.len() as u32;
        let mut s = Self::deferred(sched, flow, sid, frame);
        s.base = Some(base);
        s
    }

    /// Pushes this step's frame if it is still deferred: before anything
    /// that reads or changes the frame or queues sub-steps above it (a
    /// loop body queues sub-steps without it).
    #[inline(always)]
    pub(crate) fn frame_here(&mut self) {
        if let Some(p) = self.pending.take() {
            self.flow.push_frame(self.sid, p.catch, p.name, Kind::Step);
            debug_assert_eq!(self.flow.st(self.sid).frames.len(), self.depth + 1);
            if let Some(base) = self.base {
                // A loop body's sub-steps added so far become the frame's.
                self.flow.st(self.sid).frames[self.depth].seg = base;
            }
            if self.sched.section.is_some() {
                // This is a `sync` step running its section frameless.
                crate::steps::hold::adopt_section(self.sched, self.flow, self.sid);
            }
        }
    }

    /// `success()` was called in this callback.
    pub(crate) fn has_succeeded(&self) -> bool {
        self.out.succeeded
    }

    /// Whether this step's frame is still deferred.
    #[inline]
    pub(crate) fn frame_deferred(&self) -> bool {
        self.pending.is_some()
    }

    /// Marks this step as a model's level-0 loop step (see `push_loop`).
    pub(crate) fn mark_model_loop(&mut self) {
        self.out.model_loop = true;
    }

    /// Whether this step is a model's loop step that may start its loop
    /// in place (see `Step::push_loop`); asked once.
    pub(crate) fn take_model_loop(&mut self) -> bool {
        std::mem::take(&mut self.out.model_loop) && self.may_start_in_place()
    }

    /// Whether what this step adds may go on its parent's level instead of
    /// a frame of its own: the frame is still deferred, with no error
    /// handler, and the step has done nothing else (added, succeeded,
    /// waited, misused, run a `sync` section).
    fn may_start_in_place(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| p.catch.is_none())
            && !self.out.added
            && !self.out.succeeded
            && !self.out.io_wait
            && !self.out.misused
            && self.out.fails_with.is_none()
            && self.sched.section.is_none()
    }

    /// The outcome, and the frame still deferred (the step never needed
    /// it).
    #[inline]
    pub(crate) fn into_parts(self) -> (Outcome, Option<Pending>) {
        (self.out, self.pending)
    }

    /// The args register: the previous step's result, for `FromArgs`.
    #[inline]
    pub(crate) fn args(&mut self) -> &mut Args {
        &mut self.sched.args
    }

    pub(crate) fn into_outcome(self) -> Outcome {
        self.out
    }

    /// After a loop body returned `Ok(())` without a frame: whether it
    /// did nothing else either (added nothing, misused nothing), so the
    /// next iteration may run on this `Step`. Success args it left are
    /// dropped (a loop ignores its body's results).
    #[inline]
    pub(crate) fn body_done_plain(&mut self) -> bool {
        if self.pending.is_none() || self.out.added || self.out.fails_with.is_some() {
            return false;
        }
        if self.out.succeeded {
            self.out.succeeded = false;
            self.sched.clear_args();
        }
        true
    }

    fn misuse(&mut self, info: &'static str) -> StepResult {
        let e = Error::internal(info);
        self.record_misuse(&e);
        Err(e)
    }

    /// Queues `def` as a sub-step of this step. Inline, for the common
    /// case (nothing to check or push first, room in the queue): the step
    /// definition is moved once, into the queue.
    #[inline(always)]
    pub(crate) fn push(&mut self, def: StepDef) {
        let plain = !self.out.succeeded
            && !self.out.io_wait
            && (self.base.is_some() || self.pending.is_none());
        if plain {
            let q = &mut self.flow.st(self.sid).queue;
            if q.len() < q.capacity() {
                self.out.added = true;
                q.push(def);
                return;
            }
        }
        self.push_slow(def);
    }

    /// [`push`](Self::push) when the step completed already (a misuse),
    /// its frame is to be pushed first, or the queue must grow.
    #[inline(never)]
    fn push_slow(&mut self, def: StepDef) {
        if self.out.succeeded {
            let _ = self.misuse("add() after success() in the same step");
            return;
        }
        if self.out.io_wait {
            let _ = self.misuse("add() after wait_io(): the readiness completes this step");
            return;
        }
        // The frame's segment starts below its sub-steps. A loop body
        // needs none for them (see `base`).
        if self.base.is_none() {
            self.frame_here();
        }
        self.out.added = true;
        let q = &mut self.flow.st(self.sid).queue;
        if q.len() == q.capacity() && q.capacity() < 4 {
            // Grow one at a time up to four, then double: a flow waiting
            // in a loop's body keeps the loop's step and the body's two
            // (three), not four.
            q.reserve_exact(1);
        }
        q.push(def);
    }

    /// Adds `def` as a sub-step that receives `args` (a sync section). As
    /// the first sub-step it takes them through the args register; after
    /// other sub-steps, a step that succeeds with them goes before it.
    pub(crate) fn add_with_args(&mut self, def: StepDef, args: Args) {
        if self.out.added || self.out.succeeded {
            self.add(move |s, ()| s.success(args));
        } else {
            self.sched.args = args;
            self.out.forward = true;
        }
        self.push(def);
    }

    /// The C interface's `rootId`: one id per flow and strand (parallel
    /// branches get their own), never 0 and always even (root handles'
    /// ids are odd).
    pub(crate) fn root_id(&self) -> isize {
        use slotmap::Key;
        let loop_id = std::sync::Arc::as_ptr(&self.sched.core.inbox) as u64;
        let key = self.flow.key.data().as_ffi();
        let mut h = loop_id ^ key.rotate_left(17) ^ u64::from(self.sid).rotate_left(41);
        h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h | 2) & !1) as isize
    }

    /// Adds a sub-step (spec `add`). It runs after this callback returns;
    /// its callback receives the previous step's result as typed args.
    ///
    /// Returns `&mut Self` for chaining.
    #[inline(always)]
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
    {
        self.push(StepDef {
            exec: Exec::Fn(def::once(f)),
            catch: None,
        });
        self
    }

    /// Adds a sub-step with an error handler (spec `add(func, onerror)`).
    ///
    /// The handler gets the error and completes by: [`success`](Step::success)
    /// (recovered, execution goes on after this step), returning an error
    /// (replaces it), adding steps (they run at this level instead), or
    /// returning `Ok(())` silently (the error goes on to outer handlers).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.add_catch(
    ///         |s, ()| s.error("NotFound", "no such user"),
    ///         |s, e| s.success((format!("fallback after {}", e.code()),)),
    ///     );
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// let (msg,): (String,) = tool.block_on(p).unwrap();
    /// assert_eq!(msg, "fallback after NotFound");
    /// ```
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
    {
        self.push(StepDef {
            exec: Exec::Fn(def::once(f)),
            catch: Some(def::once_catch(on_error)),
        });
        self
    }

    /// Adds a parallel step (spec `parallel`); add its branches to the
    /// returned builder. All branches start together; the first error
    /// cancels the others; branches pass results through [`state`](Step::state).
    /// Each branch is called with no args (`()`), whatever the step before
    /// gave: read an earlier result from the state or capture it.
    pub fn parallel(&mut self) -> Parallel<'_, 'a> {
        Parallel::new(self, None)
    }

    /// [`parallel`](Step::parallel) with an error handler.
    pub fn parallel_catch<C>(&mut self, on_error: C) -> Parallel<'_, 'a>
    where
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
    {
        Parallel::new(self, Some(def::once_catch(on_error)))
    }

    pub(crate) fn queue_mut(&mut self) -> &mut Vec<StepDef> {
        &mut self.flow.st(self.sid).queue
    }

    /// Adds a step that completes with `args` (spec `successStep`).
    pub fn success_step(&mut self, args: impl IntoArgs + 'static) -> &mut Self {
        self.add(move |s, ()| s.success(args))
    }

    /// Completes this step with result args (spec `success`); the next step
    /// receives them. Call it at most once, and not after adding sub-steps.
    ///
    /// Returns `Ok(())`, or the `InternalError` of a misuse (which also fails
    /// the step even if ignored).
    pub fn success(&mut self, args: impl IntoArgs) -> StepResult {
        if self.out.succeeded {
            return self.misuse("success() called twice in the same step");
        }
        if self.out.added {
            return self.misuse("success() after add(): sub-steps complete this step");
        }
        if self.out.io_wait {
            return self.misuse("success() after wait_io(): the readiness completes this step");
        }
        self.out.succeeded = true;
        self.sched.args = args.into_args();
        Ok(())
    }

    /// Fails the step (spec `error(code, info)`) and gives the error to
    /// return: `return s.error("NotFound", "no such user")` or
    /// `s.error(...)?`. `info` goes to the `error_info` state at once. The
    /// spec's `error()` throws at once; here the error is also recorded,
    /// so a step whose callback ignores it (or calls `success()` after it)
    /// still fails with it. When a callback raises several (ignoring all
    /// but the last, as code catching a throw would), the last one is the
    /// step's result.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     let _ignored = s.error("NotFound", "no such user");
    ///     Ok(())
    /// });
    /// let p = root.promise::<()>(&mut tool);
    /// assert_eq!(tool.block_on(p).unwrap_err().code(), "NotFound");
    /// ```
    ///
    /// After [`add`](Step::add) or [`success`](Step::success) in the
    /// same callback it is an `InternalError` (spec 2.1: a step completes
    /// once, by sub-steps, `success()` or `error()`), whose info names the
    /// error asked for. A plain `Err` (say from `?`) is not checked: it is
    /// the callback failing, and the added sub-steps are dropped as the
    /// error unwinds.
    pub fn error(
        &mut self,
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> StepResult {
        let e = self.raise(Error::with_info(code, info));
        // The last error a step raises is its result, returned or not
        // (an ignored `Err` is a caught throw, spec 3.5), unless a misuse
        // was recorded; `error_info` is assigned at the call (spec 2.2.2).
        if !self.out.misused {
            self.out.fails_with = Some(e.clone());
        }
        self.flow.state.set_error_info(e.info());
        Err(e)
    }

    /// The error a step's `error(e)` fails it with: `e`, or the misuse
    /// `InternalError` (recorded, so it wins) when the step has already
    /// added sub-steps or succeeded. Shared with the C interface's
    /// `handle_error`.
    pub(crate) fn raise(&mut self, e: Error) -> Error {
        let after = if self.out.added {
            "add(): sub-steps complete this step"
        } else if self.out.succeeded {
            "success(): a step completes once"
        } else {
            return e;
        };
        let m = Error::internal(format!("error() after {after} (asked for {e})"));
        self.record_misuse(&m);
        m
    }

    /// Makes `e` the step's result, unless a misuse already is (the first
    /// misuse stays).
    fn record_misuse(&mut self, e: &Error) {
        if !self.out.misused {
            self.out.misused = true;
            self.out.fails_with = Some(e.clone());
        }
    }

    fn frame_flags(&mut self) -> &mut u8 {
        self.frame_here();
        &mut self.flow.st(self.sid).frames[self.depth].flags
    }

    pub(crate) fn out_mut(&mut self) -> &mut Outcome {
        &mut self.out
    }

    /// The flow's state map (spec `state()`), shared by all its steps.
    pub fn state(&mut self) -> &mut State {
        &mut self.flow.state
    }

    /// Adds a step that awaits a Rust `Future` (spec `await`, 1.13). Its
    /// output completes the step: `Ok(args)` as success, `Err(e)` as error.
    /// The future is polled on this loop only when woken; cancelling the step
    /// drops it.
    ///
    /// The future must be runtime-agnostic: `async` blocks, channels and
    /// oneshots (such as `tokio::sync::oneshot`, which needs no runtime),
    /// a [`Promise`](crate::Promise) of another flow. A future that needs
    /// another runtime's reactor or timer, such as `tokio::time::sleep` or
    /// a tokio socket, panics when polled here, and the step fails with
    /// `InternalError` ("panic in awaited future: there is no reactor
    /// running, ..."). Use this crate's own timers
    /// ([`set_timeout`](Step::set_timeout), [`Scheduler::deferred`]) and
    /// [`wait_io`](Step::wait_io) instead, or run that work on its own
    /// runtime and await a channel it completes.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, Error, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.await_future(async { Ok::<_, Error>((40i32 + 2,)) });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(i32,)>(p).unwrap().0, 42);
    /// ```
    pub fn await_future<Fut, T, E>(&mut self, fut: Fut) -> &mut Self
    where
        Fut: Future<Output = Result<T, E>> + 'static,
        T: IntoArgs,
        E: Into<Error>,
    {
        self.push_await(fut, None)
    }

    /// [`await_future`](Step::await_future) with an error handler (spec
    /// `await(future, onerror)`).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, Error, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.await_future_catch(
    ///         async { Err::<(i32,), _>(Error::with_info("NotFound", "no row")) },
    ///         |s, e| s.success((if e.code() == "NotFound" { 0i32 } else { -1 },)),
    ///     );
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(i32,)>(p).unwrap().0, 0);
    /// ```
    pub fn await_future_catch<Fut, T, E, C>(&mut self, fut: Fut, on_error: C) -> &mut Self
    where
        Fut: Future<Output = Result<T, E>> + 'static,
        T: IntoArgs,
        E: Into<Error>,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
    {
        self.push_await(fut, Some(def::once_catch(on_error)))
    }

    fn push_await<Fut, T, E>(&mut self, fut: Fut, catch: Option<def::Catch>) -> &mut Self
    where
        Fut: Future<Output = Result<T, E>> + 'static,
        T: IntoArgs,
        E: Into<Error>,
    {
        self.push(StepDef {
            exec: Exec::Await(
                crate::steps::await_box::AwaitBox::new(async move {
                    fut.await.map(IntoArgs::into_args).map_err(Into::into)
                }),
                name_of::<Fut>(),
            ),
            catch,
        });
        self
    }

    /// Copies the steps and missing state variables of a model (spec `copyFrom`)
    /// as sub-steps of this step.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut logic = AsyncSteps::new();
    /// logic.add(|s, ()| s.success((7u8,)));
    ///
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(move |s, ()| { s.copy_from(&logic); Ok(()) });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(u8,)>(p).unwrap().0, 7);
    /// ```
    pub fn copy_from(&mut self, model: &AsyncSteps) -> &mut Self {
        for d in &model.steps {
            if let Some(c) = d.try_clone() {
                self.push(c);
            }
        }
        self.flow.state.copy_missing(&model.state);
        self
    }

    /// A new, empty root for standalone execution (spec `newInstance`);
    /// start it with [`AsyncSteps::execute`] on [`tool`](Step::tool).
    pub fn new_instance(&self) -> AsyncSteps {
        AsyncSteps::new()
    }

    /// The loop this flow runs on: schedule callbacks, start other flows.
    pub fn tool(&mut self) -> &mut Scheduler {
        self.sched
    }

    /// True while this step runs its error handler.
    pub fn in_error_handler(&self) -> bool {
        self.handler
    }

    /// The flow's loop thread check (spec `is_same_thread`).
    pub fn is_same_thread(&self) -> bool {
        self.sched.is_same_thread()
    }
}
