//! The stored form of a [`Grant`]: one JSON object, read back strictly. Shared by the backends
//! that keep a grant as one value (Redis) or one column (Postgres), so the record is the same
//! wherever it lives.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{Grant, GrantId, GrantState};
use crate::kernel::{Nonce, PrincipalKey, hex, unhex};
use crate::store::standing::StandingRef;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    id: String,
    audience: String,
    principal: String,
    subject: String,
    tool: String,
    arguments: serde_json::Value,
    arguments_digest: String,
    chosen: Option<String>,
    version: Option<String>,
    nonce: String,
    issued_at_ms: u64,
    expires_at_ms: u64,
    state: String,
    attempt: Option<u32>,
    lease_until_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    standing: Option<String>,
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The grant as one JSON text.
pub(crate) fn encode(grant: &Grant) -> String {
    let (state, attempt, lease_until_ms) = match grant.state {
        GrantState::Granted => ("granted", None, None),
        GrantState::Executing {
            attempt,
            lease_until,
        } => ("executing", Some(attempt), Some(millis(lease_until))),
        GrantState::Revoking {
            attempt,
            lease_until,
        } => ("revoking", Some(attempt), Some(millis(lease_until))),
        GrantState::Consumed => ("consumed", None, None),
        GrantState::Failed => ("failed", None, None),
        GrantState::Revoked => ("revoked", None, None),
        GrantState::Expired => ("expired", None, None),
    };
    let stored = Stored {
        id: grant.id.to_string(),
        audience: grant.audience.clone(),
        principal: grant.principal.to_hex(),
        subject: grant.subject.clone(),
        tool: grant.tool.clone(),
        arguments: grant.arguments.clone(),
        arguments_digest: hex(&grant.arguments_digest),
        chosen: grant.chosen.clone(),
        version: grant.version.clone(),
        nonce: grant.nonce.to_hex(),
        issued_at_ms: millis(grant.issued_at),
        expires_at_ms: millis(grant.expires_at),
        state: state.to_owned(),
        attempt,
        lease_until_ms,
        standing: grant.standing.map(|s| s.to_text()),
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

/// A grant read back; `None` for anything but a record [`encode`] wrote.
pub(crate) fn decode(text: &str) -> Option<Grant> {
    let s: Stored = serde_json::from_str(text).ok()?;
    let state = match (s.state.as_str(), s.attempt, s.lease_until_ms) {
        ("granted", None, None) => GrantState::Granted,
        ("executing", Some(attempt), Some(until)) => GrantState::Executing {
            attempt,
            lease_until: time(until),
        },
        ("revoking", Some(attempt), Some(until)) => GrantState::Revoking {
            attempt,
            lease_until: time(until),
        },
        ("consumed", None, None) => GrantState::Consumed,
        ("failed", None, None) => GrantState::Failed,
        ("revoked", None, None) => GrantState::Revoked,
        ("expired", None, None) => GrantState::Expired,
        _ => return None,
    };
    Some(Grant {
        id: s.id.parse::<GrantId>().ok()?,
        audience: s.audience,
        principal: PrincipalKey::from_bytes(unhex(&s.principal)?),
        subject: s.subject,
        tool: s.tool,
        arguments: s.arguments,
        arguments_digest: unhex(&s.arguments_digest)?,
        chosen: s.chosen,
        version: s.version,
        nonce: Nonce::from_bytes(unhex(&s.nonce)?),
        issued_at: time(s.issued_at_ms),
        expires_at: time(s.expires_at_ms),
        state,
        standing: match s.standing {
            Some(text) => Some(StandingRef::from_text(&text)?),
            None => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_and_anything_else_is_refused() {
        let clock =
            crate::clock::ManualClock::new(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123));
        let mut grant = super::super::conformance::grant(&clock, Duration::from_secs(60));
        for state in [
            GrantState::Granted,
            GrantState::Executing {
                attempt: 3,
                lease_until: time(1_700_000_030_456),
            },
            GrantState::Revoking {
                attempt: 2,
                lease_until: time(1_700_000_031_456),
            },
            GrantState::Consumed,
            GrantState::Failed,
            GrantState::Revoked,
            GrantState::Expired,
        ] {
            grant.state = state;
            assert_eq!(decode(&encode(&grant)), Some(grant.clone()));
        }
        let text = encode(&grant);
        assert_eq!(decode(&text.replace("\"expired\"", "\"paused\"")), None);
        assert_eq!(decode(&text.replace("}", ",\"extra\":1}")), None);
        assert_eq!(decode("not json"), None);
    }

    #[test]
    fn the_standing_approval_a_grant_was_issued_under_round_trips() {
        use crate::store::standing::{StandingId, StandingKey};
        let clock = crate::clock::ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let mut grant = super::super::conformance::grant(&clock, Duration::from_secs(60));
        assert!(!encode(&grant).contains("standing"), "absent when none");
        grant.standing = Some(StandingRef {
            key: StandingKey::from_bytes([3; 16]),
            id: StandingId::from_bytes([9; 16]),
        });
        let text = encode(&grant);
        assert_eq!(decode(&text), Some(grant.clone()));
        let spelled = grant.standing.map(|s| s.to_text()).unwrap_or_default();
        for bad in ["", "03", &spelled.replace('.', ""), &format!("{spelled}0")] {
            assert_eq!(decode(&text.replace(&spelled, bad)), None, "{bad:?}");
        }
    }
}
