//! Shared fixtures: a notes "database", a recording inner service, and request builders.
#![allow(dead_code, unreachable_pub)]

pub mod audit_events;
pub mod authenticator;
pub mod browser;
pub mod faulty;
pub mod kept_log;
pub mod queued;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_confirm::approval::ApprovalStore;
use mcp_confirm::body::RequestBody;
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::passkey::PasskeyStore;
use mcp_confirm::store::standing::StandingStore;
use mcp_confirm::store::{MemoryReplayStore, ReplayStore};
use mcp_confirm::{
    Candidate, Confirm, ConfirmLayer, ConfirmLayerBuilder, Confirmed, KeyRing, Lookup, PolicyError,
    Principal, Refusal, Revalidation, ToolPolicy,
};
use serde_json::{Value, json};
use tower::{Layer, ServiceExt};

/// A store of nonces and browser approvals both, as every store of the crate is: what the
/// tests that run one flow over each backend hold.
pub trait Store: ReplayStore + ApprovalStore + StandingStore + PasskeyStore {}

impl<S: ReplayStore + ApprovalStore + StandingStore + PasskeyStore> Store for S {}

pub const KEY: [u8; 32] = secret(0x11);
pub const PERSONAL: &str = "file:///data/personal";
pub const TEAM: &str = "file:///data/team";

/// One request as the inner service saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub body: Bytes,
    pub headers: HeaderMap,
    pub confirmed: Option<Confirmed>,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("inner got JSON")
    }
}

#[derive(Debug, Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    pub fn last(&self) -> Seen {
        self.0
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("inner was called")
    }
}

/// Notes: id → (workspace, title), and id → generation (the version: bumped by every edit).
#[derive(Debug, Clone, Default)]
pub struct Notes(
    pub Arc<Mutex<BTreeMap<String, (String, String)>>>,
    pub Arc<Mutex<BTreeMap<String, u64>>>,
);

impl Notes {
    pub fn seeded() -> Self {
        let notes = Notes::default();
        for (id, ws, title) in [
            ("note-3", PERSONAL, "Groceries"),
            ("note-7", PERSONAL, "Groceries"),
            ("note-14", PERSONAL, "Groceries"),
            ("note-20", PERSONAL, "Taxes"),
            ("note-30", TEAM, "Groceries"),
        ] {
            notes
                .0
                .lock()
                .unwrap()
                .insert(id.into(), (ws.into(), title.into()));
        }
        notes
    }

    pub fn move_to(&self, id: &str, ws: &str) {
        if let Some(n) = self.0.lock().unwrap().get_mut(id) {
            n.0 = ws.into();
        }
    }

    /// The note's version as a resolver shows it.
    pub fn version(&self, id: &str) -> String {
        format!("g{}", self.1.lock().unwrap().get(id).copied().unwrap_or(0))
    }

    /// Edits the note in place: same id, same title, new version.
    pub fn edit(&self, id: &str) {
        *self.1.lock().unwrap().entry(id.to_owned()).or_default() += 1;
    }

    /// Deletes the note and creates another under the same id (new version).
    pub fn replace(&self, id: &str, ws: &str, title: &str) {
        self.0
            .lock()
            .unwrap()
            .insert(id.into(), (ws.into(), title.into()));
        self.edit(id);
    }
}

/// The string argument `key` (empty when absent or not a string).
fn str_arg(arguments: &Value, key: &str) -> String {
    arguments[key].as_str().unwrap_or_default().to_owned()
}

fn may_use(principal: &str, ws: &str) -> bool {
    match principal {
        "alice" => ws == PERSONAL || ws == TEAM,
        "bob" => ws == TEAM,
        _ => false,
    }
}

pub fn delete_policy(notes: &Notes) -> ToolPolicy {
    let find = notes.clone();
    let check_notes = notes.clone();
    ToolPolicy::pick_one(move |lookup: Lookup| {
        let notes = find.clone();
        async move {
            let ws = str_arg(&lookup.arguments, "workspaceUri");
            let title = str_arg(&lookup.arguments, "title");
            if !may_use(lookup.principal.subject(), &ws) {
                return Ok::<_, PolicyError>(vec![]);
            }
            let found: Vec<(String, String)> = notes
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, (w, t))| *w == ws && *t == title)
                .map(|(id, (_, t))| (id.clone(), t.clone()))
                .collect();
            Ok(found
                .into_iter()
                .map(|(id, t)| {
                    let version = notes.version(&id);
                    Candidate::labelled(id.clone(), format!("{t} ({id})")).with_version(version)
                })
                .collect())
        }
    })
    .message("Choose one matching note and confirm deletion.")
    .input_key("delete_choice")
    .choice_field("note_id")
    .select_into("note_id")
    .revalidate(move |check: Revalidation| {
        let notes = check_notes.clone();
        async move {
            let ws = str_arg(&check.arguments, "workspaceUri");
            if !may_use(check.principal.subject(), &ws) {
                return Err(Refusal::new("principal may not use this workspace"));
            }
            let chosen = check.chosen.clone().unwrap_or_default();
            let live = notes.0.lock().unwrap().get(&chosen).cloned();
            match live {
                Some((w, _)) if w != ws => Err(Refusal::new("note moved out of the workspace")),
                Some(_) if check.seen_version != Some(notes.version(&chosen)) => {
                    Err(Refusal::new("note changed since the form was shown"))
                }
                Some(_) => Ok(()),
                None => Err(Refusal::new("note is gone")),
            }
        }
    })
}

pub type Inner = tower::util::BoxCloneSyncService<
    Request<RequestBody<Full<Bytes>>>,
    Response<Full<Bytes>>,
    Infallible,
>;

/// An inner service that records what it receives and answers a fixed tool result.
pub fn recording_inner(recorder: &Recorder) -> Inner {
    let recorder = recorder.clone();
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |req: Request<RequestBody<Full<Bytes>>>| {
            let recorder = recorder.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let confirmed = parts.extensions.get::<Confirmed>().cloned();
                recorder.0.lock().unwrap().push(Seen {
                    body: body.clone(),
                    headers: parts.headers,
                    confirmed,
                });
                let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let Some(id) = message.get("id").cloned() else {
                    return Ok::<_, Infallible>(
                        Response::builder()
                            .status(StatusCode::ACCEPTED)
                            .body(Full::new(Bytes::new()))
                            .unwrap(),
                    );
                };
                let answer = json!({"jsonrpc":"2.0","id":id,"result":{"resultType":"complete",
                "content":[{"type":"text","text":"done by inner"}]}});
                Ok(Response::builder()
                    .header("content-type", "application/json")
                    .header("x-inner", "yes")
                    .body(Full::new(Bytes::from(answer.to_string())))
                    .unwrap())
            }
        },
    ))
}

pub struct Fixture {
    pub svc: Confirm<Inner>,
    pub seen: Recorder,
    pub notes: Notes,
    pub clock: ManualClock,
    pub store: MemoryReplayStore,
}

impl Fixture {
    /// The fixture around `layer` over the recording inner service.
    pub fn new(
        layer: ConfirmLayer,
        notes: Notes,
        clock: ManualClock,
        store: MemoryReplayStore,
    ) -> Self {
        Self::with_inner(layer, recording_inner, notes, clock, store)
    }

    /// The fixture around `layer` over the inner service `inner` makes, given the recorder the
    /// fixture's `seen` reads.
    pub fn with_inner(
        layer: ConfirmLayer,
        inner: impl FnOnce(&Recorder) -> Inner,
        notes: Notes,
        clock: ManualClock,
        store: MemoryReplayStore,
    ) -> Self {
        let seen = Recorder::default();
        Fixture {
            svc: layer.layer(inner(&seen)),
            seen,
            notes,
            clock,
            store,
        }
    }

    /// Sends `call` as alice.
    pub async fn alice(&self, call: &Value) -> Answer {
        send(&self.svc, post(call, Some("alice"))).await
    }

    /// Alice's retry with `id`, accepting `choice` on `state`.
    pub async fn accept(&self, state: &str, id: Value, choice: &str) -> Answer {
        self.alice(&accepted(state, id, choice)).await
    }
}

pub fn base_builder(
    notes: &Notes,
    clock: &ManualClock,
    store: &MemoryReplayStore,
) -> ConfirmLayerBuilder {
    keyed_builder(KeyRing::single("k1", KEY).unwrap(), notes, clock, store)
}

fn keyed_builder(
    keys: KeyRing,
    notes: &Notes,
    clock: &ManualClock,
    store: &MemoryReplayStore,
) -> ConfirmLayerBuilder {
    ConfirmLayer::builder(keys)
        .without_tool_list_unchecked()
        .audience("https://notes.example/mcp")
        .ttl(Duration::from_secs(300))
        .clock(clock.clone())
        .replay_store(store.clone())
        .tool(
            "notes_delete",
            delete_policy(notes).select_header("Note-Id"),
        )
}

pub fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

pub fn fixture() -> Fixture {
    fixture_with(|b| b)
}

pub fn fixture_with(customize: impl FnOnce(ConfirmLayerBuilder) -> ConfirmLayerBuilder) -> Fixture {
    fixture_from(KeyRing::single("k1", KEY).unwrap(), 10_000, customize)
}

/// A fixture signing with `keys` over a memory store of `capacity` entries.
pub fn fixture_from(
    keys: KeyRing,
    capacity: usize,
    customize: impl FnOnce(ConfirmLayerBuilder) -> ConfirmLayerBuilder,
) -> Fixture {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(capacity, clock.clone());
    let layer = customize(keyed_builder(keys, &notes, &clock, &store)).build();
    Fixture::new(layer, notes, clock, store)
}

pub fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
           "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},
           "io.modelcontextprotocol/clientInfo":{"name":"test-client","version":"1"}})
}

pub fn delete_call(id: Value, title: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "_meta": meta(), "name":"notes_delete",
        "arguments":{"workspaceUri": PERSONAL, "title": title}}})
}

pub fn retry(mut call: Value, id: Value, state: &str, responses: Value) -> Value {
    call["id"] = id;
    call["params"]["requestState"] = Value::String(state.to_owned());
    call["params"]["inputResponses"] = responses;
    call
}

/// The retry of the standard first call with `id`, answering `responses`.
pub fn answered(state: &str, id: Value, responses: Value) -> Value {
    retry(delete_call(json!(1), "Groceries"), id, state, responses)
}

/// The retry of the standard first call with `id`, accepting `choice`.
pub fn accepted(state: &str, id: Value, choice: &str) -> Value {
    answered(state, id, accept(choice))
}

pub fn accept(choice: &str) -> Value {
    json!({"delete_choice":{"action":"accept","content":{"note_id":choice,"confirm":true}}})
}

/// The user declines the form.
pub fn decline() -> Value {
    json!({"delete_choice":{"action":"decline"}})
}

/// The user dismisses the form without an answer.
pub fn cancel() -> Value {
    json!({"delete_choice":{"action":"cancel"}})
}

/// A POST with the MCP headers derived from the body and `principal` in the extensions.
pub fn post(body: &Value, principal: Option<&str>) -> Request<Full<Bytes>> {
    post_raw(body.to_string().into_bytes(), principal, Some(body))
}

pub fn post_raw(
    body: Vec<u8>,
    principal: Option<&str>,
    headers_from: Option<&Value>,
) -> Request<Full<Bytes>> {
    let mut req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(v) = headers_from {
        if let Some(version) =
            v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str()
        {
            req = req.header("mcp-protocol-version", version);
        }
        if let Some(m) = v["method"].as_str() {
            req = req.header("mcp-method", m);
        }
        if let Some(n) = v["params"]["name"].as_str() {
            req = req.header("mcp-name", n);
        }
    }
    let mut req = req.body(Full::new(Bytes::from(body))).unwrap();
    if let Some(p) = principal {
        req.extensions_mut().insert(Principal::new(p));
    }
    req
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.bytes))
    }
    pub fn result(&self) -> Value {
        self.json()["result"].clone()
    }
    pub fn error(&self) -> Value {
        self.json()["error"].clone()
    }
    pub fn state(&self) -> String {
        self.result()["requestState"]
            .as_str()
            .expect("a requestState")
            .to_owned()
    }
}

pub async fn send(svc: &Confirm<Inner>, req: Request<Full<Bytes>>) -> Answer {
    let response = svc.clone().oneshot(req).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        bytes,
    }
}

/// The layer asked for a confirmation: an `input_required` result.
pub fn assert_asks(answer: &Answer) {
    assert_eq!(
        answer.result()["resultType"],
        "input_required",
        "{:?}",
        answer.bytes
    );
}

/// The confirmed call ran: the inner service's answer came back.
pub fn assert_ran(answer: &Answer) {
    assert_eq!(
        answer.result()["content"][0]["text"],
        "done by inner",
        "{:?}",
        answer.bytes
    );
}

/// `json`, sent as alice byte for byte (with the MCP headers its parsed form calls for).
pub async fn send_text(f: &Fixture, json: String) -> Answer {
    let value: Value = serde_json::from_str(&json).unwrap();
    send(
        &f.svc,
        post_raw(json.into_bytes(), Some("alice"), Some(&value)),
    )
    .await
}

pub fn assert_frozen_state_error(answer: &Answer) {
    assert_eq!(
        answer.error(),
        json!({"code":-32602,"message":"Invalid or expired requestState","data":{"reason":"invalid_request_state"}}),
        "{:?}",
        answer.bytes
    );
}

/// Runs the first round for alice and returns the state.
pub async fn challenge(f: &Fixture) -> String {
    let answer = f.alice(&delete_call(json!(1), "Groceries")).await;
    assert_asks(&answer);
    answer.state()
}

/// A fresh fixture and the state of alice's first round on it.
pub async fn challenged() -> (Fixture, String) {
    let f = fixture();
    let state = challenge(&f).await;
    (f, state)
}

/// The tests' keys: 32 bytes that look random, fixed per seed.
pub use mcp_confirm::testing::fixed_test_secret as secret;

/// A memory store that says its nonces can be claimed in a handler's transaction: the stand-in
/// for `PostgresStore` in tests of `claimed_by_handler` that need no database.
#[derive(Debug, Clone)]
pub struct ClaimsInHandler(pub MemoryReplayStore);

impl ReplayStore for ClaimsInHandler {
    fn claim(
        &self,
        claim: &mcp_confirm::store::ClaimRequest,
    ) -> mcp_confirm::store::BoxFuture<
        '_,
        Result<mcp_confirm::store::Claim, mcp_confirm::store::StoreError>,
    > {
        self.0.claim(claim)
    }

    fn complete(
        &self,
        claim: &mcp_confirm::store::ClaimRequest,
    ) -> mcp_confirm::store::BoxFuture<'_, Result<bool, mcp_confirm::store::StoreError>> {
        self.0.complete(claim)
    }

    fn is_used(
        &self,
        nonce: mcp_confirm::store::Nonce,
        principal: mcp_confirm::store::PrincipalKey,
    ) -> mcp_confirm::store::BoxFuture<'_, Result<bool, mcp_confirm::store::StoreError>> {
        self.0.is_used(nonce, principal)
    }

    fn boot_epoch(&self) -> Option<mcp_confirm::store::BootEpoch> {
        self.0.boot_epoch()
    }

    fn claims_in_handler(&self) -> bool {
        true
    }
}

/// The directory of the tests: one name per person, so two names are two people. The recheck
/// every rule that excludes the caller needs (a deployment whose pages and endpoint name people
/// differently maps them here).
pub async fn different_people(
    query: mcp_confirm::ApproverQuery,
) -> Result<bool, mcp_confirm::PolicyError> {
    Ok(query.approver != query.caller.subject())
}
