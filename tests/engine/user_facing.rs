//! Behaviour a new user of the crate meets first: which values travel as
//! success args, what the error messages of common mistakes say, and the
//! `Debug` output of steps and builders.
//!
//! Everything runs on a [`TestTool`] (virtual time, nothing sleeps).

use crate::common::{assert_internal, run};
use futoin_asyncsteps::{AsyncSteps, Pairs, Step, StepResult, TakeOnce, TestTool};

// ---------------------------------------------------------------------------
// Success args of std types
// ---------------------------------------------------------------------------

#[test]
fn std_types_travel_from_step_to_step() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.success((
            Some(5u32),
            'x',
            "literal",
            vec![String::from("a"), String::from("b")],
        ))
    });
    root.add(
        |s, (n, c, lit, list): (Option<u32>, char, &'static str, Vec<String>)| {
            assert_eq!((n, c, lit), (Some(5), 'x', "literal"));
            assert_eq!(list, ["a", "b"]);
            s.success((None::<String>, list))
        },
    );
    let (none, list) = run::<(Option<String>, Vec<String>)>(root).unwrap();
    assert_eq!(none, None);
    assert_eq!(list, ["a", "b"]);
}

#[test]
fn a_mismatch_of_std_types_names_both() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((Some(5u32),)));
    root.add(|_, (_c,): (char,)| Ok(()));
    assert_internal(
        &run::<()>(root).unwrap_err(),
        "step expects (char,), got (core::option::Option<u32>,)",
    );

    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((1.5f32, vec![String::from("a")])));
    root.add(|_, (_s, _b): (String, Vec<u8>)| Ok(()));
    assert_internal(
        &run::<()>(root).unwrap_err(),
        "step expects (String, Vec<u8>), got (f32, alloc::vec::Vec<alloc::string::String>)",
    );

    // A literal a `String` took is named as that `String` when another
    // value of the step's args fails.
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success(("literal", 1u8)));
    root.add(|_, (_s, _b): (String, bool)| Ok(()));
    assert_internal(
        &run::<()>(root).unwrap_err(),
        "step expects (String, bool), got (String, u8)",
    );
}

// ---------------------------------------------------------------------------
// Promises
// ---------------------------------------------------------------------------

#[test]
fn promise_wait_inside_a_step_points_to_await_future() {
    let mut tool = TestTool::new();
    let mut inner = AsyncSteps::new();
    inner.add(|s, ()| {
        s.wait_external();
        Ok(())
    });
    let p = TakeOnce::new(inner.promise::<()>(&mut tool));
    let mut outer = AsyncSteps::new();
    outer.add(move |_, ()| p.take()?.wait());
    let done = outer.promise::<()>(&mut tool);
    assert_internal(
        &tool.block_on(done).unwrap_err(),
        "Promise::wait() on the loop's own thread would deadlock: inside a step use \
         s.await_future(promise), outside one AsyncTool::block_on(promise)",
    );
}

#[test]
fn a_promise_of_the_wrong_type_says_promise_not_step() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((7u32,)));
    assert_internal(
        &run::<(u64,)>(root.clone()).unwrap_err(),
        "promise result: expected (u64,), got (u32,)",
    );
    assert_internal(
        &run::<(u32, u32)>(root.clone()).unwrap_err(),
        "promise result: expected (u32, u32), got (u32,)",
    );
    // A step that expects the wrong type still says so.
    root.add(|_, (_n,): (u64,)| Ok(()));
    assert_internal(
        &run::<()>(root).unwrap_err(),
        "step expects (u64,), got (u32,)",
    );
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

#[test]
fn state_remove_of_the_wrong_type_keeps_the_value() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.state().set("user", String::from("ann"));
        Ok(())
    });
    root.add(|s, ()| {
        let st = s.state();
        let wrong = st.remove::<u32>("user");
        let kept = st.get::<String>("user").cloned();
        let taken = st.remove::<String>("user");
        let after = st.contains("user");
        s.success((wrong, kept, taken, after))
    });
    let got = run::<(Option<u32>, Option<String>, Option<String>, bool)>(root).unwrap();
    let ann = Some(String::from("ann"));
    assert_eq!(got, (None, ann.clone(), ann, false));
}

// ---------------------------------------------------------------------------
// Debug
// ---------------------------------------------------------------------------

fn show_step(s: &mut Step<'_>, (): ()) -> StepResult {
    let shown = format!("{s:?}");
    s.state().set("main", shown);
    let mut par = s.parallel();
    par.add(show_branch).add(show_branch);
    let shown = format!("{par:?}");
    s.state().set("parallel", shown);
    s.add(|s, ()| s.error("Boom", "to show the handler"));
    Ok(())
}

fn show_branch(s: &mut Step<'_>, (): ()) -> StepResult {
    let shown = format!("{s:?}");
    s.state().set(shown.clone(), shown);
    Ok(())
}

#[test]
fn steps_and_builders_show_where_they_are() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add_catch(show_step, |s, _| {
        let shown = format!("{s:?}");
        s.state().set("handler", shown);
        s.success(())
    });
    root.add(|s, ()| {
        let st = s.state();
        let mut keys: Vec<String> = st.keys().map(String::from).collect();
        keys.sort();
        let shown: Vec<String> = keys
            .iter()
            .map(|k| format!("{k} => {}", st.get::<String>(k).unwrap()))
            .collect();
        s.success((shown,))
    });
    let p = root.promise::<(Vec<String>,)>(&mut tool);
    let shown = tool.block_on(p).unwrap().0;
    // A step is named by its function's path: in this test binary, crate
    // `engine`, module `user_facing`.
    let branch = |n| {
        format!(
            "Step {{ step: \"engine::user_facing::show_branch\", strand: {n}, \
             level: 0, in_error_handler: false }}"
        )
    };
    assert_eq!(
        shown,
        [
            format!("{} => {}", branch(1), branch(1)),
            format!("{} => {}", branch(2), branch(2)),
            String::from(
                "handler => Step { step: \"engine::user_facing::show_step\", strand: 0, \
                 level: 0, in_error_handler: true }"
            ),
            String::from(
                "main => Step { step: \"engine::user_facing::show_step\", strand: 0, \
                 level: 0, in_error_handler: false }"
            ),
            String::from("parallel => Parallel { strand: 0, branches: 2 }"),
        ]
    );

    let mut model = AsyncSteps::new();
    let mut par = model.parallel();
    par.add(|_, ()| Ok(()));
    assert_eq!(format!("{par:?}"), "ModelParallel { branches: 1 }");
    assert_eq!(
        format!("{:?}", Pairs(vec![("a", 1)].into_iter())),
        "Pairs(IntoIter([(\"a\", 1)]))"
    );
}
