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
//!
//! # The scanner's contract
//!
//! The first pass is a hand-written scanner (`scan.rs`), measured faster than serde_json on the
//! pass-through path. It must accept exactly the bodies serde_json (the parser the servers behind
//! the layer use, and the one that reads an intercepted call's `params`) accepts, and read the same
//! routing members from them. It mirrors these serde_json behaviours:
//!
//! | behaviour | serde_json | scanner |
//! |---|---|---|
//! | grammar | RFC 8259, one value, whitespace around it | the same |
//! | text | valid UTF-8; no raw control characters in strings | the same |
//! | escapes | the RFC set; `\u` surrogates only in valid pairs | the same, compared after unescaping |
//! | numbers | any that fits an `f64` (integers beyond 64 bits become floats); `1e309` is an error | the same boundary, decided by `str::parse::<f64>` |
//! | depth | recursion limit 128: 127 nested containers read, the 128th refused | `MAX_DEPTH` = 127, no recursion |
//! | duplicate keys | accepted (last wins) | refused at any depth (`-32600`): the one deliberate difference |
//!
//! Agreement is tested, not assumed, against the serde_json in `Cargo.lock`: `adversarial.rs`
//! runs both on boundary cases (`numbers_at_the_f64_boundaries`, `nesting_near_the_limit`,
//! `strings_with_specials_at_every_offset`, …) and under proptest on generated and mutated
//! messages (`generated_against_serde_json`, `mutated_against_serde_json`), and
//! `serde_json_behaves_as_the_scanner_assumes` pins each row of this table on serde_json alone.
//! A serde_json upgrade that moves any of them fails those tests before it can ship.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::Value;

use crate::protocol::RpcError;

#[cfg(test)]
mod adversarial;
mod forward;
#[cfg(test)]
mod oracle;
mod scan;

pub(crate) use forward::{Object, forward_body};

/// The method a confirmed tool is called with.
pub(crate) const TOOLS_CALL: &str = "tools/call";
/// The method whose answer lists the tools.
pub(crate) const TOOLS_LIST: &str = "tools/list";

/// What to do with a message.
#[derive(Debug)]
pub(crate) enum Parsed<G> {
    /// Not ours: forward the original bytes untouched.
    Forward,
    /// A `tools/list` request: forward it untouched, and mark the confirmed tools in the answer.
    /// `id` is its raw request id, for the error that replaces an answer too large to read.
    Listing { id: String },
    /// A `tools/call` of a tool the layer confirms, with what the lookup found for it.
    Intercept(ToolCall, G),
    /// A `tools/call` of a tool the layer does not confirm that carries what a retry carries
    /// (`requestState`, `inputResponses`): it goes on as received unless they are the layer's.
    Retry(ToolCall),
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

impl ToolCall {
    /// `params.arguments`, built on first use: a retry is verified before its arguments are
    /// read, so a forged state never pays for them.
    pub(crate) fn arguments(&self) -> Option<&Value> {
        self.params.arguments.as_ref().map(|m| m.value(&self.body))
    }

    /// Whether `params.arguments` is absent or an object (the only shapes a call may have),
    /// told from its first byte without reading it.
    pub(crate) fn arguments_are_an_object(&self) -> bool {
        self.params
            .arguments
            .as_ref()
            .is_none_or(|m| self.body.get(m.span.start) == Some(&b'{'))
    }

    /// Whether the call carries what a retry carries: a `requestState` or `inputResponses`.
    pub(crate) fn is_retry(&self) -> bool {
        self.params.request_state.is_some() || self.params.input_responses.is_some()
    }

    /// `params.inputResponses`, built on first use (after the state verified).
    pub(crate) fn input_responses(&self) -> Option<&Value> {
        self.params
            .input_responses
            .as_ref()
            .map(|m| m.value(&self.body))
    }
}

/// The members of `params` the layer reads. A member that is present, even as `null`, is
/// `Some`, so `"arguments": null` is told apart from no arguments.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallParams {
    pub(crate) meta: Option<Value>,
    arguments: Option<Member>,
    pub(crate) request_state: Option<Value>,
    input_responses: Option<Member>,
}

/// A member of `params` kept as where it lies in the body and read into a [`Value`] the first
/// time it is asked for.
#[derive(Debug, Clone)]
struct Member {
    span: Range<usize>,
    value: OnceLock<Value>,
}

impl Member {
    fn new(span: Range<usize>) -> Self {
        Self {
            span,
            value: OnceLock::new(),
        }
    }

    fn value(&self, body: &[u8]) -> &Value {
        self.value.get_or_init(|| {
            // The scanner accepted the whole body, and it accepts only what serde_json accepts
            // (the contract above, tested against serde_json): this read cannot fail. If it
            // ever did, `null` matches no signed digest and no object the tools accept.
            body.get(self.span.clone())
                .and_then(|text| serde_json::from_slice(text).ok())
                .unwrap_or_else(|| {
                    tracing::error!("a member the scanner accepted did not read as JSON");
                    Value::Null
                })
        })
    }
}

/// Where the members of `params` an intercepted call needs lie in the body, as the scanner
/// found them.
#[derive(Debug, Clone, Default, PartialEq)]
struct Members {
    meta: Option<Range<usize>>,
    arguments: Option<Range<usize>>,
    request_state: Option<Range<usize>>,
    input_responses: Option<Range<usize>>,
}

/// Classifies `body`. `guarded` looks a tool name up among those the layer confirms; what it
/// finds travels with the intercepted call, so nobody looks it up twice.
pub(crate) fn classify<G>(body: &Bytes, guarded: impl Fn(&str) -> Option<G>) -> Parsed<G> {
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
        Some(raw) if is_string(raw) || is_number(raw) => Some(raw),
        Some(_) => return invalid(Some("null")),
    };
    if !matches!(envelope.jsonrpc, Some(Scalar::Str(ref v)) if v == "2.0") {
        return invalid(id);
    }
    let Some(Scalar::Str(method)) = envelope.method else {
        return invalid(id);
    };
    if method != TOOLS_CALL {
        return match (method.as_ref(), id) {
            (TOOLS_LIST, Some(id)) => Parsed::Listing { id: id.to_owned() },
            _ => Parsed::Forward,
        };
    }
    let (name, members) = match envelope.params {
        None => return Parsed::Forward,
        Some(Params {
            is_object: false, ..
        }) => return invalid(id),
        Some(Params { name: None, .. }) => return Parsed::Forward,
        Some(Params {
            name: Some(Scalar::Str(name)),
            members,
            ..
        }) => (name, members),
        Some(Params {
            name: Some(Scalar::Other),
            ..
        }) => return invalid(id),
    };
    let found = guarded(&name);
    if found.is_none() && members.request_state.is_none() && members.input_responses.is_none() {
        return Parsed::Forward;
    }
    let Some(id) = id else {
        // A notification cannot be confirmed (there is nothing to answer) and must not run; nor
        // may one carry a retry's members past the layer unread.
        return Parsed::Reject {
            id: None,
            error: RpcError::invalid_request(),
        };
    };
    let Some(params) = call_params(body, members) else {
        return invalid(Some(id));
    };
    let call = ToolCall {
        id: id.to_owned(),
        tool: name.into_owned(),
        params,
        body: body.clone(),
    };
    match found {
        Some(found) => Parsed::Intercept(call, found),
        None => Parsed::Retry(call),
    }
}

/// Reads what a decision needs first (`_meta`, `requestState`) and leaves `arguments` and
/// `inputResponses` where they lie.
fn call_params(body: &Bytes, members: Members) -> Option<CallParams> {
    let text = |span: &Range<usize>| body.get(span.clone());
    let meta = match &members.meta {
        None => None,
        Some(span) => Some(serde_json::from_slice(text(span)?).ok()?),
    };
    let request_state = match &members.request_state {
        None => None,
        Some(span) => Some(state_value(text(span)?)?),
    };
    Some(CallParams {
        meta,
        arguments: members.arguments.map(Member::new),
        request_state,
        input_responses: members.input_responses.map(Member::new),
    })
}

/// `requestState` as a value: a string without escapes (every state this layer issues) is
/// copied as it stands; anything else goes through serde_json.
fn state_value(text: &[u8]) -> Option<Value> {
    if let [b'"', inner @ .., b'"'] = text
        && !inner.contains(&b'\\')
    {
        return std::str::from_utf8(inner)
            .ok()
            .map(|s| Value::String(s.to_owned()));
    }
    serde_json::from_slice(text).ok()
}

fn invalid<G>(id: Option<&str>) -> Parsed<G> {
    Parsed::Reject {
        id: id.map(str::to_owned),
        error: RpcError::invalid_request(),
    }
}

/// What one strict pass over a message learns about its routing members.
#[derive(Debug, Clone, Default, PartialEq)]
struct Envelope<'de> {
    jsonrpc: Option<Scalar<'de>>,
    /// Present (even as `null`) or absent (a notification).
    id: Option<&'de str>,
    method: Option<Scalar<'de>>,
    params: Option<Params<'de>>,
}

#[cfg(test)]
impl Envelope<'_> {
    /// The envelope without where the members lie: what the oracle, which reads routing and
    /// not positions, is compared on.
    fn routing(&self) -> Self {
        let mut routing = self.clone();
        if let Some(params) = &mut routing.params {
            params.members = Members::default();
        }
        routing
    }
}

/// A member that must be a string: its value, or that it was something else.
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'de> {
    Str(Cow<'de, str>),
    Other,
}

#[derive(Debug, Clone, PartialEq)]
struct Params<'de> {
    is_object: bool,
    name: Option<Scalar<'de>>,
    /// Filled by the scanner only (the oracle reads routing, not positions).
    members: Members,
}

impl<'de> Params<'de> {
    fn new(is_object: bool, name: Option<Scalar<'de>>) -> Self {
        Self {
            is_object,
            name,
            members: Members::default(),
        }
    }
}

fn is_string(raw: &str) -> bool {
    raw.starts_with('"')
}

fn is_number(raw: &str) -> bool {
    raw.starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

/// Reads `body` once: it must be one JSON object, valid UTF-8 throughout, with no duplicate key
/// anywhere; the routing members are picked up on the way.
fn read_envelope(body: &[u8]) -> Result<Envelope<'_>, RpcError> {
    let text = std::str::from_utf8(body).map_err(|_| RpcError::parse_error())?;
    match text
        .trim_start_matches([' ', '\n', '\t', '\r'])
        .as_bytes()
        .first()
    {
        Some(b'{') => {}
        // A batch, a scalar or an empty body: JSON-RPC, but not one MCP message.
        Some(b'[') => return Err(RpcError::invalid_request()),
        _ if scan::is_json(text) => return Err(RpcError::invalid_request()),
        _ => return Err(RpcError::parse_error()),
    }
    scan::envelope(text).map_err(|e| match e {
        scan::ScanError::DuplicateKey => RpcError::invalid_request(),
        scan::ScanError::Syntax => RpcError::parse_error(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::code;

    fn guarded(name: &str) -> Option<()> {
        (name == "notes_delete").then_some(())
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
            matches!(classify(&Bytes::copy_from_slice(DELETE.as_bytes()), guarded), Parsed::Intercept(c, ()) if c.tool == "notes_delete" && c.id == "1")
        );
        let list = DELETE.replace("notes_delete", "notes_list");
        assert!(matches!(
            classify(&Bytes::copy_from_slice(list.as_bytes()), guarded),
            Parsed::Forward
        ));
        // Another method naming the tool is not intercepted: a `tools/list` is forwarded (its
        // answer marked), whatever its params say.
        let other =
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"name":"notes_delete"}}"#;
        assert!(matches!(
            classify(&Bytes::copy_from_slice(other.as_bytes()), guarded),
            Parsed::Listing { .. }
        ));
        let other = r#"{"jsonrpc":"2.0","method":"tools/list","params":{"name":"notes_delete"}}"#;
        assert!(matches!(
            classify(&Bytes::copy_from_slice(other.as_bytes()), guarded),
            Parsed::Forward
        ));
        let other =
            r#"{"jsonrpc":"2.0","id":"a","method":"prompts/get","params":{"name":"notes_delete"}}"#;
        assert!(matches!(
            classify(&Bytes::copy_from_slice(other.as_bytes()), guarded),
            Parsed::Forward
        ));
        // Escaped names are read as the inner service reads them.
        let escaped = DELETE.replace("notes_delete", r"notes\u005fdelete");
        assert!(matches!(
            classify(&Bytes::copy_from_slice(escaped.as_bytes()), guarded),
            Parsed::Intercept(..)
        ));
        let escaped_method = DELETE.replace("tools/call", r"tools\/call");
        assert!(matches!(
            classify(&Bytes::copy_from_slice(escaped_method.as_bytes()), guarded),
            Parsed::Intercept(..)
        ));
    }

    /// A call of a tool the layer does not confirm goes on untouched, unless it carries what a
    /// retry carries: then the layer looks at it first (a state of its own must not reach the
    /// inner service under a policy that changed while the form was open).
    #[test]
    fn retries_of_tools_the_layer_does_not_confirm_are_looked_at() {
        let other = DELETE.replace("notes_delete", "notes_list");
        let classify_with = |params: &str| {
            let body = other.replace(
                r#""arguments":{"title":"x"}"#,
                &format!(r#""arguments":{{"title":"x"}}{params}"#),
            );
            classify(&Bytes::from(body), guarded)
        };
        assert!(matches!(classify_with(""), Parsed::Forward));
        for params in [
            r#","requestState":"mcpc1.abc""#,
            r#","requestState":null"#,
            r#","inputResponses":{"k":{"action":"decline"}}"#,
        ] {
            assert!(
                matches!(classify_with(params), Parsed::Retry(ref c) if c.tool == "notes_list" && c.is_retry()),
                "{params}"
            );
        }
        // Members of nested objects are not a retry's.
        assert!(matches!(
            classify_with(r#","x":{"requestState":"mcpc1.abc"}"#),
            Parsed::Forward
        ));
        // A notification carrying them is refused, not forwarded.
        let notification = other
            .replace(r#""id":1,"#, "")
            .replace(r#""arguments""#, r#""requestState":"s","arguments""#);
        assert_eq!(
            reject_code(notification.as_bytes()),
            (None, code::INVALID_REQUEST)
        );
    }

    /// The members an intercepted call reads later are read as serde_json reads them, under any
    /// spelling of their keys, and told apart when absent, `null` or not an object.
    #[test]
    fn members_read_later_read_as_serde_json_reads_them() {
        let call = |params: &str| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"notes_delete"{params}}}}}"#
            );
            match classify(&Bytes::from(body), guarded) {
                Parsed::Intercept(call, ()) => call,
                other => panic!("{params}: {other:?}"),
            }
        };
        let c = call(
            r#","\u0061rguments":{"title":"a\"b","n":[1,2.5e3,{"x":null}]},"inputResponses":{"k":{"action":"accept"}},"requestState":"mcpc1.abc","_meta":{"m":true}"#,
        );
        assert_eq!(
            c.arguments(),
            Some(&serde_json::json!({"title":"a\"b","n":[1,2.5e3,{"x":null}]}))
        );
        assert!(c.arguments_are_an_object());
        assert_eq!(
            c.input_responses(),
            Some(&serde_json::json!({"k":{"action":"accept"}}))
        );
        assert_eq!(c.params.request_state, Some(Value::from("mcpc1.abc")));
        assert_eq!(c.params.meta, Some(serde_json::json!({"m":true})));
        // A state with an escape is unescaped, as serde_json would.
        let c = call(r#","requestState":"mcpc1.\u0061b""#);
        assert_eq!(c.params.request_state, Some(Value::from("mcpc1.ab")));
        let c = call(r#","requestState":7"#);
        assert_eq!(c.params.request_state, Some(Value::from(7)));
        // Absent, null, or not an object.
        let c = call("");
        assert_eq!((c.arguments(), c.input_responses()), (None, None));
        assert!(c.arguments_are_an_object());
        assert_eq!(c.params.request_state, None);
        for (shape, value) in [
            ("null", Value::Null),
            ("[1]", serde_json::json!([1])),
            ("\"{}\"", Value::from("{}")),
        ] {
            let c = call(&format!(r#","arguments":{shape}"#));
            assert_eq!(c.arguments(), Some(&value), "{shape}");
            assert!(!c.arguments_are_an_object(), "{shape}");
        }
        // Members of nested objects are not mistaken for those of `params`.
        let c = call(r#","_meta":{"arguments":{"x":1}}"#);
        assert_eq!(c.arguments(), None);
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

    /// The scanner and the serde-based oracle agree: both refuse, or both accept and read the same
    /// routing members. (With several defects in one body, the two may report different ones
    /// first: `exact_codes` is for bodies with one defect.)
    fn agree_with(body: &[u8], exact_codes: bool) {
        let scanned = read_envelope(body);
        let walked = oracle::read_envelope(body);
        match (&scanned, &walked) {
            (Ok(a), Ok(b)) => {
                assert_eq!(&a.routing(), b, "{:?}", String::from_utf8_lossy(body))
            }
            // The oracle read `id` raw, without looking for duplicate keys or out-of-range numbers
            // inside it (the scanner does). serde_json itself decides whether such an id is a
            // usable string or number; `classify` refuses any other id either way.
            (Err(_), Ok(b))
                if b.id.is_some_and(|raw| {
                    !matches!(
                        serde_json::from_str::<serde_json::Value>(raw),
                        Ok(serde_json::Value::String(_) | serde_json::Value::Number(_))
                    )
                }) => {}
            (Err(a), Err(b)) => {
                if exact_codes {
                    assert_eq!(a.code, b.code, "{:?}", String::from_utf8_lossy(body));
                }
            }
            _ => panic!(
                "scanner {scanned:?} but oracle {walked:?} on {:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }

    fn agree(body: &[u8]) {
        agree_with(body, false);
    }

    #[test]
    fn the_scanner_agrees_with_serde_json_on_tricky_messages() {
        let agree = |body: &[u8]| agree_with(body, true);
        let nested = |depth: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}1{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        for depth in 120..135 {
            agree(nested(depth).as_bytes());
        }
        let cases = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\u0062"}}"#,
            r#"{"jsonrpc":"2.0","id":"x\"y","method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":-0,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":01,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1e400,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":0e400,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1e-400,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":-,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1E+2,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\ud83d"}"#,
            r#"{"a":"\ude00"}"#,
            r#"{"a":"\ud83d\u0041"}"#,
            r#"{"a":"\ud83dx"}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"raw\u{7f}del\"}",
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"a":{"b":1,"b":2}}"#,
            r#"{"a":[{"b":1},{"b":1}]}"#,
            r#"{"method":"a","method":"a"}"#,
            r#"{"a":1,}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a" 1}"#,
            r#"{,}"#,
            r#"{}"#,
            r#"{} x"#,
            " \n{}\r\n\t ",
            r#"{"a":tru}"#,
            r#"{"a":nul}"#,
            r#"{"a":[1,2,]}"#,
            r#"{"a":[,]}"#,
            r#"{1:2}"#,
            r#"{"params":[1],"method":"tools/call","id":1,"jsonrpc":"2.0"}"#,
            r#"{"params":{"name":7},"method":"tools/call","id":1,"jsonrpc":"2.0"}"#,
            r#"{"params":{"name":"n","name":"m"},"method":"tools/call","id":1,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":["2.0"],"method":{"a":1,"a":1}}"#,
            "[1,2]",
            "7",
            "",
            "   ",
            "{",
            r#"{"a":"unterminated}"#,
        ];
        let many_keys: String = (0..40)
            .map(|i| format!(r#""k{i}":{i}"#))
            .collect::<Vec<_>>()
            .join(",");
        let many = format!("{{{many_keys}}}");
        let many_dup = format!("{{{many_keys},\"k3\":0}}");
        for case in cases
            .iter()
            .copied()
            .chain([many.as_str(), many_dup.as_str()])
        {
            agree(case.as_bytes());
        }
        agree(b"{\"a\":\"\xff\"}");
        // Every special byte at every offset of an eight-byte word, next to multi-byte characters.
        let specials = [
            r#"\""#, r"\\", r"\n", r"\u00e9", "\u{1}", "\u{1f}", "\t", "é", "\u{7f}", " ", "\"",
        ];
        for special in specials {
            for at in 0..20 {
                let mut text: Vec<&str> = (0..20)
                    .map(|i| if i % 7 == 3 { "é" } else { "x" })
                    .collect();
                text[at] = special;
                let text = text.concat();
                let body =
                    format!(r#"{{"jsonrpc":"2.0","id":"{text}","method":"{text}","{text}":1}}"#);
                agree(body.as_bytes());
            }
        }
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        /// JSON-ish text: mostly valid, with the defects parsers disagree on mixed in.
        fn fragment() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                Just("null".to_owned()),
                Just("true".to_owned()),
                Just("fals".to_owned()),
                "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
                Just("01".to_owned()),
                Just("1e999".to_owned()),
                "\"([a-z ]|\\\\[nrt\"/\\\\]|\\\\u00e9|\\\\ud83d\\\\ude00|\\\\ud83d|é|\t){0,6}\"",
            ];
            leaf.prop_recursive(6, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5)
                        .prop_map(|items| format!("[{}]", items.join(","))),
                    prop::collection::vec(("[a-c]|name|method|id|a\\\\u0062", inner), 0..5)
                        .prop_map(|members| {
                            let body: Vec<String> = members
                                .into_iter()
                                .map(|(k, v)| format!("\"{k}\": {v}"))
                                .collect();
                            format!("{{{}}}", body.join(", "))
                        }),
                ]
            })
        }

        fn message() -> impl Strategy<Value = String> {
            (
                prop::option::of(prop_oneof![Just("\"2.0\"".to_owned()), fragment()]),
                prop::option::of(fragment()),
                prop::option::of(prop_oneof![Just("\"tools/call\"".to_owned()), fragment()]),
                prop::option::of(fragment()),
                prop::collection::vec(("[a-z]{1,3}|id|method", fragment()), 0..3),
            )
                .prop_map(|(jsonrpc, id, method, params, extra)| {
                    let mut members = Vec::new();
                    for (key, value) in [
                        ("jsonrpc", jsonrpc),
                        ("id", id),
                        ("method", method),
                        ("params", params),
                    ] {
                        if let Some(value) = value {
                            members.push(format!("\"{key}\":{value}"));
                        }
                    }
                    members.extend(extra.into_iter().map(|(k, v)| format!("\"{k}\":{v}")));
                    format!("{{{}}}", members.join(","))
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            #[test]
            fn generated_messages(text in message()) {
                agree(text.as_bytes());
            }

            #[test]
            fn mutated_messages(
                text in message(),
                edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(
                    vec![b'{', b'}', b'[', b']', b'"', b'\\', b',', b':', b' ', b'0', b'-', b'e', b'u', b'a', 0x01, 0xc3])), 1..4),
            ) {
                let mut bytes = text.into_bytes();
                for (at, byte) in edits {
                    let i = at.index(bytes.len() + 1);
                    if i < bytes.len() && byte % 2 == 0 {
                        bytes[i] = byte;
                    } else {
                        bytes.insert(i.min(bytes.len()), byte);
                    }
                }
                agree(&bytes);
            }
        }
    }
}
