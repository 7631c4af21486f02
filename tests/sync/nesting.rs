//! Sync objects inside sync objects and parallels: a flow re-entering a
//! `Mutex` it holds, branches that never inherit their parent's hold (a
//! deadlock is an error) and wait for slots others free, sibling branches
//! as separate flows, a section added from an error handler, and two
//! objects (or one twice) taken in one step.

use crate::common::*;
use crate::{error_of, occupant, parallel_occupants, run_all_ok, Occupancy};
use futoin_asyncsteps::sync::{ISync, Mutex, Section};
use futoin_asyncsteps::{error::codes, Args, AsyncSteps, IntoArgs, Step, StepResult, TestTool};

#[test]
fn the_same_flow_re_enters_a_mutex_it_holds() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.sync(&m, move |s, ()| {
        let m3 = m2.clone();
        s.sync(&m2, move |s, ()| {
            s.sync(&m3, |s, ()| s.success((3,)));
            Ok(())
        });
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap().0, 3);
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_branch_never_inherits_its_parents_hold_and_a_deadlock_is_an_error() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let mut root = AsyncSteps::new();
    let m2 = m.clone();
    root.sync(&m, move |s, ()| {
        let m3 = m2.clone();
        s.parallel().add(move |s, ()| {
            s.sync(&m3, |_, ()| panic!("must not enter"));
            Ok(())
        });
        Ok(())
    });
    let e = error_of(&mut tool, root);
    assert_eq!(e.code(), codes::INTERNAL_ERROR);
    assert_eq!(
        e.info(),
        Some(
            "Mutex: deadlock: a parallel branch waits for a lock that only its own \
             ancestors hold (they release it after the branch ends)"
        )
    );
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn a_branch_waits_for_slots_that_others_will_free() {
    // max 2: the parent holds one, the branches share the other.
    let mut tool = TestTool::new();
    let m = Mutex::new(2, None);
    let occ = Occupancy::default();
    let mut root = AsyncSteps::new();
    let (m2, occ2) = (m.clone(), occ.clone());
    root.sync(&m, move |s, ()| {
        parallel_occupants(s, &m2, &occ2, 3, ms(10));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    tool.block_on(p).unwrap();
    assert_eq!(occ.get(), (0, 1, 3));
    assert_eq!(tool.elapsed(), ms(30));
    assert_eq!(m.counts(), (0, 0));
}

#[test]
fn sibling_branches_are_separate_flows() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let occ = Occupancy::default();
    let mut root = AsyncSteps::new();
    let (m2, occ2) = (m.clone(), occ.clone());
    root.add(move |s, ()| {
        parallel_occupants(s, &m2, &occ2, 2, ms(10));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    tool.block_on(p).unwrap();
    assert_eq!(occ.get(), (0, 1, 2));
    assert_eq!(tool.elapsed(), ms(20));
}

/// Enters its mutex from the error handler of a step that failed.
#[derive(Clone)]
struct AfterRecovery(Mutex);

impl ISync for AfterRecovery {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        let inner = self.0.clone();
        s.add_catch(
            |s, ()| s.error("Busy", "try the other way"),
            move |s, _| inner.sync(s, args, section),
        );
        Ok(())
    }
}

#[test]
fn a_section_added_from_an_error_handler_gets_its_args() {
    let mut tool = TestTool::new();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((20i32,)));
    root.sync(&AfterRecovery(Mutex::new(1, None)), |s, (v,): (i32,)| {
        s.success((v + 1,))
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (21,));

    let mut root = AsyncSteps::new();
    root.add(|s, ()| {
        s.add_catch(
            |s, ()| s.error("X", "y"),
            |s, _| {
                Section::new(|s, (v,): (i32,)| s.success((v,))).add_to(s, (5i32,).into_args());
                Ok(())
            },
        );
        Ok(())
    });
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (5,));
}

/// Takes two objects in one step: `.0` around nothing, `.1` around the
/// section; both are held until the section ends.
#[derive(Clone)]
struct Both(Mutex, Mutex);

impl ISync for Both {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0
            .sync(s, Args::new(), Section::new(|_, _: Args| Ok(())))?;
        self.1.sync(s, args, section)
    }
}

#[test]
fn two_objects_taken_in_one_step_are_both_held() {
    let mut tool = TestTool::new();
    let shared = Mutex::new(1, None);
    let occ = Occupancy::default();
    let ps: Vec<_> = (0..3)
        .map(|_| {
            let both = Both(shared.clone(), Mutex::new(1, None));
            occupant(&both, &occ, ms(10)).promise::<()>(&mut tool)
        })
        .collect();
    tool.run_all_ready();
    assert_eq!(shared.counts(), (1, 2));
    run_all_ok(&mut tool, ps);
    assert_eq!(occ.get(), (0, 1, 3));
    assert_eq!(tool.elapsed(), ms(30));
    assert_eq!(shared.counts(), (0, 0));
}

/// Syncs twice on the same object in one step.
#[derive(Clone)]
struct Twice(Mutex);

impl ISync for Twice {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0
            .sync(s, Args::new(), Section::new(|_, _: Args| Ok(())))?;
        self.0.sync(s, args, section)
    }
}

#[test]
fn the_same_object_twice_in_one_step_re_enters_or_is_refused_while_waiting() {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    // Free: the first sync enters, the second re-enters.
    let mut root = AsyncSteps::new();
    root.sync(&Twice(m.clone()), |s, ()| s.success((1,)));
    let p = root.promise::<(i32,)>(&mut tool);
    tool.run_all();
    assert_eq!(tool.block_on(p).unwrap(), (1,));
    assert_eq!(m.counts(), (0, 0));
    // Busy: the first sync would wait, so the second cannot know the
    // outcome; it is refused instead of deadlocking on itself.
    let occ = Occupancy::default();
    let holder = occupant(&m, &occ, ms(10)).promise::<()>(&mut tool);
    let mut root = AsyncSteps::new();
    root.sync(&Twice(m.clone()), |_, ()| Ok(()));
    let e = error_of(&mut tool, root);
    assert_eq!(
        (e.code(), e.info()),
        (
            codes::INTERNAL_ERROR,
            Some("Mutex: this step already waits for the same object; sync on it once per step")
        )
    );
    tool.block_on(holder).unwrap();
    assert_eq!(m.counts(), (0, 0));
}
