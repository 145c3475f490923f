//! The standing-approvals page: the person, signed in, sees the standing approvals she gave in
//! this deployment (tool, scope, uses left, expiry) and revokes one or all of them.
//!
//! It keeps the approval page's rules: only the principal authentication names (never the
//! layer's local one), reading changes nothing, a revocation is a `POST` from the page's own
//! origin with an anti-forgery token bound to this page, the principal and the session the page
//! was shown in, good for [`DEFAULT_FORM_TTL`] (`crate::FormTokens`), and every answer
//! forbids framing, caching and scripts. Another principal's id revokes nothing and is answered
//! like an id that does not exist.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;

use crate::anti_forgery::{FormPurpose, FormTokens, form_refused};
use crate::defaults::DEFAULT_FORM_TTL;
use crate::entrance::{Entrance, Entry};
use crate::form::form_value;
use crate::skeleton::{http_date, notice, page};
use crate::visitor::Visitor;
use maud::{Markup, html};
use mcp_confirm::StandingApprovals;
use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::store::standing::{Standing, StandingId};

/// The page's channel name in the audit log.
const CHANNEL: &str = "standing_page";

/// The standing-approvals page: `GET` lists the signed-in principal's standing approvals, `POST`
/// revokes one (`revoke=<id>`) or all (`revoke=all`). Get it from
/// [`LayerPages::standing_page`](crate::LayerPages::standing_page) or
/// [`StandingPages::page`](crate::StandingPages::page).
#[derive(Clone)]
pub struct StandingPage {
    approvals: StandingApprovals,
    desk: ApprovalDesk,
    url: String,
    sign_in: Option<String>,
    form_ttl: Duration,
}

impl std::fmt::Debug for StandingPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandingPage")
            .field("url", &self.url)
            .field("sign_in", &self.sign_in)
            .field("form_ttl", &self.form_ttl)
            .finish_non_exhaustive()
    }
}

impl StandingPage {
    /// The page where a signed-in person lists and revokes her standing approvals: a tower
    /// service to mount at `url` (the page's own absolute URL, e.g.
    /// `https://notes.example/standing`: its origin is the only one a revocation may come from),
    /// behind the same authentication as the [approval page](crate::LayerPages::approval_page).
    /// `None` when the layer keeps no standing approvals.
    /// The page over `approvals`, the standing approvals of `desk`'s layer.
    pub(crate) fn of(approvals: StandingApprovals, desk: ApprovalDesk, url: String) -> Self {
        Self {
            approvals,
            desk,
            url,
            sign_in: None,
            form_ttl: DEFAULT_FORM_TTL,
        }
    }

    /// Where a person who is not signed in is sent: a link to `url?next=<this page's path>`. The
    /// sign-in is the deployment's own; it must not be a way to sign in to the MCP endpoint.
    pub fn sign_in_url(mut self, url: impl Into<String>) -> Self {
        self.sign_in = Some(url.into());
        self
    }

    /// How long the page's forms stay good once shown (default
    /// [`DEFAULT_FORM_TTL`](crate::DEFAULT_FORM_TTL), 30 minutes); a form posted later
    /// is refused, and the page asks to be reloaded.
    #[must_use]
    pub fn form_ttl(mut self, ttl: Duration) -> Self {
        self.form_ttl = ttl;
        self
    }

    fn tokens(&self) -> FormTokens<'_> {
        FormTokens::new(&self.desk, self.form_ttl)
    }

    async fn answer<B>(self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let entrance = Entrance {
            // Only who authentication says; never the layer's local principal.
            desk: &self.desk,
            posts: true,
            origin: Some(&self.url),
            sign_in: self.sign_in.as_deref(),
            sign_in_title: "Sign in to see your standing approvals",
            channel: CHANNEL,
            name: "the standing-approvals page",
            lists: crate::form::no_lists,
        };
        match entrance.enter(request).await {
            Ok(Entry::Show(visitor)) => self.show(&visitor, None).await,
            Ok(Entry::Post(visitor, body)) => self.revoke(&visitor, &body).await,
            Err(answer) => answer,
        }
    }

    /// The principal's live standing approvals, each with its revoke button.
    async fn show(&self, visitor: &Visitor, note: Option<&str>) -> Response<Full<Bytes>> {
        let live = match self.approvals.list(&visitor.principal).await {
            Ok(live) => live,
            Err(_) => return unavailable(),
        };
        let token = self.tokens().issue(FormPurpose::StandingPage, visitor);
        page(
            StatusCode::OK,
            "Your standing approvals",
            render(&live, &token, &self.url, note),
        )
    }

    /// Revokes what the form names, once the anti-forgery token is good.
    async fn revoke(&self, visitor: &Visitor, body: &[u8]) -> Response<Full<Bytes>> {
        if !self
            .tokens()
            .accepts(FormPurpose::StandingPage, visitor, body)
        {
            return form_refused(
                &self.desk,
                CHANNEL,
                &visitor.principal,
                "standing page POST without a valid anti-forgery token",
            );
        }
        let which = match form_value(body, "revoke").as_deref() {
            Some("all") => None,
            Some(id) => match StandingId::from_hex(id) {
                Some(id) => Some(id),
                None => return self.show(visitor, Some("Nothing to revoke.")).await,
            },
            None => {
                return notice(StatusCode::BAD_REQUEST, "Refused", "Choose what to revoke.");
            }
        };
        match self.approvals.revoke(&visitor.principal, which).await {
            Ok(0) => self.show(visitor, Some("Nothing to revoke.")).await,
            Ok(1) => {
                self.show(visitor, Some("Revoked one standing approval."))
                    .await
            }
            Ok(n) => {
                self.show(visitor, Some(&format!("Revoked {n} standing approvals.")))
                    .await
            }
            Err(_) => unavailable(),
        }
    }
}

crate::service::page_service!(StandingPage);

fn unavailable() -> Response<Full<Bytes>> {
    notice(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "Your standing approvals could not be read right now. Try again in a moment.",
    )
}

/// The list, one revoke form per approval, and one to revoke them all.
fn render(live: &[Standing], token: &str, url: &str, note: Option<&str>) -> Markup {
    html! {
        @if let Some(note) = note {
            p class="note" role="status" { (note) }
        }
        @if live.is_empty() {
            p id="none" {
                "You have no standing approvals: every confirmed tool asks you each time."
            }
        } @else {
            table id="standing" {
                thead {
                    tr { th { "Tool" } th { "Covers" } th { "Uses left" } th { "Until" } th {} }
                }
                tbody {
                    @for standing in live {
                        @let id = standing.id.to_hex();
                        tr id={ "standing-" (id) } {
                            td class="tool" { (standing.tool) }
                            td class="scope" { (mcp_confirm::Candidate::shown_label(&standing.scope, 80)) }
                            td class="left" {
                                (standing.uses.saturating_sub(standing.used)) " of " (standing.uses)
                            }
                            td class="until" { (http_date(standing.expires_at)) }
                            td {
                                form method="post" action=(url) {
                                    input type="hidden" name="csrf" value=(token);
                                    button type="submit" name="revoke" value=(id) { "Revoke" }
                                }
                            }
                        }
                    }
                }
            }
            form method="post" action=(url) {
                input type="hidden" name="csrf" value=(token);
                p {
                    button type="submit" name="revoke" value="all" id="revoke-all" {
                        "Revoke all"
                    }
                }
            }
        }
    }
}
