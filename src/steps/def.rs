//! Step definitions: what `add()`, `parallel()`, loops and `await` queue.

use crate::args::{Args, FromArgs};
use crate::error::{Error, StepResult};
use crate::steps::step::Step;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

/// The name of a callback for `async_stack`: a function pointer, so a frame
/// stores one word instead of a string.
pub(crate) type NameFn = fn() -> &'static str;

pub(crate) fn name_of<F>() -> NameFn {
    std::any::type_name::<F>
}

/// An execute callback, boxed. Clonable ones come from models (root flows).
pub(crate) trait ExecFn {
    fn call(self: Box<Self>, s: &mut Step<'_>) -> StepResult;
    fn try_clone(&self) -> Option<Box<dyn ExecFn>>;
}

pub(crate) struct Once<F, A>(pub F, PhantomData<fn(A)>);
pub(crate) struct Cloned<F, A>(pub F, PhantomData<fn(A)>);

impl<F, A> ExecFn for Once<F, A>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    #[inline]
    fn call(self: Box<Self>, s: &mut Step<'_>) -> StepResult {
        let a = A::from_args(s.args())?;
        (self.0)(s, a)
    }
    fn try_clone(&self) -> Option<Box<dyn ExecFn>> {
        None
    }
}

impl<F, A> ExecFn for Cloned<F, A>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    #[inline]
    fn call(self: Box<Self>, s: &mut Step<'_>) -> StepResult {
        let a = A::from_args(s.args())?;
        (self.0)(s, a)
    }
    fn try_clone(&self) -> Option<Box<dyn ExecFn>> {
        Some(Box::new(Cloned::<F, A>(self.0.clone(), PhantomData)))
    }
}

/// Error handlers: in place when they capture at most one word (see
/// `catch`).
pub(crate) use crate::steps::catch::{cloned_catch, once_catch, Catch};

/// A one-shot execute callback: in place when small (see `inline`).
pub(crate) use crate::steps::inline::once;

/// A clonable execute callback: in place when small (see `inline`).
pub(crate) use crate::steps::inline::cloned;

pub(crate) fn boxed_once<F, A>(f: F) -> Box<dyn ExecFn>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    Box::new(Once(f, PhantomData))
}

pub(crate) fn boxed_cloned<F, A>(f: F) -> Box<dyn ExecFn>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    Box::new(Cloned(f, PhantomData))
}

/// A loop driver: produces the next iteration by running the body on the
/// given step, or `None` when the loop condition ends the loop.
pub(crate) type LoopIter = Box<dyn FnMut(&mut Step<'_>) -> Option<StepResult>>;

/// A boxed future that a step awaits.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<Args, Error>>>>;

/// What a queued step does.
pub(crate) enum Exec {
    Fn(crate::steps::inline::Callback),
    Parallel(Vec<StepDef>),
    Loop(Box<(LoopIter, Option<String>)>),
    Await(BoxFuture),
}

/// One queued step.
pub(crate) struct StepDef {
    pub exec: Exec,
    pub catch: Option<Catch>,
    pub name: NameFn,
}

impl StepDef {
    /// A copy for a cloned model; `None` for one-shot steps.
    pub(crate) fn try_clone(&self) -> Option<StepDef> {
        let exec = match &self.exec {
            Exec::Fn(f) => Exec::Fn(f.try_clone()?),
            Exec::Parallel(v) => {
                Exec::Parallel(v.iter().map(StepDef::try_clone).collect::<Option<_>>()?)
            }
            Exec::Loop(_) | Exec::Await(_) => return None,
        };
        let catch = match &self.catch {
            Some(c) => Some(c.try_clone()?),
            None => None,
        };
        Some(StepDef {
            exec,
            catch,
            name: self.name,
        })
    }
}
