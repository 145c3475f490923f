//! The approvers' registered passkeys: what a passkey-bound approval is verified against, kept
//! where every instance finds it (registered on one, used on another). The WebAuthn ceremonies
//! live in `passkey` (feature `passkeys`); this is only the record and the store trait, which
//! every store of this crate implements.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::kernel::{BoxFuture, hex};

/// The most passkeys one subject may register.
pub const MAX_PASSKEYS_PER_SUBJECT: usize = 10;

/// The most bytes a stored credential may weigh (its public key and counters, as JSON).
pub const MAX_CREDENTIAL_BYTES: usize = 4096;

/// One registered passkey.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RegisteredPasskey {
    /// The credential id, base64url: unique across every subject.
    pub id: String,
    /// The name its owner gave it.
    pub name: String,
    /// When it was registered, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// The credential as the verifier keeps it (public key, counter, flags), JSON.
    pub credential: String,
}

impl RegisteredPasskey {
    /// A passkey record.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        created_at: SystemTime,
        credential: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            created_ms: created_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            credential: credential.into(),
        }
    }

    /// Whether a store may keep it: an id, a name and a credential of bounded size.
    pub(crate) fn check_keepable(&self) -> Result<(), StoreError> {
        let ok = !self.id.is_empty()
            && self.id.len() <= 1024
            && self.name.len() <= 200
            && self.credential.len() <= MAX_CREDENTIAL_BYTES;
        if ok {
            Ok(())
        } else {
            Err(StoreError::Backend("a passkey record out of bounds".into()))
        }
    }

    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn decode(text: &str) -> Result<Self, StoreError> {
        serde_json::from_str(text)
            .map_err(|_| StoreError::Backend("a passkey record does not decode".into()))
    }
}

impl fmt::Debug for RegisteredPasskey {
    /// The id and name; the credential stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredPasskey")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What [`PasskeyStore::register`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registered {
    /// Kept.
    Added,
    /// A passkey with this credential id is registered already (to this subject or another).
    Exists,
    /// The subject holds [`MAX_PASSKEYS_PER_SUBJECT`] already.
    Full,
}

/// Where approvers' passkeys are kept, shared by every instance. Every store of this crate is
/// one. Subjects are stored as digests.
pub trait PasskeyStore: fmt::Debug + Send + Sync + 'static {
    /// `subject`'s passkeys, oldest first.
    fn passkeys<'a>(
        &'a self,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RegisteredPasskey>, StoreError>>;

    /// Registers `passkey` for `subject`, unless its id is registered to anyone already or the
    /// subject holds [`MAX_PASSKEYS_PER_SUBJECT`].
    fn register<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<Registered, StoreError>>;

    /// Replaces `subject`'s passkey of the same id (its counter moved); `false` if it is gone.
    fn update<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Removes `subject`'s passkey `id`; `false` if they had none such.
    fn remove<'a>(
        &'a self,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<S: PasskeyStore + ?Sized> PasskeyStore for Arc<S> {
    fn passkeys<'a>(
        &'a self,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RegisteredPasskey>, StoreError>> {
        (**self).passkeys(subject)
    }

    fn register<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<Registered, StoreError>> {
        (**self).register(subject, passkey)
    }

    fn update<'a>(
        &'a self,
        subject: &'a str,
        passkey: &'a RegisteredPasskey,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).update(subject, passkey)
    }

    fn remove<'a>(
        &'a self,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).remove(subject, id)
    }
}

/// The digest a subject's passkeys are stored under (unkeyed, so a key rotation keeps them).
pub(crate) fn subject_key(subject: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"mcp-confirm/passkey-subject/v1\0");
    hash.update(subject.as_bytes());
    hex(&hash.finalize()[..16])
}
