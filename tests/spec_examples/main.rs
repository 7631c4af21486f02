//! Conformance tests: one test per example of the FTN12 spec
//! (`ftn12-async-api.md`, sections 1.1-1.4 and 3.1-3.5), each asserting the
//! exact order of the callbacks and the exact values they see.
//!
//! Everything runs on a [`TestTool`] (virtual time, nothing sleeps), except
//! the one test where another OS thread completes a step, which uses an
//! [`AsyncTool`].
//!
//! [`TestTool`]: futoin_asyncsteps::TestTool
//! [`AsyncTool`]: futoin_asyncsteps::AsyncTool

#[path = "../common/mod.rs"]
mod common;

mod section_1;
mod section_3;
