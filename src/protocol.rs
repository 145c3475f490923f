//! The MCP `2026-07-28` wire pieces the layer reads and writes.
//!
//! Everything here is plain data: `_meta` keys, the JSON-RPC errors the layer may answer with, and
//! the results it synthesizes (`input_required` and the three refusal outcomes). The HTTP status of
//! each error lives next to its code so both adapters answer the same way.

use bytes::Bytes;
use http::StatusCode;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

/// The protocol revision this crate speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// `_meta` key carrying the request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the capabilities the client declares for this one request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key on the layer's own results that names the confirmation outcome.
///
/// Lives under this crate's own prefix: `io.modelcontextprotocol/` and `dev.mcp/` are reserved.
pub const META_OUTCOME: &str = "io.github.mcp-confirm/outcome";
/// `_meta` key the layer adds to each tool it confirms in `tools/list` answers, with the value
/// `{"kind": "pick_one"}` or `{"kind": "confirm"}`: the server asks the user itself before the
/// tool runs, so a host that prompts on `destructiveHint` may skip its own dialog for this tool.
pub const META_CONFIRMATION: &str = "io.github.mcp-confirm/confirmation";
/// The `_meta` key `#[confirm_router]` writes into the definition of each tool whose handler it
/// guards (`{"kind": "pick_one" | "confirm" | "destructive"}`). The layer refuses to build without
/// a policy or an exemption for such a tool, and takes the key out of `tools/list` answers.
pub const META_DECLARED: &str = "io.github.mcp-confirm/declared";

/// The JSON-RPC error codes the layer emits.
pub mod code {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a single well-formed JSON-RPC request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Bad params: missing `_meta`, a bad `requestState` or bad `inputResponses`.
    pub const INVALID_PARAMS: i64 = -32602;
    /// A server-side failure (resolver, replay store).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Headers and body disagree, or a required header is missing.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request needs a client capability it did not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// The request's protocol version is not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// No authenticated principal on a confirmed tool call.
    ///
    /// Application-defined, so outside the reserved `-32768..=-32000` range.
    pub const UNAUTHENTICATED: i64 = -31001;
    /// The replay store could not take the claim; safe to retry later.
    pub const STORE_UNAVAILABLE: i64 = -31002;
    /// This principal is over a limit: too many live confirmations, or too many forms asked for.
    /// `data.retryAfter` says when to try again (also the HTTP `Retry-After` header).
    pub const RATE_LIMITED: i64 = -31003;
}

/// A JSON-RPC error the layer answers with, plus the HTTP status it travels under.
///
/// Messages are frozen per failure class: the specific reason goes to `tracing`, never to the wire,
/// so a client cannot use the answers as an oracle.
///
/// It serializes as the `error` member of a JSON-RPC response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<ErrorData>,
    #[serde(skip)]
    pub(crate) status: StatusCode,
    /// Whole seconds for the HTTP `Retry-After` header.
    #[serde(skip)]
    pub(crate) retry_after: Option<u64>,
}

/// An error's `data`: most refusals carry only a frozen `reason`, which is written without
/// building a JSON map (a refusal is what an attacker can make the layer do cheaply).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ErrorData {
    /// `{"reason": …}`.
    Reason(&'static str),
    /// Anything else.
    Value(Value),
}

impl Serialize for ErrorData {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Reason(reason) => {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("reason", reason)?;
                map.end()
            }
            Self::Value(value) => value.serialize(serializer),
        }
    }
}

impl RpcError {
    const fn new(code: i64, message: &'static str, status: StatusCode) -> Self {
        Self {
            code,
            message,
            data: None,
            status,
            retry_after: None,
        }
    }

    fn with_data(mut self, data: Value) -> Self {
        self.data = Some(ErrorData::Value(data));
        self
    }

    fn with_reason(mut self, reason: &'static str) -> Self {
        self.data = Some(ErrorData::Reason(reason));
        self
    }

    /// The frozen `data.reason` of this error, if it has one.
    pub(crate) fn reason(&self) -> Option<&str> {
        match self.data.as_ref()? {
            ErrorData::Reason(reason) => Some(reason),
            ErrorData::Value(value) => value.get("reason")?.as_str(),
        }
    }

    pub(crate) fn parse_error() -> Self {
        Self::new(code::PARSE_ERROR, "Parse error", StatusCode::BAD_REQUEST)
    }

    pub(crate) fn invalid_request() -> Self {
        Self::new(
            code::INVALID_REQUEST,
            "Invalid Request",
            StatusCode::BAD_REQUEST,
        )
    }

    pub(crate) fn body_too_large() -> Self {
        Self::new(
            code::INVALID_REQUEST,
            "Request body too large",
            StatusCode::PAYLOAD_TOO_LARGE,
        )
    }

    /// A confirmed tool call whose `Accept` does not list both JSON and SSE: the server would
    /// refuse it after the confirmation was spent.
    pub(crate) fn not_acceptable() -> Self {
        Self::new(
            code::INVALID_REQUEST,
            "Not Acceptable: the client must accept both application/json and text/event-stream",
            StatusCode::NOT_ACCEPTABLE,
        )
    }

    /// A confirmed tool call posted with a `Content-Type` other than `application/json`.
    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(
            code::INVALID_REQUEST,
            "Content-Type must be application/json",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        )
    }

    pub(crate) fn missing_meta() -> Self {
        Self::new(
            code::INVALID_PARAMS,
            "Invalid params: request _meta is missing or has malformed required fields",
            StatusCode::BAD_REQUEST,
        )
        .with_reason("invalid_meta")
    }

    pub(crate) fn header_mismatch() -> Self {
        Self::new(
            code::HEADER_MISMATCH,
            "Header mismatch: MCP request headers do not match the body",
            StatusCode::BAD_REQUEST,
        )
    }

    pub(crate) fn unsupported_version(supported: &[String], requested: &str) -> Self {
        Self::new(
            code::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({ "supported": supported, "requested": requested }))
    }

    /// A request of an earlier protocol era (2025-06-18, 2025-11-25: a session, no `_meta`
    /// per request, no form in a result) of a tool the layer confirms: it says what the client
    /// lacks, not that its headers are wrong.
    pub(crate) fn legacy_client(supported: &[String], requested: &str) -> Self {
        Self::new(
            code::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version: confirming this tool needs an MCP 2026-07-28 client \
             that declares form elicitation",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({ "supported": supported, "requested": requested,
            "reason": "legacy_protocol" }))
    }

    pub(crate) fn missing_form_elicitation() -> Self {
        Self::new(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "This tool requires form elicitation to confirm the call",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({ "requiredCapabilities": { "elicitation": { "form": {} } } }))
    }

    pub(crate) fn missing_url_elicitation() -> Self {
        Self::new(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "This tool requires URL elicitation to approve the call in a browser",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({ "requiredCapabilities": { "elicitation": { "url": {} } } }))
    }

    /// The one answer for every `requestState` that fails verification or was already used.
    pub(crate) fn invalid_state() -> Self {
        Self::new(
            code::INVALID_PARAMS,
            "Invalid or expired requestState",
            StatusCode::OK,
        )
        .with_reason("invalid_request_state")
    }

    pub(crate) fn invalid_input_responses() -> Self {
        Self::new(
            code::INVALID_PARAMS,
            "Invalid inputResponses",
            StatusCode::OK,
        )
        .with_reason("invalid_input_responses")
    }

    pub(crate) fn arguments_too_large_to_queue() -> Self {
        Self::new(
            code::INVALID_PARAMS,
            "Invalid params: arguments too large to queue",
            StatusCode::OK,
        )
        .with_reason("arguments_too_large")
    }

    pub(crate) fn invalid_arguments() -> Self {
        Self::new(
            code::INVALID_PARAMS,
            "Invalid params: arguments must be an object",
            StatusCode::OK,
        )
        .with_reason("invalid_arguments")
    }

    pub(crate) fn unauthenticated() -> Self {
        Self::new(
            code::UNAUTHENTICATED,
            "Authentication required to confirm this tool call",
            StatusCode::UNAUTHORIZED,
        )
        .with_reason("unauthenticated")
    }

    pub(crate) fn store_unavailable() -> Self {
        Self::new(
            code::STORE_UNAVAILABLE,
            "Confirmation could not be recorded; nothing was changed, retry later",
            StatusCode::SERVICE_UNAVAILABLE,
        )
        .with_data(json!({ "reason": "replay_store_unavailable", "retryable": true }))
    }

    /// The decision log cannot take the record of a call that would run (and its policy is to
    /// fail closed): nothing ran, the confirmation is unspent.
    pub(crate) fn log_unavailable() -> Self {
        Self::new(
            code::STORE_UNAVAILABLE,
            "Confirmation could not be recorded; nothing was changed, retry later",
            StatusCode::SERVICE_UNAVAILABLE,
        )
        .with_data(json!({ "reason": "decision_log_unavailable", "retryable": true }))
    }

    /// A state that verified but predates the restart of a store that forgets (the memory store).
    pub(crate) fn restarted() -> Self {
        Self::new(
            code::INVALID_PARAMS,
            "requestState was issued before a restart; ask again",
            StatusCode::OK,
        )
        .with_reason("request_state_restarted")
    }

    /// The principal holds its budget of live confirmations in the replay store.
    pub(crate) fn over_budget(retry_after: std::time::Duration) -> Self {
        Self::limited(
            "Too many confirmations pending for this user; nothing was changed, retry later",
            "principal_budget_spent",
            retry_after,
        )
    }

    /// The principal asked for forms faster than the challenge rate limit allows.
    pub(crate) fn challenge_rate_limited(retry_after: std::time::Duration) -> Self {
        Self::limited(
            "Too many confirmation requests; retry later",
            "challenge_rate_limited",
            retry_after,
        )
    }

    fn limited(message: &'static str, reason: &str, retry_after: std::time::Duration) -> Self {
        // Whole seconds, rounded up, so a client that waits this long is not refused again.
        let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let seconds = seconds.max(1);
        let mut error = Self::new(code::RATE_LIMITED, message, StatusCode::TOO_MANY_REQUESTS)
            .with_data(json!({ "reason": reason, "retryAfter": seconds, "retryable": true }));
        error.retry_after = Some(seconds);
        error
    }

    /// A call of a tool the server lists as needing a confirmation (destructive, or declared
    /// with `#[confirm]`) that the layer was not configured to confirm or exempt.
    pub(crate) fn undeclared_tool() -> Self {
        Self::new(
            code::INTERNAL_ERROR,
            "This tool needs a confirmation the server is not configured to ask for; nothing was changed.",
            StatusCode::OK,
        )
        .with_reason("confirmation_not_configured")
    }

    /// A `tools/list` answer the layer could not read (too large): it does not go out.
    pub(crate) fn listing_unreadable() -> Self {
        Self::new(
            code::INTERNAL_ERROR,
            "The tool list could not be checked by the confirmation layer.",
            StatusCode::OK,
        )
        .with_reason("listing_unreadable")
    }

    /// A call of a tool that is not in the tool list the layer was built with.
    pub(crate) fn unlisted_tool() -> Self {
        Self::new(
            code::INTERNAL_ERROR,
            "This tool is not in the list the confirmation layer was built with; nothing was changed.",
            StatusCode::OK,
        )
        .with_reason("tool_not_listed")
    }

    /// A call that an outer `ConfirmLayer` already confirmed reached a second one.
    pub(crate) fn stacked_layers() -> Self {
        Self::new(
            code::INTERNAL_ERROR,
            "This call passed two confirmation layers; nothing was changed.",
            StatusCode::OK,
        )
        .with_reason("stacked_layers")
    }

    pub(crate) fn internal() -> Self {
        Self::new(
            code::INTERNAL_ERROR,
            "Could not prepare the confirmation",
            StatusCode::OK,
        )
        .with_reason("confirmation_unavailable")
    }
}

/// What the layer sends back on its own: a status and a JSON body (or no body for a notification).
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) body: Option<Bytes>,
    /// Seconds for a `Retry-After` header.
    pub(crate) retry_after: Option<u64>,
    /// The JSON-RPC error's code, when the reply is one (the span's `error.type`).
    pub(crate) error: Option<i64>,
}

impl Reply {
    /// A JSON-RPC error response for the request `id` (raw JSON text; `null` when unknown).
    ///
    /// A notification (`id` absent) never gets a JSON-RPC answer, only the status.
    pub(crate) fn error(id: Option<&str>, error: &RpcError) -> Self {
        let Some(id) = id else {
            let status = if error.status.is_success() {
                StatusCode::BAD_REQUEST
            } else {
                error.status
            };
            return Self {
                status,
                body: None,
                retry_after: error.retry_after,
                error: Some(error.code),
            };
        };
        Self {
            status: error.status,
            body: Some(envelope(id, "error", error)),
            retry_after: error.retry_after,
            error: Some(error.code),
        }
    }

    /// A JSON-RPC success response carrying `result`.
    pub(crate) fn result(id: &str, result: &impl Serialize) -> Self {
        Self {
            status: StatusCode::OK,
            body: Some(envelope(id, "result", result)),
            retry_after: None,
            error: None,
        }
    }
}

fn envelope(id: &str, member: &str, value: &impl Serialize) -> Bytes {
    // `id` is raw JSON already validated by the parser; write it back byte for byte.
    // An error fits in 256 bytes; a result may carry a form and its state (about 1.5 KiB for
    // three candidates), which would otherwise grow the buffer three times.
    let capacity = if member == "result" { 2048 } else { 256 };
    let mut out = Vec::with_capacity(capacity + id.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"");
    let member_start = out.len();
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(b"\":");
    if serde_json::to_writer(&mut out, value).is_err() {
        // Our replies hold only strings, numbers and maps with string keys: unreachable, but a
        // reply must stay valid JSON whatever happens, even after a partial write.
        out.truncate(member_start);
        out.extend_from_slice(b"error\":{\"code\":-32603,\"message\":\"Internal error\"}");
    }
    out.push(b'}');
    Bytes::from(out)
}

/// How a confirmation ended without running the tool. Each maps to a distinct result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing matched; no form was shown.
    NoCandidates,
    /// Too many matches to offer in one form.
    TooManyCandidates,
    /// The user declined (or accepted with `confirm: false`).
    Declined,
    /// The user dismissed the form; the same state may be answered again.
    Cancelled,
    /// The live re-check refused the confirmed call.
    Revoked,
    /// An acceptance arrived after the tool stopped needing a confirmation: nothing ran, the
    /// client calls again under the policy as it is now.
    PolicyChanged,
}

impl Outcome {
    fn tag(self) -> &'static str {
        match self {
            Outcome::NoCandidates => "no_candidates",
            Outcome::TooManyCandidates => "too_many_candidates",
            Outcome::Declined => "declined",
            Outcome::Cancelled => "cancelled",
            Outcome::Revoked => "revoked",
            Outcome::PolicyChanged => "policy_changed",
        }
    }

    /// Whether the result says `isError`. A decline or a cancel is not an error, unless the tool
    /// declares an `outputSchema` (`structured`): its results must then carry structured content
    /// the layer cannot make up, and only an error result is exempt (clients such as the official
    /// Python SDK's refuse a plain one).
    fn is_error(self, structured: bool) -> bool {
        match self {
            Outcome::NoCandidates
            | Outcome::TooManyCandidates
            | Outcome::Revoked
            | Outcome::PolicyChanged => true,
            Outcome::Declined | Outcome::Cancelled => structured,
        }
    }
}

/// Where a result carries the server's `Implementation` (a SHOULD of 2026-07-28).
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// A complete `CallToolResult` reporting an [`Outcome`] in plain text, with the server's info
/// when the layer knows it; `structured`: the tool declares an `outputSchema`.
pub(crate) fn outcome_result(
    outcome: Outcome,
    text: &str,
    server_info: Option<&Value>,
    structured: bool,
) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert(META_OUTCOME.to_owned(), Value::from(outcome.tag()));
    if let Some(info) = server_info {
        meta.insert(META_SERVER_INFO.to_owned(), info.clone());
    }
    json!({
        "resultType": "complete",
        "content": [{ "type": "text", "text": text }],
        "isError": outcome.is_error(structured),
        "_meta": meta,
    })
}

/// What an `input_required` result asks the client to show the user.
pub(crate) enum Ask<'a, S> {
    /// A form with this `requestedSchema`.
    Form(S),
    /// The page at `url` (URL mode). `elicitation_id` is the page's id too, for clients that
    /// still expect one.
    Url {
        url: &'a str,
        elicitation_id: &'a str,
    },
}

/// An `InputRequiredResult` embedding one elicitation under `key`, serialized straight into the
/// reply: the challenge of every channel.
pub(crate) struct InputRequired<'a, S> {
    pub(crate) key: &'a str,
    pub(crate) message: &'a str,
    pub(crate) ask: Ask<'a, S>,
    pub(crate) state: &'a str,
    /// The server's `Implementation`, for `_meta`, when the layer knows it.
    pub(crate) server_info: Option<&'a Value>,
}

impl<S: Serialize> Serialize for InputRequired<'_, S> {
    fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        struct Params<'r, 'a, S>(&'r InputRequired<'a, S>);
        impl<S: Serialize> Serialize for Params<'_, '_, S> {
            fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
                let mut m = s.serialize_map(None)?;
                match &self.0.ask {
                    Ask::Form(schema) => {
                        m.serialize_entry("mode", "form")?;
                        m.serialize_entry("message", self.0.message)?;
                        m.serialize_entry("requestedSchema", schema)?;
                    }
                    Ask::Url {
                        url,
                        elicitation_id,
                    } => {
                        m.serialize_entry("mode", "url")?;
                        m.serialize_entry("message", self.0.message)?;
                        m.serialize_entry("url", url)?;
                        m.serialize_entry("elicitationId", elicitation_id)?;
                    }
                }
                m.end()
            }
        }
        struct Requests<'r, 'a, S>(&'r InputRequired<'a, S>);
        impl<S: Serialize> Serialize for Requests<'_, '_, S> {
            fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
                #[derive(Serialize)]
                struct Elicitation<P> {
                    method: &'static str,
                    params: P,
                }
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(
                    self.0.key,
                    &Elicitation {
                        method: "elicitation/create",
                        params: Params(self.0),
                    },
                )?;
                m.end()
            }
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("resultType", "input_required")?;
        m.serialize_entry("inputRequests", &Requests(self))?;
        m.serialize_entry("requestState", self.state)?;
        if let Some(info) = self.server_info {
            m.serialize_entry("_meta", &json!({ META_SERVER_INFO: info }))?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts an object, writes one member, then fails.
    struct FailsMidway;

    impl Serialize for FailsMidway {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(None)?;
            m.serialize_entry("partial", "written")?;
            Err(serde::ser::Error::custom("fails midway"))
        }
    }

    #[test]
    fn a_reply_that_fails_to_serialize_is_still_one_valid_error() {
        let body = envelope("7", "result", &FailsMidway);
        let value: Value = serde_json::from_slice(&body).expect("valid JSON");
        assert_eq!(
            value,
            json!({"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"Internal error"}})
        );
    }
}
