//! Running a flow: one activation ([`Scheduler::drive`]), and what
//! follows its end (its result given, the flow pooled or torn down).

use super::{FlowKey, Scheduler};
use crate::error::Error;
use crate::steps::flow::{Flow, FlowPanic, Resume};
use crate::tool::panic_error;
use crate::util::panic::Payload;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// How many times a flow whose values keep panicking on drop is torn down
/// before the rest is left (each try gets past at least one frame).
const TEARDOWN_TRIES: usize = 64;

/// The error a panic that ended a flow gives it.
fn flow_panic_error(p: Payload) -> Error {
    match p.downcast::<FlowPanic>() {
        Ok(fp) => fp.0,
        Err(p) => panic_error("a value dropped by the flow", p),
    }
}

impl Scheduler {
    /// Empties the args register outside any flow's own catch: a value
    /// whose `Drop` panics becomes an `InternalError` instead of unwinding
    /// out of the loop.
    #[inline]
    fn clear_args_caught(&mut self) -> Result<(), Error> {
        if self.args.is_empty() {
            return Ok(());
        }
        self.drop_args_caught()
    }

    #[cold]
    #[inline(never)]
    fn drop_args_caught(&mut self) -> Result<(), Error> {
        let a = std::mem::take(&mut self.args);
        catch_unwind(AssertUnwindSafe(move || drop(a))).map_err(flow_panic_error)
    }

    /// [`clear_args_caught`](Self::clear_args_caught), reporting a panic
    /// as an unhandled error (no flow to give it to).
    fn clear_args_reporting(&mut self) {
        if let Err(e) = self.clear_args_caught() {
            self.report_unhandled(&e);
        }
    }

    /// Runs one flow activation.
    pub(crate) fn drive(&mut self, key: FlowKey, resume: Resume) {
        let Some(slot) = self.flows.get_mut(key) else {
            // A completion's args for a flow that has ended.
            self.clear_args_reporting();
            return;
        };
        let Some(mut flow) = slot.take() else {
            self.clear_args_reporting();
            return;
        };
        self.activations += 1;
        if matches!(resume, Resume::Ready) {
            flow.queued = false;
        }
        let res = match catch_unwind(AssertUnwindSafe(|| flow.drive(self, resume))) {
            Ok(r) => r,
            Err(p) => {
                // A panic may leave a parallel step mid-start.
                self.starting = Default::default();
                return self.torn_down(key, flow, p);
            }
        };
        match res {
            Some(res) => {
                self.flows.remove(key);
                self.count_dead_entry(&flow);
                let done = flow.take_done();
                // The result args (in the register) are moved out only for
                // someone waiting for them.
                let args = match (&res, &done) {
                    (Ok(()), Some(_)) => Some(std::mem::take(&mut self.args)),
                    _ => None,
                };
                // The register never outlives an activation (a failed flow
                // may leave a handler's success args there; a detached
                // flow's result args are dropped here).
                let cleared = self.clear_args_caught();
                let canceled = flow.was_canceled();
                // What the flow holds (its state) is dropped before the
                // result is given: a panicking Drop makes it InternalError.
                let (res, reusable) = match catch_unwind(AssertUnwindSafe(|| flow.reset())) {
                    Ok(()) => (res.and(cleared), true),
                    Err(p) => (Err(flow_panic_error(p)), false),
                };
                match done {
                    // Someone holds the promise (the flow holds the other
                    // reference): the result is theirs.
                    Some(c) if Arc::strong_count(&c) > 1 => {
                        c.complete(res.map(|()| args.unwrap_or_default()))
                    }
                    // Detached, or its promise was dropped: an error goes
                    // to the hook.
                    _ => {
                        if let Err(e) = res {
                            if !canceled || !reusable {
                                self.report_unhandled(&e);
                            }
                        }
                    }
                }
                if reusable {
                    if self.pool.len() < self.peak_flows {
                        flow.state.recycle(&mut self.states);
                        self.pool.push(flow);
                    }
                } else {
                    self.discard(flow);
                }
            }
            None => {
                self.clear_args_reporting();
                if flow.has_ready() && !flow.queued {
                    flow.queued = true;
                    self.core.push_entry(key);
                }
                self.flows[key] = Some(flow);
            }
        }
    }

    /// A flow's activation panicked where the flow cannot go on (a user
    /// `Drop` run by the engine, a cancel callback): it ends with
    /// `InternalError`, and what it still holds is torn down. Out of line,
    /// so the panic path does not weigh on `drive`'s own code.
    #[cold]
    #[inline(never)]
    fn torn_down(&mut self, key: FlowKey, mut flow: Box<Flow>, p: Payload) {
        // (A second panic from the register adds nothing to `e`.)
        let _ = self.clear_args_caught();
        self.flows.remove(key);
        self.count_dead_entry(&flow);
        let e = flow_panic_error(p);
        let done = flow.take_done();
        // Each panicking value is skipped; the frame it was in has
        // already been removed, so this ends.
        let mut clean = false;
        for _ in 0..TEARDOWN_TRIES {
            match catch_unwind(AssertUnwindSafe(|| flow.teardown(self))) {
                Ok(()) => {
                    clean = true;
                    break;
                }
                Err(p) => crate::util::panic::drop_payload(p),
            }
        }
        let _ = self.clear_args_caught();
        match done {
            Some(c) => c.complete(Err(e)),
            None => self.report_unhandled(&e),
        }
        if clean {
            self.discard(flow);
        } else {
            // Still panicking after many tries: keep the loop alive
            // and leave the rest, but give its sync slots back (a
            // `Hold` runs no user code).
            drop(flow.take_holds());
            std::mem::forget(flow);
        }
    }

    /// A flow that ended while its entry (the loop core's `Entry::Engine`) was still queued (a root
    /// cancel, a timeout or a completion ended it first) leaves that entry
    /// dead: counted like a cancelled task's, skipped when it comes up.
    #[inline]
    fn count_dead_entry(&mut self, flow: &Flow) {
        if flow.queued {
            self.core.entry_died();
        }
    }

    /// Drops a flow that is not to be pooled; a panicking `Drop` in what
    /// is left is reported, not let out of the loop.
    pub(super) fn discard(&mut self, flow: Box<Flow>) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(flow))) {
            let e = flow_panic_error(p);
            self.report_unhandled(&e);
        }
    }
}
