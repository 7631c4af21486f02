//! `break_with` and `break_label_with`: a loop ends with the args its
//! break carries, for the step after it; from a sub-step of the body, from
//! an inner loop to a labelled outer one, from a parallel branch; a loop
//! that ends by itself gives none; with no loop to break the args go and
//! handlers see `LoopBreak`.

use futoin_asyncsteps::{error::codes, AsyncSteps, Error, FromArgs, TestTool};

fn run<T: FromArgs>(root: AsyncSteps) -> Result<T, Error> {
    let mut tool = TestTool::new();
    let p = root.promise::<T>(&mut tool);
    tool.block_on(p)
}

#[test]
fn a_break_from_a_sub_step_of_the_body_carries_its_args() {
    let mut root = AsyncSteps::new();
    root.loop_(|s| {
        s.add(|s, ()| {
            s.add(|s, ()| s.break_with(("found", 7u8)));
            Ok(())
        });
        Ok(())
    });
    root.add(|s, (what, n): (String, u8)| s.success(format!("{what} {n}")));
    assert_eq!(run::<String>(root).unwrap(), "found 7");
}

#[test]
fn a_labelled_break_carries_its_args_out_of_the_inner_loop() {
    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.loop_labeled("OUTER", |s| {
            s.repeat(10, |s, i| {
                if i == 3 {
                    return s.break_label_with("OUTER", i as u32 * 10);
                }
                Ok(())
            });
            Ok(())
        });
        s.add(|s, n: u32| s.success(n + 1));
        Ok(())
    });
    assert_eq!(run::<u32>(root).unwrap(), 31);
}

#[test]
fn a_break_from_a_parallel_branch_carries_its_args() {
    let mut root = AsyncSteps::new();
    root.loop_(|s| {
        s.parallel().add(|s, ()| s.break_with(5i64)).add(|s, ()| {
            s.wait_external(); // cancelled by the break
            Ok(())
        });
        Ok(())
    });
    root.add(|s, n: i64| s.success(n * 2));
    assert_eq!(run::<i64>(root).unwrap(), 10);
}

#[test]
fn a_loop_that_ends_by_itself_gives_no_args() {
    let mut root = AsyncSteps::new();
    root.repeat(3, |_, _| Ok(()));
    root.add(|s, a: futoin_asyncsteps::Args| s.success(a.len()));
    assert_eq!(run::<usize>(root).unwrap(), 0);
}

#[test]
fn with_no_loop_the_args_go_and_handlers_see_loop_break() {
    let mut root = AsyncSteps::new();
    root.add_catch(
        |s, ()| s.break_with(("lost",)),
        |s, e| s.success((e.code().to_owned(),)),
    );
    // A later loop that ends by itself does not get them either.
    root.add(|s, (code,): (String,)| {
        s.repeat(2, |_, _| Ok(()));
        s.add(move |s, a: futoin_asyncsteps::Args| s.success((code.clone(), a.len())));
        Ok(())
    });
    assert_eq!(
        run::<(String, usize)>(root).unwrap(),
        (codes::LOOP_BREAK.to_owned(), 0)
    );
}
