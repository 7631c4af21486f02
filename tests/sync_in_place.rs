//! The uncontended path of `sync` steps (the critical section runs in the
//! sync step itself when the lock is free) against the general path, where
//! the section is a sub-step. Each scenario runs once on a `Mutex` or
//! `Throttle` directly (in place) and once through a user `ISync` that only
//! forwards to it (always the general path); both runs must log exactly the
//! same callbacks, args, error codes, `async_stack`s, cancel and drop
//! order, lock counts and step references, and the log itself is checked.

mod common;

use common::*;
use futoin_asyncsteps::sync::{ISync, Limiter, LimiterOptions, Mutex, Section, Throttle};
use futoin_asyncsteps::{
    error::codes, Args, AsyncSteps, Error, Promise, Step, StepResult, TestTool,
};
use std::time::Duration;

/// Forwards to the object inside: the general path, for comparison.
#[derive(Clone)]
struct General<S>(S);

impl<S: ISync> ISync for General<S> {
    fn sync(&self, s: &mut Step<'_>, args: Args, section: Section) -> StepResult {
        self.0.sync(s, args, section)
    }
}

/// A sync object whose counts a scenario logs.
trait Obj: ISync + Clone {
    fn counts(&self) -> (u32, u32);
}

impl Obj for Mutex {
    fn counts(&self) -> (u32, u32) {
        Mutex::counts(self)
    }
}

impl Obj for Throttle {
    fn counts(&self) -> (u32, u32) {
        Throttle::counts(self)
    }
}

impl Obj for Limiter {
    /// A Limiter shows no counts: the scenarios compare everything else.
    fn counts(&self) -> (u32, u32) {
        (0, 0)
    }
}

impl<S: Obj> Obj for General<S> {
    fn counts(&self) -> (u32, u32) {
        self.0.counts()
    }
}

/// Runs `$scenario` on `$make` (in place) and on `General($make)`, asserts
/// that both logged the same, and gives that log. (Callback type names on
/// `async_stack` name the object's type where a scenario is generic over
/// it: `General<T>` is read as `T`.)
macro_rules! same {
    ($scenario:ident, $make:expr $(, $arg:expr)*) => {{
        let obj = $make;
        let inner = type_name_of(&obj);
        let wrapped = format!(
            "{}<{inner}>",
            std::any::type_name::<General<()>>().trim_end_matches("<()>")
        );
        let in_place = $scenario(obj $(, $arg)*);
        let general: Vec<String> = $scenario(General($make) $(, $arg)*)
            .iter()
            .map(|l| l.replace(&wrapped, inner))
            .collect();
        assert_eq!(in_place, general, "in place (left) vs general path (right)");
        in_place
    }};
}

fn type_name_of<T>(_: &T) -> &'static str {
    std::any::type_name::<T>()
}

fn mutex() -> Mutex {
    Mutex::new(1, None)
}

fn throttle() -> Throttle {
    Throttle::new(u32::MAX, Duration::from_secs(1), None)
}

/// `concurrent` at once (8 more may wait), and a rate never reached.
fn limiter(concurrent: u32) -> Limiter {
    Limiter::new(LimiterOptions {
        concurrent,
        max_queue: 8,
        rate: u32::MAX,
        ..Default::default()
    })
}

/// Args in, sub-steps, results out, at the root (`AsyncSteps::sync`) and
/// in a step (`Step::sync`), with the counts seen inside and after.
fn args_and_order<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Recorder::default();
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
    let r = Recorder::default();
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
    assert!(
        returns[n - 1].contains("sync_in_place::failing"),
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
struct CountsAtDrop<S: Obj>(Recorder, S);

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
    let r = Recorder::default();
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
    let r = Recorder::default();
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
    let r = Recorder::default();
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
    let r = Recorder::default();
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
    fn waiter<T: Obj>(tool: &mut TestTool, r: &Recorder, name: &str, obj: &T) -> Promise<()> {
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
    let r = Recorder::default();
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

/// Runs what is ready, then advances a second at a time, `secs - 1`
/// times, logging "at t s" before each; then the flows' results and the
/// log.
fn second_by_second(
    tool: &mut TestTool,
    r: &Recorder,
    ps: Vec<Promise<()>>,
    secs: u64,
) -> Vec<String> {
    for t in 0..secs {
        r.push(format!("at {t} s"));
        if t == 0 {
            tool.run_all_ready();
        } else {
            tool.advance(Duration::from_secs(1));
        }
    }
    for p in ps {
        tool.block_on(p).unwrap();
    }
    r.get()
}

/// A Limiter letting two flows in at once (eight more may wait) and
/// `rate` a second (eight more may wait for it).
fn out_of_rate(rate: u32) -> Limiter {
    Limiter::new(LimiterOptions {
        concurrent: 2,
        max_queue: 8,
        rate,
        period: Duration::from_secs(1),
        burst: 8,
    })
}

/// Three flows, two sections each, through a Limiter that lets two in at
/// once and two per second: a flow that finds the Mutex free but the
/// rate used up waits for the next period holding its Mutex slot.
fn rate_limited<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Recorder::default();
    let mut ps = Vec::new();
    for f in 0..3 {
        let (r1, o1) = (r.clone(), o.clone());
        let mut root = AsyncSteps::new();
        root.repeat(2, move |s, i| {
            let r2 = r1.clone();
            s.add(move |s, ()| s.success((i as i32,)));
            s.sync(&o1, move |s, (v,): (i32,)| {
                r2.push(format!("flow {f} section {v}"));
                s.success((v * 10,))
            });
            let r3 = r1.clone();
            s.add(move |_, (w,): (i32,)| {
                r3.push(format!("flow {f} after {w}"));
                Ok(())
            });
            Ok(())
        });
        ps.push(root.promise::<()>(&mut tool));
    }
    second_by_second(&mut tool, &r, ps, 4)
}

#[test]
fn a_limiter_out_of_rate_matches_the_general_path() {
    let limiter = || out_of_rate(2);
    assert_eq!(
        same!(rate_limited, limiter()),
        [
            "at 0 s",
            "flow 0 section 0",
            "flow 0 after 0",
            "flow 0 section 1",
            "flow 0 after 10",
            // Flows 1 and 2 wait for the rate, each in a Mutex slot.
            "at 1 s",
            "flow 1 section 0",
            "flow 1 after 0",
            "flow 2 section 0",
            "flow 2 after 0",
            "at 2 s",
            "flow 1 section 1",
            "flow 1 after 10",
            "flow 2 section 1",
            "flow 2 after 10",
            "at 3 s",
        ]
    );
}

/// On a Limiter out of rate (one per second, used up by a first flow):
/// re-entering it from its section passes through at once, and a section
/// that fails names the Limiter's own section between the step and
/// itself on `async_stack`, whether the Throttle let it in at once or not.
fn reentry_and_stack<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Recorder::default();
    let mut ps = Vec::new();
    for f in 0..2 {
        let (r1, o1, r3) = (r.clone(), o.clone(), r.clone());
        let mut root = AsyncSteps::new();
        root.add_catch(
            move |s, ()| {
                let (r2, o2) = (r1.clone(), o1.clone());
                s.sync(&o1, move |s, ()| {
                    r2.push(format!("flow {f} in"));
                    s.sync(&o2, move |s, ()| {
                        r2.push(format!("flow {f} re-entered"));
                        s.error("Z", "in the nested section")
                    });
                    Ok(())
                });
                Ok(())
            },
            move |s, e| {
                let stack = s.state().async_stack().join(" > ");
                r3.push(format!("flow {f}: {} [{stack}]", e.code()));
                s.success(())
            },
        );
        ps.push(root.promise::<()>(&mut tool));
    }
    second_by_second(&mut tool, &r, ps, 3)
}

#[test]
fn a_limiter_out_of_rate_is_reentered_and_named_as_on_the_general_path() {
    let limiter = || out_of_rate(1);
    let log = same!(reentry_and_stack, limiter());
    let lines: Vec<&str> = log.iter().map(|l| l.split(" [").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "at 0 s",
            "flow 0 in",
            "flow 0 re-entered",
            "flow 0: Z",
            "at 1 s",
            "flow 1 in",
            "flow 1 re-entered",
            "flow 1: Z",
            "at 2 s",
        ]
    );
    // Root step, sync step, the Limiter's section, the section; then the
    // nested sync step, the Limiter's section, the nested section.
    let names = |l: &str| -> Vec<bool> {
        let stack = &l[l.find('[').unwrap() + 1..l.len() - 1];
        stack
            .split(" > ")
            .map(|x| x.ends_with("::Limiter"))
            .collect()
    };
    let shape = [false, false, true, false, false, true, false];
    assert_eq!(
        (names(&log[3]), names(&log[7])),
        (shape.to_vec(), shape.to_vec()),
        "{log:#?}"
    );
}

/// Two flows taking turns through `o` (the turns end with the step
/// budget), the first after `lead` plain steps: over `lead` in 0..6 the
/// budget runs out at every point of an iteration, the `sync` step
/// included, and the log shows where each turn ended.
fn budget_ends<S: Obj>(o: S, lead: usize) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Recorder::default();
    let mut ps = Vec::new();
    for f in 0..2 {
        let (r1, o1) = (r.clone(), o.clone());
        let mut root = AsyncSteps::new();
        for _ in 0..if f == 0 { lead } else { 0 } {
            root.add(|_, ()| Ok(()));
        }
        root.repeat(700, move |s, i| {
            let r2 = r1.clone();
            s.sync(&o1, move |_, ()| {
                if i % 10 == 0 {
                    r2.push(format!("flow {f} at {i}"));
                }
                Ok(())
            });
            Ok(())
        });
        ps.push(root.promise::<()>(&mut tool));
    }
    for p in ps {
        tool.block_on(p).unwrap();
    }
    r.get()
}

/// The Limiter's frameless path needs budget for two sections (its own
/// and the user's); with less, its Throttle's part goes to the next turn.
#[test]
fn turns_end_where_the_general_path_ends_them() {
    for lead in 0..6 {
        let log = same!(budget_ends, limiter(1), lead);
        assert_eq!(log.len(), 140);
        let switches = log.windows(2).filter(|w| w[0][..6] != w[1][..6]).count();
        assert!(switches >= 4, "lead {lead}: {log:#?}");
    }
}

/// The `async_stack` of a failing section, its args (none, then some) and
/// the code, when the lock is free (in place) and when the flow had to
/// queue for it (wait step, then the section).
fn free_or_contended(contended: bool) -> Vec<String> {
    let mut tool = TestTool::new();
    let m = Mutex::new(1, None);
    let r = Recorder::default();
    let h = HandleSlot::default();
    let holder = contended.then(|| {
        let mut root = AsyncSteps::new();
        let h1 = h.clone();
        root.sync(&m, move |s, ()| {
            h1.put(s.wait_external());
            Ok(())
        });
        root.promise::<()>(&mut tool)
    });
    tool.run_all_ready();
    let mut root = AsyncSteps::new();
    for with_args in [false, true] {
        let (r1, r2, m1) = (r.clone(), r.clone(), m.clone());
        root.add_catch(
            move |s, ()| {
                if with_args {
                    // The sync step gets the result of the step before it.
                    s.add(|s, ()| s.success((7i32,)));
                    s.sync(&m1, move |_, (v,): (i32,)| {
                        r1.push(format!("args {v}"));
                        Err(Error::with_info("X", format!("{v}")))
                    });
                } else {
                    s.sync(&m1, move |_, a: Args| {
                        r1.push(format!("args {}", a.len()));
                        Err(Error::with_info("X", "none"))
                    });
                }
                Ok(())
            },
            move |s, e| {
                let stack = s.state().async_stack().join(" > ");
                r2.push(format!("{} {:?} [{stack}]", e.code(), e.info()));
                s.success(())
            },
        );
    }
    let p = root.promise::<()>(&mut tool);
    tool.run_all_ready();
    if let Some(holder) = holder {
        h.take().success(()).unwrap();
        tool.block_on(holder).unwrap();
    }
    tool.block_on(p).unwrap();
    assert_eq!(m.counts(), (0, 0));
    r.get()
}

#[test]
fn a_queued_section_gets_the_same_args_and_async_stack() {
    let free = free_or_contended(false);
    assert_eq!(free, free_or_contended(true));
    assert_eq!(free.len(), 4);
    assert_eq!(free[0], "args 0");
    assert!(free[1].starts_with("X Some(\"none\") ["), "{free:?}");
    assert_eq!(free[2], "args 7");
    assert!(free[3].starts_with("X Some(\"7\") ["), "{free:?}");
}

/// An arg value that logs the lock's counts when it is dropped.
struct Loud<S: Obj>(Recorder, S);

impl<S: Obj> Drop for Loud<S> {
    fn drop(&mut self) {
        self.0.push(format!("arg dropped {:?}", self.1.counts()));
    }
}

impl<S: Obj + Send + 'static> futoin_asyncsteps::ArgValue for Loud<S> {}

/// A section that leaves its incoming args unread (an implicit success),
/// then one that misuses its step (`success()` twice, the error ignored).
fn unread_args_and_misuse<S: Obj + Send + 'static>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Recorder::default();
    let mut root = AsyncSteps::new();
    let (r1, o1) = (r.clone(), o.clone());
    root.add(move |s, ()| s.success((Loud(r1, o1),)));
    let (r1, o1) = (r.clone(), o.clone());
    // `()` takes no args: the one in the register stays unread.
    root.sync(&o, move |_, ()| {
        r1.push(format!("section {:?}", o1.counts()));
        Ok(())
    });
    let (r1, r2, o1, o2) = (r.clone(), r.clone(), o.clone(), o.clone());
    root.add_catch(
        move |s, ()| {
            s.sync(&o1, move |s, ()| {
                r1.push("misusing");
                s.success((1i32,))?;
                let _ = s.success((2i32,));
                Ok(())
            });
            Ok(())
        },
        move |s, e| {
            let depth = s.state().async_stack().len();
            r2.push(format!("{} depth {depth} {:?}", e.code(), o2.counts()));
            s.success(())
        },
    );
    let p = root.promise::<()>(&mut tool);
    tool.block_on(p).unwrap();
    r.push(format!("end {:?}", o.counts()));
    r.get()
}

#[test]
fn unread_args_and_a_misusing_section_match_the_general_path() {
    assert_eq!(
        same!(unread_args_and_misuse, mutex()),
        [
            "section (1, 0)",
            // The args the section did not read go under the lock.
            "arg dropped (1, 0)",
            "misusing",
            // The handler's step, the sync step, its section; the lock
            // was given back as the section's frame unwound.
            "InternalError depth 3 (0, 0)",
            "end (0, 0)"
        ]
    );
    same!(unread_args_and_misuse, throttle());
}
