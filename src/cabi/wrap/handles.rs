//! The handles a [`ForeignSteps`] gives out: a parallel builder, a waiting
//! step's completion handle, a scheduled task.

use super::keep::*;
use super::ForeignSteps;
use crate::args::{FromArgs, IntoArgs};
use crate::cabi::types::*;
use crate::cabi::value;
use crate::error::{Error, StepResult};
use parking_lot::Mutex;
use std::borrow::Cow;
use std::marker::PhantomData;

/// Adds branches to a parallel step of a foreign flow (from
/// [`ForeignSteps::parallel`] or [`ForeignRoot::parallel`](super::ForeignRoot::parallel)).
pub struct ForeignParallel<'s> {
    /// The parallel's handle; NULL when it could not be made (adds are
    /// then ignored: the step already reports the failure).
    par: *mut FutoInAsyncSteps,
    keeper: Option<Keeper>,
    _owner: PhantomData<&'s mut ()>,
}

impl std::fmt::Debug for ForeignParallel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignParallel")
            .field("par", &self.par)
            .finish()
    }
}

impl<'s> ForeignParallel<'s> {
    /// # Safety
    /// `par` is a live parallel handle and `keeper` a live owner for the
    /// closures, both for `'s`.
    pub(super) unsafe fn new(par: *mut FutoInAsyncSteps, keeper: Keeper) -> Self {
        ForeignParallel {
            par,
            keeper: Some(keeper),
            _owner: PhantomData,
        }
    }

    pub(super) fn failed() -> Self {
        ForeignParallel {
            par: std::ptr::null_mut(),
            keeper: None,
            _owner: PhantomData,
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
        let Some(keeper) = self.keeper else {
            return self;
        };
        let has_catch = c.is_some();
        let slot = StepSlot {
            exec: Mutex::new(Some(f)),
            catch: Mutex::new(c),
        };
        // SAFETY: the owner is live for 's (constructor contract).
        let Ok(p) = (unsafe { keeper.keep(slot) }) else {
            return self;
        };
        // SAFETY: a live parallel handle (constructor contract).
        let add = unsafe { (*(*self.par).api).add };
        if let Some(add) = add {
            let eh: ErrorCallback = if has_catch { Some(catch_tramp) } else { None };
            // SAFETY: as above; the slot lives as long as the parallel.
            unsafe { add(self.par, p.cast(), Some(exec_tramp), eh) };
        }
        self
    }
}

/// Completes a waiting step of a foreign flow from any thread (from
/// [`ForeignSteps::wait_external`]).
#[derive(Debug, Clone)]
pub struct ForeignExternal {
    bsi: *mut FutoInAsyncSteps,
}

// SAFETY: `wrap`'s contract: the implementation takes success/handle_error
// of a waiting step from any thread, and calls on an ended step's handle
// are harmless (this crate's own handles are never freed, only recycled
// after a quarantine, and report `isValid() == 0` once stale).
unsafe impl Send for ForeignExternal {}
// SAFETY: as above; the handle holds no state of its own.
unsafe impl Sync for ForeignExternal {}

impl ForeignExternal {
    /// # Safety
    /// `bsi` is a step handle under `wrap`'s contract.
    pub(super) unsafe fn new(bsi: *mut FutoInAsyncSteps) -> Self {
        ForeignExternal { bsi }
    }

    fn api(&self) -> &FutoInAsyncStepsAPI {
        // SAFETY: step handle memory stays readable (see the Send proof).
        unsafe { &*(*self.bsi).api }
    }

    /// True while the step still waits (spec `isValid`).
    pub fn is_valid(&self) -> bool {
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
        let Some(success) = self.api().success else {
            return Err(Error::internal("wrap: the implementation has no success"));
        };
        let mut out = FutoInArgs::EMPTY;
        value::to_c(args.into_args(), &mut out);
        // SAFETY: as in `api`; `out` holds values as the header describes.
        unsafe { success(self.bsi, &mut out) };
        value::reset_all(&mut out);
        Ok(())
    }

    /// Fails the step with `code` and `info`; `InternalError` when it has
    /// ended.
    pub fn error(
        &self,
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> Result<(), Error> {
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
