//! Many timeouts falling due in one pass: the loop handles them as a batch
//! (and fetches the flows behind the front one ahead of their turn, see
//! `tool::prefetch`). Order, handlers and cancels must be exactly those of
//! timers handled one by one, also when entries in the batch go stale.

use futoin_asyncsteps::{codes, AsyncSteps, FlowHandle, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Log = Arc<Mutex<Vec<String>>>;

fn push(l: &Log, s: String) {
    l.lock().unwrap().push(s);
}

/// 20 flows time out at the same instant. The first handler cancels two
/// flows further back in the batch (their queued timer entries go stale),
/// and a plain deferred callback sits in the middle of it. Each timed-out
/// step's cancel callback runs before its handler (spec 1.4).
#[test]
fn a_batch_of_timeouts_keeps_order_and_skips_cancelled_flows() {
    let mut tool = TestTool::new();
    let log: Log = Arc::default();
    let handles: Arc<Mutex<Vec<FlowHandle>>> = Arc::default();
    for i in 0..20u32 {
        let mut root = AsyncSteps::new();
        let (l, l2, hs) = (log.clone(), log.clone(), handles.clone());
        root.add_catch(
            move |s, ()| {
                if i == 9 {
                    let l = l.clone();
                    s.tool().deferred(Duration::from_millis(10), move |_| {
                        push(&l, "deferred".into())
                    });
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
    assert!(log.lock().unwrap().is_empty());
    assert_eq!(tool.pending().timers, 21);

    tool.advance(Duration::from_millis(10));

    let mut want = Vec::new();
    for i in 0..20 {
        if i == 9 {
            want.push("deferred".to_owned());
        }
        if i != 5 && i != 12 {
            want.push(format!("cancel {i}"));
            want.push(format!("handler {i} {}", codes::TIMEOUT));
        }
        if i == 0 {
            want.push("cancel 5".into());
            want.push("cancel 12".into());
        }
    }
    assert_eq!(*log.lock().unwrap(), want);
    let st = tool.pending();
    assert_eq!((st.flows, st.timers), (0, 0));
}
