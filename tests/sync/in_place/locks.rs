//! In place against the general path while holding and releasing: args
//! and callback order, errors and `async_stack`, cancel and timeout while
//! holding, reentrance and a branch deadlock, the release order of holds
//! taken in the section, interleaving flows and step references.

use super::*;
use crate::common::*;
use futoin_asyncsteps::{error::codes, AsyncSteps, Error, Promise, TestTool};

/// Args in, sub-steps, results out, at the root (`AsyncSteps::sync`) and
/// in a step (`Step::sync`), with the counts seen inside and after.
fn args_and_order<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let mut root = AsyncSteps::new();
    root.add(|s, ()| s.success((20i32,)));
    let (r1, o1) = (r.clone(), o.clone());
    root.sync(&o, move |s, (v,): (i32,)| {
        r1.push(format!("root section {v} {:?}", o1.counts()));
        let r2 = r1.clone();
        s.add(move |s, ()| {
            r2.push("sub 1");
            s.success((v + 1,))
        });
        s.add(move |s, (w,): (i32,)| {
            r1.push(format!("sub 2 {w}"));
            s.success((w * 2,))
        });
        Ok(())
    });
    let (r1, o1) = (r.clone(), o.clone());
    root.add(move |s, (x,): (i32,)| {
        r1.push(format!("after {x} {:?}", o1.counts()));
        let (r2, o2) = (r1.clone(), o1.clone());
        s.sync(&o1, move |s, ()| {
            r2.push(format!("step section {:?}", o2.counts()));
            s.success(("out".to_owned(),))
        });
        let r3 = r1.clone();
        // An implicit success: the next step gets no args.
        s.sync(&o1, move |_, (t,): (String,)| {
            r3.push(format!("second section {t}"));
            Ok(())
        });
        Ok(())
    });
    let r1 = r.clone();
    root.add(move |_, ()| {
        r1.push(format!("end {:?}", o.counts()));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    r.get()
}

#[test]
fn args_and_callback_order_match_the_general_path() {
    assert_eq!(
        same!(args_and_order, mutex()),
        [
            "root section 20 (1, 0)",
            "sub 1",
            "sub 2 21",
            "after 42 (0, 0)",
            "step section (1, 0)",
            "second section out",
            "end (0, 0)"
        ]
    );
    let t = same!(args_and_order, throttle());
    assert_eq!(t[0], "root section 20 (1, 0)");
    assert_eq!(t[6], "end (3, 0)");
    let l = same!(args_and_order, limiter(1));
    assert_eq!(l[0], "root section 20 (0, 0)");
    assert_eq!(l.len(), 7);
}

/// How the section fails in [`stacks`].
#[derive(Clone, Copy, Debug)]
enum Fail {
    Returns,
    InSubStep,
    WrongArgs,
    Timeout,
    InBranch,
    Panics,
}

const FAILS: [Fail; 6] = [
    Fail::Returns,
    Fail::InSubStep,
    Fail::WrongArgs,
    Fail::Timeout,
    Fail::InBranch,
    Fail::Panics,
];

/// A section that fails as `how` says.
fn failing(how: Fail) -> impl FnOnce(&mut Step<'_>, Args) -> StepResult + Clone + Send {
    move |s, _| match how {
        Fail::Returns => Err(Error::with_info("X", "returned")),
        Fail::InSubStep => {
            s.add(|s, ()| s.error("Y", "in a sub-step"));
            Ok(())
        }
        Fail::WrongArgs => {
            s.add(|s, ()| s.success(()));
            s.add(|_, (_,): (i32,)| Ok(()));
            Ok(())
        }
        Fail::Timeout => {
            s.set_timeout(Duration::from_millis(5));
            Ok(())
        }
        Fail::InBranch => {
            s.parallel()
                .add(|_, ()| Ok(()))
                .add(|s, ()| s.error("Z", "in a branch"));
            Ok(())
        }
        Fail::Panics => panic!("section panics"),
    }
}

/// The error and `async_stack` an outer handler sees for each way a
/// section can fail, for `Step::sync` and for a root-level
/// `AsyncSteps::sync` (copied into the step), then the counts.
fn stacks<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let mut root = AsyncSteps::new();
    for how in FAILS {
        for at_root in [false, true] {
            let (r1, o1) = (r.clone(), o.clone());
            let o2 = o.clone();
            root.add_catch(
                move |s, ()| {
                    if at_root {
                        let mut model = AsyncSteps::new();
                        model.sync(&o2, failing(how));
                        s.copy_from(&model);
                    } else {
                        s.sync(&o2, failing(how));
                    }
                    Ok(())
                },
                move |s, e| {
                    let stack = s.state().async_stack().join(" > ");
                    r1.push(format!(
                        "{how:?} root={at_root}: {} {:?} {:?} [{stack}]",
                        e.code(),
                        e.info(),
                        o1.counts()
                    ));
                    s.success(())
                },
            );
        }
    }
    let p = root.promise::<()>(&mut tool);
    tool.run_all();
    tool.block_on(p).unwrap();
    r.get()
}

#[test]
fn errors_and_async_stack_match_the_general_path() {
    let log = same!(stacks, mutex());
    assert_eq!(log.len(), FAILS.len() * 2);
    let codes: Vec<&str> = log
        .iter()
        .map(|l| l.split(": ").nth(1).unwrap().split(' ').next().unwrap())
        .collect();
    assert_eq!(
        codes,
        [
            "X",
            "X",
            "Y",
            "Y",
            codes::INTERNAL_ERROR,
            codes::INTERNAL_ERROR,
            codes::TIMEOUT,
            codes::TIMEOUT,
            "Z",
            "Z",
            codes::INTERNAL_ERROR,
            codes::INTERNAL_ERROR,
        ]
    );
    // Released before the outer handler runs.
    assert!(log.iter().all(|l| l.contains("(0, 0) [")), "{log:#?}");
    // `Step::sync`: the step and the section both carry the section's
    // name; a root-level sync step has its own name before it.
    let frames = |l: &str| -> Vec<String> {
        let stack = &l[l.find('[').unwrap() + 1..l.len() - 1];
        stack.split(" > ").map(str::to_owned).collect()
    };
    let returns = frames(&log[0]);
    let n = returns.len();
    assert!(n >= 3, "{returns:?}");
    assert_eq!(returns[n - 1], returns[n - 2]);
    // The section is named by its function's path: in this test binary,
    // crate `sync`, module `in_place::locks`.
    assert!(
        returns[n - 1].contains("sync::in_place::locks::failing"),
        "{returns:?}"
    );
    let at_root = frames(&log[1]);
    assert_eq!(at_root.len(), n);
    assert_eq!(at_root[n - 1], returns[n - 1]);
    assert!(at_root[n - 2].contains("AsyncSteps>::sync"), "{at_root:?}");
    // The failed sub-step and the failed branch come after the section.
    assert_eq!(frames(&log[2]).len(), n + 1);
    assert_eq!(frames(&log[8]).len(), n + 2);
    same!(stacks, throttle());
    // A Limiter's section runs inside its Throttle's section: one more
    // name (the Limiter's own) between the step and the section.
    let l = same!(stacks, limiter(1));
    assert_eq!(frames(&l[0]).len(), n + 1);
    assert!(frames(&l[0])[n - 1].contains("Limiter"), "{l:?}");
}

/// Logs the counts of its object when dropped (a `stack()` value).
struct CountsAtDrop<S: Obj>(Log, S);

impl<S: Obj> Drop for CountsAtDrop<S> {
    fn drop(&mut self) {
        self.0.push(format!("drop {:?}", self.1.counts()));
    }
}

/// Cancel, then timeout, while inside: the cancel callback and the
/// section's `stack()` values end before the lock is released; another
/// flow waiting for the lock gets in after.
fn cancel_and_timeout<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let holder = |timeout: bool| {
        let (r1, o1) = (r.clone(), o.clone());
        let mut root = AsyncSteps::new();
        root.add_catch(
            {
                let (r1, o1) = (r1.clone(), o1.clone());
                move |s, ()| {
                    s.sync(&o1.clone(), move |s, ()| {
                        r1.push(format!("in {:?}", o1.counts()));
                        s.stack(CountsAtDrop(r1.clone(), o1.clone()));
                        let (r2, o2) = (r1.clone(), o1.clone());
                        s.set_cancel(move || r2.push(format!("cancel {:?}", o2.counts())));
                        if timeout {
                            s.set_timeout(Duration::from_millis(10));
                        }
                        Ok(())
                    });
                    Ok(())
                }
            },
            move |s, e| {
                r1.push(format!("handler {} {:?}", e.code(), o1.counts()));
                s.success(())
            },
        );
        root
    };
    let waiter = || {
        let (r1, o1) = (r.clone(), o.clone());
        let mut root = AsyncSteps::new();
        root.sync(&o, move |_, ()| {
            r1.push(format!("waiter in {:?}", o1.counts()));
            Ok(())
        });
        root
    };
    let a = holder(false).promise::<()>(&mut tool);
    let w = waiter().promise::<()>(&mut tool);
    tool.run_all_ready();
    r.push(format!("cancel now {:?}", o.counts()));
    a.cancel();
    tool.run_all_ready();
    assert_eq!(tool.block_on(a).unwrap_err().code(), codes::CANCELED);
    tool.block_on(w).unwrap();
    let b = holder(true).promise::<()>(&mut tool);
    tool.run_all();
    tool.block_on(b).unwrap();
    r.push(format!("end {:?}", o.counts()));
    r.get()
}

#[test]
fn cancel_and_timeout_while_holding_match_the_general_path() {
    assert_eq!(
        same!(cancel_and_timeout, mutex()),
        [
            "in (1, 0)",
            "cancel now (1, 1)",
            "cancel (1, 1)",
            "drop (1, 1)",
            "waiter in (1, 0)",
            "in (1, 0)",
            "cancel (1, 0)",
            "drop (1, 0)",
            "handler Timeout (0, 0)",
            "end (0, 0)"
        ]
    );
    same!(cancel_and_timeout, throttle());
    assert_eq!(same!(cancel_and_timeout, limiter(1)).len(), 10);
}

/// Re-entering from the section, through `Step::sync` and a direct
/// `ISync::sync`, on a Mutex(2): passes through without a second slot. A
/// parallel branch syncing on it is refused (its ancestors hold it all)
/// when the mutex has one slot.
fn reentrance<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let mut root = AsyncSteps::new();
    let (r1, o1) = (r.clone(), o.clone());
    root.sync(&o, move |s, ()| {
        r1.push(format!("in {:?}", o1.counts()));
        let (r2, o2) = (r1.clone(), o1.clone());
        s.sync(&o1, move |_, ()| {
            r2.push(format!("nested {:?}", o2.counts()));
            Ok(())
        });
        let (r3, o3) = (r1.clone(), o1.clone());
        let direct = Section::new(move |s: &mut Step<'_>, ()| {
            r3.push(format!("direct {:?}", o3.counts()));
            s.success((5i32,))
        });
        o1.sync(s, Args::new(), direct)
    });
    let r1 = r.clone();
    root.add(move |_, (v,): (i32,)| {
        r1.push(format!("result {v}"));
        Ok(())
    });
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    r.get()
}

fn deadlock<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let mut root = AsyncSteps::new();
    let (r1, o1) = (r.clone(), o.clone());
    let o2 = o.clone();
    root.add_catch(
        move |s, ()| {
            s.sync(&o2.clone(), move |s, ()| {
                s.parallel().add(move |s, ()| {
                    s.sync(&o2, |_, ()| Ok(()));
                    Ok(())
                });
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            let depth = s.state().async_stack().len();
            r1.push(format!(
                "{} {:?} {:?} depth {depth}",
                e.code(),
                e.info(),
                o1.counts()
            ));
            s.success(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    r.get()
}

#[test]
fn reentrance_and_branch_deadlock_match_the_general_path() {
    assert_eq!(
        same!(reentrance, Mutex::new(2, None)),
        ["in (1, 0)", "nested (1, 0)", "direct (1, 0)", "result 5"]
    );
    same!(reentrance, throttle());
    assert_eq!(same!(reentrance, limiter(2)).len(), 4);
    let log = same!(deadlock, mutex());
    assert_eq!(log.len(), 1);
    assert!(log[0].starts_with(codes::INTERNAL_ERROR), "{log:?}");
    assert!(log[0].contains("deadlock"), "{log:?}");
    // One more frame on the stack: the Limiter's own section.
    let l = same!(deadlock, limiter(1));
    assert_eq!(l, [log[0].replace("depth 6", "depth 7")]);
}

/// A section that also takes a second mutex (a direct `ISync::sync`) and
/// waits: when it ends, the second one is released first (it belonged to
/// the section), so its waiter gets in first.
fn release_order<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let second = Mutex::new(1, None);
    let h = HandleSlot::default();
    let mut a = AsyncSteps::new();
    let (h1, m2, o1) = (h.clone(), second.clone(), o.clone());
    a.add(move |s, ()| {
        s.sync(&o1, move |s, a: Args| {
            let wait = Section::new(move |s: &mut Step<'_>, ()| {
                h1.put(s.wait_external());
                Ok(())
            });
            m2.sync(s, a, wait)
        });
        Ok(())
    });
    let a = a.promise::<()>(&mut tool);
    tool.run_all_ready();
    fn waiter<T: Obj>(tool: &mut TestTool, r: &Log, name: &str, obj: &T) -> Promise<()> {
        let (r1, o1, name) = (r.clone(), obj.clone(), name.to_owned());
        let mut w = AsyncSteps::new();
        w.sync(obj, move |_, ()| {
            r1.push(format!("{name} waiter in {:?}", o1.counts()));
            Ok(())
        });
        w.promise(tool)
    }
    let ps = [
        a,
        waiter(&mut tool, &r, "first", &o),
        waiter(&mut tool, &r, "second", &second),
    ];
    tool.run_all_ready();
    r.push(format!("waiting {:?} {:?}", o.counts(), second.counts()));
    h.take().success(()).unwrap();
    for p in ps {
        tool.block_on(p).unwrap();
    }
    r.get()
}

#[test]
fn holds_taken_in_the_section_are_released_first_as_in_the_general_path() {
    assert_eq!(
        same!(release_order, mutex()),
        [
            "waiting (1, 1) (1, 1)",
            "second waiter in (1, 0)",
            "first waiter in (1, 0)"
        ]
    );
    assert_eq!(
        same!(release_order, limiter(1)),
        [
            "waiting (0, 0) (1, 1)",
            "second waiter in (1, 0)",
            "first waiter in (0, 0)"
        ]
    );
}

/// Two flows of synced steps in loops and two parallel branches syncing
/// at once: the interleaving (the step budget of each turn, branches
/// starting together) is that of the general path, and a section's
/// `stack()` reference resolves to its value on both. (Frame numbers are
/// not compared: a plain step on the general path gets no frame at all.)
fn interleaving<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
    let mut ps = Vec::new();
    for f in 0..2 {
        let (r1, o1) = (r.clone(), o.clone());
        let mut root = AsyncSteps::new();
        root.repeat(700, move |s, i| {
            let r2 = r1.clone();
            s.sync(&o1, move |s, ()| {
                if i % 100 == 0 {
                    let at = s.stack(i as u16);
                    let back = s.stack_get(at).map(|v| *v);
                    r2.push(format!("flow {f} at {i}: {back:?}"));
                }
                Ok(())
            });
            Ok(())
        });
        ps.push(root.promise::<()>(&mut tool));
    }
    let (r1, o1) = (r.clone(), o.clone());
    let mut root = AsyncSteps::new();
    root.add(move |s, ()| {
        let mut p = s.parallel();
        for b in 0..3 {
            let (r2, o2) = (r1.clone(), o1.clone());
            p.add(move |s, ()| {
                r2.push(format!("branch {b} starts"));
                let r3 = r2.clone();
                s.sync(&o2, move |s, ()| {
                    r3.push(format!("branch {b} in"));
                    s.add(move |_, ()| {
                        r3.push(format!("branch {b} sub-step"));
                        Ok(())
                    });
                    Ok(())
                });
                Ok(())
            });
        }
        Ok(())
    });
    ps.push(root.promise(&mut tool));
    for p in ps {
        tool.block_on(p).unwrap();
    }
    r.get()
}

#[test]
fn interleaving_and_step_references_match_the_general_path() {
    let log = same!(interleaving, Mutex::new(3, None));
    assert_eq!(log.len(), 2 * 7 + 9);
    // Both flows interleave (turns end with the step budget).
    let first_of_1 = log.iter().position(|l| l.starts_with("flow 1")).unwrap();
    let last_of_0 = log.iter().rposition(|l| l.starts_with("flow 0")).unwrap();
    assert!(first_of_1 < last_of_0, "{log:#?}");
    same!(interleaving, throttle());
    same!(interleaving, limiter(3));
}
