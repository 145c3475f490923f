//! Issuing and checking states: what a challenge binds, and what a retry's state must match.
//!
//! The [`Sealer`] holds only what sealing needs (the key ring, the lifetime, the allowed skew and
//! the clock); what a state binds arrives as digests, so this module knows nothing of HTTP,
//! JSON-RPC bodies or replay stores.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use subtle::ConstantTimeEq;

use super::StateError;
use super::candidates::Candidates;
use super::claims::{Claims, Phase, StandingTerms, digest16};
use super::codec;
use super::keyring::{KeyRing, RingKey};
use crate::clock::{Clock, unix_secs};
use crate::kernel::{Nonce, PrincipalKey};

/// What every state of one tool binds, whatever the request: digests computed once, when the
/// layer is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolBinding {
    audience: [u8; 16],
    method: [u8; 16],
    tool: [u8; 16],
    input_key: [u8; 16],
}

impl ToolBinding {
    pub(crate) fn new(audience: &str, method: &str, tool: &str, input_key: &str) -> Self {
        Self::with_rule(audience, method, tool, input_key, None)
    }

    /// The binding of a tool whose answer is judged by `rule` (the approval channel and who
    /// approves, canonical), folded into the input key's digest: a state issued under one rule
    /// does not verify under another, so a relaxed rule never judges a stricter one's state.
    /// `None` is the plain form answered by the caller (the digest is the key's alone, as
    /// before rules were bound).
    pub(crate) fn with_rule(
        audience: &str,
        method: &str,
        tool: &str,
        input_key: &str,
        rule: Option<&str>,
    ) -> Self {
        let input_key = match rule {
            None => digest16("input-key", input_key.as_bytes()),
            Some(rule) => digest16("input-key", format!("{input_key}\0{rule}").as_bytes()),
        };
        Self {
            audience: digest16("audience", audience.as_bytes()),
            method: digest16("method", method.as_bytes()),
            tool: digest16("tool", tool.as_bytes()),
            input_key,
        }
    }
}

/// What one request adds to the binding: its JSON-RPC id and its arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestDigests {
    pub(crate) request_id: [u8; 16],
    pub(crate) arguments: [u8; 32],
}

/// Seals and verifies states under one key ring, lifetime, skew and clock.
pub(crate) struct Sealer {
    keys: KeyRing,
    ttl: Duration,
    skew: Duration,
    clock: Arc<dyn Clock>,
}

impl Sealer {
    pub(crate) fn new(keys: KeyRing, ttl: Duration, skew: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            keys,
            ttl,
            skew,
            clock,
        }
    }

    /// The time by the sealer's clock.
    pub(crate) fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// The key ring, for the pages' anti-forgery tokens.
    pub(crate) fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// How far apart the instances' clocks may be.
    pub(crate) fn skew(&self) -> Duration {
        self.skew
    }

    /// The keyed digest of `subject` that the signing key puts in a state: whom a new challenge
    /// is charged to.
    pub(crate) fn principal_digest(&self, subject: &str) -> PrincipalKey {
        self.keys.signing().principal_digest(subject)
    }

    /// Seals a fresh challenge state over the candidates shown.
    pub(crate) fn seal(
        &self,
        tool: &ToolBinding,
        request: RequestDigests,
        subject: &str,
        epoch: [u8; 16],
        candidates: Candidates,
        standing: Option<StandingTerms>,
    ) -> Result<(String, Claims), StateError> {
        let issued_at = unix_secs(self.clock.now());
        let claims = Claims {
            phase: Phase::Confirm,
            issued_at,
            expires_at: issued_at.saturating_add(self.ttl.as_secs()),
            nonce: Nonce::random(),
            audience: tool.audience,
            principal: self.principal_digest(subject),
            method: tool.method,
            tool: tool.tool,
            input_key: tool.input_key,
            request_id: request.request_id,
            arguments: request.arguments,
            epoch,
            candidates,
            standing,
        };
        let token = codec::seal(&self.keys, &claims)?;
        Ok((token, claims))
    }

    /// Opens a retry's state and checks every binding, in a fixed order, before anything stateful.
    ///
    /// The MAC is checked first and the request's own digests are computed (by `request`) only
    /// for a state that verified, so a forged state costs one HMAC. The epoch is checked last, so
    /// only a state that is right in every other way learns that the store restarted.
    pub(crate) fn verify(
        &self,
        tool: &ToolBinding,
        subject: &str,
        epoch: [u8; 16],
        token: &str,
        request: impl FnOnce() -> RequestDigests,
    ) -> Result<Claims, StateError> {
        let (claims, key) = codec::open(&self.keys, token)?;
        self.check(claims, key, tool, subject, epoch, Checks::All(request))
    }

    /// A state this deployment sealed (its MAC verifies under the ring), with the key that
    /// sealed it; `None` for anything else, which may well be another server's state.
    pub(crate) fn open_own<'s>(&'s self, token: &str) -> Option<(Claims, &'s RingKey)> {
        if !token.starts_with(codec::PREFIX) {
            return None;
        }
        codec::open(&self.keys, token).ok()
    }

    /// Checks a state of ours that was issued for a tool the layer no longer confirms: every
    /// binding of [`Sealer::verify`] but the arguments' digest, which depends on a policy that
    /// is gone. Such a state never lets anything run, so its arguments decide nothing.
    pub(crate) fn check_retired(
        &self,
        claims: Claims,
        key: &RingKey,
        tool: &ToolBinding,
        subject: &str,
        epoch: [u8; 16],
        request_id: [u8; 16],
    ) -> Result<Claims, StateError> {
        self.check(
            claims,
            key,
            tool,
            subject,
            epoch,
            Checks::<fn() -> RequestDigests>::Retired { request_id },
        )
    }

    /// Every binding of an opened state, in the order [`Sealer::verify`] gives, but what
    /// `checks` leaves to the caller.
    fn check<R: FnOnce() -> RequestDigests>(
        &self,
        claims: Claims,
        key: &RingKey,
        tool: &ToolBinding,
        subject: &str,
        epoch: [u8; 16],
        checks: Checks<R>,
    ) -> Result<Claims, StateError> {
        let now = unix_secs(self.clock.now());
        let skew = self.skew.as_secs();
        if now >= claims.expires_at.saturating_add(skew) {
            return Err(StateError::Expired);
        }
        if claims.issued_at > now.saturating_add(skew)
            || claims.expires_at < claims.issued_at
            || claims.expires_at - claims.issued_at > self.ttl.as_secs()
        {
            return Err(StateError::BadLifetime);
        }
        if !same(&claims.audience, &tool.audience) {
            return Err(StateError::Audience);
        }
        if !key.principal_matches(&claims.principal, subject) {
            return Err(StateError::Principal);
        }
        if !same(&claims.method, &tool.method) {
            return Err(StateError::Method);
        }
        if !same(&claims.tool, &tool.tool) {
            return Err(StateError::Tool);
        }
        // The arguments' digest and the input key with its rule, where the policy that set them
        // is still there; the request id always.
        let (bound, request_id) = match checks {
            Checks::All(request) => {
                let request = request();
                (Some(request.arguments), request.request_id)
            }
            Checks::Retired { request_id } => (None, request_id),
        };
        if let Some(arguments) = &bound
            && !same(&claims.arguments, arguments)
        {
            return Err(StateError::Arguments);
        }
        if claims.phase != Phase::Confirm {
            return Err(StateError::Phase);
        }
        if bound.is_some() && !same(&claims.input_key, &tool.input_key) {
            return Err(StateError::InputKey);
        }
        if same(&claims.request_id, &request_id) {
            return Err(StateError::SameRequestId);
        }
        if !same(&claims.epoch, &epoch) {
            return Err(StateError::Restarted);
        }
        Ok(claims)
    }

    /// When the replay store may forget a state's nonce: its expiry plus twice the allowed skew.
    ///
    /// The last instance to accept the state is one whose clock runs up to a skew behind; the
    /// store's expiry is computed by an instance whose clock may run up to a skew ahead (Redis
    /// keeps a TTL relative to the claimant's clock, a Postgres pruner deletes by its own). Twice
    /// the skew keeps the entry until every instance within the skew refuses the state.
    pub(crate) fn retention(&self, claims: &Claims) -> SystemTime {
        let skew = self.skew.as_secs();
        UNIX_EPOCH + Duration::from_secs(claims.expires_at.saturating_add(skew.saturating_mul(2)))
    }
}

/// What [`Sealer::check`] checks beyond the state's lifetime, audience, principal, method, tool,
/// phase and epoch.
enum Checks<R> {
    /// Everything: the request's digests (asked for once the cheaper checks passed) and the
    /// input key with its rule.
    All(R),
    /// A state of a tool no longer confirmed, retried as `request_id`: its arguments' digest and
    /// its rule depend on a policy that is gone (nothing runs on it).
    Retired { request_id: [u8; 16] },
}

/// Two digests compared in constant time.
fn same(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("keys", &self.keys)
            .field("ttl", &self.ttl)
            .field("skew", &self.skew)
            .finish_non_exhaustive()
    }
}
