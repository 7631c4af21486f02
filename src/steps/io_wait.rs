//! A step's readiness wait: the extension point the `io` layer plugs into.
//! The loop core's readiness table knows a waiter as an [`IoWaiter`]; the
//! waiting step's frame keeps its [`IoWait`], and the frame that owns a
//! source on its stack keeps its [`Registered`] entry, so that ending the
//! frame (however) ends the wait and deregisters the source.

use crate::args::ArgValue;
use crate::steps::scheduler::FlowKey;
use crate::tool::{IoKey, Reactor, Ready};
use std::any::Any;

/// The step that waits on a source, as the readiness table knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IoWaiter {
    pub flow: FlowKey,
    pub strand: u32,
    pub seq: u32,
    /// The step completes with the [`Ready`](crate::io::Ready) as its
    /// result args (else with none: the helpers that never look at it skip
    /// boxing it).
    pub args: bool,
}

/// A waiting step's wait, kept in its frame: ending the frame (however)
/// ends the wait.
pub(crate) struct IoWait {
    pub key: IoKey,
    pub strand: u32,
    pub seq: u32,
}

/// A source on a frame's stack that is registered with the reactor; the
/// frame deregisters it when it ends, before the source is dropped.
pub(crate) struct Registered {
    pub idx: u32,
    pub key: IoKey,
    /// The OS handle of the registered source: a source put in place of it
    /// on the stack has another.
    pub ident: u64,
    /// Deregisters the source (its type is known only where it was
    /// registered).
    pub deregister: fn(&mut dyn Any, &mut Reactor<IoWaiter>, IoKey),
}

/// A readiness wait's result travels between steps as their args.
impl ArgValue for Ready {}
