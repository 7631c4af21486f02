//! Models (spec 1.12, 1.14): `success_step`, `copy_from` of a step and of
//! a model (steps appended, state values added when missing), clones that
//! run independently, and `new_instance` run from inside a step.

use crate::common::*;
use futoin_asyncsteps::{AsyncSteps, ExternalHandle, TestTool};
use std::sync::{Arc, Mutex};

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
