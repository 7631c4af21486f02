//! [`Builder`]: how many loops, core pinning, thread names, spin.

use crate::error::Error;
use crate::runtime::driver::{self, Core, LoopRef};
use crate::runtime::Runtime;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A hook for errors no one waits for, shared by all loops.
pub(crate) type SharedHook = Arc<dyn Fn(&Error) + Send + Sync>;

/// What became of pinning one loop thread to a core; see
/// [`Runtime::stats`] and [`LoopStats::pin`](crate::runtime::LoopStats::pin).
///
/// A failed pin is not fatal: the loop runs unpinned and says why here.
///
/// ```
/// use futoin_asyncsteps::runtime::{PinStatus, Runtime};
/// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
/// assert_eq!(rt.stats()[0].pin, PinStatus::Off);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PinStatus {
    /// Pinning was turned off in the builder.
    Off,
    /// Pinned to the core with this id.
    Pinned(usize),
    /// Pinning was asked for and failed; the loop runs unpinned.
    Failed(String),
}

/// Configures a [`Runtime`]; from [`Runtime::builder`].
///
/// Defaults: one loop per available core, each thread pinned to its own
/// core, threads named `futoin-loop-<n>`, an idle loop spinning for 10 µs
/// before it parks (see [`spin`](Builder::spin)).
///
/// ```
/// use futoin_asyncsteps::runtime::Runtime;
/// use std::time::Duration;
///
/// let rt = Runtime::builder()
///     .loops(2)
///     .pin_threads(false)
///     .thread_name("worker")
///     .spin(Duration::from_micros(20))
///     .build()?;
/// assert_eq!(rt.loops(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Builder {
    loops: Option<usize>,
    pin: bool,
    name: String,
    spin: Duration,
    hook: Option<SharedHook>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("loops", &self.loops)
            .field("pin", &self.pin)
            .field("name", &self.name)
            .field("spin", &self.spin)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

/// An idle loop's spin before it parks, unless set (see [`Builder::spin`]).
const DEFAULT_SPIN: Duration = Duration::from_micros(10);

/// Hard cap on loops: far above any core count, low enough that a typo
/// (say `loops(usize::MAX)`) fails cleanly instead of exhausting threads.
const MAX_LOOPS: usize = 1024;

/// The default loop count on a machine of `cores` cores: one per core, at
/// most [`MAX_LOOPS`] (a larger host gets that many rather than an error).
fn default_loops(cores: usize) -> usize {
    cores.clamp(1, MAX_LOOPS)
}

impl Builder {
    /// The defaults (see the type's docs).
    pub fn new() -> Self {
        Builder {
            loops: None,
            pin: true,
            name: "futoin-loop".to_owned(),
            spin: DEFAULT_SPIN,
            hook: None,
        }
    }

    /// Number of loops (threads); default: one per available core, at
    /// most 1024. `build` refuses 0 and more than 1024.
    pub fn loops(mut self, n: usize) -> Self {
        self.loops = Some(n);
        self
    }

    /// Pins loop `i` to core `i` (modulo the core count); on by default.
    pub fn pin_threads(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }

    /// Thread name prefix; loop `i` is named `<prefix>-<i>`.
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.name = prefix.into();
        self
    }

    /// How long an idle loop polls for new work before it parks in the OS.
    ///
    /// A flow never leaves its loop, so flows on two loops that hand work
    /// to each other (a ping-pong, a `Mutex` passed between them, a step
    /// completed from another loop) need the other loop awake. Waking a
    /// parked thread costs system calls on both sides and the kernel's
    /// wake-up latency (6 to 80 µs on a VM); a loop still spinning picks
    /// the message up in well under a microsecond. Default: 10 µs, enough
    /// for such exchanges (a cross-loop round trip is about 1 µs), at a
    /// cost of at most 10 µs of CPU each time a loop runs out of work.
    /// `Duration::ZERO` parks at once.
    ///
    /// A loop that watches I/O sources never spins: the spin looks only at
    /// the inbox and the job queues, and an I/O event arriving meanwhile
    /// would wait for its end. Such a loop sleeps in its poll at once.
    pub fn spin(mut self, d: Duration) -> Self {
        self.spin = d;
        self
    }

    /// Replaces what happens to an error no one waits for (a flow started
    /// with [`Runtime::execute`] that fails, or a panicking loop callback)
    /// on every loop. The default writes one line to stderr.
    ///
    /// ```
    /// use futoin_asyncsteps::{runtime::Runtime, AsyncSteps, Error};
    /// use std::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// let rt = Runtime::builder()
    ///     .loops(1)
    ///     .pin_threads(false)
    ///     .on_unhandled_error(move |e| {
    ///         let _ = tx.send(e.code().to_owned());
    ///     })
    ///     .build()?;
    /// let mut root = AsyncSteps::new();
    /// root.add(|_, ()| Err(Error::with_info("Oops", "nobody waits for this")));
    /// rt.execute(root);
    /// assert_eq!(rx.recv().unwrap(), "Oops");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn on_unhandled_error(mut self, hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Starts the loops. Fails when the loop count is out of range, the
    /// thread name holds a NUL byte, a thread cannot be spawned, or a
    /// loop's poll instance cannot be created; loops started so far are
    /// stopped and joined first.
    pub fn build(self) -> io::Result<Runtime> {
        crate::util::thread::check_thread_name(&self.name)?;
        let n = match self.loops {
            Some(n) => n,
            None => default_loops(std::thread::available_parallelism().map_or(1, |n| n.get())),
        };
        if n == 0 || n > MAX_LOOPS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("Runtime: loops must be 1..={MAX_LOOPS}, got {n}"),
            ));
        }
        let cores = if self.pin {
            core_affinity::get_core_ids().filter(|c| !c.is_empty())
        } else {
            None
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut threads = Vec::with_capacity(n);
        let mut go = Vec::with_capacity(n);
        for i in 0..n {
            let pin = match (&cores, self.pin) {
                (_, false) => driver::Pin::Off,
                (Some(c), true) => driver::Pin::Core(c[i % c.len()]),
                (None, true) => driver::Pin::Unknown,
            };
            let (go_tx, go_rx) = mpsc::sync_channel(1);
            let ready = ready_tx.clone();
            let hook = self.hook.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{i}", self.name))
                .spawn(move || driver::thread_main(i, pin, hook, ready, go_rx));
            match spawned {
                Ok(t) => {
                    threads.push(t);
                    go.push(go_tx);
                }
                Err(e) => {
                    abort(go, threads);
                    return Err(e);
                }
            }
        }
        drop(ready_tx);
        let mut slots: Vec<Option<LoopRef>> = (0..n).map(|_| None).collect();
        for _ in 0..n {
            match ready_rx.recv() {
                Ok((i, Ok(r))) => slots[i] = Some(r),
                Ok((_, Err(e))) => {
                    abort(go, threads);
                    return Err(e);
                }
                Err(_) => {
                    abort(go, threads);
                    return Err(io::Error::other("a loop thread ended while starting"));
                }
            }
        }
        let loops: Vec<LoopRef> = slots.into_iter().flatten().collect();
        let core = Arc::new(Core {
            id: driver::next_runtime_id(),
            loops,
            next_loop: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            next_wake: AtomicUsize::new(0),
            spin: self.spin,
            quiet: Default::default(),
        });
        for g in &go {
            // A thread that died after reporting ready is found at join.
            let _ = g.send(Some(core.clone()));
        }
        Ok(Runtime::from_parts(core, threads))
    }
}

/// Stops the loop threads of a failed build and joins them.
fn abort(go: Vec<mpsc::SyncSender<Option<Arc<Core>>>>, threads: Vec<std::thread::JoinHandle<()>>) {
    for g in go {
        let _ = g.send(None);
    }
    for t in threads {
        let _ = t.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_loop_count_is_one_per_core_up_to_the_cap() {
        assert_eq!(default_loops(0), 1);
        assert_eq!(default_loops(2), 2);
        assert_eq!(default_loops(MAX_LOOPS), MAX_LOOPS);
        assert_eq!(default_loops(4096), MAX_LOOPS);
    }

    #[test]
    fn loops_spin_10_us_unless_told_otherwise() {
        assert_eq!(Builder::new().spin, Duration::from_micros(10));
        assert_eq!(Builder::default().spin, DEFAULT_SPIN);
        let b = Builder::new().spin(Duration::ZERO);
        assert_eq!(b.spin, Duration::ZERO);
        assert!(format!("{b:?}").contains("spin: 0ns"), "{b:?}");
    }
}
