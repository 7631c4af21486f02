//! Unit tests of the loop driver (`driver.rs`).

use super::*;
use crate::steps::promise::Promise;

#[test]
fn an_idle_loop_spins_only_with_nothing_to_run_and_no_io_to_watch() {
    let us = Duration::from_micros;
    assert!(spins(us(10), 0, false, 0));
    assert!(!spins(us(0), 0, false, 0), "spinning turned off");
    assert!(!spins(us(10), 3, false, 0), "it just started flows");
    assert!(!spins(us(10), 0, true, 0), "callbacks are queued");
    assert!(!spins(us(10), 0, false, 1), "it watches a socket");
}

#[test]
fn a_queued_job_is_smaller_than_a_model() {
    // One step inline (with no room for a length or capacity), the
    // state and the waiter: eight words (the model keeps room for two
    // steps: fourteen).
    let word = std::mem::size_of::<usize>();
    assert_eq!(std::mem::size_of::<Job>(), 8 * word);
    assert_eq!(std::mem::size_of::<AsyncSteps>(), 14 * word);
}

/// A root of `n + 1` steps and a state value `k = n`: the first step
/// passes 1 and `k` (read from the state) on, each next one appends
/// its index to the first as a decimal digit. The result is `(1, n)`,
/// `(10, n)`, `(101, n)`, `(1012, n)`, ... only when the state came
/// along and every step ran once, in order (a lost step drops a
/// digit).
fn chain(n: u32) -> AsyncSteps {
    let mut root = AsyncSteps::new();
    root.state().set("k", n);
    root.add(|s, ()| {
        let k = *s.state().get::<u32>("k").expect("state kept");
        s.success((1u32, k))
    });
    for i in 0..n {
        root.add(move |s, (acc, k): (u32, u32)| s.success((acc * 10 + i, k)));
    }
    root
}

#[test]
fn jobs_of_every_size_start_with_all_their_steps_in_order() {
    let mut tool = AsyncTool::new().unwrap();
    // 1 step (inline), 2 (moved to the heap), 3 and 6 (kept on the
    // model's heap buffer).
    for (n, want) in [(0, 1), (1, 10), (2, 101), (5, 101_234)] {
        let c = Completion::new(Some(tool.core.inbox.clone()));
        Job::new(chain(n), Some(c.clone())).start(&mut tool);
        let p = Promise::<(u32, u32)>::new(c);
        assert_eq!(tool.block_on(p).unwrap(), (want, n), "{} steps", n + 1);
    }
}

#[test]
fn a_job_of_an_empty_model_ends_at_once() {
    let mut tool = AsyncTool::new().unwrap();
    let c = Completion::new(Some(tool.core.inbox.clone()));
    Job::new(AsyncSteps::new(), Some(c.clone())).start(&mut tool);
    tool.block_on(Promise::<()>::new(c)).unwrap();
    assert_eq!(tool.stats().flows, 0);
}

#[test]
fn a_job_dropped_before_it_started_answers_canceled() {
    let c = Completion::new(None);
    drop(Job::new(chain(1), Some(c.clone())));
    // Answered by the drop itself: no waiting.
    let mut p = Promise::<(u32, u32)>::new(c);
    let e = p.try_take().expect("answered on drop").unwrap_err();
    assert_eq!(e.code(), codes::CANCELED);
    assert_eq!(
        e.info(),
        Some("the runtime shut down before the flow started")
    );
}

/// A core with a loop for each of `tools`, which no thread runs (each
/// loop's worker is gone: its stealer stays, empty).
fn idle_core(tools: &[AsyncTool]) -> Core {
    let loops = tools
        .iter()
        .map(|t| LoopRef {
            inbox: t.core.inbox.clone(),
            queue: Injector::new(),
            placed: Injector::new(),
            stealer: Worker::new_fifo().stealer(),
            pin: PinStatus::Off,
            counters: Counters::default(),
            dead: AtomicBool::new(false),
        })
        .collect();
    Core {
        id: next_runtime_id(),
        loops,
        next_loop: AtomicUsize::new(0),
        closing: AtomicBool::new(false),
        next_wake: AtomicUsize::new(0),
        spin: Duration::ZERO,
        quiet: Default::default(),
    }
}

/// A job of one step, and the promise of its result.
fn job_and_promise(tool: &AsyncTool) -> (Job, Promise<()>) {
    let c = Completion::new(Some(tool.core.inbox.clone()));
    let mut root = AsyncSteps::new();
    root.add(|_, ()| Ok(()));
    (Job::new(root, Some(c.clone())), Promise::new(c))
}

#[test]
fn a_dead_loop_answers_its_own_queued_flows_and_leaves_its_peers_alone() {
    let tools = [AsyncTool::new().unwrap(), AsyncTool::new().unwrap()];
    let core = idle_core(&tools);
    let (j0, mut p0) = job_and_promise(&tools[0]);
    let (j1, mut p1) = job_and_promise(&tools[0]);
    let (j2, mut p2) = job_and_promise(&tools[1]);
    let (j3, mut p3) = job_and_promise(&tools[1]);
    core.loops[0].placed.push(j0);
    core.loops[0].queue.push(j1);
    core.loops[1].placed.push(j2);
    core.loops[1].queue.push(j3);
    core.loop_died(1);
    for p in [&mut p2, &mut p3] {
        let e = p.try_take().expect("answered").unwrap_err();
        assert_eq!(e.code(), codes::CANCELED);
    }
    assert!(p0.try_take().is_none() && p1.try_take().is_none());
    assert_eq!(
        (core.loops[0].placed.len(), core.loops[0].queue.len()),
        (1, 1)
    );
    // A flow placed on the dead loop afterwards is answered at once.
    let (j4, mut p4) = job_and_promise(&tools[1]);
    core.loops[1].placed.push(j4);
    assert!(core.closed_after_push(Some(1)));
    assert_eq!(
        p4.try_take().expect("answered").unwrap_err().code(),
        codes::CANCELED
    );
    assert!(!core.closed_after_push(Some(0)));
    assert_eq!(core.loops[0].placed.len(), 1);
}

#[test]
fn a_job_cancelled_before_it_started_never_runs() {
    let mut tool = AsyncTool::new().unwrap();
    let c = Completion::new(Some(tool.core.inbox.clone()));
    let mut root = AsyncSteps::new();
    root.add(|_, ()| panic!("a cancelled job ran"));
    let job = Job::new(root, Some(c.clone()));
    let p = Promise::<()>::new(c);
    p.cancel();
    job.start(&mut tool);
    let e = tool.block_on(p).unwrap_err();
    assert_eq!(e.code(), codes::CANCELED);
    assert_eq!(e.info(), Some("flow cancelled before it started"));
    assert_eq!(tool.stats().flows, 0);
}
