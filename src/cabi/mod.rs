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

pub mod types;

mod root;
mod step;
mod sync;
mod value;

pub use root::{futoin_asyncsteps_new, futoin_runtime_free, futoin_runtime_new, FutoInRuntime};
pub use step::QUARANTINE;
pub use sync::{futoin_limiter_new, futoin_mutex_new, futoin_sync_free, futoin_throttle_new};
pub use value::{BinaryValue, Element};
