//! The approver's inbox: one page listing the approvals waiting for the signed-in principal,
//! newest first, each linking to its approval page. It only reads; every decision is made on
//! the approval page, under its rules (admission, anti-forgery, same origin, passkey).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;

use super::html::{page, unavailable};
use crate::approvers::routes_of;
use crate::config::Config;
use crate::kernel::BoxFuture;
use crate::pages::{Entrance, http_date};
use crate::principal::Principal;
use crate::store::approval::Approval;
use maud::{Markup, html};

/// The most approvals the inbox lists.
pub const INBOX_LIMIT: usize = 50;

/// The inbox: `GET` lists the approvals the signed-in principal may decide and has not yet
/// approved, newest first, with their expiry and each one's link. Get it from
/// [`ConfirmLayer::inbox_page`](crate::ConfirmLayer::inbox_page) and mount it behind the same
/// authentication as the approval page.
#[derive(Clone)]
pub struct InboxPage {
    config: Arc<Config>,
    sign_in: Option<String>,
}

impl std::fmt::Debug for InboxPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxPage")
            .field("sign_in", &self.sign_in)
            .finish_non_exhaustive()
    }
}

impl InboxPage {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Self {
            config,
            sign_in: None,
        }
    }

    /// Where a visitor who is not signed in is sent, as for the
    /// [approval page](crate::approval::ApprovalPage::sign_in_url).
    #[must_use]
    pub fn sign_in_url(mut self, url: impl Into<String>) -> Self {
        self.sign_in = Some(url.into());
        self
    }

    /// The approvals `principal` may decide now, newest first: the store's candidates for their
    /// routes, kept only where the rule admits them (the caller of a four-eyes approval is not
    /// admitted) and they have not approved already.
    pub(crate) async fn waiting(&self, principal: &Principal) -> Result<Vec<Approval>, ()> {
        let Some(approvals) = &self.config.approvals else {
            return Ok(Vec::new());
        };
        let routes = routes_of(principal.subject(), principal.roles());
        let found = approvals
            .inbox(&self.config.audience, &routes, INBOX_LIMIT)
            .await
            .map_err(|_| ())?;
        Ok(found
            .into_iter()
            .filter(|a| {
                let caller = super::page::is_caller(&self.config, a, principal);
                a.approvers
                    .admits(principal.subject(), principal.roles(), caller)
                    && !a
                        .endorsements
                        .iter()
                        .any(|e| e.subject == principal.subject())
            })
            .collect())
    }

    async fn answer<B>(self, request: Request<B>) -> Response<Full<Bytes>> {
        let entrance = Entrance {
            // Only who authentication says, as on the approval page.
            extractor: &*self.config.principal,
            posts: false,
            origin: None,
            sign_in: self.sign_in.as_deref(),
            sign_in_title: "Sign in to see your approvals",
            channel: "inbox",
            name: "the inbox",
        };
        // It only reads: `GET` alone, and nothing of a body is taken.
        let visitor = match entrance.admit(&request) {
            Ok((visitor, _)) => visitor,
            Err(answer) => return answer,
        };
        let Ok(waiting) = self.waiting(&visitor.principal).await else {
            return unavailable();
        };
        page(
            StatusCode::OK,
            "Approvals waiting for you",
            self.render(&waiting),
        )
    }

    fn render(&self, waiting: &[Approval]) -> Markup {
        if waiting.is_empty() {
            return html! { p id="empty" { "Nothing waits for your approval." } };
        }
        let base = self.config.approval_url.as_deref().unwrap_or_default();
        html! {
            ul id="inbox" {
                @for a in waiting {
                    li {
                        a href={ (base) (a.id.to_hex()) } id={ "approval-" (a.id.to_hex()) } {
                            strong { (a.tool) }
                        }
                        " requested by " (a.subject)
                        " · " (a.endorsements.len()) " of " (a.approvers.required_approvals())
                        " approvals · expires " (http_date(a.expires_at))
                        @if a.approvers.needs_passkey() {
                            " · passkey"
                        }
                    }
                }
            }
        }
    }
}

impl<B> tower_service::Service<Request<B>> for InboxPage
where
    B: Send + 'static,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let page = self.clone();
        Box::pin(async move { Ok(page.answer(request).await) })
    }
}
