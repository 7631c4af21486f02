//! The universal binary interface (spec 2.7) as a C ABI.
//!
//! The crate builds as a `staticlib` and a `cdylib` whose entry points and
//! types are declared in `include/futoin_asyncsteps.h`; C code (or any
//! language with a C FFI) creates a runtime, roots, and sync objects, and
//! writes steps as plain C callbacks that get a `FutoInAsyncSteps*`. See
//! `docs/c-interface.md` for a complete program and the ownership rules.
//!
//! From Rust, the same types are here for code that talks to another
//! implementation's `FutoInAsyncSteps*`; [`BinaryValue`] carries C arrays
//! and custom objects through Rust steps untouched.
//!
//! The entry points work from Rust as from C; here a flow with one C-style
//! step that passes an int on:
//!
//! ```
//! use futoin_asyncsteps::cabi::types::*;
//! use futoin_asyncsteps::cabi::{futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new};
//! use std::ffi::{c_char, c_void};
//! use std::sync::mpsc::{channel, Sender};
//!
//! static INT32: FutoInType = FutoInType { flags: FTN_TYPE_INT32, cleanup: None };
//!
//! unsafe extern "C" fn produce(bsi: *mut FutoInAsyncSteps, _: *mut c_void, _: *const FutoInArgs) {
//!     let mut out = FutoInArgs::EMPTY;
//!     out.args[0].type_ = &INT32;
//!     out.args[0].v.i32 = 41;
//!     // SAFETY: the handle this callback got, with its vtable.
//!     unsafe { ((*(*bsi).api).success.unwrap())(bsi, &mut out) };
//! }
//! unsafe extern "C" fn consume(_: *mut FutoInAsyncSteps, data: *mut c_void, args: *const FutoInArgs) {
//!     // SAFETY: `data` is the Sender given to add(); args hold one INT32.
//!     let (tx, v) = unsafe { (&*(data as *const Sender<i32>), (*args).args[0].v.i32) };
//!     tx.send(v + 1).unwrap();
//! }
//! unsafe extern "C" fn unhandled(_: *mut FutoInAsyncSteps, _: *mut c_void, _: *const c_char) {}
//!
//! let (tx, rx) = channel::<i32>();
//! let rt = futoin_runtime_new(1);
//! // SAFETY: a live runtime; every call goes through the root's vtable,
//! // and `tx` outlives the flow (we wait for its message).
//! unsafe {
//!     let root = futoin_asyncsteps_new(rt);
//!     let api = &*(*root).api;
//!     api.add.unwrap()(root, std::ptr::null_mut(), Some(produce), None);
//!     api.add.unwrap()(root, &tx as *const _ as *mut c_void, Some(consume), None);
//!     api.execute.unwrap()(root, std::ptr::null_mut(), Some(unhandled));
//!     assert_eq!(rx.recv().unwrap(), 42);
//!     api.free.unwrap()(root);
//!     futoin_runtime_free(rt);
//! }
//! ```
//!
//! ## Rust steps in a foreign flow: `wrap`
//!
//! [`wrap`] turns the `FutoInAsyncSteps*` a C callback received into a
//! [`ForeignSteps`], a view with the method names and closure shapes of
//! [`Step`](crate::Step): `add(|s, args| ...)`, `add_catch`, `parallel`,
//! `success`, `error` (as a returned `Err`), `set_timeout`, `set_cancel`,
//! `wait_external`, loops with labels, state variables, `sync`, the
//! AsyncTool calls. [`wrap_step`] does the whole callback: decodes the
//! args, runs a Rust closure, and reports its result. [`ForeignRoot`] owns
//! a foreign root: add Rust steps to it, then
//! [`execute`](ForeignRoot::execute) it.
//!
//! The view is a separate type rather than [`Step`](crate::Step) itself
//! because a `Step` is the engine's own running frame; code that should run
//! on both can be written once as a function generic over a small trait of
//! the caller's own.
//!
//! ### What the implementation behind the pointer must do
//!
//! Everything here goes through the pointer's function table, so `wrap`
//! works with any implementation that keeps the rules this crate's own
//! interface documents (`docs/c-interface.md`):
//! - `data` given to `add`/`loop`/`setCancel`/... comes back unchanged;
//! - `stack()` memory lives until the step ends (else a root-level
//!   `stateVariable` is used, cleaned up when the root's state goes);
//! - values in a callback's args may be moved out by setting the slot's
//!   `type` to NULL;
//! - `success`/`handle_error` of a waiting step may be called from any
//!   thread, and calls on the handle of an ended step are harmless.
//!
//! Closures must be `Send`: another implementation may run a flow's steps
//! on a thread other than the one that added them.
//!
//! ```
//! use futoin_asyncsteps::cabi::{futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new};
//! use futoin_asyncsteps::cabi::ForeignRoot;
//! use std::sync::mpsc::channel;
//!
//! let rt = futoin_runtime_new(1);
//! // SAFETY: a fresh root of a live runtime, owned by `root` from here.
//! let mut root = unsafe { ForeignRoot::from_raw(futoin_asyncsteps_new(rt)) }?;
//! let (tx, rx) = channel();
//! root.add(|s, ()| {
//!     s.add(|s, ()| s.success((20i32, 22i32)));
//!     s.add(|s, (a, b): (i32, i32)| s.success((a + b,)));
//!     Ok(())
//! });
//! root.add(move |_, (v,): (i32,)| {
//!     tx.send(v).unwrap();
//!     Ok(())
//! });
//! let flow = root.execute(|e| panic!("unexpected {e}"));
//! assert_eq!(rx.recv().unwrap(), 42);
//! drop(flow);
//! // SAFETY: every root of the runtime is freed.
//! unsafe { futoin_runtime_free(rt) };
//! # Ok::<(), futoin_asyncsteps::Error>(())
//! ```
//!
//! ## Inside: the files, bottom first
//!
//! Each file imports only files listed before it, so a change to one can
//! break only the files after it.
//! - `types.rs`: the `#[repr(C)]` types, field for field as in the header.
//! - `value.rs`: success args across the boundary, and [`BinaryValue`].
//! - `table.rs`: how a handle of ours is told apart from any other: the
//!   `Table` trait names the function table of each handle type.
//! - `noop.rs`: the no-op entries of a handle that takes only `add()`.
//! - `handle.rs`: step handles: the pool, binding one to a step, the
//!   thread checks, the calls' access to the running step.
//! - `callback.rs`: running a C callback as a step's body or error
//!   handler, with a step handle bound for the call.
//! - `cvar.rs`: C state variables (`stateVariable`) in a flow's state.
//! - `sync.rs`: this runtime's sync objects as `FutoInSync`, and `addSync`.
//! - `root.rs`: roots and root parallels, and the entries of their tables.
//! - `step.rs`: the entries of the step handles' table.
//! - `api.rs`: the four function tables: the top of the files before it,
//!   and the one way in to the handles for the files after it.
//! - `runtime.rs`: `futoin_runtime_new`/`_free` and `futoin_asyncsteps_new`.
//! - `wrap/`: Rust steps in a foreign flow, reaching this crate's handles
//!   only through `api.rs`; its files, bottom first:
//!   - `boxes.rs`: where the Rust closures given to a foreign flow live
//!     (a cell of the step's `stack()`, else the root's arena);
//!   - `view.rs`: [`ForeignSteps`] itself, [`wrap`], [`wrap_step`], and
//!     how a callback ends;
//!   - `trampolines.rs`: the `extern "C"` trampolines that call those
//!     closures, and adding a step or a parallel with them;
//!   - `handles.rs`: [`ForeignParallel`], [`ForeignExternal`],
//!     [`ForeignTask`];
//!   - `root.rs`: [`ForeignRoot`], [`ForeignFlow`], Rust state variables;
//!   - `calls.rs`: the calls of the spec on a [`ForeignSteps`].
//! - `mod.rs` (this file): the public surface.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod types;

mod api;
mod callback;
mod cvar;
mod handle;
mod noop;
mod root;
mod runtime;
mod step;
mod sync;
mod table;
mod value;
mod wrap;

pub use handle::QUARANTINE;
pub use runtime::{futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new, FutoInRuntime};
pub use sync::{futoin_limiter_new, futoin_mutex_new, futoin_sync_free, futoin_throttle_new};
pub use value::{BinaryValue, Element};
pub use wrap::{
    wrap, wrap_step, ForeignExternal, ForeignFlow, ForeignParallel, ForeignRoot, ForeignSteps,
    ForeignTask,
};
