//! A step's timeout (spec 1.4): it covers the step's whole subtree (cancel
//! callbacks innermost first, then the handler), fails the flow without a
//! handler, is replaced by a second `set_timeout`, and is cleared when the
//! step completes in time.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, ExternalHandle, TestTool};

#[test]
fn timeout_on_parent_covers_whole_subtree() {
    let l = log();
    let ext: Slot<ExternalHandle> = slot();
    let mut tool = TestTool::new();
    let t0 = tool.now();
    let mut root = AsyncSteps::new();
    let (a, b, e) = (l.clone(), l.clone(), ext.clone());
    root.add_catch(
        move |s, ()| {
            s.set_timeout(ms(100));
            let a0 = a.clone();
            s.set_cancel(move || push(&a0, "L0 cancel"));
            let (a1, e1) = (a.clone(), e.clone());
            s.add(move |s, ()| {
                let a1c = a1.clone();
                s.set_cancel(move || push(&a1c, "L1 cancel"));
                let (a2, e2) = (a1.clone(), e1.clone());
                s.add(move |s, ()| {
                    s.set_cancel(move || push(&a2, "L2 cancel"));
                    // Waits forever.
                    *e2.lock().unwrap() = Some(s.wait_external());
                    Ok(())
                });
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            let at = s.tool().now() - t0;
            push(&b, format!("handler {} at {}ms", e.code(), at.as_millis()));
            s.success(("recovered".to_string(),))
        },
    );
    let c = l.clone();
    root.add(move |s, (m,): (String,)| {
        push(&c, format!("next {m}"));
        s.success((m,))
    });
    let mut p = root.promise::<(String,)>(&mut tool);
    tool.advance(ms(99));
    assert!(p.try_take().is_none());
    assert!(entries(&l).is_empty());
    let h = ext.lock().unwrap().clone().unwrap();
    assert!(h.is_valid());
    tool.advance(ms(1));
    assert_eq!(p.try_take().unwrap().unwrap().0, "recovered");
    assert_eq!(
        entries(&l),
        [
            "L2 cancel",
            "L1 cancel",
            "L0 cancel",
            "handler Timeout at 100ms",
            "next recovered"
        ]
    );
    assert!(!h.is_valid());
    assert_eq!(h.success(()).unwrap_err().code(), codes::INTERNAL_ERROR);
    assert_eq!(tool.pending().timers, 0);
    assert_eq!(tool.pending().flows, 0);
}

#[test]
fn timeout_without_handler_fails_the_flow() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        s.set_timeout(ms(10));
        s.add(move |s, ()| {
            s.set_cancel(move || push(&a, "inner cancel"));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed(), ms(10));
    assert_eq!(entries(&l), ["inner cancel"]);
}

#[test]
fn set_timeout_twice_replaces_the_first() {
    // Longer second limit: the first one no longer fires.
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(ms(10));
        s.set_timeout(ms(50));
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(tool.pending().timers, 1);
    tool.advance(ms(49));
    assert!(p.try_take().is_none());
    tool.advance(ms(1));
    assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed(), ms(50));

    // Shorter second limit: it fires at its own time.
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(ms(50));
        s.set_timeout(ms(10));
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(tool.pending().timers, 1);
    tool.advance(ms(9));
    assert!(p.try_take().is_none());
    tool.advance(ms(1));
    assert_eq!(p.try_take().unwrap().unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed(), ms(10));
    tool.advance(ms(100));
    assert_eq!(tool.pending().timers, 0);
}

#[test]
fn timeout_cleared_when_step_completes_in_time() {
    // Completed externally before the limit.
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(ms(100));
        let h = s.wait_external();
        s.tool().deferred(ms(50), move |_| {
            h.success((9u8,)).unwrap();
        });
        Ok(())
    });
    let a = l.clone();
    root.add(move |s, (v,): (u8,)| {
        push(&a, format!("next {v}"));
        s.success((v,))
    });
    let mut p = root.promise::<(u8,)>(&mut tool);
    tool.advance(ms(50));
    assert_eq!(entries(&l), ["next 9"]);
    assert_eq!(tool.pending().timers, 0);
    tool.advance(ms(1000));
    assert_eq!(p.try_take().unwrap().unwrap().0, 9);
    assert_eq!(entries(&l), ["next 9"]);

    // Completed by its sub-steps at once.
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(ms(10));
        s.add(|s, ()| s.success((1u8,)));
        Ok(())
    });
    root.add(|s, (v,): (u8,)| s.success((v + 1,)));
    let mut p = root.promise::<(u8,)>(&mut tool);
    tool.run_all_ready();
    assert_eq!(tool.pending().timers, 0);
    tool.advance(ms(20));
    assert_eq!(p.try_take().unwrap().unwrap().0, 2);
}
