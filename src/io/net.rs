//! TCP helpers written as steps on top of [`Step::wait_io`]: accept, read
//! some bytes, read exactly `n`, read a line (up to a delimiter), write
//! all, connect with a timeout, and
//! serve a request/response stream in one step per request
//! ([`serve_stream`]).
//!
//! Each helper adds sub-steps to the calling step, so the calling step's
//! result is the helper's result, and the next step receives it. The
//! sockets live on the flow's stack ([`Step::stack`]) and are named by
//! their [`StackRef`]. They retry on `WouldBlock` (waiting for readiness)
//! and on `Interrupted`, and continue partial reads and writes. When the
//! last operation on a socket found it drained (it would block, or a read
//! came back short) and no event for it came since, they wait first
//! instead of making a system call that would only block. End of
//! stream is a normal result (an empty read); a reset, a broken pipe or any
//! other socket error is `CommError` with the OS error in its info. A
//! connection that [`connect`] cannot establish is `ConnectError` instead
//! (the two codes' meanings in [`codes`]). Sockets made from `std` ones
//! must be set non-blocking first (see the [`io`](super) module).
//!
//! A server accepts with [`accept`] and runs each connection as a root
//! flow of its own. A flow never leaves its loop, so where that flow starts
//! is where the connection is served: the server examples hand each
//! accepted connection to the least busy loop
//! ([`RuntimeHandle::execute_balanced`](crate::runtime::RuntimeHandle::execute_balanced)),
//! and can instead open one `SO_REUSEPORT` listener per loop
//! (`--reuseport`). The two measure the same; accept-and-spread is their
//! default because it spreads by load however few the connections are
//! (`docs/net.md` has the figures). A connection whose replies need no
//! other steps is served fastest by [`serve_stream`]: one step per request.
//!
//! ```
//! use futoin_asyncsteps::io::net;
//! use futoin_asyncsteps::{AsyncSteps, AsyncTool, TakeOnce};
//! use futoin_asyncsteps::io::mio::net::{TcpListener, TcpStream};
//!
//! let mut tool = AsyncTool::new()?;
//! let listener = TcpListener::bind("127.0.0.1:0".parse()?)?;
//! let addr = listener.local_addr()?;
//! let listener = TakeOnce::new(listener);
//!
//! // A server flow: accept one connection, echo one message back.
//! let mut server = AsyncSteps::new();
//! server.add(move |s, ()| {
//!     let l = s.stack(listener.take()?);
//!     net::accept(s, l);
//!     Ok(())
//! });
//! server.add(|s, (conn, _peer): (TcpStream, std::net::SocketAddr)| {
//!     let c = s.stack(conn);
//!     net::read_some(s, c, 1024);
//!     s.add(move |s, (data,): (Vec<u8>,)| {
//!         net::write_all(s, c, data);
//!         Ok(())
//!     });
//!     Ok(())
//! });
//! let done = server.promise::<()>(&mut tool);
//!
//! // A client flow on the same loop.
//! let mut client = AsyncSteps::new();
//! client.add(move |s, ()| {
//!     net::connect(s, addr, std::time::Duration::from_secs(5));
//!     Ok(())
//! });
//! client.add(|s, (conn,): (TcpStream,)| {
//!     let c = s.stack(conn);
//!     net::write_all(s, c, b"hello".to_vec());
//!     net::read_exact(s, c, 5);
//!     Ok(())
//! });
//! let reply = client.promise::<(Vec<u8>,)>(&mut tool);
//! assert_eq!(tool.block_on(reply).unwrap().0, b"hello");
//! tool.block_on(done).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::args::{ArgValue, IntoArgs};
use crate::error::{codes, Error, StepResult};
use crate::steps::step::{StackRef, Step};
use mio::net::{TcpListener, TcpStream};
use mio::Interest;
use std::cell::RefCell;
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

impl ArgValue for TcpStream {}
impl ArgValue for SocketAddr {}

mod serve;
pub use serve::{serve_stream, serve_stream_with, ServeOptions, Then};

/// `CommError` for a socket error, naming the operation.
fn comm(what: &str, e: io::Error) -> Error {
    Error::with_info(codes::COMM_ERROR, format!("{what}: {e}"))
}

/// `ConnectError` for a connection that could not be established.
fn not_connected(e: io::Error) -> Error {
    Error::with_info(codes::CONNECT_ERROR, format!("connect: {e}"))
}

/// What one attempt of an operation did.
enum Try<T> {
    /// It is done.
    Done(T),
    /// It is done, and the source is drained in that direction (a read
    /// came back short): the next attempt would block.
    Drained(T),
    /// It would block.
    Blocked,
}

/// Makes one attempt in the calling step: on a value the step succeeds
/// with `done(value)`; when it would block, `blocked` sets up the wait and
/// the retries, given back `attempt` and `done`. When the last operation
/// on `src` found it drained and no event came since, it goes to
/// `blocked` without trying (no system call that would only block).
fn attempt_then<S, T, A, F, D>(
    s: &mut Step<'_>,
    src: StackRef<S>,
    interest: Interest,
    mut attempt: F,
    done: D,
    blocked: impl FnOnce(&mut Step<'_>, F, D),
) -> StepResult
where
    S: mio::event::Source + 'static,
    A: IntoArgs,
    F: FnMut(&mut S) -> Result<Try<T>, Error>,
    D: FnOnce(T) -> A,
{
    if !s.io_worth_trying(src, interest) {
        blocked(s, attempt, done);
        return Ok(());
    }
    match attempt(s.stack_get(src)?)? {
        Try::Done(v) => s.success(done(v)),
        Try::Drained(v) => {
            s.io_drained(src, interest);
            s.success(done(v))
        }
        Try::Blocked => {
            s.io_drained(src, interest);
            blocked(s, attempt, done);
            Ok(())
        }
    }
}

/// Runs `attempt` until it gives a value, waiting for `interest` on `src`
/// whenever it would block; then the calling step
/// succeeds with `done(value)`. One sub-step when the operation can be
/// done at once; a loop of wait-and-retry steps only when it blocks.
fn retry<S, T, A, F, D>(s: &mut Step<'_>, src: StackRef<S>, interest: Interest, attempt: F, done: D)
where
    S: mio::event::Source + 'static,
    T: 'static,
    A: IntoArgs + 'static,
    F: FnMut(&mut S) -> Result<Try<T>, Error> + 'static,
    D: FnOnce(T) -> A + 'static,
{
    s.add(move |s, ()| {
        attempt_then(s, src, interest, attempt, done, |s, attempt, done| {
            let attempt = Rc::new(RefCell::new(attempt));
            let out: Rc<RefCell<Option<T>>> = Rc::default();
            let o = out.clone();
            s.loop_(move |s| {
                s.add(move |s, ()| s.wait_ready(src, interest));
                let (attempt, o) = (attempt.clone(), o.clone());
                s.add(move |s, ()| {
                    let got = (attempt.borrow_mut())(s.stack_get(src)?)?;
                    match got {
                        Try::Done(v) => {
                            *o.borrow_mut() = Some(v);
                            s.break_loop()
                        }
                        Try::Drained(v) => {
                            s.io_drained(src, interest);
                            *o.borrow_mut() = Some(v);
                            s.break_loop()
                        }
                        Try::Blocked => {
                            s.io_drained(src, interest);
                            Ok(()) // a spurious wake-up: wait again
                        }
                    }
                });
                Ok(())
            });
            s.add(move |s, ()| match out.borrow_mut().take() {
                Some(v) => s.success(done(v)),
                None => Err(Error::internal("net: the loop ended without a result")),
            });
        })
    });
}

/// [`retry`] for operations that a readiness event almost always
/// satisfies (accept, read some): after `WouldBlock` it adds just a wait
/// step and a retry step, no loop. A spurious wake-up nests one more pair,
/// so this is not for operations that make partial progress many times
/// (`read_exact`, `write_all` use the loop).
fn retry_short<S, T, A, F, D>(
    s: &mut Step<'_>,
    src: StackRef<S>,
    interest: Interest,
    attempt: F,
    done: D,
) where
    S: mio::event::Source + 'static,
    T: 'static,
    A: IntoArgs + 'static,
    F: FnMut(&mut S) -> Result<Try<T>, Error> + 'static,
    D: FnOnce(T) -> A + 'static,
{
    s.add(move |s, ()| attempt_or_wait(s, src, interest, attempt, done));
}

/// One attempt of [`retry_short`]; on `WouldBlock`, a wait step and
/// another attempt as sub-steps.
fn attempt_or_wait<S, T, A, F, D>(
    s: &mut Step<'_>,
    src: StackRef<S>,
    interest: Interest,
    attempt: F,
    done: D,
) -> StepResult
where
    S: mio::event::Source + 'static,
    T: 'static,
    A: IntoArgs + 'static,
    F: FnMut(&mut S) -> Result<Try<T>, Error> + 'static,
    D: FnOnce(T) -> A + 'static,
{
    attempt_then(s, src, interest, attempt, done, |s, attempt, done| {
        s.add(move |s, ()| s.wait_ready(src, interest));
        s.add(move |s, ()| attempt_or_wait(s, src, interest, attempt, done));
    })
}

thread_local! {
    /// Where `read_some` reads before copying out exactly what came: no
    /// large buffer is allocated and zeroed per read.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Accepts one connection on `listener`; the calling step's result is
/// `(TcpStream, SocketAddr)`.
pub fn accept(s: &mut Step<'_>, listener: StackRef<TcpListener>) {
    retry_short(
        s,
        listener,
        Interest::READABLE,
        |l| loop {
            match l.accept() {
                Ok(v) => return Ok(Try::Done(v)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Try::Blocked),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // A connection that died in the backlog: take the next.
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(comm("accept", e)),
            }
        },
        |(conn, peer)| (conn, peer),
    );
}

/// Reads what is available, up to `max` bytes (at least one, unless the
/// peer closed: then it is empty; `max` is capped at 1 MiB). The result is
/// `(Vec<u8>,)`.
pub fn read_some(s: &mut Step<'_>, conn: StackRef<TcpStream>, max: usize) {
    let max = max.clamp(1, 1 << 20);
    retry_short(
        s,
        conn,
        Interest::READABLE,
        move |c| {
            SCRATCH.with_borrow_mut(|buf| {
                if buf.len() < max {
                    buf.resize(max, 0);
                }
                loop {
                    match c.read(&mut buf[..max]) {
                        // A short read drained the socket (not on Windows,
                        // where mio's readiness is emulated).
                        Ok(n) if n > 0 && n < max && !cfg!(windows) => {
                            return Ok(Try::Drained(buf[..n].to_vec()))
                        }
                        Ok(n) => return Ok(Try::Done(buf[..n].to_vec())),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Try::Blocked),
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(comm("read", e)),
                    }
                }
            })
        },
        |buf| (buf,),
    );
}

/// The buffer [`read_exact`] starts with when `n` is larger.
const READ_EXACT_FIRST: usize = 64 << 10;

/// Reads exactly `n` bytes; the result is `(Vec<u8>,)`. End of stream
/// before `n` bytes is `CommError` ("the peer closed after k of n bytes").
/// `n == 0` completes at once with an empty `Vec`, touching nothing.
///
/// The buffer grows as the bytes arrive: it starts at `n` or 64 KiB,
/// whichever is less, and doubles each time it is full, never past `n`.
/// So `n` can come from the peer (a length prefix): a huge one costs
/// memory only as its bytes actually come, at most twice what came, and a
/// peer that closes early ends the read with the `CommError` above. Bound
/// `n` before the call to limit what one message may make the flow hold.
///
/// ```
/// use futoin_asyncsteps::io::{mio, net};
/// use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, TakeOnce};
/// use std::io::Write;
///
/// let mut tool = AsyncTool::new()?;
/// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let mut client = std::net::TcpStream::connect(l.local_addr()?)?;
/// let (server, _) = l.accept()?;
/// server.set_nonblocking(true)?;
/// let server = TakeOnce::new(mio::net::TcpStream::from_std(server));
///
/// // A message is a 4-byte big-endian length, then that many bytes.
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     let c = s.stack(server.take()?);
///     net::read_exact(s, c, 4);
///     s.add(move |s, (len,): (Vec<u8>,)| {
///         let n = u32::from_be_bytes(len.try_into().unwrap()) as usize;
///         net::read_exact(s, c, n); // memory follows the bytes sent, not n
///         Ok(())
///     });
///     Ok(())
/// });
/// let p = root.promise::<(Vec<u8>,)>(&mut tool);
/// client.write_all(&u32::MAX.to_be_bytes())?; // claims 4 GiB...
/// client.write_all(b"abc")?; // ...sends 3 bytes and closes
/// drop(client);
/// let e = tool.block_on(p).unwrap_err();
/// assert_eq!(e.code(), codes::COMM_ERROR);
/// assert_eq!(e.info(), Some("read_exact: the peer closed after 3 of 4294967295 bytes"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_exact(s: &mut Step<'_>, conn: StackRef<TcpStream>, n: usize) {
    if n == 0 {
        // No I/O: not even a wait for a socket known to be drained.
        s.add(|s, ()| s.success((Vec::<u8>::new(),)));
        return;
    }
    // Filled in place and grown only when full: a slow sender costs no
    // rework, and memory follows the bytes that came, not `n`.
    let mut buf: Option<Vec<u8>> = None;
    let mut have = 0;
    retry(
        s,
        conn,
        Interest::READABLE,
        move |c| {
            let b = buf.get_or_insert_with(|| vec![0u8; n.min(READ_EXACT_FIRST)]);
            loop {
                if have == n {
                    return Ok(Try::Done(std::mem::take(b)));
                }
                if have == b.len() {
                    // Full: double it, up to `n` (`have` >= the first size).
                    b.resize(have + (n - have).min(have), 0);
                }
                match c.read(&mut b[have..]) {
                    Ok(0) => {
                        return Err(Error::with_info(
                            codes::COMM_ERROR,
                            format!("read_exact: the peer closed after {have} of {n} bytes"),
                        ))
                    }
                    Ok(k) => have += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Try::Blocked),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(comm("read", e)),
                }
            }
        },
        |buf| (buf,),
    );
}

/// Reads up to and including the first `delim` byte; the result is
/// `(Vec<u8>,)`, as [`BufRead::read_until`](std::io::BufRead::read_until)
/// gives it: ending with `delim`, or shorter when the peer closed first
/// (empty when it had closed already). Nothing past `delim` is taken from
/// the socket: the next read gets it (each attempt peeks, then reads what
/// it found). A line longer than `max` bytes (the delimiter included;
/// `max` is at least 1) is `CommError` ("read_until: no delimiter in the
/// first `max` bytes"), having taken `max` bytes: bound what a peer may
/// make the flow hold.
///
/// ```
/// use futoin_asyncsteps::io::{mio, net};
/// use futoin_asyncsteps::{AsyncSteps, AsyncTool, TakeOnce};
/// use std::io::Write;
///
/// let mut tool = AsyncTool::new()?;
/// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let mut client = std::net::TcpStream::connect(l.local_addr()?)?;
/// let (server, _) = l.accept()?;
/// server.set_nonblocking(true)?;
/// let server = TakeOnce::new(mio::net::TcpStream::from_std(server));
///
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     let c = s.stack(server.take()?);
///     net::read_line(s, c, 1024);
///     s.add(move |s, first: String| {
///         net::read_line(s, c, 1024);
///         s.add(move |s, second: String| s.success((first, second)));
///         Ok(())
///     });
///     Ok(())
/// });
/// let p = root.promise::<(String, String)>(&mut tool);
/// client.write_all(b"GET key\nSET key 1\n")?; // two lines, one write
/// let (a, b) = tool.block_on(p)?;
/// assert_eq!((a.as_str(), b.as_str()), ("GET key\n", "SET key 1\n"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_until(s: &mut Step<'_>, conn: StackRef<TcpStream>, delim: u8, max: usize) {
    let max = max.max(1);
    let mut line: Vec<u8> = Vec::new();
    retry(
        s,
        conn,
        Interest::READABLE,
        move |c| loop {
            let room = (max - line.len()).min(8 << 10);
            // Peeked into the thread's scratch buffer (no allocation).
            let peeked = SCRATCH.with_borrow_mut(|buf| {
                if buf.len() < room {
                    buf.resize(room, 0);
                }
                loop {
                    match c.peek(&mut buf[..room]) {
                        Ok(k) => {
                            let found = buf[..k].iter().position(|b| *b == delim);
                            return Ok((k, found));
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            });
            let (seen, found) = match peeked {
                Ok((0, _)) => return Ok(Try::Done(std::mem::take(&mut line))),
                Ok(v) => v,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Try::Blocked),
                Err(e) => return Err(comm("read", e)),
            };
            // Take what was seen, through the delimiter if it is there.
            let take = found.map_or(seen, |i| i + 1);
            let at = line.len();
            line.resize(at + take, 0);
            let mut got = 0;
            let mut blocked = false;
            while got < take {
                match c.read(&mut line[at + got..at + take]) {
                    Ok(0) => break,
                    Ok(k) => got += k,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // What was peeked is there to read; should the system
                    // say otherwise, keep what came and wait.
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        blocked = true;
                        break;
                    }
                    Err(e) => return Err(comm("read", e)),
                }
            }
            line.truncate(at + got);
            if blocked {
                return Ok(Try::Blocked);
            }
            if found.is_some() && got == take {
                return Ok(Try::Done(std::mem::take(&mut line)));
            }
            if line.len() >= max {
                return Err(Error::with_info(
                    codes::COMM_ERROR,
                    format!("read_until: no delimiter in the first {max} bytes"),
                ));
            }
        },
        |line| (line,),
    );
}

/// [`read_until`] a newline, as a `String`: the result is `(String,)`,
/// ending with `'\n'` unless the peer closed first. A line that is not
/// UTF-8 is `CommError` ("read_line: the line is not UTF-8").
pub fn read_line(s: &mut Step<'_>, conn: StackRef<TcpStream>, max: usize) {
    read_until(s, conn, b'\n', max);
    s.add(|s, (line,): (Vec<u8>,)| match String::from_utf8(line) {
        Ok(l) => s.success((l,)),
        Err(_) => Err(Error::with_info(
            codes::COMM_ERROR,
            "read_line: the line is not UTF-8",
        )),
    });
}

/// Writes all of `data`, across as many writable events as it takes; the
/// result is no args. Empty `data` completes at once, touching nothing.
pub fn write_all(s: &mut Step<'_>, conn: StackRef<TcpStream>, data: Vec<u8>) {
    if data.is_empty() {
        // No I/O: not even a wait for a socket known to be full.
        s.add(|s, ()| s.success(()));
        return;
    }
    let mut at = 0;
    retry(
        s,
        conn,
        Interest::WRITABLE,
        move |c| loop {
            if at == data.len() {
                return Ok(Try::Done(()));
            }
            match c.write(&data[at..]) {
                Ok(0) => {
                    return Err(Error::with_info(
                        codes::COMM_ERROR,
                        "write: the socket accepts no more data",
                    ))
                }
                Ok(k) => at += k,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Try::Blocked),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(comm("write", e)),
            }
        },
        |()| (),
    );
}

/// A connection in progress, kept on the stack while it is waited for.
struct Connecting(Option<TcpStream>);

impl mio::event::Source for Connecting {
    fn register(&mut self, r: &mio::Registry, t: mio::Token, i: Interest) -> io::Result<()> {
        match &mut self.0 {
            Some(s) => s.register(r, t, i),
            None => Err(io::Error::from(ErrorKind::NotConnected)),
        }
    }
    fn reregister(&mut self, r: &mio::Registry, t: mio::Token, i: Interest) -> io::Result<()> {
        match &mut self.0 {
            Some(s) => s.reregister(r, t, i),
            None => Err(io::Error::from(ErrorKind::NotConnected)),
        }
    }
    fn deregister(&mut self, r: &mio::Registry) -> io::Result<()> {
        match &mut self.0 {
            Some(s) => s.deregister(r),
            None => Ok(()),
        }
    }
}

/// Connects to `addr`; the result is `(TcpStream,)`.
///
/// A connection that cannot be established (refused, unreachable, any
/// socket error before it is up) is `ConnectError`, with the OS error in
/// its info: `"connect: Connection refused (os error 111)"` on Linux.
/// One not established within `timeout` is `Timeout`, as for any step's
/// [`set_timeout`](Step::set_timeout). Errors on the connected stream
/// later are `CommError`, as everywhere in this module.
pub fn connect(s: &mut Step<'_>, addr: SocketAddr, timeout: Duration) {
    s.add(move |s, ()| {
        s.set_timeout(timeout);
        let stream = TcpStream::connect(addr).map_err(not_connected)?;
        let c = s.stack(Connecting(Some(stream)));
        s.add(move |s, ()| s.wait_ready(c, Interest::WRITABLE));
        s.add(move |s, ()| {
            let slot = s.stack_get(c)?;
            let stream = slot.0.as_mut().expect("connecting");
            if let Some(e) = stream.take_error().map_err(not_connected)? {
                return Err(not_connected(e));
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotConnected => {
                    return Err(Error::with_info(
                        codes::CONNECT_ERROR,
                        format!("connect: {addr} did not accept the connection"),
                    ))
                }
                Err(e) => return Err(not_connected(e)),
            }
            // Leave the reactor before leaving the stack.
            s.release_io(c)?;
            let stream = s.stack_get(c)?.0.take().expect("connecting");
            s.success((stream,))
        });
        Ok(())
    });
}
