//! I/O readiness as a step (spec 2.6: the loop "extended with Input/Output
//! event support"): a step waits until a [`mio::event::Source`] the flow
//! owns is readable or writable, on its own loop's reactor.
//!
//! The flow keeps the source on its stack ([`Step::stack`]) in a step that
//! encloses the waits, and a waiting step names it by its [`StackRef`]:
//!
//! ```
//! use futoin_asyncsteps::io::{Interest, Ready};
//! use futoin_asyncsteps::{AsyncSteps, AsyncTool, TakeOnce};
//! use std::io::{Read, Write};
//!
//! let mut tool = AsyncTool::new()?;
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let mut client = std::net::TcpStream::connect(listener.local_addr()?)?;
//! let (server, _) = listener.accept()?;
//! server.set_nonblocking(true)?;
//! // Root steps are `Clone + Send`; a socket is handed over with TakeOnce.
//! let server = TakeOnce::new(mio::net::TcpStream::from_std(server));
//!
//! let mut root = AsyncSteps::new();
//! root.add(move |s, ()| {
//!     let conn = s.stack(server.take()?); // owned by this step and its sub-steps
//!     s.add(move |s, ()| s.wait_io(conn, Interest::READABLE));
//!     s.add(move |s, (ready,): (Ready,)| {
//!         assert!(ready.readable);
//!         let mut buf = [0u8; 16];
//!         let n = s.stack_get(conn)?.read(&mut buf).unwrap();
//!         s.success((String::from_utf8_lossy(&buf[..n]).into_owned(),))
//!     });
//!     Ok(())
//! });
//! client.write_all(b"ping")?;
//! let p = root.promise(&mut tool);
//! assert_eq!(tool.block_on::<(String,)>(p).unwrap().0, "ping");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The source is registered with the loop's `mio::Registry` when the step
//! starts waiting and deregistered when that step ends in any way (the
//! event came, a timeout, a cancel, an error elsewhere), so no event is
//! delivered later and the source can be waited on again. Readiness is
//! edge-triggered as in mio: after a readable event, read until
//! `WouldBlock` before waiting again.

pub mod net;

use crate::args::{ArgValue, IntoArgs};
use crate::error::{Error, StepResult};
use crate::steps::step::{StackRef, Step};
use crate::tool::scheduler::FlowKey;
use std::any::Any;

pub use mio::Interest;

/// What a [`Step::wait_io`] saw: the result args of the waiting step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ready {
    /// Reading will not block (data, EOF or an error is there).
    pub readable: bool,
    /// Writing will not block.
    pub writable: bool,
    /// The peer closed its writing half (a read gives EOF after the data).
    pub read_closed: bool,
    /// The writing half is closed (writes fail).
    pub write_closed: bool,
    /// The source reports an error (read it with `take_error`).
    pub error: bool,
}

impl ArgValue for Ready {}

impl Ready {
    pub(crate) fn of(ev: &mio::event::Event) -> Self {
        Ready {
            readable: ev.is_readable(),
            writable: ev.is_writable(),
            read_closed: ev.is_read_closed(),
            write_closed: ev.is_write_closed(),
            error: ev.is_error(),
        }
    }
}

/// A step's registration, kept in its frame until the frame ends.
pub(crate) struct IoWait {
    pub key: crate::tool::scheduler::IoKey,
    /// Where the source lives: frame `seq` of strand `sid` (or an
    /// ancestor strand), stack slot `idx`.
    pub sid: u32,
    pub seq: u32,
    pub idx: u32,
    /// Deregisters the source (the type is known only where it was
    /// registered).
    pub deregister: fn(&mut dyn Any, &mio::Registry),
}

fn deregister_as<S: mio::event::Source + 'static>(v: &mut dyn Any, r: &mio::Registry) {
    if let Some(s) = v.downcast_mut::<S>() {
        // A source whose fd is already closed is gone from epoll anyway.
        let _ = r.deregister(s);
    }
}

impl Step<'_> {
    /// Waits until the source at `source` (a value on this flow's stack) is
    /// ready for `interest`; the step then completes with a [`Ready`] as
    /// its result args. See the [module docs](crate::io).
    ///
    /// Combine it with [`set_timeout`](Step::set_timeout) for a deadline
    /// and [`set_cancel`](Step::set_cancel) as usual: however the step
    /// ends, the source is deregistered and no event arrives later.
    ///
    /// Errors (`InternalError`, the step fails): on a loop without a
    /// reactor (a [`TestTool`](crate::TestTool)); in an error handler; a
    /// second `wait_io` in the same step; a `StackRef` of another flow or
    /// of a step that has ended; and a registration the reactor refuses
    /// (for example a source already registered elsewhere).
    pub fn wait_io<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
    ) -> StepResult {
        if self.sched.io_registry().is_none() {
            return Err(Error::internal(
                "wait_io(): this loop has no I/O reactor (TestTool); \
                 run the flow on an AsyncTool or a Runtime",
            ));
        }
        if source.flow != self.flow.key {
            return Err(Error::internal(
                "wait_io(): the source belongs to another flow",
            ));
        }
        let (sid, depth) = (self.sid, self.depth);
        let here = &self.flow.st(sid).frames[depth];
        if here.extra.as_ref().is_some_and(|x| x.io.is_some()) {
            return Err(Error::internal(
                "wait_io(): this step already waits for I/O",
            ));
        }
        let seq = here.seq;
        if !self.waiting_allowed("wait_io() is not allowed in an error handler") {
            return Ok(()); // the misuse fails the step
        }
        let flow: FlowKey = self.flow.key;
        let key = self.sched.io_insert(flow, sid, seq);
        let token = crate::tool::scheduler::io_token(key);
        let src = self
            .flow
            .find_frame(sid, source.seq)
            .and_then(|f| f.extra.as_mut())
            .and_then(|x| x.stack.get_mut(source.idx as usize))
            .and_then(|b| (**b).downcast_mut::<S>());
        let reg = self.sched.io_registry().expect("checked");
        let r = match src {
            Some(s) => reg.register(s, token, interest).map_err(|e| {
                Error::internal(format!("wait_io(): the reactor refused the source: {e}"))
            }),
            None => Err(Error::internal(
                "wait_io(): the step that owns the source has ended",
            )),
        };
        if let Err(e) = r {
            self.sched.io_remove(key);
            return Err(e);
        }
        self.flow.extra_of(sid, depth).io = Some(IoWait {
            key,
            sid,
            seq: source.seq,
            idx: source.idx,
            deregister: deregister_as::<S>,
        });
        Ok(())
    }
}

/// The result args of an I/O wait.
pub(crate) fn ready_args(r: Ready) -> crate::args::Args {
    (r,).into_args()
}
