//! The handles a [`ForeignSteps`] gives out: a parallel builder, a waiting
//! step's completion handle, a scheduled task.

use super::boxes::Keeper;
use super::trampolines::{add_step, exec_fn, open_parallel, CatchFn, ExecFn, TaskFn};
use super::view::{c_string, ForeignSteps};
use crate::args::{FromArgs, IntoArgs};
use crate::cabi::types::*;
use crate::cabi::value;
use crate::error::{Error, StepResult};
use std::borrow::Cow;

/// Adds branches to a parallel step of a foreign flow (from
/// [`ForeignSteps::parallel`] or [`ForeignRoot::parallel`](super::ForeignRoot::parallel)).
pub struct ForeignParallel<'s> {
    /// The parallel's handle; NULL when it could not be made (adds are
    /// then ignored: the owner already reports the failure).
    par: *mut FutoInAsyncSteps,
    keeper: Keeper,
    /// Where the owner keeps the first call that could not be made.
    misuse: &'s mut Option<Error>,
}

impl std::fmt::Debug for ForeignParallel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignParallel")
            .field("par", &self.par)
            .finish()
    }
}

impl<'s> ForeignParallel<'s> {
    /// Opens a parallel on `bsi`; a failure goes to `misuse`.
    ///
    /// # Safety
    /// `bsi` is a live step or root handle and `keeper` a live owner for
    /// the closures, both for `'s`.
    pub(super) unsafe fn open(
        bsi: *mut FutoInAsyncSteps,
        keeper: Keeper,
        c: Option<CatchFn>,
        misuse: &'s mut Option<Error>,
    ) -> Self {
        // SAFETY: the caller's contract.
        let par = match unsafe { open_parallel(keeper, bsi, c) } {
            Ok(p) => p,
            Err(e) => {
                misuse.get_or_insert(e);
                std::ptr::null_mut()
            }
        };
        ForeignParallel {
            par,
            keeper,
            misuse,
        }
    }

    /// Adds a branch; it gets the parallel step's input args.
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
    {
        self.push(exec_fn(f), None)
    }

    /// Adds a branch with an error handler.
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut ForeignSteps<'_>, A) -> StepResult + Send + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut ForeignSteps<'_>, &Error) -> StepResult + Send + 'static,
    {
        self.push(exec_fn(f), Some(Box::new(on_error)))
    }

    fn push(&mut self, f: ExecFn, c: Option<CatchFn>) -> &mut Self {
        if self.par.is_null() {
            return self;
        }
        // SAFETY: the parallel's live handle and its owner's keeper (the
        // constructor's contract, for 's).
        if let Err(e) = unsafe { add_step(self.keeper, self.par, Some(f), c) } {
            self.misuse.get_or_insert(e);
        }
        self
    }
}

/// Completes a waiting step of a foreign flow from any thread (from
/// [`ForeignSteps::wait_external`]).
#[derive(Debug, Clone)]
pub struct ForeignExternal {
    bsi: *mut FutoInAsyncSteps,
    /// When the implementation is this crate's own: the step's external
    /// handle, taken when it started waiting. Step handle memory is
    /// recycled after a quarantine, so a late completion through `bsi`
    /// could reach another step; this handle refuses it instead.
    own: Option<crate::steps::external::ExternalHandle>,
}

// SAFETY: `wrap`'s contract: the implementation takes success/handle_error
// of a waiting step from any thread, and calls on an ended step's handle
// are harmless (this crate's own handles are never freed, only recycled
// after a quarantine; and for those, `own` answers instead of `bsi`).
unsafe impl Send for ForeignExternal {}
// SAFETY: as above; `own` is `Send + Sync`.
unsafe impl Sync for ForeignExternal {}

impl ForeignExternal {
    /// # Safety
    /// `bsi` is a step handle under `wrap`'s contract, whose step has just
    /// started waiting.
    pub(super) unsafe fn new(bsi: *mut FutoInAsyncSteps) -> Self {
        // SAFETY: caller's contract (a handle readable up to `api`).
        let own = unsafe { crate::cabi::api::ext_of(bsi) };
        ForeignExternal { bsi, own }
    }

    fn api(&self) -> &FutoInAsyncStepsAPI {
        // SAFETY: step handle memory stays readable (see the Send proof).
        unsafe { &*(*self.bsi).api }
    }

    /// True while the step still waits (spec `isValid`).
    pub fn is_valid(&self) -> bool {
        if let Some(h) = &self.own {
            return h.is_valid();
        }
        // SAFETY: as in `api`.
        self.api()
            .is_valid
            .is_some_and(|f| unsafe { f(self.bsi) } != 0)
    }

    fn ended() -> Error {
        Error::internal("the step is no longer waiting")
    }

    /// Completes the step with `args`; `InternalError` when it has ended.
    pub fn success(&self, args: impl IntoArgs) -> Result<(), Error> {
        if !self.is_valid() {
            return Err(Self::ended());
        }
        let mut out = FutoInArgs::EMPTY;
        value::to_c(args.into_args(), &mut out);
        let r = match (&self.own, self.api().success) {
            // What the implementation's success() does with them off the
            // callback, on the step's own handle: the values go through C
            // as they would, and a value C cannot carry fails the step.
            // SAFETY: `out` holds values as the header describes.
            (Some(h), _) => match unsafe { value::from_c(&mut out) } {
                Ok(a) => h.success(a),
                Err(e) => h.fail(e),
            }
            .map_err(|_| Self::ended()),
            (None, Some(success)) => {
                // SAFETY: as in `api`; `out` holds values as the header
                // describes.
                unsafe { success(self.bsi, &mut out) };
                Ok(())
            }
            (None, None) => Err(Error::internal("wrap: the implementation has no success")),
        };
        value::reset_all(&mut out);
        r
    }

    /// Fails the step with `code` and `info`; `InternalError` when it has
    /// ended.
    pub fn error(
        &self,
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> Result<(), Error> {
        if let Some(h) = &self.own {
            return h.error(code, info).map_err(|_| Self::ended());
        }
        if !self.is_valid() {
            return Err(Self::ended());
        }
        let Some(handle_error) = self.api().handle_error else {
            return Err(Error::internal(
                "wrap: the implementation has no handle_error",
            ));
        };
        let (code, info) = (c_string(&code.into()), c_string(&info.into()));
        // SAFETY: as in `api`; two NUL-terminated strings.
        unsafe { handle_error(self.bsi, code.as_ptr(), info.as_ptr()) };
        Ok(())
    }
}

/// A callback scheduled with [`ForeignSteps::immediate`] or
/// [`ForeignSteps::deferred`]; cancel it with
/// [`ForeignSteps::cancel_task`]. Dropping it does not cancel.
#[derive(Debug)]
pub struct ForeignTask {
    pub(super) handle: FutoInHandle,
    /// The boxed closure the implementation holds until it runs.
    data: *mut TaskFn,
}

impl ForeignTask {
    pub(super) fn new(handle: FutoInHandle, data: *mut TaskFn) -> Self {
        ForeignTask { handle, data }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.handle == FutoInHandle::EMPTY
    }

    /// The task was cancelled before it ran: its closure is ours to drop.
    pub(super) fn cancelled(&mut self) {
        let data = std::mem::replace(&mut self.data, std::ptr::null_mut());
        if !data.is_null() {
            // SAFETY: `sched_is_valid` said it had not run and
            // `sched_cancel` took it back, so the implementation will not
            // call `task_tramp` (which would free it) any more.
            drop(unsafe { Box::from_raw(data) });
        }
    }
}
