//! What the approval page renders (the headers every page answer carries are `crate::page`'s).

use std::fmt::Write as _;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

pub(super) use crate::page::page;
use crate::page::{escape, http_date};
use crate::store::approval::{Approval, Decision};

/// The title of the sign-in page a visitor with no principal gets.
pub(super) const SIGN_IN_TITLE: &str = "Sign in to approve";

pub(super) fn gone() -> Response<Full<Bytes>> {
    page(
        StatusCode::NOT_FOUND,
        "Not found",
        "<p>This approval does not exist or has expired. Ask again from your client.</p>",
    )
}

pub(super) fn not_yours() -> Response<Full<Bytes>> {
    page(
        StatusCode::FORBIDDEN,
        "Not yours",
        "<p>This approval is not yours to decide. Sign in as one of its approvers.</p>",
    )
}

/// The caller's view of an approval someone else decides: who asked, and how far it got.
pub(super) fn waiting(approval: &Approval) -> Response<Full<Bytes>> {
    let text = match &approval.decision {
        Some(Decision::Approved { .. }) => "It was approved. Return to your client to continue.",
        Some(Decision::Declined) => "It was declined. Nothing will be changed.",
        None => {
            "It waits for its approvers; your client will see the decision when you continue there."
        }
    };
    page(
        StatusCode::OK,
        "Waiting for approval",
        &format!(
            "<p>Someone {} must approve this request. {text}</p><p id=\"progress\">{}</p>",
            if approval.approvers.admits_caller() {
                "it names"
            } else {
                "other than you"
            },
            progress(approval)
        ),
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
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "<p>The approval could not be read right now. Try again in a moment.</p>",
    )
}

/// The approval's facts and its decision form.
pub(super) fn render(approval: &Approval, token: &str, error: Option<&str>) -> String {
    let mut html = String::new();
    if let Some(error) = error {
        let _ = write!(
            html,
            "<p class=\"error\" role=\"alert\">{}</p>",
            escape(error)
        );
    }
    let _ = write!(
        html,
        "<p class=\"message\">{}</p><dl><dt>Tool</dt><dd id=\"tool\">{}</dd><dt>Requested by</dt>\
         <dd id=\"principal\">{}</dd><dt>Expires</dt><dd id=\"expires\">{}</dd></dl>",
        escape(&approval.message),
        escape(&approval.tool),
        escape(&approval.subject),
        http_date(approval.expires_at)
    );
    if !approval.approvers.is_caller_only() {
        let _ = write!(html, "<p id=\"progress\">{}</p>", progress(approval));
    }
    let _ = write!(
        html,
        "<form method=\"post\"><input type=\"hidden\" name=\"csrf\" value=\"{token}\">"
    );
    // Later approvers approve the first one's choice: only it is offered.
    let first = approval.endorsements.first().map(|e| e.chosen.as_str());
    let choices: Vec<_> = approval
        .choices
        .iter()
        .filter(|c| first.is_none_or(|chosen| c.id == chosen))
        .collect();
    if !choices.is_empty() {
        html.push_str("<fieldset><legend>Which one</legend>");
        let single = choices.len() == 1;
        for (i, choice) in choices.iter().enumerate() {
            let version = choice
                .version
                .as_deref()
                .map(|v| format!(" <span class=\"version\">version {}</span>", escape(v)))
                .unwrap_or_default();
            let _ = write!(
                html,
                "<label><input type=\"radio\" name=\"choice\" id=\"choice-{i}\" value=\"{}\"{}> \
                 <strong>{}</strong> {}{version}</label><br>",
                escape(&choice.id),
                if single { " checked" } else { "" },
                escape(&choice.id),
                escape(&choice.label),
            );
        }
        html.push_str("</fieldset>");
    }
    if let Some(words) = &approval.standing {
        let _ = write!(
            html,
            "<fieldset><legend>How long</legend>\
             <label><input type=\"radio\" name=\"remember\" id=\"remember-once\" value=\"once\" \
             checked> Only this time</label><br>\
             <label><input type=\"radio\" name=\"remember\" id=\"remember-standing\" \
             value=\"standing\"> {}</label></fieldset>",
            escape(words)
        );
    }
    if approval.typed {
        html.push_str(
            "<p><label>Type the id of the record to approve: \
             <input name=\"typed\" id=\"typed\" autocomplete=\"off\"></label></p>",
        );
    }
    html.push_str(
        "<p><button type=\"submit\" name=\"decision\" value=\"approve\" id=\"approve\">Approve</button> \
         <button type=\"submit\" name=\"decision\" value=\"decline\" id=\"decline\">Decline</button></p></form>",
    );
    html
}
