//! Runs a program on the real engine (`TestTool`, virtual time) and records
//! the same trace as the reference interpreter.
//!
//! Each callback of the program becomes a closure that calls the execution
//! API as the program says. External completions are `deferred` callbacks
//! created by the waiting step (so they share the timer order with
//! timeouts), or calls made at once inside the callback; the root cancel is
//! a `deferred` callback created before the flow starts, or a call from a
//! step. The loop is driven one event at a time with `run_one`; the result
//! is taken (with the virtual time) as soon as the promise has it.

use super::program::*;
use super::reference::{Ev, Outcome, Res};
use futoin_asyncsteps::{Args, AsyncSteps, Error, Promise, Step, StepResult, TestTool, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The trace, shared by every callback (root callbacks must be `Send`),
/// and the root's promise (for `cancel()`).
#[derive(Clone)]
struct Rec {
    evs: Arc<Mutex<Vec<Ev>>>,
    t0: Instant,
    root: Arc<Mutex<Option<Promise<Args>>>>,
}

impl Rec {
    fn push(&self, e: Ev) {
        self.evs.lock().unwrap().push(e);
    }

    fn at(&self, s: &mut Step<'_>) -> u64 {
        ms_since(self.t0, s.tool().now())
    }

    fn cancel_root(&self) {
        if let Some(p) = self.root.lock().unwrap().as_ref() {
            p.cancel();
        }
    }
}

fn ms_since(t0: Instant, t: Instant) -> u64 {
    t.duration_since(t0).as_millis() as u64
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn to_args(v: &[i32]) -> Args {
    let mut a = Args::new();
    for &x in v {
        a.push(Value::I32(x)).expect("at most 4 args");
    }
    a
}

fn from_args(a: &Args) -> Vec<i64> {
    (0..a.len())
        .map(|i| match a.get(i) {
            Some(Value::I32(v)) => i64::from(*v),
            other => panic!("unexpected arg {other:?}"),
        })
        .collect()
}

/// Runs `prog` on a fresh `TestTool` until nothing is pending.
pub fn run(prog: &Program) -> Outcome {
    let mut tool = TestTool::new();
    let t0 = tool.now();
    let rec = Rec {
        evs: Arc::default(),
        t0,
        root: Arc::default(),
    };
    if let Some(t) = prog.cancel_at {
        let r = rec.clone();
        tool.deferred(ms(t), move |_| r.cancel_root());
    }
    let mut root = AsyncSteps::new();
    for n in &prog.root {
        add_root(&mut root, n, &rec);
    }
    *rec.root.lock().unwrap() = Some(root.promise(&mut tool));
    let mut result = None;
    let mut events = 0u64;
    loop {
        if result.is_none() {
            let taken = rec.root.lock().unwrap().as_mut().unwrap().try_take();
            if let Some(r) = taken {
                result = Some((r, ms_since(t0, tool.now())));
            }
        }
        if !tool.run_one() {
            break;
        }
        events += 1;
        assert!(events < 1_000_000, "the program does not stop");
    }
    let clock = ms_since(t0, tool.now());
    let (result, done_at) = match result {
        Some((Ok(a), t)) => (Res::Ok(from_args(&a)), t),
        Some((Err(e), t)) => (Res::Err(e.code().to_string()), t),
        None => (Res::Hung, clock),
    };
    let trace = std::mem::take(&mut *rec.evs.lock().unwrap());
    Outcome {
        trace,
        result,
        done_at,
        clock,
    }
}

// ------------------------------------------------------------------ callbacks

/// An execute callback for `spec` (usable at the root: `Clone + Send`).
fn exec_fn(
    spec: &StepSpec,
    iter: usize,
    rec: &Rec,
) -> impl FnOnce(&mut Step<'_>, Args) -> StepResult + Clone + Send + 'static {
    let (spec, rec) = (spec.clone(), rec.clone());
    move |s, a| run_spec(s, &spec, from_args(&a), iter, &rec)
}

/// An error callback for `h`.
fn catch_fn(
    h: &Handler,
    iter: usize,
    rec: &Rec,
) -> impl FnOnce(&mut Step<'_>, &Error) -> StepResult + Clone + Send + 'static {
    let (h, rec) = (h.clone(), rec.clone());
    move |s, e| run_handler(s, &h, e.code(), iter, &rec)
}

fn run_spec(
    s: &mut Step<'_>,
    spec: &StepSpec,
    args: Vec<i64>,
    iter: usize,
    rec: &Rec,
) -> StepResult {
    rec.push(Ev::Enter {
        id: spec.id,
        args,
        at: rec.at(s),
    });
    for op in &spec.ops {
        match op {
            Op::Cancel { id } => {
                let (r, id) = (rec.clone(), *id);
                s.set_cancel(move || r.push(Ev::Cancel { id }));
            }
            Op::Timeout { ms: t } => s.set_timeout(ms(*t)),
            Op::Wait { id, after, result } => {
                let h = s.wait_external();
                let (r, id, result) = (rec.clone(), *id, result.clone());
                let complete = move || {
                    let accepted = match &result {
                        Ok(a) => h.success(to_args(a)),
                        Err(c) => h.error(c.name(), "external"),
                    }
                    .is_ok();
                    r.push(Ev::Ext { id, accepted });
                };
                match after {
                    Some(t) => {
                        s.tool().deferred(ms(*t), move |_| complete());
                    }
                    None => complete(),
                }
            }
            Op::CancelRoot => rec.cancel_root(),
            Op::Add(n) => add_node(s, n, iter, rec),
        }
    }
    match spec.end.at(iter) {
        End::Implicit => Ok(()),
        End::Success(a) => s.success(to_args(a)),
        End::Error(c) => s.error(c.name(), "step"),
        End::Break(l) => brk(s, *l),
        End::Continue(l) => cont(s, *l),
        End::ByIter(_) => unreachable!("ByIter is never nested"),
    }
}

fn brk(s: &mut Step<'_>, l: Option<Label>) -> StepResult {
    match l {
        None => s.break_loop(),
        Some(l) => s.break_label(l.name()),
    }
}

fn cont(s: &mut Step<'_>, l: Option<Label>) -> StepResult {
    match l {
        None => s.continue_loop(),
        Some(l) => s.continue_label(l.name()),
    }
}

fn run_handler(s: &mut Step<'_>, h: &Handler, code: &str, iter: usize, rec: &Rec) -> StepResult {
    rec.push(Ev::Handler {
        id: h.id,
        code: code.to_string(),
        at: rec.at(s),
    });
    for op in &h.ops {
        match op {
            HOp::Add(n) => add_node(s, n, iter, rec),
            HOp::Misuse => s.set_cancel(|| {}),
        }
    }
    match &h.end {
        HEnd::Silent => Ok(()),
        HEnd::Success(a) => s.success(to_args(a)),
        HEnd::Error(c) => s.error(c.name(), "handler"),
        HEnd::Rethrow => Err(Error::new(code.to_string())),
        HEnd::Break(l) => brk(s, *l),
        HEnd::Continue(l) => cont(s, *l),
    }
}

/// The body of `loop(func)`: counts its iterations and, from `max` on,
/// only calls `break()` (the program's guard).
fn loop_fn(
    body: &StepSpec,
    max: usize,
    rec: &Rec,
) -> impl FnMut(&mut Step<'_>) -> StepResult + Clone + Send + 'static {
    let (body, rec) = (body.clone(), rec.clone());
    let mut n = 0usize;
    move |s| {
        let i = n;
        n += 1;
        if i >= max {
            return s.break_loop();
        }
        run_spec(s, &body, vec![i as i64], i, &rec)
    }
}

/// The body of `repeat(count, func)`: gets the iteration index.
fn repeat_fn(
    body: &StepSpec,
    rec: &Rec,
) -> impl FnMut(&mut Step<'_>, usize) -> StepResult + Clone + Send + 'static {
    let (body, rec) = (body.clone(), rec.clone());
    move |s, i| run_spec(s, &body, vec![i as i64], i, &rec)
}

/// Adds `n` from inside a callback (execution API).
fn add_node(s: &mut Step<'_>, n: &Node, iter: usize, rec: &Rec) {
    match n {
        Node::Step {
            spec,
            handler: None,
        } => {
            s.add(exec_fn(spec, iter, rec));
        }
        Node::Step {
            spec,
            handler: Some(h),
        } => {
            s.add_catch(exec_fn(spec, iter, rec), catch_fn(h, iter, rec));
        }
        Node::Parallel { branches, handler } => {
            let mut p = match handler {
                None => s.parallel(),
                Some(h) => s.parallel_catch(catch_fn(h, iter, rec)),
            };
            for b in branches {
                match &b.handler {
                    None => p.add(exec_fn(&b.spec, iter, rec)),
                    Some(h) => p.add_catch(exec_fn(&b.spec, iter, rec), catch_fn(h, iter, rec)),
                };
            }
        }
        Node::Loop { kind, label, body } => {
            let label = label.map(Label::name);
            match kind {
                LoopKind::Loop { max } => {
                    let f = loop_fn(body, *max, rec);
                    match label {
                        None => s.loop_(f),
                        Some(l) => s.loop_labeled(l, f),
                    };
                }
                LoopKind::Repeat { count } => {
                    let g = repeat_fn(body, rec);
                    match label {
                        None => s.repeat(*count, g),
                        Some(l) => s.repeat_labeled(l, *count, g),
                    };
                }
                LoopKind::ForEach { items } => {
                    let (body, rec) = (body.clone(), rec.clone());
                    let g = move |s: &mut Step<'_>, k: usize, v: i32| {
                        run_spec(s, &body, vec![k as i64, i64::from(v)], k, &rec)
                    };
                    match label {
                        None => s.for_each(items.clone(), g),
                        Some(l) => s.for_each_labeled(l, items.clone(), g),
                    };
                }
            }
        }
        Node::SuccessStep(a) => {
            s.success_step(to_args(a));
        }
    }
}

/// Adds `n` to the root before it runs (the model API).
fn add_root(root: &mut AsyncSteps, n: &Node, rec: &Rec) {
    match n {
        Node::Step {
            spec,
            handler: None,
        } => {
            root.add(exec_fn(spec, 0, rec));
        }
        Node::Step {
            spec,
            handler: Some(h),
        } => {
            root.add_catch(exec_fn(spec, 0, rec), catch_fn(h, 0, rec));
        }
        Node::Parallel { branches, handler } => {
            let mut p = match handler {
                None => root.parallel(),
                Some(h) => root.parallel_catch(catch_fn(h, 0, rec)),
            };
            for b in branches {
                match &b.handler {
                    None => p.add(exec_fn(&b.spec, 0, rec)),
                    Some(h) => p.add_catch(exec_fn(&b.spec, 0, rec), catch_fn(h, 0, rec)),
                };
            }
        }
        // The model API has unlabelled loops only; a labelled one is added
        // by a level-0 step (which is what `AsyncSteps::loop_` does anyway).
        Node::Loop {
            kind,
            label: None,
            body,
        } => match kind {
            LoopKind::Loop { max } => {
                root.loop_(loop_fn(body, *max, rec));
            }
            LoopKind::Repeat { count } => {
                root.repeat(*count, repeat_fn(body, rec));
            }
            LoopKind::ForEach { items } => {
                let (body, rec) = (body.clone(), rec.clone());
                root.for_each(items.clone(), move |s, k: usize, v: i32| {
                    run_spec(s, &body, vec![k as i64, i64::from(v)], k, &rec)
                });
            }
        },
        Node::Loop { .. } => {
            let (n, rec) = (n.clone(), rec.clone());
            root.add(move |s, ()| {
                add_node(s, &n, 0, &rec);
                Ok(())
            });
        }
        Node::SuccessStep(a) => match a.as_slice() {
            [] => {
                root.success_step(());
            }
            [x] => {
                root.success_step((*x,));
            }
            [x, y] => {
                root.success_step((*x, *y));
            }
            _ => unreachable!("at most 2 args"),
        },
    }
}
