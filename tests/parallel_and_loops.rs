//! Parallel steps, success_step, copy_from, model cloning,
//! new_instance and the step stack (spec 1.3-1.8, 1.12, 1.14, 2.2).

use futoin_asyncsteps::{error::codes, AsyncSteps, ExternalHandle, StackRef, TestTool};
use std::sync::{Arc, Mutex};

mod common;
use common::*;

// ---------------------------------------------------------------- parallel

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

// ---------------------------------------------------------------- success_step

#[test]
fn success_step_root_and_inner() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.success_step((1i32, "x".to_string()));
    root.add(|s, (a, b): (i32, String)| {
        let seen = format!("{a}{b}");
        s.add(move |s, ()| {
            s.state().set("seen", seen);
            Ok(())
        });
        s.success_step((a + 6, b + "y"));
        Ok(())
    });
    root.add(|s, (a, b): (i32, String)| {
        let seen = s.state().get::<String>("seen").unwrap().clone();
        s.success((a, b, seen))
    });
    let p = root.promise::<(i32, String, String)>(&mut tool);
    assert_eq!(
        tool.block_on(p).unwrap(),
        (7, "xy".to_string(), "1x".to_string())
    );
}

// ---------------------------------------------------------------- copy_from

#[test]
fn step_copy_from_appends_steps_and_missing_state() {
    let l = log();
    let mut model = AsyncSteps::new();
    model.state().set("k1", 1i32);
    model.state().set("shared", "model".to_string());
    let (m1, m2) = (l.clone(), l.clone());
    model.add(move |s, ()| {
        push(&m1, "m1");
        s.success((5i32,))
    });
    model.add(move |s, (v,): (i32,)| {
        push(&m2, format!("m2 {v}"));
        s.success((v * 2,))
    });

    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.state().set("shared", "flow".to_string());
    let a = l.clone();
    root.add(move |s, ()| {
        let (x, y) = (a.clone(), a.clone());
        s.add(move |_, ()| {
            push(&x, "pre");
            Ok(())
        });
        s.copy_from(&model);
        // State is copied at once.
        push(&a, format!("k1 copied: {}", s.state().contains("k1")));
        s.add(move |s, (v,): (i32,)| {
            push(&y, format!("post {v}"));
            let st = s.state();
            let out = (
                *st.get::<i32>("k1").unwrap(),
                st.get::<String>("shared").unwrap().clone(),
            );
            s.success(out)
        });
        Ok(())
    });
    let p = root.promise::<(i32, String)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (1, "flow".to_string()));
    assert_eq!(
        entries(&l),
        ["k1 copied: true", "pre", "m1", "m2 5", "post 10"]
    );
}

#[test]
fn model_copy_from_appends_steps_and_missing_state() {
    let l = log();
    let mut a = AsyncSteps::new();
    a.state().set("x", 1i32);
    let la = l.clone();
    a.add(move |_, ()| {
        push(&la, "a1");
        Ok(())
    });

    let mut b = AsyncSteps::new();
    b.state().set("x", 2i32);
    b.state().set("y", 3i32);
    let (lb1, lb2) = (l.clone(), l.clone());
    b.add(move |_, ()| {
        push(&lb1, "b1");
        Ok(())
    });
    b.add(move |s, ()| {
        push(&lb2, "b2");
        let st = s.state();
        let v = (*st.get::<i32>("x").unwrap(), *st.get::<i32>("y").unwrap());
        s.success(v)
    });

    a.copy_from(&b);
    assert_eq!(a.state().get::<i32>("x"), Some(&1));
    assert_eq!(a.state().get::<i32>("y"), Some(&3));

    let mut tool = TestTool::new();
    let p = a.promise::<(i32, i32)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (1, 3));
    assert_eq!(entries(&l), ["a1", "b1", "b2"]);

    // The source model is untouched and still runs on its own.
    let p = b.promise::<(i32, i32)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (2, 3));
    assert_eq!(entries(&l), ["a1", "b1", "b2", "b1", "b2"]);
}

// ---------------------------------------------------------------- clone

#[test]
fn cloned_models_run_independently_with_own_state() {
    let l = log();
    let waits: Arc<Mutex<Vec<(String, ExternalHandle)>>> = Arc::new(Mutex::new(Vec::new()));
    let mut model = AsyncSteps::new();
    model.state().set("n", 10i32);
    let (a, w) = (l.clone(), waits.clone());
    model.add(move |s, ()| {
        let tag = s.state().get::<String>("tag").unwrap().clone();
        *s.state().get_mut::<i32>("n").unwrap() += 1;
        push(&a, format!("{tag} step1"));
        w.lock().unwrap().push((tag, s.wait_external()));
        Ok(())
    });
    let b = l.clone();
    model.add(move |s, (add,): (i32,)| {
        let tag = s.state().get::<String>("tag").unwrap().clone();
        let n = s.state().get_mut::<i32>("n").unwrap();
        *n += add;
        let n = *n;
        push(&b, format!("{tag} step2 n={n}"));
        s.success((tag, n))
    });

    let mut tool = TestTool::new();
    let mut fa = model.clone();
    fa.state().set("tag", "A".to_string());
    let mut fb = model.clone();
    fb.state().set("tag", "B".to_string());
    let pa = fa.promise::<(String, i32)>(&mut tool);
    let pb = fb.promise::<(String, i32)>(&mut tool);
    tool.run_all_ready();
    assert_eq!(entries(&l), ["A step1", "B step1"]);
    let mut ws = std::mem::take(&mut *waits.lock().unwrap());
    assert_eq!(ws.len(), 2);
    // Complete B first, then A, with different values.
    let (tb, hb) = ws.pop().unwrap();
    let (ta, ha) = ws.pop().unwrap();
    assert_eq!((ta.as_str(), tb.as_str()), ("A", "B"));
    hb.success((100i32,)).unwrap();
    tool.run_all_ready();
    ha.success((1000i32,)).unwrap();
    assert_eq!(tool.block_on(pb).unwrap(), ("B".to_string(), 111));
    assert_eq!(tool.block_on(pa).unwrap(), ("A".to_string(), 1011));
    assert_eq!(
        entries(&l),
        ["A step1", "B step1", "B step2 n=111", "A step2 n=1011"]
    );
    // The model's own state is unchanged.
    assert_eq!(model.state().get::<i32>("n"), Some(&10));
    assert!(!model.state().contains("tag"));
}

// ---------------------------------------------------------------- new_instance

#[test]
fn new_instance_executed_from_inside_a_step() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        push(&a, "outer");
        let mut other = s.new_instance();
        let x = a.clone();
        other.add(move |s, ()| {
            push(&x, format!("other same_thread={}", s.is_same_thread()));
            Ok(())
        });
        let _h = other.execute(s.tool());

        let mut inner = s.new_instance();
        let y = a.clone();
        inner.add(move |s, ()| {
            push(&y, "inner");
            s.success((5i32,))
        });
        let p = inner.promise::<(i32,)>(s.tool());
        s.await_future(p);
        Ok(())
    });
    let b = l.clone();
    root.add(move |s, (v,): (i32,)| {
        push(&b, format!("got {v}"));
        s.success((v * 2,))
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 10);
    assert_eq!(
        entries(&l),
        ["outer", "other same_thread=true", "inner", "got 5"]
    );
    tool.run_all();
    assert_eq!(tool.pending().flows, 0);
}

// ---------------------------------------------------------------- stack

#[test]
fn stack_value_visible_in_substeps_and_dropped_when_step_ends() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let g = s.stack(Guard(a.clone(), "g"));
        let v = s.stack(41i32);
        let (x, y) = (a.clone(), a.clone());
        s.add(move |s, ()| {
            *s.stack_get(v)? += 1;
            let now = *s.stack_get(v)?;
            push(&x, format!("sub1 {now}"));
            Ok(())
        });
        s.add(move |s, ()| {
            let z = y.clone();
            s.add(move |s, ()| {
                let name = s.stack_get(g)?.1;
                let now = *s.stack_get(v)?;
                push(&z, format!("deep {now} {name}"));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let b = l.clone();
    root.add(move |_, ()| {
        push(&b, "next");
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["sub1 42", "deep 42 g", "drop g", "next"]);
}

#[test]
fn stack_value_dropped_when_step_fails() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let x = a.clone();
            s.add(move |s, ()| {
                s.stack(Guard(x.clone(), "owner"));
                s.add(|s, ()| s.error("Fail", "sub"));
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            push(&b, format!("handler {}", e.code()));
            s.success(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["drop owner", "handler Fail"]);
}

#[test]
fn stack_get_after_owner_ended_is_internal_error() {
    let l = log();
    let r: Slot<StackRef<i32>> = slot();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let r1 = r.clone();
    root.add(move |s, ()| {
        *r1.lock().unwrap() = Some(s.stack(5i32));
        Ok(())
    });
    let (r2, a) = (r.clone(), l.clone());
    root.add(move |s, ()| {
        let sr = r2.lock().unwrap().unwrap();
        match s.stack_get(sr) {
            Ok(v) => push(&a, format!("found {v}")),
            Err(e) => push(&a, e.code().to_string()),
        }
        // Returning the error fails the flow.
        s.stack_get(sr)?;
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::INTERNAL_ERROR);
    assert_eq!(entries(&l), [codes::INTERNAL_ERROR]);
}
