//! The pages' defence against cross-site requests: a form post must come from the page's own
//! origin, and carry a token the page issued to this visitor, in this session, for this form,
//! not long ago.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header};
use http_body_util::Full;

use super::form::form_value;
use super::skeleton::notice;
use super::visitor::Visitor;
use crate::encoding::{hex, unhex};
use mcp_confirm::Principal;
use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::approval::ApprovalId;
use mcp_confirm::approval::batch::SetDigest;

/// What a form is for: a token of one is no token of another.
#[derive(Clone, Copy)]
pub(crate) enum FormPurpose<'a> {
    /// Deciding this approval on the approval page.
    Approval(&'a ApprovalId),
    /// Deciding this set of approvals at once on the approval page.
    Batch(&'a SetDigest),
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
            FormPurpose::Batch(set) => [&b"batch:"[..], set.as_bytes()].concat(),
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
    desk: &'a ApprovalDesk,
    ttl: Duration,
}

impl<'a> FormTokens<'a> {
    /// The tokens under the layer's keys and clock, each good for `ttl`.
    pub(crate) fn new(desk: &'a ApprovalDesk, ttl: Duration) -> Self {
        Self { desk, ttl }
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
        unix_secs(self.desk.now())
    }

    /// A token for a form `visitor` is shown now, for `purpose`.
    pub(crate) fn issue(&self, purpose: FormPurpose<'_>, visitor: &Visitor) -> String {
        let issued = self.now();
        let tag = self.desk.form_tag(&self.data(purpose, visitor, issued));
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
        let fresh = issued <= now.saturating_add(self.desk.skew().as_secs())
            && now < issued.saturating_add(self.ttl.as_secs());
        let genuine = self
            .desk
            .form_tag_matches(&self.data(purpose, visitor, issued), &token[8..]);
        fresh & genuine
    }
}

/// The answer to a form posted without a good token (forged, another principal's, another
/// session's, another page's, or expired): one page for all of them. `channel` and `why` go
/// to the audit log.
pub(crate) fn form_refused(
    desk: &ApprovalDesk,
    channel: &'static str,
    principal: &Principal,
    why: &str,
) -> Response<Full<Bytes>> {
    desk.page_refused(channel, principal, why);
    notice(
        StatusCode::FORBIDDEN,
        "Refused",
        "This form has expired or was not issued to you. Reload the page.",
    )
}

/// Why a post with neither fetch-metadata header is refused, as `tracing` gets it: what was
/// missing, and where to look (a proxy in front that drops them).
pub(super) const NO_ORIGIN: &str = "page POST with neither Origin nor Sec-Fetch-Site (a browser \
     sends Origin on every form POST: a proxy in front of the pages may be removing it)";

/// Whether a form post came from a page of `page_url`'s origin: a cross-site post is refused
/// before anything is read. A browser sends `Origin` on every form post, and `Sec-Fetch-Site`
/// where it supports fetch metadata; either suffices, and each present must say this origin. A
/// post with neither is refused too: it is no browser's form post, and the pages take no other.
pub(super) fn same_origin(headers: &HeaderMap, page_url: Option<&str>) -> Result<(), &'static str> {
    let site = headers.get("sec-fetch-site");
    if let Some(site) = site
        && site.as_bytes() != b"same-origin"
    {
        return Err("page POST from another site (Sec-Fetch-Site)");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return match site {
            Some(_) => Ok(()),
            None => Err(NO_ORIGIN),
        };
    };
    let expected = page_url
        .and_then(|url| url.parse::<http::Uri>().ok())
        .and_then(|uri| origin_of(&uri));
    match expected {
        Some(expected) if origin.as_bytes() == expected.as_bytes() => Ok(()),
        _ => Err("page POST from another origin"),
    }
}

/// The origin a browser sends for pages under `uri` (`Origin`'s spelling): lower-case scheme
/// and host, and the port only when it is not the scheme's default. The approval page accepts
/// decisions from the origin of its own URL only.
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

/// Whole seconds since the Unix epoch (0 before it).
fn unix_secs(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: Option<&str> = Some("https://notes.example/confirm/");

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_post_needs_one_header_saying_this_origin_and_none_saying_another() {
        for ok in [
            &[("origin", "https://notes.example")][..],
            &[("sec-fetch-site", "same-origin")],
            &[
                ("origin", "https://notes.example"),
                ("sec-fetch-site", "same-origin"),
            ],
        ] {
            assert_eq!(same_origin(&headers(ok), PAGE), Ok(()), "{ok:?}");
        }
        // Neither: refused, and the log says what was missing.
        assert_eq!(same_origin(&headers(&[]), PAGE), Err(NO_ORIGIN));
        assert_eq!(
            same_origin(
                &headers(&[("referer", "https://notes.example/confirm/x")]),
                PAGE
            ),
            Err(NO_ORIGIN)
        );
        assert!(NO_ORIGIN.contains("neither Origin nor Sec-Fetch-Site"));
        for refused in [
            &[("origin", "https://evil.example")][..],
            &[("origin", "null")],
            &[("sec-fetch-site", "cross-site")],
            &[("sec-fetch-site", "none")],
            &[
                ("origin", "https://notes.example"),
                ("sec-fetch-site", "same-site"),
            ],
            &[
                ("origin", "https://evil.example"),
                ("sec-fetch-site", "same-origin"),
            ],
        ] {
            assert!(same_origin(&headers(refused), PAGE).is_err(), "{refused:?}");
        }
    }
}
