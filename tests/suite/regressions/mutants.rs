//! Tests written to kill mutants that `cargo mutants` found alive in `src/token/`, `src/form.rs`,
//! `src/engine.rs` and `src/driver.rs` (issue 9). Each test names the mutant(s) it kills.

use crate::common::audit_events::Events;
use crate::common::*;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit, Mac};
use std::time::Duration;

use mcp_confirm::KeyRing;
use mcp_confirm::store::{Claim, ClaimRequest, Owner, PrincipalKey};
use mcp_confirm::store::{Nonce, ReplayStore};
use serde_json::{Value, json};
use sha2::Sha256;

// --- request ids: `canonical_number` (src/token/claims.rs) ---------------------------------------

/// The first call of the standard fixture with `raw_id` spelled exactly as given.
fn first_call_with_raw_id(raw_id: &str) -> (Vec<u8>, Value) {
    let call = delete_call(json!(0), "Groceries");
    let body = call
        .to_string()
        .replacen("\"id\":0", &format!("\"id\":{raw_id}"), 1);
    assert!(body.contains(&format!("\"id\":{raw_id}")), "{body}");
    (body.into_bytes(), call)
}

/// The accepting retry of `state` with `raw_id` spelled exactly as given.
fn retry_with_raw_id(state: &str, raw_id: &str) -> (Vec<u8>, Value) {
    let call = accepted(state, json!(0), "note-7");
    let body = call
        .to_string()
        .replacen("\"id\":0", &format!("\"id\":{raw_id}"), 1);
    assert!(body.contains(&format!("\"id\":{raw_id}")), "{body}");
    (body.into_bytes(), call)
}

/// Challenges with `first` as the request id, retries with `retry`, and returns whether the retry
/// was refused as reusing the original id (the frozen state error, nothing forwarded).
async fn retry_counts_as_same_id(first: &str, retry: &str) -> bool {
    let f = fixture();
    let (body, headers_from) = first_call_with_raw_id(first);
    let answer = send(&f.svc, post_raw(body, Some("alice"), Some(&headers_from))).await;
    assert_asks(&answer);
    let state = answer.state();
    let (body, headers_from) = retry_with_raw_id(&state, retry);
    let answer = send(&f.svc, post_raw(body, Some("alice"), Some(&headers_from))).await;
    if f.seen.count() == 1 {
        return false;
    }
    assert_frozen_state_error(&answer);
    assert_eq!(f.seen.count(), 0);
    true
}

/// Kills `claims.rs: replace - with / in canonical_number` (the trailing `- trimmed.len()`) and
/// `replace - with / in canonical_number` (the leading-zero count `all.len() - significant.len()`):
/// with a single significant digit both are bijections, so the existing tests (`1`, `0.1`, `10`)
/// cannot tell; two significant digits can.
#[tokio::test]
async fn multi_digit_ids_compare_by_value() {
    // 12 and 120 differ (dividing by the significand's length maps both to 12e1).
    assert!(!retry_counts_as_same_id("12", "120").await);
    // 1.2 and 0.12 differ (dividing the digit count by the significant digits maps both to 12e-2).
    assert!(!retry_counts_as_same_id("1.2", "0.12").await);
    // Equal values with two significant digits are the same id.
    assert!(retry_counts_as_same_id("120", "1.2e2").await);
    assert!(retry_counts_as_same_id("0.12", "12e-2").await);
}

/// Kills `claims.rs: replace / with % in canonical_number` at `.min(i64::MAX / 4)`: the exponent
/// cap must be far above any exponent a real id uses (`% 4` caps it at 3).
#[tokio::test]
async fn ids_with_exponents_above_three_compare_by_value() {
    assert!(retry_counts_as_same_id("10000", "1e4").await);
    assert!(retry_counts_as_same_id("2e7", "20000000").await);
}

/// Kills `claims.rs: replace / with % in canonical_number` at `unwrap_or(i64::MAX / 4)`: an exponent
/// too long for an i64 saturates; it must not collapse to a small exponent (`% 4` makes it 3, so
/// `1e-99999999999999999999` would be the id `0.001`). A positive one (`1e99999999999999999999`)
/// never gets this far: the body is refused as a parse error (-32700), the number being out of
/// range for JSON parsers.
#[tokio::test]
async fn an_exponent_beyond_i64_is_not_a_small_number() {
    assert!(!retry_counts_as_same_id("0.001", "1e-99999999999999999999").await);
    assert!(!retry_counts_as_same_id("1e-99999999999999999999", "0.001").await);
}

// --- argument binding: `hash_len` (src/token/claims.rs) ------------------------------------------

/// Kills `claims.rs: replace hash_len with ()`: without length prefixes, `[[1],2]` and `[[1,2]]`
/// (and `{"x":"y\"z"}` and `{"x\"y":"z"}`) hash alike, so a state approved for one set of
/// arguments would verify for the other.
#[tokio::test]
async fn arguments_that_differ_only_in_nesting_are_not_the_same_arguments() {
    for (shown, sent) in [
        (json!([[1], 2]), json!([[1, 2]])),
        (json!({"x": "y\"z"}), json!({"x\"y": "z"})),
        (json!(["ab", "c"]), json!(["a", "bc"])),
    ] {
        let f = fixture();
        let mut first = delete_call(json!(1), "Groceries");
        first["params"]["arguments"]["extra"] = shown.clone();
        let answer = f.alice(&first).await;
        let state = answer.state();
        let mut retry = accepted(&state, json!(2), "note-7");
        retry["params"]["arguments"]["extra"] = sent.clone();
        let answer = f.alice(&retry).await;
        assert_frozen_state_error(&answer);
        assert_eq!(f.seen.count(), 0, "{shown} approved, {sent} forwarded");
        // The control: the arguments that were shown go through.
        let mut retry = accepted(&state, json!(3), "note-7");
        retry["params"]["arguments"]["extra"] = shown;
        let answer = f.alice(&retry).await;
        assert_ran(&answer);
    }
}

// --- the payload parser: `Claims::decode` (src/token/claims.rs) ----------------------------------

const SECRET: [u8; 32] = secret(0x42);
const KID: &str = "k1";

/// Seals `payload` under the ring (`KID`, `SECRET`) the way `codec::seal` does.
fn forge(payload: &[u8]) -> String {
    forge_with(&SECRET, KID, payload)
}

/// The fixed part of a payload (everything before the candidate count): phase, issued, expires,
/// nonce, six digests, the arguments digest, the epoch and the standing-offer byte (0: none).
const FIXED_WITHOUT_COUNT: usize = 1 + 8 + 8 + 16 + 16 * 6 + 32 + 16 + 1;

/// Kills `claims.rs: replace || with && in Claims::decode` (`len == 0 || len > MAX_CANDIDATE_ID_LEN`):
/// a correctly signed payload whose candidate id is empty or longer than the format allows is
/// refused. `seal` never produces one, so only a parser test sees it.
#[test]
fn a_signed_payload_with_an_empty_or_oversized_candidate_id_is_refused() {
    let ring = KeyRing::single(KID, SECRET).unwrap();
    let sample = mcp_confirm::__bench::sample_payload();
    // The forgery is exact: the untouched sample opens.
    assert!(mcp_confirm::__bench::open(&ring, &forge(&sample)));
    let with_one = |id: &[u8]| {
        let mut payload = sample[..FIXED_WITHOUT_COUNT].to_vec();
        payload.push(1); // one candidate
        payload.push(id.len() as u8);
        payload.extend_from_slice(id);
        payload.push(0); // no version
        payload
    };
    // Control: an id within bounds opens.
    assert!(mcp_confirm::__bench::open(
        &ring,
        &forge(&with_one(b"note-3"))
    ));
    let longest = vec![b'x'; mcp_confirm::token::MAX_CANDIDATE_ID_LEN];
    assert!(mcp_confirm::__bench::open(
        &ring,
        &forge(&with_one(&longest))
    ));
    // Empty, and one byte too long: refused even though the MAC verifies.
    assert!(!mcp_confirm::__bench::open(&ring, &forge(&with_one(b""))));
    let too_long = vec![b'x'; mcp_confirm::token::MAX_CANDIDATE_ID_LEN + 1];
    assert!(!mcp_confirm::__bench::open(
        &ring,
        &forge(&with_one(&too_long))
    ));
}

// --- the token parser: `codec::open` (src/token/codec.rs) ----------------------------------------

/// Kills `codec.rs: replace + with * in open` (`body.len() < 2 + kid_len` → `2 * kid_len`): a
/// token whose body is just the version and a key-id length of 1, with no key id, must be refused,
/// not sliced past its end (with the mutant, `open` panics on `body[2..3]`).
#[test]
fn a_state_announcing_a_key_id_it_does_not_carry_is_refused_without_panicking() {
    let ring = KeyRing::single(KID, SECRET).unwrap();
    for kid_len in [1u8, 2, 32] {
        // version 3, kid_len, then only the 32 tag bytes: the shortest body `open` reads.
        let mut raw = vec![3u8, kid_len];
        raw.extend_from_slice(&[0u8; 32]);
        let token = format!("mcpc1.{}", URL_SAFE_NO_PAD.encode(&raw));
        let opened = std::panic::catch_unwind(|| mcp_confirm::__bench::open(&ring, &token));
        assert_eq!(opened.ok(), Some(false), "kid_len {kid_len}");
    }
}

// --- hex secrets: `decode_hex` (src/token/keyring.rs) --------------------------------------------

/// Kills the twelve `decode_hex` mutants in `keyring.rs` (deleted match arms, `-`/`+` swapped in
/// the nibble arithmetic, `<<` → `>>`, `|` → `&`/`^`): a ring built from a hex secret must be the
/// same key as the ring built from the bytes, in lower and upper case. Until now only "is it Ok"
/// was checked, so `|` → `&` (every hex secret becomes the all-zero key) went unnoticed.
#[test]
fn a_hex_secret_is_the_same_key_as_its_bytes() {
    let bytes: Vec<u8> = [0x01u8, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        .repeat(4)
        .into_iter()
        .enumerate()
        .map(|(i, b)| b ^ (i as u8)) // every nibble value, in both halves of a byte
        .collect();
    let from_bytes = KeyRing::single("k", &bytes).unwrap();
    let lower: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let upper: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    assert_ne!(lower, upper);
    for hex in [
        lower,
        upper,
        format!(
            "  {}\n",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    ] {
        let from_hex = KeyRing::single_hex("k", &hex).unwrap();
        let by_hex = mcp_confirm::__bench::seal_sample(&from_hex);
        let by_bytes = mcp_confirm::__bench::seal_sample(&from_bytes);
        assert!(mcp_confirm::__bench::open(&from_bytes, &by_hex), "{hex}");
        assert!(mcp_confirm::__bench::open(&from_hex, &by_bytes), "{hex}");
        assert_eq!(by_hex, by_bytes, "{hex}");
    }
    // A different secret is a different key (the check above is not vacuous).
    let other = KeyRing::single("k", secret(0)).unwrap();
    assert!(!mcp_confirm::__bench::open(
        &other,
        &mcp_confirm::__bench::seal_sample(&from_bytes)
    ));
}

// --- state lifetimes: `verify_retry` (src/engine.rs) ---------------------------------------------

/// Re-signs a state the fixture issued with other `issued_at`/`expires_at`, everything else as
/// issued: what another instance sharing the key (other TTL, clock ahead) could send.
fn with_lifetime(state: &str, issued_at: u64, expires_at: u64) -> String {
    let raw = URL_SAFE_NO_PAD
        .decode(state.strip_prefix("mcpc1.").unwrap())
        .unwrap();
    let body = &raw[..raw.len() - 32];
    let kid_len = usize::from(body[1]);
    assert_eq!(&body[2..2 + kid_len], b"k1");
    let mut payload = body[2 + kid_len..].to_vec();
    payload[1..9].copy_from_slice(&issued_at.to_be_bytes());
    payload[9..17].copy_from_slice(&expires_at.to_be_bytes());
    forge_with(&KEY, "k1", &payload)
}

/// Seals `payload` like `codec::seal` (format 4), independently of the crate's code:
/// `mcpc1.` base64url(4 || kid_len || kid || payload || HMAC(K_mac, body)), K_mac being
/// HKDF-SHA256(secret) expanded with the MAC label.
fn forge_with(secret: &[u8], kid: &str, payload: &[u8]) -> String {
    let hk = hkdf::Hkdf::<Sha256>::new(None, secret);
    let mut k_mac = [0u8; 32];
    hk.expand(b"mcp-confirm/requestState/v1/mac", &mut k_mac)
        .unwrap();
    let mut body = vec![4u8, kid.len() as u8];
    body.extend_from_slice(kid.as_bytes());
    body.extend_from_slice(payload);
    let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&k_mac).unwrap();
    mac.update(&body);
    body.extend_from_slice(&mac.finalize().into_bytes());
    format!("mcpc1.{}", URL_SAFE_NO_PAD.encode(&body))
}

/// Sends alice's accepting retry with `state` and says whether it reached the inner service; a
/// refusal must be the frozen state error.
async fn accepted_with(f: &Fixture, state: &str, id: i64) -> bool {
    let before = f.seen.count();
    let answer = f.accept(state, json!(id), "note-7").await;
    if f.seen.count() > before {
        assert_ran(&answer);
        return true;
    }
    assert_frozen_state_error(&answer);
    false
}

const TTL: u64 = 300; // the fixture's
const SKEW: u64 = 30; // DEFAULT_CLOCK_SKEW

fn now_secs() -> u64 {
    now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Kills `engine.rs: replace - with / in verify_retry`, `replace > with < in verify_retry` and
/// `replace || with && in verify_retry` (line 273): a state whose lifetime is longer than this
/// layer's TTL is refused, one of exactly the TTL is not.
#[tokio::test]
async fn a_state_living_longer_than_the_ttl_is_refused() {
    let (f, state) = challenged().await;
    let t = now_secs();
    // The forgery is exact: the state as issued (lifetime = TTL) still goes through.
    assert!(accepted_with(&f, &with_lifetime(&state, t, t + TTL), 2).await);
    let (f, state) = challenged().await;
    assert!(!accepted_with(&f, &with_lifetime(&state, t, t + TTL + 1), 2).await);
    assert!(!accepted_with(&f, &with_lifetime(&state, t - 100, t + 3 * TTL), 3).await);
    assert_eq!(f.seen.count(), 0);
}

/// Kills `engine.rs: replace < with <= in verify_retry` and `replace < with == in verify_retry`
/// (line 272): a zero-length lifetime is a lifetime (within the skew it verifies); a state that
/// expires before it was issued is refused, not subtracted into an overflow panic.
#[tokio::test]
async fn lifetimes_of_zero_and_below_zero() {
    let t = now_secs();
    let (f, state) = challenged().await;
    assert!(accepted_with(&f, &with_lifetime(&state, t, t), 2).await);
    let (f, state) = challenged().await;
    assert!(!accepted_with(&f, &with_lifetime(&state, t, t - 1), 2).await);
    assert!(!accepted_with(&f, &with_lifetime(&state, t + 5, t + 1), 3).await);
    assert_eq!(f.seen.count(), 0);
}

/// Kills `engine.rs: replace > with >= in verify_retry` (line 271): a state issued exactly the
/// allowed skew in the future (an instance whose clock is ahead by the skew) verifies; one second
/// more does not.
#[tokio::test]
async fn a_state_issued_up_to_the_skew_in_the_future_verifies() {
    let t = now_secs();
    let (f, state) = challenged().await;
    assert!(accepted_with(&f, &with_lifetime(&state, t + SKEW, t + SKEW + TTL), 2).await);
    let (f, state) = challenged().await;
    assert!(
        !accepted_with(
            &f,
            &with_lifetime(&state, t + SKEW + 1, t + SKEW + 1 + TTL),
            2
        )
        .await
    );
}

// --- the audit trail of a blocked replay: `claim` (src/driver.rs) --------------------------------

/// Kills `driver.rs: delete match arm Claim::InFlight in claim`: a retry that finds the nonce held
/// by another retry right now is refused like a replay on the wire, but the audit trail says
/// `in_flight`, not `consumed` (a race in progress, not a replay after the fact).
#[tokio::test]
async fn a_retry_racing_a_held_nonce_is_audited_as_in_flight() {
    let (events, _guard) = Events::record();
    let (f, state) = challenged().await;
    // The state's nonce and principal digest, as the payload carries them.
    let raw = URL_SAFE_NO_PAD
        .decode(state.strip_prefix("mcpc1.").unwrap())
        .unwrap();
    let payload = &raw[2 + usize::from(raw[1])..raw.len() - 32];
    let nonce = Nonce::from_bytes(payload[17..33].try_into().unwrap());
    let principal = PrincipalKey::from_bytes(payload[49..65].try_into().unwrap());
    // Another retry holds it.
    let held = ClaimRequest::new(
        nonce,
        Owner::random(),
        principal,
        now() + Duration::from_secs(600),
    );
    assert_eq!(f.store.claim(&held).await.unwrap(), Claim::Claimed);
    let answer = f.accept(&state, json!(2), "note-7").await;
    assert_frozen_state_error(&answer);
    assert_eq!(f.seen.count(), 0);
    let blocked = events.with("decision", "replay_blocked");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert!(
        blocked[0]
            .iter()
            .any(|(k, v)| k == "state" && v == "in_flight"),
        "{blocked:?}"
    );
}
