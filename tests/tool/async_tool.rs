//! `AsyncTool` (spec 2.6): immediates in FIFO order, deferred callbacks,
//! cancel of both, `is_same_thread`, calls, flows and promises sent through
//! a `ToolHandle` from another thread, a loop on a thread of its own,
//! `Promise::wait` refused on the loop's thread, and `iterate` that does
//! not wait.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, ExternalHandle};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn async_tool_immediates_run_fifo() {
    let mut tool = AsyncTool::new().unwrap();
    let order = Rc::new(RefCell::new(Vec::new()));
    for i in 0..10 {
        let o = order.clone();
        tool.immediate(move |_| o.borrow_mut().push(i));
    }
    tool.run_until_idle().unwrap();
    assert_eq!(*order.borrow(), (0..10).collect::<Vec<_>>());
}

#[test]
fn async_tool_deferred_zero_runs_after_already_queued_immediates() {
    let mut tool = AsyncTool::new().unwrap();
    let order = Rc::new(RefCell::new(Vec::new()));
    let o = order.clone();
    tool.immediate(move |_| o.borrow_mut().push("imm A"));
    let o = order.clone();
    tool.immediate(move |_| o.borrow_mut().push("imm B"));
    let o = order.clone();
    tool.deferred(Duration::ZERO, move |_| o.borrow_mut().push("deferred 0"));
    tool.run_until_idle().unwrap();
    assert_eq!(*order.borrow(), ["imm A", "imm B", "deferred 0"]);
}

#[test]
fn async_tool_deferred_one_ms() {
    let mut tool = AsyncTool::new().unwrap();
    let ran: Rc<Cell<Option<Duration>>> = Rc::new(Cell::new(None));
    let scheduled_at = tool.now();
    let r = ran.clone();
    let h = tool.deferred(ms(1), move |sched| r.set(Some(sched.now() - scheduled_at)));
    assert!(tool.is_valid(h));
    assert_eq!(tool.stats().timers, 1);
    tool.run_until_idle().unwrap();
    assert!(ran.get().unwrap() >= ms(1));
    assert!(!tool.is_valid(h));
    assert_eq!(tool.stats().timers, 0);
}

#[test]
fn async_tool_cancel_immediate_and_deferred() {
    let mut tool = AsyncTool::new().unwrap();
    let order = Rc::new(RefCell::new(Vec::new()));
    let o = order.clone();
    let hi = tool.immediate(move |_| o.borrow_mut().push("cancelled immediate"));
    let o = order.clone();
    let hd = tool.deferred(ms(1), move |_| o.borrow_mut().push("cancelled deferred"));
    let o = order.clone();
    let hk = tool.immediate(move |_| o.borrow_mut().push("kept"));
    let o = order.clone();
    let hk2 = tool.deferred(ms(1), move |_| o.borrow_mut().push("kept deferred"));
    assert!(tool.is_valid(hi));
    assert!(tool.is_valid(hd));
    tool.cancel(hi);
    tool.cancel(hd);
    assert!(!tool.is_valid(hi));
    assert!(!tool.is_valid(hd));
    assert!(tool.is_valid(hk));
    assert_eq!(tool.stats().timers, 1);
    // Cancelling again is a no-op.
    tool.cancel(hi);
    tool.cancel(hd);
    tool.run_until_idle().unwrap();
    assert_eq!(*order.borrow(), ["kept", "kept deferred"]);
    assert!(!tool.is_valid(hk));
    assert!(!tool.is_valid(hk2));
    // Cancelling after it ran is a no-op too.
    tool.cancel(hk);
    tool.cancel(hk2);
    assert_eq!(tool.stats().timers, 0);
}

#[test]
fn async_tool_is_same_thread() {
    let mut tool = AsyncTool::new().unwrap();
    assert!(tool.is_same_thread());
    let th = tool.handle();
    assert!(th.is_same_thread());
    let mut root = AsyncSteps::new();
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    root.add(move |s, ()| {
        let h = s.wait_external();
        *s2.lock().unwrap() = Some(s.is_same_thread());
        h.success(()).unwrap();
        Ok(())
    });
    let fh = root.execute(&mut tool);
    assert!(fh.is_same_thread());
    let (a, b) = thread::spawn(move || (th.is_same_thread(), fh.is_same_thread()))
        .join()
        .unwrap();
    assert!(!a);
    assert!(!b);
    tool.run_until_idle().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(true));
}

#[test]
fn tool_handle_call_execute_promise_from_another_thread() {
    let l = log();
    let mut tool = AsyncTool::new().unwrap();
    let h = tool.handle();
    let l2 = l.clone();
    let p = thread::spawn(move || {
        let l3 = l2.clone();
        h.call(move |sched| push(&l3, format!("call same_thread={}", sched.is_same_thread())));
        let mut r1 = AsyncSteps::new();
        let l4 = l2.clone();
        r1.add(move |s, ()| {
            push(&l4, format!("execute same_thread={}", s.is_same_thread()));
            Ok(())
        });
        h.execute(r1);
        let mut r2 = AsyncSteps::new();
        r2.add(|s, ()| {
            let t = s.is_same_thread();
            s.success((t, 9u32))
        });
        h.promise::<(bool, u32)>(r2)
    })
    .join()
    .unwrap();
    assert_eq!(tool.stats().inbox, 3);
    assert_eq!(tool.block_on(p).unwrap(), (true, 9));
    assert_eq!(
        entries(&l),
        ["call same_thread=true", "execute same_thread=true"]
    );
    assert_eq!(tool.stats().flows, 0);
    assert_eq!(tool.stats().inbox, 0);
}

#[test]
fn async_tool_spawn_stop_join() {
    let (h, th) = AsyncTool::spawn("ftn12-test-loop").unwrap();
    assert!(!h.is_same_thread());
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let name = thread::current().name().unwrap_or_default().to_owned();
        let same = s.is_same_thread();
        s.success((name, same))
    });
    let (name, same) = h.promise::<(String, bool)>(root).wait().unwrap();
    assert_eq!(name, "ftn12-test-loop");
    assert!(same);

    // A flow completed from this thread while the loop runs on its own.
    let (tx, rx) = mpsc::channel::<ExternalHandle>();
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        tx.send(s.wait_external()).unwrap();
        Ok(())
    });
    let p = h.promise::<(u16,)>(root);
    rx.recv().unwrap().success((16u16,)).unwrap();
    assert_eq!(p.wait().unwrap().0, 16);

    h.stop();
    th.join().unwrap();
}

#[test]
fn promise_wait_on_loop_thread_is_refused() {
    let mut tool = AsyncTool::new().unwrap();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.wait_external();
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(p.wait().unwrap_err().code(), codes::INTERNAL_ERROR);
}

#[test]
fn iterate_with_zero_wait_does_not_block() {
    let mut tool = AsyncTool::new().unwrap();
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 0);
    // A far timer does not make it wait either.
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    let h = tool.deferred(Duration::from_secs(3600), move |_| r.set(true));
    let t0 = Instant::now();
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 0);
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 0);
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert!(!ran.get());
    assert!(tool.is_valid(h));
    // An immediate runs in the same call.
    let r = ran.clone();
    tool.immediate(move |_| r.set(true));
    assert_eq!(tool.iterate(Some(Duration::ZERO)).unwrap(), 1);
    assert!(ran.get());
    tool.cancel(h);
}
