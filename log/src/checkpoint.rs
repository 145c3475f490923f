//! Signed checkpoints of the decision log, in the C2SP formats transparency logs use
//! (`c2sp.org/tlog-checkpoint` inside a `c2sp.org/signed-note`), so third-party tools read them:
//!
//! ```text
//! notes.example/decisions        ← origin: the log's name
//! 1204                           ← how many records
//! n1W8hS5l0bB…=                  ← the Merkle root, base64
//!
//! — notes.example/decisions Az3gQh…   ← key name, base64(key id ‖ Ed25519 signature)
//! ```
//!
//! The signature covers the note's text (the three lines); the key id is the first four bytes of
//! `SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key)`. A verifier knows the key by its `vkey` text,
//! `<name>+<key id hex>+<base64(0x01 ‖ public key)>`.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use sha2::{Digest, Sha256};

use super::merkle::Hash;

/// The signed-note algorithm byte of Ed25519.
const ED25519: u8 = 0x01;
/// What starts a signature line: an em dash and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";
/// The longest origin (and key name) a checkpoint carries.
const MAX_NAME_BYTES: usize = 256;
/// The longest checkpoint text read.
pub(crate) const MAX_NOTE_BYTES: usize = 16 * 1024;

/// Why a checkpoint or a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Not a signed checkpoint as C2SP writes one.
    #[error("malformed checkpoint: {0}")]
    Malformed(&'static str),
    /// No signature by the trusted key: signed by another key, or not at all.
    #[error("no signature by the trusted key {0}")]
    NotSignedBy(String),
    /// A signature by the trusted key that does not verify: the text was changed.
    #[error("the signature by {0} does not verify")]
    BadSignature(String),
    /// A key text that is not `<name>+<hex id>+<base64 key>` of an Ed25519 key.
    #[error("malformed verifier key: {0}")]
    BadKey(&'static str),
}

/// The key that signs checkpoints: an Ed25519 key and its name (the log's origin). The secret
/// is zeroized when dropped and never printed.
pub struct LogKey {
    name: String,
    key: SigningKey,
    tags: super::view::TagKey,
}

impl fmt::Debug for LogKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogKey")
            .field("name", &self.name)
            .field("vkey", &self.verifier().to_string())
            .finish_non_exhaustive()
    }
}

impl LogKey {
    /// The key with this 32-byte Ed25519 seed, named `name` (e.g. `notes.example/decisions`).
    ///
    /// # Errors
    /// [`CheckpointError::BadKey`] if the name is empty, too long, or has a space, a `+` or a
    /// line break (the formats use them as separators).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<Self, CheckpointError> {
        check_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            key: SigningKey::from_bytes(&seed),
            tags: super::view::TagKey::derive(&seed),
        })
    }

    /// A fresh random key (for tests and demos: its checkpoints verify only with its
    /// [`verifier`](Self::verifier)).
    ///
    /// # Panics
    /// If the operating system has no randomness to give.
    pub fn random(name: &str) -> Result<Self, CheckpointError> {
        let mut seed = [0u8; 32];
        #[allow(clippy::expect_used)]
        getrandom::fill(&mut seed).expect("the OS random source is available");
        let key = Self::from_seed(name, seed);
        zeroize::Zeroize::zeroize(&mut seed);
        key
    }

    /// The name: the origin line of every checkpoint it signs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key that tags this log's records and its signer's view.
    pub(crate) fn tags(&self) -> &super::view::TagKey {
        &self.tags
    }

    /// What verifies its signatures.
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey::new(&self.name, self.key.verifying_key())
    }

    /// The signed checkpoint of a tree of `size` records with root `root`.
    pub fn sign(&self, size: u64, root: &Hash) -> SignedCheckpoint {
        let body = Checkpoint {
            origin: self.name.clone(),
            size,
            root: *root,
        }
        .body();
        let signature = self.key.sign(body.as_bytes());
        let mut blob = Vec::with_capacity(68);
        blob.extend_from_slice(&self.verifier().id);
        blob.extend_from_slice(&signature.to_bytes());
        let text = format!(
            "{body}\n{SIGNATURE_PREFIX}{} {}\n",
            self.name,
            STANDARD.encode(blob)
        );
        SignedCheckpoint {
            checkpoint: Checkpoint {
                origin: self.name.clone(),
                size,
                root: *root,
            },
            text,
        }
    }
}

/// A public key that verifies checkpoints, with its name and id.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    id: [u8; 4],
    key: VerifyingKey,
}

impl fmt::Debug for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl fmt::Display for VerifierKey {
    /// The `vkey` text: `<name>+<key id hex>+<base64(0x01 ‖ public key)>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut encoded = vec![ED25519];
        encoded.extend_from_slice(self.key.as_bytes());
        write!(
            f,
            "{}+{}+{}",
            self.name,
            mcp_confirm::__private::hex(&self.id),
            STANDARD.encode(encoded)
        )
    }
}

impl std::str::FromStr for VerifierKey {
    type Err = CheckpointError;

    /// Reads the `vkey` text [`Display`](fmt::Display) writes, and nothing else.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // A name has no `+`; the base64 key may (hence at most three parts).
        let mut parts = text.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(CheckpointError::BadKey("expected <name>+<id>+<key>"));
        };
        check_name(name)?;
        let id: [u8; 4] = mcp_confirm::__private::unhex(id)
            .ok_or(CheckpointError::BadKey("the key id is not 8 hex digits"))?;
        let bytes = STANDARD
            .decode(key)
            .map_err(|_| CheckpointError::BadKey("the key is not base64"))?;
        let [ED25519, rest @ ..] = bytes.as_slice() else {
            return Err(CheckpointError::BadKey("not an Ed25519 key"));
        };
        let public: [u8; 32] = rest
            .try_into()
            .map_err(|_| CheckpointError::BadKey("an Ed25519 key is 32 bytes"))?;
        let key = VerifyingKey::from_bytes(&public)
            .map_err(|_| CheckpointError::BadKey("not a valid Ed25519 point"))?;
        let verifier = Self::new(name, key);
        if verifier.id != id {
            return Err(CheckpointError::BadKey("the key id does not match the key"));
        }
        Ok(verifier)
    }
}

impl VerifierKey {
    fn new(name: &str, key: VerifyingKey) -> Self {
        let mut hash = Sha256::new();
        hash.update(name.as_bytes());
        hash.update(b"\n");
        hash.update([ED25519]);
        hash.update(key.as_bytes());
        let digest = hash.finalize();
        let mut id = [0u8; 4];
        id.copy_from_slice(&digest[..4]);
        Self {
            name: name.to_owned(),
            id,
            key,
        }
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads a signed checkpoint and checks its signature by this key; other signatures (a
    /// witness's cosignature) are ignored.
    ///
    /// # Errors
    /// [`CheckpointError`]: malformed, not signed by this key, or a signature that does not
    /// verify.
    pub fn open(&self, text: &str) -> Result<SignedCheckpoint, CheckpointError> {
        if text.len() > MAX_NOTE_BYTES {
            return Err(CheckpointError::Malformed("longer than 16 KiB"));
        }
        let (body, signatures) = text.split_once("\n\n").ok_or(CheckpointError::Malformed(
            "no blank line before the signatures",
        ))?;
        let body = format!("{body}\n");
        let checkpoint = Checkpoint::parse(&body)?;
        if !signatures.ends_with('\n') {
            return Err(CheckpointError::Malformed(
                "the signatures do not end a line",
            ));
        }
        let mut found = None;
        for line in signatures.lines() {
            let rest = line
                .strip_prefix(SIGNATURE_PREFIX)
                .ok_or(CheckpointError::Malformed(
                    "a signature line does not start with \"— \"",
                ))?;
            let (name, blob) = rest.split_once(' ').ok_or(CheckpointError::Malformed(
                "a signature line has no key name",
            ))?;
            let blob = STANDARD
                .decode(blob)
                .map_err(|_| CheckpointError::Malformed("a signature is not base64"))?;
            if name == self.name && blob.len() == 68 && blob[..4] == self.id {
                found = Some(blob);
            }
        }
        let blob = found.ok_or_else(|| CheckpointError::NotSignedBy(self.to_string()))?;
        let signature = ed25519_dalek::Signature::from_slice(&blob[4..])
            .map_err(|_| CheckpointError::BadSignature(self.name.clone()))?;
        self.key
            .verify(body.as_bytes(), &signature)
            .map_err(|_| CheckpointError::BadSignature(self.name.clone()))?;
        if checkpoint.origin != self.name {
            return Err(CheckpointError::Malformed(
                "the origin is not the key's name",
            ));
        }
        Ok(SignedCheckpoint {
            checkpoint,
            text: text.to_owned(),
        })
    }
}

/// What a checkpoint says: the log's origin, its size, and the root of its first `size` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's name.
    pub origin: String,
    /// How many records.
    pub size: u64,
    /// The Merkle root over them.
    pub root: Hash,
}

impl Checkpoint {
    /// The note text: three lines.
    fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root)
        )
    }

    fn parse(body: &str) -> Result<Self, CheckpointError> {
        let mut lines = body.split('\n');
        let (Some(origin), Some(size), Some(root)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(CheckpointError::Malformed("fewer than three lines"));
        };
        // Extension lines may follow; the note ends with a newline.
        if origin.is_empty() || origin.len() > MAX_NAME_BYTES {
            return Err(CheckpointError::Malformed("no origin"));
        }
        let canonical_size = size.bytes().all(|b| b.is_ascii_digit())
            && !size.is_empty()
            && (size == "0" || !size.starts_with('0'));
        let size = size.parse::<u64>().ok().filter(|_| canonical_size).ok_or(
            CheckpointError::Malformed("the size is not a decimal number"),
        )?;
        let root: Hash = STANDARD
            .decode(root)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(CheckpointError::Malformed(
                "the root is not 32 bytes of base64",
            ))?;
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

/// A checkpoint with its signed text, as written and as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCheckpoint {
    /// What it says.
    pub checkpoint: Checkpoint,
    /// The signed note, exactly.
    pub text: String,
}

fn check_name(name: &str) -> Result<(), CheckpointError> {
    if name.is_empty()
        || name.len() > MAX_NAME_BYTES
        || name
            .chars()
            .any(|c| c == '+' || c.is_whitespace() || c.is_control())
    {
        return Err(CheckpointError::BadKey(
            "a name is 1 to 256 bytes with no space, `+` or control character",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> LogKey {
        LogKey::from_seed("notes.example/decisions", [7; 32]).unwrap()
    }

    /// Half of all keys have a `+` in their base64: CI once drew one and the verifier refused
    /// the demo's own key.
    #[test]
    fn every_key_text_round_trips_including_keys_whose_base64_has_a_plus() {
        let mut with_plus = 0;
        for seed in 0..64u8 {
            let verifier = LogKey::from_seed("notes.example/decisions", [seed; 32])
                .unwrap()
                .verifier();
            let text = verifier.to_string();
            if text
                .splitn(3, '+')
                .nth(2)
                .is_some_and(|key| key.contains('+'))
            {
                with_plus += 1;
            }
            let back: VerifierKey = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(back.to_string(), text);
        }
        assert!(with_plus > 0, "no key with a + was drawn");
    }

    #[test]
    fn a_checkpoint_signs_reads_back_and_its_key_round_trips() {
        let key = key();
        let signed = key.sign(1204, &[9; 32]);
        let lines: Vec<&str> = signed.text.lines().collect();
        assert_eq!(lines[0], "notes.example/decisions");
        assert_eq!(lines[1], "1204");
        assert_eq!(lines[3], "");
        assert!(lines[4].starts_with("\u{2014} notes.example/decisions "));
        let verifier: VerifierKey = key.verifier().to_string().parse().unwrap();
        assert_eq!(verifier, key.verifier());
        assert_eq!(verifier.open(&signed.text).unwrap(), signed);
        assert!(!format!("{key:?}").contains("[7, 7"), "no secret in Debug");
    }

    #[test]
    fn an_edited_or_foreign_checkpoint_is_refused() {
        let key = key();
        let text = key.sign(10, &[1; 32]).text;
        let verifier = key.verifier();
        let edited = text.replacen("\n10\n", "\n11\n", 1);
        assert!(matches!(
            verifier.open(&edited),
            Err(CheckpointError::BadSignature(_))
        ));
        let other = LogKey::from_seed("notes.example/decisions", [8; 32]).unwrap();
        assert!(matches!(
            verifier.open(&other.sign(10, &[1; 32]).text),
            Err(CheckpointError::NotSignedBy(_))
        ));
        for bad in [
            "",
            "x\n1\n",
            "x\n01\nAAAA\n\n\u{2014} x AAAA\n",
            &text.replace('\u{2014}', "-"),
            text.trim_end(),
        ] {
            assert!(verifier.open(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_with_separators_in_their_names_are_refused() {
        for name in ["", "a b", "a+b", "a\nb"] {
            assert!(LogKey::from_seed(name, [1; 32]).is_err(), "{name:?}");
        }
        for text in ["a+b", "a+zz+AAAA", "a+00000000+AAAA"] {
            assert!(text.parse::<VerifierKey>().is_err(), "{text}");
        }
    }
}
