//! External completion of a waiting step: [`ExternalHandle`], and the
//! [`WaitToken`] that decides between it and the engine ending the step
//! another way.

use crate::args::IntoArgs;
use crate::error::Error;
use crate::steps::message::{FlowMsg, Packed};
use crate::steps::scheduler::{FlowKey, Scheduler};
use crate::tool::Inbox;
use slotmap::{Key, KeyData};
use std::borrow::Cow;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

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
    inbox: Arc<Inbox<Scheduler>>,
    /// The flow's key (`KeyData::as_ffi`).
    flow: AtomicU64,
    strand: AtomicU32,
    seq: AtomicU32,
}

impl WaitToken {
    pub(crate) fn new(
        inbox: Arc<Inbox<Scheduler>>,
        flow: FlowKey,
        strand: u32,
        seq: u32,
    ) -> Arc<Self> {
        Arc::new(WaitToken {
            state: AtomicU8::new(OPEN),
            inbox,
            flow: AtomicU64::new(flow.data().as_ffi()),
            strand: AtomicU32::new(strand),
            seq: AtomicU32::new(seq),
        })
    }

    /// A token for step `seq` of `strand` in `flow`, reused from the loop's
    /// pool when one is free (no allocation on the hot path).
    pub(crate) fn acquire(
        pool: &mut Vec<Arc<Self>>,
        inbox: &Arc<Inbox<Scheduler>>,
        flow: FlowKey,
        strand: u32,
        seq: u32,
    ) -> Arc<Self> {
        match pool.pop() {
            Some(t) => {
                // Pooled tokens are solely owned (see `release`): nothing
                // else reads these until a handle to the new step exists.
                debug_assert_eq!(Arc::strong_count(&t), 1, "a pooled token is shared");
                debug_assert!(Arc::ptr_eq(&t.inbox, inbox), "a token of another loop");
                t.flow.store(flow.data().as_ffi(), Ordering::Relaxed);
                t.strand.store(strand, Ordering::Relaxed);
                t.seq.store(seq, Ordering::Relaxed);
                t.state.store(OPEN, Ordering::Relaxed);
                t
            }
            None => Self::new(inbox.clone(), flow, strand, seq),
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
        self.claim_as(BY_ENGINE)
    }

    /// [`claim`](Self::claim) for an external completion, successful or
    /// not.
    fn claim_by_handle(&self, ok: bool) -> bool {
        self.claim_as(if ok { BY_HANDLE } else { BY_HANDLE_ERR })
    }

    /// Moves an open token to `to`; true for the single winner.
    fn claim_as(&self, to: u8) -> bool {
        self.state
            .compare_exchange(OPEN, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The step has ended: later external calls are refused. (Only a wait
    /// nobody claimed is still open: the check keeps a read-modify-write
    /// off the usual path, and the exchange keeps who claimed it.)
    pub(crate) fn close(&self) {
        if self.state.load(Ordering::Relaxed) == OPEN {
            self.claim_as(BY_ENGINE);
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

    pub(crate) fn closed(inbox: Arc<Inbox<Scheduler>>) -> Self {
        let t = WaitToken::new(inbox, FlowKey::default(), 0, 0);
        t.close();
        ExternalHandle { token: t }
    }

    fn complete(&self, result: Result<Packed, Error>, what: &'static str) -> Result<(), Error> {
        if !self.token.claim_by_handle(result.is_ok()) {
            return Err(Error::internal(what));
        }
        let (flow, strand, seq) = self.token.address();
        self.token.inbox.send(
            FlowMsg::Complete {
                flow,
                strand,
                seq,
                result,
            }
            .into_msg(),
        );
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

    /// True when the waiting step's loop runs on the calling thread.
    pub(crate) fn is_local(&self) -> bool {
        self.token.inbox.is_same_thread()
    }

    /// The id of the waiting step's loop (`Inbox::id`).
    pub(crate) fn loop_id(&self) -> u64 {
        self.token.inbox.id
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> FlowKey {
        KeyData::from_ffi(n).into()
    }

    #[test]
    fn a_token_is_pooled_only_when_no_handle_holds_it_and_is_readdressed_on_reuse() {
        let shared = Inbox::<Scheduler>::new();
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
        let shared = Inbox::<Scheduler>::new();
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
        let shared = Inbox::<Scheduler>::new();
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
