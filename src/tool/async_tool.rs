//! [`AsyncTool`]: a mio event loop owning a [`Scheduler`].

use crate::args::FromArgs;
use crate::error::Error;
use crate::steps::result::Promise;
use crate::tool::handle::ToolHandle;
use crate::tool::scheduler::{Scheduler, Trim};
use crate::tool::shared::Shared;
use std::future::Future;
use std::io;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

const WAKER: mio::Token = mio::Token(usize::MAX);

/// Wakes a loop blocked in `poll` (used by `block_on`).
struct LoopWake(Arc<Shared>);

impl Wake for LoopWake {
    fn wake(self: Arc<Self>) {
        self.0.wake_loop();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake_loop();
    }
}

/// One event loop on the current thread (spec 2.6 AsyncTool): immediate and
/// deferred callbacks, the flows pinned to it, and a cross-thread inbox woken
/// through a `mio::Waker`.
///
/// It derefs to [`Scheduler`] for `immediate`, `deferred`, `cancel`,
/// `is_valid`, `is_same_thread` and `stats`. Drive it yourself with
/// [`iterate`](AsyncTool::iterate) (to embed it in another loop), until a flow
/// ends with [`block_on`](AsyncTool::block_on), until nothing is left with
/// [`run_until_idle`](AsyncTool::run_until_idle), or give it a thread with
/// [`AsyncTool::spawn`].
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, AsyncTool};
/// use std::time::Duration;
///
/// let mut tool = AsyncTool::new()?;
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| {
///     let h = s.wait_external();
///     s.tool().deferred(Duration::from_millis(1), move |_| { h.success((7u8,)).unwrap(); });
///     Ok(())
/// });
/// let p = root.promise(&mut tool);
/// assert_eq!(tool.block_on::<(u8,)>(p).unwrap().0, 7);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct AsyncTool {
    sched: Scheduler,
    poll: mio::Poll,
    events: mio::Events,
    /// The last turn ended with a blocking poll: the next turn need not
    /// poll again before its pass (that poll would almost always find
    /// nothing, a wasted system call per wake-up).
    just_polled: bool,
}

impl std::fmt::Debug for AsyncTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncTool")
            .field("stats", &self.sched.stats())
            .finish()
    }
}

impl AsyncTool {
    /// A new loop bound to the calling thread.
    pub fn new() -> io::Result<Self> {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let mut sched = Scheduler::new(Instant::now());
        sched.set_registry(poll.registry().try_clone()?);
        sched.shared.set_waker(waker);
        Ok(AsyncTool {
            sched,
            poll,
            events: mio::Events::with_capacity(256),
            just_polled: false,
        })
    }

    /// The mio registry of this loop, for I/O sources.
    pub fn registry(&self) -> &mio::Registry {
        self.poll.registry()
    }

    /// Runs one turn: inbox, due timers and the callbacks queued before the
    /// turn. When there was nothing to run, first blocks up to `max_wait`
    /// (`None`: until the next timer or message) for work to arrive.
    /// Returns how many events ran.
    ///
    /// A loop that has been quiet for 10 s also gives back what a burst of
    /// flows left in its pools beyond 65,536 (see `docs/architecture.md`):
    /// such a turn may wake before `max_wait` to start, and returns at
    /// once, having run nothing, while more is left to free (1,024 per
    /// turn).
    pub fn iterate(&mut self, max_wait: Option<Duration>) -> io::Result<usize> {
        self.iterate_with(max_wait, &|| true)
    }

    /// [`iterate`](Self::iterate) for a driver with work sources of its
    /// own: the loop only sleeps when `idle()` holds after the loop has
    /// published that it is going to sleep (see `Shared::prepare_sleep`).
    pub(crate) fn iterate_with(
        &mut self,
        max_wait: Option<Duration>,
        idle: &dyn Fn() -> bool,
    ) -> io::Result<usize> {
        self.sched.now = Instant::now();
        // A busy loop never blocks in poll: look for I/O each turn while
        // steps wait for it, except right after the blocking poll that
        // ended the previous turn (the turn after this one polls again).
        let mut io = 0;
        if self.sched.io_waits() > 0 && !std::mem::take(&mut self.just_polled) {
            io = self.poll_io(Some(Duration::ZERO))?;
        }
        let n = self.sched.run_pass() + io;
        if n > 0 || self.sched.has_immediates() {
            self.sched.busy();
            return Ok(n);
        }
        // A quiet turn: what a burst left in the pools is freed a batch per
        // turn once the loop has been quiet long enough (coming straight
        // back while more is left, so new work waits for one batch at most).
        let trim_at = match self.sched.trim_pools() {
            Trim::More => return Ok(0),
            Trim::At(at) => Some(at),
            Trim::Nothing => None,
        };
        // Sleep until the earliest of `max_wait`, the next timer and the
        // start of the trim.
        let mut wait = max_wait;
        if let Some(at) = trim_at.into_iter().chain(self.sched.next_deadline()).min() {
            let d = at.saturating_duration_since(self.sched.now);
            wait = Some(wait.map_or(d, |w| w.min(d)));
        }
        let mut io = 0;
        if wait != Some(Duration::ZERO) && self.sched.shared.prepare_sleep(idle) {
            let r = self.poll_io(wait);
            self.sched.shared.woke();
            io = r?;
            self.just_polled = true;
        }
        self.sched.now = Instant::now();
        Ok(self.sched.run_pass() + io)
    }

    /// Polls the reactor for up to `wait` and completes the steps whose
    /// sources are ready; returns how many events it handled.
    fn poll_io(&mut self, wait: Option<Duration>) -> io::Result<usize> {
        match self.poll.poll(&mut self.events, wait) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) => return Err(e),
        }
        let mut n = 0;
        for ev in self.events.iter() {
            if ev.token() != WAKER {
                self.sched.now = Instant::now();
                self.sched.io_event(ev);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Runs until no callback, timer, message or flow continuation is left.
    /// Flows that wait for an external event with no timer do not keep it
    /// running.
    pub fn run_until_idle(&mut self) -> io::Result<()> {
        loop {
            self.iterate(Some(Duration::ZERO))?;
            if self.sched.is_idle() {
                return Ok(());
            }
            if !self.sched.has_immediates() {
                self.iterate(None)?;
            }
        }
    }

    /// Runs until a [`ToolHandle::stop`] arrives.
    pub fn run(&mut self) -> io::Result<()> {
        loop {
            self.iterate(None)?;
            if self.sched.take_stop() {
                return Ok(());
            }
        }
    }

    /// Runs the loop until `p`'s flow ends and returns its result.
    ///
    /// The promise may belong to a flow on another loop: this loop then
    /// sleeps until that flow ends (or its own work arrives).
    pub fn block_on<T: FromArgs>(&mut self, mut p: Promise<T>) -> Result<T, Error> {
        let waker = Waker::from(Arc::new(LoopWake(self.sched.shared.clone())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(r) = Pin::new(&mut p).poll(&mut cx) {
                return r;
            }
            self.iterate(None).map_err(Error::from)?;
        }
    }

    /// Starts a loop on a new thread named `name`, running until
    /// [`ToolHandle::stop`]; flows are started on it through the handle.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, AsyncTool};
    /// let (h, thread) = AsyncTool::spawn("loop-0")?;
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| s.success((1u8,)));
    /// assert_eq!(h.promise::<(u8,)>(root).wait().unwrap().0, 1);
    /// h.stop();
    /// thread.join().unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn(name: &str) -> io::Result<(ToolHandle, std::thread::JoinHandle<()>)> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let th = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match AsyncTool::new() {
                Ok(mut tool) => {
                    let _ = tx.send(Ok(tool.handle()));
                    if let Err(e) = tool.run() {
                        eprintln!("futoin-asyncsteps: loop stopped: {e}");
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })?;
        let h = rx
            .recv()
            .map_err(|_| io::Error::other("loop thread ended before starting"))??;
        Ok((h, th))
    }
}

impl Deref for AsyncTool {
    type Target = Scheduler;
    fn deref(&self) -> &Scheduler {
        &self.sched
    }
}

impl DerefMut for AsyncTool {
    fn deref_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }
}
