//! [`Step`]: the execution API handed to step callbacks (spec 2.2.2, 2.2.4).

use crate::args::{Args, FromArgs, IntoArgs};
use crate::error::{Control, Error, StepResult};
use crate::state::State;
use crate::steps::def::{self, name_of, Exec, StepDef};
use crate::steps::external::{ExternalHandle, WaitToken};
use crate::steps::flow::Flow;
use crate::steps::frame::{Kind, WAIT};
use crate::steps::model::AsyncSteps;
use crate::steps::parallel::Parallel;
use crate::steps::scheduler::Scheduler;
use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

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
    out: Outcome,
}

/// What a deferred frame is made of (see `Step::pending`).
pub(crate) struct Pending {
    pub catch: Option<def::Catch>,
    pub name: def::NameFn,
}

/// A typed reference to a value allocated with [`Step::stack`]; valid while
/// that step runs (including its sub-steps), `Copy`, usable in sub-steps.
pub struct StackRef<T> {
    /// The loop of the flow (`Shared::id`, never reused): flow keys are
    /// only unique within one loop.
    pub(crate) tool: u64,
    pub(crate) flow: crate::steps::scheduler::FlowKey,
    pub(crate) seq: u32,
    pub(crate) idx: u32,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for StackRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for StackRef<T> {}

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

impl<T> std::fmt::Debug for StackRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StackRef(step {}, slot {})", self.seq, self.idx)
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
            out: Outcome {
                succeeded: false,
                added: false,
                forward: false,
                io_wait: false,
                engine_sync: false,
                misused: false,
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

    /// Pushes this step's frame if it is still deferred: before anything
    /// that reads or changes the frame or queues sub-steps above it.
    #[inline(always)]
    pub(crate) fn frame_here(&mut self) {
        if let Some(p) = self.pending.take() {
            self.flow.push_frame(self.sid, p.catch, p.name, Kind::Step);
            debug_assert_eq!(self.flow.st(self.sid).frames.len(), self.depth + 1);
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

    /// After a loop body returned `Ok(())`: when it added nothing, misused
    /// nothing and left its frame untouched (no wait, timeout, cancel or
    /// stack value), prepares this `Step` for the next iteration on the same
    /// frame with a fresh seq. `None`: not plain; `Some(false)`: plain but
    /// the flow's step budget is spent.
    #[inline]
    pub(crate) fn recycle(&mut self) -> Option<bool> {
        if self.out.added || self.out.fails_with.is_some() {
            return None;
        }
        debug_assert!(self.pending.is_none(), "a loop iteration's frame is pushed");
        let seq = self.flow.next_seq();
        let f = &mut self.flow.st(self.sid).frames[self.depth];
        if !f.is_plain() {
            return None;
        }
        if self.sched.budget <= 1 {
            return Some(false);
        }
        f.seq = seq;
        self.flow.seq = seq;
        self.sched.budget -= 1;
        self.sched.steps += 1;
        if self.out.succeeded {
            self.out.succeeded = false;
            self.sched.clear_args();
        }
        Some(true)
    }

    fn misuse(&mut self, info: &'static str) -> StepResult {
        let e = Error::internal(info);
        self.record_misuse(&e);
        Err(e)
    }

    pub(crate) fn push(&mut self, def: StepDef) {
        if self.out.succeeded {
            let _ = self.misuse("add() after success() in the same step");
            return;
        }
        if self.out.io_wait {
            let _ = self.misuse("add() after wait_io(): the readiness completes this step");
            return;
        }
        // The frame's segment starts below its sub-steps.
        self.frame_here();
        self.out.added = true;
        self.flow.st(self.sid).queue.push(def);
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

    /// For sync object `id` (see `sync::Hold`): whether this strand holds
    /// it in a step below this one, and how many holds of it its ancestor
    /// strands (the parents of a parallel branch) have.
    pub(crate) fn sync_holds(&self, id: usize) -> (bool, usize) {
        fn count(frames: &[crate::steps::frame::Frame], id: usize) -> usize {
            frames
                .iter()
                .filter_map(|f| f.hold_part())
                .flat_map(|r| r.all_holds())
                .filter(|h| h.id == id && h.is_held())
                .count()
        }
        let Some(st) = self.flow.st_get(self.sid) else {
            return (false, 0);
        };
        // This step's own frame counts too: an `ISync` syncing twice on the
        // same object in one step re-enters.
        let own = count(&st.frames[..(self.depth + 1).min(st.frames.len())], id) > 0;
        let mut ancestors = 0;
        let mut parent = st.parent;
        while parent.1 != 0 {
            let Some(p) = self.flow.st_get(parent.0) else {
                break;
            };
            ancestors += count(&p.frames, id);
            parent = p.parent;
        }
        (own, ancestors)
    }

    /// Gives this step a stake in a sync object (see `sync::Hold`).
    pub(crate) fn add_hold(&mut self, h: crate::steps::hold::Hold) {
        self.frame_here();
        let f = &mut self.flow.st(self.sid).frames[self.depth];
        f.flags |= crate::steps::frame::HOLDS;
        f.resources_in(&mut self.sched.spare_resources)
            .special()
            .holds
            .push(h);
    }

    /// True when this very step already has a stake in object `id` that is
    /// not admitted yet (it is about to wait for it).
    pub(crate) fn has_pending_hold(&self, id: usize) -> bool {
        self.flow
            .st_get(self.sid)
            .and_then(|st| st.frames.get(self.depth))
            .and_then(|f| f.resources.as_deref())
            .and_then(|x| x.special_ref())
            .is_some_and(|r| r.holds.iter().any(|h| h.id == id && !h.is_held()))
    }

    /// The stake in object `id` of the step that added this one (a sync
    /// step's wait step).
    pub(crate) fn parent_hold(&mut self, id: usize) -> Option<&mut crate::steps::hold::Hold> {
        let d = self.depth.checked_sub(1)?;
        self.flow.st(self.sid).frames[d]
            .resources
            .as_mut()?
            .special_mut()?
            .holds
            .iter_mut()
            .find(|h| h.id == id)
    }

    /// Adds a sub-step (spec `add`). It runs after this callback returns;
    /// its callback receives the previous step's result as typed args.
    ///
    /// Returns `&mut Self` for chaining.
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

    pub(crate) fn waiting_allowed(&mut self, what: &'static str) -> bool {
        if self.handler {
            let _ = self.misuse(what);
            return false;
        }
        *self.frame_flags() |= WAIT;
        true
    }

    /// Limits this step and its whole sub-tree to `timeout` (spec
    /// `setTimeout`); when it expires, cancel callbacks run innermost first
    /// and a `Timeout` error is raised at this step. A later call replaces the
    /// limit. Disables implicit success when no sub-steps are added. A limit
    /// above 100 years counts as 100 years (`Duration::MAX` included).
    ///
    /// Like [`set_cancel`](Self::set_cancel) and
    /// [`wait_external`](Self::wait_external), it belongs to the execute
    /// callback (spec 2.2.2): in an error handler it fails the step with
    /// `InternalError` ("set_timeout() is not allowed in an error
    /// handler"). A handler that needs to wait adds a step that does.
    ///
    /// ```
    /// use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let mut tool = TestTool::new();
    /// let cancelled = Arc::new(Mutex::new(false));
    /// let c = cancelled.clone();
    /// let mut root = AsyncSteps::new();
    /// root.add(move |s, ()| {
    ///     let c = c.clone();
    ///     s.set_cancel(move || *c.lock().unwrap() = true);
    ///     s.set_timeout(Duration::from_secs(5));
    ///     Ok(())
    /// });
    /// let p = root.promise::<()>(&mut tool);
    /// tool.run_all_ready();
    /// tool.advance(Duration::from_secs(5));
    /// assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    /// assert!(*cancelled.lock().unwrap());
    /// ```
    pub fn set_timeout(&mut self, timeout: Duration) {
        if !self.waiting_allowed("set_timeout() is not allowed in an error handler") {
            return;
        }
        let seq = self.flow.st(self.sid).frames[self.depth].seq;
        let t = self
            .sched
            .flow_timeout(timeout, self.flow.key, self.sid, seq);
        let old = self.flow.st(self.sid).frames[self.depth].timer.replace(t);
        if let Some(old) = old {
            self.sched.cancel_task(old);
        }
    }

    /// Sets the callback that cancels this step's external activity (spec
    /// `setCancel`); it runs when the step is cancelled, times out, or an
    /// error unwinds through it. Disables implicit success. A later call
    /// replaces the callback. In an error handler it fails the step with
    /// `InternalError`, as [`set_timeout`](Self::set_timeout) does.
    pub fn set_cancel(&mut self, on_cancel: impl FnOnce() + 'static) {
        self.set_cancel_sched(move |_| on_cancel());
    }

    /// [`set_cancel`](Self::set_cancel) with a callback that gets the loop
    /// (the C interface's scheduling calls work in a cancel callback).
    pub(crate) fn set_cancel_sched(&mut self, on_cancel: impl FnOnce(&mut Scheduler) + 'static) {
        if !self.waiting_allowed("set_cancel() is not allowed in an error handler") {
            return;
        }
        self.flow
            .resources_of(&mut self.sched.spare_resources, self.sid, self.depth)
            .cancel = Some(Box::new(on_cancel));
    }

    /// Marks this step as waiting for an external event (spec `waitExternal`)
    /// and returns a `Send + Sync` handle that completes it from any thread.
    ///
    /// Only a handle, a timeout ([`set_timeout`](Self::set_timeout)) or a
    /// cancel ends the wait. A step whose handles are all dropped without
    /// completing it (a worker thread that panicked, say) waits until its
    /// timeout or a cancel: without either it waits for good, and so does
    /// a `block_on` or `Promise::wait` of its flow. Set a timeout when the
    /// other side may fail.
    ///
    /// In an error handler it fails the step with `InternalError`, as
    /// [`set_timeout`](Self::set_timeout) does, and the handle it returns
    /// is already closed (its calls are refused).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, AsyncTool};
    /// let mut tool = AsyncTool::new().unwrap();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     let h = s.wait_external();
    ///     std::thread::spawn(move || h.success((5i32,)).unwrap());
    ///     Ok(())
    /// });
    /// root.add(|s, (v,): (i32,)| s.success((v + 1,)));
    /// let p = root.promise(&mut tool);
    /// let (v,): (i32,) = tool.block_on(p).unwrap();
    /// assert_eq!(v, 6);
    /// ```
    pub fn wait_external(&mut self) -> ExternalHandle {
        if !self.waiting_allowed("wait_external() is not allowed in an error handler") {
            return ExternalHandle::closed(self.sched.core.inbox.clone());
        }
        let (key, sid) = (self.flow.key, self.sid);
        let f = &mut self.flow.st(self.sid).frames[self.depth];
        let seq = f.seq;
        let sched = &mut *self.sched;
        let token = f
            .wait
            .get_or_insert_with(|| {
                WaitToken::acquire(&mut sched.tokens, &sched.core.inbox, key, sid, seq)
            })
            .clone();
        ExternalHandle::new(token)
    }

    /// The flow's state map (spec `state()`), shared by all its steps.
    pub fn state(&mut self) -> &mut State {
        &mut self.flow.state
    }

    /// Allocates `value` for the lifetime of this step (spec `stack`); it is
    /// dropped when the step ends in any way. Sub-steps reach it with
    /// [`stack_get`](Step::stack_get).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     let buf = s.stack(Vec::<u8>::new());
    ///     s.add(move |s, ()| {
    ///         s.stack_get(buf)?.push(1);
    ///         Ok(())
    ///     });
    ///     s.add(move |s, ()| {
    ///         let n = s.stack_get(buf)?.len();
    ///         s.success((n,))
    ///     });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(usize,)>(p).unwrap().0, 1);
    /// ```
    pub fn stack<T: 'static>(&mut self, value: T) -> StackRef<T> {
        self.frame_here();
        let seq = self.flow.st(self.sid).frames[self.depth].seq;
        let flow = self.flow.key;
        let x = self
            .flow
            .resources_of(&mut self.sched.spare_resources, self.sid, self.depth);
        x.stack.push(Box::new(value));
        StackRef {
            tool: self.sched.core.inbox.id,
            flow,
            seq,
            idx: (x.stack.len() - 1) as u32,
            _t: PhantomData,
        }
    }

    /// Whether `r` was made by this flow (on this loop): only then can
    /// its frame be looked up here.
    pub(crate) fn owns<T>(&self, r: &StackRef<T>) -> bool {
        r.flow == self.flow.key && r.tool == self.sched.core.inbox.id
    }

    /// The value behind a [`StackRef`]; `InternalError` when its step has
    /// ended or the reference is not from this flow's ancestry.
    pub fn stack_get<T: 'static>(&mut self, r: StackRef<T>) -> Result<&mut T, Error> {
        if !self.owns(&r) {
            return Err(Error::internal(
                "stack_get(): the reference belongs to another flow",
            ));
        }
        self.flow
            .find_frame(self.sid, r.seq)
            .and_then(|f| f.resources.as_mut())
            .and_then(|x| x.stack.get_mut(r.idx as usize))
            .and_then(|b| (**b).downcast_mut::<T>())
            .ok_or_else(|| {
                Error::internal(
                    "stack_get(): the step that owns this value has ended, or is \
                     not this step nor one of its ancestors (a sibling parallel \
                     branch, say)",
                )
            })
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
                Box::pin(async move { fut.await.map(IntoArgs::into_args).map_err(Into::into) }),
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

    // -- loops (spec 1.8, 2.2.4) --

    pub(crate) fn push_loop(
        &mut self,
        iter: crate::steps::def::LoopIter,
        label: Option<String>,
        name: crate::steps::def::NameFn,
    ) -> &mut Self {
        self.push(StepDef {
            exec: Exec::Loop(Box::new((iter, label)), name),
            catch: None,
        });
        self
    }

    /// Breaks the innermost loop (spec `break`): `return s.break_loop();`.
    ///
    /// The steps between this one and the loop are cancelled (their cancel
    /// callbacks run) and their error handlers do not run. From a parallel
    /// branch with no loop of its own, it reaches the loop around the
    /// parallel step: the parallel step ends, its other branches
    /// cancelled. Not under any loop, handlers see a `LoopBreak` error.
    pub fn break_loop(&mut self) -> StepResult {
        Err(Error::control(Control::Break(None)))
    }

    /// Breaks loops up to and including the one labelled `label`. When no
    /// enclosing loop has that label, handlers see a `LoopBreak` error.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.state().set("n", 0u32);
    ///     s.loop_labeled("OUTER", |s| {
    ///         s.repeat(10, |s, i| {
    ///             *s.state().get_mut::<u32>("n").unwrap() += 1;
    ///             if i == 2 { return s.break_label("OUTER"); }
    ///             Ok(())
    ///         });
    ///         Ok(())
    ///     });
    ///     s.add(|s, ()| { let n = *s.state().get::<u32>("n").unwrap(); s.success((n,)) });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(u32,)>(p).unwrap().0, 3);
    /// ```
    pub fn break_label(&mut self, label: impl Into<Cow<'static, str>>) -> StepResult {
        Err(Error::control(Control::Break(Some(label.into()))))
    }

    /// Continues with the next iteration of the innermost loop (spec
    /// `continue`). Like the breaks, it reaches a loop outside a parallel
    /// step from inside one of its branches: the parallel step ends, its
    /// other branches cancelled.
    pub fn continue_loop(&mut self) -> StepResult {
        Err(Error::control(Control::Continue(None)))
    }

    /// Continues the loop labelled `label`, leaving inner loops. When no
    /// enclosing loop has that label, handlers see a `LoopCont` error.
    pub fn continue_label(&mut self, label: impl Into<Cow<'static, str>>) -> StepResult {
        Err(Error::control(Control::Continue(Some(label.into()))))
    }
}
