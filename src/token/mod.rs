//! The `requestState` format and its limits: key ids, the bound claims, sealing and opening.
//!
//! A state is HMAC-SHA256-signed, not encrypted: the client can decode it but can only read what
//! the form already showed it (the candidate ids and versions). Everything else is a digest. The
//! keys that sign it are a [`KeyRing`](crate::KeyRing).
//!
//! ```text
//! candidates.rs  the signed candidate set, bounds checked once (MAX_CANDIDATES, …)
//! claims.rs      what a state binds, and its one canonical byte layout
//! codec.rs       "mcpc1." base64url(version ‖ key id ‖ claims ‖ HMAC-SHA256 tag)
//! keyring.rs     the signing and verifying keys, derived per purpose, zeroized
//! sealer.rs      issue a challenge's state; check a retry's state against the request
//! sealed.rs      values of others sealed in the same format (KeyRing::seal_value)
//! ```

pub(crate) mod candidates;
pub(crate) mod claims;
pub(crate) mod codec;
pub(crate) mod keyring;
pub(crate) mod sealed;
pub(crate) mod sealer;

pub use candidates::{MAX_CANDIDATE_ID_LEN, MAX_CANDIDATES, MAX_VERSION_LEN};
pub use codec::{MAX_TOKEN_LEN, PREFIX};
pub use keyring::{MAX_KEY_ID_LEN, MIN_SECRET_LEN};
pub use sealed::{MAX_SEALED_LEN, SealError};

/// The digest of a tool call's `arguments` that a `requestState` binds, independent of key
/// order and whitespace (absent arguments digest like `{}`), without the top-level argument
/// `without` (the one a pick-one choice is written into). For a component beside the layer
/// that binds a call as the layer does (the gateway's continuations).
pub fn arguments_digest(arguments: Option<&serde_json::Value>, without: Option<&str>) -> [u8; 32] {
    claims::arguments_digest(arguments, without)
}

/// Why a `requestState` was refused.
///
/// The wire never sees these: every variant becomes the same frozen JSON-RPC error (a restart
/// excepted, which asks the user to start again), and the variant goes to the audit log only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateError {
    /// Longer than [`MAX_TOKEN_LEN`], or claims too large to seal.
    TooLarge,
    /// Not `mcpc1.` followed by canonical unpadded base64url of a plausible body.
    Format,
    /// An unknown format version.
    Version,
    /// Signed by a key that is not (or no longer) in the ring.
    UnknownKey,
    /// The tag does not verify.
    BadMac,
    /// The signed payload does not parse strictly.
    Malformed,
    /// Past its expiry (plus the allowed clock skew).
    Expired,
    /// Issued in the future (beyond the allowed clock skew), or with a lifetime above the TTL.
    BadLifetime,
    /// Issued for another audience (deployment).
    Audience,
    /// Issued to another principal.
    Principal,
    /// Issued for another method.
    Method,
    /// Issued for another tool.
    Tool,
    /// The arguments changed since the form was shown.
    Arguments,
    /// Issued for another phase of the confirmation.
    Phase,
    /// Issued for another `inputRequests` key.
    InputKey,
    /// The retry reuses the JSON-RPC id of the request that was challenged.
    SameRequestId,
    /// The state's nonce is being used by another retry right now.
    InFlight,
    /// The state's nonce was already used.
    Consumed,
    /// Issued before the (in-memory) replay store started: whether it was used before the
    /// restart is unknown, so it is refused.
    Restarted,
}

impl StateError {
    /// The audit log's reason for a refusal with this error: static, so refusing a forged
    /// state formats nothing.
    pub(crate) fn audit_reason(self) -> &'static str {
        match self {
            Self::TooLarge => "requestState: state too large",
            Self::Format => "requestState: state is not well formed",
            Self::Version => "requestState: unknown state version",
            Self::UnknownKey => "requestState: unknown key id",
            Self::BadMac => "requestState: bad signature",
            Self::Malformed => "requestState: malformed payload",
            Self::Expired => "requestState: state expired",
            Self::BadLifetime => "requestState: state lifetime is implausible",
            Self::Audience => "requestState: audience mismatch",
            Self::Principal => "requestState: principal mismatch",
            Self::Method => "requestState: method mismatch",
            Self::Tool => "requestState: tool mismatch",
            Self::Arguments => "requestState: arguments changed",
            Self::Phase => "requestState: phase mismatch",
            Self::InputKey => "requestState: input key mismatch",
            Self::SameRequestId => "requestState: retry reuses the original request id",
            Self::InFlight => "requestState: state already in use",
            Self::Consumed => "requestState: state already used",
            Self::Restarted => "requestState: state issued before a restart",
        }
    }
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = self.audit_reason();
        f.write_str(reason.strip_prefix("requestState: ").unwrap_or(reason))
    }
}

impl std::error::Error for StateError {}
