//! The runtime entry points: `futoin_runtime_new`, `futoin_runtime_free`
//! and `futoin_asyncsteps_new`.

use super::api::new_root;
use super::types::FutoInAsyncSteps;
use crate::runtime::Runtime;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An opaque `FutoInRuntime`: a [`Runtime`] owned by C.
#[derive(Debug)]
pub struct FutoInRuntime {
    rt: Runtime,
}

/// Runs `f`, turning a panic into `None` (it must not cross into C).
fn guard<R>(f: impl FnOnce() -> R) -> Option<R> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// `futoin_runtime_new`: see the header.
#[no_mangle]
pub extern "C" fn futoin_runtime_new(threads: u32) -> *mut FutoInRuntime {
    guard(|| {
        let mut b = Runtime::builder().thread_name("futoin-c");
        if threads > 0 {
            b = b.loops(threads as usize);
        }
        match b.build() {
            Ok(rt) => Box::into_raw(Box::new(FutoInRuntime { rt })),
            Err(_) => std::ptr::null_mut(),
        }
    })
    .unwrap_or(std::ptr::null_mut())
}

/// `futoin_runtime_free`: see the header.
///
/// # Safety
/// `rt` is NULL or came from [`futoin_runtime_new`] and is freed once.
#[no_mangle]
pub unsafe extern "C" fn futoin_runtime_free(rt: *mut FutoInRuntime) {
    if rt.is_null() {
        return;
    }
    // SAFETY: caller's contract.
    let rt = unsafe { Box::from_raw(rt) };
    guard(move || {
        if rt.rt.handle().current_loop().is_some() {
            // On one of its own loops: joining would wait for this very
            // thread, so the shutdown finishes on a helper thread.
            std::thread::spawn(move || rt.rt.shutdown());
        } else {
            rt.rt.shutdown();
        }
    });
}

/// `futoin_asyncsteps_new`: see the header.
///
/// # Safety
/// `rt` is NULL or a live runtime from [`futoin_runtime_new`].
#[no_mangle]
pub unsafe extern "C" fn futoin_asyncsteps_new(rt: *mut FutoInRuntime) -> *mut FutoInAsyncSteps {
    // SAFETY: caller's contract.
    match unsafe { rt.as_ref() } {
        Some(rt) => guard(|| new_root(rt.rt.handle())).unwrap_or(std::ptr::null_mut()),
        None => std::ptr::null_mut(),
    }
}
