//! [`Poller`]: the mio side of a loop: one turn (`iterate`), how an idle
//! loop sleeps, the readiness events, and running until idle, until
//! stopped, or until a future is done.

use super::inbox::Sleep;
use super::{Core, Engine, Inbox, Trim};
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

const WAKER: mio::Token = mio::Token(usize::MAX);

/// Wakes a loop however it sleeps (used by `block_on`).
struct LoopWake<H: Engine>(Arc<Inbox<H>>);

impl<H: Engine> Wake for LoopWake<H> {
    fn wake(self: Arc<Self>) {
        self.0.wake_loop();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake_loop();
    }
}

/// The mio poll of one loop, with what a turn remembers of the last one.
/// An idle loop sleeps in the poll while it has I/O sources to watch, and
/// parks its thread otherwise (a futex wake-up costs less than an eventfd
/// and `epoll_wait`); a message from another thread wakes it either way.
pub(crate) struct Poller {
    poll: mio::Poll,
    events: mio::Events,
    /// The last turn ended with a blocking poll: the next turn need not
    /// poll again before its pass (that poll would almost always find
    /// nothing, a wasted system call per wake-up).
    pub(crate) just_polled: bool,
    /// [`registry`](Self::registry) was handed out: sources the reactor
    /// does not know of may be registered, so the loop never parks.
    foreign_sources: std::cell::Cell<bool>,
}

/// Parks the loop's thread for up to `wait` (`None`: until unparked). A
/// spurious return only costs a turn.
fn park(wait: Option<Duration>) {
    match wait {
        Some(d) => std::thread::park_timeout(d),
        None => std::thread::park(),
    }
}

impl Poller {
    /// A poll for `core`'s loop: its waker wakes the loop, its registry
    /// serves the loop's readiness table, and the loop's clock is real.
    pub(crate) fn new<H: Engine>(core: &mut Core<H>) -> io::Result<Self> {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        core.set_registry(poll.registry().try_clone()?);
        core.inbox.set_waker(waker);
        Ok(Poller {
            poll,
            events: mio::Events::with_capacity(256),
            just_polled: false,
            foreign_sources: std::cell::Cell::new(false),
        })
    }

    /// The mio registry. Once it has been asked for, the loop always
    /// sleeps in its poll (sources the readiness table does not know of
    /// may be registered), so such a source still ends a blocking turn.
    pub(crate) fn registry(&self) -> &mio::Registry {
        self.foreign_sources.set(true);
        self.poll.registry()
    }

    /// One turn for a driver with work sources of its own: the loop only
    /// sleeps when `idle()` holds after the loop has published that it is
    /// going to sleep (see `Inbox::prepare_sleep`). A turn: a busy poll
    /// while sources are registered, one pass (`Core::run_pass`); if
    /// nothing ran, the quiet turn's trim, a yield and a last poll before
    /// sleeping in the poll, then the sleep (in the poll while sources are
    /// registered, parked otherwise) up to `max_wait`, the next timer or
    /// the trim, and another pass. Returns how many events ran.
    pub(crate) fn iterate<H: Engine>(
        &mut self,
        h: &mut H,
        max_wait: Option<Duration>,
        idle: &dyn Fn() -> bool,
    ) -> io::Result<usize> {
        h.core().now = Instant::now();
        // A busy loop never blocks in poll: look for I/O each turn while
        // steps wait for it, except right after the blocking poll that
        // ended the previous turn (the turn after this one polls again).
        let (mut io, mut woken) = (0, false);
        if h.core_ref().io_waits() > 0 && !std::mem::take(&mut self.just_polled) {
            (io, woken) = self.poll_io(h, Some(Duration::ZERO))?;
        }
        let n = Core::run_pass(h) + io;
        // A wake-up this poll took (the waker's event is edge-triggered:
        // reported once) is not slept through: a `block_on` waker, which
        // does not go through the inbox's handshake, relies on it.
        if n > 0 || woken || h.core_ref().has_immediates() {
            h.busy();
            return Ok(n);
        }
        // A quiet turn: what a burst left in the engine's pools is freed a
        // batch per turn once the loop has been quiet long enough (coming
        // straight back while more is left, so new work waits for one
        // batch at most).
        let trim_at = match h.trim() {
            Trim::More => return Ok(0),
            Trim::At(at) => Some(at),
            Trim::Nothing => None,
        };
        // About to sleep in the poll while steps wait for I/O: give the
        // thread's core away once and look again first (see
        // `yield_before_poll`).
        if max_wait != Some(Duration::ZERO) && self.sleeps_in_poll(h) {
            if let Some(n) = self.yield_before_poll(h)? {
                return Ok(n);
            }
        }
        // Sleep until the earliest of `max_wait`, the next timer and the
        // start of the trim.
        let mut wait = max_wait;
        let core = h.core();
        if let Some(at) = trim_at.into_iter().chain(core.next_deadline()).min() {
            let d = at.saturating_duration_since(core.now);
            wait = Some(wait.map_or(d, |w| w.min(d)));
        }
        let mut io = 0;
        // With no I/O source to watch, the loop parks its thread instead of
        // blocking in `epoll_wait`: a futex wake-up is the cheaper of the
        // two, for the waker and for the woken thread (a cross-thread
        // ping-pong's round trip is two of them).
        let how = if self.sleeps_in_poll(h) {
            Sleep::Poll
        } else {
            Sleep::Park
        };
        if wait != Some(Duration::ZERO) && h.core_ref().inbox.prepare_sleep(how, idle) {
            let r = match how {
                Sleep::Park => {
                    park(wait);
                    Ok(0)
                }
                Sleep::Poll => self.poll_io(h, wait).map(|(n, _)| n),
            };
            h.core_ref().inbox.woke();
            io = r?;
            self.just_polled = how == Sleep::Poll;
        }
        h.core().now = Instant::now();
        Ok(Core::run_pass(h) + io)
    }

    /// The loop sleeps in `epoll_wait` (it watches I/O sources, or may),
    /// not by parking its thread.
    fn sleeps_in_poll<H: Engine>(&self, h: &H) -> bool {
        h.core_ref().io_waits() > 0 || self.foreign_sources.get()
    }

    /// Before a loop that watches I/O sleeps in its poll, it yields its
    /// core once (`std::thread::yield_now`) and polls again without
    /// waiting; `Some` is the turn's count when that found events or
    /// messages.
    ///
    /// Where the peer of a connection shares the loop's core (a client on
    /// the same machine, another loop), the yield lets it run and send
    /// the next request, which the loop then takes without going to sleep
    /// and being woken: each such round costs the peer a wake-up and both a
    /// context switch. With the client on the same two cores, the loops'
    /// voluntary context switches fell from 0.15-0.36 to 0.03 per HTTP
    /// request (`wrk -t1`) and from 0.09-0.36 to 0.01 per echo round trip,
    /// and the median throughput rose by 5% and 19% (`docs/net.md`). On a
    /// core with nothing else to run it costs two system calls before the
    /// sleep.
    fn yield_before_poll<H: Engine>(&mut self, h: &mut H) -> io::Result<Option<usize>> {
        std::thread::yield_now();
        let (io, woken) = self.poll_io(h, Some(Duration::ZERO))?;
        h.core().now = Instant::now();
        if io == 0 && !woken && h.core_ref().inbox.is_empty() {
            return Ok(None);
        }
        let n = Core::run_pass(h) + io;
        h.busy();
        Ok(Some(n))
    }

    /// Polls for up to `wait` and hands the answered waits to the engine;
    /// returns how many events it handled, and whether the loop's waker
    /// fired.
    fn poll_io<H: Engine>(
        &mut self,
        h: &mut H,
        wait: Option<Duration>,
    ) -> io::Result<(usize, bool)> {
        match self.poll.poll(&mut self.events, wait) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok((0, false)),
            Err(e) => return Err(e),
        }
        let (mut n, mut woken) = (0, false);
        for ev in self.events.iter() {
            if ev.token() == WAKER {
                woken = true;
            } else {
                h.core().now = Instant::now();
                Core::io_event(h, ev);
                n += 1;
            }
        }
        Ok((n, woken))
    }

    /// Runs until no callback, timer, message or queued work is left. Work
    /// that waits for another thread with no timer (an external
    /// completion, say) does not keep it running.
    pub(crate) fn run_until_idle<H: Engine>(&mut self, h: &mut H) -> io::Result<()> {
        loop {
            self.iterate(h, Some(Duration::ZERO), &|| true)?;
            if h.core().is_idle() {
                return Ok(());
            }
            if !h.core_ref().has_immediates() {
                self.iterate(h, None, &|| true)?;
            }
        }
    }

    /// Runs until a stop message arrives.
    pub(crate) fn run<H: Engine>(&mut self, h: &mut H) -> io::Result<()> {
        loop {
            self.iterate(h, None, &|| true)?;
            if h.core().take_stop() {
                return Ok(());
            }
        }
    }

    /// Runs the loop until `fut` is ready, and gives its output. The
    /// future is polled on this thread between turns; its waker wakes the
    /// loop however it sleeps.
    pub(crate) fn block_on<H: Engine, F: Future>(
        &mut self,
        h: &mut H,
        fut: F,
    ) -> io::Result<F::Output> {
        let waker = Waker::from(Arc::new(LoopWake(h.core_ref().inbox.clone())));
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(fut);
        loop {
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                return Ok(r);
            }
            self.iterate(h, None, &|| true)?;
        }
    }
}
