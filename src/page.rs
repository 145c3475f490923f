//! The approval page of browser-approved tools: the person, signed in as the principal the
//! confirmation is bound to, sees what will happen and approves or declines, once.
//!
//! It is a plain tower service over the layer's configuration, mounted next to the MCP endpoint
//! behind the same authentication. The URL carries only the approval's opaque id. Reading the page
//! changes nothing; a decision is a `POST` with an anti-forgery token bound to the approval and the
//! principal, from the page's own origin. Every answer forbids framing, caching and scripts.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};

use crate::audit;
use crate::config::Config;
use crate::kernel::{BoxFuture, hex, unhex};
use crate::principal::Principal;
use crate::store::{Approval, ApprovalId, Decided, Decision};

/// The most a decision's form body may hold.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// What every page answer says about itself: no scripts, no framing, no caching, no referrer.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// The approval page: `GET …/{id}` shows the approval, `POST …/{id}` decides it. Get it from
/// [`ConfirmLayer::approval_page`](crate::ConfirmLayer::approval_page).
#[derive(Clone)]
pub struct ApprovalPage {
    config: Arc<Config>,
    sign_in: Option<String>,
}

impl std::fmt::Debug for ApprovalPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalPage")
            .field("approval_url", &self.config.approval_url)
            .field("sign_in", &self.sign_in)
            .finish_non_exhaustive()
    }
}

impl ApprovalPage {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Self {
            config,
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
        let path = request.uri().path().to_owned();
        let Some(id) = path.rsplit('/').next().and_then(ApprovalId::from_hex) else {
            return page(
                StatusCode::NOT_FOUND,
                "Not found",
                "<p>No such approval.</p>",
            );
        };
        // Only who authentication says; never the layer's local principal, which would let
        // anyone who reaches the page decide as that user.
        let principal = self.config.principal.extract(request.extensions());
        let method = request.method().clone();
        if method != Method::GET && method != Method::POST {
            let mut response = page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", "");
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
            return response;
        }
        let Some(principal) = principal else {
            return self.sign_in_page(&path);
        };
        if method == Method::GET {
            return self.show(id, &principal, None).await;
        }
        if let Err(refusal) = self.same_origin(&request) {
            audit::page_refused(&principal, refusal);
            return page(
                StatusCode::FORBIDDEN,
                "Refused",
                "<p>This request did not come from the approval page.</p>",
            );
        }
        let form_encoded = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(';').next().is_some_and(|t| {
                    t.trim()
                        .eq_ignore_ascii_case("application/x-www-form-urlencoded")
                })
            });
        if !form_encoded {
            return page(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Refused",
                "<p>Send the page's form.</p>",
            );
        }
        let body = match Limited::new(request.into_body(), MAX_FORM_BYTES)
            .collect()
            .await
        {
            Ok(body) => body.to_bytes(),
            Err(_) => {
                return page(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Refused",
                    "<p>The form is too large.</p>",
                );
            }
        };
        self.decide(id, &principal, &body).await
    }

    /// Approval `id`, if it is live and `principal`'s: the one it was made for, under any key of
    /// the ring (an approval made before a key rotation stays its principal's). Otherwise the
    /// page to answer, and anyone else's attempt (`why`) in the audit log.
    async fn owned(
        &self,
        id: ApprovalId,
        principal: &Principal,
        why: &str,
    ) -> Result<Approval, Response<Full<Bytes>>> {
        // A layer without an approval store has no browser-approved tool: nothing to show.
        let Some(approvals) = &self.config.approvals else {
            return Err(gone());
        };
        let approval = match approvals.approval(id).await {
            // Another deployment's approval (sharing this store) is none of this page's business.
            Ok(Some(approval)) if approval.audience == self.config.audience => approval,
            Ok(Some(approval)) => {
                audit::refused(
                    &approval.tool,
                    Some(principal),
                    "approval of another audience",
                );
                return Err(gone());
            }
            Ok(None) => return Err(gone()),
            Err(_) => return Err(unavailable()),
        };
        let owns = self
            .config
            .sealer
            .keys()
            .principal_matches_any(&approval.principal, principal.subject());
        if !owns {
            audit::refused(&approval.tool, Some(principal), why);
            return Err(not_yours());
        }
        Ok(approval)
    }

    /// Whether the client already spent the confirmation (declined, or a retry claimed it): the
    /// page then has nothing left to decide. A store that cannot answer counts as answered.
    async fn answered_by_client(&self, approval: &Approval) -> bool {
        self.config
            .store
            .is_used(approval.nonce, approval.principal)
            .await
            .unwrap_or(true)
    }

    /// A decision must come from a page of the approval URL's origin: a cross-site form post is
    /// refused before anything is read.
    fn same_origin<B>(&self, request: &Request<B>) -> Result<(), &'static str> {
        let headers = request.headers();
        if let Some(site) = headers.get("sec-fetch-site")
            && site.as_bytes() != b"same-origin"
        {
            return Err("approval POST from another site (Sec-Fetch-Site)");
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            // Not a browser form post; the anti-forgery token still has to match.
            return Ok(());
        };
        let expected = self
            .config
            .approval_url
            .as_deref()
            .and_then(|url| url.parse::<http::Uri>().ok())
            .and_then(|uri| origin_of(&uri));
        match expected {
            Some(expected) if origin.as_bytes() == expected.as_bytes() => Ok(()),
            _ => Err("approval POST from another origin"),
        }
    }

    fn sign_in_page(&self, path: &str) -> Response<Full<Bytes>> {
        let link = match &self.sign_in {
            Some(url) => format!(
                "<p><a href=\"{}?next={}\">Sign in</a> as the person who asked, then come back.</p>",
                escape(url),
                escape(&percent_encode(path))
            ),
            None => "<p>Sign in as the person who asked, then reload this page.</p>".to_owned(),
        };
        page(StatusCode::UNAUTHORIZED, "Sign in to approve", &link)
    }

    /// The approval as its principal sees it, with the decision form while it is open.
    async fn show(
        &self,
        id: ApprovalId,
        principal: &Principal,
        error: Option<&str>,
    ) -> Response<Full<Bytes>> {
        let approval = match self
            .owned(id, principal, "approval page opened by another principal")
            .await
        {
            Ok(approval) => approval,
            Err(refusal) => return refusal,
        };
        if approval.decision.is_none() && self.answered_by_client(&approval).await {
            return page(
                StatusCode::OK,
                "Already answered",
                "<p>Your client already answered this request (declined, or it was used). \
                 Nothing here can change it.</p>",
            );
        }
        if let Some(decision) = &approval.decision {
            let text = match decision {
                Decision::Approved { .. } => "This request was approved.",
                Decision::Declined => "This request was declined.",
            };
            return page(
                StatusCode::OK,
                "Already decided",
                &format!("<p>{text} Return to your client to continue.</p>"),
            );
        }
        let token = hex(&self
            .config
            .sealer
            .keys()
            .csrf_token(id.as_bytes(), principal.subject()));
        page(
            StatusCode::OK,
            &format!("Approve {}?", approval.tool),
            &render(&approval, &token, error),
        )
    }

    /// Records the person's decision, once.
    async fn decide(
        &self,
        id: ApprovalId,
        principal: &Principal,
        body: &[u8],
    ) -> Response<Full<Bytes>> {
        let form = Form::parse(body);
        let token_ok = form
            .get("csrf")
            .as_deref()
            .and_then(unhex::<32>)
            .is_some_and(|token| {
                self.config
                    .sealer
                    .keys()
                    .csrf_matches(&token, id.as_bytes(), principal.subject())
            });
        if !token_ok {
            audit::refused(
                "-",
                Some(principal),
                "approval POST without a valid anti-forgery token",
            );
            return page(
                StatusCode::FORBIDDEN,
                "Refused",
                "<p>This form has expired or was not issued to you. Reload the page.</p>",
            );
        }
        let approval = match self
            .owned(id, principal, "approval decided by another principal")
            .await
        {
            Ok(approval) => approval,
            Err(refusal) => return refusal,
        };
        if self.answered_by_client(&approval).await {
            audit::refused(
                &approval.tool,
                Some(principal),
                "approval decided after the client answered",
            );
            return page(
                StatusCode::CONFLICT,
                "Already answered",
                "<p>Your client already answered this request; nothing changed.</p>",
            );
        }
        let decision = match form.get("decision").as_deref() {
            Some("decline") => Decision::Declined,
            Some("approve") => {
                let chosen = match (approval.choices.len(), form.get("choice")) {
                    (0, _) => String::new(),
                    (1, None) => approval.choices[0].id.clone(),
                    (_, Some(choice)) => choice,
                    (_, None) => return self.show(id, principal, Some("Choose one record.")).await,
                };
                if approval.typed
                    && form.get("typed").as_deref().map(str::trim) != Some(chosen.as_str())
                {
                    return self
                        .show(
                            id,
                            principal,
                            Some("Type the id of the record exactly as shown to approve."),
                        )
                        .await;
                }
                Decision::Approved { chosen }
            }
            _ => {
                return page(
                    StatusCode::BAD_REQUEST,
                    "Refused",
                    "<p>Approve or decline.</p>",
                );
            }
        };
        let Some(approvals) = &self.config.approvals else {
            return unavailable();
        };
        match approvals
            .decide(id, approval.principal, decision.clone())
            .await
        {
            Ok(Decided::Recorded) => {
                audit::page_decided(&approval.tool, principal, &approval.nonce, &decision);
                let text = match decision {
                    Decision::Approved { .. } => {
                        "Approved. Return to your client and continue: the request runs there."
                    }
                    Decision::Declined => {
                        "Declined. Nothing will be changed; return to your client."
                    }
                };
                page(StatusCode::OK, "Done", &format!("<p>{text}</p>"))
            }
            Ok(Decided::AlreadyDecided) => {
                audit::refused(&approval.tool, Some(principal), "approval decided twice");
                page(
                    StatusCode::CONFLICT,
                    "Already decided",
                    "<p>This request was already decided; nothing changed.</p>",
                )
            }
            Ok(Decided::NotYours) => not_yours(),
            Ok(Decided::InvalidChoice) => {
                self.show(id, principal, Some("Choose one of the records shown."))
                    .await
            }
            Ok(Decided::Unknown) => gone(),
            Err(_) => unavailable(),
        }
    }
}

impl<B> tower_service::Service<Request<B>> for ApprovalPage
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

/// The origin a browser sends for pages under `uri`: lower-case scheme and host, and the port
/// only when it is not the scheme's default.
fn origin_of(uri: &http::Uri) -> Option<String> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "https" => 443,
        _ => 80,
    };
    Some(match uri.port_u16() {
        Some(port) if port != default => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    })
}

fn gone() -> Response<Full<Bytes>> {
    page(
        StatusCode::NOT_FOUND,
        "Not found",
        "<p>This approval does not exist or has expired. Ask again from your client.</p>",
    )
}

fn not_yours() -> Response<Full<Bytes>> {
    page(
        StatusCode::FORBIDDEN,
        "Not yours",
        "<p>This approval was requested by someone else. Sign in as that person to decide it.</p>",
    )
}

fn unavailable() -> Response<Full<Bytes>> {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "<p>The approval could not be read right now. Try again in a moment.</p>",
    )
}

/// The approval's facts and its decision form.
fn render(approval: &Approval, token: &str, error: Option<&str>) -> String {
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
        utc(approval.expires_at)
    );
    let _ = write!(
        html,
        "<form method=\"post\"><input type=\"hidden\" name=\"csrf\" value=\"{token}\">"
    );
    if !approval.choices.is_empty() {
        html.push_str("<fieldset><legend>Which one</legend>");
        let single = approval.choices.len() == 1;
        for (i, choice) in approval.choices.iter().enumerate() {
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

/// A complete page with the headers every answer carries.
fn page(status: StatusCode, title: &str, body: &str) -> Response<Full<Bytes>> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{title}</title>\
         <style>body{{font:16px system-ui,sans-serif;max-width:40em;margin:2em auto;padding:0 1em}}\
         dt{{font-weight:bold}}.error{{color:#a00}}.version{{color:#555}}\
         button{{font-size:1em;padding:.4em 1.2em}}</style></head>\
         <body><h1>{title}</h1>{body}</body></html>",
        title = escape(title),
    );
    let mut response = Response::new(Full::new(Bytes::from(html)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Text as HTML, attributes included.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                char::from(b).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM UTC`.
fn utc(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// A decoded `application/x-www-form-urlencoded` body; the first value of each name counts.
struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Self {
        let decode = |part: &[u8]| -> String {
            let mut out = Vec::with_capacity(part.len());
            let mut i = 0;
            while i < part.len() {
                match part[i] {
                    b'+' => out.push(b' '),
                    b'%' if i + 2 < part.len() => {
                        let hi = char::from(part[i + 1]).to_digit(16);
                        let lo = char::from(part[i + 2]).to_digit(16);
                        match (hi, lo) {
                            (Some(hi), Some(lo)) => {
                                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                                i += 2;
                            }
                            _ => out.push(b'%'),
                        }
                    }
                    b => out.push(b),
                }
                i += 1;
            }
            String::from_utf8_lossy(&out).into_owned()
        };
        Self(
            body.split(|&b| b == b'&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let mut parts = pair.splitn(2, |&b| b == b'=');
                    let name = decode(parts.next().unwrap_or_default());
                    let value = decode(parts.next().unwrap_or_default());
                    (name, value)
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_and_html_escapes() {
        let form = Form::parse(b"csrf=ab%2Fc&decision=approve&typed=note-7+x&bad=%zz&x=%4");
        assert_eq!(form.get("csrf").as_deref(), Some("ab/c"));
        assert_eq!(form.get("typed").as_deref(), Some("note-7 x"));
        assert_eq!(form.get("bad").as_deref(), Some("%zz"));
        assert_eq!(form.get("x").as_deref(), Some("%4"));
        assert_eq!(form.get("missing"), None);
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(
            utc(UNIX_EPOCH + std::time::Duration::from_secs(1_796_303_627)),
            "2026-12-03 13:13 UTC"
        );
    }
}
