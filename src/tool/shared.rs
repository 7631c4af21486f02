//! The part of a loop that other threads may touch: the inbox and its waker.

use crate::args::Args;
use crate::error::Error;
use crate::steps::model::AsyncSteps;
use crate::steps::result::Completion;
use crate::tool::scheduler::{FlowKey, Scheduler};
use crossbeam_deque::{Injector, Steal};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A message for the owner loop, pushed from any thread.
pub(crate) enum Msg {
    /// Run a closure on the loop.
    Call(Box<dyn FnOnce(&mut Scheduler) + Send>),
    /// Start a flow (from a remote [`ToolHandle`](crate::ToolHandle)).
    Execute(AsyncSteps, Option<Arc<Completion>>),
    /// An external completion of a waiting step.
    Complete {
        flow: FlowKey,
        strand: u32,
        seq: u32,
        result: Result<Args, Error>,
    },
    /// Root cancel.
    Cancel(FlowKey),
    /// A future awaited by a step was woken.
    Poll {
        flow: FlowKey,
        strand: u32,
        seq: u32,
    },
    /// Stop a loop that runs in `run()` mode.
    Stop,
}

/// Shared, thread-safe side of one loop.
pub(crate) struct Shared {
    inbox: Injector<Msg>,
    waker: OnceLock<mio::Waker>,
    /// True while the loop is (about to be) blocked in `poll`.
    sleeping: AtomicBool,
    /// Messages pushed and not yet taken (statistics).
    depth: AtomicUsize,
    /// Identity of the owner thread (address of a thread-local).
    thread_mark: usize,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static MARK: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A number unique to the calling thread for the life of the process
/// (unlike a thread-local's address, never reused by a later thread).
pub(crate) fn thread_mark() -> usize {
    MARK.with(|m| *m)
}

impl Shared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Shared {
            inbox: Injector::new(),
            waker: OnceLock::new(),
            sleeping: AtomicBool::new(false),
            depth: AtomicUsize::new(0),
            thread_mark: thread_mark(),
        })
    }

    pub(crate) fn set_waker(&self, w: mio::Waker) {
        let _ = self.waker.set(w);
    }

    /// True on the loop's own thread.
    #[inline]
    pub(crate) fn is_same_thread(&self) -> bool {
        self.thread_mark == thread_mark()
    }

    /// Queues a message; never blocks. Wakes the loop only when it sleeps.
    pub(crate) fn send(&self, msg: Msg) {
        self.depth.fetch_add(1, Ordering::Relaxed);
        self.inbox.push(msg);
        // Pairs with the fence in `prepare_sleep`: either the loop sees the
        // message before sleeping, or we see `sleeping` and wake it.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(w) = self.waker.get() {
                // A failed wake means the poll instance is gone: the loop has
                // stopped, and the message is dropped with it.
                let _ = w.wake();
            }
        }
    }

    /// Marks the loop as going to sleep; returns false when it must not
    /// (messages are waiting).
    pub(crate) fn prepare_sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.inbox.is_empty() {
            true
        } else {
            self.sleeping.store(false, Ordering::Relaxed);
            false
        }
    }

    pub(crate) fn woke(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Takes the next message.
    pub(crate) fn pop(&self) -> Option<Msg> {
        loop {
            match self.inbox.steal() {
                Steal::Success(m) => {
                    self.depth.fetch_sub(1, Ordering::Relaxed);
                    return Some(m);
                }
                Steal::Empty => return None,
                Steal::Retry => continue,
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inbox.is_empty()
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }
}
