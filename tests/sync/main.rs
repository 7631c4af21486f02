//! Mutex, Throttle and Limiter (spec 1.11, 2.3-2.5): limits reached
//! exactly, queue limits, periods under virtual time, cancel and timeout
//! while queued and while holding, errors in the section, reentrance,
//! parallel branches, contention from flows on two loops, a step that
//! calls `ISync::sync` itself with its own handler, the in-place path of
//! an uncontended `sync` against the general one, and a `Throttle`'s
//! period timer moving between loops.
//!
//! The helpers here are shared by `mutex`, `handover`, `nesting` and
//! `rates`.

#[path = "../common/mod.rs"]
mod common;

mod cohort;
mod fast_paths;
mod handlers;
mod handover;
mod in_place;
mod mutex;
mod nesting;
mod rates;
mod timer_moves;

use futoin_asyncsteps::error::codes;
use futoin_asyncsteps::sync::{ISync, Mutex};
use futoin_asyncsteps::{AsyncSteps, Error, Promise, Step, TestTool};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Waits `d` inside a step (a timeout recovered by its handler).
fn sleep(s: &mut Step<'_>, d: Duration) {
    s.add_catch(
        move |s, ()| {
            s.set_timeout(d);
            Ok(())
        },
        |s, e| {
            assert_eq!(e.code(), codes::TIMEOUT);
            s.success(())
        },
    );
}

/// Counts flows inside a section and the most seen at once.
#[derive(Clone, Default)]
struct Occupancy {
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    entries: Arc<AtomicUsize>,
}

impl Occupancy {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn get(&self) -> (usize, usize, usize) {
        (
            self.now.load(Ordering::SeqCst),
            self.peak.load(Ordering::SeqCst),
            self.entries.load(Ordering::SeqCst),
        )
    }
}

/// The body of an occupant's section: enters, holds for `hold`, then leaves.
fn occupy(s: &mut Step<'_>, occ: &Occupancy, hold: Duration) {
    occ.enter();
    sleep(s, hold);
    let occ = occ.clone();
    s.add(move |_, ()| {
        occ.leave();
        Ok(())
    });
}

/// A flow whose section on `obj` enters, holds for `hold`, then leaves.
fn occupant<S: ISync + Clone>(obj: &S, occ: &Occupancy, hold: Duration) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    let occ = occ.clone();
    root.sync(obj, move |s, ()| {
        occupy(s, &occ, hold);
        Ok(())
    });
    root
}

/// Adds a parallel of `branches` occupants of `m`, each holding for `hold`.
fn parallel_occupants(
    s: &mut Step<'_>,
    m: &Mutex,
    occ: &Occupancy,
    branches: usize,
    hold: Duration,
) {
    let mut p = s.parallel();
    for _ in 0..branches {
        let (m, occ) = (m.clone(), occ.clone());
        p.add(move |s, ()| {
            s.sync(&m, move |s, ()| {
                occupy(s, &occ, hold);
                Ok(())
            });
            Ok(())
        });
    }
}

fn code_of<T>(tool: &mut TestTool, p: Promise<T>) -> String
where
    T: futoin_asyncsteps::FromArgs,
{
    match tool.block_on(p) {
        Ok(_) => "ok".into(),
        Err(e) => e.code().to_string(),
    }
}

/// [`code_of`] every promise, in order.
fn codes_of(tool: &mut TestTool, ps: Vec<Promise<()>>) -> Vec<String> {
    ps.into_iter().map(|p| code_of(tool, p)).collect()
}

/// Runs the loop to the end and expects every promise to succeed.
fn run_all_ok(tool: &mut TestTool, ps: Vec<Promise<()>>) {
    tool.run_all();
    for p in ps {
        tool.block_on(p).unwrap();
    }
}

/// Runs `root` to its end and returns the error it failed with.
fn error_of(tool: &mut TestTool, root: AsyncSteps) -> Error {
    let p = root.promise::<()>(tool);
    tool.run_all();
    tool.block_on(p).unwrap_err()
}
