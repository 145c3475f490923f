//! What the crate's human-facing pages (the approval page, the standing-approvals page) share:
//! the headers every answer carries (no scripts, no framing, no caching, nothing sniffed, no
//! referrer beyond the page's origin), HTML escaping, dates, and how a form post is read and
//! checked to come from the page's own origin.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};

use crate::guard::{media_type, origin_of};

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
pub(crate) fn sign_in(sign_in: Option<&str>, path: &str, title: &str) -> Response<Full<Bytes>> {
    let link = match sign_in {
        Some(url) => {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("next", path)
                .finish();
            format!(
                "<p><a href=\"{}?{}\">Sign in</a>, then come back.</p>",
                escape(url),
                escape(&query)
            )
        }
        None => "<p>Sign in, then reload this page.</p>".to_owned(),
    };
    page(StatusCode::UNAUTHORIZED, title, &link)
}

/// A complete page with the headers every answer carries.
pub(crate) fn page(status: StatusCode, title: &str, body: &str) -> Response<Full<Bytes>> {
    page_with(status, title, body, None)
}

/// A complete page that runs one inline `script` (the passkey ceremonies: WebAuthn is a
/// browser API). The policy admits that script by its hash and nothing else: no other inline
/// code, no script from anywhere, no connections.
#[cfg_attr(not(feature = "passkeys"), allow(dead_code))]
pub(crate) fn page_with_script(
    status: StatusCode,
    title: &str,
    body: &str,
    script: &str,
) -> Response<Full<Bytes>> {
    page_with(status, title, body, Some(script))
}

fn page_with(
    status: StatusCode,
    title: &str,
    body: &str,
    script: Option<&str>,
) -> Response<Full<Bytes>> {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let (body, csp) = match script {
        None => (body.to_owned(), CSP.to_owned()),
        Some(script) => {
            let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script));
            (
                format!("{body}<script>{script}</script>"),
                format!("{CSP}; script-src 'sha256-{hash}'"),
            )
        }
    };
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

/// Text as HTML, attributes included.
pub(crate) fn escape(text: &str) -> String {
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

/// Whether a form post may have come from a page of `page_url`'s origin: a cross-site post is
/// refused before anything is read. A request with neither header is not a browser form post;
/// the anti-forgery token still has to match.
pub(crate) fn same_origin(headers: &HeaderMap, page_url: Option<&str>) -> Result<(), &'static str> {
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
pub(crate) async fn read_form<B>(
    headers: &HeaderMap,
    body: B,
) -> Result<Bytes, Response<Full<Bytes>>>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if media_type(headers).as_deref() != Some("application/x-www-form-urlencoded") {
        return Err(page(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Refused",
            "<p>Send the page's form.</p>",
        ));
    }
    match Limited::new(body, MAX_FORM_BYTES).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(_) => Err(page(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Refused",
            "<p>The form is too large.</p>",
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
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut response = page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", "");
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
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
