//! Safe-by-default destructive MCP tool calls: a tower layer that makes each tool you name go
//! through a signed, one-time user confirmation before it runs.
//!
//! ```
//! use std::convert::Infallible;
//! use http_body_util::BodyExt;
//! use mcp_confirm::store::MemoryReplayStore;
//! use mcp_confirm::{Candidate, ConfirmLayer, KeyRing, Lookup, PolicyError, Principal, ToolPolicy};
//! use mcp_confirm::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // From your secret store, never a constant: KeyRing::new([("k2", new), ("k1", old)]) (the
//! // first key signs, all verify), or KeyRing::single_hex("k1", &hex) for `openssl rand -hex 32`.
//! let keys = KeyRing::random();
//! let confirm = ConfirmLayer::builder(keys)
//!     .audience("https://notes.example/mcp")
//!     // The server's tools, as tools/list returns them: every destructive one must be
//!     // confirmed or exempt, and every policy must name one of them.
//!     .tool_list(serde_json::json!([
//!         {"name": "notes_list", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
//!         {"name": "notes_delete", "inputSchema": {"type": "object", "properties": {
//!             "title": {"type": "string"}, "note_id": {"type": "string"}}}},
//!     ]))
//!     .replay_store(MemoryReplayStore::with_capacity(100_000))
//!     .tool(
//!         "notes_delete",
//!         ToolPolicy::pick_one(|lookup: Lookup| async move {
//!             // Find the notes this principal may delete that match `lookup.arguments`; each
//!             // carries the version the user is shown, so the approval means "this note as shown".
//!             Ok::<_, PolicyError>(vec![
//!                 Candidate::labelled("note-7", "note-7 · Groceries: milk, eggs").with_version("c0ffee"),
//!             ])
//!         })
//!         .message("Choose one matching note and confirm deletion.")
//!         .input_key("delete_choice")
//!         .choice_field("note_id")
//!         .select_into("note_id"),
//!     )
//!     .build();
//!
//! // Any HTTP service works: an axum Router, rmcp's StreamableHttpService, a hyper service_fn.
//! let mcp_server = service_fn(|_req: http::Request<mcp_confirm::body::RequestBody<String>>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::new()))
//! });
//! let service = ServiceBuilder::new().layer(confirm).service(mcp_server);
//!
//! // A first call of notes_delete, as an authenticated client sends it: the layer answers it
//! // itself, with the form and a signed, single-use requestState. The server sees nothing yet.
//! let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
//!     "name": "notes_delete", "arguments": {"title": "Groceries"},
//!     "_meta": {META_PROTOCOL_VERSION: PROTOCOL_VERSION,
//!               META_CLIENT_CAPABILITIES: {"elicitation": {"form": {}}}}}});
//! let request = http::Request::post("/mcp")
//!     .header("content-type", "application/json")
//!     .header("accept", "application/json, text/event-stream")
//!     .header("mcp-protocol-version", PROTOCOL_VERSION)
//!     .header("mcp-method", "tools/call")
//!     .header("mcp-name", "notes_delete")
//!     .extension(Principal::new("alice")) // what your authentication puts there
//!     .body(call.to_string())?;
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! let answer = runtime.block_on(async {
//!     let response = service.oneshot(request).await?;
//!     let body = response.into_body().collect().await?.to_bytes();
//!     Ok::<_, Box<dyn std::error::Error>>(serde_json::from_slice::<serde_json::Value>(&body)?)
//! })?;
//! assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
//! let form = &answer["result"]["inputRequests"]["delete_choice"]["params"];
//! assert_eq!(form["requestedSchema"]["properties"]["note_id"]["oneOf"][0]["const"], "note-7");
//! // The client retries the same call with the user's answer and this state echoed back.
//! assert!(answer["result"]["requestState"].is_string());
//! # Ok(())
//! # }
//! ```
//!
//! Put the layer *behind* authentication (it reads the [`Principal`] from request extensions) and
//! behind Host/Origin validation: the answers it writes itself never reach the inner server's checks.
//!
//! # How it works
//!
//! MCP `2026-07-28` is stateless. A server that needs the user answers a call with
//! `resultType: "input_required"`, an embedded `elicitation/create` form and an opaque
//! `requestState`; the client retries the same call with the user's answer and the state echoed
//! back. [`ConfirmLayer`] does all of this in front of any MCP server, and adds what a signed state
//! alone cannot give: **single use**. Every state carries a nonce that must be claimed, atomically,
//! in a [`ReplayStore`](store::ReplayStore) shared by every instance, before the call reaches the server.
//!
//! ```text
//! POST ─► buffer (≤ cap) ─► strict parse ── not a confirmed tools/call ──► inner service, same bytes
//!                                 │
//!                first call       │        retry (requestState present)
//!           ┌─────────────────────┴───────────────────────┐
//!           ▼                                             ▼
//!  _meta, version, headers, principal,          same gates, then verify the state (MAC, expiry,
//!  form capability; resolve candidates;         audience, principal, tool, argument digest, phase,
//!  seal state → input_required + form           new request id); capability again; read answer:
//!                                                 accept  → claim nonce → revalidate (with the
//!                                                           version the user saw) → forward the
//!                                                           rewritten call with `Confirmed`; the
//!                                                           nonce is Consumed when the response ends
//!                                                 decline → consume nonce, refusal result
//!                                                 cancel  → result, nothing consumed
//!                                                 missing → ask again; malformed → JSON-RPC error
//! ```
//!
//! Nothing runs before a validated acceptance, a final revalidation and a nonce claim.
//!
//! # Stale approvals, restarts and floods
//!
//! - A state binds each candidate's id **and version**; the revalidation hook compares the version
//!   the user saw with the live record, so an edited or replaced record is never acted on by an old
//!   approval ([`Candidate::with_version`], [`Revalidation::seen_version`]).
//! - The default [`MemoryReplayStore`](store::MemoryReplayStore) forgets on restart, so its states carry its boot epoch and a
//!   state from before a restart is refused ("ask again"). Redis and Postgres states survive.
//! - Each principal may hold only a budget of live entries in the replay store, and may be shown
//!   only so many forms a second: one principal's flood is refused with a retry-after while
//!   everyone else's confirmations go through.
//!
//! # Where things are
//!
//! - [`ConfirmLayer`] and its builder; [`ToolPolicy`] and [`Candidate`] say what is confirmed
//!   and how; [`Confirmed`] and [`Waived`] are what the inner service learns.
//! - [`store`]: replay stores (memory, Redis, Postgres) that make a confirmation single-use.
//! - [`approval`]: approval in the browser and its store (the pages are the crate
//!   `mcp-confirm-pages`);
//!   [`Approvers`] say who decides ([`ToolPolicy::approved_by`]: named principals, a role, four
//!   eyes, several approvals);
//!   [`approval::batch`]: one decision over several waiting calls
//!   ([`ToolPolicy::batch_group`]); [`approval::ApprovalDesk`]: the port through which every
//!   page (ours or one's own) reads and decides approvals, reports, and signs its forms.
//! - [`narrow`]: what an approver may narrow before approving, and the check that an edit only
//!   narrows ([`ToolPolicy::narrowable`]).
//! - [`notify`]: telling approvers of a new approval (signed Standard Webhooks; the sender is
//!   `mcp-confirm-pages`' feature `webhooks`).
//! - [`StandingApprovals`]: the standing approvals a
//!   [policy](ToolPolicy::standing) lets the user give ("allow for 10 minutes"), listed and
//!   revoked through the API or a page; [`store::standing`] keeps them.
//! - [`grant`]: durable grants for work that runs later, and the worker API.
//! - [`audit`]: what every decision reports: the `tracing` target, and the
//!   [`DecisionLog`](audit::DecisionLog) seam through which a decision log keeps it. The
//!   tamper-evident log itself (Merkle tree, signed checkpoints, witnesses, a file or a shared
//!   PostgreSQL table, the offline verifier) is the `mcp-confirm-log` crate.
//! - [`guard`]: Host/Origin validation to stack in front; [`scope`]: workspace containment for
//!   file tools; `rmcp` (feature `rmcp`): the handler-side `Confirmation`; `testing` (feature
//!   `testing`): a client for both rounds.
//! - [`observe`]: the `tools/call` span (OpenTelemetry's MCP conventions; with feature `otel`
//!   started with OpenTelemetry's API in `observe/otel.rs`, its parent from `params._meta`),
//!   its decision child and span events; `metrics`
//!   (feature `metrics`): decisions, refusals, answer times, claims and store failures through
//!   the `metrics` facade.
//! - [`defaults`]: every default and bound of the builder.
//!
//! How the crate is built inside (the decision path, the channels, where each feature lives)
//! is in `ARCHITECTURE.md` in the repository.
//!
//! # What a confirmation does not prove
//!
//! An `accept` comes from the client, not necessarily from a human: some clients let a model answer
//! forms. The confirmation is consent bound to an authenticated principal, not an authorization
//! decision; keep server-side authorization, and use the revalidation hook to re-check it at the
//! moment the call runs.

#![deny(missing_docs, unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod approval;
mod approvers;
pub mod audit;
pub mod body;
pub mod clock;
mod completion;
mod config;
mod confirmed;
mod decision;
mod engine;
mod form;
pub mod grant;
pub mod guard;
mod http;
mod kernel;
mod layer;
mod limit;
mod listing;
mod message;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
pub mod narrow;
pub mod notify;
pub mod observe;
mod policy;
mod principal;
mod protocol;
#[cfg(feature = "rmcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "rmcp")))]
pub mod rmcp;
mod rpc;
pub mod scope;
mod service;
mod standing;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod token;
pub mod tools;

/// Internals the project's own benchmarks and tests measure directly. Not part of the API:
/// compiled only with the `bench` feature, no stability.
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod __bench {
    use crate::KeyRing;
    use crate::token::claims::sample;
    use crate::token::codec;

    /// The bytes a sample state binds (the signed payload), for comparing codecs on equal input.
    pub fn sample_payload() -> Vec<u8> {
        let mut out = Vec::new();
        sample().encode(&mut out);
        out
    }

    /// The sample state's claims, built once: what the challenge path has in hand when it seals.
    #[derive(Debug, Clone)]
    pub struct SampleClaims(crate::token::claims::Claims);

    /// The sample claims (three candidates with versions), for timing [`seal`] alone.
    pub fn sample_claims() -> SampleClaims {
        SampleClaims(sample())
    }

    /// Seals `claims`.
    ///
    /// # Panics
    /// If the sample does not seal: a benchmark must not time an empty string.
    pub fn seal(ring: &KeyRing, claims: &SampleClaims) -> String {
        match codec::seal(ring, &claims.0) {
            Ok(token) => token,
            Err(e) => panic!("the sample state does not seal: {e:?}"),
        }
    }

    /// Builds the sample claims and seals them: [`seal`] plus building three candidates.
    pub fn seal_sample(ring: &KeyRing) -> String {
        seal(ring, &sample_claims())
    }

    /// Opens a state; `true` if it verifies.
    pub fn open(ring: &KeyRing, token: &str) -> bool {
        codec::open(ring, token).is_ok()
    }
}

/// Support for the code `#[confirm_router]` generates and for the workspace's other crates
/// (`mcp-confirm-log`), released together with this one. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::kernel::{hex, unhex};
    pub use crate::policy::PolicyShape;
    #[cfg(feature = "rmcp")]
    pub use crate::rmcp::__private::*;
    #[cfg(feature = "postgres")]
    pub use crate::store::backend::{migrate_once, table_name};
    #[cfg(feature = "rmcp")]
    pub use ::rmcp::model::Tool;
}

/// Entry points for the project's fuzz targets (`fuzz/`) and their stable-toolchain fallback.
/// Not part of the API: compiled only with the `fuzzing` feature, no stability.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz {
    use bytes::Bytes;
    use serde_json::Value;

    use crate::KeyRing;
    use crate::form::{self, Answer};
    use crate::message::{self, Parsed};
    use crate::policy::{Lookup, PolicyError, ToolPolicy};
    use crate::token::candidates::Shown;
    use crate::token::claims::Claims;
    use crate::token::codec;

    /// The fixed ring the targets open states with.
    fn ring() -> Option<&'static KeyRing> {
        static RING: std::sync::OnceLock<Option<KeyRing>> = std::sync::OnceLock::new();
        RING.get_or_init(|| {
            KeyRing::single("k1", crate::token::keyring::fixed_test_secret(0x42)).ok()
        })
        .as_ref()
    }

    /// Opens `token` under a fixed ring. Checks: no panic; whatever opens re-seals to itself.
    pub fn open_state(token: &str) {
        let Some(ring) = ring() else {
            return;
        };
        if let Ok((claims, _)) = codec::open(ring, token) {
            // Only the ring's key can produce an opening token, and sealing is deterministic.
            assert_eq!(codec::seal(ring, &claims).as_deref(), Ok(token));
        }
    }

    /// Decodes a raw payload. Checks: no panic; a payload that decodes re-encodes to the same bytes.
    pub fn decode_claims(bytes: &[u8]) {
        if let Some(claims) = Claims::decode(bytes) {
            let mut out = Vec::new();
            claims.encode(&mut out);
            assert_eq!(out, bytes, "the payload encoding is not canonical");
        }
    }

    /// Classifies a body with the strict scanner. Checks: no panic; an intercepted call's parts
    /// are what a full serde parse of the same body says; and a body that is forwarded untouched
    /// is never one that serde reads as a call of the guarded tool.
    pub fn scan_body(bytes: &[u8]) {
        let body = Bytes::copy_from_slice(bytes);
        match message::classify(&body, |tool| (tool == "notes_delete").then_some(())) {
            Parsed::Intercept(call, ()) => {
                let value: Value =
                    serde_json::from_slice(bytes).expect("an intercepted body is JSON");
                assert_eq!(value["params"]["name"], "notes_delete");
                assert_eq!(value["method"], "tools/call");
                let id: Value = serde_json::from_str(&call.id).expect("the id is JSON");
                assert_eq!(value["id"], id);
            }
            Parsed::Retry(call) => {
                let value: Value = serde_json::from_slice(bytes).expect("a retry's body is JSON");
                assert_eq!(value["method"], "tools/call");
                assert_ne!(call.tool, "notes_delete");
                assert!(call.is_retry(), "a retry without a retry's members");
            }
            Parsed::Forward | Parsed::Listing { .. } => {
                if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
                    assert!(
                        !(value["method"] == "tools/call"
                            && value["params"]["name"] == "notes_delete"),
                        "a guarded call was forwarded unconfirmed"
                    );
                    // A retry of any tool is looked at before it goes on: a state of the
                    // layer's must never reach the inner service unread.
                    assert!(
                        !(value["method"] == "tools/call"
                            && value["params"]["name"].is_string()
                            && (value["params"].get("requestState").is_some()
                                || value["params"].get("inputResponses").is_some())),
                        "a retry was forwarded unread"
                    );
                }
            }
            Parsed::Reject { .. } => {}
        }
    }

    /// Reads an `inputResponses` value against a pick-one form over three signed candidates.
    /// Checks: no panic; an acceptance only ever names a signed candidate.
    pub fn read_answer(bytes: &[u8]) {
        let Ok(responses) = serde_json::from_slice::<Value>(bytes) else {
            return;
        };
        let policy = ToolPolicy::pick_one(|_: Lookup| async { Ok::<_, PolicyError>(vec![]) })
            .input_key("delete_choice")
            .choice_field("note_id");
        let signed: Vec<Shown> = ["note-3", "note-7", "note-14"]
            .into_iter()
            .map(|id| Shown::new(id, Some("v1")))
            .collect();
        if let Answer::Accept { chosen, .. } = form::read_answer(&policy, &signed, Some(&responses))
        {
            let chosen = chosen.expect("a pick-one acceptance names a candidate");
            assert!(signed.iter().any(|s| s.id == chosen));
            let content = &responses["delete_choice"]["content"];
            assert_eq!(content["confirm"], true);
            assert_eq!(content["note_id"], chosen.as_str());
        }
    }
}

/// The README's Rust examples, compiled and run as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use confirmed::{Confirmed, Waived, WaiverReason};
pub use http::{InnerHttpService, ResponseFuture};
pub use layer::{ConfigError, ConfirmLayer, ConfirmLayerBuilder};

/// The builder's defaults and bounds, for code that wants to say "the default" by name.
pub mod defaults {
    pub use crate::layer::{
        DEFAULT_CHALLENGE_BURST, DEFAULT_CHALLENGES_PER_SECOND, DEFAULT_CLOCK_SKEW,
        DEFAULT_GRANT_TTL, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_LISTING_BYTES, DEFAULT_TTL,
        MAX_GRANT_TTL, MAX_TTL,
    };
    pub use crate::policy::MAX_STANDING_FOR;
}
pub use approvers::Approvers;
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use mcp_confirm_macros::{confirm, confirm_router};
pub use policy::{
    ApproverCheck, ApproverQuery, Candidate, Condition, Lookup, PolicyError, Refusal, Resolver,
    Revalidate, Revalidation, Scope, ToolPolicy,
};
pub use principal::{PageSession, Principal, PrincipalExtractor, PrincipalFromExtension};
pub use protocol::{
    META_CLIENT_CAPABILITIES, META_CONFIRMATION, META_DECLARED, META_OUTCOME,
    META_PROTOCOL_VERSION, PROTOCOL_VERSION, code,
};
pub use rpc::{JsonRpcMessage, JsonRpcReply};
pub use service::Confirm;
pub use standing::StandingApprovals;
pub use token::keyring::{KeyError, KeyRing};
