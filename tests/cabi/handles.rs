//! Handles and tables used the wrong way through the C interface: another
//! implementation's handle given to this runtime's tables, a root
//! parallel's handle after `execute()` took its model, one completion per
//! step, a cancel callback cancelling its step's timer, misuse through a
//! parallel's handle, this runtime's sync objects called directly, and a
//! stale `ForeignExternal`.
//!
//! Regression tests: each guards against a defect fixed in the C
//! interface. Each drives the function tables as a C program would and
//! states the documented result.

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use crate::fixture::*;
use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{futoin_mutex_new, futoin_sync_free};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};
use std::sync::mpsc::channel;
use std::sync::Mutex;

// ---------------------------------------------------------------------------
// Another implementation's handle given to this runtime's tables
// ---------------------------------------------------------------------------

/// Another implementation's handle: the spec's header plus fields of its
/// own ("extendable by implementation").
#[repr(C)]
struct ForeignHandle {
    hdr: FutoInAsyncSteps,
    own: [usize; 8],
}

/// The foreign handle's table: every entry NULL (none may be called).
// SAFETY: a table of `Option<fn>` entries, all None when zeroed.
static FOREIGN_API: FutoInAsyncStepsAPI = unsafe { std::mem::zeroed() };

unsafe extern "C" fn never_loop(_: *mut FutoInAsyncSteps, data: *mut c_void) {
    send(data, "a loop body ran");
}

unsafe extern "C" fn never_repeat(_: *mut FutoInAsyncSteps, data: *mut c_void, _: usize) {
    send(data, "a repeat body ran");
}

unsafe extern "C" fn never_cancel(_: *mut FutoInAsyncSteps, data: *mut c_void) {
    send(data, "a cancel callback ran");
}

unsafe extern "C" fn never_alloc(_: *mut c_void) -> *mut c_void {
    panic!("allocate() ran for a foreign handle");
}

/// Calls every entry of `table` with handle `h`; what each returned.
fn every_entry(table: &FutoInAsyncStepsAPI, h: *mut FutoInAsyncSteps, d: *mut c_void) -> String {
    let mut r = vec![];
    let mut out = FutoInArgs::EMPTY;
    let mut task = FutoInHandle::EMPTY;
    // SAFETY: entries of one of this runtime's tables, with arguments as
    // the header describes them; `h` is readable up to its `api`.
    unsafe {
        table.add.unwrap()(h, d, Some(report_ok), Some(report_error));
        r.push(format!(
            "parallel {:?}",
            table.parallel.unwrap()(h, d, None)
        ));
        let sv = table.state_variable.unwrap()(h, d, c"v".as_ptr(), Some(never_alloc), None);
        r.push(format!("stateVariable {sv:?}"));
        r.push(format!("stack {:?}", table.stack.unwrap()(h, 8, None)));
        table.success.unwrap()(h, &mut out);
        table.handle_error.unwrap()(h, c"NotFound".as_ptr(), c"x".as_ptr());
        table.set_timeout.unwrap()(h, 1);
        table.set_cancel.unwrap()(h, d, Some(never_cancel));
        table.wait_external.unwrap()(h);
        table.loop_.unwrap()(h, d, Some(never_loop), std::ptr::null());
        table.repeat.unwrap()(h, d, 3, Some(never_repeat), std::ptr::null());
        table.break_loop.unwrap()(h, std::ptr::null());
        table.continue_loop.unwrap()(h, std::ptr::null());
        table.execute.unwrap()(h, d, Some(report_unhandled));
        table.cancel.unwrap()(h);
        table.add_sync.unwrap()(h, std::ptr::null_mut(), d, Some(report_ok), None);
        r.push(format!("rootId {}", table.root_id.unwrap()(h)));
        r.push(format!("isValid {}", table.is_valid.unwrap()(h)));
        r.push(format!("newInstance {:?}", table.new_instance.unwrap()(h)));
        table.free.unwrap()(h);
        let i = table.sched_immediate.unwrap()(h, d, Some(never_sched));
        let t = table.sched_deferred.unwrap()(h, 1, d, Some(never_sched));
        r.push(format!(
            "sched {} {}",
            i == FutoInHandle::EMPTY,
            t == FutoInHandle::EMPTY
        ));
        table.sched_cancel.unwrap()(h, &mut task);
        r.push(format!(
            "sched_is_valid {}",
            table.sched_is_valid.unwrap()(h, &mut task)
        ));
        r.push(format!(
            "is_same_thread {}",
            table.is_same_thread.unwrap()(h)
        ));
    }
    r.join(", ")
}

static TABLE: AtomicPtr<FutoInAsyncStepsAPI> = AtomicPtr::new(null_mut());

unsafe extern "C" fn grab_table(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    // SAFETY: the handle this callback got, with its table.
    TABLE.store(unsafe { (*bsi).api } as *mut _, SeqCst);
    send(data, "ok");
}

/// A foreign handle given to the step table, the root table and a root
/// parallel's table: every entry is a no-op (NULL, 0, an empty task
/// handle), never a read of the foreign fields, a hang or a crash, and
/// the foreign handle is left as it was.
#[test]
fn foreign_handle_through_every_table_is_a_no_op() {
    if ran_in_child("handles::foreign_handle_through_every_table_is_a_no_op") {
        return;
    }
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(grab_table), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["ok"]);
    let par = call!(fx.root, parallel(fx.root, d, None));
    let tables = [
        ("step", TABLE.load(SeqCst) as *const FutoInAsyncStepsAPI),
        // SAFETY: the fixture's root and its parallel's handle.
        ("root", unsafe { (*fx.root).api }),
        // SAFETY: as above.
        ("root parallel", unsafe { (*par).api }),
    ];
    let expected = "parallel 0x0, stateVariable 0x0, stack 0x0, rootId 0, isValid 0, \
                    newInstance 0x0, sched true true, sched_is_valid 0, is_same_thread 0";
    for (name, table) in tables {
        let foreign = Box::into_raw(Box::new(ForeignHandle {
            hdr: FutoInAsyncSteps { api: &FOREIGN_API },
            own: [usize::MAX; 8],
        }));
        let (t, f, dd) = (P(table as usize), P(foreign as usize), P(d as usize));
        let (done_tx, done_rx) = channel();
        // On a thread of its own, so that a hang is reported.
        std::thread::spawn(move || {
            // SAFETY: one of the runtime's tables (they are static).
            let table = unsafe { &*(t.0 as *const FutoInAsyncStepsAPI) };
            let r = every_entry(table, f.0 as *mut FutoInAsyncSteps, dd.0 as *mut c_void);
            let _ = done_tx.send(r);
        });
        let got = done_rx
            .recv_timeout(SECS)
            .unwrap_or_else(|_| format!("{name}: hung"));
        assert_eq!(got, expected, "{name} table");
        // SAFETY: made above; no entry kept it.
        let foreign = unsafe { Box::from_raw(foreign) };
        assert!(std::ptr::eq(foreign.hdr.api, &FOREIGN_API), "{name} table");
        assert_eq!(foreign.own, [usize::MAX; 8], "{name} table");
    }
    // No callback given to those calls ran.
    assert_eq!(fx.until_end(QUIET), Vec::<String>::new());
}

// ---------------------------------------------------------------------------
// A root parallel's handle after execute() took its model
// ---------------------------------------------------------------------------

unsafe extern "C" fn branch_a(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "A");
}

unsafe extern "C" fn branch_b(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "B");
}

unsafe extern "C" fn branch_c(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "C");
}

/// The first run's parallel handle, used in the second run's model: no
/// branch goes to the second run's parallel (at the same place), and the
/// second run fails; a third run is clean again.
#[test]
fn root_parallel_handle_of_an_earlier_run_adds_nothing_and_fails_the_next_run() {
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    let p1 = call!(root, parallel(root, null_mut(), None));
    call!(p1, add(p1, d, Some(branch_a), None));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["A", "ok"]);
    fx.wait_idle();

    let p2 = call!(root, parallel(root, null_mut(), None));
    call!(p2, add(p2, d, Some(branch_c), None));
    call!(p1, add(p1, d, Some(branch_b), None));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["C", "unhandled InternalError"]);
    fx.wait_idle();

    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["ok"]);
}

static PAR: AtomicPtr<FutoInAsyncSteps> = AtomicPtr::new(null_mut());

unsafe extern "C" fn branch_adds_to_its_parallel(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    send(data, "A");
    let p = PAR.load(SeqCst);
    call!(p, add(p, data, Some(branch_b), None));
}

/// The running flow's parallel handle, used while it runs: the flow is
/// not changed, and the root's next run fails.
#[test]
fn root_parallel_handle_used_while_its_flow_runs_fails_the_next_run() {
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    let p = call!(root, parallel(root, null_mut(), None));
    PAR.store(p, SeqCst);
    call!(p, add(p, d, Some(branch_adds_to_its_parallel), None));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["A", "ok"]);
    fx.wait_idle();

    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["unhandled InternalError"]);
}

/// A root run many times with a parallel each time keeps a bounded number
/// of parallel handles: after `QUARANTINE` stale ones, the oldest is
/// reused (until then each stale one is detected).
#[test]
fn root_parallel_handles_are_reused_after_the_quarantine() {
    use futoin_asyncsteps::cabi::QUARANTINE;
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    let mut handles = vec![];
    for _ in 0..QUARANTINE + 2 {
        let p = call!(root, parallel(root, null_mut(), None));
        handles.push(p as usize);
        call!(p, add(p, d, Some(branch_a), None));
        call!(root, add(root, d, Some(report_ok), None));
        fx.execute();
        assert_eq!(fx.until_end(SECS), ["A", "ok"]);
        fx.wait_idle();
    }
    let first: std::collections::HashSet<usize> = handles[..=QUARANTINE].iter().copied().collect();
    assert_eq!(first.len(), QUARANTINE + 1);
    assert_eq!(handles[QUARANTINE + 1], handles[0]);
}

// ---------------------------------------------------------------------------
// One completion per step
// ---------------------------------------------------------------------------

unsafe extern "C" fn success_then_error(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const FutoInArgs,
) {
    call!(bsi, success(bsi, null_mut()));
    call!(
        bsi,
        handle_error(bsi, c"MyError".as_ptr(), c"late".as_ptr())
    );
}

/// handle_error() after success() in one callback fails the step with
/// `InternalError`, as `error()` after `success()` does in Rust: the
/// success used to be dropped silently for `MyError`.
#[test]
fn handle_error_after_success_is_a_misuse() {
    let fx = Fixture::new();
    assert_eq!(
        fx.run_step(Some(success_then_error), SECS),
        [
            "InternalError: error() after success(): a step completes once \
             (asked for MyError: late)",
            "ok"
        ]
    );
}

// ---------------------------------------------------------------------------
// A cancel callback cancels the step's own timer
// ---------------------------------------------------------------------------

/// The timer handle the step set, for its cancel callback.
struct Timer(FutoInHandle);

// SAFETY: the handle is plain data the loop gave out; only that loop's
// thread uses it (the step and its cancel callback).

unsafe impl Send for Timer {}

static TIMER: Mutex<Timer> = Mutex::new(Timer(FutoInHandle::EMPTY));

unsafe extern "C" fn timer_fired(data: *mut c_void) {
    send(data, "timer fired");
}

unsafe extern "C" fn cancel_the_timer(bsi: *mut FutoInAsyncSteps, data: *mut c_void) {
    let mut h = TIMER.lock().unwrap().0;
    let before = call!(bsi, sched_is_valid(bsi, &mut h));
    call!(bsi, sched_cancel(bsi, &mut h));
    let after = call!(bsi, sched_is_valid(bsi, &mut h));
    // A timer set here is a real one too.
    let mut late = call!(bsi, sched_deferred(bsi, 3_600_000, data, Some(timer_fired)));
    let late_valid = call!(bsi, sched_is_valid(bsi, &mut late));
    call!(bsi, sched_cancel(bsi, &mut late));
    send(
        data,
        format!("cancel: timer valid {before} -> {after}; one set here {late_valid}"),
    );
}

unsafe extern "C" fn timed_step(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    TIMER.lock().unwrap().0 = call!(bsi, sched_deferred(bsi, 3_600_000, data, Some(timer_fired)));
    call!(bsi, set_cancel(bsi, data, Some(cancel_the_timer)));
    call!(bsi, set_timeout(bsi, 10));
}

/// The standard pattern: a step sets a timer for its external activity
/// and its cancel callback cancels it. The scheduling calls act on the
/// loop there as in the step's callback (they used to be no-ops, so the
/// timer fired later, with data the step had already given up).
#[test]
fn a_cancel_callback_cancels_the_steps_timer() {
    let fx = Fixture::new();
    let got = fx.run_step(Some(timed_step), SECS);
    assert_eq!(
        got,
        [
            "cancel: timer valid 1 -> 0; one set here 1",
            "Timeout: (null)",
            "ok"
        ]
    );
}

// ---------------------------------------------------------------------------
// Misuse through a parallel's handle fails the step that made it
// ---------------------------------------------------------------------------

unsafe extern "C" fn par_add_null(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let par = call!(bsi, parallel(bsi, data, None));
    assert!(!par.is_null());
    call!(par, add(par, data, None, None));
}

unsafe extern "C" fn par_success(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let par = call!(bsi, parallel(bsi, data, None));
    call!(par, success(par, null_mut()));
}

unsafe extern "C" fn par_execute(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let par = call!(bsi, parallel(bsi, data, None));
    call!(par, execute(par, null_mut(), None));
}

/// Each used to be dropped with the parallel's handle: the flow went on
/// as if nothing were wrong.
#[test]
fn misuse_through_a_parallels_handle_fails_the_step() {
    let cases: [(ExecuteCallback, &str); 3] = [
        (
            Some(par_add_null),
            "InternalError: add(): the execute callback is NULL",
        ),
        (
            Some(par_success),
            "InternalError: success(): a parallel's handle only takes add()",
        ),
        (Some(par_execute), "InternalError: execute(): only a root"),
    ];
    for (step, want) in cases {
        let fx = Fixture::new();
        let got = fx.run_step(step, SECS);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with(want), "{got:?}");
        assert_eq!(got[1], "ok");
    }
}

// ---------------------------------------------------------------------------
// This runtime's sync objects are not called directly
// ---------------------------------------------------------------------------

static MX: AtomicPtr<FutoInSync> = AtomicPtr::new(null_mut());

unsafe extern "C" fn call_lock(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
    let mx = MX.load(SeqCst);
    // SAFETY: a live mutex of ours and its table.
    unsafe { ((*(*mx).api).lock.unwrap())(bsi, mx) };
}

unsafe extern "C" fn call_unlock(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
    let mx = MX.load(SeqCst);
    // SAFETY: a live mutex of ours and its table.
    unsafe { ((*(*mx).api).unlock.unwrap())(bsi, mx) };
}

/// Both give `NotImplemented`, as the interface's docs say (`unlock` was
/// a silent no-op).
#[test]
fn lock_and_unlock_called_directly_are_not_implemented() {
    MX.store(futoin_mutex_new(1, u32::MAX), SeqCst);
    let want = "NotImplemented: this runtime's sync objects are used through addSync(), \
                not lock()/unlock()";
    for step in [call_lock, call_unlock] {
        let fx = Fixture::new();
        let got = fx.run_step(Some(step), SECS);
        assert_eq!(got, [want, "ok"]);
    }
    // SAFETY: the mutex made above; no flow uses it any more.
    unsafe { futoin_sync_free(MX.load(SeqCst)) };
}

// ---------------------------------------------------------------------------
// A stale ForeignExternal reaches no other step
// ---------------------------------------------------------------------------

/// The handle address of flow A's step (recycled later), for flow B's body.
static STALE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One iteration of flow B: the iteration that runs on the recycled handle
/// waits, and reports that it does.
unsafe extern "C" fn b_iteration(bsi: *mut FutoInAsyncSteps, data: *mut c_void, i: usize) {
    // Only the first time: later iterations get that memory again.
    if bsi as usize == STALE.load(SeqCst) && STALE.swap(0, SeqCst) != 0 {
        call!(bsi, wait_external(bsi));
        send(data, format!("iteration {i} waits on the recycled handle"));
    }
}

unsafe extern "C" fn b_loop(bsi: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    call!(bsi, repeat(bsi, data, 2000, Some(b_iteration), null_mut()));
}

/// A step waits and times out; its event comes late, through the
/// `ForeignExternal` it gave out, while the handle memory serves a waiting
/// step of another flow (handles are recycled after a quarantine of 256).
/// The late completion is refused; it used to complete the other step.
#[test]
fn a_late_completion_through_a_stale_foreign_external_is_refused() {
    use futoin_asyncsteps::cabi::{futoin_asyncsteps_new, ForeignRoot};
    let fx = Fixture::new();
    // SAFETY: a root made on the fixture's live runtime, owned here.
    let mut a = unsafe { ForeignRoot::from_raw(futoin_asyncsteps_new(fx.rt)) }.unwrap();
    let (htx, hrx) = std::sync::mpsc::channel();
    a.add(move |s, ()| {
        let h = s.wait_external();
        s.set_timeout(std::time::Duration::from_millis(10));
        htx.send((h, s.as_ptr() as usize)).unwrap();
        Ok(())
    });
    let (etx, erx) = std::sync::mpsc::channel();
    let flow_a = a.execute(move |e| etx.send(e.code().to_owned()).unwrap());
    let (ext, ptr) = hrx.recv_timeout(SECS).unwrap();
    assert_eq!(erx.recv_timeout(SECS).unwrap(), "Timeout");
    assert!(!ext.is_valid());
    STALE.store(ptr, SeqCst);
    // Flow B: a loop whose iterations take handles until one gets A's,
    // whose step then waits.
    let (root, d) = (fx.root, fx.d());
    call!(root, add(root, d, Some(b_loop), Some(report_error)));
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    let waiting = fx.rx.recv_timeout(SECS).unwrap();
    assert!(
        waiting.ends_with("waits on the recycled handle"),
        "{waiting}"
    );
    // A's late event is refused, and B's step still waits.
    assert!(!ext.is_valid(), "the stale handle is not valid again");
    assert_eq!(ext.success((7i32,)).unwrap_err().code(), "InternalError");
    assert_eq!(
        ext.error("Boom", "late").unwrap_err().code(),
        "InternalError"
    );
    let b = ptr as *mut FutoInAsyncSteps;
    assert_eq!(call!(b, is_valid(b)), 1);
    // B's own completion (from this thread, as allowed for a waiting
    // step) ends its loop's iteration; the flow goes on to its end.
    call!(b, success(b, null_mut()));
    assert_eq!(fx.until_end(SECS), ["ok"]);
    drop(flow_a);
}
