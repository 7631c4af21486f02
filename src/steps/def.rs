//! Step definitions: what `add()`, `parallel()`, loops and `await` queue.

use crate::args::FromArgs;
use crate::error::StepResult;
use crate::steps::step::Step;
use std::marker::PhantomData;

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
    /// The step's name for `async_stack`.
    fn name(&self) -> NameFn;
}

/// A boxed one-shot callback `F` taking `A`, named after `N`.
pub(crate) struct Once<F, A, N>(pub F, PhantomData<fn(A) -> N>);
/// A boxed clonable callback `F` taking `A`, named after `N`.
pub(crate) struct Cloned<F, A, N>(pub F, PhantomData<fn(A) -> N>);

impl<F, A, N: 'static> ExecFn for Once<F, A, N>
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
    fn name(&self) -> NameFn {
        std::any::type_name::<N>
    }
}

impl<F, A, N: 'static> ExecFn for Cloned<F, A, N>
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
        Some(Box::new(Cloned::<F, A, N>(self.0.clone(), PhantomData)))
    }
    fn name(&self) -> NameFn {
        std::any::type_name::<N>
    }
}

/// Error handlers: in place when they capture at most one word (see
/// `catch`).
pub(crate) use crate::steps::catch::{cloned_catch, once_catch, Catch};

/// A one-shot execute callback: in place when small (see `inline`).
pub(crate) use crate::steps::inline::{once, once_named};

/// A clonable execute callback: in place when small (see `inline`).
pub(crate) use crate::steps::inline::cloned;

pub(crate) fn boxed_once<N: 'static, F, A>(f: F) -> Box<dyn ExecFn>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    Box::new(Once::<F, A, N>(f, PhantomData))
}

pub(crate) fn boxed_cloned<N: 'static, F, A>(f: F) -> Box<dyn ExecFn>
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
    A: FromArgs + 'static,
{
    Box::new(Cloned::<F, A, N>(f, PhantomData))
}

/// A loop driver (see `loop_iter`).
pub(crate) use crate::steps::loop_iter::LoopIter;

/// A boxed future that a step awaits (see `await_box`).
pub(crate) use crate::steps::await_box::AwaitBox as BoxFuture;

/// What a queued step does. Each kind knows the step's name for
/// `async_stack` (a callback from its table, loops and awaits beside their
/// payload, parallels all share one), so a step definition is six words.
pub(crate) enum Exec {
    Fn(crate::steps::inline::Callback),
    Parallel(Vec<StepDef>),
    /// A loop without a label: its driver (which knows the loop's name).
    Loop(LoopIter),
    /// A loop with a label (kept boxed with its driver, so a step
    /// definition stays six words).
    LabeledLoop(Box<(LoopIter, String)>),
    Await(BoxFuture, NameFn),
    /// A running loop's step, its driver out for an iteration (see
    /// `Flow::iterate`). Never run: a loop's step stays in the queue just
    /// below its frame's segment while the loop runs.
    Taken,
}

/// At most this many emptied lists of parallel branches are kept per
/// thread, each with room for at most `BRANCH_LIST_KEEP` branches (384
/// bytes). As for the loop's pooled flows, the pool grows to the peak of
/// parallel steps built and not yet run (models built in a burst before
/// the loop runs them), bounded like the flows a quiet loop keeps.
const BRANCH_LISTS_MAX: usize = 65_536;
const BRANCH_LIST_KEEP: usize = 8;

thread_local! {
    /// Emptied lists of a parallel step's branches. Per thread, not per
    /// loop: a model's `parallel()` (built on any thread, most often the
    /// loop's own) takes one as a step's `parallel()` does, and the loop
    /// gives each back once it has made the branches' strands.
    static BRANCH_LISTS: std::cell::RefCell<Vec<Vec<StepDef>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// An empty list for a new parallel step's branches, with the room a
/// former one had on this thread (none: a new, unallocated list).
#[inline]
pub(crate) fn branch_list() -> Vec<StepDef> {
    BRANCH_LISTS
        .try_with(|p| p.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Keeps the emptied list of a parallel step's branches for the next one
/// on this thread (a list with room for many branches is let go, and so
/// is any list while the thread ends).
#[inline]
pub(crate) fn recycle_branch_list(list: Vec<StepDef>) {
    debug_assert!(list.is_empty());
    if list.capacity() == 0 || list.capacity() > BRANCH_LIST_KEEP {
        return;
    }
    let _ = BRANCH_LISTS.try_with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            if p.len() < BRANCH_LISTS_MAX {
                p.push(list);
            }
        }
    });
}

/// The name a parallel step shows in `async_stack`.
pub(crate) fn parallel_name() -> &'static str {
    std::any::type_name::<crate::steps::parallel::Parallel<'static, 'static>>()
}

/// The name of a loop's step while its driver is out (never shown: the
/// loop frame keeps the driver's own name).
fn loop_name() -> &'static str {
    "loop"
}

/// One queued step.
pub(crate) struct StepDef {
    pub exec: Exec,
    pub catch: Option<Catch>,
}

impl StepDef {
    /// The step's name for `async_stack`.
    #[inline]
    pub(crate) fn name(&self) -> NameFn {
        match &self.exec {
            Exec::Fn(f) => f.name(),
            Exec::Parallel(_) => parallel_name,
            Exec::Loop(l) => l.name(),
            Exec::LabeledLoop(b) => b.0.name(),
            Exec::Await(_, name) => *name,
            Exec::Taken => loop_name,
        }
    }

    /// A copy for a cloned model; `None` for one-shot steps.
    pub(crate) fn try_clone(&self) -> Option<StepDef> {
        let exec = match &self.exec {
            Exec::Fn(f) => Exec::Fn(f.try_clone()?),
            Exec::Parallel(v) => {
                Exec::Parallel(v.iter().map(StepDef::try_clone).collect::<Option<_>>()?)
            }
            Exec::Loop(..) | Exec::LabeledLoop(..) | Exec::Await(..) | Exec::Taken => return None,
        };
        let catch = match &self.catch {
            Some(c) => Some(c.try_clone()?),
            None => None,
        };
        Some(StepDef { exec, catch })
    }
}
