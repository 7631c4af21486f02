//! Regression tests: programs `call_sequences_never_crash_hang_or_leak`
//! shrunk to, each a bug it found.

use super::*;

fn prog_of(root: Vec<RootOp>) -> Prog {
    Prog {
        threads: 1,
        mutex: (1, u32::MAX),
        root,
        running: vec![],
        free_in_unhandled: false,
        reexecute_in_unhandled: false,
        rerun: None,
        execute_after_free: false,
    }
}

/// Shrunk by `call_sequences_never_crash_hang_or_leak` to this one call:
/// stateVariable() on a root ran the caller's allocate() with the root's
/// lock held, so an allocate() that calls the same root again (here
/// stateVariable() of the same or another name, isValid(), rootId(),
/// add()) deadlocked. Fixed in `cabi/root.rs`: a new variable is made with
/// the lock released (and dropped, with its cleanup, if the name was made
/// meanwhile or the root started running).
#[test]
fn root_state_variable_allocate_may_call_the_root() {
    for (name, cleanup) in [
        (Name::A, false),
        (Name::A, true),
        (Name::B, false),
        (Name::B, true),
    ] {
        let p = prog_of(vec![RootOp::StateVar {
            name,
            alloc: true,
            cleanup,
            reenter: true,
        }]);
        let r = bounded(move || run_prog(&p))
            .unwrap_or_else(|e| panic!("{name:?}, cleanup {cleanup}: {e}"));
        assert_eq!(r.end, "ok");
        assert_eq!(r.cov.get("re-entrant allocate"), Some(&1));
        // The step allocate() added ran.
        assert_eq!(r.binds, 1);
    }
}

/// The same from a step: allocate() calls its step's handle again.
#[test]
fn step_state_variable_allocate_may_call_the_step() {
    let op = |name, cleanup| Op::StateVar {
        name,
        alloc: true,
        cleanup,
        reenter: true,
    };
    let node = Node {
        ops: vec![op(Name::A, true), op(Name::B, true), op(Name::A, false)],
        end: End::Return,
    };
    let p = prog_of(vec![RootOp::Add(Sub {
        node,
        eh: None,
        null_cb: false,
    })]);
    let r = bounded(move || run_prog(&p)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.end, "ok");
    assert_eq!(r.cov.get("re-entrant allocate"), Some(&2));
}

/// Found by `call_sequences_never_crash_hang_or_leak` in a release build
/// (a double free reported by malloc), pinned down with AddressSanitizer:
/// execute() went on using the root after it had started the flow, but the
/// flow may end, and C free the root (from its unhandled-error callback,
/// as the header allows, or from a step), before execute() returns: a use
/// after free. Fixed in `cabi/root.rs`: execute() holds a reference of its
/// own. It is a race, made likely here: each flow fails at once and frees
/// its root; its loop sleeps until execute() wakes it, and two spinning
/// threads keep the cores busy, so the woken loop often preempts the
/// thread in execute(). With AddressSanitizer
/// (`RUSTFLAGS=-Zsanitizer=address cargo +nightly test --release --target
/// x86_64-unknown-linux-gnu --test cabi_fuzz`) the unfixed code fails it
/// on most runs; without, a use after free is silent or a crash.
#[test]
fn root_freed_by_its_unhandled_callback_while_execute_returns() {
    const FLOWS: usize = 3_000;
    unsafe extern "C" fn free_root(
        bsi: *mut FutoInAsyncSteps,
        data: *mut c_void,
        _: *const c_char,
    ) {
        call!(bsi, free(bsi));
        // SAFETY: the test's sender, alive until every flow reported.
        let _ = lock(unsafe { &*(data as *const Mutex<Sender<()>>) }).send(());
    }
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let spinners: Vec<JoinHandle<()>> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let data = &tx as *const Mutex<Sender<()>> as *mut c_void;
    let rt = new_runtime(1);
    for i in 0..FLOWS {
        // SAFETY: a live runtime.
        let r = unsafe { futoin_asyncsteps_new(rt) };
        // A NULL execute callback: the flow fails at once.
        call!(r, add(r, null_mut(), None, None));
        call!(r, execute(r, data, Some(free_root)));
        // `r` may be gone already: not touched again.
        if rx.recv_timeout(hang()).is_err() {
            stop.store(true, SeqCst);
            panic!("flow {i} did not end");
        }
    }
    stop.store(true, SeqCst);
    for t in spinners {
        t.join().expect("a spinning thread");
    }
    free_runtime(rt);
}
