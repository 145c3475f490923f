//! The decisions, without I/O: protocol gates, the claims a challenge binds, the checks a retry must
//! pass, and the rewrite of a confirmed call. The async [`driver`](crate::driver) strings these
//! together around the resolver, the replay store and the revalidation hook.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use crate::clock::unix_secs;
use crate::layer::Config;
use crate::message::{TOOLS_CALL, ToolCall};
use crate::policy::ToolPolicy;
use crate::principal::Principal;
use crate::protocol::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, RpcError};
use crate::store::{BootEpoch, Nonce, PrincipalKey};
use crate::token::claims::{Claims, Phase, Shown, arguments_digest, digest16, request_id_digest};
use crate::token::{StateError, codec};

/// The MCP request headers, as the HTTP adapter found them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Headers {
    pub(crate) protocol_version: HeaderField,
    pub(crate) method: HeaderField,
    pub(crate) name: HeaderField,
}

/// One header: absent, present once with a decodable value, or unusable (repeated, not text,
/// bad encoding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum HeaderField {
    #[default]
    Absent,
    Value(String),
    Invalid,
}

impl HeaderField {
    /// Reads `name` from `headers`, decoding the `=?base64?…?=` form MCP uses for non-ASCII values.
    pub(crate) fn read(headers: &http::HeaderMap, name: &str) -> Self {
        let mut values = headers.get_all(name).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return if headers.contains_key(name) {
                Self::Invalid
            } else {
                Self::Absent
            };
        };
        let Ok(text) = value.to_str() else {
            return Self::Invalid;
        };
        match text
            .strip_prefix("=?base64?")
            .and_then(|t| t.strip_suffix("?="))
        {
            Some(encoded) => STANDARD
                .decode(encoded)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .map_or(Self::Invalid, Self::Value),
            None => Self::Value(text.to_owned()),
        }
    }

    fn is(&self, expected: &str) -> bool {
        matches!(self, Self::Value(v) if v == expected)
    }
}

/// A refusal: the wire error and the reason for the audit log.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) error: RpcError,
    pub(crate) reason: String,
}

impl Refused {
    pub(crate) fn new(error: RpcError, reason: impl Into<String>) -> Self {
        Self {
            error,
            reason: reason.into(),
        }
    }

    pub(crate) fn state(e: StateError) -> Self {
        let error = match e {
            // Not an attack signal: the state verified, the store behind it restarted.
            StateError::Restarted => RpcError::restarted(),
            _ => RpcError::invalid_state(),
        };
        Self::new(error, format!("requestState: {e}"))
    }
}

/// Header/body agreement, `_meta` and protocol version: the checks every intercepted call passes
/// before anything else, first call and retry alike.
pub(crate) fn check_protocol(
    config: &Config,
    call: &ToolCall,
    headers: Option<&Headers>,
) -> Result<(), Refused> {
    if let Some(h) = headers
        && (!h.method.is(TOOLS_CALL) || !h.name.is(&call.tool))
    {
        return Err(Refused::new(
            RpcError::header_mismatch(),
            "Mcp-Method/Mcp-Name missing or not the body's",
        ));
    }
    let meta = call.params.meta.as_ref().and_then(Value::as_object);
    let version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let capabilities = meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .and_then(Value::as_object);
    let (Some(version), Some(_)) = (version, capabilities) else {
        return Err(Refused::new(
            RpcError::missing_meta(),
            "_meta protocolVersion or clientCapabilities missing",
        ));
    };
    if let Some(h) = headers
        && !h.protocol_version.is(version)
    {
        return Err(Refused::new(
            RpcError::header_mismatch(),
            "MCP-Protocol-Version missing or not the body's",
        ));
    }
    if !config.supported_versions.iter().any(|v| v == version) {
        return Err(Refused::new(
            RpcError::unsupported_version(&config.supported_versions, version),
            format!("unsupported protocol version {version:?}"),
        ));
    }
    match call.params.arguments.as_ref() {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(Refused::new(
            RpcError::invalid_arguments(),
            "arguments is not an object",
        )),
    }
}

/// Whether this request itself declares form elicitation. Earlier requests never count.
pub(crate) fn check_form_capability(call: &ToolCall) -> Result<(), Refused> {
    let elicitation = call
        .params
        .meta
        .as_ref()
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .and_then(|c| c.get("elicitation"));
    let form = match elicitation {
        // `{}` predates modes and means form; a mode list means exactly those modes.
        Some(Value::Object(modes)) => match modes.get("form") {
            Some(form) => form.is_object(),
            None => !modes.contains_key("url"),
        },
        _ => false,
    };
    if form {
        Ok(())
    } else {
        Err(Refused::new(
            RpcError::missing_form_elicitation(),
            "client did not declare form elicitation",
        ))
    }
}

/// A confirmed tool as the layer keeps it: its policy, and the digests every one of its states
/// binds whatever the request, computed once when the layer is built.
pub(crate) struct GuardedTool {
    pub(crate) policy: ToolPolicy,
    audience: [u8; 16],
    method: [u8; 16],
    tool: [u8; 16],
    input_key: [u8; 16],
}

impl GuardedTool {
    pub(crate) fn new(audience: &str, name: &str, policy: ToolPolicy) -> Self {
        Self {
            audience: digest16("audience", audience.as_bytes()),
            method: digest16("method", TOOLS_CALL.as_bytes()),
            tool: digest16("tool", name.as_bytes()),
            input_key: digest16("input-key", policy.input_key.as_bytes()),
            policy,
        }
    }

    /// The digests this request adds: its id and its arguments.
    fn request_digests(&self, call: &ToolCall) -> ([u8; 16], [u8; 32]) {
        (
            request_id_digest(&call.id),
            arguments_digest(
                call.params.arguments.as_ref(),
                self.policy.select_into.as_deref(),
            ),
        )
    }
}

/// The epoch a state binds: the replay store's, or zeros for a store whose entries outlive the
/// process.
fn store_epoch(config: &Config) -> [u8; 16] {
    config
        .store
        .boot_epoch()
        .map_or([0; 16], |epoch: BootEpoch| *epoch.as_bytes())
}

/// Whom a new challenge for `principal` is charged to: the digest its state will carry.
pub(crate) fn principal_key(config: &Config, principal: &Principal) -> PrincipalKey {
    PrincipalKey::from_bytes(config.keys.signing().principal_digest(principal.subject()))
}

/// Seals a fresh challenge state over the candidates shown.
pub(crate) fn seal_challenge(
    config: &Config,
    guarded: &GuardedTool,
    call: &ToolCall,
    principal: &Principal,
    candidates: Vec<Shown>,
) -> Result<(String, Claims), StateError> {
    let issued_at = unix_secs(config.clock.now());
    let (request_id, arguments) = guarded.request_digests(call);
    let claims = Claims {
        phase: Phase::Confirm,
        issued_at,
        expires_at: issued_at.saturating_add(config.ttl.as_secs()),
        nonce: Nonce::random(),
        audience: guarded.audience,
        principal: config.keys.signing().principal_digest(principal.subject()),
        method: guarded.method,
        tool: guarded.tool,
        input_key: guarded.input_key,
        request_id,
        arguments,
        epoch: store_epoch(config),
        candidates,
    };
    let token = codec::seal(&config.keys, &claims)?;
    Ok((token, claims))
}

/// Opens a retry's state and checks every binding, in a fixed order, before anything stateful.
///
/// The MAC is checked first and the request's own digests are computed only for a state that
/// verified, so a forged state costs one HMAC.
pub(crate) fn verify_retry(
    config: &Config,
    guarded: &GuardedTool,
    call: &ToolCall,
    principal: &Principal,
    token: &str,
) -> Result<Claims, StateError> {
    let (claims, key) = codec::open(&config.keys, token)?;
    let now = unix_secs(config.clock.now());
    let skew = config.skew.as_secs();
    if now >= claims.expires_at.saturating_add(skew) {
        return Err(StateError::Expired);
    }
    if claims.issued_at > now.saturating_add(skew)
        || claims.expires_at < claims.issued_at
        || claims.expires_at - claims.issued_at > config.ttl.as_secs()
    {
        return Err(StateError::BadLifetime);
    }
    let same = |a: &[u8], b: &[u8]| bool::from(a.ct_eq(b));
    if !same(&claims.audience, &guarded.audience) {
        return Err(StateError::Audience);
    }
    if !key.principal_matches(&claims.principal, principal.subject()) {
        return Err(StateError::Principal);
    }
    if !same(&claims.method, &guarded.method) {
        return Err(StateError::Method);
    }
    if !same(&claims.tool, &guarded.tool) {
        return Err(StateError::Tool);
    }
    let (request_id, arguments) = guarded.request_digests(call);
    if !same(&claims.arguments, &arguments) {
        return Err(StateError::Arguments);
    }
    if claims.phase != Phase::Confirm {
        return Err(StateError::Phase);
    }
    if !same(&claims.input_key, &guarded.input_key) {
        return Err(StateError::InputKey);
    }
    if same(&claims.request_id, &request_id) {
        return Err(StateError::SameRequestId);
    }
    // Last, so only a state that is right in every other way learns that the server restarted.
    if !same(&claims.epoch, &store_epoch(config)) {
        return Err(StateError::Restarted);
    }
    Ok(claims)
}

/// When the replay store may forget a state's nonce: its expiry plus twice the allowed skew.
///
/// The last instance to accept the state is one whose clock runs up to a skew behind; the store's
/// expiry is computed by an instance whose clock may run up to a skew ahead (Redis keeps a TTL
/// relative to the claimant's clock, a Postgres pruner deletes by its own). Twice the skew keeps
/// the entry until every instance within the skew refuses the state.
pub(crate) fn retention(config: &Config, claims: &Claims) -> SystemTime {
    let skew = config.skew.as_secs();
    UNIX_EPOCH + Duration::from_secs(claims.expires_at.saturating_add(skew.saturating_mul(2)))
}

/// The arguments the tool will receive: the client's, with the chosen id written in.
pub(crate) fn confirmed_arguments(
    policy: &ToolPolicy,
    call: &ToolCall,
    chosen: Option<&str>,
) -> Value {
    let mut arguments = match call.params.arguments.as_ref() {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    if let (Some(field), Some(chosen)) = (&policy.select_into, chosen) {
        arguments.insert(field.clone(), Value::String(chosen.to_owned()));
    }
    Value::Object(arguments)
}

/// The body forwarded for a confirmed call: the original message with the final arguments, and
/// without `inputResponses` and `requestState`. Every other member is copied as the raw text it
/// was received as. `None` if the body no longer reads as the object it was classified as (it
/// cannot, short of a bug: then nothing is forwarded).
pub(crate) fn forward_body(call: &ToolCall, arguments: &Value) -> Option<Bytes> {
    type Members<'a> = BTreeMap<String, &'a RawValue>;
    let message: Members<'_> = serde_json::from_slice(&call.body).ok()?;
    let params: Members<'_> = serde_json::from_str(message.get("params")?.get()).ok()?;
    let mut out = Vec::with_capacity(call.body.len() + 64);
    let mut object = Object::open(&mut out);
    for (key, value) in &message {
        if key != "params" {
            object.member(key, value.get().as_bytes())?;
            continue;
        }
        object.key(key)?;
        let mut inner = Object::open(object.out);
        for (key, value) in &params {
            if !matches!(
                key.as_str(),
                "inputResponses" | "requestState" | "arguments"
            ) {
                inner.member(key, value.get().as_bytes())?;
            }
        }
        inner.key("arguments")?;
        serde_json::to_writer(&mut *inner.out, arguments).ok()?;
        inner.close();
    }
    object.close();
    Some(Bytes::from(out))
}

/// Writes one JSON object member by member.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    fn key(&mut self, key: &str) -> Option<()> {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        serde_json::to_writer(&mut *self.out, key).ok()?;
        self.out.push(b':');
        Some(())
    }

    fn member(&mut self, key: &str, raw: &[u8]) -> Option<()> {
        self.key(key)?;
        self.out.extend_from_slice(raw);
        Some(())
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// The `Mcp-Param-<name>` header carrying the chosen id, encoded as MCP requires.
pub(crate) fn param_header(
    policy: &ToolPolicy,
    chosen: Option<&str>,
) -> Option<(HeaderName, HeaderValue)> {
    let (name, chosen) = (policy.select_header.as_ref()?, chosen?);
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
        let mut h = http::HeaderMap::new();
        h.insert(
            "mcp-name",
            HeaderValue::from_static("=?base64?bm90ZXNfZGVsZXRl?="),
        );
        assert_eq!(
            HeaderField::read(&h, "mcp-name"),
            HeaderField::Value("notes_delete".into())
        );
        h.append("mcp-name", HeaderValue::from_static("notes_delete"));
        assert_eq!(HeaderField::read(&h, "mcp-name"), HeaderField::Invalid);
        assert_eq!(HeaderField::read(&h, "mcp-method"), HeaderField::Absent);
        h.insert("mcp-method", HeaderValue::from_static("=?base64?!!?="));
        assert_eq!(HeaderField::read(&h, "mcp-method"), HeaderField::Invalid);
    }

    #[test]
    fn the_forwarded_body_keeps_every_other_member_and_drops_the_confirmation() {
        let body =
            br#"{"jsonrpc":"2.0","id":"r-2","method":"tools/call","x-top":{"k":[1,2.50,"\u00e9"]},
            "params":{"name":"notes_delete","_meta":{"progressToken":7},"arguments":{"title":"Old"},
            "requestState":"mcpc1.x","inputResponses":{"a":{"action":"accept"}},"extra":"\"q\""}}"#;
        let call =
            match crate::message::classify(&Bytes::from_static(body), |t| t == "notes_delete") {
                crate::message::Parsed::Intercept(call) => call,
                other => panic!("{other:?}"),
            };
        let forwarded = forward_body(
            &call,
            &serde_json::json!({"title":"Old","note_id":"note-7"}),
        )
        .unwrap();
        let text = std::str::from_utf8(&forwarded).unwrap();
        // Raw members travel byte for byte (`2.50` and the escape stay as sent).
        assert!(
            text.contains(r#""x-top":{"k":[1,2.50,"\u00e9"]}"#),
            "{text}"
        );
        let value: Value = serde_json::from_slice(&forwarded).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"jsonrpc":"2.0","id":"r-2","method":"tools/call","x-top":{"k":[1,2.5,"é"]},
                "params":{"name":"notes_delete","_meta":{"progressToken":7},
                    "arguments":{"title":"Old","note_id":"note-7"},"extra":"\"q\""}})
        );
    }

    #[test]
    fn param_header_encodes_non_plain_values() {
        let policy = ToolPolicy::confirm_only();
        assert!(param_header(&policy, Some("x")).is_none());
        let mut policy = policy;
        policy.select_header = Some("Note-Id".into());
        let (name, value) = param_header(&policy, Some("note-7")).unwrap();
        assert_eq!(name, "mcp-param-note-id");
        assert_eq!(value, "note-7");
        let (_, value) = param_header(&policy, Some("notiz-ä")).unwrap();
        assert_eq!(
            value,
            format!("=?base64?{}?=", STANDARD.encode("notiz-ä")).as_str()
        );
        let (_, value) = param_header(&policy, Some(" padded")).unwrap();
        assert!(value.to_str().unwrap().starts_with("=?base64?"));
    }
}
