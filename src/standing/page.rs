//! The standing-approvals page: the person, signed in, sees the standing approvals she gave in
//! this deployment (tool, scope, uses left, expiry) and revokes one or all of them.
//!
//! It keeps the approval page's rules: only the principal authentication names (never the
//! layer's local one), reading changes nothing, a revocation is a `POST` from the page's own
//! origin with an anti-forgery token bound to the principal, and every answer forbids framing,
//! caching and scripts. Another principal's id revokes nothing and is answered like an id that
//! does not exist.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use sha2::{Digest, Sha256};

use super::StandingApprovals;
use crate::audit;
use crate::kernel::{BoxFuture, hex, unhex};
use crate::page::{
    escape, form_value, http_date, method_not_allowed, page, read_form, same_origin, sign_in,
};
use crate::principal::Principal;
use crate::store::standing::{Standing, StandingId};

/// The page's channel name in the audit log.
const CHANNEL: &str = "standing_page";

/// The standing-approvals page: `GET` lists the signed-in principal's standing approvals, `POST`
/// revokes one (`revoke=<id>`) or all (`revoke=all`). Get it from
/// [`StandingApprovals::page`].
#[derive(Clone)]
pub struct StandingPage {
    approvals: StandingApprovals,
    url: String,
    sign_in: Option<String>,
}

impl std::fmt::Debug for StandingPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandingPage")
            .field("url", &self.url)
            .field("sign_in", &self.sign_in)
            .finish_non_exhaustive()
    }
}

impl StandingPage {
    pub(super) fn new(approvals: StandingApprovals, url: String) -> Self {
        Self {
            approvals,
            url,
            sign_in: None,
        }
    }

    /// Where a person who is not signed in is sent: a link to `url?next=<this page's path>`. The
    /// sign-in is the deployment's own; it must not be a way to sign in to the MCP endpoint.
    pub fn sign_in_url(mut self, url: impl Into<String>) -> Self {
        self.sign_in = Some(url.into());
        self
    }

    async fn answer<B>(self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let method = request.method().clone();
        if method != Method::GET && method != Method::POST {
            return method_not_allowed("GET, POST");
        }
        // Only who authentication says; never the layer's local principal.
        let principal = self
            .approvals
            .config
            .principal
            .extract(request.extensions());
        let Some(principal) = principal else {
            let path = request.uri().path().to_owned();
            return sign_in(
                self.sign_in.as_deref(),
                &path,
                "Sign in to see your standing approvals",
            );
        };
        if method == Method::GET {
            return self.show(&principal, None).await;
        }
        if let Err(refusal) = same_origin(request.headers(), Some(&self.url)) {
            audit::page_refused(CHANNEL, &principal, refusal);
            return page(
                StatusCode::FORBIDDEN,
                "Refused",
                "<p>This request did not come from the standing-approvals page.</p>",
            );
        }
        let (parts, body) = request.into_parts();
        let body = match read_form(&parts.headers, body).await {
            Ok(body) => body,
            Err(refusal) => return refusal,
        };
        self.revoke(&principal, &body).await
    }

    /// The anti-forgery token of this page for `subject`: the page key's MAC over a purpose of
    /// its own, so no approval page token is one here.
    fn token(&self, subject: &str) -> [u8; 32] {
        self.approvals
            .config
            .sealer
            .keys()
            .csrf_token(&purpose(), subject)
    }

    /// The principal's live standing approvals, each with its revoke button.
    async fn show(&self, principal: &Principal, note: Option<&str>) -> Response<Full<Bytes>> {
        let live = match self.approvals.list(principal).await {
            Ok(live) => live,
            Err(_) => return unavailable(),
        };
        let token = hex(&self.token(principal.subject()));
        page(
            StatusCode::OK,
            "Your standing approvals",
            &render(&live, &token, &self.url, note),
        )
    }

    /// Revokes what the form names, once the anti-forgery token matches.
    async fn revoke(&self, principal: &Principal, body: &[u8]) -> Response<Full<Bytes>> {
        let keys = self.approvals.config.sealer.keys();
        let token_ok = form_value(body, "csrf")
            .as_deref()
            .and_then(unhex::<32>)
            .is_some_and(|token| keys.csrf_matches(&token, &purpose(), principal.subject()));
        if !token_ok {
            audit::page_refused(
                CHANNEL,
                principal,
                "standing page POST without a valid anti-forgery token",
            );
            return page(
                StatusCode::FORBIDDEN,
                "Refused",
                "<p>This form has expired or was not issued to you. Reload the page.</p>",
            );
        }
        let which = match form_value(body, "revoke").as_deref() {
            Some("all") => None,
            Some(id) => match StandingId::from_hex(id) {
                Some(id) => Some(id),
                None => return self.show(principal, Some("Nothing to revoke.")).await,
            },
            None => {
                return page(
                    StatusCode::BAD_REQUEST,
                    "Refused",
                    "<p>Choose what to revoke.</p>",
                );
            }
        };
        match self.approvals.revoke(principal, which).await {
            Ok(0) => self.show(principal, Some("Nothing to revoke.")).await,
            Ok(1) => {
                self.show(principal, Some("Revoked one standing approval."))
                    .await
            }
            Ok(n) => {
                self.show(principal, Some(&format!("Revoked {n} standing approvals.")))
                    .await
            }
            Err(_) => unavailable(),
        }
    }
}

impl<B> tower_service::Service<Request<B>> for StandingPage
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
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

/// What the page's anti-forgery token is bound to besides the principal.
fn purpose() -> [u8; 16] {
    let digest = Sha256::digest(b"mcp-confirm/standing-page/v1");
    let mut purpose = [0u8; 16];
    purpose.copy_from_slice(&digest[..16]);
    purpose
}

fn unavailable() -> Response<Full<Bytes>> {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "<p>Your standing approvals could not be read right now. Try again in a moment.</p>",
    )
}

/// The list, one revoke form per approval, and one to revoke them all.
fn render(live: &[Standing], token: &str, url: &str, note: Option<&str>) -> String {
    let mut html = String::new();
    if let Some(note) = note {
        let _ = write!(
            html,
            "<p class=\"note\" role=\"status\">{}</p>",
            escape(note)
        );
    }
    if live.is_empty() {
        html.push_str(
            "<p id=\"none\">You have no standing approvals: every confirmed tool asks you \
             each time.</p>",
        );
        return html;
    }
    html.push_str(
        "<table id=\"standing\"><thead><tr><th>Tool</th><th>Covers</th><th>Uses left</th>\
         <th>Until</th><th></th></tr></thead><tbody>",
    );
    let action = escape(url);
    for standing in live {
        let id = standing.id.to_hex();
        let _ = write!(
            html,
            "<tr id=\"standing-{id}\"><td class=\"tool\">{}</td><td class=\"scope\">{}</td>\
             <td class=\"left\">{} of {}</td><td class=\"until\">{}</td><td>\
             <form method=\"post\" action=\"{action}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
             <button type=\"submit\" name=\"revoke\" value=\"{id}\">Revoke</button></form>\
             </td></tr>",
            escape(&standing.tool),
            escape(&crate::form::plain_label(&standing.scope, 80)),
            standing.uses.saturating_sub(standing.used),
            standing.uses,
            http_date(standing.expires_at),
        );
    }
    let _ = write!(
        html,
        "</tbody></table><form method=\"post\" action=\"{action}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
         <p><button type=\"submit\" name=\"revoke\" value=\"all\" id=\"revoke-all\">Revoke all\
         </button></p></form>"
    );
    html
}
