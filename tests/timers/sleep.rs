//! `Step::sleep`: the next step runs after the delay of virtual time; the
//! step's timer goes with the step however it ends (cancel, a timeout
//! around it, a handle completing it first), the step's own cancel
//! callback runs whenever it was set; the step has one timer, shared with
//! `set_timeout`; it is refused in an error handler.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};

#[test]
fn the_next_step_runs_after_the_delay() {
    let mut tool = TestTool::new();
    let t0 = tool.now();
    let l = log();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.sleep(ms(30));
        Ok(())
    });
    let l2 = l.clone();
    root.add(move |s, ()| {
        push(
            &l2,
            format!("woke at {}ms", (s.tool().now() - t0).as_millis()),
        );
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    tool.advance(ms(29));
    assert_eq!(entries(&l), Vec::<String>::new(), "still asleep");
    tool.advance(ms(1));
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["woke at 30ms"]);
    assert_eq!(tool.pending().timers, 0);
}

#[test]
fn a_zero_delay_wakes_on_the_next_pass() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.sleep(ms(0));
        Ok(())
    });
    root.add(|s, ()| s.success((1u8,)));
    let p = root.promise(&mut tool);
    assert_eq!(tool.block_on::<(u8,)>(p).unwrap().0, 1);
    assert_eq!(tool.elapsed(), ms(0));
}

#[test]
fn parallel_sleeps_overlap() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.parallel()
            .add(|s, ()| {
                s.sleep(ms(10));
                Ok(())
            })
            .add(|s, ()| {
                s.sleep(ms(20));
                Ok(())
            });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(tool.elapsed(), ms(20));
}

#[test]
fn a_cancel_takes_the_timer_away_and_runs_the_steps_cancel_callback() {
    let mut tool = TestTool::new();
    let l = log();
    let mut root = AsyncSteps::new();
    let l2 = l.clone();
    root.add(move |s, ()| {
        let (l3, l4) = (l2.clone(), l2.clone());
        // Set before the sleep: it still runs.
        s.set_cancel(move || push(&l3, "cancel callback"));
        s.sleep(ms(1000));
        // A later one replaces it; the timer still goes.
        s.set_cancel(move || push(&l4, "later cancel callback"));
        Ok(())
    });
    let l4 = l.clone();
    root.add(move |_, ()| {
        push(&l4, "next step");
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(tool.pending().timers, 1);
    p.cancel();
    tool.run_all_ready();
    assert_eq!(tool.pending().timers, 0, "the timer went with the step");
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::CANCELED);
    tool.run_all();
    assert_eq!(entries(&l), ["later cancel callback"]);
}

#[test]
fn a_handle_that_completes_the_step_first_takes_the_timer_away() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.sleep(ms(3_600_000)); // an hour, or a handle first
        let h = s.wait_external();
        s.tool().immediate(move |_| {
            h.success(()).unwrap();
        });
        Ok(())
    });
    root.add(|s, ()| {
        // Two sleeps in one step: one timer, the later one.
        s.sleep(ms(50));
        s.sleep(ms(10));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(tool.pending().timers, 1, "the second step's one timer");
    tool.block_on(p).unwrap();
    assert_eq!(tool.elapsed(), ms(10));
    assert_eq!(tool.pending().timers, 0);
}

#[test]
fn sleep_and_set_timeout_share_the_steps_timer_the_later_wins() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add_catch(
        |s, ()| {
            s.sleep(ms(50));
            s.set_timeout(ms(5));
            Ok(())
        },
        |s, e| s.success((e.code().to_owned(),)),
    );
    let p = root.promise(&mut tool);
    assert_eq!(tool.block_on::<(String,)>(p).unwrap().0, codes::TIMEOUT);
    assert_eq!((tool.elapsed(), tool.pending().timers), (ms(5), 0));
}

#[test]
fn a_timeout_around_a_sleep_ends_it() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add_catch(
        |s, ()| {
            s.set_timeout(ms(5));
            s.add(|s, ()| {
                s.sleep(ms(50));
                Ok(())
            });
            Ok(())
        },
        |s, e| s.success((e.code().to_owned(),)),
    );
    let p = root.promise(&mut tool);
    assert_eq!(tool.block_on::<(String,)>(p).unwrap().0, codes::TIMEOUT);
    assert_eq!(tool.elapsed(), ms(5));
    assert_eq!(tool.pending().timers, 0, "the sleep's timer went too");
}

#[test]
fn sleep_is_refused_in_an_error_handler() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add_catch(
        |_, ()| Err(futoin_asyncsteps::Error::new("Boom")),
        |s, _| {
            s.sleep(ms(1));
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_internal(&e, "sleep() is not allowed in an error handler");
    assert_eq!(tool.pending().timers, 0);
}
