//! [`serve_stream`]: a request/response byte stream served in one step per
//! request (re-exported by [`net`](super)).

use super::{comm, SCRATCH};
use crate::error::{codes, Error};
use crate::steps::step::{StackRef, Step};
use mio::net::TcpStream;
use mio::Interest;
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

/// What the handler of [`serve_stream`] asks for after each call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Then {
    /// Write the output, then read more.
    Read,
    /// Write the output, then end: the calling step succeeds (the stream
    /// stays open on the stack until the step that owns it ends). A peer
    /// that may still be sending (a refused request) is best drained by a
    /// later step, after shutting down the writing half: a socket closed
    /// with input unread sends a reset, and the peer may lose the output.
    Close,
}

/// What one attempt to write out the pending output did.
enum Flush {
    /// All of it is written.
    Done,
    /// The socket is full: wait until it is writable.
    Blocked,
}

/// Writes `out[*at..]`, advancing `at`; clears `out` when all is written.
fn flush(c: &mut TcpStream, out: &mut Vec<u8>, at: &mut usize) -> Result<Flush, Error> {
    while *at < out.len() {
        match c.write(&out[*at..]) {
            Ok(0) => {
                return Err(Error::with_info(
                    codes::COMM_ERROR,
                    "write: the socket accepts no more data",
                ))
            }
            Ok(k) => *at += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Flush::Blocked),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(comm("write", e)),
        }
    }
    out.clear();
    *at = 0;
    Ok(Flush::Done)
}

/// What the reads of one turn of [`serve_stream`] found.
#[derive(Default)]
struct Got {
    /// New data came.
    data: bool,
    /// The last read filled the buffer: more may be there.
    full: bool,
    /// The peer closed its writing half (after any data of this turn).
    eof: bool,
}

/// Full reads [`serve_stream`] makes before it answers and lets other
/// flows run.
const READS_PER_TURN: usize = 16;

/// Serves a request/response byte stream on `conn` until the peer closes
/// it or `handler` says [`Then::Close`]: a loop that reads what arrives
/// into an input buffer (`max_read` bytes a read, capped at 1 MiB; reading
/// on until the socket is drained, or 16 reads were full), calls
/// `handler(&mut input, &mut output)`, which removes what it has handled
/// from the input and appends its replies to the output, and writes the
/// output at once, in one write when the socket takes it. The calling step's result is no
/// args; socket errors are `CommError`, an error from `handler` fails the
/// step as it is.
///
/// This is the fast way to run a connection whose replies are computed
/// without waiting (an echo, a protocol parser answering from memory):
/// a request that arrives and is answered costs one engine step and its
/// wait, where [`read_some`](super::read_some) followed by [`write_all`](super::write_all) costs about six.
/// A read shorter than asked means the socket is drained, so the loop
/// waits for the next readable event without another read; output that
/// the socket does not take at once is written when it becomes writable,
/// and nothing more is read meanwhile (a peer that does not read its
/// replies is not buffered for without bound). The handler is called only
/// after new data arrived; it owns the input buffer's growth: a protocol
/// whose message is not complete yet leaves the bytes there and should
/// refuse (say, close) a message that grows too large. When the peer
/// closes, the output of the data before the close is still written,
/// then the step succeeds; bytes the handler left in the input are
/// dropped. For replies that need other steps (a database call, a timer),
/// use [`read_some`](super::read_some) and [`write_all`](super::write_all) instead.
///
/// ```
/// use futoin_asyncsteps::io::mio;
/// use futoin_asyncsteps::io::net::{self, Then};
/// use futoin_asyncsteps::{AsyncSteps, AsyncTool, TakeOnce};
/// use std::io::{Read, Write};
///
/// let mut tool = AsyncTool::new()?;
/// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let mut client = std::net::TcpStream::connect(l.local_addr()?)?;
/// let (server, _) = l.accept()?;
/// server.set_nonblocking(true)?;
/// let server = TakeOnce::new(mio::net::TcpStream::from_std(server));
///
/// // Answers each line with its length; "quit" closes.
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     let c = s.stack(server.take()?);
///     net::serve_stream(s, c, 4096, |input, output| {
///         while let Some(end) = input.iter().position(|&b| b == b'\n') {
///             let line: Vec<u8> = input.drain(..=end).collect();
///             if line == b"quit\n" {
///                 output.extend_from_slice(b"bye\n");
///                 return Ok(Then::Close);
///             }
///             output.extend_from_slice(format!("{}\n", line.len() - 1).as_bytes());
///         }
///         Ok(Then::Read)
///     });
///     Ok(())
/// });
/// let done = root.promise::<()>(&mut tool);
/// client.write_all(b"hello\nfutoin\nquit\n")?;
/// tool.block_on(done)?;
/// let mut reply = String::new();
/// client.read_to_string(&mut reply)?; // the server's socket closed with its flow
/// assert_eq!(reply, "5\n6\nbye\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serve_stream<H>(s: &mut Step<'_>, conn: StackRef<TcpStream>, max_read: usize, handler: H)
where
    H: FnMut(&mut Vec<u8>, &mut Vec<u8>) -> Result<Then, Error> + 'static,
{
    let opts = ServeOptions {
        max_read,
        ..ServeOptions::default()
    };
    serve_stream_with(s, conn, opts, handler);
}

/// How [`serve_stream_with`] serves a stream. Start from the default and
/// set what differs (more options may come, so it is not built from a
/// struct literal):
///
/// ```
/// use futoin_asyncsteps::io::net::ServeOptions;
/// use std::time::Duration;
///
/// let mut opts = ServeOptions::default();
/// opts.idle_timeout = Some(Duration::from_secs(60));
/// assert_eq!(opts.max_read, 16 * 1024);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Bytes asked for by one read (1 to 1 MiB; other values are brought
    /// into that range). Default: 16 KiB.
    pub max_read: usize,
    /// The longest the stream may wait with nothing happening: for the
    /// peer to send more (a request, the rest of one), or, with output
    /// pending, for the socket to take it (a peer that does not read).
    /// Past it the step fails with `Timeout` (the stream closes when the
    /// step that owns it ends). Each wait has a timer of its own, so a
    /// peer that sends a byte now and then keeps the stream open. `None`
    /// (the default): no limit, as a client that never sends its request
    /// or never reads its replies then holds the connection for good; set
    /// one on servers that face untrusted peers. `Some(Duration::ZERO)`
    /// fails the first wait for readiness the stream does not already
    /// have (a wait whose readiness is kept from an earlier event ends
    /// before its timer).
    pub idle_timeout: Option<Duration>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_read: 16 * 1024,
            idle_timeout: None,
        }
    }
}

/// [`serve_stream`] with [`ServeOptions`]: a read size and an idle
/// timeout.
///
/// ```
/// use futoin_asyncsteps::io::mio;
/// use futoin_asyncsteps::io::net::{self, ServeOptions, Then};
/// use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, TakeOnce};
/// use std::time::Duration;
///
/// let mut tool = AsyncTool::new()?;
/// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let _quiet_client = std::net::TcpStream::connect(l.local_addr()?)?;
/// let (server, _) = l.accept()?;
/// server.set_nonblocking(true)?;
/// let server = TakeOnce::new(mio::net::TcpStream::from_std(server));
///
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     let c = s.stack(server.take()?);
///     let mut opts = ServeOptions::default();
///     opts.idle_timeout = Some(Duration::from_millis(50));
///     net::serve_stream_with(s, c, opts, |input, output| {
///         output.append(input);
///         Ok(Then::Read)
///     });
///     Ok(())
/// });
/// let done = root.promise::<()>(&mut tool);
/// // The client sends nothing: the server lets it go.
/// assert_eq!(tool.block_on(done).unwrap_err().code(), codes::TIMEOUT);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serve_stream_with<H>(
    s: &mut Step<'_>,
    conn: StackRef<TcpStream>,
    opts: ServeOptions,
    handler: H,
) where
    H: FnMut(&mut Vec<u8>, &mut Vec<u8>) -> Result<Then, Error> + 'static,
{
    let max = opts.max_read.clamp(1, 1 << 20);
    let idle = opts.idle_timeout;
    // Each wait of the loop below goes through this: a timer of its own
    // when there is an idle limit.
    let wait = move |s: &mut Step<'_>, interest, key: &mut Option<_>| {
        if let Some(d) = idle {
            s.set_timeout(d);
        }
        s.wait_ready_keyed(conn, interest, key)
    };
    let mut handler = handler;
    let (mut input, mut output, mut at) = (Vec::new(), Vec::new(), 0usize);
    let mut ending = false;
    // The stream's reactor key, once the first wait has registered it.
    let mut key = None;
    s.loop_(move |s| {
        let c = s.stack_get(conn)?;
        if !output.is_empty() {
            if let Flush::Blocked = flush(c, &mut output, &mut at)? {
                return wait(s, Interest::WRITABLE, &mut key);
            }
        }
        if ending {
            return s.break_loop();
        }
        // Read until the socket is drained (a short read), so that a
        // request that came in several reads is answered in one write.
        let got = SCRATCH.with_borrow_mut(|buf| {
            if buf.len() < max {
                buf.resize(max, 0);
            }
            let mut got = Got::default();
            for _ in 0..READS_PER_TURN {
                match c.read(&mut buf[..max]) {
                    Ok(0) => {
                        got.eof = true;
                        break;
                    }
                    Ok(n) => {
                        input.extend_from_slice(&buf[..n]);
                        got.data = true;
                        got.full = n == max;
                        if !got.full {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        got.full = false;
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(comm("read", e)),
                }
            }
            Ok(got)
        })?;
        if got.data && handler(&mut input, &mut output)? == Then::Close {
            ending = true;
        }
        if got.eof {
            ending = true;
        }
        if !output.is_empty() {
            if let Flush::Blocked = flush(c, &mut output, &mut at)? {
                return wait(s, Interest::WRITABLE, &mut key);
            }
        }
        if ending {
            s.break_loop()
        } else if got.full {
            Ok(()) // more may be there: the next iteration reads again
        } else {
            wait(s, Interest::READABLE, &mut key)
        }
    });
}
