//! A test client for confirmed tools (feature `testing`): drives the two rounds — first call,
//! then accept, decline or cancel — against any HTTP tower service, so the tests of your own
//! confirmed tools take a few lines.
//!
//! ```ignore
//! use mcp_confirm::testing::TestClient;
//!
//! let mut client = TestClient::new(app).principal(Principal::new("alice"));
//! let first = client.call("notes_delete", json!({"title": "Groceries"})).await;
//! assert_eq!(first.choices(), ["note-3", "note-7", "note-14"]);
//! let done = client.accept(&first, Some("note-7")).await;
//! assert_eq!(done.text(), Some("Deleted note-7"));
//! ```
//!
//! Every request carries what a 2026-07-28 client sends: `_meta` with the protocol version and
//! the form-elicitation capability (change them with [`TestClient::capabilities`]), the
//! `Mcp-Method`, `Mcp-Name` and `MCP-Protocol-Version` headers, and a new JSON-RPC id per round.
//! Answers in JSON and in SSE are read alike.

use std::future::poll_fn;

pub use crate::token::keyring::fixed_test_secret;

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower_service::Service;

use crate::principal::Principal;
use crate::protocol::{
    META_CLIENT_CAPABILITIES, META_OUTCOME, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};

/// Drives confirmed tool calls against an HTTP service. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct TestClient<S> {
    service: S,
    principal: Option<Principal>,
    capabilities: Value,
    next_id: u64,
}

/// One answer: a result (complete or `input_required`) or a JSON-RPC error, with its HTTP status.
#[derive(Debug, Clone)]
pub struct Round {
    /// The HTTP status.
    pub status: http::StatusCode,
    /// The JSON-RPC message (from a JSON body, or the last `data:` of an SSE body).
    pub message: Value,
    tool: String,
    arguments: Value,
}

impl<S, B> TestClient<S>
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body,
    B::Error: std::fmt::Debug,
{
    /// A client of `service`, with no principal and the form-elicitation capability.
    pub fn new(service: S) -> Self {
        Self {
            service,
            principal: None,
            capabilities: json!({ "elicitation": { "form": {} } }),
            next_id: 1,
        }
    }

    /// Puts `principal` into each request's extensions, as an authentication layer would.
    #[must_use]
    pub fn principal(mut self, principal: Principal) -> Self {
        self.principal = Some(principal);
        self
    }

    /// The client capabilities each request declares in `_meta` (default: form elicitation).
    #[must_use]
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The first round: `tools/call` of `tool` with `arguments`.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Round {
        self.send(tool, arguments, None).await
    }

    /// Answers `first`'s form with `accept`: the confirmation box ticked and, for a pick-one
    /// form, `choice` as the chosen id.
    pub async fn accept(&mut self, first: &Round, choice: Option<&str>) -> Round {
        let mut content = serde_json::Map::new();
        if let Some(field) = first.confirm_field() {
            content.insert(field, Value::Bool(true));
        }
        if let (Some(field), Some(choice)) = (first.choice_field(), choice) {
            content.insert(field, Value::String(choice.to_owned()));
        }
        self.answer(first, json!({ "action": "accept", "content": content }))
            .await
    }

    /// Answers `first`'s form with `decline`.
    pub async fn decline(&mut self, first: &Round) -> Round {
        self.answer(first, json!({ "action": "decline" })).await
    }

    /// Answers `first`'s form with `cancel`.
    pub async fn cancel(&mut self, first: &Round) -> Round {
        self.answer(first, json!({ "action": "cancel" })).await
    }

    /// Retries `first` with `response` (an elicitation result: `{"action", "content"}`) under
    /// its input key, and its `requestState` echoed.
    pub async fn answer(&mut self, first: &Round, response: Value) -> Round {
        let key = first.input_key().unwrap_or_default();
        let mut retry = serde_json::Map::new();
        retry.insert("inputResponses".to_owned(), json!({ key: response }));
        if let Some(state) = first.request_state() {
            retry.insert("requestState".to_owned(), Value::String(state.to_owned()));
        }
        self.send(&first.tool, first.arguments.clone(), Some(retry))
            .await
    }

    async fn send(
        &mut self,
        tool: &str,
        arguments: Value,
        extra: Option<serde_json::Map<String, Value>>,
    ) -> Round {
        let id = self.next_id;
        self.next_id += 1;
        let mut params = json!({
            "_meta": {
                META_PROTOCOL_VERSION: PROTOCOL_VERSION,
                META_CLIENT_CAPABILITIES: self.capabilities,
            },
            "name": tool,
            "arguments": arguments,
        });
        if let (Some(extra), Some(params)) = (extra, params.as_object_mut()) {
            params.extend(extra);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let mut request = http::Request::post("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap_or_default();
        if let Some(principal) = &self.principal {
            request.extensions_mut().insert(principal.clone());
        }
        let mut service = self.service.clone();
        let ready = poll_fn(|cx| service.poll_ready(cx)).await;
        let response = match ready {
            Ok(()) => service.call(request).await,
            Err(e) => Err(e),
        };
        let response = response.unwrap_or_else(|e| panic!("the service failed: {e:?}"));
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("the body failed: {e:?}"))
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        let json = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|data| !data.is_empty())
            .unwrap_or(&text);
        Round {
            status,
            message: serde_json::from_str(json).unwrap_or(Value::String(text.into_owned())),
            tool: tool.to_owned(),
            arguments,
        }
    }
}

impl Round {
    /// The result, if the answer is one.
    pub fn result(&self) -> Option<&Value> {
        self.message.get("result")
    }

    /// The JSON-RPC error code, if the answer is an error.
    pub fn error_code(&self) -> Option<i64> {
        self.message.get("error")?.get("code")?.as_i64()
    }

    /// Whether the server asks for input (the first round of a confirmation).
    pub fn is_input_required(&self) -> bool {
        self.result()
            .and_then(|r| r.get("resultType"))
            .is_some_and(|t| t == "input_required")
    }

    /// The outcome the layer reports (`declined`, `cancelled`, `revoked`, …), if it answered.
    pub fn outcome(&self) -> Option<&str> {
        self.result()?.get("_meta")?.get(META_OUTCOME)?.as_str()
    }

    /// The text of the result's first content block.
    pub fn text(&self) -> Option<&str> {
        self.result()?.get("content")?.get(0)?.get("text")?.as_str()
    }

    /// The signed state to echo.
    pub fn request_state(&self) -> Option<&str> {
        self.result()?.get("requestState")?.as_str()
    }

    /// The input key of the (first) input request.
    pub fn input_key(&self) -> Option<String> {
        self.result()?
            .get("inputRequests")?
            .as_object()?
            .keys()
            .next()
            .cloned()
    }

    /// The `elicitation/create` params of the input request: `message`, `requestedSchema`, or
    /// `url` in URL mode.
    pub fn form(&self) -> Option<&Value> {
        let key = self.input_key()?;
        self.result()?.get("inputRequests")?.get(key)?.get("params")
    }

    /// The form's message.
    pub fn message(&self) -> Option<&str> {
        self.form()?.get("message")?.as_str()
    }

    /// The ids offered to pick from (empty for a confirm-only form).
    pub fn choices(&self) -> Vec<String> {
        let Some((_, property)) = self.choice_property() else {
            return Vec::new();
        };
        let listed = property
            .get("oneOf")
            .and_then(Value::as_array)
            .map(|options| {
                options
                    .iter()
                    .filter_map(|o| o.get("const"))
                    .collect::<Vec<_>>()
            })
            .or_else(|| {
                property
                    .get("enum")
                    .and_then(Value::as_array)
                    .map(|e| e.iter().collect())
            })
            .unwrap_or_default();
        listed
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    fn properties(&self) -> Option<&serde_json::Map<String, Value>> {
        self.form()?
            .get("requestedSchema")?
            .get("properties")?
            .as_object()
    }

    fn choice_property(&self) -> Option<(&String, &Value)> {
        self.properties()?
            .iter()
            .find(|(_, p)| p.get("oneOf").is_some() || p.get("enum").is_some())
    }

    fn choice_field(&self) -> Option<String> {
        self.choice_property().map(|(name, _)| name.clone())
    }

    fn confirm_field(&self) -> Option<String> {
        self.properties()?
            .iter()
            .find(|(_, p)| p.get("type").is_some_and(|t| t == "boolean"))
            .map(|(name, _)| name.clone())
    }
}
