//! A page's form post: its media type, its size, its values, each field once.

use std::collections::HashSet;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};

use super::skeleton::notice;
use mcp_confirm::Principal;
use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::guard::media_type;

/// The most a page's form post may hold.
pub(crate) const MAX_FORM_BYTES: usize = 16 * 1024;

/// A form post's body, if it is `application/x-www-form-urlencoded` and at most
/// [`MAX_FORM_BYTES`]; otherwise the page that refuses it.
pub(super) async fn read_form<B>(
    headers: &HeaderMap,
    body: B,
) -> Result<Bytes, Response<Full<Bytes>>>
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

/// Whether `body` carries a field more than once (names compared decoded) that `list` does not
/// read as a list of values (checkboxes of one name). Which of two values counts is a guess the
/// pages never make: `decision=approve&decision=decline` is no decision, as a JSON object with a
/// key twice is no object.
pub(crate) fn repeats(body: &[u8], list: impl Fn(&str) -> bool) -> bool {
    let mut seen = HashSet::new();
    form_urlencoded::parse(body).any(|(name, _)| !list(&name) && !seen.insert(name))
}

/// For a page none of whose fields is a list: every field once.
pub(crate) fn no_lists(_: &str) -> bool {
    false
}

/// The answer to a post that repeats a field: one page for every such post, nothing decided or
/// changed. `channel` goes to the audit log with the reason.
pub(crate) fn repeated_refused(
    desk: &ApprovalDesk,
    channel: &'static str,
    principal: &Principal,
) -> Response<Full<Bytes>> {
    desk.page_refused(channel, principal, "page POST repeats a form field");
    notice(
        StatusCode::BAD_REQUEST,
        "Refused",
        "The form repeats a field. Nothing changed; reload the page.",
    )
}

/// The value of `name` in an `application/x-www-form-urlencoded` body, if it is there exactly
/// once (the pages refuse a post that repeats it; this reads none either).
pub(crate) fn form_value(body: &[u8], name: &str) -> Option<String> {
    let mut values = form_urlencoded::parse(body).filter(|(n, _)| n == name);
    match (values.next(), values.next()) {
        (Some((_, value)), None) => Some(value.into_owned()),
        _ => None,
    }
}

/// Every value of `name`, in order, at most `max` of them.
pub(crate) fn form_values(body: &[u8], name: &str, max: usize) -> Vec<String> {
    form_urlencoded::parse(body)
        .filter(|(n, _)| n == name)
        .take(max)
        .map(|(_, v)| v.into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_decode_and_a_repeated_one_is_none() {
        let body = b"csrf=ab%2Fc&decision=approve&typed=note-7+x&bad=%zz&x=%4&decisio%6E=decline";
        assert_eq!(form_value(body, "csrf").as_deref(), Some("ab/c"));
        assert_eq!(form_value(body, "typed").as_deref(), Some("note-7 x"));
        assert_eq!(form_value(body, "bad").as_deref(), Some("%zz"));
        assert_eq!(form_value(body, "x").as_deref(), Some("%4"));
        assert_eq!(form_value(body, "missing"), None);
        // Spelt otherwise, still the same name: neither value is read.
        assert_eq!(form_value(body, "decision"), None);
    }

    #[test]
    fn a_repeated_field_is_found_however_spelt_unless_the_page_reads_a_list() {
        for body in [
            &b"decision=approve&decision=decline"[..],
            b"csrf=a&x=1&csrf=a",
            b"decision=approve&decisio%6E=approve",
            b"narrow-limit=1&narrow%2Dlimit=2",
            b"a+b=1&a%20b=2",
            b"=1&=2",
        ] {
            assert!(repeats(body, no_lists), "{}", String::from_utf8_lossy(body));
        }
        for body in [
            &b"decision=approve&csrf=a&choice=x"[..],
            b"",
            b"a=1&A=1&a%00=1",
        ] {
            assert!(
                !repeats(body, no_lists),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let ids = |name: &str| name == "narrow-ids";
        assert!(!repeats(b"narrow-ids=1&narrow-ids=2&csrf=a", ids));
        assert!(repeats(b"narrow-ids=1&narrow-ids=2&csrf=a&csrf=a", ids));
    }
}
