//! A page's form post: its media type, its size, its values.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};

use super::skeleton::notice;
use crate::guard::media_type;

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

/// The first value of each name in an `application/x-www-form-urlencoded` body.
pub(crate) fn form_value(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.into_owned())
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
    fn form_values_decode_and_the_first_counts() {
        let body = b"csrf=ab%2Fc&decision=approve&typed=note-7+x&bad=%zz&x=%4&csrf=second";
        assert_eq!(form_value(body, "csrf").as_deref(), Some("ab/c"));
        assert_eq!(form_value(body, "typed").as_deref(), Some("note-7 x"));
        assert_eq!(form_value(body, "bad").as_deref(), Some("%zz"));
        assert_eq!(form_value(body, "x").as_deref(), Some("%4"));
        assert_eq!(form_value(body, "missing"), None);
    }
}
