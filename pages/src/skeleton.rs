//! The one page skeleton: every page's document, style and headers (no scripts but one admitted
//! by its hash, no framing, no caching, nothing sniffed, no referrer beyond the page's origin),
//! and how pages write dates.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use maud::{DOCTYPE, Markup, PreEscaped, html};

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
        let text = "<a href=\"x\">'&'</a>";
        assert_eq!(
            html! { p title=(text) { (text) } }.into_string(),
            "<p title=\"&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;\">\
             &lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;</p>"
        );
    }
}
