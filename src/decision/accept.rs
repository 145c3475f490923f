//! An acceptance: claimed, revalidated with the version the user saw, and forwarded.

use std::sync::Arc;

use crate::audit::event::DecisionEvent;
use crate::completion::{CompletionGuard, HandlerCall};
use crate::confirmed::Confirmed;
use crate::engine::Refused;
use crate::message;
use crate::narrow;
use std::time::SystemTime;

use serde_json::Value;

use crate::grant::GrantId;
use crate::kernel::Nonce;
use crate::policy::{Refusal, Revalidation, Settlement};
use crate::protocol::{Outcome, RpcError};
use crate::store::standing::StandingId;
use crate::token::StateError;
use crate::token::claims::{Claims, arguments_digest};

use super::claim::{burn, claim, claim_request, unused};
use super::queued::{GrantTerms, withdraw};
use super::{Approved, Attempt, Decision};

impl Attempt<'_> {
    /// An acceptance: claim, revalidate, and hand the rewritten call over to be forwarded.
    pub(super) async fn accept(
        &self,
        claims: &Claims,
        chosen: Option<String>,
        standing: bool,
        narrowed: Option<serde_json::Map<String, Value>>,
    ) -> Result<Decision, Refused> {
        let (config, call, policy) = (self.config, self.call, self.policy());
        // A log that is down refuses before anything is claimed: no confirmation is spent.
        config.log_ready()?;
        let request = claim_request(config, claims);
        // The version of the record the user chose, exactly as the state signed it.
        let version = chosen
            .as_deref()
            .and_then(|id| claims.candidates.version_of(id))
            .map(str::to_owned);
        let mut arguments = self.guarded.confirmed_arguments(call, chosen.as_deref());
        // The approver narrowed the call: what runs (and is revalidated, granted and logged) is
        // the narrowed arguments; the log keeps the digest of those asked for beside them.
        let mut original = None;
        if let (Some(edit), Value::Object(asked)) = (&narrowed, &arguments) {
            match narrow::narrow(&policy.narrowing, asked, edit) {
                Ok(Some(narrower)) => {
                    original = Some(arguments_digest(Some(&arguments), None));
                    arguments = Value::Object(narrower);
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(Refused::new(
                        RpcError::invalid_input_responses(),
                        format!("narrowing: {e}"),
                    ));
                }
            }
        }
        // A queued tool's grant is stored before the claim, so a full or unavailable grant store
        // refuses with the confirmation still unspent. Its id leaves this function only with the
        // forwarded call; if the claim fails, it is withdrawn.
        let grant = if policy.settlement == Settlement::Queued {
            unused(config, claims).await?;
            let terms = GrantTerms {
                principal: claims.principal,
                arguments_digest: claims.arguments,
                nonce: claims.nonce,
                standing: None,
            };
            Some(
                self.issue_grant(terms, &arguments, &chosen, &version)
                    .await?,
            )
        } else {
            None
        };
        let mut handler_call = None;
        let guard = if policy.settlement == Settlement::ByHandler {
            // The handler claims inside the transaction that makes the change; a state in a
            // call here, or already used (burned, or claimed by an earlier run), never reaches
            // it again.
            handler_call = Some(
                HandlerCall::begin(&config.handler_calls, claims.nonce).ok_or_else(|| {
                    Refused::replay(claims.nonce, "in_flight", StateError::InFlight)
                })?,
            );
            unused(config, claims).await?;
            None
        } else {
            if let Err(refused) = claim(config, claims, &request).await {
                withdraw(config, grant).await;
                return Err(refused);
            }
            // From here on the nonce is burned whatever happens: the guard completes it when
            // dropped.
            Some(CompletionGuard::new(Arc::clone(&config.store), request))
        };
        self.answered("accept", claims);
        if let Err(refusal) = self.revalidate(&arguments, &chosen, &version).await {
            let revoked = DecisionEvent::Revoked {
                tool: &call.tool,
                principal: self.principal,
                nonce: &claims.nonce,
                reason: refusal.reason(),
            };
            // In the decision log too: the approval it follows is there, and the call did not run.
            config.report(revoked);
            withdraw(config, grant).await;
            if guard.is_none() {
                // Nothing was claimed yet (the handler was to claim): burn the state all the
                // same.
                burn(config, &request).await;
            }
            drop(guard);
            return Ok(self.outcome(
                Outcome::Revoked,
                "The confirmed action is no longer allowed or its target changed; nothing was changed.",
            ));
        }
        // The handler claims in its own transaction; once its response is over the layer
        // checks that it did, and burns the nonce if not.
        let guard = match (guard, handler_call) {
            (None, Some(handler_call)) => Some(CompletionGuard::after_handler(
                Arc::clone(&config.store),
                request,
                call.tool.as_str().into(),
                handler_call,
            )),
            (guard, _) => guard,
        };
        if standing {
            self.grant_standing(claims).await;
        }
        // Short of a bug the body reads as it was classified; if not, the guard burns the nonce
        // and nothing runs.
        let passed = Passed {
            chosen,
            version,
            nonce: claims.nonce,
            expires_at: request.expires_at,
            claimed: policy.settlement != Settlement::ByHandler,
            grant,
            standing: None,
            arguments,
            original,
        };
        self.forward(passed, guard)
    }
}

/// What a call that passed every check runs with: the record the confirmation chose and the
/// version it binds, its nonce and how long that holds, whether the layer claimed it, the grant
/// and the standing approval (with its uses left) it runs under, and its arguments.
pub(super) struct Passed {
    pub(super) chosen: Option<String>,
    pub(super) version: Option<String>,
    pub(super) nonce: Nonce,
    pub(super) expires_at: SystemTime,
    pub(super) claimed: bool,
    pub(super) grant: Option<GrantId>,
    pub(super) standing: Option<(StandingId, u32)>,
    pub(super) arguments: Value,
    /// The digest of the arguments as asked, where an approver narrowed them.
    pub(super) original: Option<[u8; 32]>,
}

impl Attempt<'_> {
    /// The policy's revalidation right before the call, given the version the user saw; `Err`
    /// carries the hook's refusal.
    pub(super) async fn revalidate(
        &self,
        arguments: &Value,
        chosen: &Option<String>,
        version: &Option<String>,
    ) -> Result<(), Refusal> {
        let Some(hook) = &self.policy().revalidate else {
            return Ok(());
        };
        let check = Revalidation {
            principal: self.principal.clone(),
            tool: self.call.tool.as_str().into(),
            arguments: Arc::new(arguments.clone()),
            chosen: chosen.clone(),
            seen_version: version.clone(),
        };
        hook.revalidate(check).await
    }

    /// The one tail every call that runs ends in, an acceptance or a standing approval's use:
    /// the call rewritten with the arguments that passed, and what its handler learns.
    /// `guard` (if any) burns the nonce should the body not rebuild.
    pub(super) fn forward(
        &self,
        passed: Passed,
        guard: Option<CompletionGuard>,
    ) -> Result<Decision, Refused> {
        let body = message::forward_body(self.call, &passed.arguments).ok_or_else(|| {
            Refused::new(RpcError::internal(), "confirmed body could not be rebuilt")
        })?;
        let confirmed = Confirmed {
            principal: self.principal.clone(),
            tool: self.call.tool.as_str().into(),
            chosen: passed.chosen,
            version: passed.version,
            nonce: passed.nonce,
            expires_at: passed.expires_at,
            claimed: passed.claimed,
            grant: passed.grant,
            selected_into: self.policy().select_into.as_deref().map(Arc::from),
            standing: passed.standing.map(|(id, _)| id),
            arguments: arguments_digest(Some(&passed.arguments), None),
            narrowed: passed.original.is_some(),
            original: passed.original,
        };
        Ok(Decision::Forward(Box::new(Approved {
            body,
            confirmed,
            guard,
            tool: Arc::clone(self.guarded),
            standing_left: passed.standing.map(|(_, left)| left),
        })))
    }
}
