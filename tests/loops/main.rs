//! Loops (spec 1.8, 2.2): `loop_`, `repeat` and `for_each` on steps and on
//! models, break and continue with and without labels (also from a
//! parallel branch), a break that carries args, and loop bodies that add
//! sub-steps.

#[path = "../common/mod.rs"]
mod common;

mod break_with;
mod control;
mod repeat_and_for_each;
mod sub_steps;
