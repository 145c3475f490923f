//! What the approval page renders, and the headers every answer carries: no scripts, no
//! framing, no caching, nothing sniffed, no referrer beyond the page's origin.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

use crate::store::approval::Approval;

/// What every page answer says about itself: no scripts, no framing, no caching, no referrer.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// `at` as an HTTP date (`Thu, 03 Dec 2026 13:13:27 GMT`). httpdate panics past the year
/// 9999, which only a corrupted record could say: such a time shows as the last it can spell.
fn http_date(at: SystemTime) -> String {
    // 9999-12-31 23:59:59 UTC.
    let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    httpdate::fmt_http_date(at.min(last))
}

/// The sign-in page for a visitor with no principal: a link to `sign_in?next=<path>` when the
/// deployment has a sign-in.
pub(super) fn sign_in(sign_in: Option<&str>, path: &str) -> Response<Full<Bytes>> {
    let link = match sign_in {
        Some(url) => {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("next", path)
                .finish();
            format!(
                "<p><a href=\"{}?{}\">Sign in</a> as the person who asked, then come back.</p>",
                escape(url),
                escape(&query)
            )
        }
        None => "<p>Sign in as the person who asked, then reload this page.</p>".to_owned(),
    };
    page(StatusCode::UNAUTHORIZED, "Sign in to approve", &link)
}

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
        "<p>This approval was requested by someone else. Sign in as that person to decide it.</p>",
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
pub(super) fn page(status: StatusCode, title: &str, body: &str) -> Response<Full<Bytes>> {
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
pub(super) fn escape(text: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_http_dates_and_never_panic() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_303_627);
        assert_eq!(http_date(at), "Thu, 03 Dec 2026 13:13:47 GMT");
        let far = UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 1_000);
        assert_eq!(http_date(far), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn html_escapes_text_and_attributes() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
