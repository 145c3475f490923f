//! Nothing here: the crate's tests are its content (`tests/compile_fail.rs`, with the cases in
//! `tests/ui/` and `tests/ui-pass/`).
