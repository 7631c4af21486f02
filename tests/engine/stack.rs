//! The step stack (`stack`, `stack_get`): a value seen by sub-steps and
//! dropped when its step ends or fails, and `StackRef`s that must be
//! refused: its step ended, it is another flow's, or a sibling branch's.

use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, StackRef, TestTool};
use std::sync::{Arc, Mutex, Mutex as StdMutex};

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

/// Regression test for a defect found in review (the defect as it was,
/// the test asserts the correct behaviour):
///
/// `StackRef` docs: "InternalError when its step has ended or the reference
/// is not from this flow's ancestry". Frame seqs restart at 1 in every flow,
/// so a reference taken in flow A silently resolves to flow B's value.
#[test]
fn stack_ref_from_another_flow_is_internal_error() {
    use futoin_asyncsteps::StackRef;
    let mut tool = TestTool::new();
    let shared: Arc<Mutex<Option<StackRef<i32>>>> = Default::default();
    let mut a = AsyncSteps::new();
    let sh = shared.clone();
    a.add(move |s, ()| {
        *sh.lock().unwrap() = Some(s.stack(1i32));
        s.wait_external();
        Ok(())
    });
    let _ha = a.execute(&mut tool);
    tool.run_all();
    let mut b = AsyncSteps::new();
    let sh = shared.clone();
    b.add(move |s, ()| {
        let _mine = s.stack(2i32);
        let theirs = sh.lock().unwrap().expect("flow A ran");
        let r = s.stack_get(theirs).map(|v| *v);
        s.success((format!("{r:?}"),))
    });
    let p = b.promise::<(String,)>(&mut tool);
    let (got,) = tool.block_on(p).unwrap();
    assert!(
        got.starts_with("Err("),
        "foreign StackRef must be refused, got {got}"
    );
}

/// A `StackRef` made by one parallel branch, used by its sibling while the
/// owning step still runs: the error must not claim that step has ended.
#[test]
fn stack_get_of_a_sibling_branch_value_says_why() {
    use futoin_asyncsteps::StackRef;
    let mut tool = TestTool::new();
    let slot: Arc<StdMutex<Option<StackRef<u32>>>> = Default::default();
    let (s1, s2) = (slot.clone(), slot.clone());
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let parent = s.stack(100u32);
        let (s1, s2) = (s1.clone(), s2.clone());
        s.parallel()
            .add(move |s, ()| {
                *s1.lock().unwrap() = Some(s.stack(7u32));
                // The parent's value is reachable from a branch.
                let v = *s.stack_get(parent)?;
                s.state().set("parent", v);
                // Stay running while the sibling looks.
                let h = s.wait_external();
                s.tool().immediate(move |_| {
                    let _ = h.success(());
                });
                Ok(())
            })
            .add(move |s, ()| {
                let r = s2.lock().unwrap().unwrap();
                let e = s.stack_get(r).err().unwrap();
                s.state().set("sibling", e.to_string());
                Ok(())
            });
        Ok(())
    });
    root.add(|s, ()| {
        let st = s.state();
        let v = (
            *st.get::<u32>("parent").unwrap(),
            st.get::<String>("sibling").unwrap().clone(),
        );
        s.success(v)
    });
    let p = root.promise::<(u32, String)>(&mut tool);
    let (parent, sibling) = tool.block_on(p).unwrap();
    assert_eq!(parent, 100);
    assert_eq!(
        sibling,
        "InternalError: stack_get(): the step that owns this value has ended, or is \
         not this step nor one of its ancestors (a sibling parallel branch, say)"
    );
}
