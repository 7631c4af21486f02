//! A step's `stack()` values and the [`StackRef`]s that name them.

use super::Step;
use crate::error::Error;
use crate::steps::scheduler::FlowKey;
use std::marker::PhantomData;

/// A typed reference to a value allocated with [`Step::stack`]; valid while
/// that step runs (including its sub-steps), `Copy`, usable in sub-steps.
pub struct StackRef<T> {
    /// The loop of the flow (`Inbox::id`, never reused): flow keys are
    /// only unique within one loop.
    pub(crate) tool: u64,
    pub(crate) flow: FlowKey,
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

impl<T> std::fmt::Debug for StackRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StackRef(step {}, slot {})", self.seq, self.idx)
    }
}

impl Step<'_> {
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
}
