//! Values of a component beside the layer, sealed in the layer's token format under its key
//! ring: state that must travel through a client and come back unchanged (the gateway's
//! continuations of relayed upstream questions).
//!
//! ```text
//! value = "mcpc1." base64url-nopad( 0xE1 || kid_len:u8 || kid || payload || tag )
//! tag   = HMAC-SHA256(K_seal[kid], len(domain):u64be || "value/" domain || body)
//! ```
//!
//! The same prefix, key ids and rotation as a `requestState`; a version byte of its own, so a
//! sealed value never opens as a state nor a state as a sealed value; a key of its own, derived
//! for sealed values alone, and a `domain` that keeps each use apart from every other. A value
//! sealed before a rotation opens under the old key while the ring still holds it. Signed, not
//! encrypted: the client can read the payload.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64;

use super::codec::PREFIX;
use super::keyring::{KeyRing, MAX_KEY_ID_LEN};

/// The longest sealed value made or opened, in characters.
pub const MAX_SEALED_LEN: usize = 192 * 1024;
/// The format byte of a sealed value (a state's are 1 to 4).
const VERSION: u8 = 0xE1;
const TAG_LEN: usize = 32;
/// What every domain is prefixed with: the pages' own sealed values use other domains.
const DOMAIN_PREFIX: &str = "value/";

/// Why a sealed value was not opened, for the caller's log: on the wire every one of these is
/// the same refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Longer than [`MAX_SEALED_LEN`].
    #[error("sealed value too large")]
    TooLarge,
    /// Not a sealed value's shape (prefix, canonical base64url, version, key id).
    #[error("not a sealed value")]
    Format,
    /// Sealed under a key that is not (or no longer) in the ring.
    #[error("unknown key id")]
    UnknownKey,
    /// The tag does not verify: altered, or sealed for another domain or by another ring.
    #[error("bad tag")]
    BadTag,
}

impl KeyRing {
    /// `payload` sealed for `domain` by the signing key, in the layer's token format.
    ///
    /// # Errors
    /// [`SealError::TooLarge`] if the sealed value would be longer than [`MAX_SEALED_LEN`].
    pub fn seal_value(&self, domain: &str, payload: &[u8]) -> Result<String, SealError> {
        let key = self.signing();
        let mut raw = Vec::with_capacity(2 + key.id().len() + payload.len() + TAG_LEN);
        raw.push(VERSION);
        // Key ids are at most MAX_KEY_ID_LEN (32) bytes.
        raw.push(u8::try_from(key.id().len()).map_err(|_| SealError::Format)?);
        raw.extend_from_slice(key.id().as_bytes());
        raw.extend_from_slice(payload);
        let tag = key.value_tag(&tagged_domain(domain), &raw);
        raw.extend_from_slice(&tag);
        if PREFIX.len() + base64::encoded_len(raw.len(), false).unwrap_or(usize::MAX)
            > MAX_SEALED_LEN
        {
            return Err(SealError::TooLarge);
        }
        let mut out = String::with_capacity(PREFIX.len() + raw.len().div_ceil(3) * 4);
        out.push_str(PREFIX);
        BASE64.encode_string(&raw, &mut out);
        Ok(out)
    }

    /// Whether `token` has a sealed value's shape (it may still not open): what tells one apart
    /// from a `requestState` or another server's state without checking its tag.
    pub fn is_sealed_value(&self, token: &str) -> bool {
        token.len() <= MAX_SEALED_LEN
            && token
                .strip_prefix(PREFIX)
                .and_then(|encoded| encoded.get(..4))
                .and_then(|head| BASE64.decode(head).ok())
                .is_some_and(|head| head.first() == Some(&VERSION))
    }

    /// The payload of `token`, if a key of the ring sealed it for `domain` (the tag compared in
    /// constant time, at full length).
    ///
    /// # Errors
    /// Why not, for the log; see [`SealError`].
    pub fn open_value(&self, domain: &str, token: &str) -> Result<Vec<u8>, SealError> {
        if token.len() > MAX_SEALED_LEN {
            return Err(SealError::TooLarge);
        }
        let encoded = token.strip_prefix(PREFIX).ok_or(SealError::Format)?;
        let raw = BASE64.decode(encoded).map_err(|_| SealError::Format)?;
        if raw.len() < 2 + TAG_LEN || raw[0] != VERSION {
            return Err(SealError::Format);
        }
        let kid_len = usize::from(raw[1]);
        let (body, tag) = raw.split_at(raw.len() - TAG_LEN);
        if kid_len == 0 || kid_len > MAX_KEY_ID_LEN || body.len() < 2 + kid_len {
            return Err(SealError::Format);
        }
        let key = self
            .find(&body[2..2 + kid_len])
            .ok_or(SealError::UnknownKey)?;
        if !key.value_tag_matches(&tagged_domain(domain), body, tag) {
            return Err(SealError::BadTag);
        }
        Ok(body[2 + kid_len..].to_vec())
    }
}

fn tagged_domain(domain: &str) -> String {
    format!("{DOMAIN_PREFIX}{domain}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::keyring::fixed_test_secret as secret;

    fn ring(keys: &[(&str, u8)]) -> KeyRing {
        KeyRing::new(keys.iter().map(|(id, seed)| (*id, secret(*seed)))).unwrap()
    }

    #[test]
    fn a_value_opens_only_for_its_domain_and_under_the_ring() {
        let keys = ring(&[("k1", 1)]);
        let sealed = keys
            .seal_value("gateway/continuation", b"{\"a\":1}")
            .unwrap();
        assert!(sealed.starts_with(PREFIX));
        assert!(keys.is_sealed_value(&sealed));
        assert_eq!(
            keys.open_value("gateway/continuation", &sealed).unwrap(),
            b"{\"a\":1}"
        );
        assert_eq!(
            keys.open_value("gateway/other", &sealed),
            Err(SealError::BadTag)
        );
        assert_eq!(
            ring(&[("k1", 2)]).open_value("gateway/continuation", &sealed),
            Err(SealError::BadTag)
        );
        assert_eq!(
            ring(&[("k2", 1)]).open_value("gateway/continuation", &sealed),
            Err(SealError::UnknownKey)
        );
    }

    #[test]
    fn rotation_is_honoured() {
        let old = ring(&[("k1", 1)]);
        let sealed = old.seal_value("d", b"x").unwrap();
        // [new, old]: the old key still opens what it sealed; [new] alone does not.
        assert_eq!(
            ring(&[("k2", 2), ("k1", 1)])
                .open_value("d", &sealed)
                .unwrap(),
            b"x"
        );
        assert_eq!(
            ring(&[("k2", 2)]).open_value("d", &sealed),
            Err(SealError::UnknownKey)
        );
    }

    #[test]
    fn every_altered_byte_is_refused() {
        let keys = ring(&[("k1", 1)]);
        let sealed = keys.seal_value("d", b"payload").unwrap();
        let raw = BASE64.decode(&sealed[PREFIX.len()..]).unwrap();
        for i in 0..raw.len() {
            let mut altered = raw.clone();
            altered[i] ^= 0x01;
            let token = format!("{PREFIX}{}", BASE64.encode(&altered));
            assert!(keys.open_value("d", &token).is_err(), "byte {i}");
        }
    }

    #[test]
    fn states_and_sealed_values_never_open_as_each_other() {
        let keys = ring(&[("k1", 1)]);
        let sealed = keys.seal_value("d", b"payload").unwrap();
        assert!(super::super::codec::open(&keys, &sealed).is_err());
        for not_sealed in ["mcpc1.BAJrMQ", "mcpgw1.x.y", "", "mcpc1.", "up-1"] {
            assert!(!keys.is_sealed_value(not_sealed), "{not_sealed}");
            assert!(keys.open_value("d", not_sealed).is_err(), "{not_sealed}");
        }
        let big = "A".repeat(MAX_SEALED_LEN);
        assert_eq!(
            keys.open_value("d", &format!("{PREFIX}{big}")),
            Err(SealError::TooLarge)
        );
        assert_eq!(
            keys.seal_value("d", &vec![0; MAX_SEALED_LEN]),
            Err(SealError::TooLarge)
        );
    }
}
