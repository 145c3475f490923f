//! Signing keys with ids, so keys can rotate without invalidating states in flight.

use std::fmt;

use crate::kernel::PrincipalKey;
use hkdf::Hkdf;
use hmac::{KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Minimum secret length in bytes.
pub const MIN_SECRET_LEN: usize = 32;
/// Maximum key-id length in bytes.
pub const MAX_KEY_ID_LEN: usize = 32;

const MAC_KEY_INFO: &[u8] = b"mcp-confirm/requestState/v1/mac";
const PRINCIPAL_KEY_INFO: &[u8] = b"mcp-confirm/requestState/v1/principal";
const FORM_KEY_INFO: &[u8] = b"mcp-confirm/pages/v2/anti-forgery";
const SEAL_KEY_INFO: &[u8] = b"mcp-confirm/pages/v1/sealed-values";
const VALUE_KEY_INFO: &[u8] = b"mcp-confirm/sealed-values/v1";

pub(crate) type HmacSha256 = hmac::Hmac<Sha256>;

/// Why a [`KeyRing`] could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The ring has no keys.
    #[error("a key ring needs at least one key")]
    Empty,
    /// A secret is shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("the secret for key id {id:?} is {len} bytes; at least {MIN_SECRET_LEN} are required")]
    SecretTooShort {
        /// The key id.
        id: String,
        /// The secret's length.
        len: usize,
    },
    /// A key id is empty, too long, or uses characters other than `A-Z a-z 0-9 . _ -`.
    #[error("invalid key id {0:?}: use 1 to {MAX_KEY_ID_LEN} characters from A-Z a-z 0-9 . _ -")]
    InvalidId(String),
    /// Two keys share an id.
    #[error("duplicate key id {0:?}")]
    DuplicateId(String),
    /// A hex-encoded secret is not valid hex.
    #[error("the secret for key id {0:?} is not valid hex")]
    InvalidHex(String),
    /// A secret that does not look random: few distinct bytes (`[7; 32]`, `[0; 32]`, a short
    /// pattern repeated), or nothing but printable text (a password, or hex or base64 that was
    /// never decoded). Such a key is the one in the README, or in another deployment's config.
    #[error(
        "the secret for key id {0:?} does not look random (repeated bytes, or printable text such \
         as a password or undecoded hex): use 32 bytes from a random source, e.g. \
         `openssl rand -hex 32` read with KeyRing::single_hex"
    )]
    WeakSecret(String),
}

/// The keys that sign and verify `requestState` tokens.
///
/// The first key signs; every key verifies. Rotate in three deploys, each fully rolled out:
/// `[old, new]`, then `[new, old]`, then `[new]` once the longest TTL has passed. A state signed by a
/// key that is no longer in the ring is refused.
///
/// Secrets are never used directly: each is expanded with HKDF-SHA256 into purpose-bound keys, held
/// in zeroizing memory. `Debug` prints only the key ids.
#[derive(Clone)]
pub struct KeyRing {
    keys: Vec<RingKey>,
}

/// One key, held as HMAC states already keyed (the key block absorbed), so each tag costs only
/// the message's compressions. With the `zeroize` features of `hmac` and `sha2`, these states and
/// every clone of them are wiped on drop.
#[derive(Clone)]
pub(crate) struct RingKey {
    id: String,
    mac: HmacSha256,
    principal: HmacSha256,
    /// Tags the pages' anti-forgery tokens (`crate::page::FormTokens`).
    form: HmacSha256,
    /// Tags the pages' own sealed values (a passkey ceremony's state).
    seal: HmacSha256,
    /// Tags the values others seal with the ring ([`KeyRing::seal_value`]).
    value: HmacSha256,
}

/// Whether a secret is obviously not from a random source: fewer than 16 distinct byte values
/// (32 random bytes have about 30; fewer than 16 happens by chance with odds below 10^-20), or
/// every byte printable ASCII (odds of (95/256)^32 ≈ 10^-14 for random bytes). Obvious only: a
/// secret that passes can still be known to others.
fn looks_weak(secret: &[u8]) -> bool {
    let mut seen = [false; 256];
    for &b in secret {
        seen[usize::from(b)] = true;
    }
    let distinct = seen.iter().filter(|&&s| s).count();
    distinct < 16 || secret.iter().all(|b| (0x20..=0x7e).contains(b))
}

impl KeyRing {
    /// Builds a ring from `(key id, secret)` pairs; the first pair signs.
    ///
    /// # Errors
    /// [`KeyError`] when the ring is empty, a secret is shorter than 32 bytes or does not look
    /// random ([`KeyError::WeakSecret`]), or an id is invalid or repeated.
    pub fn new<I, K, S>(keys: I) -> Result<Self, KeyError>
    where
        I: IntoIterator<Item = (K, S)>,
        K: Into<String>,
        S: AsRef<[u8]>,
    {
        let mut ring = Vec::new();
        for (id, secret) in keys {
            let id = id.into();
            if !valid_key_id(&id) {
                return Err(KeyError::InvalidId(id));
            }
            if ring.iter().any(|k: &RingKey| k.id == id) {
                return Err(KeyError::DuplicateId(id));
            }
            let secret = secret.as_ref();
            if secret.len() < MIN_SECRET_LEN {
                return Err(KeyError::SecretTooShort {
                    id,
                    len: secret.len(),
                });
            }
            if looks_weak(secret) {
                return Err(KeyError::WeakSecret(id));
            }
            ring.push(RingKey::derive(id, secret));
        }
        if ring.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self { keys: ring })
    }

    /// A ring with one key.
    ///
    /// # Errors
    /// As [`KeyRing::new`].
    pub fn single(id: impl Into<String>, secret: impl AsRef<[u8]>) -> Result<Self, KeyError> {
        Self::new([(id, secret)])
    }

    /// A ring with one key given as hex (for command-line flags and environment variables).
    ///
    /// # Errors
    /// As [`KeyRing::new`], plus [`KeyError::InvalidHex`].
    pub fn single_hex(id: impl Into<String>, hex: &str) -> Result<Self, KeyError> {
        let id = id.into();
        let secret =
            Zeroizing::new(decode_hex(hex).ok_or_else(|| KeyError::InvalidHex(id.clone()))?);
        Self::single(id, &*secret)
    }

    /// A ring with one fresh random 32-byte key. States it signs die with the process and no other
    /// instance can verify them: for demos and tests.
    ///
    /// # Panics
    /// If the operating system's random source fails.
    pub fn random() -> Self {
        let mut secret = Zeroizing::new([0u8; 32]);
        #[allow(clippy::expect_used)]
        getrandom::fill(&mut secret[..]).expect("the OS random source failed");
        Self {
            keys: vec![RingKey::derive("random".to_owned(), &secret[..])],
        }
    }

    /// The ids in the ring, signing key first.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// The pages' anti-forgery tag over `data` (what a form token binds), by the signing key.
    pub(crate) fn form_tag(&self, data: &[u8]) -> [u8; 32] {
        self.signing().form_tag(data)
    }

    /// Whether `tag` begins [`form_tag`](Self::form_tag) of `data` under any key of the ring,
    /// compared in constant time, every key tried.
    pub(crate) fn form_tag_matches(&self, data: &[u8], tag: &[u8]) -> bool {
        self.keys.iter().fold(false, |found, key| {
            let full = key.form_tag(data);
            found | (tag.len() <= full.len() && bool::from(full[..tag.len()].ct_eq(tag)))
        })
    }

    /// A tag over `data` for the pages' own sealed values (`domain` separates their uses), by
    /// the signing key.
    pub(crate) fn page_tag(&self, domain: &[u8], data: &[u8]) -> [u8; 32] {
        self.signing().page_tag(domain, data)
    }

    /// Whether `tag` is [`page_tag`](Self::page_tag) of `data` under any key of the ring,
    /// compared in constant time.
    pub(crate) fn page_tag_matches(&self, domain: &[u8], data: &[u8], tag: &[u8]) -> bool {
        self.keys.iter().fold(false, |found, key| {
            found | bool::from(key.page_tag(domain, data)[..].ct_eq(tag))
        })
    }

    /// Whether `digest` is `subject`'s principal digest under any key of the ring (a record made
    /// before a rotation still belongs to its principal), compared in constant time.
    pub(crate) fn principal_matches_any(&self, digest: &PrincipalKey, subject: &str) -> bool {
        self.keys.iter().fold(false, |found, key| {
            found | key.principal_matches(digest, subject)
        })
    }

    /// `subject`'s principal digest under each key of the ring, the signing key's first: where
    /// records a principal made before a rotation are found.
    pub(crate) fn principal_digests(&self, subject: &str) -> Vec<PrincipalKey> {
        self.keys
            .iter()
            .map(|key| key.principal_digest(subject))
            .collect()
    }

    pub(crate) fn signing(&self) -> &RingKey {
        &self.keys[0]
    }

    pub(crate) fn find(&self, id: &[u8]) -> Option<&RingKey> {
        self.keys.iter().find(|k| k.id.as_bytes() == id)
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field(
                "key_ids",
                &self.keys.iter().map(|k| &k.id).collect::<Vec<_>>(),
            )
            .field("secrets", &"<redacted>")
            .finish()
    }
}

impl fmt::Debug for RingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl RingKey {
    fn derive(id: String, secret: &[u8]) -> Self {
        let hk = Hkdf::<Sha256>::new(None, secret);
        let mut mac = Zeroizing::new([0u8; 32]);
        let mut principal = Zeroizing::new([0u8; 32]);
        let mut form = Zeroizing::new([0u8; 32]);
        // 32 bytes is far below HKDF-SHA256's 8160-byte output limit, so expand cannot fail.
        let _ = hk.expand(MAC_KEY_INFO, &mut mac[..]);
        let _ = hk.expand(PRINCIPAL_KEY_INFO, &mut principal[..]);
        let _ = hk.expand(FORM_KEY_INFO, &mut form[..]);
        let mut seal = Zeroizing::new([0u8; 32]);
        let _ = hk.expand(SEAL_KEY_INFO, &mut seal[..]);
        let mut value = Zeroizing::new([0u8; 32]);
        let _ = hk.expand(VALUE_KEY_INFO, &mut value[..]);
        Self {
            id,
            mac: keyed(&mac[..]),
            principal: keyed(&principal[..]),
            form: keyed(&form[..]),
            seal: keyed(&seal[..]),
            value: keyed(&value[..]),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn mac(&self) -> HmacSha256 {
        self.mac.clone()
    }

    /// A keyed digest of the principal, so the token does not reveal who it was issued to.
    pub(crate) fn principal_digest(&self, subject: &str) -> PrincipalKey {
        let mut mac = self.principal.clone();
        mac.update(subject.as_bytes());
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        PrincipalKey::from_bytes(out)
    }

    pub(crate) fn principal_matches(&self, digest: &PrincipalKey, subject: &str) -> bool {
        bool::from(
            self.principal_digest(subject)
                .as_bytes()
                .ct_eq(digest.as_bytes()),
        )
    }

    /// A tag over `data` under the sealing key (its own, apart from the anti-forgery key).
    fn page_tag(&self, domain: &[u8], data: &[u8]) -> [u8; 32] {
        domain_tag(&self.seal, domain, data)
    }

    /// A sealed value's tag over `data` for `domain` (length-prefixed, so no domain is the
    /// prefix of another's input).
    pub(crate) fn value_tag(&self, domain: &str, data: &[u8]) -> [u8; 32] {
        domain_tag(&self.value, domain.as_bytes(), data)
    }

    /// Whether `tag` is [`value_tag`](Self::value_tag) of `data`, compared in constant time at
    /// full length.
    pub(crate) fn value_tag_matches(&self, domain: &str, data: &[u8], tag: &[u8]) -> bool {
        tag.len() == 32 && bool::from(self.value_tag(domain, data)[..].ct_eq(tag))
    }

    /// A tag over `data` under the anti-forgery key (its own, apart from the sealing key).
    fn form_tag(&self, data: &[u8]) -> [u8; 32] {
        let mut mac = self.form.clone();
        mac.update(data);
        mac.finalize().into_bytes().into()
    }
}

/// A tag over `data` for `domain` under `key`, the domain length-prefixed so that no domain's
/// input is the prefix of another's.
fn domain_tag(key: &HmacSha256, domain: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = key.clone();
    mac.update(
        &u64::try_from(domain.len())
            .unwrap_or(u64::MAX)
            .to_be_bytes(),
    );
    mac.update(domain);
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length.
    <HmacSha256 as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(any(test, feature = "fuzzing", feature = "testing"))]
/// A fixed secret that looks random (a splitmix64 stream from `seed`): distinct per seed, the
/// same on every run, and accepted by [`KeyRing`], which refuses `[seed; 32]`. For tests only:
/// anyone can compute it.
pub const fn fixed_test_secret(seed: u8) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut x = 0x6d63_7063_6f6e_6669_u64 ^ seed as u64;
    let mut i = 0;
    while i < 32 {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out[i] = z as u8;
        i += 1;
    }
    out
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    let hex = hex.trim();
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    hex.as_bytes()
        .chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_short_secrets_bad_ids_and_duplicates() {
        assert_eq!(
            KeyRing::single("k1", [0u8; 31]).unwrap_err(),
            KeyError::SecretTooShort {
                id: "k1".into(),
                len: 31
            }
        );
        assert!(matches!(
            KeyRing::single("", fixed_test_secret(0)),
            Err(KeyError::InvalidId(_))
        ));
        assert!(matches!(
            KeyRing::single("k 1", fixed_test_secret(0)),
            Err(KeyError::InvalidId(_))
        ));
        assert!(matches!(
            KeyRing::single("k".repeat(33), fixed_test_secret(0)),
            Err(KeyError::InvalidId(_))
        ));
        assert!(matches!(
            KeyRing::new([("a", fixed_test_secret(1)), ("a", fixed_test_secret(2))]),
            Err(KeyError::DuplicateId(_))
        ));
        assert_eq!(
            KeyRing::new(Vec::<(String, Vec<u8>)>::new()).unwrap_err(),
            KeyError::Empty
        );
        assert!(KeyRing::single("k1", fixed_test_secret(0)).is_ok());
    }

    /// Issue 34, mistake 9: the README's `[7; 32]`, an all-zero key, a password and hex that was
    /// never decoded are refused; 32 random bytes are not.
    #[test]
    fn secrets_that_do_not_look_random_are_refused() {
        let weak: [&[u8]; 6] = [
            &[7; 32],
            &[0; 32],
            b"passwordpasswordpasswordpassword",
            b"0123456789abcdef0123456789abcdef",
            b"6d63702d636f6e6669726d2d6c6f616467656e2d6b65792d3031323334353637",
            &[
                1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4,
                5, 6, 7, 8,
            ],
        ];
        for secret in weak {
            assert_eq!(
                KeyRing::single("k1", secret).unwrap_err(),
                KeyError::WeakSecret("k1".into())
            );
        }
        // The message names the fix, and not the secret.
        let message = KeyRing::single("k1", [7u8; 32]).unwrap_err().to_string();
        assert!(message.contains("openssl rand -hex 32"), "{message}");
        for seed in 0..=255 {
            assert!(
                KeyRing::single("k1", fixed_test_secret(seed)).is_ok(),
                "{seed}"
            );
        }
        let mut random = [0u8; 32];
        getrandom::fill(&mut random).unwrap();
        assert!(KeyRing::single("k1", random).is_ok());
    }

    #[test]
    fn debug_redacts_secrets() {
        let ring = KeyRing::new([
            ("k2", fixed_test_secret(0xAB)),
            ("k1", fixed_test_secret(0xCD)),
        ])
        .unwrap();
        let shown = format!("{ring:?}");
        assert!(shown.contains("k2") && shown.contains("k1") && shown.contains("<redacted>"));
        assert!(!shown.to_lowercase().contains("ab, ab") && !shown.contains("171"));
        assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["k2", "k1"]);
    }

    #[test]
    fn hex_secrets() {
        let hex: String = fixed_test_secret(1)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(KeyRing::single_hex("k", &hex).is_ok());
        assert!(matches!(
            KeyRing::single_hex("k", "zz"),
            Err(KeyError::InvalidHex(_))
        ));
        assert!(matches!(
            KeyRing::single_hex("k", &"ab".repeat(16)),
            Err(KeyError::SecretTooShort { len: 16, .. })
        ));
    }

    #[test]
    fn keyed_states_compute_standard_hmac_sha256() {
        // RFC 4231, test case 1; a clone of the keyed state is used twice.
        let state = keyed(&[0x0b; 20]);
        for _ in 0..2 {
            let mut mac = state.clone();
            mac.update(b"Hi There");
            assert_eq!(
                mac.finalize().into_bytes()[..],
                [
                    0xb0, 0x34, 0x4c, 0x61, 0xd8, 0xdb, 0x38, 0x53, 0x5c, 0xa8, 0xaf, 0xce, 0xaf,
                    0x0b, 0xf1, 0x2b, 0x88, 0x1d, 0xc2, 0x00, 0xc9, 0x83, 0x3d, 0xa7, 0x26, 0xe9,
                    0x37, 0x6c, 0x2e, 0x32, 0xcf, 0xf7
                ]
            );
        }
    }

    #[test]
    fn principal_digest_is_keyed() {
        let a = KeyRing::single("k", fixed_test_secret(1)).unwrap();
        let b = KeyRing::single("k", fixed_test_secret(2)).unwrap();
        assert_ne!(
            a.signing().principal_digest("alice"),
            b.signing().principal_digest("alice")
        );
        let d = a.signing().principal_digest("alice");
        assert!(a.signing().principal_matches(&d, "alice"));
        assert!(!a.signing().principal_matches(&d, "bob"));
    }
}
