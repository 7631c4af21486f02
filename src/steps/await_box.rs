//! [`AwaitBox`]: the boxed future an await step polls, in a block of
//! memory the thread reuses.
//!
//! Every `await_future` boxes its future (steps are queued as values of
//! one size). A box freed when the await ends and allocated again by the
//! next await cost an allocation per await. The block of an ended await
//! goes instead to a small per-thread list by layout, and the next future
//! of that layout takes it: a flow awaiting the same kind of future again
//! and again allocates nothing once the loop is warm.

use crate::args::Args;
use crate::error::Error;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;

/// The future of an await step: the step's result args, or its error.
type StepFuture = dyn Future<Output = Result<Args, Error>>;

/// Blocks kept per layout: at least this many, and more while they hold
/// at most `BLOCKS_KEEP_BYTES` (a loop whose many flows await at once, one
/// per connection say, reuses their blocks when they await again).
const BLOCKS_KEEP: usize = 256;
const BLOCKS_KEEP_BYTES: usize = 4 << 20;
/// Layouts kept (the oldest goes first).
const LAYOUTS_KEEP: usize = 8;

/// Freed blocks by layout. Each block is an allocation of the global
/// allocator with that layout, owned by the list.
struct Blocks {
    lists: Vec<(Layout, Vec<NonNull<u8>>)>,
}

impl Drop for Blocks {
    fn drop(&mut self) {
        for (layout, list) in self.lists.drain(..) {
            for b in list {
                // SAFETY: every block in a list was allocated with that
                // list's layout (see `take` and `give`) and is owned by it.
                unsafe { dealloc(b.as_ptr(), layout) };
            }
        }
    }
}

thread_local! {
    static BLOCKS: RefCell<Blocks> = const { RefCell::new(Blocks { lists: Vec::new() }) };
}

/// A block for `layout` (of non-zero size): a kept one, else a new one.
fn take(layout: Layout) -> NonNull<u8> {
    let kept = BLOCKS
        .try_with(|b| {
            let mut b = b.try_borrow_mut().ok()?;
            let (_, list) = b.lists.iter_mut().find(|(l, _)| *l == layout)?;
            list.pop()
        })
        .ok()
        .flatten();
    if let Some(p) = kept {
        return p;
    }
    // SAFETY: `layout` has a non-zero size (checked by the caller).
    let p = unsafe { alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
}

impl Blocks {
    /// Keeps `block` (of `layout`) when its list has room; false when it
    /// does not. A new layout takes the place of the oldest when
    /// `LAYOUTS_KEEP` are kept (whose blocks are freed).
    fn keep(&mut self, block: NonNull<u8>, layout: Layout) -> bool {
        let i = match self.lists.iter().position(|(l, _)| *l == layout) {
            Some(i) => i,
            None => {
                if self.lists.len() == LAYOUTS_KEEP {
                    let (l, list) = self.lists.remove(0);
                    for old in list {
                        // SAFETY: owned by that list, of its layout.
                        unsafe { dealloc(old.as_ptr(), l) };
                    }
                }
                self.lists.push((layout, Vec::new()));
                self.lists.len() - 1
            }
        };
        let list = &mut self.lists[i].1;
        if list.len() >= BLOCKS_KEEP.max(BLOCKS_KEEP_BYTES / layout.size().max(1)) {
            return false;
        }
        list.push(block);
        true
    }
}

/// Gives back a block of `layout` (of non-zero size) that no value uses
/// any more: kept for the next future of that layout, or freed (the list
/// is full, or the thread's lists are gone or busy).
fn give(block: NonNull<u8>, layout: Layout) {
    let kept = BLOCKS
        .try_with(|b| b.try_borrow_mut().is_ok_and(|mut b| b.keep(block, layout)))
        .unwrap_or(false);
    if !kept {
        // SAFETY: the caller gives the block up; it was allocated with
        // `layout`.
        unsafe { dealloc(block.as_ptr(), layout) };
    }
}

/// An awaited future, pinned in a block of the thread's reused ones.
/// Invariant: `ptr` points to a valid, pinned future owned by this value,
/// in a block allocated with `Layout::for_value(&*ptr)` (none when that
/// layout's size is zero).
pub(crate) struct AwaitBox {
    ptr: NonNull<StepFuture>,
}

impl AwaitBox {
    /// `f`, moved into a block.
    pub(crate) fn new<F>(f: F) -> Self
    where
        F: Future<Output = Result<Args, Error>> + 'static,
    {
        let layout = Layout::new::<F>();
        let raw: *mut F = if layout.size() == 0 {
            NonNull::<F>::dangling().as_ptr()
        } else {
            take(layout).as_ptr().cast()
        };
        // SAFETY: `raw` is a block of `F`'s layout (or, for a zero-sized
        // `F`, a dangling pointer, valid for it), uninitialised and owned
        // here.
        unsafe { raw.write(f) };
        let ptr: *mut StepFuture = raw;
        AwaitBox {
            // SAFETY: `raw` is not null (a block, or `dangling`).
            ptr: unsafe { NonNull::new_unchecked(ptr) },
        }
    }

    /// The future, pinned (it never moves until it is dropped).
    pub(crate) fn as_mut(&mut self) -> Pin<&mut StepFuture> {
        // SAFETY: by the invariant the future is valid and owned here, so
        // `&mut self` gives exclusive access; it stays in its block until
        // `drop`, so it is pinned.
        unsafe { Pin::new_unchecked(self.ptr.as_mut()) }
    }
}

impl Drop for AwaitBox {
    fn drop(&mut self) {
        // SAFETY: the future is valid (invariant), so its layout can be
        // read from its vtable.
        let layout = Layout::for_value(unsafe { self.ptr.as_ref() });
        /// Gives the block back even when the future's `Drop` panics.
        struct Back(NonNull<u8>, Layout);
        impl Drop for Back {
            fn drop(&mut self) {
                if self.1.size() != 0 {
                    give(self.0, self.1);
                }
            }
        }
        let _back = Back(self.ptr.cast(), layout);
        // SAFETY: the future is valid and owned here (invariant); it is
        // dropped once, and its block is given back after (by `_back`).
        unsafe { std::ptr::drop_in_place(self.ptr.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};

    fn poll(b: &mut AwaitBox) -> Poll<Result<Args, Error>> {
        let mut cx = Context::from_waker(Waker::noop());
        b.as_mut().poll(&mut cx)
    }

    #[test]
    fn a_block_goes_back_and_the_next_future_of_its_layout_takes_it() {
        let data = [5u64; 3];
        let mut a = AwaitBox::new(async move { Ok(Args::one(None)).map(|a| (a, data).0) });
        let first = a.ptr.cast::<u8>();
        assert!(poll(&mut a).is_ready());
        drop(a);
        let data = [6u64; 3];
        let b = AwaitBox::new(async move { Ok(Args::one(None)).map(|a| (a, data).0) });
        assert_eq!(b.ptr.cast::<u8>(), first, "the same block");
    }

    #[test]
    fn the_future_is_dropped_once_with_its_box() {
        let kept = Rc::new(());
        let k = kept.clone();
        let b = AwaitBox::new(async move {
            let _k = k;
            Ok(Args::new())
        });
        assert_eq!(Rc::strong_count(&kept), 2);
        drop(b);
        assert_eq!(Rc::strong_count(&kept), 1);
    }

    /// A future whose `Drop` panics still gives its block back.
    #[test]
    fn a_panicking_drop_gives_the_block_back() {
        struct Bad(#[allow(dead_code)] [u8; 40]);
        impl Drop for Bad {
            fn drop(&mut self) {
                panic!("bad drop");
            }
        }
        impl Future for Bad {
            type Output = Result<Args, Error>;
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
                Poll::Ready(Ok(Args::new()))
            }
        }
        struct Good(#[allow(dead_code)] [u8; 40]);
        impl Future for Good {
            type Output = Result<Args, Error>;
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
                Poll::Ready(Ok(Args::new()))
            }
        }
        let b = AwaitBox::new(Bad([0; 40]));
        let block = b.ptr.cast::<u8>();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(b)));
        assert!(r.is_err());
        let mut again = AwaitBox::new(Good([1; 40]));
        assert_eq!(again.ptr.cast::<u8>(), block, "the block was kept");
        assert!(poll(&mut again).is_ready());
    }
}
