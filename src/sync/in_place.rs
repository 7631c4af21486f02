//! The uncontended path of the engine's own `sync` steps: when the lock of
//! this crate's [`Mutex`] or [`Throttle`] is free, the step made by
//! [`Step::sync`] (or [`AsyncSteps::sync`](crate::AsyncSteps::sync)) runs
//! its critical section as its own body instead of adding it as a
//! sub-step.
//!
//! Only those steps take it: their body is the engine's, so nothing else
//! happened in the step before (no timeout, cancel callback or sub-step),
//! and nothing follows the section in it. A direct [`ISync::sync`] call, a
//! user's `ISync` (even one wrapping a [`Mutex`]), a section with its own
//! error handler ([`Step::sync_catch`]) and the contended case take the
//! general path of [`enter`](super::enter).
//!
//! A [`Limiter`] whose Mutex and Throttle both admit at once runs the
//! section in place holding both (the Throttle's hold as the inner one,
//! `Scheduler::section_inner`). When only its Mutex admits, the section
//! waits for the Throttle on the general path, with the Mutex held in
//! place. Otherwise the Limiter goes through its own `ISync::sync` (to
//! queue for its Mutex, or to pass through one held below) with the step
//! marked (`Outcome::engine_sync`): should its Mutex admit the flow there
//! after all (freed by another loop meanwhile), it runs the Limiter's
//! section (its Throttle around the user's section) in place, and the
//! Throttle adds the user's section as a sub-step.
//!
//! The step's frame stays deferred, like any step's (`Step::frame_here`):
//! the hold waits in the loop's register (`Scheduler::section`) while the
//! section runs. A section that completes at once (the common case: a
//! few statements under the lock) never gets a frame: its hold is given
//! back as it returns. Whatever needs the frame
//! (a sub-step, a wait, a cancel callback, a timeout, a `stack()` value,
//! another hold) pushes it and moves the hold into it (`hold::adopt_section`
//! in the engine);
//! so does an error, a misuse or a panic, so the frame unwinds with the
//! lock still held, as the sub-step's would. The register holds one
//! section, and only while its step runs: no other step of the loop can
//! run meanwhile (a `Scheduler` offers no way to run its flows from inside
//! a step), so a register that is taken belongs to the step that runs.
//!
//! What the sub-step would have shown is kept:
//! - the frame (when there is one) gets its own sequence number
//!   (sequence numbers only tell frames apart), and the step counts (and
//!   budget) move as for two steps;
//! - `async_stack` names the section after the step (frame flag
//!   `IN_PLACE`);
//! - the section's holds, `stack()` values, cancel callback and timer end
//!   before the lock is released (`Special::in_place` comes last), and so do
//!   the incoming args a section left unread;
//! - a flow whose step budget runs out with this step takes the general
//!   path, where the section runs in the flow's next turn; so does a
//!   parallel branch that has yet to let its siblings start (no API makes
//!   a sync step a branch's first step today; the check keeps it right if
//!   one does).

use super::mutex::Mutex;
use super::throttle::Throttle;
use super::Limiter;
use super::{hold_of, home_of, id_of, HoldCore, ISync, Section};
use crate::args::FromArgs;
use crate::error::StepResult;
use crate::steps::def::{name_of, NameFn};
use crate::steps::step::Step;
use std::any::Any;
use std::sync::Arc;

/// One of this crate's sync objects, whose free lock lets a `sync` step
/// run its section in place.
pub(super) trait Own: ISync + Sized {
    /// Its shared core.
    type Core: HoldCore;

    /// The core, when this object can admit flows at all (a misconfigured
    /// one reports its error on the general path).
    fn core(&self) -> Option<&Arc<Self::Core>>;

    /// The core, moved out (the hold keeps it).
    fn into_core(self) -> Arc<Self::Core>;

    /// A flow was admitted on the uncontended path (Throttle: make sure the
    /// period timer runs).
    fn admitted(_core: &Arc<Self::Core>, _s: &mut Step<'_>) {}
}

/// `obj` as a `T` when it is one (a constant per monomorphization).
fn downcast<T: 'static, S: 'static>(obj: S) -> Result<T, S> {
    let mut slot = Some(obj);
    match (&mut slot as &mut dyn Any).downcast_mut::<Option<T>>() {
        Some(t) => Ok(t.take().expect("set above")),
        None => Err(slot.expect("not taken")),
    }
}

/// The body of a step made by `Step::sync` / `AsyncSteps::sync`: `f`
/// (named `section` on `async_stack`) synchronized against `obj`, with the
/// step's args, which are still in the args register.
pub(super) fn sync_step<S, F, A>(s: &mut Step<'_>, obj: S, f: F, section: NameFn) -> StepResult
where
    S: ISync,
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    let obj = match downcast::<Mutex, S>(obj) {
        Ok(m) => return in_place(s, m, f, section),
        Err(obj) => obj,
    };
    let obj = match downcast::<Throttle, S>(obj) {
        Ok(t) => return in_place(s, t, f, section),
        Err(obj) => obj,
    };
    let obj = match downcast::<Limiter, S>(obj) {
        Ok(l) => return limiter(s, l, f, section),
        Err(obj) => obj,
    };
    general(s, obj, f)
}

/// The general path: `ISync::sync` with the step's args and the section.
fn general<S, F, A>(s: &mut Step<'_>, obj: S, f: F) -> StepResult
where
    S: ISync,
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    let args = std::mem::take(s.args());
    obj.sync(s, args, Section::new(f))
}

/// Runs `f` in place when `obj`'s lock is free and nothing else forbids
/// it (see the module docs); else the general path.
fn in_place<O, F, A>(s: &mut Step<'_>, obj: O, f: F, section: NameFn) -> StepResult
where
    O: Own,
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    let admitted = obj
        .core()
        .is_some_and(|c| s.may_run_in_place(id_of(c)) && c.gate().try_enter());
    if !admitted {
        return general(s, obj, f);
    }
    let core = obj.into_core();
    O::admitted(&core, s);
    let home = home_of(s);
    s.run_in_place(hold_of(core, true, home), section);
    run_section(s, f)
}

/// A [`Limiter`]'s uncontended path: its Mutex admits the flow in place,
/// then its Throttle, and `f` runs as the step's body holding both (the
/// Throttle's hold inside the Mutex's, in `Scheduler::section_inner`).
///
/// A Mutex that is taken (or held below, or misconfigured) leaves the
/// whole Limiter to the general path, whose first `enter` (the Mutex's)
/// may still run the Limiter's own section in place once the lock frees
/// (`Outcome::engine_sync`). A Throttle that cannot admit at once (its
/// rate used up, held below, misconfigured, or the step budget spent)
/// gets `f` on the general path, with the Mutex already held in place,
/// exactly as the Limiter's own section would.
fn limiter<F, A>(s: &mut Step<'_>, l: Limiter, f: F, section: NameFn) -> StepResult
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    // A misconfigured Limiter goes to its own `sync`, which says why.
    let admitted = l.misconfigured().is_none()
        && l.mutex
            .core()
            .is_some_and(|c| s.may_run_in_place(id_of(c)) && c.gate().try_enter());
    if !admitted {
        s.out_mut().engine_sync = true;
        let args = std::mem::take(s.args());
        return l.sync_with(s, args, move || Section::new(f));
    }
    let Limiter { mutex, throttle } = l;
    // (The hold is made where it is handed over: a `Hold` kept in a local
    // adds a caller of its drop, which then stops being inlined into the
    // Mutex's own path.)
    let core = mutex.into_core();
    // The budget must allow both sections: the Limiter's and `f`.
    let inner = s.sched.budget > 1
        && throttle
            .core()
            .is_some_and(|c| s.may_run_in_place(id_of(c)) && c.gate().try_enter());
    if !inner {
        // The Limiter's own section runs in place (`async_stack` names it
        // so), and its Throttle takes `f` on the general path.
        let home = home_of(s);
        s.run_in_place(hold_of(core, true, home), name_of::<Limiter>());
        let args = std::mem::take(s.args());
        return throttle.sync(s, args, Section::new(f));
    }
    let home = home_of(s);
    s.run_in_place(hold_of(core, true, home), section);
    let core = throttle.into_core();
    Throttle::admitted(&core, s);
    // The steps the Throttle's sub-step would have counted.
    s.sched.steps += 1;
    s.sched.budget -= 1;
    // Its hold gives nothing back as it drops (a Throttle's slot comes
    // back with its period); on `async_stack`, the Limiter's own section
    // comes between the step and the section once there is a frame.
    let home = home_of(s);
    s.sched.section_inner = Some((hold_of(core, true, home), name_of::<Limiter>()));
    let r = run_section(s, f);
    if s.sched.section.is_none() {
        // Done without a frame, the Mutex given back: so is the Throttle
        // (its `leave` does nothing, so the order makes no difference).
        s.sched.section_inner = None;
    }
    r
}

/// Runs `f`, the section of a step that took its lock in place, with the
/// args in the register (as a sub-step takes them).
#[inline(always)]
fn run_section<F, A>(s: &mut Step<'_>, f: F) -> StepResult
where
    F: FnOnce(&mut Step<'_>, A) -> StepResult + 'static,
    A: FromArgs + 'static,
{
    let r = A::from_args(s.args()).and_then(|a| f(s, a));
    if s.sched.section.is_some() && r.is_ok() && s.out_mut().fails_with.is_none() {
        // Done without a frame: the step succeeds now (an error, a misuse
        // or a panic gets the frame, which unwinds holding the lock). Args
        // the section left unread go first, under the lock, as with its
        // frame. Giving the lock back grants no waiter on this loop (the
        // lock was free with nobody queued, and nothing else of this loop
        // has run since), so the flow need not yield for one, unlike at
        // the end of a frame (`Scheduler::recycle_resources`).
        if !s.out_mut().succeeded {
            s.sched.clear_args();
        }
        s.sched.section = None;
    }
    r
}

impl Step<'_> {
    /// Whether this step (a fresh `sync` step) may run its section in
    /// place for object `id`: not in a parallel branch that has yet to let
    /// its siblings start, not when the flow's step budget ends with this
    /// step, and not when the strand already holds `id` (a re-entry takes
    /// the general path: through a Mutex, one more entry of a Throttle).
    fn may_run_in_place(&mut self, id: usize) -> bool {
        if !self.may_merge_section() {
            return false;
        }
        // Held below (this step's own frame has no hold yet); the parents
        // of a branch do not count (a branch never inherits their hold).
        let st = self.flow.st(self.sid);
        !st.frames[..self.depth]
            .iter()
            .filter_map(|f| f.hold_part())
            .any(|r| r.all_holds().any(|h| h.id == id && h.is_held()))
    }

    /// Whether a sub-step added now would run right after this step in
    /// the same turn: the step budget allows one more step, and this is
    /// not a parallel branch that has yet to let its siblings start.
    pub(super) fn may_merge_section(&mut self) -> bool {
        self.sched.budget > 0 && !self.flow.st(self.sid).fresh
    }

    /// Makes this step the section's: the step counts the sub-step would
    /// have taken, and the hold and the section's name, kept in the
    /// loop's register while the frame is deferred (given back when the
    /// section returns frameless, or moved into the frame when it is
    /// pushed; see the module docs). A frame already there (a Limiter's
    /// section, after `enter`) takes them at once, with the seq the
    /// sub-step's frame would have had.
    pub(super) fn run_in_place(&mut self, hold: crate::steps::hold::Hold, section: NameFn) {
        self.sched.steps += 1;
        self.sched.budget -= 1;
        debug_assert!(self.sched.section.is_none(), "one section at a time");
        self.sched.section = Some((hold, section));
        if !self.frame_deferred() {
            let seq = self.flow.next_seq();
            self.flow.seq = seq;
            let frames = &mut self.flow.st(self.sid).frames;
            debug_assert_eq!(frames.len(), self.depth + 1, "the step's frame is on top");
            frames[self.depth].seq = seq;
            crate::steps::hold::adopt_section(self.sched, self.flow, self.sid);
        }
    }
}
