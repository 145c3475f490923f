//! A first call: its candidates, a sealed state, and the question on the policy's channel.

use crate::audit::event::{self, DecisionEvent, step_refused};
use crate::engine::Refused;
use crate::form;
use crate::policy::{Candidate, Channel, Settlement, Versions};
use crate::protocol::{Ask, Outcome, RpcError};
use crate::token::candidates::{Candidates, Shown};

use super::claim::store_failed;
use super::queued::check_grant_arguments;
use super::{Attempt, Decision};

impl Attempt<'_> {
    /// Resolves candidates, seals a fresh state, and asks on the policy's channel.
    pub(super) async fn challenge(&self) -> Result<Decision, Refused> {
        let (config, call, policy) = (self.config, self.call, self.policy());
        if policy.settlement == Settlement::Queued {
            // A grant keeps the arguments: too many to keep is refused now, before anyone
            // confirms.
            check_grant_arguments(&self.guarded.confirmed_arguments(call, None))?;
        }
        if let Some(limiter) = &config.challenge_limiter
            && let Err(wait) = limiter.check(&config.principal_key(self.principal))
        {
            return Err(Refused::new(
                RpcError::challenge_rate_limited(wait),
                "challenge rate limit",
            ));
        }
        let candidates = match self.candidates().await? {
            Ok(candidates) => candidates,
            Err(outcome) => return Ok(outcome),
        };
        let shown = candidates
            .iter()
            .map(|c| Shown::new(c.id(), c.version()))
            .collect();
        let shown = Candidates::new(shown)
            .map_err(|e| Refused::new(RpcError::internal(), format!("resolver returned {e}")))?;
        if policy.settlement == Settlement::Queued && policy.select_into.is_some() {
            // The grant keeps the arguments with the chosen id written in: the form is shown
            // only if every choice fits. The id longest in JSON makes the largest arguments.
            let longest = candidates
                .iter()
                .map(Candidate::id)
                .max_by_key(|id| serde_json::to_string(id).map_or(usize::MAX, |json| json.len()));
            if let Some(longest) = longest {
                check_grant_arguments(&self.guarded.confirmed_arguments(call, Some(longest)))?;
            }
        }
        let offer = self.standing_offer();
        let words = offer
            .as_ref()
            .map(|(scope, terms)| self.standing_words(scope, *terms));
        let (token, claims) = config
            .sealer
            .seal(
                &self.guarded.binding,
                self.guarded.request_digests(call),
                self.principal.subject(),
                config.store_epoch(),
                shown,
                offer.as_ref().map(|(_, terms)| *terms),
            )
            .map_err(|e| Refused::new(RpcError::internal(), format!("seal: {e}")))?;
        config.report(DecisionEvent::Challenged {
            tool: &call.tool,
            principal: self.principal,
            nonce: &claims.nonce,
            arguments: claims.arguments,
            candidates: candidates.len(),
            shown: config
                .logging()
                .then(|| shown_digest(&candidates, words.as_deref())),
        });
        let ask = match policy.channel {
            Channel::Form => Ask::Form(form::schema(
                policy,
                &candidates,
                words,
                self.call.arguments(),
            )),
            Channel::Browser { typed_id } => {
                let approval = self.approval(&claims, &candidates, typed_id, words);
                self.approvals()?
                    .propose(&approval)
                    .await
                    .map_err(store_failed)?;
                let id = approval.id;
                // Only where others decide: the caller has the URL already.
                if let Some(notifier) = &self.config.notifier
                    && !approval.approvers.is_caller_only()
                {
                    let notice = crate::notify::ApprovalNotice::of(&approval, &self.page_url(id))
                        .with_argument_values(|| form::argument_lines(call.arguments()));
                    notifier.approval_requested(notice);
                }
                return Ok(self.ask_page(id, &token, None));
            }
        };
        Ok(self.ask(ask, &token))
    }

    /// The candidates of a pick-one policy (none for a confirm-only one), or the outcome that
    /// ends the call when none or too many match.
    pub(super) async fn candidates(&self) -> Result<Result<Vec<Candidate>, Decision>, Refused> {
        let policy = self.policy();
        let Some(resolver) = &policy.resolver else {
            return Ok(Ok(Vec::new()));
        };
        let found = resolver
            .resolve(self.lookup())
            .await
            .map_err(|e| Refused::new(RpcError::internal(), format!("resolver failed: {e}")))?;
        if found.is_empty() {
            step_refused(&self.call.tool, Some(self.principal), "no candidates");
            return Ok(Err(
                self.outcome(Outcome::NoCandidates, &policy.no_candidates_text)
            ));
        }
        if found.len() > policy.max_candidates {
            step_refused(&self.call.tool, Some(self.principal), "too many candidates");
            let text = format!(
                "{} records match; at most {} can be offered. Narrow the request; nothing was changed.",
                found.len(),
                policy.max_candidates
            );
            return Ok(Err(self.outcome(Outcome::TooManyCandidates, &text)));
        }
        if policy.versions == Versions::Required && found.iter().any(|c| c.version().is_none()) {
            return Err(Refused::new(
                RpcError::internal(),
                "resolver returned a candidate without a version: give each Candidate a \
                 version, or opt out with ToolPolicy::without_versions",
            ));
        }
        Ok(Ok(found))
    }
}

/// A digest of what the user was shown: each candidate's id, version and label as the form
/// cleaned it, and the standing option's words.
pub(super) fn shown_digest(candidates: &[Candidate], standing: Option<&str>) -> [u8; 32] {
    event::shown_digest(
        candidates.iter().map(|c| (c.id(), c.version(), c.label())),
        standing,
    )
}
