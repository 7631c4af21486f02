//! The loop kinds: `repeat` (zero times, with sub-steps in exact order)
//! and `for_each` over a `Vec`, a `BTreeMap`, `Pairs` and an array, on a
//! step and on the root model.

use crate::common::*;
use futoin_asyncsteps::{AsyncSteps, Pairs, TestTool};
use std::collections::BTreeMap;

#[test]
fn repeat_zero_runs_nothing() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.repeat(0, move |_, i| {
            push(&a1, format!("body{i}"));
            Ok(())
        });
        let a2 = a.clone();
        s.add(move |s, ()| {
            push(&a2, "after");
            s.success((1u8,))
        });
        Ok(())
    });
    let b = l.clone();
    root.repeat(0, move |_, i| {
        push(&b, format!("root body{i}"));
        Ok(())
    });
    let c = l.clone();
    root.add(move |s, ()| {
        push(&c, "end");
        s.success((2u8,))
    });
    let p = root.promise::<(u8,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 2);
    assert_eq!(entries(&l), ["after", "end"]);
}

#[test]
fn repeat_with_substeps_exact_order() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.repeat(3, move |s, i| {
            push(&a1, format!("it{i}"));
            let (x, y) = (a1.clone(), a1.clone());
            s.add(move |s, ()| {
                push(&x, format!("sub{i}.a"));
                let z = x.clone();
                s.add(move |_, ()| {
                    push(&z, format!("sub{i}.a.deep"));
                    Ok(())
                });
                Ok(())
            });
            s.add(move |_, ()| {
                push(&y, format!("sub{i}.b"));
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
    let mut want = Vec::new();
    for i in 0..3 {
        want.push(format!("it{i}"));
        want.push(format!("sub{i}.a"));
        want.push(format!("sub{i}.a.deep"));
        want.push(format!("sub{i}.b"));
    }
    want.push("after".into());
    assert_eq!(entries(&l), want);
}

#[test]
fn for_each_vec_gives_index_and_item() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.for_each(vec!["apple", "banana", "cherry"], move |s, k, v| {
            push(&a1, format!("{k}={v}"));
            let x = a1.clone();
            s.add(move |_, ()| {
                push(&x, format!("sub {k}"));
                Ok(())
            });
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(
        entries(&l),
        ["0=apple", "sub 0", "1=banana", "sub 1", "2=cherry", "sub 2"]
    );

    // An empty vector runs nothing.
    let l = log();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.for_each(Vec::<u8>::new(), move |_, k, v| {
            push(&a1, format!("{k}={v}"));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert!(entries(&l).is_empty());
}

#[test]
fn for_each_btreemap_sorted_key_value() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let mut m = BTreeMap::new();
        m.insert("pear".to_string(), 3i32);
        m.insert("apple".to_string(), 1i32);
        m.insert("kiwi".to_string(), 2i32);
        let a1 = a.clone();
        s.for_each(m, move |s, k, v| {
            push(&a1, format!("{k}={v}"));
            if !s.state().contains("sum") {
                s.state().set("sum", 0i32);
            }
            *s.state().get_mut::<i32>("sum").unwrap() += v;
            Ok(())
        });
        s.add(|s, ()| {
            let v = *s.state().get::<i32>("sum").unwrap();
            s.success((v,))
        });
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap().0, 6);
    assert_eq!(entries(&l), ["apple=1", "kiwi=2", "pear=3"]);
}

#[test]
fn for_each_pairs_iterator() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    let a = l.clone();
    root.add(move |s, ()| {
        let a1 = a.clone();
        s.for_each(
            Pairs((1..=4).map(|i| (format!("k{i}"), i * 10))),
            move |s, k, v| {
                push(&a1, format!("{k}={v}"));
                if v == 30 {
                    return s.break_loop();
                }
                Ok(())
            },
        );
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    assert_eq!(entries(&l), ["k1=10", "k2=20", "k3=30"]);
}

#[test]
fn loops_on_the_root_model() {
    let l = log();
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.state().set("n", 0u32);
    let a = l.clone();
    root.repeat(3, move |s, i| {
        push(&a, format!("repeat{i}"));
        let x = a.clone();
        s.add(move |_, ()| {
            push(&x, format!("repeat{i} sub"));
            Ok(())
        });
        Ok(())
    });
    let b = l.clone();
    root.loop_(move |s| {
        let n = s.state().get_mut::<u32>("n").unwrap();
        *n += 1;
        let n = *n;
        push(&b, format!("loop{n}"));
        if n == 3 {
            return s.break_loop();
        }
        Ok(())
    });
    root.add(|s, ()| {
        let n = *s.state().get::<u32>("n").unwrap();
        s.success((n,))
    });
    // The model is reusable: run a clone and the original.
    let p1 = root.clone().promise::<(u32,)>(&mut tool);
    assert_eq!(tool.block_on(p1).unwrap().0, 3);
    let p2 = root.promise::<(u32,)>(&mut tool);
    assert_eq!(tool.block_on(p2).unwrap().0, 3);
    let once = [
        "repeat0",
        "repeat0 sub",
        "repeat1",
        "repeat1 sub",
        "repeat2",
        "repeat2 sub",
        "loop1",
        "loop2",
        "loop3",
    ];
    let want: Vec<&str> = once.iter().chain(once.iter()).copied().collect();
    assert_eq!(entries(&l), want);
}

#[test]
fn for_each_walks_an_array_as_the_spec_example_does() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.state().set("seen", Vec::<String>::new());
        s.for_each(["apple", "banana"], |s, i, fruit| {
            let seen = s.state().get_mut::<Vec<String>>("seen").unwrap();
            seen.push(format!("{i}: {fruit}"));
            Ok(())
        });
        Ok(())
    });
    // A model's for_each takes one too (arrays of Clone + Send items are).
    root.for_each([10u8, 20], |s, i, n| {
        let seen = s.state().get_mut::<Vec<String>>("seen").unwrap();
        seen.push(format!("{i}: {n}"));
        Ok(())
    });
    root.add(|s, ()| {
        let seen = s.state().remove::<Vec<String>>("seen").unwrap();
        s.success((seen,))
    });
    let seen = run::<(Vec<String>,)>(root).unwrap().0;
    assert_eq!(seen, ["0: apple", "1: banana", "0: 10", "1: 20"]);
}

/// Keeps what a loop body's `Step` shows of itself (its level among
/// them) in the state, for `body_shown`.
fn show(s: &mut futoin_asyncsteps::Step<'_>) {
    let shown = format!("{s:?}");
    s.state().set("shown", shown);
}

/// Runs `root`, then reads what `show` kept.
fn body_shown(root: &mut AsyncSteps, tool: &mut TestTool) -> String {
    root.add(|s, ()| {
        let v = s.state().get::<String>("shown").cloned().unwrap();
        s.success((v,))
    });
    let p = std::mem::take(root).promise::<(String,)>(tool);
    tool.block_on(p).unwrap().0
}

/// Runs `root` (see `body_shown`) and asserts that its loop body ran at
/// `level` of strand 0, outside any error handler.
fn assert_body_at(root: &mut AsyncSteps, tool: &mut TestTool, level: usize) {
    let shown = body_shown(root, tool);
    let want = format!("strand: 0, level: {level}, in_error_handler: false }}");
    assert!(shown.ends_with(&want), "{shown}");
}

/// Defect: a model's level-0 loop ran under a frame of its own model step
/// (the step a model keeps so that it stays clonable, which adds the
/// loop), one level deeper than the loop it stands for and 64 bytes more
/// per waiting flow. It is a level-0 step now: its body at level 1, as a
/// step's loop body is one level below that step's loop.
#[test]
fn a_model_loop_is_a_level_0_step_and_its_body_at_level_1() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.repeat(1, |s, _| {
        show(s);
        Ok(())
    });
    assert_body_at(&mut root, &mut tool, 1);

    // A loop a step adds is one level below that step.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.for_each(vec![1u8], |s, _, _| {
            show(s);
            Ok(())
        });
        Ok(())
    });
    assert_body_at(&mut root, &mut tool, 2);

    // A cloned model's loop runs the same way.
    let mut model = AsyncSteps::new();
    model.loop_(|s| {
        show(s);
        s.break_loop()
    });
    let mut copy = model.clone();
    assert_body_at(&mut copy, &mut tool, 1);
}
