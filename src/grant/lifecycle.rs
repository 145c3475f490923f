//! A grant, its states, and the pure transitions between them: what every store applies, as
//! functions of the record and the time, so that stores differ only in how they make one
//! transition atomic.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::kernel::{Nonce, PrincipalKey, hex, unhex};
use crate::store::standing::StandingRef;

/// The unguessable id of a grant: 128 random bits. The only thing a queued job needs to carry.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrantId([u8; 16]);

impl GrantId {
    /// A fresh id from the operating system's random source.
    ///
    /// # Panics
    /// If the OS random source fails; there is no safe fallback for an unguessable id.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut bytes) {
            panic!("the OS random source failed: {e}");
        }
        Self(bytes)
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The first four bytes in hex, for logs: enough to correlate, not enough to use.
    pub(crate) fn short(&self) -> String {
        hex(&self.0[..4])
    }
}

impl fmt::Display for GrantId {
    /// 32 lowercase hex digits, the form [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for GrantId {
    /// The first four bytes only: enough to correlate, not enough to use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GrantId({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// Why a string is not a [`GrantId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a grant id is 32 lowercase hex digits")]
pub struct GrantIdError;

impl FromStr for GrantId {
    type Err = GrantIdError;

    fn from_str(s: &str) -> Result<Self, GrantIdError> {
        unhex(s).map(Self).ok_or(GrantIdError)
    }
}

impl Grant {
    /// Whether no transition from `now` on can run this grant again.
    pub(crate) fn can_never_run(&self, now: SystemTime) -> bool {
        match self.state {
            state if state.is_final() => true,
            GrantState::Granted => now >= self.expires_at,
            GrantState::Executing { lease_until, .. }
            | GrantState::Revoking { lease_until, .. } => {
                now >= lease_until && now >= self.expires_at
            }
            _ => false,
        }
    }

    /// What this grant's decision events name: its id's first bytes, who and what, and the
    /// digest of the arguments the work acts on (as the layer's `accepted` record has it).
    pub(crate) fn facts(&self) -> crate::audit::event::GrantFacts<'_> {
        crate::audit::event::GrantFacts {
            id: self.id.short(),
            audience: &self.audience,
            principal: &self.principal,
            subject: &self.subject,
            tool: &self.tool,
            arguments: &self.arguments,
            chosen: self.chosen.as_deref(),
            version: self.version.as_deref(),
            nonce: &self.nonce,
            standing: self.standing.as_ref().map(|s| &s.id),
        }
    }
}

/// Where a grant is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrantState {
    /// Approved, not started.
    Granted,
    /// A worker holds attempt `attempt` until `lease_until`.
    Executing {
        /// The fence: only this attempt may finish.
        attempt: u32,
        /// When the lease runs out and another attempt may begin.
        lease_until: SystemTime,
    },
    /// Revoked while attempt `attempt` was under way: that attempt may still record what it did
    /// until `lease_until`; nothing else begins, and then the grant is revoked.
    Revoking {
        /// The attempt under way.
        attempt: u32,
        /// When its lease runs out.
        lease_until: SystemTime,
    },
    /// Done, once.
    Consumed,
    /// The worker reported a failure it will not retry.
    Failed,
    /// Withdrawn before it finished.
    Revoked,
    /// Not begun before its expiry.
    Expired,
}

impl GrantState {
    /// Whether no transition leaves this state.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Self::Consumed | Self::Failed | Self::Revoked | Self::Expired
        )
    }
}

/// A confirmed action, kept until the work runs: who approved what, on which record as shown,
/// until when, and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The grant's id.
    pub id: GrantId,
    /// The deployment that issued it.
    pub audience: String,
    /// Who approved: the keyed digest of the principal that the confirmation's state bound.
    pub principal: PrincipalKey,
    /// Who approved, as the authentication layer named them: the worker re-authorizes this
    /// subject when the work runs.
    pub subject: String,
    /// The confirmed tool.
    pub tool: String,
    /// The arguments the confirmed call carried (with the chosen id written in): what the work
    /// acts on. A job carries only the grant id; anything else it carries is descriptive.
    pub arguments: Value,
    /// The digest of the arguments the confirmation's state bound.
    pub arguments_digest: [u8; 32],
    /// The record the user chose, if the tool offered a choice.
    pub chosen: Option<String>,
    /// The version of that record the user saw.
    pub version: Option<String>,
    /// The confirmation's nonce, for the audit trail.
    pub nonce: Nonce,
    /// When the grant was issued.
    pub issued_at: SystemTime,
    /// After this, a grant not yet begun expires.
    pub expires_at: SystemTime,
    /// Where it is now.
    pub state: GrantState,
    /// The standing approval it was issued under, if a call covered by one issued it instead
    /// of a confirmation of its own: revoking that approval stops the grant if it has not begun.
    pub standing: Option<StandingRef>,
}

/// The right to run one attempt of a grant, until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The grant.
    pub grant: GrantId,
    /// The fence: this attempt, and no other, may finish the grant.
    pub attempt: u32,
    /// When the lease runs out.
    pub until: SystemTime,
}

/// What a [`GrantStore::begin`](super::GrantStore::begin) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Begin {
    /// Run it now, under this lease; re-check the live record first.
    Started(Lease),
    /// Another attempt holds a lease until then: do not run; retry after it.
    Busy {
        /// When the current lease runs out.
        until: SystemTime,
    },
    /// It is over (consumed, failed, revoked or expired): never run it.
    Finished(GrantState),
    /// No such grant (never issued, or forgotten after it ended): never run it.
    Unknown,
}

/// What a [`GrantStore::revoke`](super::GrantStore::revoke) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoke {
    /// The grant will never run.
    Revoked,
    /// An attempt is under way: it will not start acting if it has not yet (its
    /// [`GrantStore::confirm`](super::GrantStore::confirm) fails), no later attempt begins, and one already acting may still
    /// record its outcome until `until`.
    Stopping {
        /// When the attempt's lease runs out.
        until: SystemTime,
    },
    /// It had already ended, in this state.
    Ended(GrantState),
    /// No such grant.
    Unknown,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finish {
    /// The action happened.
    Consumed,
    /// The action will not happen (the live record changed, the principal lost access, …).
    Failed,
}

impl Grant {
    /// Starts an attempt at `now` with a lease of `lease`, if the grant allows one.
    pub fn begin(&mut self, now: SystemTime, lease: Duration) -> Begin {
        match self.state {
            state if state.is_final() => Begin::Finished(state),
            GrantState::Executing { lease_until, .. }
            | GrantState::Revoking { lease_until, .. }
                if now < lease_until =>
            {
                Begin::Busy { until: lease_until }
            }
            GrantState::Revoking { .. } => {
                // The attempt under way when it was revoked did not finish: revoked for good.
                self.state = GrantState::Revoked;
                Begin::Finished(self.state)
            }
            GrantState::Executing {
                attempt: u32::MAX, ..
            } => {
                // No fence number left to hand out.
                self.state = GrantState::Failed;
                Begin::Finished(self.state)
            }
            GrantState::Granted if now >= self.expires_at => {
                self.state = GrantState::Expired;
                Begin::Finished(self.state)
            }
            GrantState::Executing { .. } if now >= self.expires_at => {
                // The last attempt's lease ran out and so did the grant: nobody finished it.
                self.state = GrantState::Expired;
                Begin::Finished(self.state)
            }
            state => {
                let attempt = match state {
                    GrantState::Executing { attempt, .. } => attempt.saturating_add(1),
                    _ => 1,
                };
                // A lease past the end of time is a configuration error; cap it rather than panic.
                let until = now
                    .checked_add(lease)
                    .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 60 * 60));
                self.state = GrantState::Executing {
                    attempt,
                    lease_until: until,
                };
                Begin::Started(Lease {
                    grant: self.id,
                    attempt,
                    until,
                })
            }
        }
    }

    /// Ends the attempt `lease` holds; `false` (and nothing changes) unless it is the current one.
    pub fn finish(&mut self, lease: &Lease, outcome: Finish) -> bool {
        match self.state {
            GrantState::Executing { attempt, .. } | GrantState::Revoking { attempt, .. }
                if attempt == lease.attempt =>
            {
                self.state = match outcome {
                    Finish::Consumed => GrantState::Consumed,
                    Finish::Failed => GrantState::Failed,
                };
                true
            }
            _ => false,
        }
    }

    /// Withdraws the grant at `now`: at once if no attempt holds a live lease, else once the
    /// attempt under way ends (see [`Revoke::Stopping`]).
    pub fn revoke(&mut self, now: SystemTime) -> Revoke {
        match self.state {
            state if state.is_final() => Revoke::Ended(state),
            GrantState::Executing {
                attempt,
                lease_until,
            } if now < lease_until => {
                self.state = GrantState::Revoking {
                    attempt,
                    lease_until,
                };
                Revoke::Stopping { until: lease_until }
            }
            GrantState::Revoking { lease_until, .. } if now < lease_until => {
                Revoke::Stopping { until: lease_until }
            }
            _ => {
                self.state = GrantState::Revoked;
                Revoke::Revoked
            }
        }
    }

    /// Whether `lease` is still the live, unrevoked attempt at `now`: the last check before an
    /// attempt acts.
    pub fn holds(&self, lease: &Lease, now: SystemTime) -> bool {
        matches!(self.state, GrantState::Executing { attempt, lease_until }
            if attempt == lease.attempt && now < lease_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_text_and_refuse_anything_else() {
        let id = GrantId::random();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<GrantId>(), Ok(id));
        for bad in [
            "",
            "00",
            &text.to_uppercase(),
            &format!("{text}0"),
            &text.replace(|c: char| c.is_ascii_digit(), "g"),
        ] {
            if bad != text {
                assert_eq!(bad.parse::<GrantId>(), Err(GrantIdError), "{bad}");
            }
        }
        assert!(!format!("{id:?}").contains(&text));
    }
}
