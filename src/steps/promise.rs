//! The result of a root flow: [`Promise`], and the [`Completion`] slot
//! the flow's loop fills.

use crate::args::{Args, FromArgs};
use crate::error::Error;
use crate::steps::message::FlowMsg;
use crate::steps::scheduler::{FlowKey, Scheduler};
use crate::tool::{owns_loop, panic_error, Inbox};
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

thread_local! {
    /// The runtime whose loop runs on this thread (its id; 0: none).
    static RUNTIME: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as a loop thread of runtime `id` (0: of none):
/// the runtime sets it on each of its loop threads. A promise of a flow
/// no loop has started yet refuses to block such a thread (one of them may
/// be the loop that is to start it).
pub(crate) fn set_thread_runtime(id: usize) {
    let _ = RUNTIME.try_with(|r| r.set(id));
}

/// The runtime whose loop runs on the calling thread, if any (see
/// [`set_thread_runtime`]).
pub(crate) fn thread_runtime() -> Option<usize> {
    RUNTIME.try_with(Cell::get).ok().filter(|&id| id != 0)
}

enum Slot {
    Pending(Option<Waker>),
    Done(Result<Args, Error>),
    Taken,
}

/// The result slot of a root flow started with `promise()`.
pub(crate) struct Completion {
    slot: Mutex<Slot>,
    cv: Condvar,
    /// The loop the flow was sent to, when known up front (`None` for a
    /// runtime spawn, which any loop may start).
    target: Option<Arc<Inbox<Scheduler>>>,
    /// The loop that started the flow, and its key there.
    home: OnceLock<(Arc<Inbox<Scheduler>>, FlowKey)>,
    /// For a runtime spawn: the runtime's id (its loops may start it).
    runtime: Option<usize>,
    cancel: AtomicBool,
}

impl Completion {
    pub(crate) fn new(target: Option<Arc<Inbox<Scheduler>>>) -> Arc<Self> {
        Self::with(target, None)
    }

    /// For a flow spawned on runtime `id`: one of its loops will start it.
    pub(crate) fn for_runtime(id: usize) -> Arc<Self> {
        Self::with(None, Some(id))
    }

    fn with(target: Option<Arc<Inbox<Scheduler>>>, runtime: Option<usize>) -> Arc<Self> {
        Arc::new(Completion {
            slot: Mutex::new(Slot::Pending(None)),
            cv: Condvar::new(),
            target,
            home: OnceLock::new(),
            runtime,
            cancel: AtomicBool::new(false),
        })
    }

    /// Records the loop and key of the started flow; a cancel requested
    /// before that is sent now.
    pub(crate) fn bind(&self, inbox: &Arc<Inbox<Scheduler>>, key: FlowKey) {
        let _ = self.home.set((inbox.clone(), key));
        // Pairs with the fence in `request_cancel`: at least one side sees
        // the other's write, so a cancel racing the start is never lost (a
        // second Cancel message for the same flow is harmless).
        fence(Ordering::SeqCst);
        if self.cancel.load(Ordering::Relaxed) {
            inbox.send(FlowMsg::Cancel(key).into_msg());
        }
    }

    /// True when a cancel was requested (the flow may not have started).
    pub(crate) fn cancel_requested(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }

    /// True on the thread of the loop that runs (or will run) the flow; for
    /// a runtime flow no loop has started yet, true on any of that
    /// runtime's loop threads (one of them may be the one to start it).
    fn on_home_thread(&self) -> bool {
        match self.home.get().map(|h| &h.0).or(self.target.as_ref()) {
            Some(s) => s.is_same_thread(),
            None => match self.runtime {
                Some(id) => thread_runtime() == Some(id),
                None => owns_loop(),
            },
        }
    }

    pub(crate) fn complete(&self, r: Result<Args, Error>) {
        let prev = std::mem::replace(&mut *self.slot.lock(), Slot::Done(r));
        // Wake after releasing the lock: a waker may look at the promise.
        self.cv.notify_all();
        if let Slot::Pending(Some(w)) = prev {
            // A user's waker runs here, on the loop (or the completing
            // thread): its panic is reported and the caller goes on.
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| w.wake())) {
                let why = panic_error("a promise's waker", p);
                eprintln!("futoin-asyncsteps: {why} (ignored)");
            }
        }
    }

    fn request_cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if let Some((inbox, k)) = self.home.get() {
            inbox.send(FlowMsg::Cancel(*k).into_msg());
        }
    }

    fn take(&self) -> Option<Result<Args, Error>> {
        let mut s = self.slot.lock();
        match std::mem::replace(&mut *s, Slot::Taken) {
            Slot::Done(r) => Some(r),
            Slot::Taken => Some(Err(Error::internal("promise result already taken"))),
            p @ Slot::Pending(_) => {
                *s = p;
                None
            }
        }
    }
}

/// The result of a root flow (spec `promise()`): a `Future`, a blocking
/// [`wait`](Promise::wait), and [`cancel`](Promise::cancel) from any thread.
///
/// `T` is the typed result: the final success args converted with
/// [`FromArgs`] (a mismatch is an `InternalError`). A cancelled flow gives
/// [`codes::CANCELED`](crate::error::codes::CANCELED).
///
/// Dropping the promise detaches the flow: it runs on, and an error it
/// ends with goes to the loop's unhandled-error hook (or stderr), as for a
/// flow started with `execute`.
///
/// ```
/// use futoin_asyncsteps::{AsyncTool, AsyncSteps};
/// let mut tool = AsyncTool::new().unwrap();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| s.success(("done".to_string(),)));
/// let p = root.promise(&mut tool);
/// let (msg,): (String,) = tool.block_on(p).unwrap();
/// assert_eq!(msg, "done");
/// ```
#[must_use = "dropping a promise detaches its flow: it runs on, and an error it ends with goes to the loop's unhandled-error hook"]
pub struct Promise<T: FromArgs = Args> {
    comp: Arc<Completion>,
    _t: PhantomData<fn() -> T>,
}

impl<T: FromArgs> std::fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promise")
            .field("done", &self.is_done())
            .finish()
    }
}

impl<T: FromArgs> Promise<T> {
    pub(crate) fn new(comp: Arc<Completion>) -> Self {
        Promise {
            comp,
            _t: PhantomData,
        }
    }

    fn convert(r: Result<Args, Error>) -> Result<T, Error> {
        let mut a = r?;
        T::from_args(&mut a).map_err(|e| crate::args::promise_mismatch::<T>(e, &a))
    }

    /// Cancels the flow (spec root `cancel()`); safe from any thread, before
    /// or after it started. The promise then resolves to `Canceled`.
    pub fn cancel(&self) {
        self.comp.request_cancel();
    }

    /// True on the thread of the loop that runs the flow (spec
    /// `is_same_thread`); false before a loop has started it.
    ///
    /// ```
    /// use futoin_asyncsteps::{runtime::Runtime, AsyncSteps, TestTool};
    ///
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| s.success(()));
    /// let mut tool = TestTool::new();
    /// let here = root.clone().promise::<()>(&mut tool);
    /// assert!(here.is_same_thread()); // this thread's loop runs it
    /// let rt = Runtime::builder().loops(1).pin_threads(false).build()?;
    /// let there = rt.spawn::<()>(root);
    /// assert!(!there.is_same_thread()); // a loop thread of the runtime
    /// there.wait()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_same_thread(&self) -> bool {
        self.comp
            .home
            .get()
            .is_some_and(|(s, _)| s.is_same_thread())
    }

    /// The loop the flow runs on, or is sent to; `None` for a runtime flow
    /// no loop has started yet.
    fn home(&self) -> Option<&Arc<Inbox<Scheduler>>> {
        self.comp
            .home
            .get()
            .map(|h| &h.0)
            .or(self.comp.target.as_ref())
    }

    /// The `InternalError` a `block_on` of loop `own` gives when the flow
    /// is not done and runs (or is to run) on a loop of the calling thread
    /// other than `own`: a thread drives one loop at a time, so blocking
    /// on it from `own` would never return. A runtime flow that no loop
    /// has started yet counts as such when the calling thread is one of
    /// that runtime's loops (it may be queued on this very loop, which
    /// cannot start it while blocked), as for [`wait`](Self::wait). Both
    /// tools' `block_on` ask here.
    pub(crate) fn refuse_if_stuck_behind(&self, own: &Arc<Inbox<Scheduler>>) -> Result<(), Error> {
        let stuck = match self.home() {
            Some(h) => !Arc::ptr_eq(h, own) && h.is_same_thread(),
            None => (self.comp.runtime).is_some_and(|id| thread_runtime() == Some(id)),
        };
        if stuck && !self.is_done() {
            return Err(Error::internal(
                "block_on(): the flow runs (or is queued to run) on another loop of \
                 this thread, which this call does not drive; block on that loop, or \
                 await the promise in a step (s.await_future)",
            ));
        }
        Ok(())
    }

    /// True when the flow is (or will be) on a loop other than `own`: a
    /// runtime's, or another thread's.
    pub(crate) fn elsewhere(&self, own: &Arc<Inbox<Scheduler>>) -> bool {
        match self.home() {
            Some(h) => !Arc::ptr_eq(h, own),
            None => self.comp.runtime.is_some(),
        }
    }

    /// True once the flow has ended.
    pub fn is_done(&self) -> bool {
        !matches!(*self.comp.slot.lock(), Slot::Pending(_))
    }

    /// The result if the flow has ended, without blocking: `None` while it
    /// runs. The result is moved out: a later call (or an `.await` or
    /// [`wait`](Self::wait) after it) gives `InternalError` ("promise
    /// result already taken").
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, Promise, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| s.success((7u8,)));
    /// let mut p: Promise<(u8,)> = root.promise(&mut tool);
    /// assert!(p.try_take().is_none()); // not run yet
    /// tool.run_all();
    /// assert_eq!(p.try_take().unwrap().unwrap(), (7,));
    /// let again = p.try_take().unwrap().unwrap_err();
    /// assert_eq!(again.info(), Some("promise result already taken"));
    /// ```
    pub fn try_take(&mut self) -> Option<Result<T, Error>> {
        self.comp.take().map(Self::convert)
    }

    /// Blocks the calling thread until the flow ends. On the loop's own
    /// thread this would never return: it fails at once with an
    /// `InternalError`. There, inside a step, await the promise as a step
    /// with [`s.await_future(promise)`](crate::Step::await_future); outside
    /// steps, run the loop until it is done with
    /// [`AsyncTool::block_on`](crate::AsyncTool::block_on) (or
    /// [`TestTool::block_on`](crate::TestTool::block_on)).
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, Promise, TestTool};
    /// let mut tool = TestTool::new();
    /// let mut inner = AsyncSteps::new();
    /// inner.add(|s, ()| s.success((7u8,)));
    /// let p: Promise<(u8,)> = inner.promise(&mut tool);
    ///
    /// let mut outer = AsyncSteps::new();
    /// let p = futoin_asyncsteps::TakeOnce::new(p);
    /// outer.add(move |s, ()| {
    ///     s.await_future(p.take()?); // not p.wait(): that would deadlock
    ///     Ok(())
    /// });
    /// let done = outer.promise(&mut tool);
    /// assert_eq!(tool.block_on::<(u8,)>(done).unwrap(), (7,));
    /// ```
    pub fn wait(self) -> Result<T, Error> {
        if !self.is_done() && self.comp.on_home_thread() {
            return Err(Error::internal(
                "Promise::wait() on the loop's own thread would deadlock: inside a step use \
                 s.await_future(promise), outside one AsyncTool::block_on(promise)",
            ));
        }
        let mut s = self.comp.slot.lock();
        while matches!(*s, Slot::Pending(_)) {
            self.comp.cv.wait(&mut s);
        }
        drop(s);
        Self::convert(self.comp.take().expect("done"))
    }
}

impl<T: FromArgs> Future for Promise<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.comp.slot.lock();
        match &mut *s {
            Slot::Pending(w) => {
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            _ => {
                drop(s);
                Poll::Ready(Self::convert(self.comp.take().expect("done")))
            }
        }
    }
}
