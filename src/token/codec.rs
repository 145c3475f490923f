//! Sealing and opening `requestState` tokens.
//!
//! ```text
//! token = "mcpc1." base64url-nopad( body || tag )            at most MAX_TOKEN_LEN characters
//! body  = version:u8 (=4) || kid_len:u8 || kid || payload      payload: see `claims`
//! tag   = HMAC-SHA256(K_mac[kid], body)                        32 bytes, never truncated
//! ```
//!
//! `K_mac` is derived for states alone (see `keyring`), so the MAC input needs no label of its
//! own; format 3 hashed one in front of the body, and is still opened until its states expire.
//!
//! Opening checks, cheapest first and nothing stateful: length, prefix, canonical base64, version,
//! key id, MAC (constant time, full length), then a strict parse of the payload.
//!
//! What a token costs is two SHA-256 compressions per 64 bytes of body plus one, and base64 both
//! ways (vectorized where the CPU has AVX2, through `base64`'s runtime-detected engine).

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::Simd;
use base64::engine::general_purpose::NO_PAD;
use hmac::Mac;

use super::StateError;
use super::claims::Claims;
use super::keyring::{KeyRing, MAX_KEY_ID_LEN, RingKey};

/// The token prefix: format name and version, readable in logs without decoding.
pub const PREFIX: &str = "mcpc1.";
/// The longest token accepted or produced, in characters: room for 16 candidates with the longest
/// ids and versions.
pub const MAX_TOKEN_LEN: usize = 8192;

/// 2: candidate versions and the replay store's boot epoch are bound (1 bound neither).
/// 3: the standing approval a form offered is bound.
/// 4: the same payload; the MAC input is the body alone (3 put a label in front).
const VERSION: u8 = 4;
/// The format before 4, still opened so a rolling upgrade does not void pending confirmations.
const VERSION_LABELLED: u8 = 3;
const LABEL: &[u8] = b"mcp-confirm/requestState/v1\0";
const TAG_LEN: usize = 32;
/// Decoded states up to this many bytes (a few candidates) are read without a heap buffer.
const SMALL_STATE: usize = 768;

/// URL-safe base64 without padding: canonical (no padding, no stray trailing bits) both ways,
/// vectorized when the CPU allows, the same bytes as the scalar engine either way.
static BASE64: LazyLock<Simd> = LazyLock::new(|| Simd::url_safe(NO_PAD));

/// Seals `claims` with the ring's signing key.
pub(crate) fn seal(ring: &KeyRing, claims: &Claims) -> Result<String, StateError> {
    let key = ring.signing();
    let mut raw = Vec::with_capacity(2 + key.id().len() + claims.encoded_len() + TAG_LEN);
    raw.push(VERSION);
    raw.push(key.id().len() as u8);
    raw.extend_from_slice(key.id().as_bytes());
    claims.encode(&mut raw);
    let mut mac = key.mac();
    mac.update(&raw);
    raw.extend_from_slice(&mac.finalize().into_bytes());
    let mut token = String::with_capacity(PREFIX.len() + raw.len().div_ceil(3) * 4);
    token.push_str(PREFIX);
    BASE64.encode_string(&raw, &mut token);
    if token.len() > MAX_TOKEN_LEN {
        return Err(StateError::TooLarge);
    }
    Ok(token)
}

/// Opens a token: returns its claims and the ring key that signed it.
pub(crate) fn open<'r>(
    ring: &'r KeyRing,
    token: &str,
) -> Result<(Claims, &'r RingKey), StateError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(StateError::TooLarge);
    }
    let encoded = token.strip_prefix(PREFIX).ok_or(StateError::Format)?;
    // The engine rejects padding and non-zero trailing bits, so each byte string has exactly one
    // accepted encoding. Common states decode on the stack; the largest into the heap.
    let mut small = [0u8; SMALL_STATE];
    let large;
    let raw: &[u8] = if base64::decoded_len_estimate(encoded.len()) <= SMALL_STATE {
        let len = BASE64
            .decode_slice(encoded, &mut small)
            .map_err(|_| StateError::Format)?;
        &small[..len]
    } else {
        large = BASE64.decode(encoded).map_err(|_| StateError::Format)?;
        &large
    };
    if raw.len() < 2 + TAG_LEN {
        return Err(StateError::Format);
    }
    let (body, tag) = raw.split_at(raw.len() - TAG_LEN);
    let labelled = match body[0] {
        VERSION => false,
        VERSION_LABELLED => true,
        _ => return Err(StateError::Version),
    };
    let kid_len = usize::from(body[1]);
    if kid_len == 0 || kid_len > MAX_KEY_ID_LEN || body.len() < 2 + kid_len {
        return Err(StateError::Format);
    }
    let key = ring
        .find(&body[2..2 + kid_len])
        .ok_or(StateError::UnknownKey)?;
    let mut mac = key.mac();
    if labelled {
        mac.update(LABEL);
    }
    mac.update(body);
    mac.verify_slice(tag).map_err(|_| StateError::BadMac)?;
    let claims = Claims::decode(&body[2 + kid_len..]).ok_or(StateError::Malformed)?;
    Ok((claims, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::keyring::fixed_test_secret as secret;

    fn claims() -> Claims {
        crate::token::claims::sample()
    }

    fn ring() -> KeyRing {
        KeyRing::single("k1", secret(0x42)).unwrap()
    }

    #[test]
    fn round_trip() {
        let token = seal(&ring(), &claims()).unwrap();
        assert!(token.starts_with(PREFIX));
        let ring = ring();
        let (opened, key) = open(&ring, &token).unwrap();
        assert_eq!(opened, claims());
        assert_eq!(key.id(), "k1");
    }

    #[test]
    fn every_single_byte_change_and_truncation_is_refused() {
        let ring = ring();
        let token = seal(&ring, &claims()).unwrap();
        let bytes = token.as_bytes();
        let mut accepted = 0usize;
        let mut tried = 0usize;
        for i in 0..bytes.len() {
            for b in 0u8..=255 {
                if b == bytes[i] {
                    continue;
                }
                let mut changed = bytes.to_vec();
                changed[i] = b;
                let Ok(s) = std::str::from_utf8(&changed) else {
                    continue;
                };
                tried += 1;
                if open(&ring, s).is_ok() {
                    accepted += 1;
                }
            }
        }
        for n in 0..token.len() {
            tried += 1;
            if open(&ring, &token[..n]).is_ok() {
                accepted += 1;
            }
        }
        assert!(tried > 30_000, "{tried}");
        assert_eq!(accepted, 0);
    }

    #[test]
    fn every_decoded_bit_flip_is_refused() {
        let ring = ring();
        let token = seal(&ring, &claims()).unwrap();
        let raw = BASE64.decode(&token[PREFIX.len()..]).unwrap();
        for i in 0..raw.len() * 8 {
            let mut flipped = raw.clone();
            flipped[i / 8] ^= 1 << (i % 8);
            let forged = format!("{PREFIX}{}", BASE64.encode(&flipped));
            assert!(open(&ring, &forged).is_err(), "bit {i}");
        }
    }

    #[test]
    fn non_canonical_encodings_and_appended_bytes_are_refused() {
        let ring = ring();
        let token = seal(&ring, &claims()).unwrap();
        assert_eq!(
            open(&ring, &format!("{token}=")).unwrap_err(),
            StateError::Format
        );
        for extra in ["A", "AA", "AAA", "AAAA", "=="] {
            assert!(open(&ring, &format!("{token}{extra}")).is_err(), "{extra}");
        }
        // Appended text is either not canonical base64 at this length, or bytes the MAC does not
        // cover: refused before anything is read, either way.
        assert!(matches!(
            open(&ring, &format!("{token}-TAMPERED")).unwrap_err(),
            StateError::Format | StateError::BadMac
        ));
        assert!(open(&ring, &token.replace(['-', '_'], "+")).is_err());
        // A non-zero trailing bit is another spelling of the same bytes: refused before the MAC.
        let last = token.chars().last().unwrap();
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let pos = alphabet.find(last).unwrap();
        let sibling = alphabet.as_bytes()[pos ^ 1] as char;
        let respelled = format!("{}{sibling}", &token[..token.len() - 1]);
        if !(token.len() - PREFIX.len()).is_multiple_of(4) {
            assert_eq!(open(&ring, &respelled).unwrap_err(), StateError::Format);
        }
        assert_eq!(open(&ring, &token[1..]).unwrap_err(), StateError::Format);
        assert_eq!(open(&ring, "").unwrap_err(), StateError::Format);
        assert_eq!(
            open(&ring, &"A".repeat(MAX_TOKEN_LEN + 1)).unwrap_err(),
            StateError::TooLarge
        );
    }

    /// Format 3 (a label hashed in front of the body) still opens, so instances upgraded one by
    /// one keep each other's pending confirmations; each format's tag fits only its own version.
    #[test]
    fn format_3_states_still_open_and_tags_do_not_cross_formats() {
        let ring = ring();
        let token = seal(&ring, &claims()).unwrap();
        let raw = BASE64.decode(&token[PREFIX.len()..]).unwrap();
        let body = &raw[..raw.len() - TAG_LEN];
        assert_eq!(body[0], VERSION);
        let retag = |version: u8, labelled: bool| {
            let mut body = body.to_vec();
            body[0] = version;
            let mut mac = ring.signing().mac();
            if labelled {
                mac.update(LABEL);
            }
            mac.update(&body);
            body.extend_from_slice(&mac.finalize().into_bytes());
            format!("{PREFIX}{}", BASE64.encode(&body))
        };
        assert_eq!(
            open(&ring, &retag(VERSION_LABELLED, true)).unwrap().0,
            claims()
        );
        assert_eq!(open(&ring, &retag(VERSION, false)).unwrap().0, claims());
        assert_eq!(
            open(&ring, &retag(VERSION_LABELLED, false)).unwrap_err(),
            StateError::BadMac
        );
        assert_eq!(
            open(&ring, &retag(VERSION, true)).unwrap_err(),
            StateError::BadMac
        );
        for older in [0u8, 1, 2, 5, 255] {
            assert_eq!(
                open(&ring, &retag(older, false)).unwrap_err(),
                StateError::Version
            );
        }
    }

    /// The vectorized engine writes and reads exactly what the scalar one does, and refuses the
    /// same non-canonical spellings, at every length around its block sizes.
    #[test]
    fn the_vectorized_base64_agrees_with_the_scalar_engine() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut bytes = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..700usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(x as u8);
            let input = &bytes[..len];
            let fast = BASE64.encode(input);
            assert_eq!(fast, URL_SAFE_NO_PAD.encode(input), "{len}");
            assert_eq!(BASE64.decode(&fast).unwrap(), input, "{len}");
            // Change one character anywhere (including to padding or a character of the other
            // alphabet): both engines accept or refuse alike, and read the same bytes.
            if !fast.is_empty() {
                let at = (x as usize >> 8) % fast.len();
                for c in [b'=', b'+', b'/', b'A', b'B', b'_', b'-', b'\n', b'Q'] {
                    let mut changed = fast.clone().into_bytes();
                    changed[at] = c;
                    assert_eq!(
                        BASE64.decode(&changed).ok(),
                        URL_SAFE_NO_PAD.decode(&changed).ok(),
                        "{len} {at} {c}"
                    );
                }
            }
            for tail in ["=", "==", "A", "AA", "AAA"] {
                let longer = format!("{fast}{tail}");
                assert_eq!(
                    BASE64.decode(&longer).ok(),
                    URL_SAFE_NO_PAD.decode(&longer).ok(),
                    "{len} {tail}"
                );
            }
        }
    }

    #[test]
    fn keys_rotate_and_removed_keys_are_refused() {
        let old = KeyRing::single("k1", secret(1)).unwrap();
        let both = KeyRing::new([("k2", secret(2)), ("k1", secret(1))]).unwrap();
        let new = KeyRing::single("k2", secret(2)).unwrap();
        let by_old = seal(&old, &claims()).unwrap();
        let by_new = seal(&both, &claims()).unwrap();
        assert_eq!(open(&both, &by_old).unwrap().1.id(), "k1");
        assert_eq!(open(&both, &by_new).unwrap().1.id(), "k2");
        assert_eq!(open(&new, &by_old).unwrap_err(), StateError::UnknownKey);
        // Same id, different secret: the MAC fails.
        let impostor = KeyRing::single("k1", secret(3)).unwrap();
        assert_eq!(open(&impostor, &by_old).unwrap_err(), StateError::BadMac);
    }

    #[test]
    fn the_largest_legal_state_fits_the_cap() {
        use crate::token::candidates::{
            Candidates, MAX_CANDIDATE_ID_LEN, MAX_CANDIDATES, MAX_VERSION_LEN, Shown,
        };
        // Oversized candidate sets cannot be built (see `Candidates::new`); the largest that can,
        // under the longest key id, still fits the token cap and opens to the same claims.
        let mut c = claims();
        let largest = (0..MAX_CANDIDATES)
            .map(|i| {
                let id = format!("{i:0>width$}", width = MAX_CANDIDATE_ID_LEN);
                Shown::new(id, Some(&"v".repeat(MAX_VERSION_LEN)))
            })
            .collect();
        c.candidates = Candidates::new(largest).unwrap();
        let ring = KeyRing::single("k".repeat(32), secret(1)).unwrap();
        let token = seal(&ring, &c).unwrap();
        assert_eq!(open(&ring, &token).unwrap().0, c);
    }

    #[test]
    fn a_state_binds_each_candidate_version() {
        use crate::token::candidates::{Candidates, Shown};
        let ring = ring();
        let token = seal(&ring, &claims()).unwrap();
        let (opened, _) = open(&ring, &token).unwrap();
        assert_eq!(opened.candidates[0], Shown::new("note-3", Some("v1-0f3a")));
        assert_eq!(opened.candidates[2], Shown::new("note-14", None));
        let mut other = claims();
        let mut shown = other.candidates.to_vec();
        shown[1].version = Some("v2-0000".into());
        other.candidates = Candidates::new(shown).unwrap();
        assert_ne!(seal(&ring, &other).unwrap(), token);
    }

    /// Pins the reason `open` gives at each length boundary (the reason only reaches the audit
    /// log; the wire error is the same). Kills the `open` boundary mutants that only change it:
    /// `> MAX_TOKEN_LEN` → `>=`, `< 2 + TAG_LEN` → `<=` / `2 * TAG_LEN`, `kid_len == 0 || …` →
    /// `&&`, and `body.len() < 2 + kid_len` → `<=`.
    #[test]
    fn each_boundary_is_refused_for_its_own_reason() {
        let ring = ring();
        let enc = |raw: &[u8]| format!("{PREFIX}{}", BASE64.encode(raw));
        let with_tag = |head: &[u8]| [head, &[0u8; TAG_LEN][..]].concat();
        // Exactly MAX_TOKEN_LEN characters is not too large: it decodes (to zeros), wrong version.
        let longest = format!("{PREFIX}{}", "A".repeat(MAX_TOKEN_LEN - PREFIX.len()));
        assert_eq!(open(&ring, &longest).unwrap_err(), StateError::Version);
        // The shortest body that is read (version, key-id length) is judged on its version.
        assert_eq!(
            open(&ring, &enc(&with_tag(&[9, 1]))).unwrap_err(),
            StateError::Version
        );
        // A key id shorter than TAG_LEN: judged on the id, not refused as short.
        assert_eq!(
            open(&ring, &enc(&with_tag(&[VERSION, 2, b'z', b'z']))).unwrap_err(),
            StateError::UnknownKey
        );
        // An empty or over-long key id is malformed, whatever follows.
        assert_eq!(
            open(&ring, &enc(&with_tag(&[VERSION, 0, b'k', b'1']))).unwrap_err(),
            StateError::Format
        );
        let mut long_id = vec![VERSION, 33];
        long_id.extend([b'k'; 40]);
        assert_eq!(
            open(&ring, &enc(&with_tag(&long_id))).unwrap_err(),
            StateError::Format
        );
        // A key id and no payload: the MAC is checked (and fails), it is not a format error.
        assert_eq!(
            open(&ring, &enc(&with_tag(&[VERSION, 2, b'k', b'1']))).unwrap_err(),
            StateError::BadMac
        );
    }
}
