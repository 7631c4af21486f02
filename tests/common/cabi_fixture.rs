//! What the C-interface regression tests share (`tests/cabi/`: handles,
//! values, sync_objects, threads): calling a handle's table, running a
//! test in a child process, a runtime with a root whose callbacks report
//! to a channel, and the report callbacks.

#![allow(dead_code)] // each including module uses a part of it

use futoin_asyncsteps::cabi::types::*;
use futoin_asyncsteps::cabi::{
    futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new, FutoInRuntime,
};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
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
pub fn in_child(name: &str) -> (bool, String) {
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
    // `--exact` with a name that is not the test's full path in this binary
    // (`module::test`) runs no test and succeeds: that is no pass.
    let ran_it = String::from_utf8_lossy(&out.stdout).contains("test result: ok. 1 passed");
    (out.status.success() && ran_it, text)
}

/// In the parent: runs this test in a child and checks it passed; true
/// there. In the child: false (run the body).
pub fn ran_in_child(name: &str) -> bool {
    if std::env::var_os("CABI_CHILD").is_some() {
        return false;
    }
    let (ok, text) = in_child(name);
    assert!(ok, "{name} failed in its child process:\n{text}");
    true
}

/// Where callbacks report: their `data` is a `*const Tx`.
pub type Tx = Mutex<Sender<String>>;

pub fn send(data: *mut c_void, s: impl Into<String>) {
    // SAFETY: every callback's data is the test's `Tx`, alive until the
    // test has read the reports it waits for (and then some).
    let tx = unsafe { &*(data as *const Tx) };
    let _ = tx.lock().unwrap().send(s.into());
}

/// A runtime of one loop and a root on it; callbacks report to `rx`.
pub struct Fixture {
    pub rt: *mut FutoInRuntime,
    pub root: *mut FutoInAsyncSteps,
    pub tx: Box<Tx>,
    pub rx: Receiver<String>,
}

impl Fixture {
    pub fn new() -> Self {
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
    pub fn d(&self) -> *mut c_void {
        &*self.tx as *const Tx as *mut c_void
    }

    pub fn execute(&self) {
        call!(
            self.root,
            execute(self.root, self.d(), Some(report_unhandled))
        );
    }

    /// Runs `step` (its error reported by `report_error`), then
    /// `report_ok`, as the root's flow: the reports up to its end (see
    /// [`until_end`](Self::until_end)).
    pub fn run_step(&self, step: ExecuteCallback, wait: Duration) -> Vec<String> {
        let (root, d) = (self.root, self.d());
        call!(root, add(root, d, step, Some(report_error)));
        call!(root, add(root, d, Some(report_ok), None));
        self.execute();
        self.until_end(wait)
    }

    /// The reports up to the first "ok" or "unhandled ..." (included), or
    /// up to a quiet `wait`.
    pub fn until_end(&self, wait: Duration) -> Vec<String> {
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

pub static IDLE: u8 = 0;

pub unsafe extern "C" fn alloc_idle(_: *mut c_void) -> *mut c_void {
    &IDLE as *const u8 as *mut c_void
}

impl Fixture {
    /// Waits until the root's flow has ended (a root's stateVariable gives
    /// NULL while its flow runs).
    pub fn wait_idle(&self) {
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

pub const SECS: Duration = Duration::from_secs(5);
pub const QUIET: Duration = Duration::from_millis(300);

pub unsafe extern "C" fn report_ok(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    _: *const FutoInArgs,
) {
    send(data, "ok");
}

pub unsafe extern "C" fn report_unhandled(
    _: *mut FutoInAsyncSteps,
    data: *mut c_void,
    code: *const c_char,
) {
    // SAFETY: the runtime gives a NUL-terminated code.
    let code = unsafe { CStr::from_ptr(code) }.to_string_lossy();
    send(data, format!("unhandled {code}"));
}

/// An error handler that reports `code: error_info` and recovers.
pub unsafe extern "C" fn report_error(
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

/// A scheduled callback that must never run.
pub unsafe extern "C" fn never_sched(data: *mut c_void) {
    send(data, "a scheduled callback ran");
}

/// A pointer handed to another thread.
#[derive(Clone, Copy)]
pub struct P(pub usize);
