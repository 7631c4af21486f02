//! I/O readiness as a step (spec 2.6: the loop "extended with Input/Output
//! event support"): a step waits until a [`mio::event::Source`] the flow
//! owns is readable or writable, on its own loop's reactor.
//!
//! The mio types this takes (sockets, `event::Source`) are re-exported as
//! [`io::mio`](mio), with mio's OS extensions: on Unix, pipes
//! (`io::mio::unix::pipe`), Unix sockets (`io::mio::net::UnixStream`) and
//! any file descriptor (`io::mio::unix::SourceFd`, or [`FdSource`] for
//! one the source owns, reads and writes). No `mio` dependency of your
//! own is needed.
//!
//! The flow keeps the source on its stack ([`Step::stack`]) in a step that
//! encloses the waits, and a waiting step names it by its [`StackRef`]:
//!
//! ```
//! use futoin_asyncsteps::io::{mio, mio::Interest, Ready};
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
//! The source is registered with the loop's `mio::Registry` on its first
//! wait and deregistered when the step that owns it on the stack ends; a
//! wait that ends in any way (the event came, a timeout, a cancel, an error
//! elsewhere) gets no event later. Readiness is edge-triggered as in mio,
//! but an edge that comes between two waits is kept and completes the next
//! wait at once; still, after a readable event, read until `WouldBlock`
//! before waiting again, or the next wait may return at once.
//!
//! A socket made from a `std` one (`mio::net::TcpStream::from_std`, ...)
//! must be in non-blocking mode first (`set_nonblocking(true)`), as mio
//! requires: a read on a blocking socket blocks the loop's thread, and with
//! it every flow of the loop, timeouts included.

pub mod net;

use crate::error::{Error, StepResult};
use crate::steps::frame::{Resources, WAIT};
use crate::steps::io_wait::{IoWait, IoWaiter, Registered};
use crate::steps::step::{StackRef, Step};
use crate::tool::{Begin, Core, IoKey, Msg, Reactor};
use mio::Interest;
use std::any::Any;

/// The `mio` crate (version 1) this crate's loops are built on. Its types
/// are part of this API: [`Step::wait_io`] takes any
/// [`mio::event::Source`], [`net`] works on [`mio::net`] sockets. Reach
/// them here, as `futoin_asyncsteps::io::mio::net::TcpStream` and so on,
/// without a `mio` dependency of your own (one of your own must be the
/// same major version to be the same types).
pub use mio;

pub use crate::tool::Ready;

#[cfg(unix)]
mod fd;
#[cfg(unix)]
pub use fd::FdSource;

fn deregister_as<S: mio::event::Source + 'static>(
    v: &mut dyn Any,
    r: &mut Reactor<IoWaiter>,
    k: IoKey,
) {
    match v.downcast_mut::<S>() {
        Some(s) => r.deregister(k, s),
        None => r.forget(k),
    }
}

/// [`ident_of`] for a source whose type has no known OS handle.
const NO_IDENT: u64 = u64::MAX;

/// The OS handle (file descriptor, socket) of a source of mio's own
/// socket types, which tells a source put in place of another on the stack
/// from the one registered; [`NO_IDENT`] for any other type. The type test
/// is resolved when this is compiled for `S`: for a mio socket this is
/// one load, for another type a constant.
fn ident_of<S: 'static>(src: &S) -> u64 {
    let any: &dyn Any = src;
    macro_rules! handle_of {
        ($($t:ty),*) => {
            $(if let Some(v) = any.downcast_ref::<$t>() {
                return os_handle(v);
            })*
        };
    }
    handle_of!(
        mio::net::TcpStream,
        mio::net::TcpListener,
        mio::net::UdpSocket
    );
    #[cfg(unix)]
    handle_of!(
        mio::net::UnixStream,
        mio::net::UnixListener,
        mio::net::UnixDatagram
    );
    NO_IDENT
}

#[cfg(unix)]
fn os_handle(v: &impl std::os::fd::AsRawFd) -> u64 {
    v.as_raw_fd() as u64
}

#[cfg(windows)]
fn os_handle(v: &impl std::os::windows::io::AsRawSocket) -> u64 {
    v.as_raw_socket()
}

#[cfg(not(any(unix, windows)))]
fn os_handle<T>(_: &T) -> u64 {
    NO_IDENT
}

impl Step<'_> {
    /// Waits until the source at `source` (a value on this flow's stack) is
    /// ready for `interest`; the step then completes with a [`Ready`] as
    /// its result args. See the [module docs](crate::io).
    ///
    /// Combine it with [`set_timeout`](Step::set_timeout) for a deadline
    /// and [`set_cancel`](Step::set_cancel) as usual: however the step
    /// ends, no event reaches it later. The source stays registered (one
    /// token, no syscall for the next wait) until the step that owns it on
    /// the stack ends; readiness that arrives between two waits completes
    /// the next wait at once.
    ///
    /// A socket of mio's own types (`mio::net`) put in place of a
    /// registered one on the stack (`*s.stack_get(conn)? = other`) is told
    /// apart by its OS handle, which differs from the handle of the open
    /// socket it replaces (one compare per wait): the new socket is
    /// registered on its next wait, and the old registration is dropped
    /// without a system call (closing the old socket ended it). Two
    /// replacements with no wait between them may bring the registered
    /// handle back (the OS reuses handles), and other sources cannot be
    /// told apart at all: then call [`release_io`](Step::release_io)
    /// before replacing, or the next wait may never see an event. An old
    /// socket moved out to be used elsewhere needs `release_io` first, as
    /// always. A source replaced while a step waits on it (from a parallel
    /// branch, or by the waiting step itself after its `wait_io`) leaves
    /// that wait with nothing to answer it: closing the old socket took it
    /// out of the OS's poll set, and nothing tells the engine. Replace a
    /// source only when no step waits on it, or give the wait a
    /// [`set_timeout`](Step::set_timeout).
    ///
    /// `Interest::PRIORITY` (Linux) completes on urgent (out-of-band) data
    /// only; mio reports that data as readable too, so the [`Ready`] it
    /// gives says `readable`, and a readable wait sees it as well.
    ///
    /// Errors (`InternalError`, the step fails): on a loop without a
    /// reactor (a [`TestTool`](crate::TestTool)); in an error handler; a
    /// second `wait_io` in the same step; another step already waiting on
    /// the same source, or on the socket it replaced; a `StackRef` of
    /// another flow or of a step that has ended; and a registration the
    /// reactor refuses (for example a source already registered
    /// elsewhere).
    pub fn wait_io<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
    ) -> StepResult {
        self.wait_io_as(source, interest, true, &mut None)
    }

    /// [`wait_io`](Step::wait_io) for the helpers that do not look at the
    /// [`Ready`]: the step completes with no result args, so nothing is
    /// boxed for the register.
    pub(crate) fn wait_ready<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
    ) -> StepResult {
        self.wait_io_as(source, interest, false, &mut None)
    }

    /// [`wait_ready`](Step::wait_ready) for a caller that waits on the
    /// same `source` again and again (`net::serve_stream`): `key` keeps
    /// the source's reactor key between the waits (start with `None`).
    /// While that key is still registered for `interest`, the wait skips
    /// looking the source up in its owner's frame: the key leaves the
    /// reactor exactly when it leaves the owner's registered sources (the
    /// owner ends, or `release_io`), and slot versions keep a stale key
    /// from matching a later registration.
    pub(crate) fn wait_ready_keyed<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
        key: &mut Option<IoKey>,
    ) -> StepResult {
        self.wait_io_as(source, interest, false, key)
    }

    /// Registers `source` (or finds it registered) and makes this step its
    /// waiter: the reactor key and how the wait began.
    fn begin_io<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
        args: bool,
        known: &mut Option<IoKey>,
        seq: u32,
    ) -> Result<(IoKey, Begin), Error> {
        let reactor = self.sched.core.io.as_mut().expect("checked");
        let key = match *known {
            Some(k) if reactor.covers(k, interest) => k,
            _ => self.lookup_source(source, interest)?,
        };
        *known = Some(key);
        let reactor = self.sched.core.io.as_mut().expect("checked");
        let who = IoWaiter {
            flow: self.flow.key,
            strand: self.sid,
            seq,
            args,
        };
        let begun = reactor.begin(key, who, interest).map_err(|()| {
            Error::internal("wait_io(): another step already waits on this source")
        })?;
        Ok((key, begun))
    }

    /// [`wait_io`](Step::wait_io); with `args`, the step's result args are
    /// the [`Ready`]. `known`: see [`wait_ready_keyed`](Step::wait_ready_keyed).
    fn wait_io_as<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
        args: bool,
        known: &mut Option<IoKey>,
    ) -> StepResult {
        if self.sched.core.io.is_none() {
            return Err(Error::internal(
                "wait_io(): this loop has no I/O reactor (TestTool); \
                 run the flow on an AsyncTool or a Runtime",
            ));
        }
        if !self.owns(&source) {
            return Err(Error::internal(
                "wait_io(): the source belongs to another flow",
            ));
        }
        if self.out_mut().added || self.out_mut().succeeded {
            return Err(Error::internal(
                "wait_io() after add() or success() in the same step",
            ));
        }
        self.frame_here();
        let (sid, depth) = (self.sid, self.depth);
        let here = &self.flow.st(sid).frames[depth];
        if here
            .resources
            .as_ref()
            .and_then(|x| x.special_ref())
            .is_some_and(|r| r.io.is_some())
        {
            return Err(Error::internal(
                "wait_io(): this step already waits for I/O",
            ));
        }
        let seq = here.seq;
        let waited = here.flags & WAIT != 0;
        if !self.waiting_allowed("wait_io() is not allowed in an error handler") {
            return Ok(()); // the misuse fails the step
        }
        let begun = self.begin_io(source, interest, args, known, seq);
        let (key, begun) = match begun {
            Ok(b) => b,
            Err(e) => {
                // Nothing waits: the step is left as it was before this
                // call, so an error the callback ignores cannot leave it
                // waiting for good (it ends as the callback returns).
                if !waited {
                    self.flow.st(sid).frames[depth].flags &= !WAIT;
                }
                return Err(e);
            }
        };
        if let Begin::Soon = begun {
            // Readiness came before this wait: complete it on the next
            // turn, if the step still waits then.
            self.sched
                .core
                .inbox
                .send(Msg::Call(Box::new(move |sched| Core::io_poke(sched, key))));
        }
        self.out_mut().io_wait = true;
        self.flow
            .resources_of(&mut self.sched.spare_resources, sid, depth)
            .special()
            .io = Some(IoWait {
            key,
            strand: sid,
            seq,
        });
        Ok(())
    }

    /// The reactor key of `source` (registered on its first wait), its
    /// registration widened to `interest`: the owner frame's list of
    /// registered sources is searched, and the source registered when it
    /// is not there, or when the one there has another OS handle (a
    /// socket put in its place).
    fn lookup_source<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
    ) -> Result<IoKey, Error> {
        let reactor = self.sched.core.io.as_mut().expect("checked");
        let ended = || Error::internal("wait_io(): the step that owns the source has ended");
        let owner = self
            .flow
            .find_frame(self.sid, source.seq)
            .and_then(|f| f.resources.as_deref_mut())
            .ok_or_else(ended)?;
        let Resources { stack, special, .. } = owner;
        let sources = &mut special.get_or_insert_with(Default::default).sources;
        let src = stack
            .get_mut(source.idx as usize)
            .and_then(|b| (**b).downcast_mut::<S>())
            .ok_or_else(ended)?;
        let refused = |e: std::io::Error| {
            Error::internal(format!("wait_io(): the reactor refused the source: {e}"))
        };
        let ident = ident_of(src);
        let key = match sources
            .iter_mut()
            .find(|r| r.idx == source.idx && reactor.contains(r.key))
        {
            Some(r) if r.ident == ident => {
                reactor.widen(r.key, src, interest).map_err(refused)?;
                r.key
            }
            Some(r) => {
                // Another socket was put in place of the registered one,
                // which took its registration with it when it closed.
                if reactor.has_waiter(r.key) {
                    return Err(Error::internal(
                        "wait_io(): the source was replaced on the stack \
                         while another step waits on it",
                    ));
                }
                reactor.forget(r.key);
                let key = reactor.register(src, interest).map_err(refused)?;
                (r.key, r.ident) = (key, ident);
                key
            }
            None => {
                let key = reactor.register(src, interest).map_err(refused)?;
                sources.retain(|r| r.idx != source.idx);
                sources.push(Registered {
                    idx: source.idx,
                    key,
                    ident,
                    deregister: deregister_as::<S>,
                });
                key
            }
        };
        Ok(key)
    }

    /// Deregisters `source` from the loop's reactor now, instead of when
    /// the step that owns it ends: call it before moving a source that
    /// has been waited on out of the stack (to another flow, say), so it
    /// can be registered there, and before putting another source in its
    /// place on the stack unless it is one of mio's sockets (see
    /// [`wait_io`](Step::wait_io)). A no-op for a source never waited on.
    ///
    /// ```
    /// use futoin_asyncsteps::io::{mio, mio::Interest, Ready};
    /// use futoin_asyncsteps::{AsyncSteps, AsyncTool, TakeOnce};
    ///
    /// let mut tool = AsyncTool::new()?;
    /// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let _client = std::net::TcpStream::connect(l.local_addr()?)?;
    /// let (server, _) = l.accept()?;
    /// server.set_nonblocking(true)?;
    /// let server = TakeOnce::new(Some(mio::net::TcpStream::from_std(server)));
    /// let mut root = AsyncSteps::new();
    /// root.add(move |s, ()| {
    ///     let conn = s.stack(ShareableStream(server.take()?));
    ///     s.add(move |s, ()| s.wait_io(conn, Interest::WRITABLE));
    ///     s.add(move |s, (_,): (Ready,)| {
    ///         s.release_io(conn)?;
    ///         let stream = s.stack_get(conn)?.0.take().unwrap();
    ///         s.success((stream.peer_addr().is_ok(),))
    ///     });
    ///     Ok(())
    /// });
    /// let p = root.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(bool,)>(p).unwrap(), (true,));
    ///
    /// /// A stream that can be moved out of the stack.
    /// struct ShareableStream(Option<mio::net::TcpStream>);
    /// impl mio::event::Source for ShareableStream {
    ///     fn register(&mut self, r: &mio::Registry, t: mio::Token, i: Interest) -> std::io::Result<()> {
    ///         self.0.as_mut().unwrap().register(r, t, i)
    ///     }
    ///     fn reregister(&mut self, r: &mio::Registry, t: mio::Token, i: Interest) -> std::io::Result<()> {
    ///         self.0.as_mut().unwrap().reregister(r, t, i)
    ///     }
    ///     fn deregister(&mut self, r: &mio::Registry) -> std::io::Result<()> {
    ///         self.0.as_mut().map_or(Ok(()), |s| s.deregister(r))
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Fails with `InternalError` while a step waits on the source (the
    /// wait would never end).
    pub fn release_io<S: mio::event::Source + 'static>(
        &mut self,
        source: StackRef<S>,
    ) -> StepResult {
        if !self.owns(&source) {
            return Ok(());
        }
        let Some(reactor) = self.sched.core.io.as_mut() else {
            return Ok(());
        };
        let Some(owner) = self
            .flow
            .find_frame(self.sid, source.seq)
            .and_then(|f| f.resources.as_deref_mut())
        else {
            return Ok(());
        };
        let Resources { stack, special, .. } = owner;
        // No `Special` part: nothing was ever registered from this frame.
        let Some(sources) = special.as_deref_mut().map(|r| &mut r.sources) else {
            return Ok(());
        };
        if let Some(pos) = sources.iter().position(|r| r.idx == source.idx) {
            if reactor.has_waiter(sources[pos].key) {
                return Err(Error::internal(
                    "release_io(): a step is waiting on this source",
                ));
            }
            let r = sources.remove(pos);
            match stack.get_mut(r.idx as usize) {
                Some(v) => (r.deregister)(&mut **v, reactor, r.key),
                None => reactor.forget(r.key),
            }
        }
        Ok(())
    }
}

impl Step<'_> {
    /// The reactor key of `source`, once a wait has registered it.
    fn io_key_of<S: 'static>(&mut self, source: StackRef<S>) -> Option<IoKey> {
        if !self.owns(&source) {
            return None;
        }
        let owner = self
            .flow
            .find_frame(self.sid, source.seq)?
            .resources
            .as_deref()?
            .special_ref()?;
        owner
            .sources
            .iter()
            .find(|r| r.idx == source.idx)
            .map(|r| r.key)
    }

    /// False when an operation for `interest` on `source` would block
    /// (see [`Reactor::worth_trying`]); true when nothing is known.
    pub(crate) fn io_worth_trying<S: 'static>(
        &mut self,
        source: StackRef<S>,
        interest: Interest,
    ) -> bool {
        if self.sched.core.io.is_none() {
            return true;
        }
        match self.io_key_of(source) {
            Some(k) => self
                .sched
                .core
                .io
                .as_ref()
                .is_none_or(|r| r.worth_trying(k, interest)),
            None => true,
        }
    }

    /// An operation for `interest` on `source` found it drained (see
    /// [`Reactor::drained`]); a no-op for a source never waited on.
    pub(crate) fn io_drained<S: 'static>(&mut self, source: StackRef<S>, interest: Interest) {
        if self.sched.core.io.is_none() {
            return;
        }
        if let Some(k) = self.io_key_of(source) {
            if let Some(r) = self.sched.core.io.as_mut() {
                r.drained(k, interest);
            }
        }
    }
}
