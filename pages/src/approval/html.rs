//! What the approval page renders (the headers every page answer carries are `crate::page`'s).

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use maud::{Markup, html};

use crate::skeleton::http_date;
pub(super) use crate::skeleton::{notice, page};
use mcp_confirm::approval::{Approval, Decision};

/// The title of the sign-in page a visitor with no principal gets.
pub(super) const SIGN_IN_TITLE: &str = "Sign in to approve";

pub(crate) fn gone() -> Response<Full<Bytes>> {
    notice(
        StatusCode::NOT_FOUND,
        "Not found",
        "This approval does not exist or has expired. Ask again from your client.",
    )
}

pub(crate) fn not_yours() -> Response<Full<Bytes>> {
    notice(
        StatusCode::FORBIDDEN,
        "Not yours",
        "This approval is not yours to decide. Sign in as one of its approvers.",
    )
}

/// The caller's view of an approval someone else decides: who asked, and how far it got.
pub(super) fn waiting(approval: &Approval) -> Response<Full<Bytes>> {
    let text = match &approval.decision {
        Some(Decision::Approved { .. }) => "It was approved. Return to your client to continue.",
        Some(Decision::Declined) => "It was declined. Nothing will be changed.",
        Some(_) => "It was decided. Return to your client to continue.",
        None => {
            "It waits for its approvers; your client will see the decision when you continue there."
        }
    };
    let who = if approval.approvers.admits_caller() {
        "it names"
    } else {
        "other than you"
    };
    page(
        StatusCode::OK,
        "Waiting for approval",
        html! {
            p { "Someone " (who) " must approve this request. " (text) }
            p id="progress" { (progress(approval)) }
        },
    )
}

/// "1 of 2 approvals so far."
pub(super) fn progress(approval: &Approval) -> String {
    format!(
        "{} of {} approvals so far.",
        approval.endorsements.len(),
        approval.approvers.required_approvals()
    )
}

pub(super) fn unavailable() -> Response<Full<Bytes>> {
    notice(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "The approval could not be read right now. Try again in a moment.",
    )
}

/// The approval's facts and its decision form.
pub(super) fn render(
    approval: &Approval,
    token: &str,
    error: Option<&str>,
    narrowing: Option<Markup>,
) -> Markup {
    // Later approvers approve the first one's choice: only it is offered.
    let first = approval.endorsements.first().map(|e| e.chosen.as_str());
    let choices: Vec<_> = approval
        .choices
        .iter()
        .filter(|c| first.is_none_or(|chosen| c.id == chosen))
        .collect();
    let single = choices.len() == 1;
    html! {
        @if let Some(error) = error {
            p class="error" role="alert" { (error) }
        }
        p class="message" { (approval.message) }
        dl {
            dt { "Tool" } dd id="tool" { (approval.tool) }
            dt { "Requested by" } dd id="principal" { (approval.subject) }
            dt { "Expires" } dd id="expires" { (http_date(approval.expires_at)) }
        }
        @if !approval.approvers.is_caller_only() {
            p id="progress" { (progress(approval)) }
        }
        form method="post" {
            input type="hidden" name="csrf" value=(token);
            @if !choices.is_empty() {
                fieldset {
                    legend { "Which one" }
                    @for (i, choice) in choices.iter().enumerate() {
                        label {
                            input type="radio" name="choice" id={ "choice-" (i) } value=(choice.id)
                                checked[single];
                            " " strong { (choice.id) } " " (choice.label)
                            @if let Some(version) = &choice.version {
                                " " span class="version" { "version " (version) }
                            }
                        }
                        br;
                    }
                }
            }
            @if let Some(words) = &approval.standing {
                fieldset {
                    legend { "How long" }
                    label {
                        input type="radio" name="remember" id="remember-once" value="once" checked;
                        " Only this time"
                    }
                    br;
                    label {
                        input type="radio" name="remember" id="remember-standing" value="standing";
                        " " (words)
                    }
                }
            }
            @if let Some(narrowing) = narrowing {
                (narrowing)
            }
            @if approval.typed {
                p {
                    label {
                        "Type the id of the record to approve: "
                        input name="typed" id="typed" autocomplete="off";
                    }
                }
            }
            p {
                button type="submit" name="decision" value="approve" id="approve" { "Approve" }
                " "
                button type="submit" name="decision" value="decline" id="decline" { "Decline" }
            }
        }
    }
}
