//! Strict reading of one JSON-RPC message, so the layer and the inner service can never disagree
//! about what a body says.
//!
//! Parsers differ on duplicate keys (first wins, last wins, error), on batches and on invalid UTF-8.
//! A body that reads one way to this layer and another way to the server behind it would let a
//! destructive call slip past unconfirmed. So a body is forwarded only if it is exactly one JSON
//! object with no duplicate key at any depth, a `"2.0"` `jsonrpc`, a string `method`, a string or
//! number `id` (or none, for a notification) and, for `tools/call`, an object `params` with a string
//! `name`. Anything else is answered here with `-32700` or `-32600`.
//!
//! The pass-through path borrows from the body and allocates nothing per message beyond the
//! duplicate-key bookkeeping; an intercepted call is read a second time for the four members of
//! `params` the decision needs.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::protocol::RpcError;

/// The method a confirmed tool is called with.
pub(crate) const TOOLS_CALL: &str = "tools/call";

/// What to do with a message.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not ours: forward the original bytes untouched.
    Forward,
    /// A `tools/call` of a tool the layer confirms.
    Intercept(ToolCall),
    /// Answer with this error; never forward. `id` is the raw request id, `None` for a notification.
    Reject { id: Option<String>, error: RpcError },
}

/// A `tools/call` request the layer confirms: the parameters the decision reads, and the body as
/// received (read again in full only to forward a confirmed call).
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    /// The request id, as raw JSON text (`"a"` or `7`).
    pub(crate) id: String,
    /// `params.name`.
    pub(crate) tool: String,
    /// The parameters the layer reads; every other member is skipped, not built.
    pub(crate) params: CallParams,
    /// The message as received.
    pub(crate) body: Bytes,
}

/// The members of `params` the layer reads. A member that is present, even as `null`, is
/// `Some`, so `"arguments": null` is told apart from no arguments.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct CallParams {
    #[serde(rename = "_meta", default, deserialize_with = "present")]
    pub(crate) meta: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) arguments: Option<Value>,
    #[serde(rename = "requestState", default, deserialize_with = "present")]
    pub(crate) request_state: Option<Value>,
    #[serde(rename = "inputResponses", default, deserialize_with = "present")]
    pub(crate) input_responses: Option<Value>,
}

fn present<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct CallMessage {
    params: CallParams,
}

/// Classifies `body`. `guarded` says whether a tool name is one the layer confirms.
pub(crate) fn classify(body: &Bytes, guarded: impl Fn(&str) -> bool) -> Parsed {
    let envelope = match read_envelope(body) {
        Ok(envelope) => envelope,
        Err(error) => {
            return Parsed::Reject {
                id: Some("null".to_owned()),
                error,
            };
        }
    };
    let id = match envelope.id {
        None => None,
        Some(raw) if is_string(raw) || is_number(raw) => Some(raw.get()),
        Some(_) => return invalid(Some("null")),
    };
    if !matches!(envelope.jsonrpc, Some(Scalar::Str(ref v)) if v == "2.0") {
        return invalid(id);
    }
    let Some(Scalar::Str(method)) = envelope.method else {
        return invalid(id);
    };
    if method != TOOLS_CALL {
        return Parsed::Forward;
    }
    let name = match envelope.params {
        None => return Parsed::Forward,
        Some(Params {
            is_object: false, ..
        }) => return invalid(id),
        Some(Params { name: None, .. }) => return Parsed::Forward,
        Some(Params {
            name: Some(Scalar::Str(name)),
            ..
        }) => name,
        Some(Params {
            name: Some(Scalar::Other),
            ..
        }) => return invalid(id),
    };
    if !guarded(&name) {
        return Parsed::Forward;
    }
    let Some(id) = id else {
        // A notification cannot be confirmed (there is nothing to answer) and must not run.
        return Parsed::Reject {
            id: None,
            error: RpcError::invalid_request(),
        };
    };
    match serde_json::from_slice::<CallMessage>(body) {
        Ok(message) => Parsed::Intercept(ToolCall {
            id: id.to_owned(),
            tool: name.into_owned(),
            params: message.params,
            body: body.clone(),
        }),
        Err(_) => invalid(Some(id)),
    }
}

fn invalid(id: Option<&str>) -> Parsed {
    Parsed::Reject {
        id: id.map(str::to_owned),
        error: RpcError::invalid_request(),
    }
}

/// What one strict pass over a message learns about its routing members.
#[derive(Default)]
struct Envelope<'de> {
    jsonrpc: Option<Scalar<'de>>,
    /// Present (even as `null`) or absent (a notification).
    id: Option<&'de RawValue>,
    method: Option<Scalar<'de>>,
    params: Option<Params<'de>>,
}

/// A member that must be a string: its value, or that it was something else.
enum Scalar<'de> {
    Str(Cow<'de, str>),
    Other,
}

struct Params<'de> {
    is_object: bool,
    name: Option<Scalar<'de>>,
}

fn is_string(raw: &RawValue) -> bool {
    raw.get().starts_with('"')
}

fn is_number(raw: &RawValue) -> bool {
    raw.get()
        .starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

/// Reads `body` once: it must be one JSON object, valid UTF-8 throughout, with no duplicate key
/// anywhere; the routing members are picked up on the way.
fn read_envelope(body: &[u8]) -> Result<Envelope<'_>, RpcError> {
    let first = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| body[i]);
    match first {
        Some(b'{') => {}
        // A batch, a scalar or an empty body: JSON-RPC, but not one MCP message.
        Some(b'[') => return Err(RpcError::invalid_request()),
        _ => {
            return Err(match serde_json::from_slice::<de::IgnoredAny>(body) {
                Ok(_) => RpcError::invalid_request(),
                Err(_) => RpcError::parse_error(),
            });
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let envelope = de::Deserializer::deserialize_map(&mut de, EnvelopeVisitor)
        .and_then(|envelope| de.end().map(|()| envelope));
    envelope.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => RpcError::invalid_request(),
        _ => RpcError::parse_error(),
    })
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
        let mut envelope = Envelope::default();
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(Key)? {
            match &*key {
                "jsonrpc" => envelope.jsonrpc = Some(map.next_value_seed(ScalarSeed)?),
                "method" => envelope.method = Some(map.next_value_seed(ScalarSeed)?),
                // Kept raw, to answer with the id exactly as sent; a non-scalar id is refused.
                "id" => envelope.id = Some(map.next_value::<&'de RawValue>()?),
                "params" => envelope.params = Some(map.next_value_seed(ParamsSeed)?),
                _ => map.next_value_seed(Strict)?,
            }
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate key"));
            }
        }
        Ok(envelope)
    }
}

/// A value that should be a string; anything else is walked strictly and reported as `Other`.
struct ScalarSeed;

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Scalar<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScalarSeed {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar<'de>, A::Error> {
        Strict.visit_seq(seq).map(|()| Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar<'de>, A::Error> {
        Strict.visit_map(map).map(|()| Scalar::Other)
    }
}

/// `params`, walked strictly, with its `name` picked up.
struct ParamsSeed;

impl<'de> DeserializeSeed<'de> for ParamsSeed {
    type Value = Params<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Params<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ParamsSeed {
    type Value = Params<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("params")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params<'de>, A::Error> {
        let mut name = None;
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(Key)? {
            if key == "name" {
                name = Some(map.next_value_seed(ScalarSeed)?);
            } else {
                map.next_value_seed(Strict)?;
            }
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate key"));
            }
        }
        Ok(Params {
            is_object: true,
            name,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Params<'de>, A::Error> {
        Strict.visit_seq(seq).map(|()| Params {
            is_object: false,
            name: None,
        })
    }
    fn visit_bool<E>(self, _: bool) -> Result<Params<'de>, E> {
        Ok(Params {
            is_object: false,
            name: None,
        })
    }
    fn visit_i64<E>(self, _: i64) -> Result<Params<'de>, E> {
        Ok(Params {
            is_object: false,
            name: None,
        })
    }
    fn visit_u64<E>(self, _: u64) -> Result<Params<'de>, E> {
        Ok(Params {
            is_object: false,
            name: None,
        })
    }
    fn visit_f64<E>(self, _: f64) -> Result<Params<'de>, E> {
        Ok(Params {
            is_object: false,
            name: None,
        })
    }
    fn visit_str<E>(self, _: &str) -> Result<Params<'de>, E> {
        Ok(Params {
            is_object: false,
            name: None,
        })
    }
    fn visit_unit<E>(self) -> Result<Params<'de>, E> {
        Ok(Params {
            is_object: false,
            name: None,
        })
    }
}

/// Walks any JSON value, failing on a duplicate object key.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Strict)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Seen::Few(Vec::new());
        while let Some(key) = map.next_key_seed(Key)? {
            if !seen.insert(key) {
                return Err(de::Error::custom("duplicate key"));
            }
            map.next_value_seed(Strict)?;
        }
        Ok(())
    }
}

/// Object keys, borrowed when they contain no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// The keys of one object seen so far: a short list, or a set once the object is large.
enum Seen<'de> {
    Few(Vec<Cow<'de, str>>),
    Many(HashSet<Cow<'de, str>>),
}

impl<'de> Seen<'de> {
    const FEW: usize = 16;

    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        match self {
            Seen::Few(keys) => {
                if keys.contains(&key) {
                    return false;
                }
                if keys.len() < Self::FEW {
                    keys.push(key);
                } else {
                    let mut set: HashSet<_> = keys.drain(..).collect();
                    set.insert(key);
                    *self = Seen::Many(set);
                }
                true
            }
            Seen::Many(keys) => keys.insert(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::code;

    fn guarded(name: &str) -> bool {
        name == "notes_delete"
    }

    fn reject_code(body: &[u8]) -> (Option<String>, i64) {
        match classify(&Bytes::copy_from_slice(body), guarded) {
            Parsed::Reject { id, error } => (id, error.code),
            other => panic!(
                "expected a rejection for {:?}, got {other:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }

    const DELETE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_delete","arguments":{"title":"x"}}}"#;

    #[test]
    fn intercepts_only_guarded_tool_calls() {
        assert!(
            matches!(classify(&Bytes::copy_from_slice(DELETE.as_bytes()), guarded), Parsed::Intercept(c) if c.tool == "notes_delete" && c.id == "1")
        );
        let list = DELETE.replace("notes_delete", "notes_list");
        assert!(matches!(
            classify(&Bytes::copy_from_slice(list.as_bytes()), guarded),
            Parsed::Forward
        ));
        let other =
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"name":"notes_delete"}}"#;
        assert!(matches!(
            classify(&Bytes::copy_from_slice(other.as_bytes()), guarded),
            Parsed::Forward
        ));
        // Escaped names are read as the inner service reads them.
        let escaped = DELETE.replace("notes_delete", r"notes\u005fdelete");
        assert!(matches!(
            classify(&Bytes::copy_from_slice(escaped.as_bytes()), guarded),
            Parsed::Intercept(_)
        ));
        let escaped_method = DELETE.replace("tools/call", r"tools\/call");
        assert!(matches!(
            classify(&Bytes::copy_from_slice(escaped_method.as_bytes()), guarded),
            Parsed::Intercept(_)
        ));
    }

    #[test]
    fn parser_differentials_are_never_forwarded() {
        // Invalid JSON and invalid UTF-8.
        assert_eq!(reject_code(b"{bad").1, code::PARSE_ERROR);
        assert_eq!(reject_code(b"").1, code::PARSE_ERROR);
        let mut bad_utf8 = DELETE.as_bytes().to_vec();
        let at = DELETE.find("\"x\"").unwrap() + 1;
        bad_utf8[at] = 0xff;
        assert_eq!(reject_code(&bad_utf8).1, code::PARSE_ERROR);
        let surrogate = DELETE.replace("\"x\"", r#""\ud800""#);
        assert_eq!(reject_code(surrogate.as_bytes()).1, code::PARSE_ERROR);
        assert_eq!(
            reject_code(format!("{DELETE} {{}}").as_bytes()).1,
            code::PARSE_ERROR
        );
        // A batch, or not an object.
        assert_eq!(
            reject_code(format!("[{DELETE}]").as_bytes()).1,
            code::INVALID_REQUEST
        );
        assert_eq!(reject_code(b"7").1, code::INVALID_REQUEST);
        // Duplicate keys, at the top, in params, anywhere below.
        for dup in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"notes_delete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list","name":"notes_delete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_delete","arguments":{"a":1,"a":2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list","_meta":{"k":{"x":1,"\u0078":2}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
        ] {
            assert_eq!(
                reject_code(dup.as_bytes()).1,
                code::INVALID_REQUEST,
                "{dup}"
            );
        }
        // Non-string method or name, bad id, bad version, non-object params on tools/call.
        for bad in [
            r#"{"jsonrpc":"2.0","id":1,"method":["tools/call"],"params":{"name":"notes_delete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["notes_delete"]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"notes_delete"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["notes_delete"]}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"notes_delete"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            r#"{"id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
        ] {
            assert_eq!(
                reject_code(bad.as_bytes()).1,
                code::INVALID_REQUEST,
                "{bad}"
            );
        }
    }

    #[test]
    fn large_objects_still_catch_duplicates() {
        let mut args: Vec<String> = (0..100).map(|i| format!("\"k{i}\":{i}")).collect();
        args.push("\"k42\":0".into());
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{{}}}}}}}"#,
            args.join(",")
        );
        assert_eq!(reject_code(body.as_bytes()).1, code::INVALID_REQUEST);
    }

    #[test]
    fn guarded_notifications_are_refused_without_an_id() {
        let note = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"notes_delete"}}"#;
        assert_eq!(reject_code(note.as_bytes()), (None, code::INVALID_REQUEST));
        let other =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
        assert!(matches!(
            classify(&Bytes::copy_from_slice(other.as_bytes()), guarded),
            Parsed::Forward
        ));
    }

    #[test]
    fn deep_nesting_is_a_parse_error_not_a_crash() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}{}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(reject_code(deep.as_bytes()).1, code::PARSE_ERROR);
    }
}
