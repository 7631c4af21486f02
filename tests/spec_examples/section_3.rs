//! The examples of the spec's section 3: single-level steps, sub-steps,
//! `parallel()` steps and `state()`, loops, and waiting for an external
//! event (also completed from another thread).

use crate::common::Log;
use futoin_asyncsteps::{error::codes, AsyncSteps, AsyncTool, TestTool};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// 3.1. Single-level steps
// ---------------------------------------------------------------------------

fn spec_3_1_flow(something: bool, l: &Log) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let (b, c) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            if something {
                s.success((1i32, 2i32))
            } else {
                s.error(codes::NOT_IMPLEMENTED, "nothing to do")
            }
        },
        move |_, e| {
            b.push(format!("externalError: {}", e.code()));
            Ok(())
        },
    )
    .add(move |_, (res1, res2): (i32, i32)| {
        c.push(format!("externalSuccess: {res1}, {res2}"));
        Ok(())
    });
    root
}

#[test]
fn spec_3_1_single_level_steps() {
    // something == true
    let l = Log::default();
    let mut tool = TestTool::new();
    let p = spec_3_1_flow(true, &l).promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(l.get(), ["externalSuccess: 1, 2"]);

    // something == false
    let l = Log::default();
    let p = spec_3_1_flow(false, &l).promise::<()>(&mut tool);
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), codes::NOT_IMPLEMENTED);
    assert_eq!(err.info(), Some("nothing to do"));
    assert_eq!(l.get(), ["externalError: NotImplemented"]);
}

// ---------------------------------------------------------------------------
// 3.2. Sub-steps
// ---------------------------------------------------------------------------

fn spec_3_2_flow(something: bool, l: &Log) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let (a, b, c) = (l.clone(), l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            a.push("inner_as");
            let (d, e, f) = (a.clone(), a.clone(), a.clone());
            s.add_catch(
                move |s, ()| {
                    d.push("inner2 #1");
                    if something {
                        s.success((1i32,))
                    } else {
                        s.error(codes::NOT_IMPLEMENTED, "nothing to do")
                    }
                },
                move |_, err| {
                    e.push(format!("Spotted error {}", err.code()));
                    // continue with higher level error handlers
                    Ok(())
                },
            );
            s.add(move |s, (res1,): (i32,)| {
                f.push(format!("inner2 #2: {res1}"));
                s.success((res1, 2i32))
            });
            Ok(())
        },
        move |_, e| {
            b.push(format!("externalError: {}", e.code()));
            Ok(())
        },
    )
    .add(move |_, (res1, res2): (i32, i32)| {
        c.push(format!("externalSuccess: {res1}, {res2}"));
        Ok(())
    });
    root
}

#[test]
fn spec_3_2_sub_steps() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let p = spec_3_2_flow(true, &l).promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "inner_as",
            "inner2 #1",
            "inner2 #2: 1",
            "externalSuccess: 1, 2"
        ]
    );

    let l = Log::default();
    let p = spec_3_2_flow(false, &l).promise::<()>(&mut tool);
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), codes::NOT_IMPLEMENTED);
    assert_eq!(
        l.get(),
        [
            "inner_as",
            "inner2 #1",
            "Spotted error NotImplemented",
            "externalError: NotImplemented",
        ]
    );
}

// ---------------------------------------------------------------------------
// 3.3. parallel() steps and state()
// ---------------------------------------------------------------------------

/// `fail`: which branch (1 or 2) raises an error after setting its state
/// variable; 0 for none.
fn spec_3_3_flow(fail: u8, l: &Log) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let (a, b, c) = (l.clone(), l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let (p1, e1, p2, e2) = (a.clone(), a.clone(), a.clone(), a.clone());
            s.parallel()
                .add_catch(
                    move |s, ()| {
                        p1.push("branch 1");
                        s.state().set("parallel_1", 1i32);
                        if fail == 1 {
                            return s.error("Fail1", "branch 1 failed");
                        }
                        Ok(())
                    },
                    move |_, err| {
                        e1.push(format!("Spotted error {}", err.code()));
                        // continue with higher level error handlers
                        Ok(())
                    },
                )
                .add_catch(
                    move |s, ()| {
                        p2.push("branch 2");
                        s.state().set("parallel_2", 2i32);
                        if fail == 2 {
                            return s.error("Fail2", "branch 2 failed");
                        }
                        Ok(())
                    },
                    move |s, err| {
                        e2.push(format!("branch 2 ignores {}", err.code()));
                        s.state().set("parallel_2", 0i32);
                        // ignore error
                        s.success(())
                    },
                );
            Ok(())
        },
        move |s, e| {
            b.push(format!(
                "externalError: {} (parallel_2 set: {})",
                e.code(),
                s.state().contains("parallel_2")
            ));
            Ok(())
        },
    )
    .add(move |s, ()| {
        let st = s.state();
        c.push(format!(
            "externalSuccess: {}, {}",
            st.get::<i32>("parallel_1").unwrap(),
            st.get::<i32>("parallel_2").unwrap()
        ));
        Ok(())
    });
    root
}

#[test]
fn spec_3_3_parallel_and_state() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let p = spec_3_3_flow(0, &l).promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(l.get(), ["branch 1", "branch 2", "externalSuccess: 1, 2"]);
}

#[test]
fn spec_3_3_parallel_branch_handler_ignores_error() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let p = spec_3_3_flow(2, &l).promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "branch 1",
            "branch 2",
            "branch 2 ignores Fail2",
            "externalSuccess: 1, 0"
        ]
    );
}

#[test]
fn spec_3_3_parallel_branch_error_goes_to_outer_handler() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let p = spec_3_3_flow(1, &l).promise::<()>(&mut tool);
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), "Fail1");
    // Branch 1 fails before branch 2 got its turn: branch 2 is cancelled and
    // never runs; the step after the parallel never runs either.
    assert_eq!(
        l.get(),
        [
            "branch 1",
            "Spotted error Fail1",
            "externalError: Fail1 (parallel_2 set: false)"
        ]
    );
}

// ---------------------------------------------------------------------------
// 3.4. loops
// ---------------------------------------------------------------------------

#[test]
fn spec_3_4_loops_repeat_and_for_each() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.state().set("b", 2i32);
    root.state().set("c", 3i32);
    root.state().set("a", 1i32);
    let x = l.clone();
    root.add(move |s, ()| {
        let a = x.clone();
        s.repeat(3, move |_, i| {
            a.push(format!("{i}"));
            Ok(())
        });
        let b = x.clone();
        s.for_each(vec![1, 3, 3], move |_, k, v| {
            b.push(format!("{k}={v}"));
            Ok(())
        });
        // forEach over the state map: taken when the previous loops are done,
        // through an ordered snapshot so the printed order is exact.
        let c = x.clone();
        s.add(move |s, ()| {
            let m: BTreeMap<String, i32> = {
                let st = s.state();
                st.keys()
                    .map(|k| (k.to_string(), *st.get::<i32>(k).unwrap()))
                    .collect()
            };
            s.for_each(m, move |_, k, v| {
                c.push(format!("{k}={v}"));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let d = l.clone();
    root.add(move |_, ()| {
        d.push("after loops");
        Ok(())
    });

    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "0",
            "1",
            "2",
            "0=1",
            "1=3",
            "2=3",
            "a=1",
            "b=2",
            "c=3",
            "after loops"
        ]
    );
}

#[test]
fn spec_3_4_for_each_btreemap_order_and_iteration_sub_steps() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let x = l.clone();
    root.add(move |s, ()| {
        let mut m = BTreeMap::new();
        m.insert("pear".to_string(), 3u32);
        m.insert("apple".to_string(), 1u32);
        m.insert("banana".to_string(), 2u32);
        let a = x.clone();
        // Each iteration is a step: its sub-steps finish before the next one.
        s.for_each(m, move |s, k, v| {
            a.push(format!("{k} = {v}"));
            let b = a.clone();
            s.add(move |_, ()| {
                b.push(format!("sub-step of {k}"));
                Ok(())
            });
            Ok(())
        });
        let c = x.clone();
        s.for_each(vec!["apple", "banana"], move |_, k, v| {
            c.push(format!("{k} = {v}"));
            Ok(())
        });
        Ok(())
    });
    let d = l.clone();
    // Normal loop termination is a success() without args.
    root.add(move |_, args: futoin_asyncsteps::Args| {
        d.push(format!("after loops: {} args", args.len()));
        Ok(())
    });

    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        [
            "apple = 1",
            "sub-step of apple",
            "banana = 2",
            "sub-step of banana",
            "pear = 3",
            "sub-step of pear",
            "0 = apple",
            "1 = banana",
            "after loops: 0 args",
        ]
    );
}

// ---------------------------------------------------------------------------
// 3.5. External event wait
// ---------------------------------------------------------------------------

/// `outcome`: what `callSomeExternal` reports after 5 ms of virtual time.
fn spec_3_5_flow(outcome: Result<(), &'static str>, l: &Log) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let h = s.wait_external();
            a.push("callSomeExternal");
            let c = a.clone();
            // callSomeExternal( function(err) { ... } )
            s.tool()
                .deferred(Duration::from_millis(5), move |_| match outcome {
                    Err(err) => {
                        c.push(format!("external callback: {err}"));
                        // try { as.error(err) } catch { ignore }
                        let _ = h.error("ExternalError", err);
                    }
                    Ok(()) => {
                        c.push("external callback: ok");
                        h.success(()).unwrap();
                    }
                });
            Ok(())
        },
        move |s, e| {
            b.push(format!(
                "onerror: {} (error_info: {})",
                e.code(),
                s.state().error_info().unwrap_or("-")
            ));
            Ok(())
        },
    );
    let c = l.clone();
    root.add(move |_, ()| {
        c.push("next step");
        Ok(())
    });
    root
}

#[test]
fn spec_3_5_wait_external_success() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let mut p = spec_3_5_flow(Ok(()), &l).promise::<()>(&mut tool);
    tool.run_all_ready();
    // waitExternal() disables implicit success: the flow waits.
    assert_eq!(l.get(), ["callSomeExternal"]);
    assert!(p.try_take().is_none());
    assert_eq!(tool.pending().flows, 1);

    tool.block_on(p).unwrap();
    assert_eq!(
        l.get(),
        ["callSomeExternal", "external callback: ok", "next step"]
    );
    assert_eq!(tool.elapsed(), Duration::from_millis(5));
    assert_eq!(tool.pending().flows, 0);
}

#[test]
fn spec_3_5_wait_external_error() {
    let l = Log::default();
    let mut tool = TestTool::new();
    let p = spec_3_5_flow(Err("disk on fire"), &l).promise::<()>(&mut tool);
    let err = tool.block_on(p).unwrap_err();
    assert_eq!(err.code(), "ExternalError");
    assert_eq!(err.info(), Some("disk on fire"));
    assert_eq!(
        l.get(),
        [
            "callSomeExternal",
            "external callback: disk on fire",
            "onerror: ExternalError (error_info: disk on fire)",
        ]
    );
    assert_eq!(tool.elapsed(), Duration::from_millis(5));
}

/// 3.5 where the external event comes from another OS thread (so the real
/// event loop is used); the result is still exact.
#[test]
fn spec_3_5_wait_external_from_other_thread() {
    let l = Log::default();
    let mut tool = AsyncTool::new().unwrap();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    let worker: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Default::default();
    let w = worker.clone();
    root.add(move |s, ()| {
        let h = s.wait_external();
        a.push("callSomeExternal");
        *w.lock().unwrap() = Some(std::thread::spawn(move || {
            h.success(("from thread".to_string(), 7u64)).unwrap();
            // A second completion is refused.
            assert!(h.success(("again".to_string(), 8u64)).is_err());
        }));
        Ok(())
    });
    let b = l.clone();
    root.add(move |s, (msg, n): (String, u64)| {
        b.push(format!("next step: {msg} {n}"));
        s.success((n * 2,))
    });
    let p = root.promise::<(u64,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (14,));
    worker.lock().unwrap().take().unwrap().join().unwrap();
    assert_eq!(l.get(), ["callSomeExternal", "next step: from thread 7"]);
}
