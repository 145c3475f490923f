//! The MCP request headers: reading what a client declared (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`), and writing the `Mcp-Param-*` header of an argument the layer rewrote.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::engine::{Declared, Field};

/// What the MCP headers of a request declare, each read strictly.
pub(super) fn declared(headers: &HeaderMap) -> Declared {
    Declared {
        protocol_version: read(headers, &PROTOCOL_VERSION),
        method: read(headers, &METHOD),
        name: read(headers, &NAME),
    }
}

// Named once, not parsed from text at each lookup.
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const METHOD: HeaderName = HeaderName::from_static("mcp-method");
const NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Whether `Accept` lists both `application/json` and `text/event-stream`, as Streamable HTTP
/// requires of every POST (a range weighted `q=0` does not count). The layer checks it before it
/// offers a form, so that no confirmation is spent on a call the server will then refuse as
/// not acceptable. Ranges and parameters split as RFC 9110 (and rmcp) split them: outside quoted
/// strings only, so a quoted parameter never yields a range of its own.
pub(super) fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    // What the SDKs send, as one value: accepted without parsing.
    let mut values = headers.get_all(http::header::ACCEPT).iter();
    if let (Some(only), None) = (values.next(), values.next())
        && matches!(
            only.as_bytes(),
            b"application/json, text/event-stream" | b"text/event-stream, application/json"
        )
    {
        return true;
    }
    let (mut json, mut sse) = (false, false);
    let ranges = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| split_unquoted(value, ','));
    for range in ranges {
        let mut parts = split_unquoted(range, ';');
        let essence = parts.next().unwrap_or_default().trim();
        let excluded = parts.any(|parameter| {
            parameter.split_once('=').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("q") && zero_weight(value)
            })
        });
        if excluded {
            continue;
        }
        json |= essence.eq_ignore_ascii_case("application/json");
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    json && sse
}

/// Splits `value` at each `delimiter` outside a quoted string (`\` escapes the next character
/// inside one; an unterminated quote runs to the end).
fn split_unquoted(value: &str, delimiter: char) -> impl Iterator<Item = &str> {
    let (mut quoted, mut escaped) = (false, false);
    value.split(move |character| {
        if escaped {
            escaped = false;
        } else if quoted && character == '\\' {
            escaped = true;
        } else if character == '"' {
            quoted = !quoted;
        } else if !quoted && character == delimiter {
            return true;
        }
        false
    })
}

/// Whether a `q` value is zero (`0`, `0.0`, `0.000`): that range is not acceptable.
fn zero_weight(value: &str) -> bool {
    let value = value.trim();
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    whole == "0" && fraction.bytes().all(|b| b == b'0')
}

/// Reads `name` from `headers`: present exactly once, as text, decoding the `=?base64?…?=` form
/// MCP uses for non-ASCII values. A repeated, non-text or badly encoded header is
/// [`Field::Invalid`].
fn read(headers: &HeaderMap, name: &HeaderName) -> Field {
    let mut values = headers.get_all(name).iter();
    let value = match (values.next(), values.next()) {
        (Some(value), None) => value,
        (None, _) => return Field::Absent,
        (Some(_), Some(_)) => return Field::Invalid,
    };
    let Ok(text) = value.to_str() else {
        return Field::Invalid;
    };
    match text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        Some(encoded) => STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .map_or(Field::Invalid, Field::Value),
        None => Field::Value(text.to_owned()),
    }
}

/// The `Mcp-Param-<name>` header carrying the chosen id, encoded as MCP requires, when the tool
/// has one (its schema's `x-mcp-header`, or the policy's `select_header`).
pub(super) fn param_header(
    header: Option<&str>,
    chosen: Option<&str>,
) -> Option<(HeaderName, HeaderValue)> {
    let (name, chosen) = (header?, chosen?);
    let name = HeaderName::try_from(format!("mcp-param-{name}")).ok()?;
    let plain = !chosen.is_empty()
        && chosen.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !chosen.starts_with(' ')
        && !chosen.ends_with(' ')
        && !chosen.starts_with("=?base64?");
    let value = if plain {
        HeaderValue::from_str(chosen).ok()?
    } else {
        HeaderValue::from_str(&format!("=?base64?{}?=", STANDARD.encode(chosen))).ok()?
    };
    Some((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_decode_base64_and_refuse_repeats() {
        let mut h = HeaderMap::new();
        h.insert(
            "mcp-name",
            HeaderValue::from_static("=?base64?bm90ZXNfZGVsZXRl?="),
        );
        assert_eq!(read(&h, &NAME), Field::Value("notes_delete".into()));
        h.append("mcp-name", HeaderValue::from_static("notes_delete"));
        assert_eq!(read(&h, &NAME), Field::Invalid);
        assert_eq!(read(&h, &METHOD), Field::Absent);
        h.insert("mcp-method", HeaderValue::from_static("=?base64?!!?="));
        assert_eq!(read(&h, &METHOD), Field::Invalid);
    }

    fn accept(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(http::header::ACCEPT, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn accept_needs_both_ranges_outside_quotes_and_not_weighted_zero() {
        for ok in [
            &["application/json, text/event-stream"][..],
            &["application/json", "text/event-stream;q=0.5"],
            &[r#"application/json;p="a,b", TEXT/EVENT-STREAM"#],
            &[r#"application/json;p="a\";q=0", text/event-stream"#],
        ] {
            assert!(accepts_json_and_sse(&accept(ok)), "{ok:?}");
        }
        for refused in [
            &[r#"application/json;x=",text/event-stream;""#][..],
            &[r#"application/json;x=",text/event-stream"#],
            &[r#"application/json;x="\",text/event-stream""#],
            &["application/json, text/event-stream;q=0.000"],
            &["application/json;q=0, text/event-stream"],
            &["application/json"],
            &[],
        ] {
            assert!(!accepts_json_and_sse(&accept(refused)), "{refused:?}");
        }
    }

    #[test]
    fn param_header_encodes_non_plain_values() {
        assert!(param_header(None, Some("x")).is_none());
        assert!(param_header(Some("Note-Id"), None).is_none());
        let header = Some("Note-Id");
        let (name, value) = param_header(header, Some("note-7")).unwrap();
        assert_eq!(name, "mcp-param-note-id");
        assert_eq!(value, "note-7");
        let (_, value) = param_header(header, Some("notiz-ä")).unwrap();
        assert_eq!(
            value,
            format!("=?base64?{}?=", STANDARD.encode("notiz-ä")).as_str()
        );
        let (_, value) = param_header(header, Some(" padded")).unwrap();
        assert!(value.to_str().unwrap().starts_with("=?base64?"));
    }
}
