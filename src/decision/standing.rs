//! Standing approvals: the offer on a form, the grant after an accepted call, and a later call
//! that runs under one without a form.

use std::sync::Arc;

use crate::audit::event::{DecisionEvent, step_refused};
use crate::completion::ReservedUse;
use crate::engine::Refused;
use crate::form;
use crate::kernel::Nonce;
use crate::policy::{Settlement, Versions};
use crate::protocol::{Outcome, RpcError};
use crate::store::standing::{Standing, StandingKey, Use};
use crate::token::candidates::{Candidates, Shown};
use crate::token::claims::{Claims, StandingTerms, arguments_digest};

use super::accept::Passed;
use super::queued::{GrantTerms, check_grant_arguments, withdraw};
use super::{Attempt, Decision};

impl Attempt<'_> {
    /// The standing approval this call's form may offer: its scope and terms, if the policy
    /// offers one, the layer keeps them, and the call's arguments name a scope.
    pub(super) fn standing_offer(&self) -> Option<(String, StandingTerms)> {
        let offer = self.policy().standing.as_ref()?;
        self.config.standing.as_ref()?;
        // A blank scope, or one too long to keep, is offered nothing: the form says "only this
        // time".
        let scope = offer.scope_of(&self.lookup())?;
        let terms = StandingTerms {
            scope: StandingTerms::scope_digest(&scope),
            for_secs: u32::try_from(offer.up_to.as_secs()).unwrap_or(u32::MAX),
            uses: offer.uses,
        };
        Some((scope, terms))
    }

    /// The standing option in words: what the user would allow.
    pub(super) fn standing_words(&self, scope: &str, terms: StandingTerms) -> String {
        let times = match terms.uses {
            1 => "once more".to_owned(),
            n => format!("at most {n} times"),
        };
        format!(
            "Also allow {} on {} for the next {} ({times})",
            form::plain_label(self.call.tool.as_str(), 64),
            form::plain_label(scope, 80),
            form::duration_words(u64::from(terms.for_secs)),
        )
    }

    /// Grants the standing approval an accepted state offered and the user chose, after its
    /// confirmed call passed every check. Best effort: if the scope no longer matches or the store
    /// refuses, the next call simply gets the form again.
    pub(super) async fn grant_standing(&self, claims: &Claims) {
        let (Some(terms), Some(offer), Some(store)) = (
            claims.standing,
            &self.policy().standing,
            &self.config.standing,
        ) else {
            return;
        };
        let tool = self.call.tool.as_str();
        let scope = offer.scope_of(&self.lookup());
        let Some(scope) = scope.filter(|s| StandingTerms::scope_digest(s) == terms.scope) else {
            step_refused(
                tool,
                Some(self.principal),
                "standing approval not granted: the call's scope is not the one offered",
            );
            return;
        };
        // What the state offered, and never more than the policy allows now.
        let secs = u64::from(terms.for_secs).min(offer.up_to.as_secs());
        let uses = terms.uses.min(offer.uses);
        let now = self.config.sealer.now();
        // Under the digest of the key that signs now (not the one that sealed the state): where
        // this instance lists it, and where every instance that signs with it looks first.
        let standing = Standing::new(
            &self.config.audience,
            self.config.principal_key(self.principal),
            self.principal.subject(),
            tool,
            &scope,
            now,
            now + std::time::Duration::from_secs(secs),
            uses,
        );
        match store.grant(&standing).await {
            Ok(()) => self.config.report(DecisionEvent::StandingGranted {
                tool,
                principal: self.principal,
                nonce: &claims.nonce,
                id: &standing.id,
                secs,
                uses,
            }),
            Err(e) => step_refused(
                tool,
                Some(self.principal),
                format!("standing approval not kept: {e}"),
            ),
        }
    }

    /// A first call covered by a live standing approval of this principal, tool and scope: run
    /// it without a form if it resolves to exactly one record, reserves one use and passes the
    /// revalidation (a refused call gives its use back). `None`: not covered (or not
    /// unambiguous), so the form is shown as usual.
    pub(super) async fn under_standing(&self) -> Result<Option<Decision>, Refused> {
        let (Some(offer), Some(store)) = (&self.policy().standing, &self.config.standing) else {
            return Ok(None);
        };
        let (config, call, policy) = (self.config, self.call, self.policy());
        let Some(scope) = offer.scope_of(&self.lookup()) else {
            return Ok(None);
        };
        // Granted under the digest of any key of the ring: during a rotation, instances that
        // still sign with the old key grant under it. The signing key's first.
        let mut found = None;
        for principal_key in config.principal_keys(self.principal) {
            let key = StandingKey::new(&config.audience, principal_key, call.tool.as_str(), &scope);
            // A store that cannot answer covers nothing: the form is shown, as without a
            // standing approval (never a refusal the form would have avoided, never a pass).
            match store.find(key).await {
                Ok(Some(standing)) if standing.is_live(config.sealer.now()) => {
                    found = Some((key, principal_key, standing));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    step_refused(
                        call.tool.as_str(),
                        Some(self.principal),
                        format!("standing store unavailable, asking instead: {e}"),
                    );
                    return Ok(None);
                }
            }
        }
        let Some((key, principal_key, standing)) = found else {
            return Ok(None);
        };
        // As unambiguous as a confirmed call: exactly one record, versioned as the policy asks.
        let (chosen, version) = match &policy.resolver {
            None => (None, None),
            Some(resolver) => {
                let found = resolver.resolve(self.lookup()).await.map_err(|e| {
                    Refused::new(RpcError::internal(), format!("resolver failed: {e}"))
                })?;
                let [one] = found.as_slice() else {
                    return Ok(None);
                };
                if policy.versions == Versions::Required && one.version().is_none() {
                    return Ok(None);
                }
                let shown = vec![Shown::new(one.id(), one.version())];
                if Candidates::new(shown).is_err() {
                    return Ok(None);
                }
                (Some(one.id().to_owned()), one.version().map(str::to_owned))
            }
        };
        let tool = call.tool.as_str();
        let arguments = self.guarded.confirmed_arguments(call, chosen.as_deref());
        let digest = arguments_digest(Some(&arguments), None);
        let nonce = Nonce::random();
        // A log that is down refuses before a use is spent.
        config.log_ready()?;
        // A queued tool's grant is stored before the use is spent (a grant store that refuses
        // leaves the approval's uses as they were), bound to the standing approval so that
        // revoking it stops the grant if the work has not begun; withdrawn if the use is not
        // spent or the revalidation refuses.
        let grant = if policy.settlement == Settlement::Queued {
            check_grant_arguments(&arguments)?;
            let terms = GrantTerms {
                principal: principal_key,
                arguments_digest: digest,
                nonce,
                standing: Some(standing.reference()),
            };
            Some(
                self.issue_grant(terms, &arguments, &chosen, &version)
                    .await?,
            )
        } else {
            None
        };
        // The use is reserved before the revalidation, under this call's nonce, so racing calls
        // never hold more uses than the approval has; it is spent only if the call passes (and
        // given back otherwise: see `ReservedUse`).
        let spent = store
            .use_one(key, standing.id, nonce)
            .await
            .unwrap_or_else(|e| {
                step_refused(
                    tool,
                    Some(self.principal),
                    format!("standing store unavailable, asking instead: {e}"),
                );
                Use::Unknown
            });
        let left = match spent {
            Use::Used { left } => left,
            ended => {
                let outcome = match ended {
                    Use::Exhausted => "exhausted",
                    Use::Expired => "expired",
                    Use::Revoked => "revoked",
                    _ => "unknown",
                };
                config.report(DecisionEvent::StandingEnded {
                    tool,
                    principal: self.principal,
                    id: &standing.id,
                    outcome,
                });
                withdraw(config, grant).await;
                return Ok(None);
            }
        };
        let reserved = ReservedUse::new(Arc::clone(store), key, standing.id, nonce);
        if let Err(refusal) = self.revalidate(&arguments, &chosen, &version).await {
            step_refused(tool, Some(self.principal), refusal.reason());
            reserved.give_back().await;
            withdraw(config, grant).await;
            return Ok(Some(self.outcome(
                Outcome::Revoked,
                "The action is no longer allowed or its target changed; nothing was changed.",
            )));
        }
        let passed = Passed {
            chosen,
            version,
            nonce,
            expires_at: standing.expires_at,
            claimed: true,
            grant,
            standing: Some((standing.id, left)),
            arguments,
            original: None,
        };
        // Short of a bug the body rebuilds; if not, dropping `reserved` gives the use back.
        let forward = self.forward(passed, None)?;
        reserved.keep();
        if left == 0 {
            config.report(DecisionEvent::StandingEnded {
                tool,
                principal: self.principal,
                id: &standing.id,
                outcome: "exhausted",
            });
        }
        Ok(Some(forward))
    }
}
