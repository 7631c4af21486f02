//! Regression tests of the C interface (FTN12 2.7): each drives the
//! function tables as a C program would and states the documented result.
//! A test whose failure would crash or hang the test binary runs its body
//! in a child process (this binary again, with `CABI_CHILD=1`).

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{futoin_mutex_new, futoin_sync_free};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};
use std::sync::mpsc::channel;
use std::sync::Mutex;

#[macro_use]
#[path = "common/cabi_fixture.rs"]
mod fixture;
use fixture::*;

// ---------------------------------------------------------------------------
// Sync objects freed while a flow has their step queued
// ---------------------------------------------------------------------------

unsafe extern "C" fn in_section(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "section");
}

/// Allocations of the size a freed `FutoInSync` had, so that reading it
/// afterwards reads something else (each its own heap block).
#[allow(clippy::vec_box)]
fn reuse_freed_memory() -> Vec<Box<[usize; 3]>> {
    (0..64).map(|i| Box::new([i; 3])).collect()
}

/// `futoin_sync_free` after a root's addSync() queued the object, before
/// the flow runs: "flows still using one keep it alive".
#[test]
fn sync_freed_after_root_add_sync_stays_alive_for_the_flow() {
    if ran_in_child("sync_freed_after_root_add_sync_stays_alive_for_the_flow") {
        return;
    }
    let fx = Fixture::new();
    let mx = futoin_mutex_new(1, u32::MAX);
    call!(
        fx.root,
        add_sync(fx.root, mx, fx.d(), Some(in_section), None)
    );
    call!(fx.root, add(fx.root, fx.d(), Some(report_ok), None));
    // SAFETY: made by futoin_mutex_new, freed once.
    unsafe { futoin_sync_free(mx) };
    let junk = reuse_freed_memory();
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["section", "ok"]);
    drop(junk);
}

static MX: AtomicPtr<FutoInSync> = AtomicPtr::new(null_mut());

unsafe extern "C" fn queue_sync_then_free(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    let mx = MX.load(SeqCst);
    call!(bsi, add_sync(bsi, mx, data, Some(in_section), None));
    // SAFETY: made by futoin_mutex_new, freed once; the queued step uses it.
    unsafe { futoin_sync_free(mx) };
    std::mem::forget(reuse_freed_memory());
}

/// The same from a step: the sync object is freed in the callback that
/// queued its step.
#[test]
fn sync_freed_after_step_add_sync_stays_alive_for_the_flow() {
    if ran_in_child("sync_freed_after_step_add_sync_stays_alive_for_the_flow") {
        return;
    }
    let fx = Fixture::new();
    MX.store(futoin_mutex_new(1, u32::MAX), SeqCst);
    call!(
        fx.root,
        add(
            fx.root,
            fx.d(),
            Some(queue_sync_then_free),
            Some(report_error)
        )
    );
    call!(fx.root, add(fx.root, fx.d(), Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["section", "ok"]);
}

// ---------------------------------------------------------------------------
// BOOL values whose byte is not 0 or 1
// ---------------------------------------------------------------------------

static BOOL_T: FutoInType = FutoInType {
    flags: FTN_TYPE_BOOL,
    cleanup: None,
};

/// The byte `give_bool` writes into its BOOL.
static BOOL_BYTE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

unsafe extern "C" fn give_bool(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
    let mut out = FutoInArgs::EMPTY;
    out.args[0].type_ = &BOOL_T;
    // A C bool written through another member, as C code may do.
    out.args[0].v.u8 = BOOL_BYTE.load(SeqCst);
    call!(bsi, success(bsi, &mut out));
}

unsafe extern "C" fn rust_takes_bool(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe {
        futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, (v,): (bool,)| {
            // A valid Rust bool's byte is 0 or 1.
            let byte: u8 = std::hint::black_box(v).into();
            send(data, format!("rust {v} byte {byte}"));
            s.success((v,))
        })
    };
}

unsafe extern "C" fn c_takes_bool(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got: one BOOL.
    let byte = unsafe { (*args).args[0].v.u8 };
    send(data, format!("c byte {byte}"));
}

fn bool_through_steps(byte: u8) -> Vec<String> {
    BOOL_BYTE.store(byte, SeqCst);
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(give_bool), None));
    call!(
        fx.root,
        add(fx.root, d, Some(rust_takes_bool), Some(report_error))
    );
    call!(fx.root, add(fx.root, d, Some(give_bool), None));
    call!(fx.root, add(fx.root, d, Some(c_takes_bool), None));
    call!(fx.root, add(fx.root, d, Some(report_ok), None));
    fx.execute();
    fx.until_end(SECS)
}

/// A BOOL whose byte is 2 (or 255) is true, as in C: a Rust step gets
/// `true` (byte 1), and a C step gets byte 1 after the runtime.
#[test]
fn bool_byte_other_than_0_or_1_is_true() {
    for byte in [2, 255] {
        assert_eq!(
            bool_through_steps(byte),
            ["rust true byte 1", "c byte 1", "ok"],
            "byte {byte}"
        );
    }
    assert_eq!(
        bool_through_steps(1),
        ["rust true byte 1", "c byte 1", "ok"]
    );
    assert_eq!(
        bool_through_steps(0),
        ["rust false byte 0", "c byte 0", "ok"]
    );
}

// ---------------------------------------------------------------------------
// A Rust value in C args whose Drop panics
// ---------------------------------------------------------------------------

struct Bomb;
impl futoin_asyncsteps::ArgValue for Bomb {}
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("Bomb dropped");
    }
}

unsafe extern "C" fn rust_gives_bomb(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe { futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, ()| s.success((Bomb,))) };
}

unsafe extern "C" fn c_leaves_args(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got.
    let flags = unsafe { (*(*args).args[0].type_).flags };
    send(data, format!("C step got flags {flags:#04x}"));
}

/// The args left in a C step are reset when it returns: the Rust value's
/// cleanup drops it, and its panic must not reach C (which aborts).
#[test]
fn panicking_drop_of_a_rust_value_reset_after_a_c_step() {
    if ran_in_child("panicking_drop_of_a_rust_value_reset_after_a_c_step") {
        return;
    }
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(rust_gives_bomb), None));
    call!(fx.root, add(fx.root, d, Some(c_leaves_args), None));
    call!(fx.root, add(fx.root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["C step got flags 0x01", "ok"]);
}

/// A value C moved out of its args.
struct Moved(FutoInBinaryValue);
// SAFETY: the runtime's Rust values given to C may be cleaned up on any
// thread (their types are `Send`).
unsafe impl Send for Moved {}

/// Where a moved-out value goes (see `c_moves_value_out`).
static MOVED: Mutex<Option<Moved>> = Mutex::new(None);

unsafe extern "C" fn c_moves_value_out(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    let args = args as *mut FutoInArgs;
    // SAFETY: the args this callback got; moving a value out (copy it,
    // set the slot's type to NULL) is allowed by the header.
    let v = unsafe {
        let slot = &mut (*args).args[0];
        let v = std::ptr::read(slot);
        slot.type_ = std::ptr::null();
        v
    };
    *MOVED.lock().unwrap() = Some(Moved(v));
    send(data, "moved");
}

/// The same value moved out by C and cleaned up later by C itself (what
/// `futoin_reset_binval` does), on a thread of C's.
#[test]
fn panicking_drop_of_a_rust_value_reset_by_c() {
    if ran_in_child("panicking_drop_of_a_rust_value_reset_by_c") {
        return;
    }
    let fx = Fixture::new();
    let d = fx.d();
    call!(fx.root, add(fx.root, d, Some(rust_gives_bomb), None));
    call!(fx.root, add(fx.root, d, Some(c_moves_value_out), None));
    call!(fx.root, add(fx.root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(fx.until_end(SECS), ["moved", "ok"]);
    let Moved(mut v) = MOVED.lock().unwrap().take().expect("moved");
    // SAFETY: the runtime's own type for the value, its cleanup run once.
    let cleanup = unsafe { (*v.type_).cleanup }.expect("a Rust value has a cleanup");
    // SAFETY: as above.
    unsafe { cleanup(&mut v) };
    send(d, "cleaned up");
    assert_eq!(fx.until_end(QUIET), ["cleaned up"]);
}

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
    if ran_in_child("foreign_handle_through_every_table_is_a_no_op") {
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
