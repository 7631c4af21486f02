//! The parallel step builder (spec `parallel()`, 1.4).

use crate::args::FromArgs;
use crate::error::{Error, StepResult};
use crate::steps::def::{self, Catch, Exec, StepDef};
use crate::steps::step::Step;

/// Adds branches to a parallel step; returned by [`Step::parallel`].
///
/// Each branch is an independent sequence (its own levels); all start
/// together, the parallel step succeeds (with no args) when all succeed, and
/// the first unhandled error cancels the other branches.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| {
///     s.parallel()
///         .add(|s, ()| { s.state().set("a", 1i32); Ok(()) })
///         .add(|s, ()| { s.state().set("b", 2i32); Ok(()) });
///     s.add(|s, ()| {
///         let st = s.state();
///         let sum = st.get::<i32>("a").unwrap() + st.get::<i32>("b").unwrap();
///         s.success((sum,))
///     });
///     Ok(())
/// });
/// let p = root.promise(&mut tool);
/// assert_eq!(tool.block_on::<(i32,)>(p).unwrap().0, 3);
/// ```
pub struct Parallel<'s, 'a> {
    step: &'s mut Step<'a>,
    idx: Option<usize>,
}

/// The strand of the step that adds the parallel and the branches added
/// so far: `Parallel { strand: 0, branches: 2 }`.
impl std::fmt::Debug for Parallel<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let branches = self
            .idx
            .and_then(|i| self.step.flow.st_get(self.step.sid)?.queue.get(i))
            .map_or(0, |d| match &d.exec {
                Exec::Parallel(v) => v.len(),
                _ => 0,
            });
        f.debug_struct("Parallel")
            .field("strand", &self.step.sid)
            .field("branches", &branches)
            .finish()
    }
}

impl<'s, 'a> Parallel<'s, 'a> {
    pub(crate) fn new(step: &'s mut Step<'a>, catch: Option<Catch>) -> Self {
        let before = step.queue_mut().len();
        // A list kept from an earlier parallel step: adding the branches
        // allocates nothing once the loop is warm.
        let list = def::branch_list();
        step.push(StepDef {
            exec: Exec::Parallel(list),
            catch,
        });
        // Refused as misuse (the queue did not grow): the branches are
        // ignored. The queue's last step is then another level's, maybe
        // a parallel of its own, which must not get them.
        let q = step.queue_mut();
        let idx = (q.len() > before).then(|| q.len() - 1);
        Parallel { step, idx }
    }

    /// Where this parallel sits in the step's queue (None: refused).
    pub(crate) fn index(&self) -> Option<usize> {
        self.idx
    }

    /// The parallel queued at `idx` by an earlier `parallel()` of `step`.
    pub(crate) fn at(step: &'s mut Step<'a>, idx: usize) -> Self {
        Parallel {
            step,
            idx: Some(idx),
        }
    }

    fn branch(&mut self, d: StepDef) -> &mut Self {
        if let Some(i) = self.idx {
            if let Some(StepDef {
                exec: Exec::Parallel(v),
                ..
            }) = self.step.queue_mut().get_mut(i)
            {
                v.push(d);
            }
        }
        self
    }

    /// Adds a branch.
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
    {
        self.branch(StepDef {
            exec: Exec::Fn(def::once(f)),
            catch: None,
        })
    }

    /// Adds a branch with its own error handler.
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + 'static,
    {
        self.branch(StepDef {
            exec: Exec::Fn(def::once(f)),
            catch: Some(def::once_catch(on_error)),
        })
    }
}
