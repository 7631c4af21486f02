//! The engine's cases for instruction counts: run a case for some
//! batches on one warm loop, under `valgrind --tool=callgrind`, and the
//! difference between two batch counts is what the batches cost (start-up
//! and the first, warming batch cancel out). `scripts/instructions.sh`
//! does that for every case and prints instructions per operation.
//!
//! ```text
//! cargo run --release --example instructions -- <case> <batches>
//! ```
//!
//! Cases (20,000 operations a batch):
//! - `simple`: a root with one empty step, started detached and run to its end;
//! - `external`: a flow waits in `wait_external()`, is completed from the
//!   loop thread with an `i32`, and the next step reads it;
//! - `repeat-add`: a `repeat` iteration that adds a sub-step capturing its
//!   index.

use futoin_asyncsteps::{AsyncSteps, AsyncTool, ExternalHandle};
use std::cell::RefCell;
use std::hint::black_box;

/// Operations a batch.
const N: usize = 20_000;

thread_local! {
    static HANDLES: RefCell<Vec<ExternalHandle>> = const { RefCell::new(Vec::new()) };
}

fn simple(tool: &mut AsyncTool) {
    for _ in 0..N {
        let mut root = AsyncSteps::new();
        root.add(|_, ()| Ok(()));
        root.execute(tool);
    }
    tool.run_until_idle().expect("loop");
}

fn external(tool: &mut AsyncTool) {
    for _ in 0..N {
        let mut root = AsyncSteps::new();
        root.add(|s, ()| {
            let h = s.wait_external();
            HANDLES.with_borrow_mut(|v| v.push(h));
            Ok(())
        });
        root.add(|_, (v,): (i32,)| {
            black_box(v);
            Ok(())
        });
        root.execute(tool);
    }
    tool.run_until_idle().expect("loop");
    for (i, h) in HANDLES
        .with_borrow_mut(std::mem::take)
        .into_iter()
        .enumerate()
    {
        h.success((i as i32,)).expect("external success");
    }
    tool.run_until_idle().expect("loop");
}

fn repeat_add(tool: &mut AsyncTool) {
    let mut root = AsyncSteps::new();
    root.repeat(N, |s, i| {
        s.add(move |_, ()| {
            black_box(i);
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<()>(tool);
    tool.block_on(p).expect("repeat flow");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let batches: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(1);
    let run: fn(&mut AsyncTool) = match case.as_str() {
        "simple" => simple,
        "external" => external,
        "repeat-add" => repeat_add,
        _ => {
            eprintln!("usage: instructions <simple|external|repeat-add> <batches>");
            std::process::exit(2);
        }
    };
    let mut tool = AsyncTool::new().expect("loop");
    for _ in 0..batches {
        run(&mut tool);
    }
}
