//! The engine bench's cases as the crate runs them, shared by
//! `benches/engine.rs` (timed beside tokio) and `examples/instructions.rs`
//! (counted under callgrind), so both measure the same code. Each includer
//! uses a part of it.
#![allow(dead_code)]

use futoin_asyncsteps::{AsyncSteps, AsyncTool, ExternalHandle};
use std::cell::RefCell;
use std::hint::black_box;

/// Starts `n` flows of one empty step and runs the loop until they ended.
pub fn simple(tool: &mut AsyncTool, n: usize) {
    for _ in 0..n {
        let mut root = AsyncSteps::new();
        root.add(|_, ()| Ok(()));
        // The flow handle is dropped: the flow runs detached.
        root.execute(tool);
    }
    tool.run_until_idle().expect("loop");
}

thread_local! {
    /// Where the waiting steps leave their handles: the loop thread's own
    /// vector, as the tokio peer keeps its senders in a local `Vec`.
    static HANDLES: RefCell<Vec<ExternalHandle>> = const { RefCell::new(Vec::new()) };
}

/// `n` flows each wait in a step; all are then completed from this thread
/// with their index, which the next step reads. Everything is timed: flow
/// creation, parking, completion, the continuation and teardown.
pub fn external(tool: &mut AsyncTool, n: usize) {
    for _ in 0..n {
        let mut root = AsyncSteps::new();
        root.add(|s, ()| {
            let h = s.wait_external();
            HANDLES.with_borrow_mut(|v| v.push(h));
            Ok(())
        });
        root.add(|_, (v,): (i32,)| {
            black_box(v);
            Ok(())
        });
        root.execute(tool);
    }
    // Waiting flows with no timer do not keep the loop busy.
    tool.run_until_idle().expect("loop");
    let hs = HANDLES.with_borrow_mut(std::mem::take);
    debug_assert_eq!(hs.len(), n);
    for (i, h) in hs.into_iter().enumerate() {
        h.success((i as i32,)).expect("external success");
    }
    tool.run_until_idle().expect("loop");
}

/// One flow whose `repeat(n)` body adds a sub-step capturing its index.
pub fn repeat_add(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |s, i| {
        s.add(move |_, ()| {
            black_box(i);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

/// One flow whose `repeat(n)` body adds a step that fails with a static
/// error and whose handler recovers.
pub fn error_recovered(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |s, _| {
        s.add_catch(|s, ()| s.error("Failed", "here"), |s, _| s.success(()));
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

/// One flow whose `repeat(n)` body awaits a future that is ready at once.
pub fn await_ready(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |s, _| {
        s.await_future(std::future::ready(Ok::<_, futoin_asyncsteps::Error>(())));
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}
