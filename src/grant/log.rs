//! What a grant's life writes to the decision log (feature `audit-log`): begun, consumed,
//! failed, revoked and expired, each naming the grant, its principal, tool, argument digest and
//! the chosen record's version. Without the feature (or without a log) it records nothing.
//!
//! Beginning is what lets work run, so a log that is down refuses it (retryably) unless the
//! log's policy is to fail open; the other events are recorded when they can be.

#[cfg(feature = "audit-log")]
use crate::audit_log::{AuditLog, Record, WhenDown};

use std::time::SystemTime;

use super::{Grant, GrantError};

/// The decision log a [`Grants`](super::Grants) handle writes to, if any.
#[derive(Clone, Default)]
pub(crate) struct GrantLog {
    #[cfg(feature = "audit-log")]
    pub(crate) log: Option<AuditLog>,
}

impl std::fmt::Debug for GrantLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        #[cfg(feature = "audit-log")]
        let logged = self.log.is_some();
        #[cfg(not(feature = "audit-log"))]
        let logged = false;
        f.debug_struct("GrantLog").field("logged", &logged).finish()
    }
}

impl GrantLog {
    /// Whether a grant may begin now: a log that is down under a fail-closed policy says no.
    pub(super) fn ready(&self) -> Result<(), GrantError> {
        #[cfg(feature = "audit-log")]
        if let Some(log) = &self.log
            && !log.is_healthy()
        {
            return fail(log);
        }
        Ok(())
    }

    /// Records `event` of `grant` (`reason`: why it failed), when the log can take it.
    #[cfg_attr(
        not(feature = "audit-log"),
        allow(unused_variables, clippy::unused_self)
    )]
    pub(crate) fn note(
        &self,
        event: &'static str,
        grant: &Grant,
        reason: Option<&str>,
        now: SystemTime,
    ) -> Result<(), GrantError> {
        #[cfg(feature = "audit-log")]
        if let Some(log) = &self.log {
            let _ = log.append(record(event, grant, reason, now));
        }
        Ok(())
    }

    /// Records that `grant` begins, and resolves once the record is written: the work runs
    /// on a durable record or not at all. A fail-closed log that is down, or whose write
    /// fails, refuses (retryably); a fail-open one only queues the record.
    #[cfg_attr(
        not(feature = "audit-log"),
        allow(unused_variables, clippy::unused_self)
    )]
    pub(crate) async fn begun(&self, grant: &Grant, now: SystemTime) -> Result<(), GrantError> {
        #[cfg(feature = "audit-log")]
        if let Some(log) = &self.log {
            let record = record("grant_begun", grant, None, now);
            let written = match log.options().when_down {
                WhenDown::FailOpen => log.append(record),
                _ => match log.append_durable(record) {
                    Ok(durable) => durable.await.map(|_| ()),
                    Err(e) => Err(e),
                },
            };
            if written.is_err() {
                return fail(log);
            }
        }
        Ok(())
    }
}

#[cfg(feature = "audit-log")]
fn fail(log: &AuditLog) -> Result<(), GrantError> {
    match log.options().when_down {
        WhenDown::FailOpen => {
            tracing::error!(target: crate::audit::TARGET, decision = "log_bypassed",
                "the decision log is down and its policy is to fail open: a grant begins unrecorded");
            Ok(())
        }
        _ => Err(GrantError::LogUnavailable),
    }
}

/// The record of `event` for `grant`: digests and prefixes, never the arguments. The argument
/// digest is of the arguments the work acts on (the chosen id written in), as the layer's
/// `accepted` record has it.
#[cfg(feature = "audit-log")]
fn record(event: &'static str, grant: &Grant, reason: Option<&str>, now: SystemTime) -> Record {
    use crate::kernel::hex;
    let mut record = Record::new(event);
    record.at_ms = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    record.audience.clone_from(&grant.audience);
    record.tool = Some(grant.tool.clone());
    record.principal = Some(grant.principal.to_hex());
    record.subject = Some(grant.subject.clone());
    record.arguments = Some(hex(&crate::token::claims::arguments_digest(
        Some(&grant.arguments),
        None,
    )));
    record.chosen.clone_from(&grant.chosen);
    record.version.clone_from(&grant.version);
    record.nonce = Some(grant.nonce.short());
    record.grant = Some(grant.id.short());
    record.standing = grant
        .standing
        .as_ref()
        .map(|s| s.id.to_hex()[..8].to_owned());
    record.reason = reason.map(str::to_owned);
    record
}
