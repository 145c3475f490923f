//! The decision log's metrics, through the `metrics` facade (feature `metrics`), beside the
//! layer's (`mcp_confirm::metrics`). Labels: `backend` (`file`, `postgres`, `custom`).

/// Failures that took the log down, by `backend` and `kind` (`write`: a write, sync or
/// checkpoint failed; `damaged`: what was signed changed, an insider's edit). Alert on any.
pub const ERRORS: &str = "mcp_confirm_log_errors_total";

/// When the newest checkpoint was signed (Unix seconds), by `backend`: its age is
/// `time() - mcp_confirm_log_checkpoint_timestamp_seconds`.
pub const CHECKPOINT_TIMESTAMP: &str = "mcp_confirm_log_checkpoint_timestamp_seconds";

/// Records in the log at the newest checkpoint, by `backend`.
pub const RECORDS: &str = "mcp_confirm_log_records";

/// Describes the log's metrics to the installed recorder.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_counter!(ERRORS, "Failures that took the decision log down");
    describe_gauge!(
        CHECKPOINT_TIMESTAMP,
        Unit::Seconds,
        "When the decision log's newest checkpoint was signed"
    );
    describe_gauge!(
        RECORDS,
        "Records in the decision log at its newest checkpoint"
    );
}

pub(crate) fn failed(backend: &'static str, damaged: bool) {
    let kind = if damaged { "damaged" } else { "write" };
    metrics::counter!(ERRORS, "backend" => backend, "kind" => kind).increment(1);
}

/// A checkpoint round ended well: `signed` when it signed a new one (else nothing was new).
pub(crate) fn checkpointed(backend: &'static str, signed: bool, size: u64) {
    if signed {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        metrics::gauge!(CHECKPOINT_TIMESTAMP, "backend" => backend).set(now);
    }
    metrics::gauge!(RECORDS, "backend" => backend).set(size as f64);
}
