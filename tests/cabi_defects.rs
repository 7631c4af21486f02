//! Regression tests of the C interface (FTN12 2.7): each drives the
//! function tables as a C program would and states the documented result.
//! A test whose failure would crash or hang the test binary runs its body
//! in a child process (this binary again, with `CABI_CHILD=1`).

#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{
    futoin_asyncsteps_new, futoin_mutex_new, futoin_runtime_free, futoin_runtime_new,
    futoin_sync_free, FutoInRuntime,
};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::Duration;

/// `$f` of the table of handle `$t`, called with the given arguments.
macro_rules! call {
    ($t:expr, $f:ident ( $($a:expr),* $(,)? )) => {{
        let t: *mut FutoInAsyncSteps = $t;
        // SAFETY: `t` is a handle the runtime gave out (or a test's own
        // handle with a full table); the table lives as long.
        let f = unsafe { (*(*t).api).$f }.expect(stringify!($f));
        // SAFETY: an entry of that table, with arguments as the header
        // describes them.
        unsafe { f($($a),*) }
    }};
}

// ---------------------------------------------------------------------------
// Plumbing
// ---------------------------------------------------------------------------

/// Runs the test `name` of this binary in a child process; true if it
/// passed, with its output.
fn in_child(name: &str) -> (bool, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("CABI_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}\nstatus: {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status
    );
    (out.status.success(), text)
}

/// In the parent: runs this test in a child and checks it passed; true
/// there. In the child: false (run the body).
fn ran_in_child(name: &str) -> bool {
    if std::env::var_os("CABI_CHILD").is_some() {
        return false;
    }
    let (ok, text) = in_child(name);
    assert!(ok, "{name} failed in its child process:\n{text}");
    true
}

/// Where callbacks report: their `data` is a `*const Tx`.
type Tx = Mutex<Sender<String>>;

fn send(data: *mut c_void, s: impl Into<String>) {
    // SAFETY: every callback's data is the test's `Tx`, alive until the
    // test has read the reports it waits for (and then some).
    let tx = unsafe { &*(data as *const Tx) };
    let _ = tx.lock().unwrap().send(s.into());
}

/// A runtime of one loop and a root on it; callbacks report to `rx`.
struct Fixture {
    rt: *mut FutoInRuntime,
    root: *mut FutoInAsyncSteps,
    tx: Box<Tx>,
    rx: Receiver<String>,
}

impl Fixture {
    fn new() -> Self {
        let (tx, rx) = channel();
        let rt = futoin_runtime_new(1);
        // SAFETY: a live runtime.
        let root = unsafe { futoin_asyncsteps_new(rt) };
        Fixture {
            rt,
            root,
            tx: Box::new(Mutex::new(tx)),
            rx,
        }
    }

    /// The `data` every callback gets.
    fn d(&self) -> *mut c_void {
        &*self.tx as *const Tx as *mut c_void
    }

    fn execute(&self) {
        call!(
            self.root,
            execute(self.root, self.d(), Some(report_unhandled))
        );
    }

    /// The reports up to the first "ok" or "unhandled ..." (included), or
    /// up to a quiet `wait`.
    fn until_end(&self, wait: Duration) -> Vec<String> {
        let mut got = vec![];
        while let Ok(m) = self.rx.recv_timeout(wait) {
            let end = m == "ok" || m.starts_with("unhandled");
            got.push(m);
            if end {
                break;
            }
        }
        got
    }
}

static IDLE: u8 = 0;

unsafe extern "C" fn alloc_idle(_: *mut c_void) -> *mut c_void {
    &IDLE as *const u8 as *mut c_void
}

impl Fixture {
    /// Waits until the root's flow has ended (a root's stateVariable gives
    /// NULL while its flow runs).
    fn wait_idle(&self) {
        let name = c"cabi_defects.idle".as_ptr();
        for _ in 0..5_000 {
            let p = call!(
                self.root,
                state_variable(self.root, null_mut(), name, Some(alloc_idle), None)
            );
            if !p.is_null() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the root's flow did not end");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        call!(self.root, free(self.root));
        // SAFETY: the fixture's runtime, freed once, from the test thread.
        unsafe { futoin_runtime_free(self.rt) };
    }
}

const SECS: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(300);

unsafe extern "C" fn report_ok(_: *mut FutoInAsyncSteps, data: *mut c_void, _: *const FutoInArgs) {
    send(data, "ok");
}

unsafe extern "C" fn report_unhandled(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: the runtime gives a NUL-terminated code.
    let code = unsafe { CStr::from_ptr(code) }.to_string_lossy();
    send(data, format!("unhandled {code}"));
}

/// An error handler that reports `code: error_info` and recovers.
unsafe extern "C" fn report_error(
    bsi: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: the runtime gives a NUL-terminated code.
    let code = unsafe { CStr::from_ptr(code) }
        .to_string_lossy()
        .into_owned();
    let p = call!(
        bsi,
        state_variable(bsi, null_mut(), c"error_info".as_ptr(), None, None)
    );
    let info = if p.is_null() {
        "(null)".to_string()
    } else {
        // SAFETY: "error_info" gives a NUL-terminated string or NULL.
        unsafe { CStr::from_ptr(p.cast()) }
            .to_string_lossy()
            .into_owned()
    };
    send(data, format!("{code}: {info}"));
    call!(bsi, success(bsi, null_mut()));
}

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
unsafe extern "C" fn never_sched(data: *mut c_void) {
    send(data, "a scheduled callback ran");
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

/// A pointer handed to another thread.
#[derive(Clone, Copy)]
struct P(usize);

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
        let (root, d) = (fx.root, fx.d());
        call!(
            root,
            add(root, d, Some(calls_from_a_thread), Some(report_error))
        );
        call!(root, add(root, d, Some(report_ok), None));
        fx.execute();
        assert_eq!(
            fx.until_end(SECS),
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
    let (root, d) = (fx.root, fx.d());
    call!(
        root,
        add(root, d, Some(waits_then_thread_adds), Some(report_error))
    );
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    // Unreported, the step would wait for good.
    assert_eq!(
        fx.until_end(Duration::from_secs(2)),
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

// ---------------------------------------------------------------------------
// Values given to C: every byte of the payload is set
// ---------------------------------------------------------------------------

/// Leaves non-zero bytes where the next callbacks' frames will be.
unsafe extern "C" fn dirty_the_stack(
    _: *mut FutoInAsyncSteps,
    _: *mut c_void,
    _: *const FutoInArgs,
) {
    let mut junk = [0xA5u8; 16 * 1024];
    std::hint::black_box(&mut junk);
}

unsafe extern "C" fn rust_gives_signed(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe {
        futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, ()| s.success((true, -1i8, -2i16, -3i32)))
    };
}

unsafe extern "C" fn rust_gives_unsigned(
    bsi: *mut FutoInAsyncSteps,
    _: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the handle and args this callback got.
    unsafe {
        futoin_asyncsteps::cabi::wrap_step(bsi, args, |s, ()| {
            s.success((7u8, 0xFFFEu16, 1.0f32, 4_000_000_000u32))
        })
    };
}

/// Reports the four payloads as C reads the whole union.
unsafe extern "C" fn c_reads_u64(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    args: *const FutoInArgs,
) {
    // SAFETY: the args this callback got: four values, which C may read
    // whole.
    let raw = unsafe { (*args).args.each_ref().map(|a| a.v.u64) };
    let v: Vec<String> = raw.iter().map(|x| format!("{x:#x}")).collect();
    send(data, v.join(" "));
}

/// A primitive made from a Rust value has its 8 payload bytes set: the
/// value, zero-extended (C may read the union through `u64`).
#[test]
fn values_given_to_c_have_every_payload_byte_set() {
    let fx = Fixture::new();
    let (root, d) = (fx.root, fx.d());
    for give in [rust_gives_signed, rust_gives_unsigned] {
        call!(root, add(root, d, Some(dirty_the_stack), None));
        call!(root, add(root, d, Some(give), None));
        call!(root, add(root, d, Some(c_reads_u64), None));
    }
    call!(root, add(root, d, Some(report_ok), None));
    fx.execute();
    assert_eq!(
        fx.until_end(SECS),
        [
            "0x1 0xff 0xfffe 0xfffffffd",
            "0x7 0xfffe 0x3f800000 0xee6b2800",
            "ok"
        ]
    );
}
