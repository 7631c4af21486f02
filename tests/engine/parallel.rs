//! Parallel steps (spec 1.5, 2.2.6): every branch starts before any
//! branch's sub-steps go on, results through the state, a failing branch
//! cancelling its siblings innermost first, a handler that recovers, an
//! empty parallel, nesting, and a branch that waits while another ends.

use crate::common::*;
use futoin_asyncsteps::{AsyncSteps, ExternalHandle, TestTool};

#[test]

fn parallel_all_branches_start_before_any_branch_substeps_continue() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let l0 = l.clone();
    root.add(move |s, ()| {
        let (a, b, c) = (l0.clone(), l0.clone(), l0.clone());
        s.parallel()
            .add(move |s, ()| {
                push(&a, "A start");
                let a2 = a.clone();
                s.add(move |_, ()| {
                    push(&a2, "A sub");
                    Ok(())
                });
                Ok(())
            })
            .add(move |s, ()| {
                push(&b, "B start");
                let b2 = b.clone();
                s.add(move |_, ()| {
                    push(&b2, "B sub");
                    Ok(())
                });
                Ok(())
            })
            .add(move |_, ()| {
                push(&c, "C start");
                Ok(())
            });
        let d = l0.clone();
        s.add(move |_, ()| {
            push(&d, "after");
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        entries(&l),
        ["A start", "B start", "C start", "A sub", "B sub", "after"]
    );
}

#[test]
fn parallel_results_via_state() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.parallel()
            .add(|s, ()| {
                s.add(|s, ()| {
                    s.state().set("result1", 10i32);
                    Ok(())
                });
                Ok(())
            })
            .add(|s, ()| {
                s.state().set("result2", 32i32);
                Ok(())
            });
        s.add(|s, ()| {
            let st = s.state();
            let sum = st.get::<i32>("result1").unwrap() + st.get::<i32>("result2").unwrap();
            s.success((sum,))
        });
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 42);
}

#[test]
fn parallel_branch_error_cancels_siblings_innermost_first() {
    let l = log();
    let fail: Slot<ExternalHandle> = slot();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (l0, f0) = (l.clone(), fail.clone());
    root.add(move |s, ()| {
        let (h, a, b, f) = (l0.clone(), l0.clone(), l0.clone(), f0.clone());
        s.parallel_catch(move |_, e| {
            push(&h, format!("handler {}", e.code()));
            Ok(())
        })
        .add(move |s, ()| {
            let a1 = a.clone();
            s.set_cancel(move || push(&a1, "A outer cancel"));
            let a2 = a.clone();
            s.add(move |s, ()| {
                let a3 = a2.clone();
                s.set_cancel(move || push(&a3, "A inner cancel"));
                Ok(())
            });
            Ok(())
        })
        .add(move |s, ()| {
            s.set_cancel(move || push(&b, "B cancel"));
            Ok(())
        })
        .add(move |s, ()| {
            *f.lock().unwrap() = Some(s.wait_external());
            Ok(())
        });
        let n = l0.clone();
        s.add(move |_, ()| {
            push(&n, "never");
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    assert!(entries(&l).is_empty());
    let h = fail.lock().unwrap().take().unwrap();
    h.error("Boom", "branch C").unwrap();
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), "Boom");
    assert_eq!(e.info(), Some("branch C"));
    assert_eq!(
        entries(&l),
        [
            "A inner cancel",
            "A outer cancel",
            "B cancel",
            "handler Boom"
        ]
    );
    assert_eq!(tool.pending().flows, 0);
}

#[test]
fn parallel_catch_recovers_and_next_step_runs() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let l0 = l.clone();
    root.parallel_catch(move |s, e| {
        push(&l0, format!("handler {} {:?}", e.code(), e.info()));
        s.success(())
    })
    .add(|s, ()| {
        s.state().set("ok", true);
        Ok(())
    })
    .add(|s, ()| s.error("BranchFailed", "b2"));
    let l1 = l.clone();
    root.add(move |s, ()| {
        push(&l1, "next");
        let ok = *s.state().get::<bool>("ok").unwrap();
        s.success((ok, "done".to_string()))
    });
    let p = root.promise::<(bool, String)>(&mut tool);
    let (ok, msg) = tool.block_on(p).unwrap();
    assert!(ok);
    assert_eq!(msg, "done");
    assert_eq!(entries(&l), ["handler BranchFailed Some(\"b2\")", "next"]);
}

#[test]
fn parallel_empty_succeeds() {
    let mut tool = TestTool::new();
    // Empty parallel on the root model.
    let mut root = AsyncSteps::new();
    root.parallel();
    root.add(|s, ()| s.success((1u8,)));
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 1);

    // Empty parallel as a sub-step.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.parallel();
        s.add(|s, ()| s.success((2u8,)));
        Ok(())
    });
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 2);

    // Empty parallel as the last sub-step: the step succeeds with no args.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.parallel();
        Ok(())
    });
    root.add(|s, ()| s.success((3u8,)));
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 3);
    assert_eq!(tool.pending().flows, 0);
}

#[test]
fn parallel_nested_inside_branch() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b, c) = (l.clone(), l.clone(), l.clone());
    root.parallel()
        .add(move |s, ()| {
            push(&a, "A");
            let (a1, a2, a3) = (a.clone(), a.clone(), a.clone());
            s.parallel()
                .add(move |s, ()| {
                    push(&a1, "A1");
                    s.state().set("a1", 1i32);
                    Ok(())
                })
                .add(move |s, ()| {
                    push(&a2, "A2");
                    s.state().set("a2", 2i32);
                    Ok(())
                });
            s.add(move |_, ()| {
                push(&a3, "A after inner parallel");
                Ok(())
            });
            Ok(())
        })
        .add(move |s, ()| {
            push(&b, "B");
            s.state().set("b", 4i32);
            Ok(())
        });
    root.add(move |s, ()| {
        push(&c, "after");
        let st = s.state();
        let v = st.get::<i32>("a1").unwrap()
            + st.get::<i32>("a2").unwrap()
            + st.get::<i32>("b").unwrap();
        s.success((v,))
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 7);
    assert_eq!(
        entries(&l),
        ["A", "B", "A1", "A2", "A after inner parallel", "after"]
    );
}

#[test]
fn parallel_branch_waits_while_other_finishes() {
    let l = log();
    let ext: Slot<ExternalHandle> = slot();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b, e) = (l.clone(), l.clone(), ext.clone());
    root.parallel()
        .add(move |s, ()| {
            push(&a, "A waits");
            *e.lock().unwrap() = Some(s.wait_external());
            Ok(())
        })
        .add(move |s, ()| {
            push(&b, "B starts");
            let b2 = b.clone();
            s.add(move |_, ()| {
                push(&b2, "B done");
                Ok(())
            });
            Ok(())
        });
    let c = l.clone();
    root.add(move |s, ()| {
        push(&c, "after");
        s.success((5u32,))
    });
    let mut p = root.promise::<(u32,)>(&mut tool);
    tool.run_all();
    assert!(p.try_take().is_none());
    assert_eq!(entries(&l), ["A waits", "B starts", "B done"]);
    assert_eq!(tool.pending().flows, 1);

    let h = ext.lock().unwrap().take().unwrap();
    assert!(h.is_valid());
    h.success(()).unwrap();
    assert!(!h.is_valid());
    assert_eq!(tool.block_on(p).unwrap().0, 5);
    assert_eq!(entries(&l), ["A waits", "B starts", "B done", "after"]);
}
