//! The AsyncSteps engine: root models, the execution API, levels, parallel,
//! loops, external completion and futures.

pub(crate) mod catch;
pub(crate) mod def;
pub(crate) mod flow;
pub(crate) mod frame;
pub(crate) mod inline;
pub(crate) mod loops;
pub(crate) mod model;
pub(crate) mod parallel;
pub(crate) mod result;
pub(crate) mod step;
pub(crate) mod take_once;
