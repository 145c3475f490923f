//! The queued settlement: a durable grant stored before the claim, withdrawn if the call does
//! not go on.

use serde_json::Value;

use crate::audit::event::DecisionEvent;
use crate::config::Config;
use crate::engine::Refused;
use crate::grant::{Grant, GrantId, GrantState, GrantStoreError};
use crate::kernel::{Nonce, PrincipalKey};
use crate::protocol::RpcError;
use crate::store::standing::StandingRef;

use super::Attempt;

impl Attempt<'_> {
    /// Stores a queued tool's grant for this confirmation. A grant store that refuses leaves the
    /// confirmation unspent (the claim comes after), so the same answer can be sent again.
    pub(super) async fn issue_grant(
        &self,
        terms: GrantTerms,
        arguments: &Value,
        chosen: &Option<String>,
        version: &Option<String>,
    ) -> Result<GrantId, Refused> {
        let config = self.config;
        let store = config.grants.as_ref().ok_or_else(|| {
            Refused::new(RpcError::internal(), "queued tool without a grant store")
        })?;
        check_grant_arguments(arguments)?;
        let now = config.sealer.now();
        let grant = Grant {
            id: GrantId::random(),
            audience: config.audience.clone(),
            principal: terms.principal,
            subject: self.principal.subject().to_owned(),
            tool: self.call.tool.as_str().to_owned(),
            arguments: arguments.clone(),
            arguments_digest: terms.arguments_digest,
            chosen: chosen.clone(),
            version: version.clone(),
            nonce: terms.nonce,
            issued_at: now,
            expires_at: now + config.grant_ttl,
            state: GrantState::Granted,
            standing: terms.standing,
        };
        store.issue(&grant).await.map_err(|e| {
            let error = match &e {
                GrantStoreError::OverBudget { retry_after } => RpcError::over_budget(*retry_after),
                _ => RpcError::store_unavailable(),
            };
            Refused::new(error, format!("grant store: {e}"))
        })?;
        config.grant_log().report(
            DecisionEvent::GrantIssued {
                grant: grant.facts(),
            },
            now,
        );
        Ok(grant.id)
    }
}

/// What a grant is issued on: the principal's key, the digest of the arguments approved, the
/// nonce of the confirmation (or of the standing approval's use), and the standing approval it
/// was issued under, if any.
pub(super) struct GrantTerms {
    pub(super) principal: PrincipalKey,
    pub(super) arguments_digest: [u8; 32],
    pub(super) nonce: Nonce,
    pub(super) standing: Option<StandingRef>,
}

/// The most a queued call's arguments may weigh in its grant, as JSON.
pub(super) const MAX_GRANT_ARGUMENTS_BYTES: usize = 64 * 1024;

/// Refuses arguments too large to keep in a grant.
pub(super) fn check_grant_arguments(arguments: &Value) -> Result<(), Refused> {
    if serde_json::to_vec(arguments).map_or(usize::MAX, |json| json.len())
        > MAX_GRANT_ARGUMENTS_BYTES
    {
        return Err(Refused::new(
            RpcError::arguments_too_large_to_queue(),
            "arguments too large to keep in a grant",
        ));
    }
    Ok(())
}

/// Withdraws a grant that will not be forwarded (best effort: its id never left this process,
/// so nothing can run it either way).
pub(super) async fn withdraw(config: &Config, grant: Option<GrantId>) {
    if let (Some(store), Some(id)) = (&config.grants, grant) {
        let _ = store.revoke(id).await;
    }
}
