//! How a decision that lets something run is written: durably, or (under a fail-open policy)
//! queued and said at error level; and whether a log that is down lets it go on.

use super::event::DecisionEvent;
use super::sink::{DecisionLog, LogDown, LogEntry, WhenDown};

/// Writes `entry`, a decision that lets something run, and resolves once it is durable; a log
/// that is down, or a write that fails, is [`LogDown`] unless its policy is to fail open (which
/// only queues the entry and says so at error level).
pub(crate) async fn write_decisive(
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

/// Whether `log` could take a decisive record now; if not, whether its policy lets
/// `what_runs` go on unrecorded (`Some`) or not (`None`).
pub(crate) fn ready(log: &dyn DecisionLog, what_runs: &'static str) -> Result<(), LogDown> {
    if log.is_healthy() {
        return Ok(());
    }
    when_down(log, what_runs).ok_or(LogDown)
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
