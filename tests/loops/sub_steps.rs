//! Loop iterations whose body adds sub-steps. A body that only adds steps
//! has no frame: its sub-steps run on the loop's level, and the first one
//! runs as the strand would run it next. A body that needs its frame after
//! adding (a `stack()` value, a timeout, an error) gets it with the steps
//! it added as its own. Each case here checks that this behaves exactly as
//! a frame per iteration would: callback order, the args each step gets,
//! values on the iteration's stack, its timeout and its wait flag, the
//! step budget, a sub-step that waits, fails or breaks the loop, and
//! nested loops (which must not grow the native stack).

use crate::common::*;
use futoin_asyncsteps::{Args, AsyncSteps, Error, Step, StepResult, TestTool};

/// Logs `drop <name>` when dropped (a name per iteration).
struct Named(Log, String);

impl Drop for Named {
    fn drop(&mut self) {
        push(&self.0, format!("drop {}", self.1));
    }
}

/// Adds a sub-step that logs `entry`.
fn add_logged(s: &mut Step<'_>, l: &Log, entry: String) {
    let l = l.clone();
    s.add(move |_, ()| {
        push(&l, entry);
        Ok(())
    });
}

/// A root whose one step runs `repeat(count, body)` under the error
/// handler `on_error`.
fn repeat_under_handler<B, H>(count: usize, body: B, on_error: H) -> AsyncSteps
where
    B: FnMut(&mut Step<'_>, usize) -> StepResult + Clone + Send + 'static,
    H: FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static,
{
    let mut root = AsyncSteps::new();
    root.add_catch(
        move |s, ()| {
            s.repeat(count, body);
            Ok(())
        },
        on_error,
    );
    root
}

/// Runs `root` to its end (it must succeed) on a new test tool.
fn run(root: AsyncSteps) -> TestTool {
    let mut tool = TestTool::new();
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    tool
}

#[test]
fn bodies_and_their_sub_steps_alternate_and_the_loop_drops_their_args() {
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.repeat(3, move |s, i| {
        push(&l2, format!("body {i}"));
        let l3 = l2.clone();
        s.add(move |s, a: Args| {
            push(&l3, format!("sub {i} args {}", a.len()));
            // Success args of the iteration: the next one's sub-step
            // takes none, and neither does the step after the loop.
            s.success((i,))
        });
        Ok(())
    });
    let l2 = l.clone();
    root.add(move |_, a: Args| {
        push(&l2, format!("after args {}", a.len()));
        Ok(())
    });
    let tool = run(root);
    assert_eq!(
        entries(&l),
        [
            "body 0",
            "sub 0 args 0",
            "body 1",
            "sub 1 args 0",
            "body 2",
            "sub 2 args 0",
            "after args 0",
        ]
    );
    // The step counts: the root's step, the loop, each iteration and its
    // sub-step, the iteration that finds the loop done, and the last step.
    assert_eq!(tool.pending().steps, 1 + 1 + 3 * 2 + 1 + 1);
}

#[test]
fn every_sub_step_a_body_adds_runs_before_the_next_body() {
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.repeat(2, move |s, i| {
        for name in ["a", "b", "c"] {
            add_logged(s, &l2, format!("{name} {i}"));
        }
        Ok(())
    });
    run(root);
    assert_eq!(entries(&l), ["a 0", "b 0", "c 0", "a 1", "b 1", "c 1"]);
}

#[test]
fn a_value_on_an_iterations_stack_is_dropped_before_the_next_body() {
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.repeat(3, move |s, i| {
        push(&l2, format!("body {i}"));
        s.stack(Named(l2.clone(), format!("value {i}")));
        add_logged(s, &l2, format!("sub {i}"));
        Ok(())
    });
    run(root);
    assert_eq!(
        entries(&l),
        [
            "body 0",
            "sub 0",
            "drop value 0",
            "body 1",
            "sub 1",
            "drop value 1",
            "body 2",
            "sub 2",
            "drop value 2",
        ]
    );
}

/// The flow yields after a bounded burst of steps (1024), inside such a
/// loop too: a flow started after it runs long before the loop ends.
#[test]
fn a_long_loop_of_sub_steps_yields_to_other_flows() {
    const N: usize = 100_000;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let mut tool = TestTool::new();
    let mut long = AsyncSteps::new();
    let d = done.clone();
    long.repeat(N, move |s, _| {
        let d = d.clone();
        s.add(move |_, ()| {
            d.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        });
        Ok(())
    });
    let p_long = long.promise::<()>(&mut tool);
    let mut other = AsyncSteps::new();
    let (d, sn) = (done.clone(), seen.clone());
    other.add(move |_, ()| {
        let now = d.load(std::sync::atomic::Ordering::Relaxed);
        sn.store(now, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    let p_other = other.promise::<()>(&mut tool);
    tool.block_on(p_other).unwrap();
    tool.block_on(p_long).unwrap();
    let at = seen.load(std::sync::atomic::Ordering::Relaxed);
    // A burst is 1024 steps, and each iteration counts two (itself and
    // its sub-step).
    assert!(
        (400..=600).contains(&at),
        "the other flow ran after {at} of {N} sub-steps"
    );
    assert_eq!(done.load(std::sync::atomic::Ordering::Relaxed), N);
}

#[test]
fn a_sub_step_that_waits_or_breaks_the_loop_ends_the_shortcut() {
    let l = log();
    let waiting = HandleSlot::default();
    let mut root = AsyncSteps::new();
    let (l2, w) = (l.clone(), waiting.clone());
    root.repeat(10, move |s, i| {
        let (l3, w) = (l2.clone(), w.clone());
        s.add(move |s, ()| {
            push(&l3, format!("sub {i}"));
            match i {
                1 => w.put(s.wait_external()),
                3 => return s.break_loop(),
                _ => {}
            }
            Ok(())
        });
        Ok(())
    });
    let l2 = l.clone();
    root.add(move |_, ()| {
        push(&l2, "after");
        Ok(())
    });
    let mut tool = TestTool::new();
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    assert_eq!(entries(&l), ["sub 0", "sub 1"]);
    waiting.take().success(()).unwrap();
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["sub 0", "sub 1", "sub 2", "sub 3", "after"]);
}

#[test]
fn a_failing_sub_step_reaches_the_handler_around_the_loop() {
    let l = log();
    let l2 = l.clone();
    let root = repeat_under_handler(
        10,
        move |s, i| {
            let l3 = l2.clone();
            s.add(move |s, ()| {
                push(&l3, format!("sub {i}"));
                if i == 2 {
                    return s.error("Boom", "in the third sub-step");
                }
                Ok(())
            });
            Ok(())
        },
        |s, e| {
            assert_eq!(e.code(), "Boom");
            let depth = s.state().async_stack().len();
            s.success((depth,))
        },
    );
    let mut tool = TestTool::new();
    let p = root.promise::<(usize,)>(&mut tool);
    let (depth,) = tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["sub 0", "sub 1", "sub 2"]);
    // The handler's step, its loop and the sub-step: an iteration that
    // only adds steps has no level of its own.
    assert_eq!(depth, 3);
}

/// A loop added by a loop body runs from the strand's own loop, not from
/// inside the outer iteration: thousands of nested loops need no native
/// stack (they would overflow it otherwise).
#[test]
fn deeply_nested_loops_do_not_grow_the_native_stack() {
    const DEPTH: usize = 20_000;
    fn nest(s: &mut futoin_asyncsteps::Step<'_>, left: usize, hits: Log) {
        if left == 0 {
            push(&hits, "innermost");
            return;
        }
        s.repeat(1, move |s, _| {
            nest(s, left - 1, hits.clone());
            Ok(())
        });
    }
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.add(move |s, ()| {
        nest(s, DEPTH, l2.clone());
        Ok(())
    });
    run(root);
    assert_eq!(entries(&l), ["innermost"]);
}

/// A timeout set by a body covers its iteration only: it is cancelled
/// when the iteration ends, before the next iteration's sub-step runs.
#[test]
fn a_timeout_of_an_iteration_ends_with_it() {
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.repeat(3, move |s, i| {
        if i == 0 {
            s.set_timeout(ms(10));
        }
        let l3 = l2.clone();
        s.add(move |s, ()| {
            let t = s.tool().stats().timers;
            push(&l3, format!("sub {i} timers {t}"));
            Ok(())
        });
        Ok(())
    });
    let tool = run(root);
    assert_eq!(tool.elapsed(), ms(0));
    assert_eq!(
        entries(&l),
        ["sub 0 timers 1", "sub 1 timers 0", "sub 2 timers 0"]
    );
}

/// A body that waits and adds sub-steps leaves its frame flagged as
/// waiting (the sub-steps end the wait): the next iteration gets a frame
/// of its own, or a later body that adds nothing would wait forever.
#[test]
fn a_body_that_waits_and_adds_leaves_no_wait_to_the_next_iteration() {
    let l = log();
    let waiting = HandleSlot::default();
    let mut root = AsyncSteps::new();
    let (l2, w) = (l.clone(), waiting.clone());
    root.repeat(3, move |s, i| {
        push(&l2, format!("body {i}"));
        if i == 0 {
            w.put(s.wait_external());
        }
        if i < 2 {
            add_logged(s, &l2, format!("sub {i}"));
        }
        Ok(())
    });
    run(root);
    assert_eq!(
        entries(&l),
        ["body 0", "sub 0", "body 1", "sub 1", "body 2"]
    );
    // The sub-steps completed the first step: its handle is refused.
    assert!(waiting.take().success(()).is_err());
}

/// A body that keeps a `stack()` value after adding its sub-steps gets its
/// frame then, and the sub-steps already added run inside it: the value
/// lives until they end, and is dropped before the next body.
#[test]
fn a_body_that_needs_its_frame_after_adding_keeps_its_sub_steps() {
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.repeat(2, move |s, i| {
        add_logged(s, &l2, format!("sub {i}"));
        add_logged(s, &l2, format!("sub {i}b"));
        s.stack(Named(l2.clone(), format!("value {i}")));
        Ok(())
    });
    run(root);
    assert_eq!(
        entries(&l),
        [
            "sub 0",
            "sub 0b",
            "drop value 0",
            "sub 1",
            "sub 1b",
            "drop value 1",
        ]
    );
}

/// A timeout set after adding covers the sub-steps already added: the
/// waiting one is cancelled and the `Timeout` is raised at the body.
#[test]
fn a_timeout_set_after_adding_covers_the_sub_steps() {
    let l = log();
    let l2 = l.clone();
    let root = repeat_under_handler(
        3,
        move |s, i| {
            let l3 = l2.clone();
            s.add(move |s, ()| {
                push(&l3, format!("sub {i} waits"));
                let l4 = l3.clone();
                s.set_cancel(move || push(&l4, "cancelled"));
                Ok(())
            });
            s.set_timeout(ms(10));
            Ok(())
        },
        |s, e| {
            let depth = s.state().async_stack().len();
            s.success((e.code().to_string(), depth))
        },
    );
    let mut tool = TestTool::new();
    let p = root.promise::<(String, usize)>(&mut tool);
    tool.run_all_ready();
    tool.advance(ms(10));
    let (code, depth) = tool.block_on(p).unwrap();
    assert_eq!(code, "Timeout");
    assert_eq!(entries(&l), ["sub 0 waits", "cancelled"]);
    // The step, its loop and the body's frame (the timeout is the body's).
    assert_eq!(depth, 3);
}

/// A body that adds steps and then returns an error (`error()` after
/// `add()` would be a misuse): they never run, and the error is raised at
/// the body (its handler-less frame) and reaches the handler around the
/// loop.
#[test]
fn a_body_that_adds_and_then_fails_runs_none_of_its_sub_steps() {
    let l = log();
    let l2 = l.clone();
    let root = repeat_under_handler(
        3,
        move |s, i| {
            add_logged(s, &l2, format!("sub {i}"));
            if i == 1 {
                return Err(Error::with_info("Boom", "after adding"));
            }
            Ok(())
        },
        |s, e| s.success((e.code().to_string(),)),
    );
    let (code,): (String,) = crate::common::run(root).unwrap();
    assert_eq!(code, "Boom");
    assert_eq!(entries(&l), ["sub 0"]);
}
