//! Cases found in a review of the engine's fast paths: a sync called
//! directly from a step that already set a timeout or cancel callback, a
//! wrapper `ISync` that adds steps after the inner sync, and `async_stack`
//! with a free and a contended lock. Regression tests: the sync cases
//! that a fast path of the engine (found wrong in that review, and
//! reverted) broke.

use crate::common::*;
use futoin_asyncsteps::sync::{ISync, Mutex, Section};
use futoin_asyncsteps::{Args, AsyncSteps, Error, Step, StepResult, TestTool};
use std::sync::{Arc, Mutex as StdMutex};

/// A step that puts a timeout on "acquire + section", then calls ISync::sync
/// directly: the section ends with an implicit success, so the step must end
/// right away (it did when the section was a sub-step).
#[test]
fn timeout_then_direct_sync_completes_at_once() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.add(move |s, a: Args| {
        s.set_timeout(ms(100));
        m2.sync(s, a, Section::new(|_s: &mut Step<'_>, ()| Ok(())))
    });
    root.add(|s, ()| s.success((1i32,)));
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all_ready();
    assert_eq!(tool.elapsed(), ms(0));
    let r = tool.block_on(p);
    assert_eq!(
        tool.elapsed(),
        ms(0),
        "waited for the timeout: {:?}",
        r.as_ref().err()
    );
    assert_eq!(r.unwrap().0, 1);
    assert_eq!(m.counts(), (0, 0));
}

/// Same with set_cancel: the step would wait forever.
#[test]
fn set_cancel_then_direct_sync_completes() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.add(move |s, a: Args| {
        s.set_cancel(|| {});
        m2.sync(s, a, Section::new(|_s: &mut Step<'_>, ()| Ok(())))
    });
    let p = root.promise::<()>(&mut tool);
    let r = tool.block_on(p);
    assert!(r.is_ok(), "{:?}", r.err());
    assert_eq!(m.counts(), (0, 0));
}

/// A wrapper ISync that adds a step after the inner sync (inside the lock).
#[derive(Clone)]
struct After(Mutex);

impl ISync for After {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0.sync(s, args, section)?;
        s.add(|s, a: Args| s.success(a));
        Ok(())
    }
}

#[test]
fn wrapper_adding_after_inner_sync() {
    let mut tool = TestTool::new();
    let w = After(Mutex::new(1, None));
    let mut root = AsyncSteps::new();
    root.sync(&w, |s, ()| s.success((7i32,)));
    let p = root.promise::<(i32,)>(&mut tool);
    let r = tool.block_on(p);
    assert_eq!(r.map(|v| v.0).map_err(|e| e.to_string()), Ok(7));
}

/// async_stack of an error in a section: free lock vs contended lock.
fn stack_of(contended: bool) -> Vec<String> {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let out = Arc::new(StdMutex::new(Vec::new()));
    let o2 = out.clone();
    let mut holder = None;
    if contended {
        let mut h = AsyncSteps::new();
        let m3 = m.clone();
        h.add(move |s, ()| {
            s.sync(&m3, |s, ()| {
                s.set_timeout(ms(10));
                Ok(())
            });
            Ok(())
        });
        holder = Some(h.promise::<()>(&mut tool));
        tool.run_all_ready();
    }
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.add_catch(
        move |s, ()| {
            s.sync(&m2, |_s, ()| Err(Error::new("X")));
            Ok(())
        },
        move |s, _e| {
            *o2.lock().unwrap() = s
                .state()
                .async_stack()
                .iter()
                .map(|x| x.to_string())
                .collect();
            s.success(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    let _ = holder.map(|h| tool.block_on(h));
    tool.block_on(p).unwrap();
    let v = out.lock().unwrap().clone();
    v
}

#[test]
fn async_stack_same_for_free_and_contended_lock() {
    let free = stack_of(false);
    let busy = stack_of(true);
    assert_eq!(free.len(), busy.len(), "free={free:#?}\nbusy={busy:#?}");
}
