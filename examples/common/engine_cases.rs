//! The engine bench's cases as the crate runs them, shared by
//! `benches/engine.rs` (timed beside tokio) and `examples/instructions.rs`
//! (counted under callgrind), so both measure the same code. Each includer
//! uses a part of it.
#![allow(dead_code)]

use futoin_asyncsteps::sync::Mutex;
use futoin_asyncsteps::{AsyncSteps, AsyncTool, ExternalHandle};
use std::cell::RefCell;
use std::hint::black_box;
use std::time::Duration;

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

/// Starts `n` flows that each wait in a step (leaving its handle in
/// `HANDLES`), then read an `i32`.
fn start_waiting(tool: &mut AsyncTool, n: usize) {
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
}

/// `n` flows each wait in a step; all are then completed from this thread
/// with their index, which the next step reads. Everything is timed: flow
/// creation, parking, completion, the continuation and teardown.
pub fn external(tool: &mut AsyncTool, n: usize) {
    start_waiting(tool, n);
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

/// `n` flows each wait in a step, as in [`external`]; another OS thread
/// then completes them all with their index (joined before the loop runs
/// again, so every completion is in the loop's inbox when it does: the
/// count does not depend on how the two threads interleave), and the loop
/// runs until idle. Flow creation, parking, the cross-thread completion
/// and the loop's side of it, the next step and teardown are counted.
pub fn external_thread(tool: &mut AsyncTool, n: usize) {
    start_waiting(tool, n);
    tool.run_until_idle().expect("loop");
    let mut hs = HANDLES.with_borrow_mut(std::mem::take);
    assert_eq!(hs.len(), n);
    // The vector comes back, empty, with its room for the next batch.
    let hs = std::thread::scope(|sc| {
        sc.spawn(move || {
            for (i, h) in hs.drain(..).enumerate() {
                h.success((i as i32,)).expect("external success");
            }
            hs
        })
        .join()
        .expect("completing thread")
    });
    HANDLES.set(hs);
    tool.run_until_idle().expect("loop");
    assert_eq!(tool.stats().flows, 0);
}

/// A future that is pending once, waking itself as it is, then ready
/// (`YieldOnce::default()`).
#[derive(Default)]
pub struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = Result<(), futoin_asyncsteps::Error>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.0 {
            return std::task::Poll::Ready(Ok(()));
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// One flow whose `repeat(n)` body awaits a future that is pending once
/// (it wakes itself) and then ready: an await, a wake and a resume.
pub fn future_wake(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |s, _| {
        s.await_future(YieldOnce::default());
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

/// One flow whose `repeat(n)` body waits in `wait_external()` and is
/// completed by a zero-delay `deferred` callback of its loop: the
/// cheapest public way for a step to wait for a timer and resume (the
/// callback is boxed: one allocation per operation).
pub fn timer(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |s, _| {
        let h = s.wait_external();
        s.tool().deferred(Duration::ZERO, move |_| {
            h.success(()).expect("external success");
        });
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

/// One flow whose `repeat(n)` body adds a step that waits on a timeout of
/// zero (`set_timeout` alone: the step waits for nothing else) and whose
/// handler recovers the `Timeout` raised when the timer fires: the
/// engine's own timer, its error and the unwinding to the handler.
pub fn timer_timeout(tool: &mut AsyncTool, n: usize) {
    let mut root = AsyncSteps::new();
    root.repeat(n, |s, _| {
        s.add_catch(
            |s, ()| {
                s.set_timeout(Duration::ZERO);
                Ok(())
            },
            |s, e| {
                assert_eq!(e.code(), futoin_asyncsteps::error::codes::TIMEOUT);
                s.success(())
            },
        );
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

thread_local! {
    /// Sections the waiting flows of [`sync_grant`] ran.
    static GRANTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A flow holds a `Mutex(1)` in a section that waits; `n` flows then queue
/// for it in `sync` (each parks its step), and the holder is completed:
/// it leaves and hands the slot to the first waiter, whose section runs
/// and leaves in turn, handing it to the next. One handover each (with
/// the waiting flow's creation, its park in `sync` and its teardown).
pub fn sync_grant(tool: &mut AsyncTool, n: usize) {
    let m = Mutex::new(1, None);
    let mut holder = AsyncSteps::new();
    holder.sync(&m, |s, ()| {
        let h = s.wait_external();
        HANDLES.with_borrow_mut(|v| v.push(h));
        Ok(())
    });
    let p = holder.promise::<()>(tool);
    tool.run_until_idle().expect("loop");
    GRANTED.set(0);
    for _ in 0..n {
        let mut root = AsyncSteps::new();
        root.sync(&m, |_, ()| {
            GRANTED.set(GRANTED.get() + 1);
            Ok(())
        });
        root.execute(tool);
    }
    tool.run_until_idle().expect("loop");
    assert_eq!(GRANTED.get(), 0, "the waiters wait");
    let h = HANDLES
        .with_borrow_mut(|v| v.pop())
        .expect("the holder waits");
    h.success(()).expect("external success");
    tool.block_on(p).expect("holder");
    tool.run_until_idle().expect("loop");
    assert_eq!(GRANTED.get(), n);
    assert_eq!(tool.stats().flows, 0);
}

/// One flow that waits `n` times for a Unix socket to be readable: each
/// `repeat` iteration reads the byte the wait before it announced, writes
/// the next one from the other end, and waits (`wait_io`); the loop's poll
/// finds it readable and resumes the flow.
#[cfg(unix)]
pub fn io_readable(tool: &mut AsyncTool, n: usize) {
    use futoin_asyncsteps::io::mio::{net::UnixStream, Interest};
    use futoin_asyncsteps::TakeOnce;
    use std::io::{Read, Write};
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    let ours = TakeOnce::new(UnixStream::from_std(ours));
    let theirs = TakeOnce::new(theirs);
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let conn = s.stack(ours.take()?);
        let peer = s.stack(theirs.take()?);
        s.repeat(n, move |s, i| {
            if i > 0 {
                let mut b = [0u8; 2];
                let got = s.stack_get(conn)?.read(&mut b).expect("read");
                assert_eq!((got, b[0]), (1, (i - 1) as u8));
            }
            s.stack_get(peer)?.write_all(&[i as u8]).expect("write");
            s.wait_io(conn, Interest::READABLE)
        });
        s.add(move |s, ()| {
            let mut b = [0u8; 2];
            let got = s.stack_get(conn)?.read(&mut b).expect("read");
            assert_eq!((got, b[0]), (1, (n - 1) as u8));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("readiness flow");
}
