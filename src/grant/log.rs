//! What a grant's life reports: issued, begun, consumed, failed, revoked and expired, each to
//! `tracing` and, with a decision log, as an entry naming the grant, its principal, tool,
//! argument digest and the chosen record's version.
//!
//! Beginning is what lets work run, so a log that is down refuses it (retryably) unless the
//! log's policy is to fail open; the other events are recorded when they can be.

use std::sync::Arc;
use std::time::SystemTime;

use super::GrantError;
use crate::audit::DecisionLog;
use crate::audit::event::DecisionEvent;

/// The decision log a [`Grants`](super::Grants) handle writes to, if any.
#[derive(Clone, Default)]
pub(crate) struct GrantLog {
    pub(crate) log: Option<Arc<dyn DecisionLog>>,
}

impl std::fmt::Debug for GrantLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantLog")
            .field("logged", &self.log.is_some())
            .finish()
    }
}

impl GrantLog {
    /// Whether a grant may begin now: a log that is down under a fail-closed policy says no.
    pub(super) fn ready(&self) -> Result<(), GrantError> {
        crate::audit::ready(self.log.as_deref(), "a grant begins")
            .map_err(|_| GrantError::LogUnavailable)
    }

    /// Reports `event` of a grant, recorded when the log can take it.
    pub(crate) fn report(&self, event: DecisionEvent<'_>, now: SystemTime) {
        crate::observe::grant(&event);
        crate::audit::report(self.log.as_deref(), &event, || entry(&event, now));
    }

    /// Reports that a grant begins (`event`), and resolves once the record is written: the
    /// work runs on a durable record or not at all. A fail-closed log that is down, or whose
    /// write fails, refuses (retryably); a fail-open one only queues the record.
    pub(crate) async fn begun(
        &self,
        event: DecisionEvent<'_>,
        now: SystemTime,
    ) -> Result<(), GrantError> {
        crate::observe::grant(&event);
        crate::audit::report_decisive(
            self.log.as_deref(),
            &event,
            || entry(&event, now),
            "a grant begins",
        )
        .await
        .map_err(|_| GrantError::LogUnavailable)
    }
}

/// A grant event's entry: its audience and principal digest are the grant's own.
fn entry(event: &DecisionEvent<'_>, now: SystemTime) -> Option<crate::audit::LogEntry> {
    event.entry(now, "", None)
}
