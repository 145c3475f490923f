//! The bodies of the fuzz targets, one function per target.
//!
//! `cargo fuzz` (nightly, libFuzzer) runs them through `fuzz_targets/*.rs`; the stable fallback,
//! `tests/fuzz_fallback.rs`, includes this file as a module and runs the same functions under
//! proptest. Each calls the crate's `__fuzz` entry points (feature `fuzzing`), which assert the
//! invariants: a panic is a finding.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::{Ready, poll_fn, ready};
use std::sync::{Once, OnceLock};
use std::task::{Context, Poll};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use mcp_confirm::__fuzz;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::token::PREFIX;
use mcp_confirm::{
    Candidate, Confirm, ConfirmLayer, Confirmed, KeyRing, Lookup, PolicyError, Principal,
    ToolPolicy,
};
use mcp_confirm::{JsonRpcMessage, JsonRpcReply};
use serde_json::Value;
use sha2::Sha256;
use tower_layer::Layer;
use tower_service::Service;

/// The ring `__fuzz::open_state` opens under: key id and secret.
pub const KEY_ID: &str = "k1";
/// See [`KEY_ID`].
/// 32 bytes that look random (the same bytes as the tests' `secret(0x42)`): `KeyRing` refuses
/// `[0x42; 32]`.
pub const SECRET: [u8; 32] = [
    0xed, 0x42, 0xa1, 0x91, 0xd4, 0x88, 0xa6, 0xdc, 0xc1, 0x17, 0x32, 0x39, 0x71, 0xc4, 0xe2, 0x8a,
    0xbd, 0x02, 0x52, 0x40, 0x4f, 0x1b, 0x4a, 0x50, 0x62, 0x8c, 0xbe, 0x4d, 0x9f, 0x24, 0x74, 0xd8,
];

// The token layout of `src/token/codec.rs` and the key derivation of `src/token/keyring.rs`,
// restated so that fuzzed payloads can carry a valid tag and reach the strict payload parse behind
// the MAC. `check_forgery` fails loudly when the crate's format moves away from this copy.
const FORMAT_VERSION: u8 = 4;
const MAC_KEY_INFO: &[u8] = b"mcp-confirm/requestState/v1/mac";

/// `token_decode`: the `requestState` decoder, from the text a client sends down to the payload.
///
/// The input is tried as a token as it is (when it is UTF-8), as the bytes of a token body
/// (`mcpc1.` + base64url, which exercises the version, key-id and MAC checks but almost never
/// passes the MAC), as a payload under a valid tag (so the payload parse and the re-seal check run
/// behind the MAC), and as a bare payload.
pub fn token_decode(data: &[u8]) {
    check_forgery();
    if let Ok(text) = std::str::from_utf8(data) {
        __fuzz::open_state(text);
    }
    __fuzz::open_state(&wrap(data));
    __fuzz::open_state(&forge(data));
    __fuzz::decode_claims(data);
}

/// `scan_body`: the strict JSON-RPC body scanner, checked against a full serde parse.
pub fn scan_body(data: &[u8]) {
    __fuzz::scan_body(data);
}

/// `read_answer`: the reading of an `inputResponses` value against a pick-one form.
pub fn read_answer(data: &[u8]) {
    __fuzz::read_answer(data);
}

/// `layer_forward`: the whole message face of the layer (`Service<JsonRpcMessage>`), guarding
/// `notes_delete`, in front of an inner service that records what reaches it.
///
/// Checks the property the strict scanner exists for, from the inner server's side: whatever
/// reaches the inner service without a [`Confirmed`] extension is not, as serde_json (what servers
/// behind the layer parse with) reads it, a `tools/call` of `notes_delete`. `__fuzz::scan_body`
/// checks the other direction (an intercepted call is what serde_json says).
pub fn layer_forward(data: &[u8]) {
    HARNESS.with(|h| {
        let mut service = h.service.clone();
        let message = JsonRpcMessage::new(data.to_vec());
        h.runtime.block_on(async {
            poll_fn(|cx| service.poll_ready(cx))
                .await
                .unwrap_or_else(|e| match e {});
            let _reply = service.call(message).await;
        });
    });
    for (body, confirmed) in FORWARDED.with(|f| std::mem::take(&mut *f.borrow_mut())) {
        forwarded_check(&body, confirmed);
    }
}

/// `layer_forward`'s check on one message the inner service received.
pub fn forwarded_check(body: &[u8], confirmed: bool) {
    if confirmed {
        return;
    }
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        assert!(
            !(value["method"] == "tools/call" && value["params"]["name"] == "notes_delete"),
            "an unconfirmed notes_delete call reached the inner service: {:?}",
            String::from_utf8_lossy(body)
        );
    }
}

thread_local! {
    static HARNESS: Harness = Harness::new();
    /// What the inner service received on this thread: the body, and whether it was confirmed.
    static FORWARDED: RefCell<Vec<(Vec<u8>, bool)>> = const { RefCell::new(Vec::new()) };
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    service: Confirm<Recorder>,
}

impl Harness {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
        let keys = KeyRing::single(KEY_ID, SECRET).expect("a valid ring");
        let layer = ConfirmLayer::builder(keys)
            .without_tool_list_unchecked()
            .audience("https://fuzz.example/mcp")
            .replay_store(MemoryReplayStore::with_capacity(10_000))
            .unauthenticated_local_principal(Principal::new("alice"))
            .without_challenge_rate_limit()
            .tool(
                "notes_delete",
                ToolPolicy::pick_one(|_: Lookup| async {
                    Ok::<_, PolicyError>(vec![
                        Candidate::labelled("note-3", "Groceries").with_version("v1"),
                        Candidate::new("note-7").with_version("v2"),
                    ])
                })
                .input_key("delete_choice")
                .choice_field("note_id")
                .select_into("note_id"),
            )
            .build();
        Self {
            runtime,
            service: layer.layer(Recorder),
        }
    }
}

/// The inner service: records each message on this thread and answers an empty result.
#[derive(Clone)]
struct Recorder;

impl Service<JsonRpcMessage> for Recorder {
    type Response = JsonRpcReply;
    type Error = Infallible;
    type Future = Ready<Result<JsonRpcReply, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, message: JsonRpcMessage) -> Self::Future {
        let confirmed = message.extensions.get::<Confirmed>().is_some();
        FORWARDED.with(|f| f.borrow_mut().push((message.body.to_vec(), confirmed)));
        ready(Ok(JsonRpcReply::message(
            &br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#[..],
        )))
    }
}

/// `mcpc1.` + base64url of `raw`: a token whose body is `raw` (version, key id, payload, tag).
pub fn wrap(raw: &[u8]) -> String {
    let mut token = String::with_capacity(PREFIX.len() + raw.len().div_ceil(3) * 4);
    token.push_str(PREFIX);
    URL_SAFE_NO_PAD.encode_string(raw, &mut token);
    token
}

/// A token carrying `payload` under a valid tag of the fuzzing ring's key.
pub fn forge(payload: &[u8]) -> String {
    static KEYED: OnceLock<Hmac<Sha256>> = OnceLock::new();
    let keyed = KEYED.get_or_init(|| {
        let mut mac_key = [0u8; 32];
        Hkdf::<Sha256>::new(None, &SECRET)
            .expand(MAC_KEY_INFO, &mut mac_key)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        <Hmac<Sha256> as KeyInit>::new_from_slice(&mac_key).expect("HMAC takes any key length")
    });
    let mut raw = Vec::with_capacity(2 + KEY_ID.len() + payload.len() + 32);
    raw.push(FORMAT_VERSION);
    raw.push(KEY_ID.len() as u8);
    raw.extend_from_slice(KEY_ID.as_bytes());
    raw.extend_from_slice(payload);
    let mut mac = keyed.clone();
    mac.update(&raw);
    raw.extend_from_slice(&mac.finalize().into_bytes());
    wrap(&raw)
}

/// Panics unless [`forge`] seals the crate's sample claims exactly as the crate does, so a format
/// change cannot silently turn the behind-the-MAC half of `token_decode` into dead code.
pub fn check_forgery() {
    static CHECKED: Once = Once::new();
    CHECKED.call_once(|| {
        let ring = mcp_confirm::KeyRing::single(KEY_ID, SECRET).expect("a valid ring");
        assert_eq!(
            forge(&mcp_confirm::__bench::sample_payload()),
            mcp_confirm::__bench::seal_sample(&ring),
            "fuzz/src/lib.rs no longer forges tokens as src/token/codec.rs seals them: \
             update FORMAT_VERSION or MAC_KEY_INFO"
        );
    });
}
