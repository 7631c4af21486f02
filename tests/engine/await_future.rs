//! Awaiting Rust futures in a step (spec 2.2.3 as `await_future`): a ready
//! future, one completed from another thread (polled only when woken), a
//! failing one, one dropped by a cancel or a timeout, and a promise whose
//! waker panics.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, Error, TestTool};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

struct OneShotInner<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// Receiving side: a future that counts its polls.
struct OneShotRx<T> {
    inner: Arc<Mutex<OneShotInner<T>>>,
    polls: Arc<AtomicUsize>,
}

/// Sending side: completes the future and wakes its task.
struct OneShotTx<T> {
    inner: Arc<Mutex<OneShotInner<T>>>,
}

fn oneshot<T>(polls: Arc<AtomicUsize>) -> (OneShotTx<T>, OneShotRx<T>) {
    let inner = Arc::new(Mutex::new(OneShotInner {
        value: None,
        waker: None,
    }));
    (
        OneShotTx {
            inner: inner.clone(),
        },
        OneShotRx { inner, polls },
    )
}

impl<T> OneShotTx<T> {
    fn send(self, v: T) {
        let w = {
            let mut g = self.inner.lock().unwrap();
            g.value = Some(v);
            g.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }
}

impl<T> Future for OneShotRx<T> {
    type Output = Result<(T,), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        let mut g = self.inner.lock().unwrap();
        match g.value.take() {
            Some(v) => Poll::Ready(Ok((v,))),
            None => {
                g.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[test]
fn await_ready_future() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.await_future(async { Ok::<_, Error>((40i32,)) });
        s.await_future(std::future::ready(Ok::<_, Error>((2i32, "x".to_string()))));
        Ok(())
    });
    root.add(|s, (v, t): (i32, String)| s.success((v, t)));
    let p = root.promise::<(i32, String)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (2, "x".to_string()));

    // The output of one awaited future feeds the next step.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.await_future(async { Ok::<_, Error>((40i32,)) });
        s.add(|s, (v,): (i32,)| s.success((v + 2,)));
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 42);
}

#[test]
fn await_oneshot_completed_from_another_thread_is_polled_only_when_woken() {
    let polls = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = oneshot::<i32>(polls.clone());
    let rx_slot = Arc::new(Mutex::new(Some(rx)));
    let mut tool = AsyncTool::new().unwrap();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let rx = rx_slot.lock().unwrap().take().unwrap();
        s.await_future(rx);
        Ok(())
    });
    root.add(|s, (v,): (i32,)| s.success((v * 2,)));
    let p = root.promise::<(i32,)>(&mut tool);

    tool.iterate(Some(Duration::ZERO)).unwrap();
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    // Nothing woke it: more turns do not poll it again.
    for _ in 0..5 {
        tool.iterate(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert!(!p.is_done());

    thread::spawn(move || tx.send(21)).join().unwrap();
    assert_eq!(tool.block_on(p).unwrap().0, 42);
    assert_eq!(polls.load(Ordering::SeqCst), 2);
}

#[test]
fn await_future_error_goes_to_handler() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add_catch(
        |s, ()| {
            s.await_future(async { Err::<(i32,), _>(Error::with_info("FutError", "bad")) });
            s.add(|s, (v,): (i32,)| s.success((v,)));
            Ok(())
        },
        move |s, e| {
            push(&a, format!("handler {} {:?}", e.code(), e.info()));
            s.success((-1i32,))
        },
    );
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, -1);
    assert_eq!(entries(&l), ["handler FutError Some(\"bad\")"]);

    // A plain io::Error output converts through Into<Error>.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.await_future(async { Err::<(), _>(std::io::Error::other("disk")) });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::COMM_ERROR);
    assert_eq!(e.info(), Some("disk"));
}

#[test]
fn cancelling_the_flow_drops_the_awaited_future() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.set_cancel(move || push(&a1, "outer cancel"));
        let g = Guard(a.clone(), "future");
        s.await_future(async move {
            let _g = g;
            std::future::pending::<Result<(), Error>>().await
        });
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all();
    assert!(p.try_take().is_none());
    assert!(entries(&l).is_empty());
    p.cancel();
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::CANCELED);
    assert_eq!(entries(&l), ["drop future", "outer cancel"]);
}

#[test]
fn timeout_drops_the_awaited_future_before_the_handler() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            s.set_timeout(ms(20));
            let g = Guard(a.clone(), "future");
            s.await_future(async move {
                let _g = g;
                std::future::pending::<Result<(), Error>>().await
            });
            Ok(())
        },
        move |s, e| {
            push(&b, format!("handler {}", e.code()));
            s.success(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(tool.elapsed(), ms(20));
    assert_eq!(entries(&l), ["drop future", "handler Timeout"]);
}

/// Regression test for a defect found in review (failed before its fix).
///
/// A waker that panics when the flow completes: reported, and the loop
/// goes on.
#[test]
fn a_panicking_promise_waker_does_not_leave_the_loop() {
    struct PanicWake;
    impl Wake for PanicWake {
        fn wake(self: Arc<Self>) {
            panic!("waker panics");
        }
    }
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u8,)));
    let mut p = root.promise::<(u8,)>(&mut tool);
    let w = Waker::from(Arc::new(PanicWake));
    assert!(Pin::new(&mut p)
        .poll(&mut Context::from_waker(&w))
        .is_pending());
    let mut other = AsyncSteps::new();
    other.add(|s, ()| s.success((2u8,)));
    let q = other.promise::<(u8,)>(&mut tool);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.run_all()));
    assert!(r.is_ok(), "the waker's panic stays inside");
    assert_eq!(tool.block_on(q).unwrap(), (2,));
    assert_eq!(p.try_take().expect("ended").unwrap(), (1,));
}
