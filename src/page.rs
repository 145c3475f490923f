//! What the crate's human-facing pages (the approval page, the inbox, the standing-approvals
//! and passkey pages) share: who the visitor is and the way in every page takes (the methods it
//! serves, the sign-in, a post from the page's own origin with a form body), the anti-forgery
//! tokens of their forms, the headers every answer carries (no scripts, no framing, no caching,
//! nothing sniffed, no referrer beyond the page's origin), HTML escaping and dates.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Extensions, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use sha2::{Digest, Sha256};

use crate::audit::event::DecisionEvent;
use crate::guard::{media_type, origin_of};
use crate::kernel::{hex, unhex};
use crate::principal::{Principal, PrincipalExtractor};
use crate::store::approval::ApprovalId;
use crate::token::sealer::Sealer;

/// How long a page's form stays good once the page showed it, by default: a form posted later
/// is refused, and the page asks to be reloaded.
pub const DEFAULT_FORM_TTL: Duration = Duration::from_secs(30 * 60);

/// Who a page request comes from: the principal its authentication names (never the layer's
/// local one) and a digest of the session it came in.
pub(crate) struct Visitor {
    pub(crate) principal: Principal,
    session: [u8; 32],
}

impl Visitor {
    /// The visitor of a request: `None` when authentication names no principal. The session is
    /// the authentication's [`PageSession`](crate::PageSession), or else the credentials the
    /// request carried.
    pub(crate) fn of(
        extractor: &dyn PrincipalExtractor,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Option<Self> {
        // A blank principal names no one: the page asks to sign in, as for no principal.
        let principal = extractor.extract(extensions).filter(|p| !p.is_blank())?;
        let session = match extractor.session(extensions) {
            Some(session) => *session.digest(),
            None => credentials_digest(headers),
        };
        Some(Self { principal, session })
    }
}

/// A digest of every `Authorization` and `Cookie` header a request carried, in order: the
/// session of a page whose authentication names none. Each value is tagged and length-prefixed,
/// so no two sets of headers share a digest.
fn credentials_digest(headers: &HeaderMap) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"mcp-confirm/page-session/credentials/v1\0");
    for (tag, name) in [(b'a', header::AUTHORIZATION), (b'c', header::COOKIE)] {
        for value in headers.get_all(name) {
            hash.update([tag]);
            hash.update((value.len() as u64).to_be_bytes());
            hash.update(value.as_bytes());
        }
    }
    hash.finalize().into()
}

/// What a form is for: a token of one is no token of another.
#[derive(Clone, Copy)]
pub(crate) enum FormPurpose<'a> {
    /// Deciding this approval on the approval page.
    Approval(&'a ApprovalId),
    /// Revoking on the standing-approvals page.
    StandingPage,
    /// Registering or removing on the passkey page.
    #[cfg_attr(not(feature = "passkeys"), allow(dead_code))]
    PasskeyPage,
}

impl FormPurpose<'_> {
    fn bytes(self) -> Vec<u8> {
        match self {
            FormPurpose::Approval(id) => [&b"approval:"[..], id.as_bytes()].concat(),
            FormPurpose::StandingPage => b"standing-page".to_vec(),
            FormPurpose::PasskeyPage => b"passkey-page".to_vec(),
        }
    }
}

/// How many bytes of the tag a token carries: with the issue time, 32 bytes, 64 hex digits.
const FORM_TAG_BYTES: usize = 24;

/// The anti-forgery tokens of the pages' forms. A token is its issue time (8 bytes) and a tag
/// (the first [`FORM_TAG_BYTES`] of an HMAC-SHA256 under the ring's anti-forgery key, an HKDF
/// label of its own) over the form's purpose, the visitor's subject and session, the issue time
/// and the expiry it implies. It is good for one purpose, principal and session, from its
/// issue until `ttl` later; checked in constant time under every key of the ring.
pub(crate) struct FormTokens<'a> {
    sealer: &'a Sealer,
    ttl: Duration,
}

impl<'a> FormTokens<'a> {
    /// The tokens under `sealer`'s keys and clock, each good for `ttl`.
    pub(crate) fn new(sealer: &'a Sealer, ttl: Duration) -> Self {
        Self { sealer, ttl }
    }

    /// What the tag covers for a token issued at `issued` (unix seconds).
    fn data(&self, purpose: FormPurpose<'_>, visitor: &Visitor, issued: u64) -> Vec<u8> {
        let expires = issued.saturating_add(self.ttl.as_secs());
        let purpose = purpose.bytes();
        let subject = visitor.principal.subject().as_bytes();
        let mut data = Vec::with_capacity(96 + purpose.len() + subject.len());
        data.extend_from_slice(b"mcp-confirm/page-form/v1\0");
        for part in [&purpose[..], subject] {
            data.extend_from_slice(&(part.len() as u64).to_be_bytes());
            data.extend_from_slice(part);
        }
        data.extend_from_slice(&visitor.session);
        data.extend_from_slice(&issued.to_be_bytes());
        data.extend_from_slice(&expires.to_be_bytes());
        data
    }

    fn now(&self) -> u64 {
        crate::clock::unix_secs(self.sealer.now())
    }

    /// A token for a form `visitor` is shown now, for `purpose`.
    pub(crate) fn issue(&self, purpose: FormPurpose<'_>, visitor: &Visitor) -> String {
        let issued = self.now();
        let tag = self
            .sealer
            .keys()
            .form_tag(&self.data(purpose, visitor, issued));
        let mut token = [0u8; 8 + FORM_TAG_BYTES];
        token[..8].copy_from_slice(&issued.to_be_bytes());
        token[8..].copy_from_slice(&tag[..FORM_TAG_BYTES]);
        hex(&token)
    }

    /// Whether the form `body` posts (its first `csrf` field) a token issued to `visitor` for
    /// `purpose` that has not expired: issued no later than now (give or take the clocks' skew)
    /// and less than `ttl` ago.
    pub(crate) fn accepts(&self, purpose: FormPurpose<'_>, visitor: &Visitor, body: &[u8]) -> bool {
        let Some(token) = form_value(body, "csrf")
            .as_deref()
            .and_then(unhex::<{ 8 + FORM_TAG_BYTES }>)
        else {
            return false;
        };
        let mut issued = [0u8; 8];
        issued.copy_from_slice(&token[..8]);
        let issued = u64::from_be_bytes(issued);
        let now = self.now();
        let fresh = issued <= now.saturating_add(self.sealer.skew().as_secs())
            && now < issued.saturating_add(self.ttl.as_secs());
        let genuine = self
            .sealer
            .keys()
            .form_tag_matches(&self.data(purpose, visitor, issued), &token[8..]);
        fresh & genuine
    }
}

/// The answer to a form posted without a good token (forged, another principal's, another
/// session's, another page's, or expired): one page for all of them. `channel` and `why` go
/// to the audit log.
pub(crate) fn form_refused(
    channel: &'static str,
    principal: &Principal,
    why: &str,
) -> Response<Full<Bytes>> {
    DecisionEvent::PageRefused {
        channel,
        principal,
        reason: why,
    }
    .trace();
    notice(
        StatusCode::FORBIDDEN,
        "Refused",
        "This form has expired or was not issued to you. Reload the page.",
    )
}

/// The way into a page, the same for each: what it is, and where a visitor who must sign in is
/// sent.
pub(crate) struct Entrance<'a> {
    /// Who authentication says the visitor is.
    pub(crate) extractor: &'a dyn PrincipalExtractor,
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
        match Visitor::of(self.extractor, request.headers(), request.extensions()) {
            Some(visitor) => Ok((visitor, post)),
            None => Err(sign_in(
                self.sign_in,
                request.uri().path(),
                self.sign_in_title,
            )),
        }
    }

    /// The whole preamble: [`admit`](Self::admit), then for a post, its own origin and a form
    /// body of at most [`MAX_FORM_BYTES`].
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
            DecisionEvent::PageRefused {
                channel: self.channel,
                principal: &visitor.principal,
                reason: refusal,
            }
            .trace();
            return Err(notice(
                StatusCode::FORBIDDEN,
                "Refused",
                &format!("This request did not come from {}.", self.name),
            ));
        }
        let (parts, body) = request.into_parts();
        let body = read_form(&parts.headers, body).await?;
        Ok(Entry::Post(visitor, body))
    }
}

/// The most a page's form post may hold.
pub(crate) const MAX_FORM_BYTES: usize = 16 * 1024;

/// What every page answer says about itself: no scripts, no framing, no caching, no referrer.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// `at` as an HTTP date (`Thu, 03 Dec 2026 13:13:27 GMT`). httpdate panics past the year
/// 9999, which only a corrupted record could say: such a time shows as the last it can spell.
pub(crate) fn http_date(at: SystemTime) -> String {
    // 9999-12-31 23:59:59 UTC.
    let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    httpdate::fmt_http_date(at.min(last))
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

/// A complete page with the headers every answer carries.
pub(crate) fn page(status: StatusCode, title: &str, body: Markup) -> Response<Full<Bytes>> {
    page_with(status, title, body, None)
}

/// A page of one paragraph, `text`.
pub(crate) fn notice(status: StatusCode, title: &str, text: &str) -> Response<Full<Bytes>> {
    page(status, title, html! { p { (text) } })
}

/// A complete page that runs one inline `script` (the passkey ceremonies: WebAuthn is a
/// browser API). The policy admits that script by its hash and nothing else: no other inline
/// code, no script from anywhere, no connections.
#[cfg_attr(not(feature = "passkeys"), allow(dead_code))]
pub(crate) fn page_with_script(
    status: StatusCode,
    title: &str,
    body: Markup,
    script: &str,
) -> Response<Full<Bytes>> {
    page_with(status, title, body, Some(script))
}

/// What every page looks like: plain, readable, no external resources.
const STYLE: &str = "body{font:16px system-ui,sans-serif;max-width:40em;margin:2em auto;padding:0 1em}\
dt{font-weight:bold}.error{color:#a00}.version{color:#555}button{font-size:1em;padding:.4em 1.2em}";

/// The one page skeleton: the document, its style, its title, the body, and at most one inline
/// script, admitted by the policy through its hash (computed here, from the script's bytes).
fn page_with(
    status: StatusCode,
    title: &str,
    body: Markup,
    script: Option<&str>,
) -> Response<Full<Bytes>> {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let csp = match script {
        None => CSP.to_owned(),
        Some(script) => {
            let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script));
            format!("{CSP}; script-src 'sha256-{hash}'")
        }
    };
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                (body)
                @if let Some(script) = script {
                    script { (PreEscaped(script)) }
                }
            }
        }
    }
    .into_string();
    let mut response = Response::new(Full::new(Bytes::from(html)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether a form post may have come from a page of `page_url`'s origin: a cross-site post is
/// refused before anything is read. A request with neither header is not a browser form post;
/// the anti-forgery token still has to match.
fn same_origin(headers: &HeaderMap, page_url: Option<&str>) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site")
        && site.as_bytes() != b"same-origin"
    {
        return Err("page POST from another site (Sec-Fetch-Site)");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let expected = page_url
        .and_then(|url| url.parse::<http::Uri>().ok())
        .and_then(|uri| origin_of(&uri));
    match expected {
        Some(expected) if origin.as_bytes() == expected.as_bytes() => Ok(()),
        _ => Err("page POST from another origin"),
    }
}

/// A form post's body, if it is `application/x-www-form-urlencoded` and at most
/// [`MAX_FORM_BYTES`]; otherwise the page that refuses it.
async fn read_form<B>(headers: &HeaderMap, body: B) -> Result<Bytes, Response<Full<Bytes>>>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if media_type(headers).as_deref() != Some("application/x-www-form-urlencoded") {
        return Err(notice(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Refused",
            "Send the page's form.",
        ));
    }
    match Limited::new(body, MAX_FORM_BYTES).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(_) => Err(notice(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Refused",
            "The form is too large.",
        )),
    }
}

/// The first value of each name in an `application/x-www-form-urlencoded` body.
pub(crate) fn form_value(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned())
}

/// A `405 Method Not Allowed` page naming what is.
fn method_not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut response = page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", html! {});
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_decode_and_the_first_counts() {
        let body = b"csrf=ab%2Fc&decision=approve&typed=note-7+x&bad=%zz&x=%4&csrf=second";
        assert_eq!(form_value(body, "csrf").as_deref(), Some("ab/c"));
        assert_eq!(form_value(body, "typed").as_deref(), Some("note-7 x"));
        assert_eq!(form_value(body, "bad").as_deref(), Some("%zz"));
        assert_eq!(form_value(body, "x").as_deref(), Some("%4"));
        assert_eq!(form_value(body, "missing"), None);
    }

    #[test]
    fn dates_are_http_dates_and_never_panic() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_303_627);
        assert_eq!(http_date(at), "Thu, 03 Dec 2026 13:13:47 GMT");
        let far = UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 1_000);
        assert_eq!(http_date(far), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn html_escapes_text_and_attributes() {
        let text = "<a href=\"x\">'&'</a>";
        assert_eq!(
            html! { p title=(text) { (text) } }.into_string(),
            "<p title=\"&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;\">\
             &lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;</p>"
        );
    }
}
