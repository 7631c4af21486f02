//! [`AsyncSteps`]: a root flow, built before it runs (a "model").

use crate::args::{FromArgs, IntoArgs};
use crate::error::{Error, StepResult};
use crate::state::State;
use crate::steps::def::{self, Exec, StepDef};
use crate::steps::flow_handle::FlowHandle;
use crate::steps::loops::LoopItems;
use crate::steps::promise::{Completion, Promise};
use crate::steps::scheduler::Scheduler;
use crate::steps::step::Step;
use smallvec::SmallVec;
use std::fmt;

/// A root AsyncSteps object: the level-0 steps and the initial state of a
/// flow. Build it with [`add`](AsyncSteps::add) and friends, then start it
/// with [`execute`](AsyncSteps::execute) or [`promise`](AsyncSteps::promise).
///
/// Starting consumes the root, so adding steps to a root that already runs
/// does not compile; inside a running flow, steps are added through
/// [`Step`]. A root can be cloned (spec 1.5): the clone shares nothing
/// mutable, copies the state, and costs one allocation plus a copy of each
/// step's closure (closures must be `Clone + Send`, which is what makes this
/// cheap and lets a model be handed to another thread).
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
///
/// let mut tool = TestTool::new();
/// let mut model = AsyncSteps::new();
/// model
///     .add(|s, ()| s.success((20i32,)))
///     .add(|s, (v,): (i32,)| s.success((v + 1,)));
///
/// // Reuse the model for many flows.
/// let a = model.clone().promise(&mut tool);
/// let b = model.promise(&mut tool);
/// assert_eq!(tool.block_on::<(i32,)>(a).unwrap().0, 21);
/// assert_eq!(tool.block_on::<(i32,)>(b).unwrap().0, 21);
/// ```
///
/// Adding to a root after it started is a compile error:
///
/// ```compile_fail
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| Ok(()));
/// let h = root.execute(&mut tool);
/// root.add(|s, ()| Ok(())); // `root` was moved by execute()
/// ```
#[derive(Default)]
pub struct AsyncSteps {
    /// Level-0 steps; two are stored inline, so a small root
    /// allocates nothing but its closure (none for a zero-sized one).
    pub(crate) steps: SmallVec<[StepDef; 2]>,
    pub(crate) state: State,
}

// SAFETY: the public API of `AsyncSteps` only stores `StepDef`s built by
// `def::cloned` / `def::cloned_catch` (closures bounded by `Send`) and
// `Exec::Parallel` vectors of such steps; `State` values are `Send` by the
// bounds of `State::set`. No `Once` closure, loop or future (the non-`Send`
// variants) is ever placed in an `AsyncSteps`, so moving one to another
// thread moves only `Send` data.
unsafe impl Send for AsyncSteps {}

impl fmt::Debug for AsyncSteps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncSteps")
            .field("steps", &self.steps.len())
            .field("state", &self.state)
            .finish()
    }
}

impl Clone for AsyncSteps {
    fn clone(&self) -> Self {
        AsyncSteps {
            steps: self
                .steps
                .iter()
                .map(|d| d.try_clone().expect("model steps are clonable"))
                .collect(),
            state: self.state.clone(),
        }
    }
}

impl AsyncSteps {
    /// An empty root.
    #[inline]
    pub fn new() -> Self {
        AsyncSteps {
            steps: SmallVec::new(),
            state: State::new(),
        }
    }

    /// Adds a level-0 step (spec `add`).
    ///
    /// The closure must be `Clone + Send`: a root is a model that may be
    /// cloned and run again (spec 1.5) or run on another thread. A value
    /// that is neither (a channel's receiver, a socket) goes in a
    /// [`TakeOnce`](crate::TakeOnce), taken by the run that uses it.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TakeOnce, TestTool};
    /// let (tx, rx) = std::sync::mpsc::channel::<u32>();
    /// let rx = TakeOnce::new(rx);
    /// let mut root = AsyncSteps::new();
    /// root.add(move |s, ()| {
    ///     let rx = rx.take()?; // the first run takes it; a second fails
    ///     s.success((rx.recv().unwrap(),))
    /// });
    /// tx.send(7).unwrap();
    /// let mut tool = TestTool::new();
    /// let p = root.promise::<(u32,)>(&mut tool);
    /// assert_eq!(tool.block_on(p).unwrap().0, 7);
    /// ```
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
        A: FromArgs + 'static,
    {
        self.push(StepDef {
            exec: Exec::Fn(def::cloned(f)),
            catch: None,
        });
        self
    }

    /// Adds a level-0 step with an error handler (spec `add(func, onerror)`).
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
    {
        self.push(StepDef {
            exec: Exec::Fn(def::cloned(f)),
            catch: Some(def::cloned_catch(on_error)),
        });
        self
    }

    #[inline]
    fn push(&mut self, d: StepDef) {
        self.steps.push(d);
    }

    /// Adds a level-0 parallel step (spec `parallel`); add its branches to
    /// the returned builder. Each branch is called with no args (`()`),
    /// whatever the step before gave: read an earlier result from the
    /// state.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.parallel()
    ///     .add(|s, ()| { s.state().set("x", 1u8); Ok(()) })
    ///     .add(|s, ()| { s.state().set("y", 2u8); Ok(()) });
    /// root.add(|s, ()| {
    ///     let st = s.state();
    ///     let v = st.get::<u8>("x").unwrap() + st.get::<u8>("y").unwrap();
    ///     s.success((v,))
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(u8,)>(p).unwrap().0, 3);
    /// ```
    pub fn parallel(&mut self) -> ModelParallel<'_> {
        self.parallel_def(None)
    }

    /// [`parallel`](AsyncSteps::parallel) with an error handler.
    pub fn parallel_catch<C>(&mut self, on_error: C) -> ModelParallel<'_>
    where
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
    {
        self.parallel_def(Some(def::cloned_catch(on_error)))
    }

    /// The branches of the level-0 parallel at `idx`, if there is one.
    pub(crate) fn parallel_at(&mut self, idx: usize) -> Option<ModelParallel<'_>> {
        match self.steps.get_mut(idx) {
            Some(StepDef {
                exec: Exec::Parallel(v),
                ..
            }) => Some(ModelParallel { branches: v }),
            _ => None,
        }
    }

    /// Number of level-0 steps queued.
    pub(crate) fn len(&self) -> usize {
        self.steps.len()
    }

    fn parallel_def(&mut self, catch: Option<def::Catch>) -> ModelParallel<'_> {
        // A list this thread kept from an earlier parallel step (the
        // loop's, when the model is built there): no allocation once warm.
        self.push(StepDef {
            exec: Exec::Parallel(def::branch_list()),
            catch,
        });
        let Some(StepDef {
            exec: Exec::Parallel(v),
            ..
        }) = self.steps.last_mut()
        else {
            unreachable!("just pushed")
        };
        ModelParallel { branches: v }
    }

    /// Adds a step that completes with `args` (spec `successStep`).
    pub fn success_step<T>(&mut self, args: T) -> &mut Self
    where
        T: IntoArgs + Clone + Send + 'static,
    {
        self.add(move |s, ()| s.success(args))
    }

    /// The initial state of the flow (spec `state()`).
    pub fn state(&mut self) -> &mut State {
        &mut self.state
    }

    /// Appends copies of `other`'s steps and the state variables it has that
    /// this root lacks (spec `copyFrom`).
    pub fn copy_from(&mut self, other: &AsyncSteps) -> &mut Self {
        self.steps.extend(
            other
                .steps
                .iter()
                .map(|d| d.try_clone().expect("model steps are clonable")),
        );
        self.state.copy_missing(&other.state);
        self
    }

    /// A new, empty root (spec `newInstance`).
    pub fn new_instance(&self) -> AsyncSteps {
        AsyncSteps::new()
    }

    /// Adds a level-0 loop (spec `loop`); see [`Step::loop_`].
    pub fn loop_<F>(&mut self, body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>) -> StepResult + Clone + Send + 'static,
    {
        self.add(move |s, ()| {
            s.model_loop().loop_(body);
            Ok(())
        })
    }

    /// Adds a level-0 `repeat` loop; see [`Step::repeat`].
    pub fn repeat<F>(&mut self, count: usize, body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>, usize) -> StepResult + Clone + Send + 'static,
    {
        self.add(move |s, ()| {
            s.model_loop().repeat(count, body);
            Ok(())
        })
    }

    /// Adds a level-0 `for_each` loop; see [`Step::for_each`]. The items are
    /// cloned for each flow started from this model.
    pub fn for_each<I, F>(&mut self, items: I, body: F) -> &mut Self
    where
        I: LoopItems + Clone + Send + 'static,
        F: FnMut(&mut Step<'_>, I::Key, I::Value) -> StepResult + Clone + Send + 'static,
    {
        self.add(move |s, ()| {
            s.model_loop().for_each(items, body);
            Ok(())
        })
    }

    /// [`loop_`](Self::loop_) with a label for `break_label` and
    /// `continue_label` from loops nested in it; see [`Step::loop_labeled`].
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.state().set("n", 0u32);
    /// root.loop_labeled("OUTER", |s| {
    ///     s.repeat(10, |s, i| {
    ///         *s.state().get_mut::<u32>("n").unwrap() += 1;
    ///         if i == 2 {
    ///             return s.break_label("OUTER");
    ///         }
    ///         Ok(())
    ///     });
    ///     Ok(())
    /// });
    /// root.add(|s, ()| {
    ///     let n = *s.state().get::<u32>("n").unwrap();
    ///     s.success((n,))
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(u32,)>(p).unwrap().0, 3);
    /// ```
    pub fn loop_labeled<F>(&mut self, label: impl Into<String>, body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>) -> StepResult + Clone + Send + 'static,
    {
        // Kept apart from `loop_` (and so for `repeat`, `for_each`): an
        // unlabelled loop's step captures no `Option<String>`, so its
        // closure stays small enough to be stored in place, not boxed.
        let label = label.into();
        self.add(move |s, ()| {
            s.model_loop().loop_labeled(label, body);
            Ok(())
        })
    }

    /// [`repeat`](Self::repeat) with a label; see [`Step::repeat_labeled`].
    pub fn repeat_labeled<F>(
        &mut self,
        label: impl Into<String>,
        count: usize,
        body: F,
    ) -> &mut Self
    where
        F: FnMut(&mut Step<'_>, usize) -> StepResult + Clone + Send + 'static,
    {
        let label = label.into();
        self.add(move |s, ()| {
            s.model_loop().repeat_labeled(label, count, body);
            Ok(())
        })
    }

    /// [`for_each`](Self::for_each) with a label; see
    /// [`Step::for_each_labeled`].
    pub fn for_each_labeled<I, F>(
        &mut self,
        label: impl Into<String>,
        items: I,
        body: F,
    ) -> &mut Self
    where
        I: LoopItems + Clone + Send + 'static,
        F: FnMut(&mut Step<'_>, I::Key, I::Value) -> StepResult + Clone + Send + 'static,
    {
        let label = label.into();
        self.add(move |s, ()| {
            s.model_loop().for_each_labeled(label, items, body);
            Ok(())
        })
    }

    /// Starts the flow on `tool` (spec `execute`); it runs from the loop's
    /// next turn. An error nobody handles goes to the loop's unhandled-error
    /// hook. The returned handle cancels it.
    #[inline]
    pub fn execute(self, tool: &mut Scheduler) -> FlowHandle {
        tool.start(self, None)
    }

    /// Starts the flow on `tool` and returns its result as a [`Promise`]
    /// (spec `promise`).
    pub fn promise<T: FromArgs>(self, tool: &mut Scheduler) -> Promise<T> {
        let c = Completion::new(Some(tool.core.inbox.clone()));
        tool.start(self, Some(c.clone()));
        Promise::new(c)
    }
}

/// Adds branches to a level-0 parallel step; from [`AsyncSteps::parallel`].
pub struct ModelParallel<'a> {
    branches: &'a mut Vec<StepDef>,
}

/// The branches added so far: `ModelParallel { branches: 2 }`.
impl fmt::Debug for ModelParallel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelParallel")
            .field("branches", &self.branches.len())
            .finish()
    }
}

impl ModelParallel<'_> {
    /// Adds a branch.
    pub fn add<F, A>(&mut self, f: F) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
        A: FromArgs + 'static,
    {
        self.branches.push(StepDef {
            exec: Exec::Fn(def::cloned(f)),
            catch: None,
        });
        self
    }

    /// Adds a branch with an error handler.
    pub fn add_catch<F, A, C>(&mut self, f: F, on_error: C) -> &mut Self
    where
        F: FnOnce(&mut Step<'_>, A) -> StepResult + Clone + Send + 'static,
        A: FromArgs + 'static,
        C: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
    {
        self.branches.push(StepDef {
            exec: Exec::Fn(def::cloned(f)),
            catch: Some(def::cloned_catch(on_error)),
        });
        self
    }
}
