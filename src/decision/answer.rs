//! A retry's answer, read on the policy's channel, and the answers that run nothing: a cancel,
//! a decline, an approval that no longer holds.

use std::borrow::Cow;

use crate::audit::event::{DecisionEvent, step_refused};
use crate::engine::Refused;
use crate::form::{self, Answer};
use crate::policy::Channel;
use crate::protocol::{Outcome, RpcError};
use crate::store::approval::ApprovalId;
use crate::token::claims::Claims;

use super::claim::{claim, claim_request, unused};
use super::{Attempt, Decision, Verdict};

impl Attempt<'_> {
    /// A retry: read the answer on the policy's channel, then act on it. `token` is the verified
    /// state, asked with again while the answer is pending.
    pub(super) async fn settle(&self, claims: &Claims, token: &str) -> Result<Decision, Refused> {
        match self.verdict(claims).await? {
            Verdict::AskAgain(reason) => {
                if let Some(reason) = reason {
                    step_refused(
                        &self.call.tool,
                        Some(self.principal),
                        format!("asked again: {reason}"),
                    );
                }
                self.challenge().await
            }
            Verdict::Pending { status } => {
                step_refused(
                    &self.call.tool,
                    Some(self.principal),
                    "not decided on the page yet",
                );
                Ok(self.ask_page(
                    ApprovalId::for_nonce(&claims.nonce),
                    token,
                    status.as_deref(),
                ))
            }
            Verdict::Withdrawn(reason) => self.withdrawn(claims, reason).await,
            Verdict::Cancel => self.cancel(claims).await,
            Verdict::Decline { unconfirmed } => self.decline(claims, unconfirmed).await,
            Verdict::Accept {
                chosen,
                standing,
                narrowed,
            } => self.accept(claims, chosen, standing, narrowed).await,
        }
    }

    /// What the client's answer comes to: read strictly from the retry, and on the browser
    /// channel from the page's recorded decision.
    pub(super) async fn verdict(&self, claims: &Claims) -> Result<Verdict, Refused> {
        let policy = self.policy();
        let responses = self.call.input_responses();
        let answer = form::read_answer(policy, &claims.candidates, responses);
        let browser = matches!(policy.channel, Channel::Browser { .. });
        Ok(match answer {
            Answer::Missing => Verdict::AskAgain(None),
            Answer::AskAgain(reason) => Verdict::AskAgain(Some(reason)),
            Answer::Invalid(reason) => {
                return Err(Refused::new(
                    RpcError::invalid_input_responses(),
                    format!("inputResponses: {reason}"),
                ));
            }
            Answer::Cancel => Verdict::Cancel,
            Answer::Decline => Verdict::Decline { unconfirmed: false },
            Answer::Unconfirmed => Verdict::Decline { unconfirmed: true },
            Answer::Accept { .. } if browser => self.page_decision(claims).await?,
            // A standing approval the state did not offer is not an answer to this form.
            Answer::Accept { standing: true, .. } if claims.standing.is_none() => {
                Verdict::AskAgain(Some("a standing approval that was not offered"))
            }
            Answer::Accept {
                chosen,
                standing,
                narrowed,
            } => Verdict::Accept {
                chosen,
                standing,
                narrowed,
            },
        })
    }

    /// Times the answer to the question `claims` asked: once per state, when the answer
    /// settles it (a replay or a refused retry is no answer).
    pub(super) fn answered(&self, answer: &'static str, claims: &Claims) {
        crate::observe::answered(
            self.config.tool_label(&self.call.tool),
            answer,
            claims.issued_at,
            self.config.sealer.now(),
        );
    }

    /// Approved, but the approvals no longer hold (`reason`): the confirmation is spent, as
    /// for a decline, and the call refused with the `revoked` outcome.
    pub(super) async fn withdrawn(
        &self,
        claims: &Claims,
        reason: &'static str,
    ) -> Result<Decision, Refused> {
        let request = claim_request(self.config, claims);
        claim(self.config, claims, &request).await?;
        let _ = self.config.store.complete(&request).await;
        self.config.report(DecisionEvent::Refused {
            tool: &self.call.tool,
            principal: Some(self.principal),
            nonce: Some(&claims.nonce),
            class: Some(Cow::Borrowed("approval_withdrawn")),
            reason: Cow::Borrowed(reason),
        });
        Ok(self.outcome(
            Outcome::Revoked,
            "The approval no longer holds (an approver's right to approve was withdrawn); \
             nothing was changed. Call again to ask anew.",
        ))
    }

    /// A cancel: nothing is consumed, so the same state may be answered again, unless it was
    /// already used, which is refused like any other replay.
    pub(super) async fn cancel(&self, claims: &Claims) -> Result<Decision, Refused> {
        unused(self.config, claims).await?;
        self.answered("cancel", claims);
        self.config.report(DecisionEvent::Cancelled {
            tool: &self.call.tool,
            principal: self.principal,
            nonce: &claims.nonce,
        });
        Ok(self.outcome(
            Outcome::Cancelled,
            "The confirmation was cancelled; nothing was changed.",
        ))
    }

    /// A decline (or an acceptance with `confirm: false`): consume the nonce, run nothing.
    pub(super) async fn decline(
        &self,
        claims: &Claims,
        unconfirmed: bool,
    ) -> Result<Decision, Refused> {
        let request = claim_request(self.config, claims);
        claim(self.config, claims, &request).await?;
        self.answered("decline", claims);
        // Best effort: if completing fails the entry stays InFlight, which refuses replays just
        // the same.
        let _ = self.config.store.complete(&request).await;
        self.config.report(DecisionEvent::Declined {
            tool: &self.call.tool,
            principal: self.principal,
            nonce: &claims.nonce,
            unconfirmed,
        });
        Ok(self.outcome(Outcome::Declined, "The user declined; nothing was changed."))
    }
}
