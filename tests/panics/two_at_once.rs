//! Two panics at once in users' `Drop`s: two `stack()` values of one step,
//! two success args, a cancel callback and a stack value of the same step,
//! the items a `for_each` left when it ended early.
//! Rust's drop glue aborts the process on a second panic while the first
//! unwinds; the engine drops such values one at a time, so the flow ends
//! with `InternalError` naming the first panic, every value is dropped,
//! and the loop goes on.
//!
//! Regression tests: before the fix, each case aborted the whole process.
//! Should one come back, it aborts this test binary (every test in it),
//! not just fails its own test.

use futoin_asyncsteps::{error::codes, ArgValue, AsyncSteps, TestTool};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Once};
use std::time::Duration;

/// Panics when dropped, after counting the drop.
struct Boom(&'static str, Arc<AtomicUsize>);

impl ArgValue for Boom {}

impl Drop for Boom {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
        panic!("drop of {}", self.0);
    }
}

/// Keeps the cases' own panics off the output; others (a failed
/// assertion) still print.
fn quiet() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !(msg.starts_with("drop of")
                || msg == "cancel callback"
                || info.payload().is::<LoudPayload>())
            {
                default(info);
            }
        }));
    });
}

/// A drop counter and a loop for one case, with the cases' own panics
/// kept off the output.
fn setup() -> (Arc<AtomicUsize>, TestTool) {
    quiet();
    (Arc::new(AtomicUsize::new(0)), TestTool::new())
}

/// The loop still runs flows after the case.
fn loop_goes_on(tool: &mut TestTool) {
    let mut ok = AsyncSteps::new();
    ok.add(|s, ()| s.success((1u8,)));
    let p = ok.promise::<(u8,)>(tool);
    assert_eq!(tool.block_on(p).unwrap(), (1,));
}

/// The flow of `p` ended with `InternalError` naming the drop of `first`,
/// `drops` values were dropped, and the loop goes on.
fn ends_with_drop_panic(
    tool: &mut TestTool,
    p: futoin_asyncsteps::Promise<()>,
    drops: &AtomicUsize,
    first: &str,
    n: usize,
) {
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    let want = format!("panic in a value dropped by the flow: drop of {first}");
    assert_eq!(e.info(), Some(want.as_str()));
    assert_eq!(drops.load(SeqCst), n);
    loop_goes_on(tool);
}

#[test]
fn two_panicking_stack_values() {
    let (drops, mut tool) = setup();
    let mut root = AsyncSteps::new();
    let d = drops.clone();
    root.add(move |s, ()| {
        s.stack(Boom("a", d.clone()));
        s.stack(Boom("b", d.clone()));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    // In order: a first.
    ends_with_drop_panic(&mut tool, p, &drops, "a", 2);
}

#[test]
fn two_panicking_success_args_of_a_detached_flow() {
    let (drops, mut tool) = setup();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    tool.set_unhandled_error_hook(move |e| s2.lock().unwrap().push(e.to_string()));
    let mut root = AsyncSteps::new();
    let d = drops.clone();
    root.add(move |s, ()| s.success((Boom("a", d.clone()), Boom("b", d.clone()))));
    root.execute(&mut tool);
    tool.run_all();
    assert_eq!(drops.load(SeqCst), 2);
    assert_eq!(
        *seen.lock().unwrap(),
        ["InternalError: panic in a value dropped by the flow: drop of a"]
    );
    loop_goes_on(&mut tool);
}

#[test]
fn a_panicking_cancel_callback_and_stack_value_on_timeout() {
    let (drops, mut tool) = setup();
    let mut root = AsyncSteps::new();
    let d = drops.clone();
    root.add(move |s, ()| {
        s.stack(Boom("value", d.clone()));
        s.set_cancel(|| panic!("cancel callback"));
        s.set_timeout(Duration::from_millis(1));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(e.info(), Some("panic in cancel callback: cancel callback"));
    assert_eq!(drops.load(SeqCst), 1);
    loop_goes_on(&mut tool);
}

/// A panic payload whose own `Drop` panics.
struct LoudPayload;

impl Drop for LoudPayload {
    fn drop(&mut self) {
        panic!("drop of a payload");
    }
}

/// Panics with a [`LoudPayload`] when dropped.
#[derive(Clone)]
struct LoudBoom(Arc<AtomicUsize>);

impl Drop for LoudBoom {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
        std::panic::panic_any(LoudPayload);
    }
}

/// Three state values whose `Drop`s panic with payloads that panic when
/// dropped: every value is dropped, no payload is dropped while another
/// panic unwinds, and the loop goes on.
#[test]
fn state_values_whose_panic_payloads_panic() {
    let (drops, mut tool) = setup();
    tool.set_unhandled_error_hook(|_| {});
    let mut root = AsyncSteps::new();
    let d = drops.clone();
    root.add(move |s, ()| {
        for k in ["a", "b", "c"] {
            s.state().set(k, LoudBoom(d.clone()));
        }
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.run_all()));
    assert!(r.is_ok(), "no panic leaves the loop");
    assert_eq!(drops.load(SeqCst), 3);
    drop(p);
    loop_goes_on(&mut tool);
}

/// A `for_each` that breaks at its first item leaves two items whose
/// `Drop`s panic: both are dropped, the flow ends with `InternalError`
/// naming the first, and the loop goes on. (Dropped as one iterator, the
/// second panic aborted the process.)
#[test]
fn for_each_leaves_two_panicking_items() {
    let (drops, mut tool) = setup();
    let mut root = AsyncSteps::new();
    let d = drops.clone();
    root.add(move |s, ()| {
        let items = ["a", "b", "c"].map(|n| Boom(n, d.clone()));
        s.for_each(items, |s, _, item| {
            std::mem::forget(item);
            s.break_loop()
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    ends_with_drop_panic(&mut tool, p, &drops, "b", 2);
}

/// A key that panics when dropped, ordered by its number.
struct BoomKey(u8, Arc<AtomicUsize>);

impl PartialEq for BoomKey {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}

impl Eq for BoomKey {}

impl PartialOrd for BoomKey {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for BoomKey {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

impl Drop for BoomKey {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
        panic!("drop of key {}", self.0);
    }
}

/// A `for_each` over a map whose keys and values all panic when dropped,
/// timed out while its first iteration waits: every key and value left is
/// dropped, one at a time.
#[test]
fn for_each_over_a_panicking_map_timed_out_while_waiting() {
    let (drops, mut tool) = setup();
    let mut root = AsyncSteps::new();
    let d = drops.clone();
    root.add(move |s, ()| {
        // Ordered by its number alone: the counter it holds is not part of it.
        #[allow(clippy::mutable_key_type)]
        let map: std::collections::BTreeMap<BoomKey, Boom> = (1..=2)
            .map(|i| (BoomKey(i, d.clone()), Boom("value", d.clone())))
            .collect();
        s.for_each(map, |s, k, v| {
            std::mem::forget((k, v));
            s.set_timeout(Duration::from_millis(5));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    // The second entry's key and value.
    ends_with_drop_panic(&mut tool, p, &drops, "key 2", 2);
}
