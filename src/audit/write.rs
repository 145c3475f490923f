//! How a decision is reported: to `tracing` always, and to the decision log if there is one.
//! A decision that lets something run is written durably, or (under a fail-open policy) queued
//! and said at error level; a log that is down lets it go on only under that policy.

use super::event::DecisionEvent;
use super::sink::{DecisionLog, LogDown, LogEntry, WhenDown};

/// Reports `event` to `tracing` and, as its entry (`entry` makes it, only when there is a log),
/// to `log`; a log that is down loses it (it counts what it loses). For what does not run
/// anything.
pub(crate) fn report(
    log: Option<&dyn DecisionLog>,
    event: &DecisionEvent<'_>,
    entry: impl FnOnce() -> Option<LogEntry>,
) {
    event.trace();
    if let Some(log) = log
        && let Some(entry) = entry()
    {
        let _ = log.append(entry);
    }
}

/// Reports `event`, a decision that lets `what_runs` go on, and resolves once its entry is
/// written (see [`write_decisive`]).
pub(crate) async fn report_decisive(
    log: Option<&dyn DecisionLog>,
    event: &DecisionEvent<'_>,
    entry: impl FnOnce() -> Option<LogEntry>,
    what_runs: &'static str,
) -> Result<(), LogDown> {
    event.trace();
    if let Some(log) = log
        && let Some(entry) = entry()
    {
        return write_decisive(log, entry, what_runs).await;
    }
    Ok(())
}

/// Writes `entry`, a decision that lets something run, and resolves once it is durable; a log
/// that is down, or a write that fails, is [`LogDown`] unless its policy is to fail open (which
/// only queues the entry and says so at error level).
async fn write_decisive(
    log: &dyn DecisionLog,
    entry: LogEntry,
    what_runs: &'static str,
) -> Result<(), LogDown> {
    let written = match log.when_down() {
        WhenDown::FailOpen => log.append(entry),
        WhenDown::FailClosed => match log.append_durable(entry) {
            Ok(durable) => durable.await,
            Err(down) => Err(down),
        },
    };
    match written {
        Ok(()) => Ok(()),
        Err(down) => when_down(log, what_runs).ok_or(down),
    }
}

/// Whether `log` (if any) could take a decisive record now; if not, whether its policy lets
/// `what_runs` go on unrecorded.
pub(crate) fn ready(log: Option<&dyn DecisionLog>, what_runs: &'static str) -> Result<(), LogDown> {
    match log {
        Some(log) if !log.is_healthy() => when_down(log, what_runs).ok_or(LogDown),
        _ => Ok(()),
    }
}

/// A log that is down under its policy: `Some` lets `what_runs` go on (fail open, said at
/// error level), `None` refuses it.
fn when_down(log: &dyn DecisionLog, what_runs: &'static str) -> Option<()> {
    match log.when_down() {
        WhenDown::FailOpen => {
            DecisionEvent::LogBypassed { what_runs }.trace();
            Some(())
        }
        WhenDown::FailClosed => None,
    }
}
