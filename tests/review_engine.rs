//! Regression tests for engine bugs found in review: each asserts the
//! correct behaviour.

use futoin_asyncsteps::{error::codes, Args, AsyncSteps, TestTool};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;
use common::{HandleSlot as Slot, Recorder as Log};

/// A timeout of an outer step fires while the flow is parked in `ready`
/// because its step budget ran out. The timeout unwinds the strand, the
/// handler recovers and the flow goes on to a waiting step B; then the stale
/// `Queued::Next` that was parked for the (now gone) loop is replayed on the
/// same strand: it pops B's frame although B still waits and runs C.
#[test]
fn timeout_while_parked_by_budget_does_not_replay_stale_ready_entry() {
    let mut tool = TestTool::new();
    let log = Log::default();
    let slot = Slot::default();
    let mut root = AsyncSteps::new();
    let l = log.clone();
    root.add_catch(
        |s, ()| {
            s.set_timeout(Duration::ZERO);
            s.repeat(1_000_000, |_, _| Ok(()));
            Ok(())
        },
        move |s, e| {
            l.push(format!("handler {}", e.code()));
            s.success(())
        },
    );
    let (l, sl) = (log.clone(), slot.clone());
    root.add(move |s, ()| {
        l.push("B waits");
        sl.put(s.wait_external());
        Ok(())
    });
    let l = log.clone();
    root.add(move |_, ()| {
        l.push("C");
        Ok(())
    });
    let mut p = root.promise::<()>(&mut tool);
    tool.run_for(50);
    assert_eq!(log.get(), ["handler Timeout", "B waits"]);
    assert!(slot.get().expect("B ran").is_valid(), "B must still wait");
    assert!(p.try_take().is_none(), "the flow must still wait in B");
}

/// `StackRef` docs: "InternalError when its step has ended or the reference
/// is not from this flow's ancestry". Frame seqs restart at 1 in every flow,
/// so a reference taken in flow A silently resolves to flow B's value.
#[test]
fn stack_ref_from_another_flow_is_internal_error() {
    use futoin_asyncsteps::StackRef;
    let mut tool = TestTool::new();
    let shared: Arc<Mutex<Option<StackRef<i32>>>> = Default::default();
    let mut a = AsyncSteps::new();
    let sh = shared.clone();
    a.add(move |s, ()| {
        *sh.lock().unwrap() = Some(s.stack(1i32));
        s.wait_external();
        Ok(())
    });
    let _ha = a.execute(&mut tool);
    tool.run_all();
    let mut b = AsyncSteps::new();
    let sh = shared.clone();
    b.add(move |s, ()| {
        let _mine = s.stack(2i32);
        let theirs = sh.lock().unwrap().expect("flow A ran");
        let r = s.stack_get(theirs).map(|v| *v);
        s.success((format!("{r:?}"),))
    });
    let p = b.promise::<(String,)>(&mut tool);
    let (got,) = tool.block_on(p).unwrap();
    assert!(
        got.starts_with("Err("),
        "foreign StackRef must be refused, got {got}"
    );
}

/// Success args a handler set before returning an error stay in the loop's
/// args register after the flow has ended ("Empty whenever no flow runs");
/// they are dropped only when some flow next runs on this loop.
#[test]
fn args_register_is_empty_after_flow_fails() {
    use futoin_asyncsteps::ArgValue;
    struct Res(Arc<Mutex<bool>>);
    impl ArgValue for Res {}
    impl Drop for Res {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = true;
        }
    }
    let dropped = Arc::new(Mutex::new(false));
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let d = dropped.clone();
    root.add_catch(
        |s, ()| s.error("First", "x"),
        move |s, _| {
            s.success((Res(d.clone()),))?;
            s.error("Second", "handler replaced the error")
        },
    );
    let p = root.promise::<()>(&mut tool);
    // error() after success() is a misuse: the flow fails with it.
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(
            "error() after success(): a step completes once \
             (asked for Second: handler replaced the error)"
        )
    );
    assert!(
        *dropped.lock().unwrap(),
        "result args of a failed flow must be dropped when it ends"
    );
}

/// Silence unused warnings for helpers used only by some tests.
#[allow(dead_code)]
fn _unused(_: Args) -> &'static str {
    codes::TIMEOUT
}
