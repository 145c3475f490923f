//! The way into every page, the same for each: the methods it serves, a signed-in visitor (else
//! the sign-in page), and for a post its own origin and a bounded form body.

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::Full;
use maud::html;

use super::anti_forgery::same_origin;
use super::form::{read_form, repeated_refused, repeats};
use super::skeleton::{notice, page};
use super::visitor::Visitor;
use mcp_confirm::approval::ApprovalDesk;

/// The way into a page, the same for each: what it is, and where a visitor who must sign in is
/// sent.
pub(crate) struct Entrance<'a> {
    /// The layer: who authentication says the visitor is, and where refusals are reported.
    pub(crate) desk: &'a ApprovalDesk,
    /// Whether the page takes form posts (else `GET` only).
    pub(crate) posts: bool,
    /// The URL whose origin a post must come from.
    pub(crate) origin: Option<&'a str>,
    /// The deployment's sign-in, and the title of the page that links to it.
    pub(crate) sign_in: Option<&'a str>,
    pub(crate) sign_in_title: &'a str,
    /// The page's channel name in the audit log, and its name in a refusal ("the passkey page").
    pub(crate) channel: &'static str,
    pub(crate) name: &'static str,
    /// The fields the page's forms carry as lists (checkboxes of one name): any other field a
    /// post repeats refuses it whole ([`no_lists`](super::form::no_lists): none).
    pub(crate) lists: fn(&str) -> bool,
}

/// A request that came in: to show the page, or a form post (its body read, its token not yet
/// checked: the form's purpose may depend on what the page finds).
pub(crate) enum Entry {
    /// A `GET`: show the page.
    Show(Visitor),
    /// A `POST` from the page's origin, and its form body.
    Post(Visitor, Bytes),
}

impl Entrance<'_> {
    /// The first half of the preamble: a method the page serves, and a signed-in visitor (else
    /// the sign-in page). `true` with a post. `Err`: the page to answer instead.
    // The error is the page's answer, made once for a refused request: boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    pub(crate) fn admit<B>(
        &self,
        request: &Request<B>,
    ) -> Result<(Visitor, bool), Response<Full<Bytes>>> {
        let post = request.method() == Method::POST && self.posts;
        if request.method() != Method::GET && !post {
            return Err(method_not_allowed(if self.posts {
                "GET, POST"
            } else {
                "GET"
            }));
        }
        match Visitor::of(
            self.desk.principals(),
            request.headers(),
            request.extensions(),
        ) {
            Some(visitor) => Ok((visitor, post)),
            None => Err(sign_in(
                self.sign_in,
                request.uri().path(),
                self.sign_in_title,
            )),
        }
    }

    /// The whole preamble: [`admit`](Self::admit), then for a post, its own origin and a form
    /// body of at most [`MAX_FORM_BYTES`](super::form::MAX_FORM_BYTES) that repeats no field
    /// but the page's [`lists`](Self::lists).
    pub(crate) async fn enter<B>(&self, request: Request<B>) -> Result<Entry, Response<Full<Bytes>>>
    where
        B: Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (visitor, post) = self.admit(&request)?;
        if !post {
            return Ok(Entry::Show(visitor));
        }
        if let Err(refusal) = same_origin(request.headers(), self.origin) {
            self.desk
                .page_refused(self.channel, &visitor.principal, refusal);
            return Err(notice(
                StatusCode::FORBIDDEN,
                "Refused",
                &format!("This request did not come from {}.", self.name),
            ));
        }
        let (parts, body) = request.into_parts();
        let body = read_form(&parts.headers, body).await?;
        if repeats(&body, self.lists) {
            return Err(repeated_refused(
                self.desk,
                self.channel,
                &visitor.principal,
            ));
        }
        Ok(Entry::Post(visitor, body))
    }
}

/// The sign-in page for a visitor with no principal: a link to `sign_in?next=<path>` when the
/// deployment has a sign-in.
fn sign_in(sign_in: Option<&str>, path: &str, title: &str) -> Response<Full<Bytes>> {
    let link = match sign_in {
        Some(url) => {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("next", path)
                .finish();
            html! { p { a href={ (url) "?" (query) } { "Sign in" } ", then come back." } }
        }
        None => html! { p { "Sign in, then reload this page." } },
    };
    page(StatusCode::UNAUTHORIZED, title, link)
}

/// A `405 Method Not Allowed` page naming what is.
fn method_not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut response = page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", html! {});
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}
