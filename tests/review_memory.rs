//! Regression test: the flow pool does not keep the large buffers of a
//! finished flow.

use futoin_asyncsteps::{AsyncSteps, TestTool};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

struct Counting;
static BYTES: AtomicIsize = AtomicIsize::new(0);
thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}
fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is forwarded unchanged to `System`; the counter is a
// plain atomic and the thread-local is const-initialised with no destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() && counted() {
            BYTES.fetch_add(l.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        if counted() {
            BYTES.fetch_sub(l.size() as isize, Relaxed);
        }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() && counted() {
            BYTES.fetch_add(new as isize - l.size() as isize, Relaxed);
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A flow that once queued many sub-steps (or went deep) leaves its
/// `Vec<StepDef>`/`Vec<Frame>` capacity in the pooled `Flow`
/// (`Flow::reset` only `clear()`s), and the pool keeps up to the peak
/// number of flows forever, so the memory is never given back.
#[test]
fn finished_flow_does_not_keep_its_large_queue() {
    let mut tool = TestTool::new();
    COUNTED.with(|c| c.set(true));
    let before = BYTES.load(Relaxed);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        for _ in 0..100_000 {
            s.add(|_, ()| Ok(()));
        }
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    let kept = BYTES.load(Relaxed) - before;
    COUNTED.with(|c| c.set(false));
    assert!(
        kept < 64 * 1024,
        "{kept} bytes still allocated after the only flow ended"
    );
}
