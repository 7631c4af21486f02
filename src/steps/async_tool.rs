//! [`AsyncTool`]: the engine on a mio event loop of the calling thread.

use crate::args::FromArgs;
use crate::error::Error;
use crate::steps::promise::Promise;
use crate::steps::scheduler::Scheduler;
use crate::steps::tool_handle::ToolHandle;
use crate::tool::Poller;
use std::io;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// One event loop on the current thread (spec 2.6 AsyncTool): immediate and
/// deferred callbacks, the flows pinned to it, and a cross-thread inbox. An
/// idle loop sleeps in its `mio::Poll` while it has I/O sources to watch,
/// and parks its thread otherwise (a futex wake-up costs less than an
/// eventfd and `epoll_wait`); a message from another thread wakes it
/// either way.
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
    poller: Poller,
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
        let mut sched = Scheduler::new(Instant::now());
        let poller = Poller::new(&mut sched.core)?;
        Ok(AsyncTool { sched, poller })
    }

    /// The mio registry of this loop, for I/O sources.
    ///
    /// Once it has been asked for, the loop always sleeps in its poll (a
    /// loop with no source of its own otherwise parks its thread), so a
    /// source registered here directly still ends a blocking
    /// [`iterate`](Self::iterate).
    pub fn registry(&self) -> &mio::Registry {
        self.poller.registry()
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
    ///
    /// How it blocks: in its `mio::Poll` while a step waits on an I/O
    /// source or once [`registry`](Self::registry) was handed out;
    /// otherwise it parks the thread (`std::thread::park_timeout`), so it
    /// uses the thread's park token. A callback on this thread that calls
    /// `std::thread::park` itself must re-check its condition, as std asks
    /// (it may take a wake meant for the loop, and the loop then runs one
    /// turn early), and a signal no longer ends a parked turn early.
    pub fn iterate(&mut self, max_wait: Option<Duration>) -> io::Result<usize> {
        self.poller.iterate(&mut self.sched, max_wait, &|| true)
    }

    /// [`iterate`](Self::iterate) for a driver with work sources of its
    /// own: the loop only sleeps when `idle()` holds after the loop has
    /// published that it is going to sleep (see `Inbox::prepare_sleep`).
    pub(crate) fn iterate_with(
        &mut self,
        max_wait: Option<Duration>,
        idle: &dyn Fn() -> bool,
    ) -> io::Result<usize> {
        self.poller.iterate(&mut self.sched, max_wait, idle)
    }

    /// Runs until no callback, timer, message or flow continuation is left.
    /// Flows that wait for an external event with no timer do not keep it
    /// running: it returns while another thread still holds their handle
    /// (call it again once that thread has completed them, or use
    /// [`block_on`](Self::block_on) for one flow).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, AsyncTool};
    /// let mut tool = AsyncTool::new()?;
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.set_timeout(std::time::Duration::from_millis(5));
    ///     s.wait_external(); // nobody completes it: it times out
    ///     Ok(())
    /// });
    /// root.execute(&mut tool);
    /// tool.set_unhandled_error_hook(|e| assert_eq!(e.code(), "Timeout"));
    /// tool.run_until_idle()?; // the timer keeps it running until then
    /// assert_eq!(tool.stats().flows, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn run_until_idle(&mut self) -> io::Result<()> {
        self.poller.run_until_idle(&mut self.sched)
    }

    /// Runs until a [`ToolHandle::stop`] arrives.
    pub fn run(&mut self) -> io::Result<()> {
        self.poller.run(&mut self.sched)
    }

    /// Runs the loop until `p`'s flow ends and returns its result.
    ///
    /// The promise may belong to a flow on another loop: this loop then
    /// sleeps until that flow ends (or its own work arrives). A flow on
    /// another loop of this same thread would never end meanwhile: that is
    /// an `InternalError` at once.
    pub fn block_on<T: FromArgs>(&mut self, p: Promise<T>) -> Result<T, Error> {
        p.refuse_if_stuck_behind(&self.sched.core.inbox)?;
        self.poller.block_on(&mut self.sched, p)?
    }

    /// Starts a loop on a new thread named `name`, running until
    /// [`ToolHandle::stop`]; flows are started on it through the handle.
    /// A name holding a NUL byte is an `InvalidInput` error.
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
        crate::util::thread::check_thread_name(name)?;
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::tool::Sleep;
    use crate::{AsyncSteps, Step};
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    /// Waits (on another thread) until `tool`'s loop sleeps, checks how,
    /// then runs `wake` there; the loop must come back for it and run
    /// what it sent, long before the 10 s it was allowed to sleep.
    fn sleeps_as_and_wakes(
        tool: &mut AsyncTool,
        want: Sleep,
        wake: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) {
        let shared = tool.sched.core.inbox.clone();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let t = std::thread::spawn(move || {
            let how = loop {
                if let Some(how) = shared.sleeping_as() {
                    break how;
                }
                std::thread::yield_now();
            };
            wake(d);
            how
        });
        let start = Instant::now();
        while !done.load(Ordering::SeqCst) {
            tool.iterate(Some(Duration::from_secs(10))).unwrap();
            assert!(start.elapsed() < Duration::from_secs(8), "not woken");
        }
        assert_eq!(t.join().unwrap(), want);
    }

    /// A message from another thread: it sets the flag on the loop.
    fn message(tool: &AsyncTool) -> impl FnOnce(Arc<AtomicBool>) + Send + 'static {
        let h = tool.handle();
        move |d| h.call(move |_| d.store(true, Ordering::SeqCst))
    }

    #[test]
    fn a_loop_with_no_source_parks_and_a_message_wakes_it() {
        let mut tool = AsyncTool::new().unwrap();
        for _ in 0..3 {
            let wake = message(&tool);
            sleeps_as_and_wakes(&mut tool, Sleep::Park, wake);
        }
    }

    #[test]
    fn a_loop_whose_registry_was_taken_sleeps_in_poll() {
        let mut tool = AsyncTool::new().unwrap();
        let _ = tool.registry();
        let wake = message(&tool);
        sleeps_as_and_wakes(&mut tool, Sleep::Poll, wake);
    }

    /// A loop whose one flow waits for a connection that never comes (its
    /// promise is returned): the loop has an I/O source to watch.
    fn waiting_for_io() -> (AsyncTool, crate::Promise<()>) {
        let mut tool = AsyncTool::new().unwrap();
        let listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut root = AsyncSteps::new();
        let ln = crate::TakeOnce::new(listener);
        root.add(move |s: &mut Step<'_>, ()| {
            let l = s.stack(ln.take().expect("listener"));
            s.wait_io(l, mio::Interest::READABLE)
        });
        let p = root.promise::<()>(&mut tool);
        tool.iterate(Some(Duration::ZERO)).unwrap();
        assert_eq!(tool.stats().io, 1);
        (tool, p)
    }

    #[test]
    fn a_loop_waiting_for_io_sleeps_in_poll_and_a_message_still_wakes_it() {
        let (mut tool, p) = waiting_for_io();
        let wake = message(&tool);
        sleeps_as_and_wakes(&mut tool, Sleep::Poll, wake);
        // The wait ends and its source is deregistered: the loop parks
        // from now on, and a message still wakes it.
        p.cancel();
        tool.run_until_idle().unwrap();
        assert_eq!(tool.stats().io, 0);
        let wake = message(&tool);
        sleeps_as_and_wakes(&mut tool, Sleep::Park, wake);
    }

    /// A `block_on` waker writes the loop's waker directly (not through
    /// the inbox's handshake). The busy I/O poll a turn starts with may
    /// take that event (reported once: edge-triggered): the turn must then
    /// not go to sleep, or `block_on` sleeps through its flow's end.
    #[test]
    fn a_wake_the_busy_io_poll_takes_is_not_slept_through() {
        let (mut tool, _p) = waiting_for_io();
        assert!(
            !tool.poller.just_polled,
            "the next turn starts with a busy poll"
        );
        // What `LoopWake::wake` does, from the flow's end on another loop.
        tool.sched.core.inbox.wake_loop();
        let start = Instant::now();
        tool.iterate(Some(Duration::from_secs(10))).unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "slept through a wake"
        );
    }

    /// An event that came while the loop slept (its turn then skips the
    /// busy poll) is taken by the poll after the yield, before the loop
    /// would go to sleep: the step goes on in that turn and the loop
    /// never sleeps (the next turn starts with a busy poll again).
    #[test]
    fn a_loop_about_to_sleep_in_poll_takes_a_ready_event_after_its_yield() {
        let mut tool = AsyncTool::new().unwrap();
        let listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut root = AsyncSteps::new();
        let ln = crate::TakeOnce::new(listener);
        root.add(move |s: &mut Step<'_>, ()| {
            let l = s.stack(ln.take().expect("listener"));
            s.wait_io(l, mio::Interest::READABLE)
        });
        let mut p = root.promise::<(crate::io::Ready,)>(&mut tool);
        tool.iterate(Some(Duration::ZERO)).unwrap();
        assert_eq!(tool.stats().io, 1);
        // Nothing comes: the turn ends asleep in the poll.
        tool.iterate(Some(Duration::from_millis(1))).unwrap();
        assert!(tool.poller.just_polled);
        // The connection is queued (loopback completes the handshake in
        // `connect`); the listener's event waits in the kernel.
        let _conn = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(tool.iterate(Some(Duration::from_secs(10))).unwrap(), 1);
        assert!(!tool.poller.just_polled, "the loop slept in its poll");
        assert!(p.try_take().unwrap().unwrap().0.readable);
        assert_eq!(tool.stats().io, 0);
    }

    #[test]
    fn a_source_registered_through_registry_ends_a_blocking_iterate() {
        let mut tool = AsyncTool::new().unwrap();
        let mut listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        tool.registry()
            .register(&mut listener, mio::Token(7), mio::Interest::READABLE)
            .unwrap();
        let shared = tool.sched.core.inbox.clone();
        let t = std::thread::spawn(move || {
            while shared.sleeping_as().is_none() {
                std::thread::yield_now();
            }
            let how = shared.sleeping_as();
            let conn = std::net::TcpStream::connect(addr).unwrap();
            (how, conn)
        });
        let start = Instant::now();
        tool.iterate(Some(Duration::from_secs(10))).unwrap();
        assert!(start.elapsed() < Duration::from_secs(8), "not woken");
        let (how, _conn) = t.join().unwrap();
        assert_eq!(how, Some(Sleep::Poll));
    }

    #[test]
    fn a_parked_block_on_wakes_for_a_flow_of_another_loop() {
        let mut tool = AsyncTool::new().unwrap();
        let (other, thread) = AsyncTool::spawn("other").unwrap();
        // The other loop's flow ends only once this loop is parked in
        // `block_on`: its completion must wake it.
        let shared = tool.sched.core.inbox.clone();
        let mut root = AsyncSteps::new();
        root.add(move |s, ()| {
            while shared.sleeping_as() != Some(Sleep::Park) {
                std::thread::yield_now();
            }
            s.success((5u8,))
        });
        let p = other.promise::<(u8,)>(root);
        // A lost wake would leave `block_on` asleep for good: a watchdog
        // wakes it through the inbox after 8 s, and says so.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = tool.handle();
        let watchdog = std::thread::spawn(move || {
            let lost = rx.recv_timeout(Duration::from_secs(8)).is_err();
            if lost {
                h.call(|_| {});
            }
            lost
        });
        assert_eq!(tool.block_on(p).unwrap().0, 5);
        let _ = tx.send(());
        assert!(!watchdog.join().unwrap(), "block_on was not woken");
        other.stop();
        thread.join().unwrap();
    }
}
