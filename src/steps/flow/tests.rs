//! Deferred frames: what a step's frame costs, seen from inside the flow
//! (plain steps, and `sync` sections run in place).

use crate::error::codes;
use crate::steps::scheduler::Scheduler;
use crate::sync::Mutex;
use crate::tool::Core;
use crate::{AsyncSteps, Error};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Runs `root` to its end on a fresh loop; returns its result args and
/// how many frames its main strand ever had room for (the pooled flow
/// keeps its buffer).
fn run(root: AsyncSteps) -> (Result<(i32,), Error>, usize) {
    let mut sched = Scheduler::new(Instant::now());
    let mut p = root.promise::<(i32,)>(&mut sched);
    while Core::run_pass(&mut sched) > 0 {}
    let res = p.try_take().expect("the flow has ended");
    let flow = sched.pooled().last().expect("the ended flow is pooled");
    (res, flow.main.frames.capacity())
}

#[test]
fn steps_that_complete_at_once_push_no_frame() {
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Ok(()));
    root.add(|s, ()| s.success((1i32,)));
    root.add(|s, (v,): (i32,)| {
        s.state().set("seen", v);
        s.success((v + 1,))
    });
    let (res, frames) = run(root);
    assert_eq!(res.unwrap(), (2,));
    assert_eq!(frames, 0);
}

#[test]
fn each_need_of_a_step_pushes_its_frame_first() {
    // A sub-step.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.add(|s, ()| s.success((1i32,)));
        Ok(())
    });
    assert_eq!(run(root), (Ok((1,)), 1));
    // A stack value, read back in the same step.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let r = s.stack(5i32);
        let v = *s.stack_get(r)?;
        s.success((v,))
    });
    assert_eq!(run(root), (Ok((5,)), 1));
    // A cancel callback and an external wait, completed at once.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_cancel(|| {});
        s.wait_external().success((3i32,))
    });
    assert_eq!(run(root), (Ok((3,)), 1));
    // A timeout on a step that then succeeds.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.set_timeout(std::time::Duration::from_secs(60));
        s.success((4i32,))
    });
    assert_eq!(run(root), (Ok((4,)), 1));
    // A section on a free Mutex that keeps a stack value: the sync step's
    // frame, pushed on the way.
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    root.sync(&m, |s, ()| {
        let r = s.stack(6i32);
        let v = *s.stack_get(r)?;
        s.success((v,))
    });
    assert_eq!(run(root), (Ok((6,)), 1));
}

#[test]
fn a_section_that_completes_at_once_needs_no_frame_and_gives_its_lock_back() {
    let m = Mutex::new(1, None);
    let (m1, m2) = (m.clone(), m.clone());
    let mut root = AsyncSteps::new();
    root.sync(&m, move |s, ()| s.success((m1.counts().0 as i32,)));
    root.add(move |s, (inside,): (i32,)| s.success((inside * 10 + m2.counts().0 as i32,)));
    // Held inside, free right after; no frame at any time.
    assert_eq!(run(root), (Ok((10,)), 0));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_section_that_needs_its_frame_holds_the_lock_there_until_its_sub_steps_end() {
    let m = Mutex::new(1, None);
    let m1 = m.clone();
    let mut root = AsyncSteps::new();
    root.sync(&m, move |s, ()| {
        s.add(move |s, ()| s.success((10 + m1.counts().0 as i32,)));
        Ok(())
    });
    assert_eq!(run(root), (Ok((11,)), 1));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_failing_frameless_section_unwinds_on_its_frame_and_frees_the_lock() {
    fn section(_: &mut crate::Step<'_>, (): ()) -> crate::StepResult {
        Err(Error::with_info("Boom", "in the section"))
    }
    let m = Mutex::new(1, None);
    let (m1, m2) = (m.clone(), m.clone());
    let stacks = Arc::new(std::sync::Mutex::new(Vec::new()));
    let st = stacks.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            s.sync(&m1, section);
            Ok(())
        },
        move |s, e| {
            assert_eq!(e.code(), "Boom");
            st.lock()
                .unwrap()
                .extend(s.state().async_stack().iter().copied());
            // The section's frame has ended: the lock is free here.
            s.success((20 + m2.counts().0 as i32,))
        },
    );
    assert_eq!(run(root).0, Ok((20,)));
    let stack = stacks.lock().unwrap().clone();
    // The handler's step, the sync step, and the section run in its place.
    assert_eq!(stack.len(), 3, "{stack:?}");
    assert!(stack[1].ends_with("::section"), "{stack:?}");
    assert!(stack[2].ends_with("::section"), "{stack:?}");
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_frameless_section_entering_its_own_mutex_directly_passes_through() {
    use crate::sync::{ISync, Section};
    let m = Mutex::new(1, None);
    let m1 = m.clone();
    let mut root = AsyncSteps::new();
    root.sync(&m, move |s, ()| {
        ISync::sync(
            &m1,
            s,
            crate::Args::new(),
            Section::new(|s, ()| s.success((3i32,))),
        )
    });
    assert_eq!(run(root).0, Ok((3,)));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_step_that_fails_at_once_gets_its_frame_for_its_handler() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(
        |_, ()| Err(Error::with_info("Boom", "at once")),
        move |s, e| {
            if e.code() == "Boom" {
                s2.fetch_add(1, Ordering::Relaxed);
            }
            s.success((7i32,))
        },
    );
    assert_eq!(run(root), (Ok((7,)), 1));
    assert_eq!(seen.load(Ordering::Relaxed), 1);
}

#[test]
fn a_frameless_step_that_fails_is_named_in_async_stack_and_handled_once() {
    fn failing(_: &mut crate::Step<'_>, (): ()) -> crate::StepResult {
        Err(Error::with_info(codes::INVALID_REQUEST, "no"))
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let stacks = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (r, st) = (runs.clone(), stacks.clone());
    let mut root = AsyncSteps::new();
    root.add_catch(failing, move |s, e| {
        r.fetch_add(1, Ordering::Relaxed);
        st.lock()
            .unwrap()
            .extend(s.state().async_stack().iter().copied());
        Err(e.clone())
    });
    let (res, _) = run(root);
    assert_eq!(res.unwrap_err().code(), codes::INVALID_REQUEST);
    assert_eq!(runs.load(Ordering::Relaxed), 1);
    let stack = stacks.lock().unwrap().clone();
    assert_eq!(stack.len(), 1, "{stack:?}");
    assert!(stack[0].ends_with("::failing"), "{stack:?}");
}

#[test]
fn a_panicking_frameless_section_frees_the_lock_for_the_next_step() {
    let m = Mutex::new(1, None);
    let m1 = m.clone();
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            s.sync(&m1, |_, ()| panic!("in the section"));
            Ok(())
        },
        |s, e| {
            assert_eq!(e.code(), codes::INTERNAL_ERROR);
            s.success(())
        },
    );
    let m2 = m.clone();
    root.sync(&m, move |s, ()| s.success((30 + m2.counts().0 as i32,)));
    // The panic unwound the section's frame, which gave the lock back.
    assert_eq!(run(root).0, Ok((31,)));
    assert_eq!(m.counts(), (0, 0));
}

/// Frame seqs that run out (2^32 frames in one flow, as in a server's
/// long loop) go round past 0 skipping the seqs live frames still have:
/// a step's stack value stays reachable, and a timeout still finds its
/// step. Jumps the counter near its end instead of making 2^32 frames.
#[test]
fn seqs_going_round_skip_live_frames() {
    use crate::testing::TestTool;
    use std::time::Duration;
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let r = s.stack(7u32); // this frame keeps seq 1
        s.add(move |s, ()| {
            // A frame at seq 2, then the counter near its end.
            s.set_timeout(Duration::from_secs(1));
            s.stack(0u8);
            s.flow.seq = u32::MAX - 3;
            s.repeat(10, move |s, i| {
                assert_ne!(s.flow.seq, 0);
                assert_eq!(*s.stack_get(r)?, 7, "iteration {i}");
                Ok(())
            });
            s.add(|s, ()| {
                // Waits here for the timeout of the step at seq 2.
                s.wait_external();
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.advance(Duration::from_secs(2));
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::TIMEOUT, "the timeout found its step");
}
