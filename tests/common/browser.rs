//! The browser-approval fixture: `notes_destroy` approved on the layer's page, the URL-mode
//! calls, and requests to the page as the authentication layer in front would make them.

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::{ApprovalPage, InboxPage};
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{ConfirmLayer, ConfirmLayerBuilder, KeyRing, Principal, ToolPolicy};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{Answer, Fixture, KEY, Notes, PERSONAL, delete_policy, now};

pub const BASE: &str = "http://notes.example/confirm/";
pub const ORIGIN: &str = "http://notes.example";

pub fn destroy_policy(notes: &Notes) -> ToolPolicy {
    delete_policy(notes)
        .input_key("destroy_approval")
        .approve_in_browser()
}

/// A builder on `store` and `clock` with the approval page at [`BASE`], and no tool yet.
pub fn base(keys: KeyRing, clock: &ManualClock, store: &MemoryReplayStore) -> ConfirmLayerBuilder {
    ConfirmLayer::builder(keys)
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .ttl(Duration::from_secs(300))
        .clock(clock.clone())
        .store(store.clone())
        .approval_url(BASE)
}

/// A builder with `notes_destroy` approved in the browser, on `store` and `clock`.
pub fn builder(
    keys: KeyRing,
    notes: &Notes,
    clock: &ManualClock,
    store: &MemoryReplayStore,
) -> ConfirmLayerBuilder {
    base(keys, clock, store).tool("notes_destroy", destroy_policy(notes))
}

/// The fixture with `notes_destroy` approved in the browser, and its page.
pub fn browser() -> (Fixture, ApprovalPage) {
    browser_with(|p| p)
}

/// The same, with `notes_destroy`'s policy adjusted by `policy`.
pub fn browser_with(policy: impl FnOnce(ToolPolicy) -> ToolPolicy) -> (Fixture, ApprovalPage) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool("notes_destroy", policy(destroy_policy(&notes)))
        .build();
    let page = layer.approval_page();
    (Fixture::new(layer, notes, clock, store), page)
}

/// The fixture, its page and inbox, from a builder on a fresh memory store and manual clock.
pub fn with_layer(
    build: impl FnOnce(ConfirmLayerBuilder, &Notes) -> ConfirmLayerBuilder,
) -> (Fixture, ApprovalPage, InboxPage) {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = build(
        base(KeyRing::single("k1", KEY).unwrap(), &clock, &store),
        &notes,
    )
    .build();
    let (page, inbox) = (layer.approval_page(), layer.inbox_page());
    (Fixture::new(layer, notes, clock, store), page, inbox)
}

/// A layer with `policy` on `tool` and the approval page, built: for what the build refuses.
pub fn try_build_tool(
    tool: &str,
    policy: ToolPolicy,
) -> Result<ConfirmLayer, mcp_confirm::ConfigError> {
    ConfirmLayer::builder(KeyRing::single("k1", KEY).unwrap())
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .approval_url(BASE)
        .tool(tool, policy)
        .try_build()
}

/// Every value of hidden field `name` in the page.
pub fn hidden(html: &str, name: &str) -> Vec<String> {
    let needle = format!("name=\"{name}\" value=\"");
    html.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
        .collect()
}

pub fn url_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
           "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}})
}

pub fn destroy_call_in(id: Value, ws: &str, title: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": url_meta(), "name":"notes_destroy",
        "arguments":{"workspaceUri": ws, "title": title}}})
}

pub fn destroy_call(id: Value) -> Value {
    destroy_call_in(id, PERSONAL, "Groceries")
}

pub fn with_answer(mut call: Value, state: &str, answer: Value) -> Value {
    call["params"]["requestState"] = json!(state);
    call["params"]["inputResponses"] = json!({ "destroy_approval": answer });
    call
}

pub fn went_to_page(state: &str, id: Value) -> Value {
    with_answer(destroy_call(id), state, json!({"action": "accept"}))
}

/// The URL-mode elicitation of an `input_required` result: (url, elicitationId, state).
pub fn elicitation(answer: &Answer) -> (String, String, String) {
    let result = answer.result();
    assert_eq!(result["resultType"], "input_required", "{}", answer.json());
    let params = &result["inputRequests"]["destroy_approval"]["params"];
    assert_eq!(params["mode"], "url", "{params}");
    (
        params["url"].as_str().unwrap().to_owned(),
        params["elicitationId"].as_str().unwrap().to_owned(),
        result["requestState"].as_str().unwrap().to_owned(),
    )
}

pub fn outcome(answer: &Answer) -> Value {
    answer.result()["_meta"]["io.github.mcp-confirm/outcome"].clone()
}

/// A page request as `principal` (the auth layer in front put it in the extensions).
pub async fn visit<P>(
    page: &P,
    method: &str,
    url: &str,
    principal: Option<&str>,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (StatusCode, http::HeaderMap, String)
where
    P: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone,
{
    visit_as(
        page,
        method,
        url,
        principal.map(Principal::new),
        headers,
        body,
    )
    .await
}

/// The HTML of the page at `url` as `principal` sees it, whatever its status.
pub async fn page_as<P>(page: &P, url: &str, principal: &str) -> String
where
    P: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone,
{
    visit(page, "GET", url, Some(principal), &[], "").await.2
}

/// A page request as `principal`, roles and all.
pub async fn visit_as<P>(
    page: &P,
    method: &str,
    url: &str,
    principal: Option<Principal>,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (StatusCode, http::HeaderMap, String)
where
    P: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone,
{
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Full::new(body.into())).unwrap();
    if let Some(p) = principal {
        request.extensions_mut().insert(p);
    }
    let response: Response<Full<Bytes>> = page
        .clone()
        .oneshot(request)
        .await
        .unwrap_or_else(|e: Infallible| match e {});
    let (parts, body) = response.into_parts();
    let text = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    (parts.status, parts.headers, text)
}

/// The anti-forgery token the page embedded.
pub fn csrf(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..at + 64].to_owned()
}

pub const FORM_HEADERS: [(&str, &str); 3] = [
    ("content-type", "application/x-www-form-urlencoded"),
    ("origin", ORIGIN),
    ("sec-fetch-site", "same-origin"),
];

/// POSTs the page's form as `principal` from the page's own origin.
pub async fn decide(
    page: &ApprovalPage,
    url: &str,
    principal: &str,
    form: &str,
) -> (StatusCode, String) {
    let (status, _, body) = visit(
        page,
        "POST",
        url,
        Some(principal),
        &FORM_HEADERS,
        form.to_owned(),
    )
    .await;
    (status, body)
}
