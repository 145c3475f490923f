//! The "everything" server for the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, `--requirements 2026-07-28`): an rmcp stateless
//! 2026-07-28 server behind `HostOriginLayer`, a fixed principal and `ConfirmLayer`.
//!
//! ```text
//! cargo run -p mcp-confirm-tools --bin conformance_server -- [--addr 127.0.0.1:3930]
//! ```
//!
//! `.ci/conformance.sh` starts it on a free port (`--addr 127.0.0.1:0`) and reads the address from
//! the first line it prints. Two tools are confirmed by `ConfirmLayer` itself, which answers their
//! first call with `input_required` and a signed single-use `requestState`, and rejects a tampered
//! state with a JSON-RPC error; the handler only ever sees the confirmed retry. Everything else the
//! suite's scenarios name is implemented by the rmcp handler below; the tools of the Tasks
//! extension (SEP-2663), which the not-scored `tasks-*` scenarios exercise, are in `tasks.rs`. It
//! offers no `subscriptions/listen` and declares no `listChanged`, so the suite skips its
//! subscription checks.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

mod tasks;

use axum::Router;
use axum::extract::Request;
use axum::middleware;
use mcp_confirm::guard::HostOriginLayer;
use mcp_confirm::{ConfirmLayer, Confirmed, KeyRing, Principal, ToolPolicy};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::InputResponses as ToolInputResponses;
use rmcp::handler::server::tool::RequestState;
use rmcp::model::{
    CacheScope, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitationSchema, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, GetTaskParams, GetTaskResult, Implementation, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, JsonObject, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptArgument, PromptMessage, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource,
    ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::TaskManager;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use tower::ServiceBuilder;

const USAGE: &str = "usage: conformance_server [--addr HOST:PORT]";

/// The tools `ConfirmLayer` guards: the suite's request-state and tampered-state scenarios.
const CONFIRMED_TOOLS: [&str; 2] = [
    "test_input_required_result_request_state",
    "test_input_required_result_tampered_state",
];

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// Four silent samples of 8 kHz mono 16-bit WAV.
const WAV: &str = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQgAAAAAAAAAAAAAAA==";

const STATIC_TEXT_URI: &str = "test://static-text";
const STATIC_BINARY_URI: &str = "test://static-binary";
const TEMPLATE_URI: &str = "test://template/{id}/data";

/// How long clients may cache the lists and the resources: their content never changes, and it is
/// the same for every caller.
const CACHE_TTL_MS: u64 = 60_000;

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("{e}");
        std::process::exit(2);
    }
}

async fn run() -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "mcp_confirm=info,rmcp=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let addr = addr_flag()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("bind {addr}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let url = format!("http://{addr}/mcp");
    let router = app(url.clone()).map_err(|e| e.to_string())?;
    // The first line of stdout is the endpoint; `.ci/conformance.sh` waits for it.
    println!("conformance server (MCP 2026-07-28) listening on {url}");
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())
}

fn addr_flag() -> Result<SocketAddr, String> {
    let mut addr = SocketAddr::from(([127, 0, 0, 1], 3930));
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--addr" => {
                let value = args
                    .next()
                    .ok_or(format!("--addr needs a value\n{USAGE}"))?;
                addr = value.parse().map_err(|e| format!("--addr: {e}"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    Ok(addr)
}

/// The axum app: `/mcp` behind Host/Origin validation, a fixed principal and `ConfirmLayer`.
fn app(audience: String) -> Result<Router, mcp_confirm::ConfigError> {
    // The whole tool list: the layer checks every destructive tool is confirmed or exempt. The
    // suite's fixtures carry no annotations (destructive by the spec's default); all but the
    // confirmed two are exempt, by name.
    let listed = (Everything::tool_router() + Everything::task_tools()).list_all();
    let mut confirm = ConfirmLayer::builder(KeyRing::random())
        .audience(audience)
        .tool_list(&listed);
    for tool in &listed {
        if !CONFIRMED_TOOLS.contains(&tool.name.as_ref()) {
            confirm = confirm.exempt(tool.name.to_string());
        }
    }
    for tool in CONFIRMED_TOOLS {
        confirm = confirm.tool(
            tool,
            ToolPolicy::confirm_only()
                .message("Please confirm")
                .input_key("confirm")
                .confirm_field("ok")
                .confirm_title("OK"),
        );
    }
    // One task store for the whole server: every request gets a fresh handler, and a task started
    // by one request is polled, answered and cancelled by later ones.
    let tasks = TaskManager::new();
    let mcp = StreamableHttpService::new(
        move || Ok(Everything::new(tasks.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_sse_keep_alive(None)
            .with_json_response(true),
    );
    let service = ServiceBuilder::new()
        .layer(HostOriginLayer::localhost())
        .layer(middleware::map_request(as_conformance_client))
        .layer(confirm.try_build()?)
        .service(mcp);
    Ok(Router::new().nest_service("/mcp", service))
}

/// The suite sends no credentials: every request is the one principal `conformance`.
async fn as_conformance_client(mut request: Request) -> Request {
    request
        .extensions_mut()
        .insert(Principal::new("conformance"));
    request
}

/// The arguments of `test_custom_header_region`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RegionArgs {
    /// A region name.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

/// The rmcp handler: the tools, prompts, resources, completions and tasks the scenarios call.
#[derive(Clone)]
struct Everything {
    tool_router: ToolRouter<Self>,
    /// The server's task store, shared by every request's handler.
    tasks: TaskManager,
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// An `input_required` result with one input request under `key`.
fn input_required(key: &str, request: InputRequest, state: Option<&str>) -> InputRequiredResult {
    let requests = InputRequests::from([(key.to_owned(), request)]);
    InputRequiredResult::new(Some(requests), state.map(str::to_owned))
}

/// A form asking for one required string.
fn elicit(message: &str, field: &str) -> InputRequest {
    let schema = ElicitationSchema::builder()
        .required_string(field)
        .build_unchecked();
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema: schema,
        },
    ))
}

// Sampling, roots and logging are deprecated in rmcp 3.11 (SEP-2577), but sampling and roots are
// still MRTR input requests on the 2026-07-28 wire, and the suite exercises all three. Their types
// are named in full where used, so that each `allow(deprecated)` stays this narrow.

#[allow(deprecated)]
fn sample(prompt: &str, max_tokens: u32) -> InputRequest {
    use rmcp::model::{CreateMessageRequest, CreateMessageRequestParams, SamplingMessage};
    InputRequest::CreateMessage(CreateMessageRequest::new(CreateMessageRequestParams::new(
        vec![SamplingMessage::user_text(prompt)],
        max_tokens,
    )))
}

#[allow(deprecated)]
fn list_roots() -> InputRequest {
    InputRequest::ListRoots(rmcp::model::ListRootsRequest::default())
}

#[allow(deprecated)]
fn sampling_capability() -> ClientCapabilities {
    ClientCapabilities::builder().enable_sampling().build()
}

fn elicitation_capability() -> ClientCapabilities {
    ClientCapabilities::builder().enable_elicitation().build()
}

/// The string `field` of an accepted elicitation answer under `key`.
fn accepted<'a>(responses: Option<&'a InputResponses>, key: &str, field: &str) -> Option<&'a str> {
    let answer = responses?.get(key)?;
    (answer["action"] == "accept")
        .then(|| answer["content"][field].as_str())
        .flatten()
}

/// The text of a sampling answer (a `CreateMessageResult`) under `key`.
fn sampled<'a>(responses: Option<&'a InputResponses>, key: &str) -> Option<&'a str> {
    responses?.get(key)?["content"]["text"].as_str()
}

/// The root URIs of a `roots/list` answer under `key`.
fn roots(responses: Option<&InputResponses>, key: &str) -> Option<Vec<String>> {
    let roots = responses?.get(key)?["roots"].as_array()?;
    roots
        .iter()
        .map(|root| root["uri"].as_str().map(str::to_owned))
        .collect()
}

// The request states the handler issues below only name the round a call is in: they carry no
// authority, so they are not signed. The two confirmed tools get signed, single-use states from
// `ConfirmLayer`.
const MULTIPLE_INPUTS_STATE: &str = "multiple-inputs";
const ROUND_1_STATE: &str = "multi-round/1";
const ROUND_2_STATE: &str = "multi-round/2";
const CAPABILITIES_STATE: &str = "capabilities";

/// The input schema the `json-schema-2020-12` scenario expects back from `tools/list`.
fn json_schema_2020_12() -> Arc<JsonObject> {
    let schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

#[tool_router]
impl Everything {
    fn new(tasks: TaskManager) -> Self {
        Self {
            tool_router: Self::tool_router() + Self::task_tools(),
            tasks,
        }
    }

    /// The suite's `json-schema-2020-12` scenario: an input schema with `$schema`, `$defs`,
    /// `$anchor`, composition and conditional keywords, listed exactly as written.
    #[tool(
        description = "Takes a contact, described in JSON Schema 2020-12.",
        input_schema = json_schema_2020_12(),
        annotations(read_only_hint = true)
    )]
    async fn json_schema_2020_12_tool(&self) -> CallToolResult {
        text("ok")
    }

    #[tool(description = "Returns one text block.")]
    async fn test_simple_text(&self) -> CallToolResult {
        text("This is a simple text response for testing.")
    }

    #[tool(description = "Returns a 1x1 PNG image.")]
    async fn test_image_content(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::image(PNG, "image/png")])
    }

    #[tool(description = "Returns a short WAV clip.")]
    async fn test_audio_content(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::audio(WAV, "audio/wav")])
    }

    #[tool(description = "Returns an embedded text resource.")]
    async fn test_embedded_resource(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::resource(ResourceContents::text(
            "This is an embedded resource content.",
            "test://embedded-resource",
        ))])
    }

    #[tool(description = "Returns text, an image and an embedded resource.")]
    async fn test_multiple_content_types(&self) -> CallToolResult {
        let data = json!({"test": "data", "value": 123}).to_string();
        CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(PNG, "image/png"),
            ContentBlock::resource(
                ResourceContents::text(data, "test://mixed-content-resource")
                    .with_mime_type("application/json"),
            ),
        ])
    }

    #[tool(description = "Always fails, as a tool error (isError: true).")]
    async fn test_error_handling(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(
            "This tool intentionally returns an error for testing",
        )])
    }

    #[tool(description = "Reports progress 0, 50 and 100 of 100 when given a progress token.")]
    async fn test_tool_with_progress(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let token = ctx.meta.get_progress_token();
        for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if step > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if let Some(token) = &token {
                let update =
                    ProgressNotificationParam::new(token.clone(), progress).with_total(100.0);
                ctx.peer
                    .notify_progress(update)
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            }
        }
        Ok(text("Progress complete."))
    }

    #[tool(description = "Needs the sampling capability; fails with -32021 without it.")]
    async fn test_missing_capability(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        match ctx.client_capabilities() {
            Some(caps) if caps.sampling.is_some() => Ok(text("The client declared sampling.")),
            _ => Err(ErrorData::missing_required_client_capability(
                sampling_capability(),
            )),
        }
    }

    #[tool(
        description = "Asks for input the stateless way: an input_required result, never a request on the stream."
    )]
    async fn test_streaming_elicitation(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let declared = ctx.client_capabilities().and_then(|caps| caps.elicitation);
        if declared.is_none() {
            return Err(ErrorData::missing_required_client_capability(
                elicitation_capability(),
            ));
        }
        let answer = accepted(responses.as_ref(), "stream_input", "value");
        Ok(match answer {
            Some(value) => text(format!("Streaming complete: {value}")).into(),
            None => {
                let ask = elicit("Enter a value", "value");
                input_required("stream_input", ask, None).into()
            }
        })
    }

    /// Not confirmed: the suite's `http-custom-header-server-validation` sends this tool
    /// `Mcp-Param-Region` headers, right and wrong, through the layer, and rmcp validates them.
    #[tool(description = "Echoes its region; the region also travels in Mcp-Param-Region.")]
    async fn test_custom_header_region(
        &self,
        rmcp::handler::server::wrapper::Parameters(args): rmcp::handler::server::wrapper::Parameters<
            RegionArgs,
        >,
    ) -> CallToolResult {
        text(format!("Region: {}", args.region))
    }

    #[tool(description = "Logs one info message, only when the request asks for a log level.")]
    #[allow(deprecated)]
    async fn test_logging_tool(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
        // rmcp does not filter by the request's `_meta` log level: only log when asked to.
        if let Some(LoggingLevel::Debug | LoggingLevel::Info) = ctx.meta.log_level() {
            let message = LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                json!("test_logging_tool ran"),
            );
            ctx.peer
                .notify_logging_message(message)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        }
        Ok(text("Logging evaluated."))
    }

    #[tool(description = "Asks for the user's name, then greets them.")]
    async fn test_input_required_result_elicitation(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
    ) -> CallToolResponse {
        match accepted(responses.as_ref(), "user_name", "name") {
            Some(name) => text(format!("Hello, {name}!")).into(),
            None => {
                let ask = elicit("What is your name?", "name");
                input_required("user_name", ask, None).into()
            }
        }
    }

    #[tool(description = "Asks the client's model a question, then reports the answer.")]
    async fn test_input_required_result_sampling(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
    ) -> CallToolResponse {
        match sampled(responses.as_ref(), "capital_question") {
            Some(answer) => text(format!("The model answered: {answer}")).into(),
            None => {
                let ask = sample("What is the capital of France?", 100);
                input_required("capital_question", ask, None).into()
            }
        }
    }

    #[tool(description = "Asks for the client's roots, then lists them.")]
    async fn test_input_required_result_list_roots(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
    ) -> CallToolResponse {
        match roots(responses.as_ref(), "client_roots") {
            Some(roots) => text(format!("Client roots: {}", roots.join(", "))).into(),
            None => input_required("client_roots", list_roots(), None).into(),
        }
    }

    #[tool(description = "Asks for a name, a sampled greeting and the roots in one round.")]
    async fn test_input_required_result_multiple_inputs(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
        RequestState(state): RequestState,
    ) -> CallToolResponse {
        let responses = responses.as_ref();
        let answers = (
            accepted(responses, "user_name", "name"),
            sampled(responses, "greeting"),
            roots(responses, "client_roots"),
        );
        match (state.as_deref(), answers) {
            (Some(MULTIPLE_INPUTS_STATE), (Some(name), Some(greeting), Some(roots))) => {
                text(format!("{greeting} {name} (roots: {})", roots.join(", "))).into()
            }
            _ => InputRequiredResult::new(
                Some(InputRequests::from([
                    ("user_name".to_owned(), elicit("What is your name?", "name")),
                    ("greeting".to_owned(), sample("Generate a greeting", 50)),
                    ("client_roots".to_owned(), list_roots()),
                ])),
                Some(MULTIPLE_INPUTS_STATE.to_owned()),
            )
            .into(),
        }
    }

    #[tool(description = "Asks two questions in two rounds, carrying the round in requestState.")]
    async fn test_input_required_result_multi_round(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, ErrorData> {
        let responses = responses.as_ref();
        let step1 = || {
            let ask = elicit("Step 1: What is your name?", "name");
            input_required("step1", ask, Some(ROUND_1_STATE)).into()
        };
        let step2 = || {
            let ask = elicit("Step 2: What is your favorite color?", "color");
            input_required("step2", ask, Some(ROUND_2_STATE)).into()
        };
        Ok(match state.as_deref() {
            None => step1(),
            Some(ROUND_1_STATE) if accepted(responses, "step1", "name").is_some() => step2(),
            Some(ROUND_1_STATE) => step1(),
            Some(ROUND_2_STATE) => match accepted(responses, "step2", "color") {
                Some(color) => {
                    text(format!("Multi-round complete: favorite color {color}.")).into()
                }
                None => step2(),
            },
            Some(_) => {
                return Err(ErrorData::invalid_params("unknown requestState", None));
            }
        })
    }

    #[tool(description = "Asks only for the input kinds the request's capabilities declare.")]
    async fn test_input_required_result_capabilities(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
        RequestState(state): RequestState,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let (Some(CAPABILITIES_STATE), Some(responses)) = (state.as_deref(), &responses) {
            let keys: Vec<&str> = responses.keys().map(String::as_str).collect();
            return Ok(text(format!("capabilities-ok: received {}", keys.join(","))).into());
        }
        let caps = ctx.client_capabilities().unwrap_or_default();
        let mut requests = InputRequests::new();
        if caps.elicitation.is_some() {
            requests.insert(
                "elicit_input".to_owned(),
                elicit("Elicitation input", "value"),
            );
        }
        if caps.sampling.is_some() {
            requests.insert("sample_input".to_owned(), sample("Sample request", 50));
        }
        if requests.is_empty() {
            return Err(ErrorData::missing_required_client_capability(
                sampling_capability(),
            ));
        }
        Ok(InputRequiredResult::new(Some(requests), Some(CAPABILITIES_STATE.to_owned())).into())
    }

    #[tool(description = "Runs only once the user has confirmed (ConfirmLayer asks).")]
    async fn test_input_required_result_request_state(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        confirmed_only(&ctx, "test_input_required_result_request_state")
    }

    #[tool(description = "Runs only once the user has confirmed (ConfirmLayer asks).")]
    async fn test_input_required_result_tampered_state(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        confirmed_only(&ctx, "test_input_required_result_tampered_state")
    }
}

/// The result of a confirmed tool: reached only through `ConfirmLayer`, which puts `Confirmed`
/// into the HTTP extensions after checking the signed state and the user's answer. Without it the
/// call is refused, so a route that bypasses the layer fails closed.
fn confirmed_only(ctx: &RequestContext<RoleServer>, tool: &str) -> CallToolResult {
    let confirmed = ctx
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| Confirmed::from_extensions(&parts.extensions));
    match confirmed {
        Some(c) if c.covers(tool, None) => {
            text(format!("state-ok: {tool} confirmed by {}", c.principal))
        }
        _ => CallToolResult::error(vec![ContentBlock::text(
            "Refused: this tool runs only after the user confirms.",
        )]),
    }
}

fn prompts() -> Vec<Prompt> {
    let required = |name: &str, description: &str| {
        PromptArgument::new(name)
            .with_description(description)
            .with_required(true)
    };
    vec![
        Prompt::new(
            "test_simple_prompt",
            Some("A prompt without arguments."),
            None,
        ),
        Prompt::new(
            "test_prompt_with_arguments",
            Some("A prompt with two arguments."),
            Some(vec![
                required("arg1", "First test argument"),
                required("arg2", "Second test argument"),
            ]),
        ),
        Prompt::new(
            "test_prompt_with_embedded_resource",
            Some("A prompt embedding a resource."),
            Some(vec![required(
                "resourceUri",
                "URI of the resource to embed",
            )]),
        ),
        Prompt::new(
            "test_prompt_with_image",
            Some("A prompt with an image."),
            None,
        ),
        Prompt::new(
            "test_input_required_result_prompt",
            Some("A prompt that asks the user for context first."),
            None,
        ),
    ]
}

/// A prompt argument the caller must supply.
fn argument<'a>(request: &'a GetPromptRequestParams, name: &str) -> Result<&'a str, ErrorData> {
    request
        .arguments
        .as_ref()
        .and_then(|args| args.get(name))
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorData::invalid_params(format!("missing argument {name}"), None))
}

/// `id` of a `test://template/{id}/data` URI.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix("test://template/")?
        .strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The completions offered for `value`: the candidates it is a prefix of.
fn complete_from(candidates: &[&str], value: &str) -> Vec<String> {
    candidates
        .iter()
        .filter(|c| c.starts_with(value))
        .map(|c| (*c).to_owned())
        .collect()
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Everything {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_completions()
                .enable_prompts()
                .enable_resources()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new(
            "mcp-confirm-conformance",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    // rmcp answers the three `tasks/*` methods with -32021 itself when the request did not declare
    // the Tasks extension, so these only ever see requests that did. An unknown task id is -32602.

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    /// Answers the keys still pending; unknown or already answered keys are ignored, as SEP-2663
    /// asks, and the acknowledgement is the empty `{resultType: "complete"}`.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    /// Records the cancellation and acknowledges at once, also for a task that has already ended;
    /// the task itself decides how it ends (see `slow_compute`).
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The task fixtures after the other tools, each part sorted by name: the suite's
        // http-header-validation calls whichever tool comes first with no arguments and no
        // capabilities and needs an answer, and `confirm_delete`, first by name, needs the Tasks
        // extension. `self.tool_router` serves the same tools, both routers together.
        let mut tools = Self::tool_router().list_all();
        tools.extend(Self::task_tools().list_all());
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(CACHE_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(prompts())
            .with_ttl_ms(CACHE_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let messages = match request.name.as_str() {
            "test_simple_prompt" => vec![PromptMessage::new_text(
                Role::User,
                "This is a simple prompt for testing.",
            )],
            "test_prompt_with_arguments" => {
                let (arg1, arg2) = (argument(&request, "arg1")?, argument(&request, "arg2")?);
                vec![PromptMessage::new_text(
                    Role::User,
                    format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"),
                )]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = argument(&request, "resourceUri")?;
                vec![
                    PromptMessage::new(
                        Role::User,
                        ContentBlock::resource(ResourceContents::text(
                            "Embedded resource content for testing.",
                            uri,
                        )),
                    ),
                    PromptMessage::new_text(
                        Role::User,
                        "Please process the embedded resource above.",
                    ),
                ]
            }
            "test_prompt_with_image" => vec![
                PromptMessage::new(Role::User, ContentBlock::image(PNG, "image/png")),
                PromptMessage::new_text(Role::User, "Please analyze the image above."),
            ],
            "test_input_required_result_prompt" => {
                let responses = request.input_responses.as_ref();
                let Some(context) = accepted(responses, "user_context", "context") else {
                    let ask = elicit("What context should the prompt use?", "context");
                    return Ok(input_required("user_context", ask, None).into());
                };
                vec![PromptMessage::new_text(
                    Role::User,
                    format!("Answer using this context: {context}"),
                )]
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt {other}"),
                    None,
                ));
            }
        };
        Ok(GetPromptResult::new(messages).into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = vec![
            Resource::new(STATIC_TEXT_URI, "static-text")
                .with_description("A static text resource.")
                .with_mime_type("text/plain"),
            Resource::new(STATIC_BINARY_URI, "static-binary")
                .with_description("A static binary resource (a 1x1 PNG).")
                .with_mime_type("image/png"),
        ];
        Ok(ListResourcesResult::with_all_items(resources)
            .with_ttl_ms(CACHE_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let template = ResourceTemplate::new(TEMPLATE_URI, "template-data")
            .with_description("JSON data for any id.")
            .with_mime_type("application/json");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template])
            .with_ttl_ms(CACHE_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let contents = match uri.as_str() {
            STATIC_TEXT_URI => {
                ResourceContents::text("This is the content of the static text resource.", uri)
            }
            STATIC_BINARY_URI => ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
            other => match template_id(other) {
                Some(id) => {
                    let data = format!("Data for ID: {id}");
                    let json = json!({"id": id, "templateTest": true, "data": data});
                    ResourceContents::text(json.to_string(), uri).with_mime_type("application/json")
                }
                // rmcp sends this as -32602 on 2026-07-28 (SEP-2164).
                None => {
                    return Err(ErrorData::resource_not_found(
                        "Resource not found",
                        Some(json!({ "uri": uri })),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents])
            .with_ttl_ms(CACHE_TTL_MS)
            .with_cache_scope(CacheScope::Public)
            .into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let value = request.argument.value.as_str();
        let values = match (&request.r#ref, request.argument.name.as_str()) {
            (Reference::Prompt(prompt), "arg1" | "arg2")
                if prompt.name == "test_prompt_with_arguments" =>
            {
                complete_from(
                    &["paris", "park", "party", "testValue1", "testValue2"],
                    value,
                )
            }
            (Reference::Resource(template), "id") if template.uri == TEMPLATE_URI => {
                complete_from(&["123", "456", "789"], value)
            }
            _ => Vec::new(),
        };
        let completion =
            CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }
}
