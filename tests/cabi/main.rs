//! The C interface (FTN12 2.7, `include/futoin_asyncsteps.h`): the C test
//! programs in `tests/c/`, `cabi::wrap` (Rust steps in a flow owned
//! through the binary interface), regression tests that drive the
//! function tables as a C program would (handles, values, sync objects,
//! calls from other threads), and proptest fuzzing of those tables.
//!
//! A regression test whose failure would crash or hang the test binary
//! runs its body in a child process (this binary again, with
//! `CABI_CHILD=1`, the test named by its full path, `module::test`).

#[macro_use]
#[path = "../common/cabi_fixture.rs"]
mod fixture;

mod fuzz;
mod handles;
mod programs;
mod sync_objects;
mod threads;
mod values;
mod wrap;
