//! Leaving loops: `break_loop` and `continue_loop`, labelled break and
//! continue across nested loops and from a parallel branch, labels no loop
//! has (an error for the handlers), errors of a body, an endless
//! `for_each` ended by a break, and labelled loops of a model.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};

#[test]
fn loop_with_break() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let mut i = 0u32;
        let a1 = a.clone();
        s.loop_(move |s| {
            i += 1;
            push(&a1, format!("it{i}"));
            if i == 3 {
                return s.break_loop();
            }
            Ok(())
        });
        let a2 = a.clone();
        s.add(move |s, ()| {
            push(&a2, "after");
            s.success((7u32,))
        });
        Ok(())
    });
    let p = root.promise::<(u32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 7);
    assert_eq!(entries(&l), ["it1", "it2", "it3", "after"]);
}

#[test]
fn continue_loop_skips_rest_of_iteration_substeps() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let mut i = 0u32;
        let a1 = a.clone();
        s.loop_(move |s| {
            i += 1;
            if i > 4 {
                return s.break_loop();
            }
            push(&a1, format!("it{i}"));
            let (x, y) = (a1.clone(), a1.clone());
            let n = i;
            s.add(move |s, ()| {
                push(&x, format!("a{n}"));
                if n % 2 == 0 {
                    return s.continue_loop();
                }
                Ok(())
            });
            s.add(move |_, ()| {
                push(&y, format!("b{n}"));
                Ok(())
            });
            Ok(())
        });
        let a2 = a.clone();
        s.add(move |_, ()| {
            push(&a2, "after");
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        entries(&l),
        ["it1", "a1", "b1", "it2", "a2", "it3", "a3", "b3", "it4", "a4", "after"]
    );
}

#[test]
fn continue_loop_in_body_drops_its_substeps() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.repeat(3, move |s, i| {
            push(&a1, format!("it{i}"));
            let x = a1.clone();
            s.add(move |_, ()| {
                push(&x, format!("sub{i}"));
                Ok(())
            });
            if i == 1 {
                return s.continue_loop();
            }
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["it0", "sub0", "it1", "it2", "sub2"]);
}

#[test]
fn labeled_break_from_inner_loop_leaves_both() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let mut o = 0u32;
        let a1 = a.clone();
        s.loop_labeled("OUTER", move |s| {
            o += 1;
            push(&a1, format!("o{o}"));
            let mut j = 0u32;
            let (x, y) = (a1.clone(), a1.clone());
            let on = o;
            s.loop_(move |s| {
                j += 1;
                push(&x, format!("i{on}.{j}"));
                if j == 2 {
                    return s.break_label("OUTER");
                }
                Ok(())
            });
            s.add(move |_, ()| {
                push(&y, format!("tail{on}"));
                Ok(())
            });
            Ok(())
        });
        let a2 = a.clone();
        s.add(move |_, ()| {
            push(&a2, "done");
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["o1", "i1.1", "i1.2", "done"]);
}

#[test]
fn labeled_continue_from_inner_loop_continues_outer() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.repeat_labeled("OUTER", 3, move |s, i| {
            push(&a1, format!("o{i}"));
            let (x, y) = (a1.clone(), a1.clone());
            s.repeat(3, move |s, j| {
                push(&x, format!("i{i}.{j}"));
                if j == 1 {
                    return s.continue_label("OUTER");
                }
                Ok(())
            });
            s.add(move |_, ()| {
                push(&y, format!("tail{i}"));
                Ok(())
            });
            Ok(())
        });
        let a2 = a.clone();
        s.add(move |_, ()| {
            push(&a2, "done");
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        entries(&l),
        ["o0", "i0.0", "i0.1", "o1", "i1.0", "i1.1", "o2", "i2.0", "i2.1", "done"]
    );
}

#[test]
fn unmatched_break_label_reaches_handlers_as_loop_break() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let a1 = a.clone();
            s.loop_labeled("A", move |s| {
                push(&a1, "body");
                s.break_label("NOPE")
            });
            Ok(())
        },
        move |s, e| {
            push(&b, format!("handler {} {:?}", e.code(), e.info()));
            s.success((e.code().to_string(),))
        },
    );
    let p = root.promise::<(String,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, codes::LOOP_BREAK);
    assert_eq!(entries(&l), ["body", "handler LoopBreak Some(\"NOPE\")"]);

    // With no handler at all, the flow fails with LoopBreak.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.repeat(5, |s, _| s.break_label("MISSING"));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::LOOP_BREAK);
}

#[test]
fn unmatched_continue_label_reaches_handlers_as_loop_cont() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let a1 = a.clone();
            s.repeat_labeled("A", 3, move |s, i| {
                push(&a1, format!("body{i}"));
                let x = a1.clone();
                s.add(move |s, ()| {
                    push(&x, "sub");
                    s.continue_label("NOPE")
                });
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            push(&b, format!("handler {} {:?}", e.code(), e.info()));
            s.success((e.code().to_string(),))
        },
    );
    let p = root.promise::<(String,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, codes::LOOP_CONT);
    assert_eq!(
        entries(&l),
        ["body0", "sub", "handler LoopCont Some(\"NOPE\")"]
    );
}

#[test]
fn loop_body_error_caught_by_outer_handler() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let (a, b) = (l.clone(), l.clone());
    root.add_catch(
        move |s, ()| {
            let a1 = a.clone();
            s.repeat(10, move |s, i| {
                push(&a1, format!("it{i}"));
                if i == 2 {
                    return s.error("Bad", format!("at {i}"));
                }
                Ok(())
            });
            let a2 = a.clone();
            s.add(move |_, ()| {
                push(&a2, "never");
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            push(&b, format!("handler {} {:?}", e.code(), e.info()));
            s.success(("recovered".to_string(),))
        },
    );
    let c = l.clone();
    root.add(move |s, (m,): (String,)| {
        push(&c, format!("next {m}"));
        let info = s.state().error_info().map(str::to_owned);
        s.success((info.unwrap_or_default(),))
    });
    let p = root.promise::<(String,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, "at 2");
    assert_eq!(
        entries(&l),
        [
            "it0",
            "it1",
            "it2",
            "handler Bad Some(\"at 2\")",
            "next recovered"
        ]
    );
}

/// Breaking out of a `for_each` over an endless iterator ends the loop at
/// once: what is left of an iterator that is not one of the crate's own
/// collections is dropped whole, never walked to its end.
#[test]
fn breaking_out_of_an_endless_for_each_ends_it() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        let endless = futoin_asyncsteps::Pairs((0u64..).map(|i| (i, ())));
        s.for_each(endless, |s, i, ()| {
            if i == 3 {
                s.state().set("last", i);
                return s.break_loop();
            }
            Ok(())
        });
        Ok(())
    });
    root.add(|s, ()| {
        let last = *s.state().get::<u64>("last").expect("set");
        s.success((last,))
    });
    let p = root.promise::<(u64,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap(), (3,));
}

/// Regression test for a defect found in review (failed before its fix):
/// a break or continue in a parallel branch became a plain `LoopBreak` /
/// `LoopCont` error that failed the parallel step and aborted the loop
/// around it.
///
/// A labelled break in a parallel branch exits the loop of that label
/// outside the parallel step (spec 2.2.4), also from a nested parallel
/// and from a branch's error handler; a continue starts its next
/// iteration. The siblings are cancelled and no handler between runs.
#[test]
fn loop_control_from_a_branch_reaches_the_loop_outside() {
    fn run(kind: &'static str) -> (u32, Vec<String>) {
        let l = log();
        let mut tool = TestTool::new();
        let mut root = AsyncSteps::new();
        let l0 = l.clone();
        root.add(move |s, ()| {
            s.state().set("n", 0u32);
            let l1 = l0.clone();
            s.loop_labeled("OUTER", move |s| {
                let (l2, l3) = (l1.clone(), l1.clone());
                s.repeat(1, move |s, _| {
                    let l2 = l2.clone();
                    let l3 = l3.clone();
                    s.parallel_catch(move |_, e| {
                        push(&l3, format!("parallel handler {}", e.code()));
                        Ok(())
                    })
                    .add(move |s, ()| {
                        let n = s.state().get_mut::<u32>("n").unwrap();
                        *n += 1;
                        let n = *n;
                        if n < 3 {
                            return Ok(());
                        }
                        // In a sub-step: the sibling has started by then.
                        s.add(move |s, ()| match kind {
                            "break" => s.break_label("OUTER"),
                            "continue" if n == 3 => s.continue_label("OUTER"),
                            "continue" => s.break_label("OUTER"),
                            "nested" => {
                                s.parallel().add(|s, ()| s.break_label("OUTER"));
                                Ok(())
                            }
                            _ => {
                                s.add_catch(
                                    |s, ()| s.error("E", "e"),
                                    |s, _| s.break_label("OUTER"),
                                );
                                Ok(())
                            }
                        });
                        Ok(())
                    })
                    .add(move |s, ()| {
                        // From the round that breaks on, it waits: only
                        // the break (or continue) can end it.
                        if *s.state().get::<u32>("n").unwrap() >= 3 {
                            s.set_cancel(move || push(&l2, "sibling cancelled"));
                            s.wait_external();
                        }
                        Ok(())
                    });
                    Ok(())
                });
                Ok(())
            });
            s.add(|s, ()| {
                let n = *s.state().get::<u32>("n").unwrap();
                s.success((n,))
            });
            Ok(())
        });
        let p = root.promise::<(u32,)>(&mut tool);
        let r = tool.block_on(p);
        (r.unwrap_or_else(|e| panic!("{kind}: {e}")).0, entries(&l))
    }
    assert_eq!(run("break"), (3, vec!["sibling cancelled".into()]));
    assert_eq!(
        run("continue"),
        (
            4,
            vec!["sibling cancelled".into(), "sibling cancelled".into()]
        )
    );
    assert_eq!(run("nested"), (3, vec!["sibling cancelled".into()]));
    assert_eq!(run("handler"), (3, vec!["sibling cancelled".into()]));
}

/// Appends to the state's "log".
fn note(s: &mut futoin_asyncsteps::Step<'_>, text: String) {
    s.state().get_mut::<String>("log").unwrap().push_str(&text);
}

/// The model's labelled loops: `continue_label` from a nested loop goes on
/// with the labelled `for_each`'s next item, `break_label` ends the
/// labelled `repeat`; a model started twice runs its loops afresh.
#[test]
fn model_level_labelled_loops() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.state().set("log", String::new());
    root.for_each_labeled("ITEMS", vec!["a", "b"], |s, _, item| {
        s.repeat(3, move |s, j| {
            note(s, format!("{item}{j} "));
            if j == 1 {
                return s.continue_label("ITEMS");
            }
            Ok(())
        });
        Ok(())
    });
    root.repeat_labeled("COUNT", 5, |s, i| {
        s.loop_(move |s| {
            note(s, format!("c{i} "));
            if i == 1 {
                return s.break_label("COUNT");
            }
            s.break_loop()
        });
        Ok(())
    });
    root.add(|s, ()| {
        let log = s.state().get::<String>("log").unwrap().clone();
        s.success((log,))
    });
    for _ in 0..2 {
        let p = root.clone().promise::<(String,)>(&mut tool);
        assert_eq!(tool.block_on(p).unwrap().0, "a0 a1 b0 b1 c0 c1 ");
    }
}
