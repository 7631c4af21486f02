//! Edges of the step API that its docs state: `stack_get` of a value the
//! step cannot reach.

use futoin_asyncsteps::{AsyncSteps, TestTool};
use std::sync::{Arc, Mutex as StdMutex};

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
