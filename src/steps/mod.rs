//! The AsyncSteps engine: root models, the execution API, levels, parallel,
//! loops, external completion and futures.

pub(crate) mod catch;
pub(crate) mod def;
pub(crate) mod drop_caught;
pub(crate) mod flow;
pub(crate) mod frame;
pub(crate) mod inline;
pub mod loops;
pub mod model;
pub mod parallel;
pub mod result;
pub mod step;
pub mod take_once;
