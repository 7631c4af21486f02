//! [`FdSource`]: any file descriptor you own as a readiness source.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// A file descriptor you own, as a source for
/// [`Step::wait_io`](crate::Step::wait_io) that reads and writes: a pipe
/// end, a Unix socket from `std`, a character device, a descriptor from
/// another library. It closes the descriptor when dropped.
///
/// Put it in non-blocking mode first (a `std` socket's
/// `set_nonblocking(true)`; `O_NONBLOCK` otherwise): a wait ends when the
/// descriptor is ready, and a read or write then returns `WouldBlock`
/// once it is drained or full, as with mio's own sources.
///
/// ```
/// use futoin_asyncsteps::io::{mio::Interest, FdSource, Ready};
/// use futoin_asyncsteps::{AsyncSteps, AsyncTool, TakeOnce};
/// use std::io::{Read, Write};
/// use std::os::unix::net::UnixStream;
///
/// let (mut ours, theirs) = UnixStream::pair()?;
/// theirs.set_nonblocking(true)?;
/// let src = TakeOnce::new(FdSource::new(theirs));
/// let mut tool = AsyncTool::new()?;
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     let fd = s.stack(src.take()?);
///     s.add(move |s, ()| s.wait_io(fd, Interest::READABLE));
///     s.add(move |s, _: Ready| {
///         let mut buf = [0u8; 8];
///         let n = s.stack_get(fd)?.read(&mut buf)?;
///         s.success(buf[..n].to_vec())
///     });
///     Ok(())
/// });
/// let p = root.promise::<Vec<u8>>(&mut tool);
/// ours.write_all(b"ping")?;
/// assert_eq!(tool.block_on(p)?, b"ping");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FdSource {
    /// A `File` reads and writes any descriptor (`read(2)`, `write(2)`).
    file: File,
}

impl FdSource {
    /// Takes ownership of `fd` (an `OwnedFd`, or anything that becomes
    /// one: a `std` socket, a `File`, a child's pipe).
    pub fn new(fd: impl Into<OwnedFd>) -> Self {
        FdSource {
            file: File::from(fd.into()),
        }
    }

    /// Gives the descriptor back (deregister it first if a step waited on
    /// it: [`Step::release_io`](crate::Step::release_io)).
    pub fn into_inner(self) -> OwnedFd {
        self.file.into()
    }
}

impl AsFd for FdSource {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for FdSource {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Read for FdSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }
}

impl Write for FdSource {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl mio::event::Source for FdSource {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.as_raw_fd()).register(registry, token, interests)
    }
    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.as_raw_fd()).reregister(registry, token, interests)
    }
    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        mio::unix::SourceFd(&self.as_raw_fd()).deregister(registry)
    }
}
