//! What a `requestState` binds, and its exact byte layout.
//!
//! The payload is binary, fixed-order and length-prefixed, so every payload has exactly one encoding
//! and the MAC input is injective. Values the client has no business reading (audience, principal,
//! method, tool, input key, arguments, request id) are stored as digests; the candidate ids and their
//! versions are stored as they were shown, because the retry checks the answer against the ids and
//! hands the chosen version to the revalidation hook.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::candidates::{Candidates, Shown};
use crate::kernel::{Nonce, PrincipalKey};

/// Where in the confirmation a state was issued. Unknown phases are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// The user was shown the confirmation form.
    Confirm = 1,
}

impl Phase {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Phase::Confirm),
            _ => None,
        }
    }
}

/// The signed contents of a `requestState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    pub(crate) phase: Phase,
    pub(crate) issued_at: u64,
    pub(crate) expires_at: u64,
    pub(crate) nonce: Nonce,
    pub(crate) audience: [u8; 16],
    pub(crate) principal: PrincipalKey,
    pub(crate) method: [u8; 16],
    pub(crate) tool: [u8; 16],
    pub(crate) input_key: [u8; 16],
    pub(crate) request_id: [u8; 16],
    pub(crate) arguments: [u8; 32],
    /// The boot epoch of the replay store that issued the state (zeros for a durable store).
    pub(crate) epoch: [u8; 16],
    pub(crate) candidates: Candidates,
    /// The standing approval the form offered besides "only this time", if any: what an accept
    /// choosing it may grant, and nothing wider.
    pub(crate) standing: Option<StandingTerms>,
}

/// The terms of a standing approval a state offered: the scope (as a digest of the scope the
/// policy named), how long, how many later calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StandingTerms {
    pub(crate) scope: [u8; 16],
    pub(crate) for_secs: u32,
    pub(crate) uses: u32,
}

impl StandingTerms {
    /// The digest a state binds of `scope`.
    pub(crate) fn scope_digest(scope: &str) -> [u8; 16] {
        digest16("standing-scope", scope.as_bytes())
    }
}

/// Bytes of [`StandingTerms`] when present: scope digest, seconds, uses.
const STANDING_LEN: usize = 16 + 4 + 4;

const FIXED_LEN: usize = 1 + 8 + 8 + 16 + 16 * 6 + 32 + 16 + 1 + 1;

impl Claims {
    pub(crate) fn encoded_len(&self) -> usize {
        FIXED_LEN
            + self.standing.map_or(0, |_| STANDING_LEN)
            + self
                .candidates
                .iter()
                .map(|c| 2 + c.id.len() + c.version.as_ref().map_or(0, String::len))
                .sum::<usize>()
    }

    /// Appends the payload bytes to `out`. [`Candidates`] guarantees every length fits its byte.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.phase as u8);
        out.extend_from_slice(&self.issued_at.to_be_bytes());
        out.extend_from_slice(&self.expires_at.to_be_bytes());
        out.extend_from_slice(self.nonce.as_bytes());
        for digest in [
            &self.audience,
            self.principal.as_bytes(),
            &self.method,
            &self.tool,
            &self.input_key,
            &self.request_id,
        ] {
            out.extend_from_slice(digest);
        }
        out.extend_from_slice(&self.arguments);
        out.extend_from_slice(&self.epoch);
        match &self.standing {
            None => out.push(0),
            Some(terms) => {
                out.push(1);
                out.extend_from_slice(&terms.scope);
                out.extend_from_slice(&terms.for_secs.to_be_bytes());
                out.extend_from_slice(&terms.uses.to_be_bytes());
            }
        }
        out.push(self.candidates.len() as u8);
        for shown in self.candidates.iter() {
            out.push(shown.id.len() as u8);
            out.extend_from_slice(shown.id.as_bytes());
            // 0: no version (versions are never empty).
            let version = shown.version.as_deref().unwrap_or_default();
            out.push(version.len() as u8);
            out.extend_from_slice(version.as_bytes());
        }
    }

    /// Parses a payload strictly: known phase, bounded and unique UTF-8 ids, bounded UTF-8
    /// versions, no trailing bytes.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let phase = Phase::from_byte(r.byte()?)?;
        let issued_at = u64::from_be_bytes(r.array()?);
        let expires_at = u64::from_be_bytes(r.array()?);
        let nonce = Nonce::from_bytes(r.array()?);
        let audience = r.array()?;
        let principal = PrincipalKey::from_bytes(r.array()?);
        let method = r.array()?;
        let tool = r.array()?;
        let input_key = r.array()?;
        let request_id = r.array()?;
        let arguments = r.array()?;
        let epoch = r.array()?;
        let standing = match r.byte()? {
            0 => None,
            1 => Some(StandingTerms {
                scope: r.array()?,
                for_secs: u32::from_be_bytes(r.array()?),
                uses: u32::from_be_bytes(r.array()?),
            }),
            _ => return None,
        };
        // Lengths are single bytes, so reading is bounded; the bounds themselves are checked by
        // `Candidates::new`, the one place that knows them.
        let count = usize::from(r.byte()?);
        let mut candidates: Vec<Shown> = Vec::with_capacity(count);
        for _ in 0..count {
            let len = usize::from(r.byte()?);
            let id = std::str::from_utf8(r.take(len)?).ok()?;
            let len = usize::from(r.byte()?);
            let version = match len {
                0 => None,
                _ => Some(std::str::from_utf8(r.take(len)?).ok()?),
            };
            candidates.push(Shown::new(id, version));
        }
        if !r.0.is_empty() {
            return None;
        }
        // Decoded only behind a verified MAC: see `Candidates::from_sealed`.
        let candidates = Candidates::from_sealed(candidates).ok()?;
        Some(Self {
            phase,
            issued_at,
            expires_at,
            nonce,
            audience,
            principal,
            method,
            tool,
            input_key,
            request_id,
            arguments,
            epoch,
            candidates,
            standing,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

/// A domain-separated, truncated SHA-256 of one bound value.
pub(crate) fn digest16(label: &str, value: &[u8]) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"mcp-confirm/v1/");
    h.update(label.as_bytes());
    h.update([0u8]);
    h.update(value);
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

/// A digest of a JSON-RPC id (given as its raw JSON text) that ignores formatting, so `"a"` and
/// `"\u0061"` are the same id, and so are `1`, `1.0`, `1e0` and `10E-1`, while `1` and `"1"` are
/// not. Numbers are compared exactly, as decimals, never through a float.
pub(crate) fn request_id_digest(raw_id: &str) -> [u8; 16] {
    if let Some(canonical) = canonical_number(raw_id) {
        return digest16("request-id/number", canonical.as_bytes());
    }
    match serde_json::from_str::<Value>(raw_id) {
        Ok(Value::String(s)) => digest16("request-id/string", s.as_bytes()),
        _ => digest16("request-id/raw", raw_id.as_bytes()),
    }
}

/// The exact value of a JSON number literal as `[-]<digits>e<exponent>`, with no leading or
/// trailing zeros in the digits (`0` for zero, whatever its sign). `None` if `raw` is not a JSON
/// number.
fn canonical_number(raw: &str) -> Option<String> {
    let (negative, rest) = match raw.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (mantissa, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // JSON's grammar: no leading zeros, a non-empty fraction, a signed non-empty exponent.
    if !digits(int) || (int.len() > 1 && int.starts_with('0')) || frac.is_some_and(|f| !digits(f)) {
        return None;
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(e) => {
            let unsigned = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !digits(unsigned) {
                return None;
            }
            // Beyond this the value is astronomically far from any real id; saturate.
            let magnitude: i64 = unsigned.parse().unwrap_or(i64::MAX / 4).min(i64::MAX / 4);
            if e.starts_with('-') {
                -magnitude
            } else {
                magnitude
            }
        }
    };
    let frac = frac.unwrap_or_default();
    let all: String = int.chars().chain(frac.chars()).collect();
    let significant = all.trim_start_matches('0');
    if significant.is_empty() {
        return Some("0".to_owned());
    }
    let trimmed = significant.trim_end_matches('0');
    // value = 0.<all> × 10^(exponent + int.len()) = <trimmed> × 10^e
    let scale = exponent.saturating_add(int.len() as i64)
        - (all.len() - significant.len()) as i64
        - trimmed.len() as i64;
    let sign = if negative { "-" } else { "" };
    Some(format!("{sign}{trimmed}e{scale}"))
}

/// The digest of a tool call's `arguments`, independent of key order and whitespace.
///
/// Absent arguments hash like `{}`. `exclude` names the top-level argument the layer overwrites
/// with the user's choice: whatever the client sent there never reaches the tool, so it is not
/// bound.
pub(crate) fn arguments_digest(arguments: Option<&Value>, exclude: Option<&str>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"mcp-confirm/v1/arguments\0");
    match arguments {
        None => hash_object(&mut h, std::iter::empty()),
        Some(Value::Object(map)) => hash_object(
            &mut h,
            map.iter()
                .filter(|(k, _)| Some(k.as_str()) != exclude)
                .map(|(k, v)| (k.as_str(), v)),
        ),
        Some(other) => hash_value(&mut h, other),
    }
    h.finalize().into()
}

fn hash_len(h: &mut Sha256, len: usize) {
    h.update((len as u64).to_be_bytes());
}

fn hash_str(h: &mut Sha256, s: &str) {
    hash_len(h, s.len());
    h.update(s.as_bytes());
}

fn hash_object<'a>(h: &mut Sha256, entries: impl Iterator<Item = (&'a str, &'a Value)>) {
    let mut entries: Vec<(&str, &Value)> = entries.collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    h.update(b"{");
    hash_len(h, entries.len());
    for (k, v) in entries {
        hash_str(h, k);
        hash_value(h, v);
    }
}

fn hash_value(h: &mut Sha256, value: &Value) {
    match value {
        Value::Null => h.update(b"n"),
        Value::Bool(true) => h.update(b"t"),
        Value::Bool(false) => h.update(b"f"),
        Value::Number(n) => {
            h.update(b"#");
            hash_str(h, &n.to_string());
        }
        Value::String(s) => {
            h.update(b"\"");
            hash_str(h, s);
        }
        Value::Array(items) => {
            h.update(b"[");
            hash_len(h, items.len());
            for item in items {
                hash_value(h, item);
            }
        }
        Value::Object(map) => hash_object(h, map.iter().map(|(k, v)| (k.as_str(), v))),
    }
}

/// A realistic state (three candidates, every binding set), for tests and the benchmarks.
#[cfg(any(test, feature = "bench"))]
pub(crate) fn sample() -> Claims {
    Claims {
        phase: Phase::Confirm,
        issued_at: 1_700_000_000,
        expires_at: 1_700_000_300,
        nonce: Nonce::from_bytes([7; 16]),
        audience: [1; 16],
        principal: PrincipalKey::from_bytes([2; 16]),
        method: [3; 16],
        tool: [4; 16],
        input_key: [5; 16],
        request_id: [6; 16],
        arguments: [8; 32],
        epoch: [9; 16],
        candidates: sample_candidates(),
        standing: None,
    }
}

/// The sample state's candidates.
#[cfg(any(test, feature = "bench"))]
pub(crate) fn sample_candidates() -> Candidates {
    let shown = vec![
        Shown::new("note-3", Some("v1-0f3a")),
        Shown::new("note-7", Some("v1-77c2")),
        Shown::new("note-14", None),
    ];
    Candidates::new(shown).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn standing_terms_round_trip_and_change_the_bytes() {
        let mut c = sample();
        let plain = {
            let mut out = Vec::new();
            c.encode(&mut out);
            out
        };
        c.standing = Some(StandingTerms {
            scope: StandingTerms::scope_digest("personal"),
            for_secs: 600,
            uses: 20,
        });
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(out.len(), c.encoded_len());
        assert_ne!(out, plain);
        assert_eq!(Claims::decode(&out), Some(c));
        // An unknown presence byte is no state.
        let at = FIXED_LEN - 2;
        let mut bad = plain.clone();
        bad[at] = 2;
        assert_eq!(Claims::decode(&bad), None);
    }

    #[test]
    fn round_trips_and_is_exact_length() {
        let c = sample();
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(out.len(), c.encoded_len());
        assert_eq!(Claims::decode(&out), Some(c));
    }

    #[test]
    fn rejects_trailing_short_unknown_phase_and_duplicates() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        let mut long = out.clone();
        long.push(0);
        assert_eq!(Claims::decode(&long), None);
        for n in 0..out.len() {
            assert_eq!(Claims::decode(&out[..n]), None, "prefix {n}");
        }
        let mut phase = out.clone();
        phase[0] = 9;
        assert_eq!(Claims::decode(&phase), None);
        // Duplicate ids cannot be built, so write them by hand: two candidates "a".
        let mut bytes = Vec::new();
        let mut empty = sample();
        empty.candidates = Candidates::default();
        empty.encode(&mut bytes);
        bytes.pop();
        bytes.extend_from_slice(&[2, 1, b'a', 1, b'1', 1, b'a', 1, b'2']);
        assert_eq!(Claims::decode(&bytes), None);
        bytes.truncate(bytes.len() - 4);
        let count_at = bytes.len() - 5;
        bytes[count_at] = 1;
        assert!(
            Claims::decode(&bytes).is_some(),
            "the hand-written layout is right"
        );
    }

    #[test]
    fn argument_digest_ignores_order_and_whitespace_but_not_values() {
        let a: Value = serde_json::from_str(
            r#"{"title":"Groceries","workspaceUri":"file:///p","n":{"b":1,"a":[1,2]}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            "{ \"n\" : {\"a\":[1, 2],\"b\":1},\n \"workspaceUri\":\"file:///p\", \"title\":\"Groceries\" }",
        )
        .unwrap();
        assert_eq!(
            arguments_digest(Some(&a), None),
            arguments_digest(Some(&b), None)
        );
        let c = json!({"title":"Groceries!","workspaceUri":"file:///p","n":{"b":1,"a":[1,2]}});
        assert_ne!(
            arguments_digest(Some(&a), None),
            arguments_digest(Some(&c), None)
        );
        let d = json!({"title":"Groceries","workspaceUri":"file:///p","n":{"b":1,"a":[2,1]}});
        assert_ne!(
            arguments_digest(Some(&a), None),
            arguments_digest(Some(&d), None)
        );
        // Absent arguments are `{}`; the overwritten field is not bound.
        assert_eq!(
            arguments_digest(None, None),
            arguments_digest(Some(&json!({})), None)
        );
        let with = json!({"title":"Groceries","note_id":"evil"});
        let without = json!({"title":"Groceries"});
        assert_eq!(
            arguments_digest(Some(&with), Some("note_id")),
            arguments_digest(Some(&without), Some("note_id"))
        );
        // Type confusions do not collide.
        assert_ne!(
            arguments_digest(Some(&json!({"a":"1"})), None),
            arguments_digest(Some(&json!({"a":1})), None)
        );
        assert_ne!(
            arguments_digest(Some(&json!({"a":["b"]})), None),
            arguments_digest(Some(&json!({"a":"b"})), None)
        );
    }

    #[test]
    fn request_id_digest_compares_numbers_exactly() {
        for same in ["1.0", "1e0", "10E-1", "0.1e1", "1.000", "100e-2", "1E+0"] {
            assert_eq!(request_id_digest("1"), request_id_digest(same), "{same}");
        }
        for same in ["-0", "0.0", "0e5", "-0.000e-3"] {
            assert_eq!(request_id_digest("0"), request_id_digest(same), "{same}");
        }
        assert_eq!(request_id_digest("120"), request_id_digest("1.2e2"));
        assert_eq!(request_id_digest("-7"), request_id_digest("-70e-1"));
        // Exact beyond f64 precision: these two differ by one.
        assert_ne!(
            request_id_digest("9007199254740993"),
            request_id_digest("9007199254740992.0")
        );
        for other in [
            "2",
            "1.5",
            "-1",
            "10",
            "0.1",
            "\"1\"",
            "1e999999999999999999999",
        ] {
            assert_ne!(request_id_digest("1"), request_id_digest(other), "{other}");
        }
        assert_eq!(canonical_number("01"), None);
        assert_eq!(canonical_number("1."), None);
        assert_eq!(canonical_number("1e"), None);
        assert_eq!(canonical_number(".5"), None);
        assert_eq!(canonical_number("\"1\""), None);
    }

    #[test]
    fn request_id_digest_compares_values() {
        assert_eq!(request_id_digest("\"a\""), request_id_digest("\"\\u0061\""));
        assert_ne!(request_id_digest("1"), request_id_digest("\"1\""));
        assert_ne!(request_id_digest("1"), request_id_digest("2"));
    }
}
