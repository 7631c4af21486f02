//! Many timeouts falling due in one pass: the loop handles them as a batch
//! (and fetches the flows behind the front one ahead of their turn, see
//! `tool::prefetch`). Order, handlers and cancels must be exactly those of
//! timers handled one by one, also when entries in the batch go stale.

use crate::common::{push, Log};
use futoin_asyncsteps::{error::codes, AsyncSteps, FlowHandle, TaskHandle, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// 20 flows time out at the same instant, and a plain deferred callback
/// sits in the middle of the batch. The first handler cancels two flows
/// further back in the batch: a cancel is a message, which (as on
/// `AsyncTool`) runs after the pass's entries, so those flows time out
/// too and the cancels find them ended. Each timed-out step's cancel
/// callback runs before its handler (spec 1.4).
#[test]
fn a_batch_of_timeouts_keeps_order_and_cancels_sent_from_it_wait_for_its_end() {
    let mut tool = TestTool::new();
    let log = Log::default();
    let handles: Arc<Mutex<Vec<FlowHandle>>> = Arc::default();
    for i in 0..20u32 {
        let mut root = AsyncSteps::new();
        let (l, l2, hs) = (log.clone(), log.clone(), handles.clone());
        root.add_catch(
            move |s, ()| {
                if i == 9 {
                    let l = l.clone();
                    s.tool()
                        .deferred(Duration::from_millis(10), move |_| push(&l, "deferred"));
                }
                s.set_cancel(move || push(&l, format!("cancel {i}")));
                s.set_timeout(Duration::from_millis(10));
                Ok(())
            },
            move |s, e| {
                push(&l2, format!("handler {i} {}", e.code()));
                if i == 0 {
                    let hs = hs.lock().unwrap();
                    hs[5].cancel();
                    hs[12].cancel();
                }
                s.success(())
            },
        );
        handles.lock().unwrap().push(root.execute(&mut tool));
    }
    tool.run_all_ready();
    assert!(log.get().is_empty());
    assert_eq!(tool.pending().timers, 21);

    tool.advance(Duration::from_millis(10));

    let mut want = Vec::new();
    for i in 0..20 {
        if i == 9 {
            want.push("deferred".to_owned());
        }
        want.push(format!("cancel {i}"));
        want.push(format!("handler {i} {}", codes::TIMEOUT));
    }
    assert_eq!(log.get(), want);
    let st = tool.pending();
    assert_eq!((st.flows, st.timers), (0, 0));
}

/// Entries of a batch still go stale within it when something the batch
/// runs ends them at once: the first handler cancels a deferred callback
/// further back (by its handle), and in flows 5 and 12 a step and its
/// sub-step time out at the same instant: the step's timeout cancels the
/// sub-step (innermost first), whose fired timeout entry is then skipped.
#[test]
fn a_batch_of_timeouts_skips_entries_that_go_stale_within_it() {
    let mut tool = TestTool::new();
    let log = Log::default();
    let late: Arc<Mutex<Option<TaskHandle>>> = Arc::default();
    for i in 0..20u32 {
        let mut root = AsyncSteps::new();
        let (l, l2, late, late2) = (log.clone(), log.clone(), late.clone(), late.clone());
        root.add_catch(
            move |s, ()| {
                if i == 9 {
                    let l = l.clone();
                    let h = s
                        .tool()
                        .deferred(Duration::from_millis(10), move |_| push(&l, "deferred"));
                    *late.lock().unwrap() = Some(h);
                }
                if i == 5 || i == 12 {
                    let l = l.clone();
                    s.add(move |s, ()| {
                        s.set_cancel(move || push(&l, format!("cancel {i} inner")));
                        s.set_timeout(Duration::from_millis(10));
                        Ok(())
                    });
                }
                s.set_cancel(move || push(&l, format!("cancel {i}")));
                s.set_timeout(Duration::from_millis(10));
                Ok(())
            },
            move |s, e| {
                push(&l2, format!("handler {i} {}", e.code()));
                if i == 0 {
                    let h = late2.lock().unwrap().take().unwrap();
                    s.tool().cancel(h);
                }
                s.success(())
            },
        );
        root.execute(&mut tool);
    }
    tool.run_all_ready();
    assert!(log.get().is_empty());
    assert_eq!(tool.pending().timers, 23);

    // 20 timeouts run; the cancelled callback and the two sub-steps'
    // timeouts are skipped.
    assert_eq!(tool.advance(Duration::from_millis(10)), 20);

    let mut want = Vec::new();
    for i in 0..20 {
        if i == 5 || i == 12 {
            want.push(format!("cancel {i} inner"));
        }
        want.push(format!("cancel {i}"));
        want.push(format!("handler {i} {}", codes::TIMEOUT));
    }
    assert_eq!(log.get(), want);
    let st = tool.pending();
    assert_eq!((st.flows, st.timers, st.immediates), (0, 0, 0));
}
