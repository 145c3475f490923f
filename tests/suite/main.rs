//! The test suite of mcp-confirm, one binary organised by behaviour. (`allocations` and
//! `fuzz_fallback` are binaries of their own: a global allocator, proptest; `zz_backend_skips`
//! runs last and reports skipped backend tests. The compile-time checks are the
//! `compile-tests` crate's.)
//!
//! The demo's notes server is the `mcp-confirm-demo` library; `common`, `backends` and
//! `notes_http` are the shared support.

#[path = "../backends/mod.rs"]
mod backends;
#[path = "../common/mod.rs"]
mod common;
#[path = "../notes_http/mod.rs"]
mod notes_http;

mod audit;
mod browser;
mod confirm_flow;
mod decision_log;
mod demo;
mod grants;
mod observe;
mod regressions;
mod single_use;
mod standing;
mod wiring;
