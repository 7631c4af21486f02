//! A step that waits for an event: its timeout, its cancel callback, its
//! external handle.

use super::Step;
use crate::steps::external::{ExternalHandle, WaitToken};
use crate::steps::frame::WAIT;
use crate::steps::scheduler::Scheduler;
use std::time::Duration;

impl Step<'_> {
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
        if self.waiting_allowed("set_timeout() is not allowed in an error handler") {
            self.set_timer(timeout, false);
        }
    }

    /// Gives this step its timer, due in `delay`: a timeout, or a sleep
    /// (`wake`); it replaces the one it had.
    fn set_timer(&mut self, delay: Duration, wake: bool) {
        let seq = self.flow.st(self.sid).frames[self.depth].seq;
        let t = self
            .sched
            .flow_timeout(delay, self.flow.key, self.sid, seq, wake);
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

    /// Makes this step wait for `delay`, then succeed with no args: the
    /// next step runs `delay` after this call (on a `TestTool`, `delay`
    /// of its virtual time).
    ///
    /// It waits as [`wait_external`](Self::wait_external) does, with the
    /// step's own timer in place of a handle: the timer goes with the step
    /// however the step ends (a cancel, a timeout around it, an error
    /// unwinding through it, or a handle of the step completing it first).
    /// The step has one timer, which [`set_timeout`](Self::set_timeout)
    /// uses too: the later of the two calls wins (limit a sleep with a
    /// timeout on a step around it). In an error handler it fails the
    /// step with `InternalError`, as the other waits do. A `delay` above
    /// 100 years counts as 100 years.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// use std::time::Duration;
    ///
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.sleep(Duration::from_millis(250));
    ///     Ok(())
    /// });
    /// root.add(|s, ()| s.success(("awake",)));
    /// let p = root.promise(&mut tool);
    /// tool.run_all_ready();
    /// tool.advance(Duration::from_millis(249));
    /// assert!(tool.pending().timers > 0, "still asleep");
    /// tool.advance(Duration::from_millis(1));
    /// assert_eq!(tool.block_on::<(&str,)>(p).unwrap().0, "awake");
    /// assert_eq!(tool.elapsed(), Duration::from_millis(250));
    /// ```
    pub fn sleep(&mut self, delay: Duration) {
        if self.waiting_allowed("sleep() is not allowed in an error handler") {
            self.set_timer(delay, true);
        }
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
}
