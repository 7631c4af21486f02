//! The queue other threads post a loop's messages to: a locked double
//! buffer that allocates nothing once warm.
//!
//! Producers lock, push and unlock; the loop takes every waiting message
//! at once by swapping the shared buffer with its own emptied one, so the
//! two buffers trade places and keep their capacity. A lock-free linked
//! queue (crossbeam's `Injector`) allocates a block every 63 messages and
//! frees it once read: a steady stream of completions from a worker
//! thread would then allocate for good. The lock is held for a push or a
//! swap, never while a message runs (tokio's injection queue is a mutex
//! for the same reason).
//!
//! The length is kept in an atomic beside the lock, written under it, so
//! that an emptiness check reads it without the lock: the loop's sleep
//! check (see `handshake`) must not take a lock a producer releases, which
//! would add an edge the protocol does not rely on.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// A buffer of more than this many messages is not kept for the next
/// burst once emptied (8,192 messages of five words: 320 KiB).
const KEEP_MAX: usize = 8192;

/// A multi-producer queue with one consumer that takes everything at once.
pub(crate) struct Mailbox<T> {
    items: Mutex<VecDeque<T>>,
    /// `items.len()`, stored under the lock after every change.
    len: AtomicUsize,
}

impl<T> Mailbox<T> {
    pub(crate) fn new() -> Self {
        Mailbox {
            items: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Queues `item` (any thread). The caller publishes it to a sleeping
    /// consumer with a SeqCst fence afterwards (see `handshake`).
    pub(crate) fn push(&self, item: T) {
        let mut q = self.items.lock();
        q.push_back(item);
        self.len.store(q.len(), Relaxed);
    }

    /// Messages waiting (a snapshot; any thread).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves every waiting message to the back of `into`, in order, and
    /// returns how many. An empty `into` trades buffers with the queue
    /// (no copy, no allocation); a large one is dropped first, so a burst
    /// does not keep its memory.
    pub(crate) fn take_all(&self, into: &mut VecDeque<T>) -> usize {
        if self.is_empty() {
            return 0;
        }
        if into.is_empty() && into.capacity() > KEEP_MAX {
            *into = VecDeque::new();
        }
        let mut q = self.items.lock();
        let n = q.len();
        if into.is_empty() {
            std::mem::swap(&mut *q, into);
        } else {
            into.extend(q.drain(..));
        }
        self.len.store(0, Relaxed);
        n
    }

    /// Takes the oldest message (any thread; used to settle messages once
    /// the consumer is gone).
    pub(crate) fn pop(&self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.items.lock();
        let m = q.pop_front();
        self.len.store(q.len(), Relaxed);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_all_keeps_order_and_trades_buffers() {
        let m = Mailbox::new();
        for i in 0..5 {
            m.push(i);
        }
        assert_eq!(m.len(), 5);
        let mut mine = VecDeque::new();
        assert_eq!(m.take_all(&mut mine), 5);
        assert!(m.is_empty());
        assert_eq!(mine, [0, 1, 2, 3, 4]);
        // Not empty: the new ones go behind, in order.
        m.push(5);
        m.push(6);
        assert_eq!(m.take_all(&mut mine), 2);
        assert_eq!(mine, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(m.take_all(&mut mine), 0);
        assert_eq!(m.pop(), None);
        m.push(7);
        m.push(8);
        assert_eq!(m.pop(), Some(7));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn an_emptied_buffer_goes_back_with_its_room() {
        let m = Mailbox::new();
        let mut mine = VecDeque::with_capacity(16);
        let room = mine.capacity();
        m.push(1);
        m.take_all(&mut mine);
        mine.clear();
        // The loop's empty buffer (room for 16) is now the queue's.
        m.push(2);
        assert!(m.items.lock().capacity() >= room);
        // A large emptied buffer is dropped, not handed to producers.
        let mut big = VecDeque::with_capacity(KEEP_MAX + 1);
        m.take_all(&mut big);
        assert_eq!(big, [2]);
        big.clear();
        big.reserve(KEEP_MAX + 1);
        m.push(3);
        m.take_all(&mut big);
        assert!(m.items.lock().capacity() <= KEEP_MAX);
    }

    #[test]
    fn producers_on_many_threads_lose_nothing() {
        let m = std::sync::Arc::new(Mailbox::new());
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        m.push(t * 1000 + i);
                    }
                })
            })
            .collect();
        let mut got = VecDeque::new();
        for th in threads {
            th.join().expect("producer");
            m.take_all(&mut got);
        }
        m.take_all(&mut got);
        let mut v: Vec<u32> = got.into_iter().collect();
        // Each producer's messages stay in its order.
        for t in 0..4 {
            let mine: Vec<u32> = v.iter().copied().filter(|x| x / 1000 == t).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
        v.sort_unstable();
        assert_eq!(v, (0..4000).collect::<Vec<_>>());
    }
}
