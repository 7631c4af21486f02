//! [`Runtime`]: one event loop per core, root flows pinned to a loop.
//!
//! Each loop is an [`AsyncTool`](crate::AsyncTool) on its own OS thread
//! (pinned to a core by default). A root flow starts on one loop and never
//! leaves it: all its steps, handlers and cancel callbacks run on that
//! thread, so the engine takes no locks. Anything another thread does to a
//! flow (external completion, cancel) travels through the owner loop's
//! inbox and never blocks.
//!
//! Placement: a flow spawned on a loop thread (say, from inside a step)
//! goes to that loop's own queue, so flows that work together stay on one
//! thread, unless that loop has more than 64 flows (running or waiting to
//! start) beyond the least busy loop: then it goes to that loop for good,
//! as [`spawn_balanced`](Runtime::spawn_balanced) would place it.
//! Flows spawned from any other thread are
//! dealt to the loops in turn (a parked loop first, which is then woken).
//! A loop with nothing to do steals flows that were spawned but have not
//! started yet from its peers; a started flow is never moved. Flows placed
//! with [`spawn_balanced`](Runtime::spawn_balanced) go to the loop with the
//! fewest flows and are never stolen.
//!
//! ```
//! use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
//!
//! let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
//! let mut root = AsyncSteps::new();
//! root.add(|s, ()| {
//!     assert!(s.tool().is_same_thread());
//!     s.success((6 * 7,))
//! });
//! let (v,): (i32,) = rt.spawn(root).wait()?;
//! assert_eq!(v, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod driver;

pub use builder::{Builder, PinStatus};

use crate::args::FromArgs;
use crate::steps::model::AsyncSteps;
use crate::steps::promise::{Completion, Promise};
use crate::steps::tool_handle::ToolHandle;
use crate::tool::Msg;
use driver::{Core, Job};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// A set of event loops, one per thread; see the [module docs](self).
///
/// Dropping it (or [`shutdown`](Runtime::shutdown)) stops every loop:
/// flows still running are cancelled on their own loops (their cancel
/// callbacks run there), flows spawned but not started resolve to
/// `Canceled`, and the threads are joined. Dropped on one of its own loop
/// threads (from inside a step), it joins the others and that thread
/// ends by itself once its current turn returns; a flow on another of its
/// loops must then not be blocked waiting for a flow of this one, or the
/// join waits for good.
pub struct Runtime {
    /// Everything but shutting down is what a handle does.
    handle: RuntimeHandle,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("loops", &self.loops())
            .finish_non_exhaustive()
    }
}

/// One loop's counters, from [`Runtime::stats`]. Each loop publishes them
/// after every turn (`flows` also as it starts each flow), so they are
/// recent, not an atomic snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoopStats {
    /// The loop's index, `0..loops`.
    pub index: usize,
    /// Whether its thread is pinned to a core.
    pub pin: PinStatus,
    /// Flows running on it now.
    pub flows: usize,
    /// Steps it has executed.
    pub steps: u64,
    /// Timers pending on it.
    pub timers: usize,
    /// Messages from other threads waiting in its inbox.
    pub inbox: usize,
    /// Root flows spawned on the runtime (`spawn`, `execute`, ...) that
    /// it has started, its own and stolen ones; a flow cancelled before it
    /// started is not counted, nor a flow started through its
    /// [`loop_handle`](Runtime::loop_handle) (it counts in `flows` while
    /// it runs).
    pub started: u64,
    /// Flows it took from peer loops' queues, counted when taken: a
    /// steal takes a batch, whose rest waits in this loop's own queue and
    /// may be taken again by another loop (counted there too), so this can
    /// exceed `started` and the loops' sum can exceed the flows stolen.
    pub stolen: u64,
    /// Slots of sync objects (`Mutex`, `Throttle`, `Limiter`) this loop
    /// handed to waiters queued on this same loop: the waiter goes on in
    /// this loop's next turn.
    pub handovers_local: u64,
    /// Slots this loop handed to waiters queued on another loop: each one
    /// resumes its waiter through that loop's inbox, a cross-thread hop.
    pub handovers_crossed: u64,
}

impl Runtime {
    /// A runtime with the defaults: one loop per available core, threads
    /// pinned to cores. Same as `Runtime::builder().build()`.
    ///
    /// ```
    /// use futoin_asyncsteps::runtime::Runtime;
    /// let rt = Runtime::new()?;
    /// assert!(rt.loops() >= 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> io::Result<Self> {
        Builder::new().build()
    }

    /// Configures a runtime; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    fn from_parts(core: Arc<Core>, threads: Vec<JoinHandle<()>>) -> Self {
        Runtime {
            handle: RuntimeHandle { core },
            threads,
        }
    }

    /// Starts a root flow from any thread and returns its result as a
    /// [`Promise`]: wait for it blocking, `.await` it, or cancel it from any
    /// thread. See the [module docs](self) for which loop runs it.
    pub fn spawn<T: FromArgs>(&self, root: AsyncSteps) -> Promise<T> {
        self.handle.spawn(root)
    }

    /// Starts a root flow nobody waits for; an error it ends with goes to
    /// the loop's unhandled-error hook ([`Builder::on_unhandled_error`]).
    ///
    /// ```
    /// use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
    /// use std::sync::mpsc;
    ///
    /// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// let mut root = AsyncSteps::new();
    /// root.add(move |_, ()| {
    ///     tx.send("ran").unwrap();
    ///     Ok(())
    /// });
    /// rt.execute(root);
    /// assert_eq!(rx.recv().unwrap(), "ran");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn execute(&self, root: AsyncSteps) {
        self.handle.execute(root)
    }

    /// Like [`spawn`](Runtime::spawn), but always onto the loop with the
    /// fewest flows (running or waiting to start), even when called from a
    /// loop thread: for an accept loop that hands each connection to a flow
    /// of its own. Unlike a spawned flow, it is never stolen by another
    /// loop before it starts: it runs where it was placed, so a burst
    /// stays spread evenly (and it waits for that loop, should a step there
    /// hold its thread).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, runtime::Runtime};
    ///
    /// let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
    /// let h = rt.handle();
    /// let mut root = AsyncSteps::new();
    /// root.add(move |s, ()| {
    ///     // From inside a step: these would all start on this loop with
    ///     // `spawn`; `spawn_balanced` spreads them.
    ///     let ps: Vec<_> = (0..4)
    ///         .map(|i| {
    ///             let mut conn = AsyncSteps::new();
    ///             conn.add(move |s, ()| s.success((i,)));
    ///             h.spawn_balanced::<(i32,)>(conn)
    ///         })
    ///         .collect();
    ///     s.await_future(async move {
    ///         let mut sum = 0;
    ///         for p in ps {
    ///             sum += p.await?.0;
    ///         }
    ///         Ok::<_, futoin_asyncsteps::Error>((sum,))
    ///     });
    ///     Ok(())
    /// });
    /// assert_eq!(rt.spawn::<(i32,)>(root).wait()?.0, 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_balanced<T: FromArgs>(&self, root: AsyncSteps) -> Promise<T> {
        self.handle.spawn_balanced(root)
    }

    /// [`spawn_balanced`](Runtime::spawn_balanced) for a flow nobody waits for.
    ///
    /// ```
    /// use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
    /// use std::sync::mpsc;
    ///
    /// let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// for i in 0..4 {
    ///     let tx = tx.clone();
    ///     let mut root = AsyncSteps::new();
    ///     root.add(move |_, ()| {
    ///         tx.send(i).unwrap();
    ///         Ok(())
    ///     });
    ///     rt.execute_balanced(root);
    /// }
    /// let mut got: Vec<i32> = rx.iter().take(4).collect();
    /// got.sort();
    /// assert_eq!(got, [0, 1, 2, 3]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn execute_balanced(&self, root: AsyncSteps) {
        self.handle.execute_balanced(root)
    }

    /// A `Clone + Send + Sync` handle that spawns on this runtime from
    /// anywhere, including from inside a step.
    pub fn handle(&self) -> RuntimeHandle {
        self.handle.clone()
    }

    /// Number of loops.
    pub fn loops(&self) -> usize {
        self.handle.loops()
    }

    /// A handle to post callbacks to loop `i` (spec `immediate`/`deferred`
    /// on a foreign loop); `None` when `i >= loops()`.
    /// A [`ToolHandle::stop`] sent through it is ignored: the loops of a
    /// runtime stop with the runtime ([`Runtime::shutdown`] or drop).
    ///
    /// ```
    /// use futoin_asyncsteps::runtime::Runtime;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// let h = rt.loop_handle(1).unwrap();
    /// assert!(!h.is_same_thread());
    /// h.deferred(Duration::from_millis(1), move |tool| {
    ///     tx.send(tool.is_same_thread()).unwrap();
    /// });
    /// assert!(rx.recv().unwrap());
    /// assert!(rt.loop_handle(2).is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn loop_handle(&self, i: usize) -> Option<ToolHandle> {
        self.handle.loop_handle(i)
    }

    /// Per-loop counters, in loop order.
    ///
    /// ```
    /// use futoin_asyncsteps::runtime::Runtime;
    /// let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
    /// let st = rt.stats();
    /// assert_eq!(st.len(), 2);
    /// assert_eq!((st[1].index, st[1].flows, st[1].started), (1, 0, 0));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stats(&self) -> Vec<LoopStats> {
        self.handle.stats()
    }

    /// Stops the runtime now (what dropping it does): cancels running
    /// flows on their loops, answers flows not started with `Canceled`,
    /// joins the threads (all but the caller's, when called on one of
    /// them).
    ///
    /// ```
    /// use futoin_asyncsteps::{error::codes, runtime::Runtime, AsyncSteps};
    ///
    /// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     s.wait_external(); // waits forever
    ///     Ok(())
    /// });
    /// let p = rt.spawn::<()>(root);
    /// rt.shutdown();
    /// assert_eq!(p.wait().unwrap_err().code(), codes::CANCELED);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Blocks until no flow runs on any loop and none waits to start in
    /// the runtime's queues (a flow sent to one loop through its
    /// [`loop_handle`](Runtime::loop_handle) counts once that loop has
    /// taken it), checked each time a loop ends a turn with no flow left.
    /// New flows may still be spawned meanwhile, from anywhere.
    ///
    /// Called on one of the runtime's own loop threads (from a step), it
    /// returns `false` at once: the flow calling it runs there, so the
    /// runtime cannot become idle while it waits. Otherwise `true`.
    ///
    /// ```
    /// use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
    /// let done = Arc::new(AtomicUsize::new(0));
    /// for _ in 0..10 {
    ///     let mut root = AsyncSteps::new();
    ///     let d = done.clone();
    ///     root.add(|s, ()| {
    ///         s.sleep(Duration::from_millis(5));
    ///         Ok(())
    ///     });
    ///     root.add(move |_, ()| {
    ///         d.fetch_add(1, Ordering::Relaxed);
    ///         Ok(())
    ///     });
    ///     rt.execute(root); // fire and forget
    /// }
    /// assert!(rt.wait_idle());
    /// assert_eq!(done.load(Ordering::Relaxed), 10);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn wait_idle(&self) -> bool {
        let core = &self.handle.core;
        if driver::current_loop(core.id).is_some() {
            return false;
        }
        core.wait_quiet(Core::idle, None)
    }

    /// Stops gracefully: takes no new flow (a spawn from now on resolves
    /// to `Canceled`, as do flows spawned before that have not started),
    /// lets the running flows end within `timeout`, then stops as
    /// [`shutdown`](Runtime::shutdown) does, cancelling what still runs.
    /// Returns `true` when every running flow ended in time. (A flow sent
    /// to one loop through its [`loop_handle`](Runtime::loop_handle) goes
    /// to that loop directly: it still starts, and counts as running.)
    ///
    /// Called on one of the runtime's own loop threads (from a step), it
    /// cannot wait for the flow calling it: it stops at once and returns
    /// `false`.
    ///
    /// ```
    /// use futoin_asyncsteps::{error::codes, runtime::Runtime, AsyncSteps};
    /// use std::time::Duration;
    ///
    /// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
    /// let (started, running) = std::sync::mpsc::channel();
    /// let mut quick = AsyncSteps::new();
    /// let tx = started.clone();
    /// quick.add(move |s, ()| {
    ///     tx.send(()).unwrap();
    ///     s.sleep(Duration::from_millis(10));
    ///     Ok(())
    /// });
    /// let quick = rt.spawn::<()>(quick);
    /// let mut stuck = AsyncSteps::new();
    /// stuck.add(move |s, ()| {
    ///     started.send(()).unwrap();
    ///     s.wait_external(); // never completed
    ///     Ok(())
    /// });
    /// let stuck = rt.spawn::<()>(stuck);
    /// running.recv().unwrap();
    /// running.recv().unwrap(); // both run
    /// // The quick one ends within the time given; the stuck one is cancelled.
    /// assert!(!rt.shutdown_timeout(Duration::from_millis(200)));
    /// assert!(quick.wait().is_ok());
    /// assert_eq!(stuck.wait().unwrap_err().code(), codes::CANCELED);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn shutdown_timeout(mut self, timeout: std::time::Duration) -> bool {
        let core = self.handle.core.clone();
        core.close();
        let ended = driver::current_loop(core.id).is_none()
            && core.wait_quiet(
                Core::no_flows,
                std::time::Instant::now().checked_add(timeout),
            );
        self.stop();
        ended
    }

    fn stop(&mut self) {
        let core = &self.handle.core;
        core.close();
        for l in &core.loops {
            l.inbox.send(Msg::Stop);
        }
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // Dropped on one of its own loops (from inside a step): that
            // thread ends by itself once the current turn returns.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        core.drain_injector();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
        }
    }
}

/// Spawns on a [`Runtime`] from anywhere; from [`Runtime::handle`].
///
/// After the runtime has shut down, spawned flows resolve to `Canceled`.
///
/// ```
/// use futoin_asyncsteps::{runtime::Runtime, AsyncSteps};
///
/// let rt = Runtime::builder().loops(2).pin_threads(false).build()?;
/// let h = rt.handle();
/// let mut root = AsyncSteps::new();
/// root.add(move |s, ()| {
///     // Spawned on a loop thread: starts on this same loop by default.
///     let mut child = AsyncSteps::new();
///     child.add(|s, ()| s.success((1u8,)));
///     let p = h.spawn::<(u8,)>(child);
///     s.await_future(async move { p.await.map(|(v,)| (v + 1,)) });
///     Ok(())
/// });
/// let (v,): (u8,) = rt.spawn(root).wait()?;
/// assert_eq!(v, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RuntimeHandle {
    core: Arc<Core>,
}

impl std::fmt::Debug for RuntimeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeHandle")
            .field("loops", &self.core.loops.len())
            .finish_non_exhaustive()
    }
}

impl RuntimeHandle {
    /// See [`Runtime::spawn`].
    pub fn spawn<T: FromArgs>(&self, root: AsyncSteps) -> Promise<T> {
        self.promise(root, Core::submit)
    }

    /// See [`Runtime::execute`].
    pub fn execute(&self, root: AsyncSteps) {
        self.core.submit(Job::new(root, None));
    }

    /// See [`Runtime::spawn_balanced`].
    pub fn spawn_balanced<T: FromArgs>(&self, root: AsyncSteps) -> Promise<T> {
        self.promise(root, Core::submit_balanced)
    }

    /// See [`Runtime::execute_balanced`].
    pub fn execute_balanced(&self, root: AsyncSteps) {
        self.core.submit_balanced(Job::new(root, None));
    }

    /// Number of loops.
    pub fn loops(&self) -> usize {
        self.core.loops.len()
    }

    /// See [`Runtime::loop_handle`].
    pub fn loop_handle(&self, i: usize) -> Option<ToolHandle> {
        self.core.loops.get(i).map(|l| ToolHandle {
            inbox: l.inbox.clone(),
        })
    }

    /// See [`Runtime::stats`].
    pub fn stats(&self) -> Vec<LoopStats> {
        self.core
            .loops
            .iter()
            .enumerate()
            .map(|(index, l)| {
                let c = &l.counters;
                LoopStats {
                    index,
                    pin: l.pin.clone(),
                    flows: c.flows.load(Ordering::Relaxed),
                    steps: c.steps.load(Ordering::Relaxed),
                    timers: c.timers.load(Ordering::Relaxed),
                    inbox: l.inbox.remote_depth(),
                    started: c.started.load(Ordering::Relaxed),
                    stolen: c.stolen.load(Ordering::Relaxed),
                    handovers_local: c.handovers_local.load(Ordering::Relaxed),
                    handovers_crossed: c.handovers_crossed.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// The index of the loop the calling thread runs, if it is one of this
    /// runtime's loop threads.
    ///
    /// ```
    /// use futoin_asyncsteps::runtime::Runtime;
    /// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
    /// assert_eq!(rt.handle().current_loop(), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn current_loop(&self) -> Option<usize> {
        driver::current_loop(self.core.id)
    }

    /// True once the runtime has begun to shut down.
    ///
    /// ```
    /// use futoin_asyncsteps::runtime::Runtime;
    /// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
    /// let h = rt.handle();
    /// assert!(!h.is_closed());
    /// rt.shutdown();
    /// assert!(h.is_closed());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.core.closing.load(Ordering::Acquire)
    }

    /// Submits `root` with `submit` and returns the promise of its result.
    fn promise<T: FromArgs>(&self, root: AsyncSteps, submit: fn(&Core, Job)) -> Promise<T> {
        let c = Completion::for_runtime(self.core.id);
        submit(&self.core, Job::new(root, Some(c.clone())));
        Promise::new(c)
    }
}
