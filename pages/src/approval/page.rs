//! The approval page of browser-approved tools: the person, signed in as the principal the
//! confirmation is bound to, sees what will happen and approves or declines, once.
//!
//! It is a plain tower service over the layer's `ApprovalDesk`, mounted next to the MCP endpoint
//! behind the same authentication. The URL carries only the approval's opaque id. Reading the page
//! changes nothing; a decision is a `POST` from the page's own origin with an anti-forgery token
//! bound to the approval, the principal and the session the page was shown in, good for
//! [`DEFAULT_FORM_TTL`] (`FormTokens`, in `anti_forgery.rs`). Every answer forbids framing, caching and
//! scripts.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;

use super::html::{self, gone, not_yours, notice, page, render, unavailable, waiting};
use super::narrowing;
use crate::anti_forgery::{FormPurpose, FormTokens, form_refused};
use crate::defaults::{DEFAULT_BATCH_WINDOW, DEFAULT_FORM_TTL};
use crate::entrance::{Entrance, Entry};
use crate::form::{form_value, repeated_refused, repeats};
use crate::visitor::Visitor;
use mcp_confirm::Principal;
use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::approval::{Approval, ApprovalId, Decided, Decider, Decision};

/// What the signed-in principal may do with an approval.
pub(super) enum Access {
    /// Decide it; `caller`: they are the one who asked.
    Decide { caller: bool },
    /// Only see how far it got: the caller, where others decide.
    Watch,
}

/// The fields of the approval page's forms that are lists: a batch's rows (`member`,
/// `approve`) and a narrowing's checkboxes (`narrow-…`; which of those may repeat is the tool's
/// declaration, checked once the approval is read). Every other field comes once.
fn lists(name: &str) -> bool {
    matches!(name, "member" | "approve") || name.starts_with("narrow-")
}

/// The answer to an approval that requires a passkey on a page that cannot verify one.
fn cannot_verify_passkeys() -> Response<Full<Bytes>> {
    notice(
        StatusCode::FORBIDDEN,
        "Passkey required",
        "This approval must be made with a passkey, which this deployment cannot verify. \
         Nothing changed.",
    )
}

/// The answer to a caller who tries to decide their own request where others must.
fn own_request() -> Response<Full<Bytes>> {
    notice(
        StatusCode::FORBIDDEN,
        "Not yours to approve",
        "You asked for this; someone else must approve it. Nothing changed.",
    )
}

/// The approval page: `GET …/{id}` shows the approval, `POST …/{id}` decides it. Get it from
/// [`LayerPages::approval_page`](crate::LayerPages::approval_page).
#[derive(Clone)]
pub struct ApprovalPage {
    pub(super) desk: ApprovalDesk,
    sign_in: Option<String>,
    form_ttl: Duration,
    pub(super) batch_window: Duration,
}

impl std::fmt::Debug for ApprovalPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalPage")
            .field("approval_url", &self.desk.approval_url())
            .field("sign_in", &self.sign_in)
            .field("form_ttl", &self.form_ttl)
            .field("batch_window", &self.batch_window)
            .finish_non_exhaustive()
    }
}

impl ApprovalPage {
    pub(crate) fn new(desk: ApprovalDesk) -> Self {
        Self {
            desk,
            sign_in: None,
            form_ttl: DEFAULT_FORM_TTL,
            batch_window: DEFAULT_BATCH_WINDOW,
        }
    }

    /// Where a person who is not signed in is sent: a link to `url?next=<this page's path>`. The
    /// sign-in is the deployment's own; it must not be a way to sign in to the MCP endpoint.
    pub fn sign_in_url(mut self, url: impl Into<String>) -> Self {
        self.sign_in = Some(url.into());
        self
    }

    /// How long the decision form stays good once shown (default
    /// [`DEFAULT_FORM_TTL`](crate::DEFAULT_FORM_TTL), 30 minutes; the approval's own
    /// expiry still ends it sooner).
    #[must_use]
    pub fn form_ttl(mut self, ttl: Duration) -> Self {
        self.form_ttl = ttl;
        self
    }

    /// How far apart two calls of one principal may have been made for the page to offer them
    /// as one batch (default [`DEFAULT_BATCH_WINDOW`](crate::DEFAULT_BATCH_WINDOW),
    /// 2 minutes; only tools of one [`batch_group`](mcp_confirm::ToolPolicy::batch_group) are ever
    /// batched). `Duration::ZERO` batches only calls made in the same millisecond.
    #[must_use]
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.batch_window = window;
        self
    }

    pub(super) fn tokens(&self) -> FormTokens<'_> {
        FormTokens::new(&self.desk, self.form_ttl)
    }

    async fn answer<B>(self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Some(id) = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .and_then(ApprovalId::from_hex)
        else {
            return notice(StatusCode::NOT_FOUND, "Not found", "No such approval.");
        };
        let entrance = Entrance {
            // Only who authentication says; never the layer's local principal, which would let
            // anyone who reaches the page decide as that user.
            desk: &self.desk,
            posts: true,
            origin: self.desk.approval_url(),
            sign_in: self.sign_in.as_deref(),
            sign_in_title: html::SIGN_IN_TITLE,
            channel: "approval_page",
            name: "the approval page",
            lists,
        };
        // `?one`: this approval alone, even where it could be decided in a batch.
        let one = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "one"));
        match entrance.enter(request).await {
            Ok(Entry::Show(visitor)) => self.show(id, &visitor, None, one).await,
            Ok(Entry::Post(visitor, body)) if form_value(&body, "set").is_some() => {
                self.decide_batch(id, &visitor, &body).await
            }
            Ok(Entry::Post(visitor, body)) => self.decide(id, &visitor, &body).await,
            Err(answer) => answer,
        }
    }

    /// Approval `id`, if it is live and this deployment's, and what `principal` may do with it:
    /// decide it (the rule admits them; `caller` under any key of the ring, so an approval made
    /// before a key rotation stays its caller's), or watch it (the caller, where others decide).
    /// Otherwise the page to answer, and anyone else's attempt (`why`) in the audit log.
    pub(super) async fn access(
        &self,
        id: ApprovalId,
        principal: &Principal,
        why: &str,
    ) -> Result<(Approval, Access), Response<Full<Bytes>>> {
        // Another deployment's approval (sharing this store) is none of this page's business,
        // and a layer without an approval store has no browser-approved tool: nothing to show.
        let approval = match self.desk.approval(id, principal).await {
            Ok(Some(approval)) => approval,
            Ok(None) => return Err(gone()),
            Err(_) => return Err(unavailable()),
        };
        let caller = self.desk.is_caller(&approval, principal);
        if approval
            .approvers
            .admits(principal.subject(), principal.roles(), caller)
        {
            return Ok((approval, Access::Decide { caller }));
        }
        if caller {
            return Ok((approval, Access::Watch));
        }
        self.desk.refused(&approval.tool, principal, why);
        Err(not_yours())
    }

    /// The approval as its principal sees it, with the decision form while it is open.
    pub(super) async fn show(
        &self,
        id: ApprovalId,
        visitor: &Visitor,
        error: Option<&str>,
        one: bool,
    ) -> Response<Full<Bytes>> {
        let principal = &visitor.principal;
        let approval = match self
            .access(
                id,
                principal,
                "approval page opened by someone it does not admit",
            )
            .await
        {
            Ok((approval, Access::Watch)) => return waiting(&approval),
            Ok((approval, Access::Decide { .. })) => approval,
            Err(refusal) => return refusal,
        };
        if approval.decision.is_none() && self.desk.answered_by_client(&approval).await {
            return notice(
                StatusCode::OK,
                "Already answered",
                "Your client already answered this request (declined, or it was used). \
                 Nothing here can change it.",
            );
        }
        if let Some(decision) = &approval.decision {
            let text = match decision {
                Decision::Approved { .. } => "This request was approved.",
                Decision::Declined => "This request was declined.",
                _ => "This request was decided.",
            };
            return notice(
                StatusCode::OK,
                "Already decided",
                &format!("{text} Return to your client to continue."),
            );
        }
        if approval
            .endorsements
            .iter()
            .any(|e| e.subject == principal.subject())
        {
            return page(
                StatusCode::OK,
                "You approved",
                maud::html! {
                    p { "Your approval is recorded; it waits for the others." }
                    p id="progress" { (html::progress(&approval)) }
                },
            );
        }
        if !one && let Some(members) = self.batch_of(&approval, principal).await {
            return self.show_batch(&approval, &members, visitor, error);
        }
        let token = self.tokens().issue(FormPurpose::Approval(&id), visitor);
        let narrowing = match approval.endorsements.first() {
            Some(first) => first.narrowed.as_deref().map(narrowing::render_approved),
            None => narrowing::offered(&self.desk, &approval)
                .map(|(declared, asked)| narrowing::render(&declared, &asked)),
        };
        page(
            StatusCode::OK,
            &format!("Approve {}?", approval.tool),
            render(&approval, &token, error, narrowing),
        )
    }

    /// This approval alone, as a decision on it alone is re-shown with its error.
    async fn show_one(
        &self,
        id: ApprovalId,
        visitor: &Visitor,
        error: Option<&str>,
    ) -> Response<Full<Bytes>> {
        self.show(id, visitor, error, true).await
    }

    /// The passkey step of an approval (feature `passkeys`): the verified credential's id, or
    /// the page to answer (the step itself, or a refusal).
    #[cfg(feature = "passkeys")]
    async fn passkey(
        &self,
        approval: &Approval,
        principal: &Principal,
        chosen: &str,
        narrowed: Option<&str>,
        body: &[u8],
    ) -> Result<String, Response<Full<Bytes>>> {
        let Some(passkeys) = crate::passkey::Passkeys::of(&self.desk) else {
            tracing::error!(target: "mcp_confirm::audit", tool = %approval.tool,
                "an approval requires a passkey and the layer's passkey verifier is not \
                 mcp-confirm-pages' Passkeys: it cannot be approved here");
            return Err(cannot_verify_passkeys());
        };
        super::passkeys::step(
            &self.desk, passkeys, approval, principal, chosen, narrowed, body,
        )
        .await
    }

    /// Without feature `passkeys` a passkey cannot be verified: an approval whose rule requires
    /// one is refused here (and by the store, which finds no passkey).
    #[cfg(not(feature = "passkeys"))]
    async fn passkey(
        &self,
        approval: &Approval,
        _: &Principal,
        _: &str,
        _: Option<&str>,
        _: &[u8],
    ) -> Result<String, Response<Full<Bytes>>> {
        tracing::error!(target: "mcp_confirm::audit", tool = %approval.tool,
            "an approval requires a passkey and mcp-confirm-pages was built without feature \
             `passkeys`: it cannot be approved");
        Err(cannot_verify_passkeys())
    }

    async fn decide(
        &self,
        id: ApprovalId,
        visitor: &Visitor,
        body: &[u8],
    ) -> Response<Full<Bytes>> {
        let principal = &visitor.principal;
        if !self
            .tokens()
            .accepts(FormPurpose::Approval(&id), visitor, body)
        {
            return form_refused(
                &self.desk,
                "approval_page",
                principal,
                "approval POST without a valid anti-forgery token",
            );
        }
        let (approval, caller) = match self
            .access(
                id,
                principal,
                "approval decided by someone it does not admit",
            )
            .await
        {
            Ok((approval, Access::Decide { caller })) => (approval, caller),
            Ok((approval, Access::Watch)) => {
                self.desk.refused(
                    &approval.tool,
                    principal,
                    "the caller decided their own request where others must",
                );
                return own_request();
            }
            Err(refusal) => return refusal,
        };
        // One approval decides no batch rows, and only a list the tool declares repeats.
        if repeats(body, |name| narrowing::is_list(&self.desk, &approval, name)) {
            return repeated_refused(&self.desk, "approval_page", principal);
        }
        if self.desk.answered_by_client(&approval).await {
            self.desk.refused(
                &approval.tool,
                principal,
                "approval decided after the client answered",
            );
            return notice(
                StatusCode::CONFLICT,
                "Already answered",
                "Your client already answered this request; nothing changed.",
            );
        }
        let decision = match form_value(body, "decision").as_deref() {
            Some("decline") => Decision::Declined,
            Some("approve") => {
                let first = approval.endorsements.first().map(|e| e.chosen.clone());
                let chosen = match (approval.choices.len(), form_value(body, "choice")) {
                    (0, _) => String::new(),
                    (_, Some(choice)) => choice,
                    (_, None) if first.is_some() => first.unwrap_or_default(),
                    (1, None) => approval.choices[0].id.clone(),
                    (_, None) => {
                        return self.show_one(id, visitor, Some("Choose one record.")).await;
                    }
                };
                if approval.typed
                    && form_value(body, "typed").as_deref().map(str::trim) != Some(chosen.as_str())
                {
                    return self
                        .show_one(
                            id,
                            visitor,
                            Some("Type the id of the record exactly as shown to approve."),
                        )
                        .await;
                }
                let standing = match form_value(body, "remember").as_deref() {
                    None | Some("once") => false,
                    Some("standing") if approval.standing.is_some() => true,
                    Some(_) => {
                        return self
                            .show_one(id, visitor, Some("Choose how long to allow it."))
                            .await;
                    }
                };
                // The approver's narrowing, checked before anything is recorded.
                let narrowed = match narrowing::of_post(&self.desk, &approval, body) {
                    Ok(narrowed) => narrowed,
                    Err(refused) => {
                        self.desk.refused(&approval.tool, principal, refused.why);
                        return self.show_one(id, visitor, Some(refused.words)).await;
                    }
                };
                if standing && narrowed.is_some() {
                    return self
                        .show_one(
                            id,
                            visitor,
                            Some("A narrowed request is approved only this time."),
                        )
                        .await;
                }
                Decision::Approved {
                    chosen,
                    standing,
                    narrowed,
                }
            }
            _ => {
                return notice(StatusCode::BAD_REQUEST, "Refused", "Approve or decline.");
            }
        };
        let Some(approvals) = self.desk.approvals() else {
            return unavailable();
        };
        let mut decider = Decider::new(principal.subject(), principal.roles(), caller);
        // A rule that requires a passkey: an approval is made with one, bound to this decision,
        // its narrowing included.
        if let Decision::Approved {
            chosen, narrowed, ..
        } = &decision
            && approval.approvers.needs_passkey()
        {
            match self
                .passkey(&approval, principal, chosen, narrowed.as_deref(), body)
                .await
            {
                Ok(credential) => decider = decider.with_passkey(credential),
                Err(step) => return step,
            }
        }
        match approvals.decide(id, decider, decision.clone()).await {
            Ok(Decided::Counted {
                approvals,
                required,
            }) => {
                self.desk
                    .report_decided(&approval, principal, &decision, false);
                page(
                    StatusCode::OK,
                    "Approval recorded",
                    maud::html! {
                        p { "Your approval is recorded. It waits for the others." }
                        p id="progress" { (approvals) " of " (required) " approvals so far." }
                    },
                )
            }
            Ok(Decided::Recorded) => {
                self.desk
                    .report_decided(&approval, principal, &decision, true);
                let text = match decision {
                    Decision::Approved { .. } => {
                        "Approved. Return to your client and continue: the request runs there."
                    }
                    Decision::Declined => {
                        "Declined. Nothing will be changed; return to your client."
                    }
                    _ => "Recorded. Return to your client.",
                };
                notice(StatusCode::OK, "Done", text)
            }
            Ok(Decided::AlreadyDecided) => {
                self.desk
                    .refused(&approval.tool, principal, "approval decided twice");
                notice(
                    StatusCode::CONFLICT,
                    "Already decided",
                    "This request was already decided; nothing changed.",
                )
            }
            Ok(Decided::AlreadyApproved) => {
                self.desk
                    .refused(&approval.tool, principal, "approved twice by one approver");
                notice(
                    StatusCode::CONFLICT,
                    "Already approved",
                    "You already approved this request; an approver counts once.",
                )
            }
            Ok(Decided::OwnRequest) => {
                self.desk.refused(
                    &approval.tool,
                    principal,
                    "the caller decided their own request where others must",
                );
                own_request()
            }
            Ok(Decided::PasskeyRequired) => notice(
                StatusCode::FORBIDDEN,
                "Passkey required",
                "This approval must be made with your passkey.",
            ),
            Ok(Decided::NotYours) => not_yours(),
            Ok(Decided::InvalidChoice) => {
                self.show_one(id, visitor, Some("Choose one of the records shown."))
                    .await
            }
            Ok(Decided::Unknown) => gone(),
            // An answer of a later core this page does not know: nothing it can vouch for.
            Ok(_) => unavailable(),
            Err(_) => unavailable(),
        }
    }
}

crate::service::page_service!(ApprovalPage);
