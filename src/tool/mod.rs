//! The loop core (spec 2.6 AsyncTool, without the flows): immediate and
//! deferred tasks, timers, the inbox other threads post to, the clock, the
//! mio poll and its readiness table, one turn of the loop (`iterate`) and
//! `block_on`.
//!
//! It knows nothing of flows. The layer above, the engine, owns a
//! [`Core`] and implements [`Engine`]: the loop hands the engine's own
//! messages, timers, queued work and answered I/O waits back to it through
//! that trait, which is generic, so nothing is dispatched dynamically.

mod core;
mod event_loop;
mod handshake;
pub(crate) mod here;
mod inbox;
mod loop_fn;
mod mailbox;
mod reactor;
pub(crate) mod registry;
mod timers;

pub use self::core::TaskHandle;
pub(crate) use self::core::{Core, TaskKey, MAX_DELAY};
pub(crate) use event_loop::Poller;
pub(crate) use inbox::{owns_loop, Drain, Inbox, Msg};
pub use reactor::Ready;
pub(crate) use reactor::{Begin, Done, IoKey, Reactor};
pub(crate) use timers::HORIZON;

use crate::error::Error;
use crate::util::panic::{message, Payload};
use std::time::Instant;

/// The layer above the loop core: what a loop runs besides its own tasks.
///
/// The engine owns its loop's [`Core`] (given back by [`core`](Self::core))
/// and is the value every task gets (`immediate(|engine| ..)`). The loop
/// calls into it only through the methods below.
pub(crate) trait Engine: Sized + 'static {
    /// A message of the engine's, sent through the inbox.
    type Msg: Send + 'static;
    /// What a timer of the engine's carries (see [`Core::engine_timer`]).
    type Timer;
    /// Engine work queued to run (see [`Core::push_entry`]).
    type Entry: Copy;
    /// Who waits on an I/O source (see [`Reactor::begin`]).
    type Waiter: Copy;

    /// The loop core.
    fn core(&mut self) -> &mut Core<Self>;
    /// The loop core, shared.
    fn core_ref(&self) -> &Core<Self>;
    /// Handles one of its messages.
    fn on_message(&mut self, m: Self::Msg);
    /// One of its timers is due.
    fn on_timer(&mut self, t: Self::Timer);
    /// Runs queued work; false when the work is gone (the entry was
    /// counted dead with [`Core::entry_died`]).
    fn run_entry(&mut self, e: Self::Entry) -> bool;
    /// A readiness wait is answered.
    fn on_ready(&mut self, d: Done<Self::Waiter>);
    /// Answers a message that will never be handled: its loop is gone.
    fn settle(m: Self::Msg);
    /// A cache hint: timer `t` is queued `stage` entries behind the one
    /// about to run (see [`Stage`]).
    fn look_ahead(&self, _t: &Self::Timer, _stage: Stage) {}
    /// A turn began with work to run: the loop is not quiet.
    fn busy(&mut self) {}
    /// A turn began with nothing to run: what to do about memory the
    /// engine could give back.
    fn trim(&mut self) -> Trim {
        Trim::Nothing
    }
}

/// How far behind the front of the loop's queue a fired engine timer
/// waits, for [`Engine::look_ahead`]: the engine fetches what a cold piece
/// of work touches in stages, each stage's loads finding the lines the
/// stage before asked for (a timer that waited milliseconds is no longer
/// in the cache, and reaching its work is a chain of dependent loads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The entry right behind the front one: its deepest parts.
    Near = 1,
    /// Three behind: what its first parts point to.
    Mid = 3,
    /// Six behind: its first parts.
    Far = 6,
}

/// What a quiet turn should do about memory the engine keeps for reuse
/// (see [`Engine::trim`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Trim {
    /// Nothing beyond what it keeps: sleep as long as there is nothing else.
    Nothing,
    /// A batch was freed and more is left: come back without sleeping.
    More,
    /// Come back by then to start freeing.
    At(Instant),
}

/// Turns a panic payload into an `InternalError` saying where it happened
/// (`what`); the payload is dropped here, safely.
pub(crate) fn panic_error(what: &str, p: Payload) -> Error {
    Error::internal(format!("panic in {what}: {}", message(p)))
}

#[cfg(all(test, not(loom)))]
pub(crate) use inbox::Sleep;
