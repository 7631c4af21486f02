//! `wrap()` (spec 2.2.1): Rust steps inside a flow owned by another
//! implementation of the binary interface. See the [`cabi`](crate::cabi)
//! docs, "Rust steps in a foreign flow", and there the files of this
//! folder, bottom first.

mod boxes;
mod calls;
mod handles;
mod root;
mod trampolines;
mod view;

pub use handles::{ForeignExternal, ForeignParallel, ForeignTask};
pub use root::{ForeignFlow, ForeignRoot};
pub use view::{wrap, wrap_step, ForeignSteps};
