//! Edges of the step API that its docs state: the typed-args mismatch
//! message, `stack_get` of a value the step cannot reach, and the waiting
//! calls refused in an error handler.

use futoin_asyncsteps::{error::codes, AsyncSteps, TestTool};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

/// A step that expects `(i32, String)` after one that gives something
/// else: the error names both.
#[test]
fn typed_args_mismatch_names_expected_and_given() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1u64, "x")));
    root.add(|s, (a, b): (i32, String)| s.success((a, b)));
    let p = root.promise::<(i32, String)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some("step expects (i32, String), got (u64, &str)")
    );

    // Too few args.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32,)));
    root.add(|s, (a, b): (i32, String)| s.success((a, b)));
    let p = root.promise::<(i32, String)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        e.to_string(),
        "InternalError: step expects (i32, String), got (i32,)"
    );

    // The promise's own type mismatches.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1i32,)));
    let p = root.promise::<(String,)>(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(
        e.to_string(),
        "InternalError: promise result: expected (String,), got (i32,)"
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

/// The waiting calls belong to execute callbacks: in an error handler each
/// fails the step with an `InternalError` naming the call.
#[test]
fn waiting_calls_in_an_error_handler_are_internal_errors() {
    let mut tool = TestTool::new();
    type Call = fn(&mut futoin_asyncsteps::Step<'_>);
    let cases: [(&str, Call); 3] = [
        ("set_timeout", |s| s.set_timeout(Duration::from_millis(10))),
        ("set_cancel", |s| s.set_cancel(|| {})),
        ("wait_external", |s| {
            let h = s.wait_external();
            assert!(!h.is_valid());
            assert_eq!(h.success(()).unwrap_err().code(), codes::INTERNAL_ERROR);
        }),
    ];
    for (name, call) in cases {
        let mut root = AsyncSteps::new();
        root.add_catch(
            move |s, ()| {
                s.add_catch(
                    |s, ()| s.error("First", "x"),
                    move |s, _| {
                        call(s);
                        Ok(())
                    },
                );
                Ok(())
            },
            |s, e| s.success((e.to_string(),)),
        );
        let p = root.promise::<(String,)>(&mut tool);
        assert_eq!(
            tool.block_on(p).unwrap().0,
            format!("InternalError: {name}() is not allowed in an error handler")
        );
        assert_eq!(tool.elapsed(), Duration::ZERO);
    }
    // What a handler does instead: add a step that waits.
    let mut root = AsyncSteps::new();
    root.add_catch(
        |s, ()| s.error("First", "x"),
        |s, _| {
            s.add(|s, ()| {
                s.set_timeout(Duration::from_millis(10));
                Ok(())
            });
            Ok(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    assert_eq!(tool.block_on(p).unwrap_err().code(), codes::TIMEOUT);
    assert_eq!(tool.elapsed(), Duration::from_millis(10));
}
