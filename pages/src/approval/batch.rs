//! The approval page's batch: approvals of one principal that wait together (tools of one
//! [`batch_group`](mcp_confirm::ToolPolicy::batch_group), made within the page's window of each other)
//! are shown as one list and decided in one post: approve all, decline all, or approve some.
//!
//! The form binds the exact set shown: its anti-forgery token is for that set's digest, and the
//! post is refused, changing nothing, unless the members it names are still that set, each
//! undecided and unanswered. The decision is kept once per set (a second one, from another tab
//! or instance, is answered 409 and changes nothing), then applied to each member
//! ([`mcp_confirm::approval::batch`]).

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use maud::{Markup, html};

use super::html::{notice, page, unavailable};
use super::page::{Access, ApprovalPage};
use crate::anti_forgery::{FormPurpose, form_refused};
use crate::form::{form_value, form_values};
use crate::skeleton::http_date;
use crate::visitor::Visitor;
use mcp_confirm::Principal;
use mcp_confirm::approval::batch::{self, BatchDecision, MAX_BATCH, SetDigest};
use mcp_confirm::approval::{Approval, ApprovalId, Decider, Decision};

/// What a batch post asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Approve every member; none runs unless all were approved.
    All,
    /// Approve the rows ticked, decline the rest.
    Some,
    /// Decline every member.
    None,
}

impl ApprovalPage {
    /// The batch `anchor` belongs to for `principal`, oldest first, `anchor` among them: its
    /// principal's undecided approvals that [`batch::batchable`] admits with it, that the client
    /// has not answered and that `principal` may decide. `None` with fewer than two, or when the
    /// store cannot say (the approval is then shown alone).
    pub(super) async fn batch_of(
        &self,
        anchor: &Approval,
        principal: &Principal,
    ) -> Option<Vec<Approval>> {
        anchor.batch_group.as_ref()?;
        let store = self.desk.approvals()?;
        let siblings = store
            .siblings(&anchor.audience, &anchor.principal)
            .await
            .ok()?;
        let mut members = Vec::new();
        for a in siblings {
            if members.len() >= MAX_BATCH {
                break;
            }
            if self.may_join(anchor, &a, principal).await {
                members.push(a);
            }
        }
        (members.len() >= 2 && members.iter().any(|a| a.id == anchor.id)).then_some(members)
    }

    /// Whether `a` may be decided in one batch with `anchor` by `principal`: `anchor` itself
    /// while undecided, or an approval [`batch::batchable`] with it; one the rule lets
    /// `principal` decide and the client has not answered. The page's list and its post ask
    /// the same question.
    async fn may_join(&self, anchor: &Approval, a: &Approval, principal: &Principal) -> bool {
        let fits = (a.id == anchor.id && a.decision.is_none())
            || batch::batchable(anchor, a, self.batch_window);
        fits && self.desk.admits(a, principal) && !self.desk.answered_by_client(a).await
    }

    /// The batch as a list, with its one decision form.
    pub(super) fn show_batch(
        &self,
        anchor: &Approval,
        members: &[Approval],
        visitor: &Visitor,
        error: Option<&str>,
    ) -> Response<Full<Bytes>> {
        let set = SetDigest::of(members);
        let token = self.tokens().issue(FormPurpose::Batch(&set), visitor);
        page(
            StatusCode::OK,
            &format!("Approve {} requests?", members.len()),
            render(anchor, members, &set, &token, error),
        )
    }

    /// A batch post: the set it names, re-read and checked against what was shown, decided once.
    #[allow(clippy::too_many_lines)] // one check after another, each with its answer
    pub(super) async fn decide_batch(
        &self,
        id: ApprovalId,
        visitor: &Visitor,
        body: &[u8],
    ) -> Response<Full<Bytes>> {
        let principal = &visitor.principal;
        let Some(set) = form_value(body, "set")
            .as_deref()
            .and_then(SetDigest::from_hex)
        else {
            return notice(StatusCode::BAD_REQUEST, "Refused", "Send the page's form.");
        };
        if !self
            .tokens()
            .accepts(FormPurpose::Batch(&set), visitor, body)
        {
            return form_refused(
                &self.desk,
                "approval_page",
                principal,
                "batch POST without a valid anti-forgery token",
            );
        }
        let (anchor, caller) = match self
            .access(id, principal, "batch decided by someone it does not admit")
            .await
        {
            Ok((approval, Access::Decide { caller })) => (approval, caller),
            Ok((approval, Access::Watch)) => {
                self.desk.refused(
                    &approval.tool,
                    principal,
                    "the caller decided their own batch where others must",
                );
                return super::html::not_yours();
            }
            Err(refusal) => return refusal,
        };
        let Some(store) = self.desk.approvals() else {
            return unavailable();
        };
        // Decided before (another tab, another instance): the kept decision stands, and is
        // applied to any member it has not reached yet.
        match store.batch(set).await {
            Ok(Some(kept)) => return self.already_decided(&anchor, &kept, principal).await,
            Ok(None) => {}
            Err(_) => return unavailable(),
        }
        // A batch approves its calls as asked: narrowing (or naming a tool) is for one call on
        // its own page.
        let narrowing = form_urlencoded::parse(body)
            .any(|(n, _)| n.starts_with("narrow-") || n == "tool" || n == "name");
        if narrowing {
            return notice(
                StatusCode::BAD_REQUEST,
                "Refused",
                "A batch approves its requests as asked. To narrow one, decide it on its own \
                 page. Nothing changed.",
            );
        }
        let ask = match form_value(body, "decision").as_deref() {
            Some("approve_all") => Ask::All,
            Some("approve_some") => Ask::Some,
            Some("decline_all") => Ask::None,
            _ => return notice(StatusCode::BAD_REQUEST, "Refused", "Approve or decline."),
        };
        // The members named, re-read: still the set shown, each still undecided, unanswered,
        // batchable with this one and the visitor's to decide.
        let ids: Vec<ApprovalId> = form_values(body, "member", MAX_BATCH + 1)
            .iter()
            .filter_map(|m| ApprovalId::from_hex(m))
            .collect();
        let mut members: Vec<Approval> = Vec::with_capacity(ids.len());
        let mut intact = (2..=MAX_BATCH).contains(&ids.len()) && ids.contains(&id);
        for member in &ids {
            if !intact {
                break;
            }
            let Ok(found) = store.approval(*member).await else {
                return unavailable();
            };
            intact = match found {
                Some(a)
                    if !members.iter().any(|m| m.id == a.id)
                        && self.may_join(&anchor, &a, principal).await =>
                {
                    members.push(a);
                    true
                }
                _ => false,
            };
        }
        if !intact || SetDigest::of(&members) != set {
            self.desk.refused(
                &anchor.tool,
                principal,
                "batch decided after its set changed",
            );
            return notice(
                StatusCode::CONFLICT,
                "The requests changed",
                "Some of these requests were decided, answered or withdrawn since the page was \
                 shown. Nothing changed; reload the page to see what still waits.",
            );
        }
        let ticked = form_values(body, "approve", MAX_BATCH);
        let mut decided = Vec::with_capacity(members.len());
        for member in &members {
            let approve = match ask {
                Ask::All => true,
                Ask::None => false,
                Ask::Some => ticked.iter().any(|t| *t == member.id.to_hex()),
            };
            if !approve {
                decided.push((member.id, Decision::Declined));
                continue;
            }
            let chosen = match member.choices.len() {
                0 => String::new(),
                1 => member.choices[0].id.clone(),
                _ => match form_value(body, &format!("choice-{}", member.id.to_hex())) {
                    Some(c) if member.choices.iter().any(|o| o.id == c) => c,
                    _ => {
                        return self.show_batch(
                            &anchor,
                            &members,
                            visitor,
                            Some("Choose one record in every request you approve."),
                        );
                    }
                },
            };
            decided.push((
                member.id,
                Decision::Approved {
                    chosen,
                    standing: false,
                    narrowed: None,
                },
            ));
        }
        let shown: Vec<(&Approval, Decision)> = members
            .iter()
            .zip(decided)
            .map(|(a, (_, d))| (a, d))
            .collect();
        let decider = Decider::new(principal.subject(), principal.roles(), caller);
        let kept = BatchDecision::new(&shown, &decider, ask == Ask::All, self.desk.now());
        if kept.set != set || kept.principal != anchor.principal || kept.audience != anchor.audience
        {
            return unavailable();
        }
        match store.record_batch(&kept).await {
            Ok(true) => {}
            Ok(false) => {
                // Another decision of this set won the race: it stands.
                return match store.batch(set).await {
                    Ok(Some(other)) => self.already_decided(&anchor, &other, principal).await,
                    _ => unavailable(),
                };
            }
            Err(_) => return unavailable(),
        }
        self.desk.report_batch(&kept, principal);
        let Ok(applied) = batch::apply(store, &kept).await else {
            // Kept: the next post of this set, or a member's retry, applies the rest.
            return unavailable();
        };
        for (member, decision) in &kept.members {
            if let Some(approval) = members.iter().find(|a| a.id == *member)
                && applied.decided.contains(member)
            {
                let mut marked = approval.clone();
                marked.batch = Some(kept.mark());
                self.desk.report_decided(&marked, principal, decision, true);
            }
        }
        let missed = applied.missed.len();
        let approved = kept.approved();
        let text = match (approved, missed) {
            (0, 0) => "Declined, every one. Nothing will be changed; return to your client.".into(),
            (_, 0) => format!(
                "{approved} of {} approved. Return to your client and continue: each request \
                 runs there.",
                kept.members.len()
            ),
            _ => format!(
                "{approved} of {} approved, but {missed} had been decided elsewhere and keep \
                 that decision{}.",
                kept.members.len(),
                if kept.all_or_nothing {
                    "; you approved all or nothing, so none of them will run"
                } else {
                    ""
                }
            ),
        };
        notice(StatusCode::OK, "Done", &text)
    }

    /// A set decided before: that decision stands (applied to any member it has not reached),
    /// and this post changes nothing.
    async fn already_decided(
        &self,
        anchor: &Approval,
        kept: &BatchDecision,
        principal: &Principal,
    ) -> Response<Full<Bytes>> {
        if kept.principal != anchor.principal || kept.audience != anchor.audience {
            return super::html::gone();
        }
        if let Some(store) = self.desk.approvals()
            && batch::apply(store, kept).await.is_err()
        {
            return unavailable();
        }
        self.desk
            .refused(&anchor.tool, principal, "batch decided twice");
        notice(
            StatusCode::CONFLICT,
            "Already decided",
            "These requests were already decided together; nothing changed.",
        )
    }
}

/// The list and its form: one row per request, with its tool, arguments and record.
fn render(
    anchor: &Approval,
    members: &[Approval],
    set: &SetDigest,
    token: &str,
    error: Option<&str>,
) -> Markup {
    html! {
        @if let Some(error) = error {
            p class="error" role="alert" { (error) }
        }
        p class="message" {
            (anchor.subject) " asked for " (members.len()) " changes at once. Decide them together: "
            "approve all (none runs unless all are approved), approve the ticked ones, or decline all. "
            "Each request still runs on its own, when its client continues."
        }
        p { a href={ "?one" } id="one" { "Decide only this request" } }
        form method="post" {
            input type="hidden" name="csrf" value=(token);
            input type="hidden" name="set" value=(set.to_hex());
            table id="batch" {
                thead { tr { th { "Approve" } th { "Tool" } th { "What" } th { "Arguments" } th { "Record" } th { "Expires" } } }
                tbody {
                    @for a in members {
                        @let hex = a.id.to_hex();
                        tr id={ "member-" (hex) } {
                            td {
                                input type="hidden" name="member" value=(hex);
                                input type="checkbox" name="approve" value=(hex) id={ "approve-" (hex) } checked;
                            }
                            td class="tool" { (a.tool) }
                            td class="message" { (a.message) }
                            td class="arguments" {
                                @match &a.shown_arguments {
                                    Some(text) => code { (text) },
                                    None => em { "too large to show" },
                                }
                            }
                            td class="record" {
                                @if a.choices.len() == 1 {
                                    strong { (a.choices[0].id) } " " (a.choices[0].label)
                                    @if let Some(version) = &a.choices[0].version {
                                        " " span class="version" { "version " (version) }
                                    }
                                } @else {
                                    @for (i, choice) in a.choices.iter().enumerate() {
                                        label {
                                            input type="radio" name={ "choice-" (hex) } id={ "choice-" (hex) "-" (i) } value=(choice.id);
                                            " " strong { (choice.id) } " " (choice.label)
                                            @if let Some(version) = &choice.version {
                                                " " span class="version" { "version " (version) }
                                            }
                                        }
                                        br;
                                    }
                                }
                            }
                            td { (http_date(a.expires_at)) }
                        }
                    }
                }
            }
            p {
                button type="submit" name="decision" value="approve_all" id="approve-all" { "Approve all" }
                " "
                button type="submit" name="decision" value="approve_some" id="approve-some" { "Approve ticked, decline the rest" }
                " "
                button type="submit" name="decision" value="decline_all" id="decline-all" { "Decline all" }
            }
        }
    }
}
