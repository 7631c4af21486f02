//! `Mutex` (spec 2.3): exactly `max` inside at once, the queue limit and
//! the rejection's info, strict FIFO handover, the section's args,
//! result and errors, cancel and timeout while queued and while holding,
//! zero limits, a default `Mutex`, a flow ended by a panicking `Drop`,
//! and contention from flows on two loops.

use crate::common::*;
use crate::{code_of, codes_of, error_of, occupant, run_all_ok, sleep, Occupancy};
use futoin_asyncsteps::runtime::Runtime;
use futoin_asyncsteps::sync::{ISync, Mutex, Throttle};
use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn mutex_admits_exactly_max_at_once_and_everyone_eventually() {
    let mut tool = TestTool::new();
    let m = Mutex::new(3, None);
    let occ = Occupancy::default();
    let ps: Vec<_> = (0..10)
        .map(|_| occupant(&m, &occ, ms(10)).promise::<()>(&mut tool))
        .collect();
    tool.run_all_ready();
    assert_eq!(m.counts(), (3, 7));
    run_all_ok(&mut tool, ps);
    assert_eq!(occ.get(), (0, 3, 10));
    // 10 flows, 3 at a time, 10 ms each: 4 rounds.
    assert_eq!(tool.elapsed(), ms(40));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn mutex_queue_limit_rejects_exactly_the_overflow() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, Some(2));
    let occ = Occupancy::default();
    let ps: Vec<_> = (0..6)
        .map(|_| occupant(&m, &occ, ms(5)).promise::<()>(&mut tool))
        .collect();
    tool.run_all();
    assert_eq!(
        codes_of(&mut tool, ps),
        [
            "ok",
            "ok",
            "ok",
            "DefenseRejected",
            "DefenseRejected",
            "DefenseRejected"
        ]
    );
    assert_eq!(occ.get(), (0, 1, 3));
}

#[test]
fn rejection_info_names_the_object() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, Some(0));
    let occ = Occupancy::default();
    let _a = occupant(&m, &occ, ms(5)).promise::<()>(&mut tool);
    let b = occupant(&m, &occ, ms(5)).promise::<()>(&mut tool);
    tool.run_all();
    let e = tool.block_on(b).unwrap_err();
    assert_eq!(e.code(), codes::DEFENSE_REJECTED);
    assert_eq!(e.info(), Some("Mutex: the queue is full"));
}

#[test]
fn handover_is_strict_fifo() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Log::default();
    for i in 0..5 {
        let mut root = AsyncSteps::new();
        let r = r.clone();
        root.sync(&m, move |s, ()| {
            r.push(format!("in {i}"));
            sleep(s, ms(1));
            Ok(())
        });
        root.execute(&mut tool);
    }
    tool.run_all();
    assert_eq!(r.get(), ["in 0", "in 1", "in 2", "in 3", "in 4"]);
}

#[test]
fn section_gets_incoming_args_and_its_result_goes_on() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    // Make the second flow queue, so its args travel the slow path too.
    let _holder = occupant(&m, &occ, ms(5)).promise::<()>(&mut tool);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((20i32, "x".to_owned())));
    root.sync(&m, |s, (v, t): (i32, String)| s.success((v + 1, t + "y")));
    root.add(|s, (v, t): (i32, String)| s.success((v * 2, t)));
    let p = root.promise::<(i32, String)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (42, "xy".to_owned()));
}

#[test]
fn wrong_section_args_are_an_internal_error_and_release() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u8,)));
    root.sync(&m, |_, (_v,): (String,)| Ok(()));
    let e = error_of(&mut tool, root);
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn error_in_section_releases_and_reaches_the_handlers() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Log::default();
    let mut a = AsyncSteps::new();
    let r1 = r.clone();
    a.sync_catch(
        &m,
        |s, ()| s.error("MyError", "inside"),
        move |_, e| {
            r1.push(format!("section handler {}", e.code()));
            Ok(()) // not handled: goes on
        },
    );
    let pa = a.promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    let r2 = r.clone();
    b.sync(&m, move |_, ()| {
        r2.push("b inside");
        Ok(())
    });
    let pb = b.promise::<()>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(pa).unwrap_err().code(), "MyError");
    tool.block_on(pb).unwrap();
    assert_eq!(r.get(), ["section handler MyError", "b inside"]);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn recovered_error_in_section_passes_the_handler_result_on() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    root.sync_catch(
        &m,
        |s, ()| s.error("MyError", "inside"),
        |s, _| s.success(("recovered".to_owned(),)),
    );
    let p = root.promise::<(String,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap().0, "recovered");
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn cancel_while_queued_leaves_the_queue() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let a = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    let b = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    let c = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 2));
    b.cancel();
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 1));
    tool.run_all();
    tool.block_on(a).unwrap();
    assert_eq!(code_of(&mut tool, b), codes::CANCELED);
    tool.block_on(c).unwrap();
    // b never entered: a then c, 10 ms each.
    assert_eq!(occ.get(), (0, 1, 2));
    assert_eq!(tool.elapsed(), ms(20));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn timeout_while_queued_leaves_the_queue() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let a = occupant(&m, &occ, ms(50)).promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    let m2 = m.clone();
    b.add(move |s, ()| {
        s.set_timeout(ms(10));
        s.sync(&m2, |_, ()| panic!("never enters"));
        Ok(())
    });
    let b = b.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 1));
    tool.advance(ms(10));
    assert_eq!(code_of(&mut tool, b), codes::TIMEOUT);
    assert_eq!(m.counts(), (1, 0));
    tool.run_all();
    tool.block_on(a).unwrap();
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn cancel_and_timeout_while_holding_release_for_the_next() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let a = occupant(&m, &occ, ms(100)).promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    let m2 = m.clone();
    let occ2 = occ.clone();
    b.add(move |s, ()| {
        s.set_timeout(ms(150));
        s.sync(&m2, move |s, ()| {
            occ2.enter();
            sleep(s, ms(1000));
            Ok(())
        });
        Ok(())
    });
    let b = b.promise::<()>(&mut tool);
    let c = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    tool.run_all_ready();
    // a holds; cancel it: b gets in at once.
    tool.advance(ms(20));
    a.cancel();
    tool.run_all_ready();
    assert_eq!(code_of(&mut tool, a), codes::CANCELED);
    assert_eq!(occ.get().2, 2);
    // b times out while holding (at 150 ms): c gets in.
    tool.advance(ms(130));
    assert_eq!(code_of(&mut tool, b), codes::TIMEOUT);
    tool.run_all();
    tool.block_on(c).unwrap();
    assert_eq!(occ.get().2, 3);
    assert_eq!(tool.elapsed(), ms(160));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn zero_limits_are_clear_internal_errors() {
    /// A flow of one empty section on `obj`.
    fn empty_section<S: ISync + Clone>(obj: &S) -> AsyncSteps {
        let mut r = AsyncSteps::new();
        r.sync(obj, |_, ()| Ok(()));
        r
    }
    let mut tool = TestTool::new();
    let cases: Vec<(AsyncSteps, &str)> = vec![
        (
            empty_section(&Mutex::new(0, None)),
            "Mutex: max is 0, so no flow can ever enter",
        ),
        (
            empty_section(&Throttle::new(0, ms(10), None)),
            "Throttle: max is 0, so no flow can ever enter",
        ),
        (
            empty_section(&Throttle::new(1, Duration::ZERO, None)),
            "Throttle: the period is zero, so it would limit nothing",
        ),
    ];
    for (root, info) in cases {
        let e = error_of(&mut tool, root);
        assert_eq!((e.code(), e.info()), (codes::INTERNAL_ERROR, Some(info)));
    }
}

#[test]
fn contention_from_flows_on_two_loops() {
    let rt = Runtime::builder()
        .loops(2)
        .pin_threads(false)
        .build()
        .unwrap();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    const FLOWS: usize = 200;
    const ROUNDS: usize = 20;
    let loops_seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    // Half the flows on each loop, so both contend for the mutex.
    let ps: Vec<_> = (0..FLOWS)
        .map(|i| {
            let mut root = AsyncSteps::new();
            let (m, occ, seen, h) = (m.clone(), occ.clone(), loops_seen.clone(), rt.handle());
            root.repeat(ROUNDS, move |s, _| {
                let (occ, seen, h) = (occ.clone(), seen.clone(), h.clone());
                s.sync(&m, move |s, ()| {
                    occ.enter();
                    seen.lock().unwrap().insert(h.current_loop().unwrap());
                    // Park while inside until the loop's next turn: the
                    // other flows of this loop (and the other loop) run.
                    s.add(|s, ()| {
                        let w = s.wait_external();
                        s.tool().immediate(move |_| {
                            w.success(()).unwrap();
                        });
                        Ok(())
                    });
                    s.add(move |_, ()| {
                        occ.leave();
                        Ok(())
                    });
                    Ok(())
                });
                Ok(())
            });
            rt.loop_handle(i % 2).unwrap().promise::<()>(root)
        })
        .collect();
    for p in ps {
        p.wait().unwrap();
    }
    assert_eq!(occ.get(), (0, 1, FLOWS * ROUNDS));
    assert_eq!(m.counts(), (0, 0));
    assert_eq!(loops_seen.lock().unwrap().len(), 2);
}

/// A value whose `Drop` panics.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("drop panicked");
    }
}

#[test]
fn a_flow_ended_by_a_panicking_drop_still_frees_its_slot() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut a = AsyncSteps::new();
    a.sync(&m, |s, ()| {
        s.stack(PanicOnDrop);
        Ok(())
    });
    let pa = a.promise::<()>(&mut tool);
    let mut b = AsyncSteps::new();
    b.sync(&m, |s, ()| s.success((7,)));
    let pb = b.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(code_of(&mut tool, pa), codes::INTERNAL_ERROR);
    assert_eq!(tool.block_on(pb).unwrap(), (7,));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_default_mutex_lets_one_in_and_queues_the_rest() {
    use futoin_asyncsteps::sync::Mutex;
    use std::time::Duration;
    let mut tool = TestTool::new();
    let m = Mutex::default();
    let ps: Vec<_> = (0..50)
        .map(|_| {
            let mut root = AsyncSteps::new();
            root.sync(&m, |s, ()| {
                s.add_catch(
                    |s, ()| {
                        s.set_timeout(Duration::from_millis(10));
                        Ok(())
                    },
                    |s, _| s.success(()),
                );
                Ok(())
            });
            root.promise::<()>(&mut tool)
        })
        .collect();
    tool.run_all_ready();
    assert_eq!(m.counts(), (1, 49)); // max 1, no queue limit
    for p in ps {
        tool.block_on(p).unwrap();
    }
    assert_eq!(tool.elapsed(), Duration::from_millis(500));
}
