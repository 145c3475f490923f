//! The browser channel: the approval record the page shows, its URL, the page's recorded
//! decision, and whether the approvers' rule still holds when the call is about to run.

use crate::engine::Refused;
use crate::form;
use crate::policy::{ApproverQuery, Candidate};
use crate::protocol::{Ask, RpcError};
use serde_json::Value;

use crate::narrow;
use crate::store::approval::{
    Approval, ApprovalChoice, ApprovalId, ApprovalStore, Decision as ApprovalDecision,
    MAX_SHOWN_ARGUMENTS,
};
use crate::store::batch::{self, SetDigest};
use crate::token::StateError;
use crate::token::claims::Claims;

use super::claim::store_failed;
use super::{Attempt, Decision, Verdict};

impl Attempt<'_> {
    /// Where the browser channel's approvals wait (the builder requires one with such a tool).
    pub(super) fn approvals(&self) -> Result<&dyn ApprovalStore, Refused> {
        self.config.approvals.as_deref().ok_or_else(|| {
            Refused::new(
                RpcError::internal(),
                "browser-approved tool without an approval store",
            )
        })
    }

    /// The approval record the browser channel's page shows and decides.
    pub(super) fn approval(
        &self,
        claims: &Claims,
        candidates: &[Candidate],
        typed_id: bool,
        standing: Option<String>,
    ) -> Approval {
        let policy = self.policy();
        Approval {
            id: ApprovalId::for_nonce(&claims.nonce),
            audience: self.config.audience.clone(),
            nonce: claims.nonce,
            principal: claims.principal,
            subject: self.principal.subject().to_owned(),
            tool: self.call.tool.as_str().to_owned(),
            arguments: Some(claims.arguments),
            message: self.guarded.message(self.call).into_owned(),
            choices: candidates
                .iter()
                .map(|c| {
                    // The same cleaning as the form's labels: one for every channel.
                    let label =
                        form::plain_label(c.label().unwrap_or(c.id()), policy.max_label_chars);
                    ApprovalChoice::new(c.id(), &label, c.version().map(str::to_owned))
                })
                .collect(),
            typed: typed_id,
            standing,
            expires_at: std::time::UNIX_EPOCH + std::time::Duration::from_secs(claims.expires_at),
            approvers: policy.approvers.clone(),
            endorsements: Vec::new(),
            created_at: self.config.sealer.now(),
            decision: None,
            batch_group: policy.batch_group.clone(),
            batch: None,
            shown_arguments: self
                .call
                .arguments()
                .map(Value::to_string)
                .filter(|text| text.len() <= MAX_SHOWN_ARGUMENTS),
        }
    }

    /// Approval `id`'s page.
    pub(super) fn page_url(&self, id: ApprovalId) -> String {
        let base = self.config.approval_url.as_deref().unwrap_or_default();
        format!("{base}{}", id.to_hex())
    }

    /// The browser channel's question: open approval `id`'s page; `status`, where approvers
    /// other than the caller decide, says how far they got.
    pub(super) fn ask_page(&self, id: ApprovalId, token: &str, status: Option<&str>) -> Decision {
        let url = self.page_url(id);
        let ask: Ask<'_, ()> = Ask::Url {
            url: &url,
            elicitation_id: &id.to_hex(),
        };
        let message = self.guarded.message(self.call);
        match status {
            Some(status) => self.ask_with(ask, token, &format!("{message} {status}")),
            None => self.ask_with(ask, token, &message),
        }
    }

    /// The browser channel's answer: the decision recorded on the page for this state.
    pub(super) async fn page_decision(&self, claims: &Claims) -> Result<Verdict, Refused> {
        let id = ApprovalId::for_nonce(&claims.nonce);
        let approval = self.approvals()?.approval(id).await.map_err(store_failed)?;
        // The state verified, so its approval was proposed; gone means a store that lost it.
        // A record that is not this state's (another nonce or principal) decides nothing.
        let Some(approval) = approval.filter(|a| {
            a.nonce == claims.nonce
                && a.principal == claims.principal
                && a.audience == self.config.audience
        }) else {
            return Err(Refused::state(StateError::Consumed));
        };
        match approval.decision.clone() {
            None => {
                // Undecided on the page, but the client may have spent the state already
                // (declined it): a used state gets the one answer every replay gets, never the
                // page again.
                if self
                    .config
                    .store
                    .is_used(claims.nonce, claims.principal)
                    .await
                    .map_err(store_failed)?
                {
                    return Err(Refused::replay(
                        claims.nonce,
                        "consumed",
                        StateError::Consumed,
                    ));
                }
                let status = (!approval.approvers.is_caller_only()).then(|| {
                    format!(
                        "Waiting for approval by {}: {} of {} so far.",
                        if approval.approvers.admits_caller() {
                            "an approver"
                        } else {
                            "someone other than you"
                        },
                        approval.endorsements.len(),
                        approval.approvers.required_approvals()
                    )
                });
                Ok(Verdict::Pending { status })
            }
            Some(ApprovalDecision::Declined) => Ok(Verdict::Decline { unconfirmed: false }),
            Some(ApprovalDecision::Approved {
                chosen,
                standing,
                narrowed,
            }) => {
                if let Err(reason) = self.approvers_hold(&approval).await? {
                    return Ok(Verdict::Withdrawn(reason));
                }
                if let Err(reason) = self.batch_whole(&approval).await? {
                    return Ok(Verdict::Withdrawn(reason));
                }
                // The page offers the standing approval only where the state did; a record that
                // says otherwise is not an answer to this state.
                if standing && claims.standing.is_none() {
                    return Err(Refused::new(
                        RpcError::invalid_input_responses(),
                        "the page's decision names a standing approval the state did not offer",
                    ));
                }
                let chosen = self.policy().resolver.is_some().then_some(chosen);
                // The approver's narrowing, checked again here against the tool's declaration
                // as it is now and the call's own arguments: one that no longer holds spends the
                // confirmation and runs nothing.
                let narrowed = match narrowed {
                    None => None,
                    Some(edit) => match self.narrowing_holds(&edit, chosen.as_deref()) {
                        Ok(edit) => edit,
                        Err(reason) => return Ok(Verdict::Withdrawn(reason)),
                    },
                };
                let Some(chosen) = chosen else {
                    return Ok(Verdict::Accept {
                        chosen: None,
                        standing,
                        narrowed,
                    });
                };
                // Only a signed candidate; the page could offer nothing else, and this checks it.
                if !claims.candidates.iter().any(|c| c.id == chosen) {
                    return Err(Refused::new(
                        RpcError::invalid_input_responses(),
                        "the page's choice is not a signed candidate",
                    ));
                }
                Ok(Verdict::Accept {
                    chosen: Some(chosen),
                    standing,
                    narrowed,
                })
            }
        }
    }

    /// The approver's edit `text` as it applies to this call (with `chosen` written in), if it
    /// narrows anything: only declared arguments, each no wider than the call asked.
    /// `Err(reason)`: it does not hold.
    fn narrowing_holds(
        &self,
        text: &str,
        chosen: Option<&str>,
    ) -> Result<Option<serde_json::Map<String, Value>>, &'static str> {
        let edit = narrow::read_edit(text).map_err(|_| "the approver's narrowing does not read")?;
        let Value::Object(asked) = self.guarded.confirmed_arguments(self.call, chosen) else {
            return Err("the call's arguments are not an object");
        };
        match narrow::narrow(&self.policy().narrowing, &asked, &edit) {
            Ok(Some(_)) => Ok(Some(edit)),
            Ok(None) => Ok(None),
            Err(_) => Err("the approver's narrowing does not hold under the tool's declaration"),
        }
    }

    /// Whether an approval decided by an all-or-nothing batch may run: the batch's kept decision
    /// names it and approves every member, and every member carries it (members it has not
    /// reached yet are decided by it now). `Err(reason)`: it may not, and nothing of the batch
    /// runs from here on. An approval decided on its own, or by a batch that approved some, is
    /// its own.
    async fn batch_whole(&self, approval: &Approval) -> Result<Result<(), &'static str>, Refused> {
        let Some(mark) = approval.batch.as_ref().filter(|m| m.all_or_nothing) else {
            return Ok(Ok(()));
        };
        let Some(set) = SetDigest::from_hex(&mark.set) else {
            return Ok(Err("the approval's batch mark does not read"));
        };
        let store = self.approvals()?;
        let Some(batch) = store.batch(set).await.map_err(store_failed)? else {
            return Ok(Err("the approval's batch decision is gone"));
        };
        let names_it = batch.members.iter().any(|(id, _)| *id == approval.id);
        if !names_it || batch.principal != approval.principal || batch.audience != approval.audience
        {
            return Ok(Err("the batch decision does not name this approval"));
        }
        if !batch::all_approved(store, &batch)
            .await
            .map_err(store_failed)?
        {
            return Ok(Err(
                "a member of its all-or-nothing batch was not approved by that batch",
            ));
        }
        Ok(Ok(()))
    }

    /// Whether the approvals recorded on `approval` still suffice as the approved call is about
    /// to run: made under the rule the policy names now, by as many distinct approvers as it
    /// requires, none of them the caller where it excludes them, each with a passkey where it
    /// requires one, and each still an approver by the policy's [`recheck`](ToolPolicy::recheck_approvers).
    /// `Err(reason)`: they do not.
    pub(super) async fn approvers_hold(
        &self,
        approval: &Approval,
    ) -> Result<Result<(), &'static str>, Refused> {
        let rule = &self.policy().approvers;
        if approval.approvers != *rule {
            return Ok(Err("the approver rule changed since the approval was made"));
        }
        let endorsements = &approval.endorsements;
        let mut subjects: Vec<&str> = endorsements.iter().map(|e| e.subject.as_str()).collect();
        subjects.sort_unstable();
        subjects.dedup();
        if rule.is_caller_only() && endorsements.is_empty() {
            // Recorded before approvers: the caller's own decision, as the page checked it.
            return Ok(Ok(()));
        }
        if subjects.len() != endorsements.len()
            || endorsements.len() < usize::from(rule.required_approvals())
        {
            return Ok(Err("fewer distinct approvals than the rule requires"));
        }
        let chosen = match &approval.decision {
            Some(ApprovalDecision::Approved { chosen, .. }) => Some(chosen.as_str()),
            _ => None,
        };
        for endorsement in endorsements {
            // The caller is who sends this retry: their subject, whatever the record says of
            // itself.
            let by_caller = endorsement.caller || endorsement.subject == self.principal.subject();
            if by_caller && !rule.admits_caller() {
                return Ok(Err("the caller approved their own request"));
            }
            if chosen.is_some_and(|chosen| endorsement.chosen != chosen) {
                return Ok(Err("approvals of different records"));
            }
            if rule.needs_passkey() && endorsement.passkey.is_none() {
                return Ok(Err("an approval without the passkey the rule requires"));
            }
            if rule.still_names(&endorsement.subject) == Some(false) {
                return Ok(Err("an approver the rule does not name"));
            }
            if let Some(check) = &self.policy().recheck_approvers {
                let query = ApproverQuery {
                    approver: endorsement.subject.clone(),
                    tool: self.call.tool.as_str().to_owned(),
                    caller: self.principal.clone(),
                };
                match check.still_approver(query).await {
                    Ok(true) => {}
                    Ok(false) => return Ok(Err("an approver may no longer approve")),
                    Err(e) => {
                        return Err(Refused::new(
                            RpcError::internal(),
                            format!("approver re-check failed: {e}"),
                        ));
                    }
                }
            }
        }
        Ok(Ok(()))
    }
}
