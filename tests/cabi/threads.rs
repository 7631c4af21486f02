//! Calls made from the wrong place through the C interface: step calls
//! from another thread, a `stateVariable()` whose allocate calls the
//! step's handle again, a step call from a cleanup run inside a step
//! call, and scheduling calls with an empty handle from another thread.
//!
//! Regression tests: each guards against a defect fixed in the C
//! interface. Each drives the function tables as a C program would and
//! states the documented result.

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use crate::fixture::*;
use futoin_asyncsteps::cabi::types::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Step calls from another thread
// ---------------------------------------------------------------------------

/// The error a step gets for the call `what` made from another thread.
fn off_loop_error(what: &str) -> String {
    format!(
        "InternalError: {what} called from a thread other than the step's loop: \
         only success() and handle_error() of a waiting step may be"
    )
}

/// What `calls_from_a_thread` does from its thread.
static KIND: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

unsafe extern "C" fn never_step(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "a step added from another thread ran");
}

/// From a thread it joins before returning, a step calls its handle (or
/// its parallel's) as `KIND` says; it waits only in case 7.
unsafe extern "C" fn calls_from_a_thread(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let kind = KIND.load(SeqCst);
    if kind == 7 {
        call!(bsi, wait_external(bsi));
    }
    let h = if kind == 6 {
        call!(bsi, parallel(bsi, null_mut(), None))
    } else {
        bsi
    };
    let (h, d) = (P(h as usize), P(data as usize));
    std::thread::spawn(move || {
        let (h, d) = (h.0 as *mut FutoInAsyncSteps, d.0 as *mut c_void);
        match kind {
            0 => {
                call!(h, add(h, d, Some(never_step), None));
                call!(h, handle_error(h, c"NotFound".as_ptr(), c"lost?".as_ptr()));
            }
            1 => call!(h, handle_error(h, c"NotFound".as_ptr(), c"lost?".as_ptr())),
            2 => call!(h, success(h, null_mut())),
            3 => {
                call!(h, sched_immediate(h, d, Some(never_sched)));
            }
            4 => {
                call!(h, stack(h, 8, None));
            }
            5 => call!(h, set_timeout(h, 1)),
            _ => call!(h, add(h, d, Some(never_step), None)),
        }
    })
    .join()
    .unwrap();
}

/// A call on a step made from another thread while its callback runs
/// (all but success()/handle_error() of a waiting step): the step fails
/// with an InternalError naming the (first) call, instead of the call
/// being dropped.
#[test]
fn step_calls_from_another_thread_fail_the_step() {
    let cases = [
        (0, "add()"),
        (1, "handle_error()"),
        (2, "success()"),
        (3, "sched_immediate()"),
        (4, "stack()"),
        (5, "setTimeout()"),
        (6, "add()"),
        (7, "add()"),
    ];
    for (kind, what) in cases {
        KIND.store(kind, SeqCst);
        let fx = Fixture::new();
        assert_eq!(
            fx.run_step(Some(calls_from_a_thread), SECS),
            [off_loop_error(what), "ok".into()],
            "case {kind}"
        );
    }
}

unsafe extern "C" fn waits_then_thread_adds(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    call!(bsi, wait_external(bsi));
    let (h, d) = (P(bsi as usize), P(data as usize));
    // Not joined: the call comes while the step waits.
    std::thread::spawn(move || {
        let (h, d) = (h.0 as *mut FutoInAsyncSteps, d.0 as *mut c_void);
        std::thread::sleep(Duration::from_millis(20));
        call!(h, add(h, d, Some(never_step), None));
    });
}

/// A call other than success()/handle_error() on a waiting step, from
/// another thread: the step fails at once (it waited for good).
#[test]
fn off_thread_call_on_a_waiting_step_fails_it() {
    let fx = Fixture::new();
    // Unreported, the step would wait for good.
    assert_eq!(
        fx.run_step(Some(waits_then_thread_adds), Duration::from_secs(2)),
        [off_loop_error("add()"), "ok".into()]
    );
}

/// Whether `waits_then_thread_completes` fails its step.
static COMPLETION_FAILS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

static INT32_T: FutoInType = FutoInType {
    flags: FTN_TYPE_INT32,
    cleanup: None,
};

unsafe extern "C" fn waits_then_thread_completes(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const FutoInArgs,
) {
    call!(bsi, wait_external(bsi));
    let fail = COMPLETION_FAILS.load(SeqCst);
    let h = P(bsi as usize);
    std::thread::spawn(move || {
        let h = h.0 as *mut FutoInAsyncSteps;
        std::thread::sleep(Duration::from_millis(20));
        if fail {
            call!(h, handle_error(h, c"NotFound".as_ptr(), c"gone".as_ptr()));
        } else {
            let mut out = FutoInArgs::EMPTY;
            out.args[0].type_ = &INT32_T;
            out.args[0].v.i32 = 7;
            call!(h, success(h, &mut out));
        }
    });
}

unsafe extern "C" fn report_int(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got: one INT32.
    let v = unsafe { (*args).args[0].v.i32 };
    send(data, format!("got {v}"));
}

/// success() and handle_error() of a waiting step from another thread
/// complete it, as before.
#[test]
fn off_thread_completion_of_a_waiting_step_still_works() {
    for (fail, expected) in [(false, ["got 7", "ok"]), (true, ["NotFound: gone", "ok"])] {
        COMPLETION_FAILS.store(fail, SeqCst);
        let fx = Fixture::new();
        let (root, d) = (fx.root, fx.d());
        call!(
            root,
            add(
                root,
                d,
                Some(waits_then_thread_completes),
                Some(report_error)
            )
        );
        if !fail {
            call!(root, add(root, d, Some(report_int), None));
        }
        call!(root, add(root, d, Some(report_ok), None));
        fx.execute();
        assert_eq!(fx.until_end(SECS), expected, "fail {fail}");
    }
}

// ---------------------------------------------------------------------------
// stateVariable() whose allocate calls the step's handle again
// ---------------------------------------------------------------------------

/// The handle `alloc_outer` calls.
static VAR_STEP: AtomicPtr<FutoInAsyncSteps> = AtomicPtr::new(null_mut());

unsafe extern "C" fn alloc_inner(_: *mut c_void) -> *mut c_void {
    2 as *mut c_void
}

/// An allocate that asks the step for the same variable, with another
/// allocate: that inner call makes the variable first.
unsafe extern "C" fn alloc_outer(data: *mut c_void) -> *mut c_void {
    let h = VAR_STEP.load(SeqCst);
    let inner = call!(
        h,
        state_variable(h, data, c"v".as_ptr(), Some(alloc_inner), Some(var_cleanup))
    );
    send(data, format!("inner got {}", inner as usize));
    1 as *mut c_void
}

unsafe extern "C" fn var_cleanup(data: *mut c_void, v: *mut c_void) {
    send(data, format!("cleanup {}", v as usize));
}

unsafe extern "C" fn step_with_var(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    VAR_STEP.store(bsi, SeqCst);
    let outer = call!(
        bsi,
        state_variable(
            bsi,
            data,
            c"v".as_ptr(),
            Some(alloc_outer),
            Some(var_cleanup)
        )
    );
    send(data, format!("outer got {}", outer as usize));
    let again = call!(bsi, state_variable(bsi, data, c"v".as_ptr(), None, None));
    send(data, format!("again {}", again as usize));
}

/// allocate() runs with the step not borrowed, and may call the step's
/// handle: here it makes the same variable through it. The value made
/// first stays (every call returns it, its cleanup runs when the flow
/// ends); the outer one is cleaned up at once.
#[test]
fn state_variable_allocate_may_make_the_same_variable_through_the_step() {
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    call!(root, add(root, d, Some(step_with_var), None));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    let mut got = fx.until_end(SECS);
    got.extend(fx.rx.recv_timeout(SECS));
    assert_eq!(
        got,
        [
            "inner got 2",
            "cleanup 1",
            "outer got 2",
            "again 2",
            "ok",
            "cleanup 2"
        ]
    );
}

/// The step whose handle `calling_cleanup` calls.
static CLEANUP_STEP: AtomicPtr<FutoInAsyncSteps> = AtomicPtr::new(null_mut());

/// A custom object's cleanup that calls a step's handle.
unsafe extern "C" fn calling_cleanup(v: *mut FutoInBinaryValue) {
    let h = CLEANUP_STEP.load(SeqCst);
    // SAFETY: the value this cleanup is for; its data is the test's Tx.
    let d = unsafe { (*v).custom_data };
    let m = call!(h, stack(h, 8, None));
    send(d, format!("stack() in the cleanup: NULL {}", m.is_null()));
}

static CALLING_T: FutoInType = FutoInType {
    flags: FTN_TYPE_CUSTOM_OBJECT,
    cleanup: Some(calling_cleanup),
};

/// success() twice, the second time with a value the runtime drops in
/// that call: its cleanup calls the step's handle while the runtime holds
/// the step.
unsafe extern "C" fn success_twice_with_calling_value(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    CLEANUP_STEP.store(bsi, SeqCst);
    call!(bsi, success(bsi, null_mut()));
    let mut out = FutoInArgs::EMPTY;
    out.args[0].type_ = &CALLING_T;
    out.args[0].custom_data = data;
    call!(bsi, success(bsi, &mut out));
}

/// A step call made from code another step call runs (a value's
/// cleanup) is refused: it would be a second `&mut Step`.
#[test]
fn step_call_from_a_cleanup_run_inside_a_step_call_is_refused() {
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    call!(
        root,
        add(
            root,
            d,
            Some(success_twice_with_calling_value),
            Some(report_error)
        )
    );
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(
        fx.until_end(SECS),
        [
            "stack() in the cleanup: NULL true",
            "InternalError: success() called twice in the same step",
            "ok"
        ]
    );
}

unsafe extern "C" fn sched_completes(data: *mut c_void) {
    let h = data as *mut FutoInAsyncSteps;
    call!(h, success(h, null_mut()));
}

/// Waits, and has another thread schedule the completion on the step's
/// loop, then cancel the (empty) handle it got there.
unsafe extern "C" fn waits_then_thread_schedules(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    call!(bsi, wait_external(bsi));
    let (h, d) = (P(bsi as usize), P(data as usize));
    std::thread::spawn(move || {
        let h = h.0 as *mut FutoInAsyncSteps;
        // The completion comes 50 ms later: this report goes first.
        let mut t = call!(h, sched_deferred(h, 50, h.cast(), Some(sched_completes)));
        let valid = call!(h, sched_is_valid(h, &mut t));
        call!(h, sched_cancel(h, &mut t));
        send(d.0 as *mut c_void, format!("sched_is_valid {valid}"));
    });
}

/// Off the loop, a waiting step's scheduling calls schedule and give an
/// empty handle, for which `sched_cancel` does nothing (header, index
/// 20..23): the step is not failed for it.
#[test]
fn sched_cancel_of_an_empty_handle_from_another_thread_is_a_no_op() {
    let fx = Fixture::new();
    assert_eq!(
        fx.run_step(Some(waits_then_thread_schedules), SECS),
        ["sched_is_valid 0", "ok"]
    );
}
