//! Loops as steps (spec 1.8, 2.2.4): `loop_`, `repeat`, `for_each`, with labels.

use crate::args::IntoArgs;
use crate::error::{Control, Error, StepResult};
use crate::steps::def::{Exec, LoopIter, StepDef};
use crate::steps::step::Step;
use crate::util::panic::{drop_caught, rethrow};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// Collections [`Step::for_each`] walks as `(key, value)` pairs: vectors
/// and arrays (index, item), maps (key, value), and any iterator of pairs
/// through [`Pairs`].
pub trait LoopItems {
    /// The key type.
    type Key: 'static;
    /// The value type.
    type Value: 'static;
    /// The pairs, in visiting order.
    fn into_pairs(self) -> Box<dyn Iterator<Item = (Self::Key, Self::Value)>>;

    /// Whether the pairs left when a loop ends early may be walked to
    /// their end to drop them one at a time: true for the crate's own
    /// finite collections (vectors, arrays, maps); false by default, as
    /// any other iterator may be endless or act as it goes (it is then
    /// dropped whole).
    #[doc(hidden)]
    fn finite() -> bool
    where
        Self: Sized,
    {
        false
    }
}

impl<T: 'static> LoopItems for Vec<T> {
    type Key = usize;
    type Value = T;
    fn into_pairs(self) -> Box<dyn Iterator<Item = (usize, T)>> {
        Box::new(self.into_iter().enumerate())
    }
    fn finite() -> bool {
        true
    }
}

/// An array walks as a vector does, `(index, item)`: the spec's
/// `forEach(['apple', 'banana'], ...)` is `for_each(["apple", "banana"], ...)`.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.for_each(["apple", "banana"], |s, i, fruit| {
///     let seen = format!("{i}: {fruit}");
///     s.state().set(seen, ());
///     Ok(())
/// });
/// root.add(|s, ()| {
///     let mut keys: Vec<String> = s.state().keys().map(String::from).collect();
///     keys.sort();
///     s.success((keys,))
/// });
/// let p = root.promise::<(Vec<String>,)>(&mut tool);
/// assert_eq!(tool.block_on(p).unwrap().0, ["0: apple", "1: banana"]);
/// ```
impl<T: 'static, const N: usize> LoopItems for [T; N] {
    type Key = usize;
    type Value = T;
    fn into_pairs(self) -> Box<dyn Iterator<Item = (usize, T)>> {
        Box::new(self.into_iter().enumerate())
    }
    fn finite() -> bool {
        true
    }
}

impl<K: 'static, V: 'static> LoopItems for BTreeMap<K, V> {
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Box<dyn Iterator<Item = (K, V)>> {
        Box::new(self.into_iter())
    }
    fn finite() -> bool {
        true
    }
}

impl<K: 'static, V: 'static> LoopItems for HashMap<K, V> {
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Box<dyn Iterator<Item = (K, V)>> {
        Box::new(self.into_iter())
    }
    fn finite() -> bool {
        true
    }
}

/// Wraps any iterator of `(key, value)` pairs for [`Step::for_each`].
///
/// ```
/// use futoin_asyncsteps::Pairs;
/// let p = Pairs(vec![("a", 1)].into_iter());
/// # let _ = p;
/// ```
#[derive(Debug)]
pub struct Pairs<I>(pub I);

impl<I, K, V> LoopItems for Pairs<I>
where
    I: Iterator<Item = (K, V)> + 'static,
    K: 'static,
    V: 'static,
{
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Box<dyn Iterator<Item = (K, V)>> {
        Box::new(self.0)
    }
}

impl<'a> Step<'a> {
    pub(crate) fn push_loop(&mut self, iter: LoopIter, label: Option<String>) -> &mut Self {
        let exec = match label {
            None => Exec::Loop(iter),
            Some(l) => Exec::LabeledLoop(Box::new((iter, l))),
        };
        let def = StepDef { exec, catch: None };
        if self.take_model_loop() {
            // A model's loop step (it only adds its loop: a model keeps
            // its loops as steps, so that it stays clonable) starts the
            // loop at its own level, as the loop step it stands for: no
            // frame of its own under the loop's. Its implicit success
            // then runs the loop next.
            self.flow.st(self.sid).queue.push(def);
            return self;
        }
        self.push(def);
        self
    }

    /// Marks this step as a model's level-0 loop step (see `push_loop`).
    pub(crate) fn model_loop(&mut self) -> &mut Self {
        self.mark_model_loop();
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

    /// Breaks the innermost loop as [`break_loop`](Self::break_loop) does,
    /// and the loop ends with `args` as its result: the step after the
    /// loop gets them (a loop that ends by itself gives none). Not under
    /// any loop, `args` are dropped and handlers see a `LoopBreak` error.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     // The first square above 50.
    ///     s.repeat(100, |s, i| {
    ///         if i * i > 50 {
    ///             return s.break_with(i * i);
    ///         }
    ///         Ok(())
    ///     });
    ///     s.add(|s, found: usize| s.success(found));
    ///     Ok(())
    /// });
    /// let p = root.promise::<usize>(&mut tool);
    /// assert_eq!(tool.block_on(p).unwrap(), 64);
    /// ```
    pub fn break_with(&mut self, args: impl IntoArgs) -> StepResult {
        self.sched.break_args = Some(args.into_args());
        Err(Error::control(Control::Break(None)))
    }

    /// [`break_label`](Self::break_label) with `args` as the result of the
    /// loop labelled `label` (see [`break_with`](Self::break_with)).
    pub fn break_label_with(
        &mut self,
        label: impl Into<Cow<'static, str>>,
        args: impl IntoArgs,
    ) -> StepResult {
        self.sched.break_args = Some(args.into_args());
        Err(Error::control(Control::Break(Some(label.into()))))
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

    /// Adds a loop that runs `body` until [`break_loop`](Step::break_loop)
    /// (spec `loop`). Each iteration is a step of its own: sub-steps, waits
    /// and errors work as anywhere.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.state().set("n", 0u32);
    ///     s.loop_(|s| {
    ///         let n = s.state().get_mut::<u32>("n").unwrap();
    ///         *n += 1;
    ///         if *n == 3 { return s.break_loop(); }
    ///         Ok(())
    ///     });
    ///     s.add(|s, ()| { let n = *s.state().get::<u32>("n").unwrap(); s.success((n,)) });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(u32,)>(p).unwrap().0, 3);
    /// ```
    pub fn loop_<F>(&mut self, body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>) -> StepResult + 'static,
    {
        self.loop_impl(None, body)
    }

    /// [`loop_`](Step::loop_) with a label for `break_label`/`continue_label`.
    pub fn loop_labeled<F>(&mut self, label: impl Into<String>, body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>) -> StepResult + 'static,
    {
        self.loop_impl(Some(label.into()), body)
    }

    fn loop_impl<F>(&mut self, label: Option<String>, mut body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>) -> StepResult + 'static,
    {
        self.push_loop(
            LoopIter::new::<F, _>(move |s: &mut Step<'_>| Some(body(s))),
            label,
        )
    }

    /// Adds a loop calling `body(s, i)` for `i` in `0..count` (spec `repeat`).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.state().set("sum", 0usize);
    ///     s.repeat(4, |s, i| { *s.state().get_mut::<usize>("sum").unwrap() += i; Ok(()) });
    ///     s.add(|s, ()| { let v = *s.state().get::<usize>("sum").unwrap(); s.success((v,)) });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(usize,)>(p).unwrap().0, 6);
    /// ```
    pub fn repeat<F>(&mut self, count: usize, body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>, usize) -> StepResult + 'static,
    {
        self.repeat_impl(None, count, body)
    }

    /// [`repeat`](Step::repeat) with a label.
    pub fn repeat_labeled<F>(
        &mut self,
        label: impl Into<String>,
        count: usize,
        body: F,
    ) -> &mut Self
    where
        F: FnMut(&mut Step<'_>, usize) -> StepResult + 'static,
    {
        self.repeat_impl(Some(label.into()), count, body)
    }

    fn repeat_impl<F>(&mut self, label: Option<String>, count: usize, mut body: F) -> &mut Self
    where
        F: FnMut(&mut Step<'_>, usize) -> StepResult + 'static,
    {
        let mut i = 0usize;
        self.push_loop(
            LoopIter::new::<F, _>(move |s: &mut Step<'_>| {
                if i < count {
                    let r = body(s, i);
                    i += 1;
                    Some(r)
                } else {
                    None
                }
            }),
            label,
        )
    }

    /// Adds a loop calling `body(s, key, value)` for each entry (spec
    /// `forEach`): vectors give `(index, item)`, maps `(key, value)`.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.state().set("out", String::new());
    ///     s.for_each(vec!["apple", "banana"], |s, k, v| {
    ///         s.state().get_mut::<String>("out").unwrap().push_str(&format!("{k}={v};"));
    ///         Ok(())
    ///     });
    ///     s.add(|s, ()| { let o = s.state().get::<String>("out").unwrap().clone(); s.success((o,)) });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(String,)>(p).unwrap().0, "0=apple;1=banana;");
    /// ```
    pub fn for_each<I, F>(&mut self, items: I, body: F) -> &mut Self
    where
        I: LoopItems,
        F: FnMut(&mut Step<'_>, I::Key, I::Value) -> StepResult + 'static,
    {
        self.for_each_impl(None, items, body)
    }

    /// [`for_each`](Step::for_each) with a label.
    pub fn for_each_labeled<I, F>(
        &mut self,
        label: impl Into<String>,
        items: I,
        body: F,
    ) -> &mut Self
    where
        I: LoopItems,
        F: FnMut(&mut Step<'_>, I::Key, I::Value) -> StepResult + 'static,
    {
        self.for_each_impl(Some(label.into()), items, body)
    }

    fn for_each_impl<I, F>(&mut self, label: Option<String>, items: I, mut body: F) -> &mut Self
    where
        I: LoopItems,
        F: FnMut(&mut Step<'_>, I::Key, I::Value) -> StepResult + 'static,
    {
        let mut it = Rest {
            it: items.into_pairs(),
            walk: I::finite()
                && (std::mem::needs_drop::<I::Key>() || std::mem::needs_drop::<I::Value>()),
        };
        self.push_loop(
            LoopIter::new::<F, _>(move |s: &mut Step<'_>| it.it.next().map(|(k, v)| body(s, k, v))),
            label,
        )
    }
}

/// The items a `for_each` has not reached yet. When the loop ends early
/// (break, error, cancel, timeout), the items left in one of the crate's
/// own collections are dropped one at a time, key and value apart, each
/// under `catch_unwind`: dropped as one iterator (or as one pair), a
/// second panicking `Drop` would abort the process while the first
/// unwinds. The first panic goes on once all are dropped, and the engine
/// makes it the flow's `InternalError`, as for `stack()` values. Any other
/// iterator (`Pairs`) is dropped whole: walking it could run for good or
/// act on each item.
struct Rest<K: 'static, V: 'static> {
    it: Box<dyn Iterator<Item = (K, V)>>,
    /// Walk the rest to drop it item by item (a finite collection whose
    /// keys or values have drop glue).
    walk: bool,
}

impl<K: 'static, V: 'static> Drop for Rest<K, V> {
    fn drop(&mut self) {
        let mut first = None;
        if self.walk {
            // The crate's collections' iterators neither panic in `next`
            // nor go on after their end.
            for (k, v) in self.it.by_ref() {
                drop_caught(k, &mut first);
                drop_caught(v, &mut first);
            }
        }
        let it = std::mem::replace(&mut self.it, Box::new(std::iter::empty()));
        drop_caught(it, &mut first);
        rethrow(first);
    }
}
