//! Handles that reach a flow from outside: external completion of a waiting
//! step, the root's result (promise), root cancel, and future wakers.

use crate::args::{Args, FromArgs, IntoArgs};
use crate::error::Error;
use crate::tool::scheduler::FlowKey;
use crate::tool::shared::{Msg, Packed, Shared};
use parking_lot::{Condvar, Mutex};
use slotmap::{Key, KeyData};
use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

/// A [`WaitToken`] whose step still waits.
const OPEN: u8 = 0;
/// A successful external completion (through a handle) won the wait.
const BY_HANDLE: u8 = 1;
/// The engine ended the wait (or the step ended without it).
const BY_ENGINE: u8 = 2;
/// A failing external completion won the wait.
const BY_HANDLE_ERR: u8 = 3;

/// Exactly-once arbiter between an external completion and the engine
/// ending the step another way (timeout, cancel, error unwinding).
///
/// Tokens are pooled per loop and readdressed for each waiting step. The
/// address (flow, strand, seq) is kept in relaxed atomics, so a token can
/// be readdressed through a shared `Arc` once the loop knows it is the
/// only owner left; `Arc::get_mut` would prove that with a
/// compare-and-swap on every reuse and again on every release. No
/// `Weak` to a token is ever made, so a strong count of one is sole
/// ownership (see [`release`](WaitToken::release)).
pub(crate) struct WaitToken {
    /// [`OPEN`], then who ended the wait and how: [`BY_HANDLE`],
    /// [`BY_HANDLE_ERR`] or [`BY_ENGINE`].
    state: AtomicU8,
    shared: Arc<Shared>,
    /// The flow's key (`KeyData::as_ffi`).
    flow: AtomicU64,
    strand: AtomicU32,
    seq: AtomicU32,
}

impl WaitToken {
    pub(crate) fn new(shared: Arc<Shared>, flow: FlowKey, strand: u32, seq: u32) -> Arc<Self> {
        Arc::new(WaitToken {
            state: AtomicU8::new(OPEN),
            shared,
            flow: AtomicU64::new(flow.data().as_ffi()),
            strand: AtomicU32::new(strand),
            seq: AtomicU32::new(seq),
        })
    }

    /// A token for step `seq` of `strand` in `flow`, reused from the loop's
    /// pool when one is free (no allocation on the hot path).
    pub(crate) fn acquire(
        pool: &mut Vec<Arc<Self>>,
        shared: &Arc<Shared>,
        flow: FlowKey,
        strand: u32,
        seq: u32,
    ) -> Arc<Self> {
        match pool.pop() {
            Some(t) => {
                // Pooled tokens are solely owned (see `release`): nothing
                // else reads these until a handle to the new step exists.
                debug_assert_eq!(Arc::strong_count(&t), 1, "a pooled token is shared");
                debug_assert!(Arc::ptr_eq(&t.shared, shared), "a token of another loop");
                t.flow.store(flow.data().as_ffi(), Ordering::Relaxed);
                t.strand.store(strand, Ordering::Relaxed);
                t.seq.store(seq, Ordering::Relaxed);
                t.state.store(OPEN, Ordering::Relaxed);
                t
            }
            None => Self::new(shared.clone(), flow, strand, seq),
        }
    }

    /// Closes a token whose step ended and keeps it for reuse when no
    /// [`ExternalHandle`] refers to it any more (a live handle must keep
    /// seeing the closed token, so a shared one is never recycled).
    #[inline]
    pub(crate) fn release(this: Arc<Self>, pool: &mut Vec<Arc<Self>>, max: usize) {
        this.close();
        // A count of one is sole ownership: no `Weak` is ever made, and
        // only an owner can clone. The fence pairs with the release
        // decrement of the last handle dropped (on any thread): what that
        // handle read of the address happens before `acquire` rewrites it.
        if pool.len() < max && Arc::strong_count(&this) == 1 {
            fence(Ordering::Acquire);
            pool.push(this);
        }
    }

    /// Takes the right to end the step for the engine (timeout, cancel,
    /// unwinding, its own completion); true for the single winner.
    pub(crate) fn claim(&self) -> bool {
        self.state
            .compare_exchange(OPEN, BY_ENGINE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// [`claim`](Self::claim) for an external completion, successful or
    /// not.
    fn claim_by_handle(&self, ok: bool) -> bool {
        let to = if ok { BY_HANDLE } else { BY_HANDLE_ERR };
        self.state
            .compare_exchange(OPEN, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The step has ended: later external calls are refused. (Only a wait
    /// nobody claimed is still open: the check keeps a read-modify-write
    /// off the usual path, and the exchange keeps who claimed it.)
    pub(crate) fn close(&self) {
        if self.state.load(Ordering::Relaxed) == OPEN {
            let _ =
                self.state
                    .compare_exchange(OPEN, BY_ENGINE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The waiting step this token completes: (flow, strand, seq).
    fn address(&self) -> (FlowKey, u32, u32) {
        (
            KeyData::from_ffi(self.flow.load(Ordering::Relaxed)).into(),
            self.strand.load(Ordering::Relaxed),
            self.seq.load(Ordering::Relaxed),
        )
    }
}

/// Completes a step that waits for an external event; from
/// [`Step::wait_external`](crate::Step::wait_external).
///
/// `Send + Sync + Clone`: call [`success`](ExternalHandle::success) or
/// [`error`](ExternalHandle::error) once, from any thread. From another thread
/// the completion travels through the loop's inbox and never blocks. A call
/// after the step has ended (completed, timed out, cancelled) is refused with
/// an `InternalError` and leaves the flow untouched.
#[derive(Clone)]
pub struct ExternalHandle {
    token: Arc<WaitToken>,
}

impl std::fmt::Debug for ExternalHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalHandle")
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl ExternalHandle {
    pub(crate) fn new(token: Arc<WaitToken>) -> Self {
        ExternalHandle { token }
    }

    pub(crate) fn closed(shared: Arc<Shared>) -> Self {
        let t = WaitToken::new(shared, FlowKey::default(), 0, 0);
        t.close();
        ExternalHandle { token: t }
    }

    fn complete(&self, result: Result<Packed, Error>, what: &'static str) -> Result<(), Error> {
        if !self.token.claim_by_handle(result.is_ok()) {
            return Err(Error::internal(what));
        }
        let (flow, strand, seq) = self.token.address();
        self.token.shared.send(Msg::Complete {
            flow,
            strand,
            seq,
            result,
        });
        Ok(())
    }

    /// Completes the step with result args (spec `success` from outside).
    ///
    /// Fails with `InternalError` when the step has already been completed
    /// (by an earlier call on a handle of it) or has ended.
    pub fn success(&self, args: impl IntoArgs) -> Result<(), Error> {
        self.complete(
            Ok(Packed::new(args.into_args())),
            "external success(): the step has already completed or ended",
        )
    }

    /// Fails the step with `code` and `info` (spec `error` from outside).
    ///
    /// Fails with `InternalError` when the step has already been completed
    /// (by an earlier call on a handle of it) or has ended.
    ///
    /// ```
    /// use futoin_asyncsteps::{AsyncSteps, AsyncTool};
    /// let mut tool = AsyncTool::new().unwrap();
    /// let mut root = AsyncSteps::new();
    /// root.add(|s, ()| {
    ///     let h = s.wait_external();
    ///     std::thread::spawn(move || h.error("Unavailable", "backend down").unwrap());
    ///     Ok(())
    /// });
    /// let p = root.promise::<()>(&mut tool);
    /// let e = tool.block_on(p).unwrap_err();
    /// assert_eq!((e.code(), e.info()), ("Unavailable", Some("backend down")));
    /// ```
    pub fn error(
        &self,
        code: impl Into<Cow<'static, str>>,
        info: impl Into<Cow<'static, str>>,
    ) -> Result<(), Error> {
        self.complete(
            Err(Error::with_info(code, info)),
            "external error(): the step has already completed or ended",
        )
    }

    /// Fails the step with `e` as it is (an error without info stays
    /// without one).
    pub(crate) fn fail(&self, e: Error) -> Result<(), Error> {
        self.complete(
            Err(e),
            "external error(): the step has already completed or ended",
        )
    }

    /// True once a successful completion through a handle of the step was
    /// accepted (whatever became of the step after: a root cancel processed
    /// first still ends it, but the completion was taken).
    pub(crate) fn succeeded_by_handle(&self) -> bool {
        self.token.state.load(Ordering::Acquire) == BY_HANDLE
    }

    /// True while the step still waits and no completion has been sent.
    pub fn is_valid(&self) -> bool {
        self.token.state.load(Ordering::Acquire) == OPEN
    }
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
    target: Option<Arc<Shared>>,
    /// The loop that started the flow, and its key there.
    home: OnceLock<(Arc<Shared>, FlowKey)>,
    /// For a runtime spawn: the runtime's id (its loops may start it).
    runtime: Option<usize>,
    cancel: AtomicBool,
}

impl Completion {
    pub(crate) fn new(target: Option<Arc<Shared>>) -> Arc<Self> {
        Self::with(target, None)
    }

    /// For a flow spawned on runtime `id`: one of its loops will start it.
    pub(crate) fn for_runtime(id: usize) -> Arc<Self> {
        Self::with(None, Some(id))
    }

    fn with(target: Option<Arc<Shared>>, runtime: Option<usize>) -> Arc<Self> {
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
    pub(crate) fn bind(&self, shared: &Arc<Shared>, key: FlowKey) {
        let _ = self.home.set((shared.clone(), key));
        // Pairs with the fence in `request_cancel`: at least one side sees
        // the other's write, so a cancel racing the start is never lost (a
        // second Cancel message for the same flow is harmless).
        fence(Ordering::SeqCst);
        if self.cancel.load(Ordering::Relaxed) {
            shared.send(Msg::Cancel(key));
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
                Some(id) => crate::runtime::driver_current_loop(id).is_some(),
                None => crate::tool::shared::owns_loop(),
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
                let why = crate::tool::panic_error("a promise's waker", p);
                eprintln!("futoin-asyncsteps: {why} (ignored)");
            }
        }
    }

    fn request_cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if let Some((shared, k)) = self.home.get() {
            shared.send(Msg::Cancel(*k));
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
    fn home(&self) -> Option<&Arc<crate::tool::shared::Shared>> {
        self.comp
            .home
            .get()
            .map(|h| &h.0)
            .or(self.comp.target.as_ref())
    }

    /// True when the flow is not done and runs (or is to run) on a loop of
    /// the calling thread other than `own`: a thread drives one loop at a
    /// time, so blocking on it from `own` would never return. A runtime
    /// flow that no loop has started yet counts as such when the calling
    /// thread is one of that runtime's loops (it may be queued on this
    /// very loop, which cannot start it while blocked), as for
    /// [`wait`](Self::wait).
    pub(crate) fn stuck_behind(&self, own: &Arc<crate::tool::shared::Shared>) -> bool {
        let stuck = match self.home() {
            Some(h) => !Arc::ptr_eq(h, own) && h.is_same_thread(),
            None => (self.comp.runtime)
                .is_some_and(|id| crate::runtime::driver_current_loop(id).is_some()),
        };
        stuck && !self.is_done()
    }

    /// True when the flow is (or will be) on a loop other than `own`: a
    /// runtime's, or another thread's.
    pub(crate) fn elsewhere(&self, own: &Arc<crate::tool::shared::Shared>) -> bool {
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

/// A light handle of a started root flow: cancel it from any thread.
///
/// It does not keep the flow or its loop alive, and making or dropping
/// one costs no atomic operation (it names its loop by id, see
/// `cancel`): a flow started and left to run pays nothing for it.
///
/// ```
/// use futoin_asyncsteps::{AsyncSteps, TestTool};
/// let mut tool = TestTool::new();
/// let mut root = AsyncSteps::new();
/// root.add(|s, ()| { s.wait_external(); Ok(()) });
/// let h = root.execute(&mut tool);
/// tool.run_all();
/// assert_eq!(tool.stats().flows, 1);
/// h.cancel();
/// tool.run_all();
/// assert_eq!(tool.stats().flows, 0);
/// ```
#[derive(Clone)]
pub struct FlowHandle {
    /// The loop's `Shared::id` (looked up in `tool::registry`).
    pub(crate) loop_id: u64,
    /// The loop's owner thread (`Shared::owner_mark`).
    pub(crate) thread_mark: usize,
    pub(crate) key: FlowKey,
}

impl std::fmt::Debug for FlowHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowHandle").finish_non_exhaustive()
    }
}

impl FlowHandle {
    /// Cancels the flow (spec root `cancel()`): on its next turn its cancel
    /// callbacks run innermost first and it ends. It does not wait for
    /// that. A flow that has ended, or whose loop is gone, is left as it
    /// is.
    ///
    /// The loop is found through a process-wide table of live loops, read
    /// under a read lock that is written only while a loop is made or
    /// dropped.
    pub fn cancel(&self) {
        if let Some(shared) = crate::tool::registry::lookup(self.loop_id) {
            shared.send(Msg::Cancel(self.key));
        }
    }

    /// True on the flow's loop thread.
    pub fn is_same_thread(&self) -> bool {
        self.thread_mark == crate::util::thread::thread_mark()
    }
}

/// Wakes an awaiting step through its loop's inbox.
pub(crate) struct FutureWake {
    shared: Arc<Shared>,
    flow: FlowKey,
    strand: u32,
    seq: u32,
    queued: AtomicBool,
}

impl Wake for FutureWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.shared.send(Msg::Poll {
                flow: self.flow,
                strand: self.strand,
                seq: self.seq,
            });
        }
    }
}

impl FutureWake {
    pub(crate) fn new(shared: Arc<Shared>, flow: FlowKey, strand: u32, seq: u32) -> Arc<Self> {
        Arc::new(FutureWake {
            shared,
            flow,
            strand,
            seq,
            queued: AtomicBool::new(false),
        })
    }

    /// Allows the next wake to queue a poll again; called right before polling.
    pub(crate) fn rearm(&self) {
        self.queued.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> FlowKey {
        KeyData::from_ffi(n).into()
    }

    #[test]
    fn a_token_is_pooled_only_when_no_handle_holds_it_and_is_readdressed_on_reuse() {
        let shared = Shared::new();
        let mut pool = Vec::new();
        let t = WaitToken::acquire(&mut pool, &shared, key(1), 0, 1);
        let h = ExternalHandle::new(t.clone());
        WaitToken::release(t, &mut pool, 8);
        assert!(pool.is_empty(), "a live handle keeps its token");
        assert!(!h.is_valid(), "the handle sees its step ended");

        let t = WaitToken::acquire(&mut pool, &shared, key(2), 3, 4);
        let first = Arc::as_ptr(&t);
        WaitToken::release(t, &mut pool, 8);
        assert_eq!(pool.len(), 1);
        let t = WaitToken::acquire(&mut pool, &shared, key(5), 6, 7);
        assert!(pool.is_empty());
        assert_eq!(Arc::as_ptr(&t), first, "the pooled token is reused");
        assert_eq!(t.address(), (key(5), 6, 7));
        let h = ExternalHandle::new(t.clone());
        assert!(h.is_valid(), "a reused token is open again");
        assert!(t.claim());
        assert!(!t.claim(), "one winner");
        assert!(!h.is_valid());

        // A full pool keeps nothing more.
        drop(h);
        WaitToken::release(t, &mut pool, 0);
        assert!(pool.is_empty());
    }

    #[test]
    fn a_handle_alive_on_another_thread_keeps_its_token_out_of_the_pool() {
        use std::sync::mpsc::channel;
        let shared = Shared::new();
        let mut pool = Vec::new();
        let t = WaitToken::acquire(&mut pool, &shared, key(1), 2, 3);
        let h = ExternalHandle::new(t.clone());
        let (go, wait_go) = channel::<()>();
        let (kept_tx, kept) = channel::<()>();
        let th = std::thread::spawn(move || {
            // A clone lives here; the handle the step gave out is dropped.
            let mine = h.clone();
            drop(h);
            kept_tx.send(()).expect("main thread");
            wait_go.recv().expect("main thread");
            let seen = (mine.token.address(), mine.is_valid());
            drop(mine);
            seen
        });
        kept.recv().expect("worker");
        WaitToken::release(t, &mut pool, 8);
        assert!(
            pool.is_empty(),
            "a handle on another thread keeps the token"
        );
        go.send(()).expect("worker");
        let (addr, valid) = th.join().expect("worker");
        assert_eq!(addr, (key(1), 2, 3), "the live handle keeps its address");
        assert!(!valid, "and sees its step ended");
    }

    #[test]
    fn a_handle_dropped_on_another_thread_frees_its_token_for_reuse() {
        let shared = Shared::new();
        let mut pool = Vec::new();
        let t = WaitToken::acquire(&mut pool, &shared, key(1), 2, 3);
        let h = ExternalHandle::new(t.clone());
        let seen = std::thread::spawn(move || {
            let a = h.token.address();
            drop(h);
            a
        })
        .join()
        .expect("thread");
        assert_eq!(seen, (key(1), 2, 3));
        let first = Arc::as_ptr(&t);
        WaitToken::release(t, &mut pool, 8);
        let t = WaitToken::acquire(&mut pool, &shared, key(4), 5, 6);
        assert_eq!(Arc::as_ptr(&t), first);
        assert_eq!(t.address(), (key(4), 5, 6));
    }
}
