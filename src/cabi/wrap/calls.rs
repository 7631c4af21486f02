//! The calls of the spec on a [`ForeignSteps`]: adding steps, parallels
//! and loops, completing, state variables, and the AsyncTool calls. Each
//! goes through the foreign handle's function table.

use super::boxes::Keeper;
use super::handles::{ForeignExternal, ForeignParallel, ForeignTask};
use super::root::{self, ForeignRoot};
use super::trampolines::{
    add_step, body_tramp, cancel_tramp, exec_fn, exec_tramp, repeat_tramp, task_tramp, BodyFn,
    CancelSlot, CatchFn, ExecFn, StepSlot, TaskFn,
};
use super::view::{c_string, call, ForeignSteps};
use crate::args::{FromArgs, IntoArgs};
use crate::cabi::types::*;
use crate::cabi::value;
use crate::error::{Control, Error, StepResult};
use parking_lot::Mutex;
use std::borrow::Cow;
use std::ptr::NonNull;
use std::time::Duration;

impl ForeignSteps<'_> {
    fn keeper(&self) -> Keeper {
        Keeper::Step(self.bsi, self.api)
    }

    /// Boxes `v` where it lives as long as this step.
    fn keep<T: Send + 'static>(&mut self, v: T) -> Option<*mut T> {
        // SAFETY: this callback's live handle (wrap's contract).
        match unsafe { self.keeper().keep(v) } {
            Ok(p) => Some(p),
            Err(e) => {
                self.note(e);
                None
            }
        }
    }
    /// Adds a sub-step (spec `add`).
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
    {
        self.push(exec_fn(f), None);
        self
    }

    /// Adds a sub-step with an error handler (spec `add(func, onerror)`);
    /// the handler works as in [`Step::add_catch`](crate::Step::add_catch).
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut ForeignSteps<'_>, &Error) -> StepResult + Send + 'static,
    {
        self.push(exec_fn(f), Some(Box::new(on_error)));
        self
    }

    fn push(&mut self, f: ExecFn, c: Option<CatchFn>) {
        // SAFETY: this callback's live handle (wrap's contract); its
        // keeper lives as long as the step.
        if let Err(e) = unsafe { add_step(self.keeper(), self.bsi, Some(f), c) } {
            self.note(e);
        }
    }

    /// Adds a step that completes with `args` (spec `successStep`).
    pub fn success_step(&mut self, args: impl IntoArgs + Send + 'static) -> &mut Self {
        self.add(move |s, ()| s.success(args))
    }

    /// Adds a parallel step (spec `parallel`); add branches to the result.
    pub fn parallel(&mut self) -> ForeignParallel<'_> {
        self.parallel_impl(None)
    }

    /// [`parallel`](Self::parallel) with an error handler.
    pub fn parallel_catch<C>(&mut self, on_error: C) -> ForeignParallel<'_>
    where
        C: FnOnce(&mut ForeignSteps<'_>, &Error) -> StepResult + Send + 'static,
    {
        self.parallel_impl(Some(Box::new(on_error)))
    }

    fn parallel_impl(&mut self, c: Option<CatchFn>) -> ForeignParallel<'_> {
        let (bsi, keeper) = (self.bsi, self.keeper());
        // SAFETY: this callback's live handle and keeper, used while
        // `self` is borrowed.
        unsafe { ForeignParallel::open(bsi, keeper, c, &mut self.misuse) }
    }

    /// Adds a step that runs `f` holding `sync` (spec `sync`).
    ///
    /// # Safety
    /// `sync` is a live `FutoInSync` for as long as the flow may use it.
    pub unsafe fn sync<F, A>(&mut self, sync: *mut FutoInSync, f: F) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
    {
        let slot = StepSlot {
            exec: Mutex::new(Some(exec_fn(f))),
            catch: Mutex::new(None),
        };
        if let Some(p) = self.keep(slot) {
            call!(
                self,
                add_sync,
                "addSync",
                sync,
                p.cast(),
                Some(exec_tramp),
                None
            );
        }
        self
    }

    /// Completes the step with result args (spec `success`); the values are
    /// moved to the implementation.
    pub fn success(&mut self, args: impl IntoArgs) -> StepResult {
        let mut out = FutoInArgs::EMPTY;
        value::to_c(args.into_args(), &mut out);
        call!(self, success, "success", &mut out);
        // What the implementation did not move out.
        value::reset_all(&mut out);
        Ok(())
    }

    /// An error to return from the callback (spec `error(code, info)`):
    /// `return s.error("NotFound", "no such user");`.
    pub fn error(
        &mut self,
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> StepResult {
        Err(Error::with_info(code, info))
    }

    /// Sets the step's time limit (spec `setTimeout`), in whole
    /// milliseconds rounded up (at most `u32::MAX`).
    pub fn set_timeout(&mut self, timeout: Duration) {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(u32::MAX as u128) as u32;
        call!(self, set_timeout, "setTimeout", ms);
    }

    /// Sets the step's cancel callback (spec `setCancel`).
    pub fn set_cancel(&mut self, on_cancel: impl FnOnce() + Send + 'static) {
        let slot: CancelSlot = Mutex::new(Some(Box::new(on_cancel)));
        if let Some(p) = self.keep(slot) {
            call!(self, set_cancel, "setCancel", p.cast(), Some(cancel_tramp));
        }
    }

    /// Marks the step as waiting (spec `waitExternal`) and returns a handle
    /// that completes it from any thread.
    pub fn wait_external(&mut self) -> ForeignExternal {
        call!(self, wait_external, "waitExternal");
        // SAFETY: a step handle; the module's rules make its success and
        // handle_error callable from any thread and harmless once ended.
        unsafe { ForeignExternal::new(self.bsi) }
    }

    /// The Rust state variable `name` of the flow (spec `state()`), made
    /// with `init` on first use; `None` when it holds another type or the
    /// implementation gave no memory. Rust variables are named
    /// `rust:<name>` in the flow's C state, apart from C ones.
    pub fn state_variable<T: Send + 'static>(
        &mut self,
        name: &str,
        init: impl FnOnce() -> T,
    ) -> Option<&mut T> {
        root::state_variable(self.bsi, self.api, name, init)
    }

    /// The flow's `error_info` (the info of the last error), if any.
    pub fn error_info(&mut self) -> Option<String> {
        self.c_state("error_info")
    }

    /// The code of the flow's `last_exception`, if any.
    pub fn last_exception(&mut self) -> Option<String> {
        self.c_state("last_exception")
    }

    /// Moves `value` into memory that lives until this step ends (spec
    /// `stack`), after its sub-steps; `None` when the implementation gave
    /// none. The pointer is valid until then and only on the flow's thread.
    pub fn stack<T: Send + 'static>(&mut self, value: T) -> Option<NonNull<T>> {
        self.keep(value).and_then(NonNull::new)
    }

    /// Adds a loop that runs `body` until [`break_loop`](Self::break_loop)
    /// (spec `loop`).
    pub fn loop_<F>(&mut self, body: F) -> &mut Self
    where
        F: FnMut(&mut ForeignSteps<'_>) -> StepResult + Send + 'static,
    {
        self.loop_impl(None, body)
    }

    /// [`loop_`](Self::loop_) with a label.
    pub fn loop_labeled<F>(&mut self, label: &str, body: F) -> &mut Self
    where
        F: FnMut(&mut ForeignSteps<'_>) -> StepResult + Send + 'static,
    {
        self.loop_impl(Some(label), body)
    }

    fn loop_impl<F>(&mut self, label: Option<&str>, mut body: F) -> &mut Self
    where
        F: FnMut(&mut ForeignSteps<'_>) -> StepResult + Send + 'static,
    {
        let body: Mutex<BodyFn> = Mutex::new(Box::new(move |s, _| body(s)));
        if let Some(p) = self.keep(body) {
            let l = label.map(c_string);
            let lp = l.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
            call!(self, loop_, "loop", p.cast(), Some(body_tramp), lp);
        }
        self
    }

    /// Adds a loop calling `body(s, i)` for `i` in `0..count` (spec
    /// `repeat`).
    pub fn repeat<F>(&mut self, count: usize, body: F) -> &mut Self
    where
        F: FnMut(&mut ForeignSteps<'_>, usize) -> StepResult + Send + 'static,
    {
        self.repeat_impl(None, count, body)
    }

    /// [`repeat`](Self::repeat) with a label.
    pub fn repeat_labeled<F>(&mut self, label: &str, count: usize, body: F) -> &mut Self
    where
        F: FnMut(&mut ForeignSteps<'_>, usize) -> StepResult + Send + 'static,
    {
        self.repeat_impl(Some(label), count, body)
    }

    fn repeat_impl<F>(&mut self, label: Option<&str>, count: usize, body: F) -> &mut Self
    where
        F: FnMut(&mut ForeignSteps<'_>, usize) -> StepResult + Send + 'static,
    {
        let body: Mutex<BodyFn> = Mutex::new(Box::new(body));
        if let Some(p) = self.keep(body) {
            let l = label.map(c_string);
            let lp = l.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
            call!(
                self,
                repeat,
                "repeat",
                p.cast(),
                count,
                Some(repeat_tramp),
                lp
            );
        }
        self
    }

    /// Adds a loop calling `body(s, index, item)` for each item (spec
    /// `forEach`; for a map, iterate its pairs).
    pub fn for_each<I, F>(&mut self, items: I, mut body: F) -> &mut Self
    where
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        F: FnMut(&mut ForeignSteps<'_>, usize, I::Item) -> StepResult + Send + 'static,
    {
        let mut it = items.into_iter().enumerate();
        self.loop_(move |s| match it.next() {
            Some((i, v)) => body(s, i, v),
            None => s.break_loop(),
        })
    }

    /// Breaks the innermost loop: `return s.break_loop();`.
    pub fn break_loop(&mut self) -> StepResult {
        Err(Error::control(Control::Break(None)))
    }

    /// Breaks loops up to the one labelled `label`.
    pub fn break_label(&mut self, label: impl Into<Cow<'static, str>>) -> StepResult {
        Err(Error::control(Control::Break(Some(label.into()))))
    }

    /// Continues the innermost loop: `return s.continue_loop();`.
    pub fn continue_loop(&mut self) -> StepResult {
        Err(Error::control(Control::Continue(None)))
    }

    /// Continues the loop labelled `label`.
    pub fn continue_label(&mut self, label: impl Into<Cow<'static, str>>) -> StepResult {
        Err(Error::control(Control::Continue(Some(label.into()))))
    }

    /// The flow's id (spec `rootId`): equal for all steps of one flow.
    pub fn root_id(&mut self) -> isize {
        call!(self, root_id, "rootId").unwrap_or(0)
    }

    /// True while the handle may be used (spec `isValid`).
    pub fn is_valid(&mut self) -> bool {
        call!(self, is_valid, "isValid").unwrap_or(0) != 0
    }

    /// True on the thread of the loop that runs the flow.
    pub fn is_same_thread(&mut self) -> bool {
        call!(self, is_same_thread, "is_same_thread").unwrap_or(0) != 0
    }

    /// A new root of the same implementation (spec `newInstance`).
    pub fn new_instance(&mut self) -> Result<ForeignRoot, Error> {
        let p = call!(self, new_instance, "newInstance").unwrap_or(std::ptr::null_mut());
        // SAFETY: a fresh root from the implementation, owned from here.
        unsafe { ForeignRoot::from_raw(p) }
    }

    /// Runs `f` on the flow's loop soon (AsyncTool `immediate`).
    ///
    /// `f` is dropped when it runs or when [`cancel_task`](Self::cancel_task)
    /// takes it back. If the implementation drops the callback without
    /// running it (its runtime is freed first), `f` and what it captured
    /// are leaked: the binary interface's scheduling calls have no cleanup
    /// to hand the data back.
    pub fn immediate(&mut self, f: impl FnOnce() + Send + 'static) -> ForeignTask {
        self.schedule(None, Box::new(f))
    }

    /// Runs `f` on the flow's loop after `delay` (AsyncTool `deferred`),
    /// in whole milliseconds rounded up. As with
    /// [`immediate`](Self::immediate), `f` is leaked if the implementation
    /// drops the callback without running it.
    pub fn deferred(&mut self, delay: Duration, f: impl FnOnce() + Send + 'static) -> ForeignTask {
        self.schedule(Some(delay), Box::new(f))
    }

    fn schedule(&mut self, delay: Option<Duration>, f: TaskFn) -> ForeignTask {
        let data = Box::into_raw(Box::new(f));
        let h = match delay {
            None => call!(
                self,
                sched_immediate,
                "sched_immediate",
                data.cast(),
                Some(task_tramp)
            ),
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000).min(u32::MAX as u128) as u32;
                call!(
                    self,
                    sched_deferred,
                    "sched_deferred",
                    ms,
                    data.cast(),
                    Some(task_tramp)
                )
            }
        };
        match h {
            Some(h) => ForeignTask::new(h, data),
            None => {
                // SAFETY: not given to the implementation.
                drop(unsafe { Box::from_raw(data) });
                ForeignTask::new(FutoInHandle::EMPTY, std::ptr::null_mut())
            }
        }
    }

    /// Cancels a scheduled callback that has not run (AsyncTool `cancel`);
    /// its closure is dropped. Call it on the flow's loop thread.
    pub fn cancel_task(&mut self, task: &mut ForeignTask) {
        if self.task_is_valid(task) {
            let h: *mut FutoInHandle = &mut task.handle;
            call!(self, sched_cancel, "sched_cancel", h);
            task.cancelled();
        }
        task.handle = FutoInHandle::EMPTY;
    }

    /// True while a scheduled callback has not run or been cancelled.
    pub fn task_is_valid(&mut self, task: &mut ForeignTask) -> bool {
        if task.is_empty() {
            return false;
        }
        let h: *mut FutoInHandle = &mut task.handle;
        call!(self, sched_is_valid, "sched_is_valid", h).unwrap_or(0) != 0
    }
}
