//! In place against the general path at the limits: a `Limiter` out of
//! rate (waiting, re-entered, named on `async_stack`), turns ended by the
//! step budget, a queued section's args and `async_stack`, and args a
//! section leaves unread or misuses.

use super::*;
use crate::common::*;
use futoin_asyncsteps::{AsyncSteps, Error, Promise, TestTool};

/// Runs what is ready, then advances a second at a time, `secs - 1`
/// times, logging "at t s" before each; then the flows' results and the
/// log.
fn second_by_second(tool: &mut TestTool, r: &Log, ps: Vec<Promise<()>>, secs: u64) -> Vec<String> {
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
    let r = Log::default();
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

/// On a Limiter of one entry a second: re-entering it from its section
/// is one more entry of the rate (its Mutex passes the flow through), so
/// the flow waits for the next period holding its Mutex slot; and a
/// section that fails names the Limiter's own section between the step
/// and itself on `async_stack`, whether the Throttle let it in at once or
/// not.
fn reentry_and_stack<S: Obj>(o: S) -> Vec<String> {
    let mut tool = TestTool::new();
    let r = Log::default();
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
    second_by_second(&mut tool, &r, ps, 4)
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
            "at 1 s",
            "flow 0 re-entered",
            "flow 0: Z",
            "at 2 s",
            "flow 1 in",
            "at 3 s",
            "flow 1 re-entered",
            "flow 1: Z",
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
        (names(&log[4]), names(&log[9])),
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
    let r = Log::default();
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
    let r = Log::default();
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
struct Loud<S: Obj>(Log, S);

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
    let r = Log::default();
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
