//! The last test binary of `cargo test` (they run in name order): prints, loudly, how many tests
//! earlier binaries skipped because Redis or Postgres could not be reached, so a local run
//! without the backends cannot pass for a full one. With `MCP_CONFIRM_REQUIRE_BACKENDS=1` (CI)
//! nothing is skipped: such tests fail instead.

mod backends;

use std::collections::BTreeMap;
use std::io::Write;

#[test]
fn summary_of_backend_tests_skipped_in_this_run() {
    let log = backends::skip_log();
    let Ok(text) = std::fs::read_to_string(&log) else {
        return;
    };
    let _ = std::fs::remove_file(&log);
    let mut by_backend: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in text.lines() {
        if let Some((backend, what)) = line.split_once('\t') {
            by_backend.entry(backend).or_default().push(what);
        }
    }
    let total: usize = by_backend.values().map(Vec::len).sum();
    if total == 0 {
        return;
    }
    let mut out = std::io::stderr().lock();
    let rule = "!".repeat(78);
    let _ = writeln!(out, "\n{rule}");
    let _ = writeln!(
        out,
        "!! {total} BACKEND TEST(S) SKIPPED: their backend could not be reached. This run did NOT test them."
    );
    for (backend, skipped) in &by_backend {
        let _ = writeln!(
            out,
            "!!   {backend}: {} skipped ({})",
            skipped.len(),
            skipped.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "!! Start Redis and Postgres (see README), or set MCP_CONFIRM_REQUIRE_BACKENDS=1 to fail instead."
    );
    let _ = writeln!(out, "{rule}\n");
}
