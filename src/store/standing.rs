//! Standing approvals: "also allow this tool on this scope for the next ten minutes, at most
//! twenty times". The record, the one transition a use makes, and the store trait that keeps it
//! where every instance finds it.
//!
//! A standing approval is granted by an accepted confirmation whose signed state offered it, and
//! covers later calls of the same audience, principal, tool and scope only. Each later call still
//! resolves its one record and passes the revalidation hook, and spends one use, atomically in
//! the shared store, before it runs. Expiry, exhaustion and revocation send the next call back to
//! the form: never a silent pass.
//!
//! A use is spent only by a call that passes its revalidation. It is reserved first, under the
//! call's ticket ([`StandingStore::use_one`]), so racing calls never hold more uses than the
//! approval has; a call the revalidation refuses gives that one use back
//! ([`StandingStore::give_back`]). Checking first and spending after would let every racer pass
//! the check on the same uses, and then some of them run with none left.
//!
//! What still spends a use without a run, always toward fewer uses and never more: an instance
//! that stops (or a store that does not answer) between the reservation and the give-back, and
//! a call that passed but whose record the decision log could not take (refused then, as a
//! claimed confirmation is). While every use left is held by calls still in their revalidation,
//! another call gets the form.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::StoreError;
use crate::kernel::{BoxFuture, Nonce, PrincipalKey, hex, sixteen_bytes};

/// The most uses a policy may allow one standing approval.
pub const MAX_STANDING_USES: u32 = 1_000;

/// The most live standing approvals one principal holds at once; granting another replaces none
/// and is refused ([`StoreError::OverBudget`]).
pub const MAX_STANDING_PER_PRINCIPAL: usize = 32;

/// The longest scope a standing approval keeps, in bytes: a policy's scope function that names a
/// longer one for a call gets no standing option for it (only this time), and a store refuses
/// to keep one ([`StoreError::Backend`]).
pub const MAX_STANDING_SCOPE_BYTES: usize = 1024;

/// The random id of one standing approval: what its holder lists and revokes it by.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StandingId([u8; 16]);

sixteen_bytes!(
    StandingId,
    /// An id with the given bytes.
    from_bytes,
    /// The id's bytes.
    as_bytes,
);

impl StandingId {
    /// A fresh random id.
    ///
    /// # Panics
    /// If the operating system has no randomness to give.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        #[allow(clippy::expect_used)]
        getrandom::fill(&mut bytes).expect("the OS random source is available");
        Self(bytes)
    }

    /// 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Reads [`to_hex`](Self::to_hex)'s spelling, and nothing else.
    pub fn from_hex(text: &str) -> Option<Self> {
        crate::kernel::unhex(text).map(Self)
    }
}

/// What a standing approval covers: one audience, principal, tool and scope, as a digest. A later
/// call finds the approval that covers it by this key alone.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StandingKey([u8; 16]);

sixteen_bytes!(
    StandingKey,
    /// A key with the given bytes.
    from_bytes,
    /// The key's bytes.
    as_bytes,
);

impl StandingKey {
    /// The key of `tool` on `scope` for `principal` in `audience`. Each part is length-prefixed,
    /// so no two different tuples share a key.
    pub fn new(audience: &str, principal: PrincipalKey, tool: &str, scope: &str) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"mcp-confirm/standing-key/v1\0");
        for part in [
            audience.as_bytes(),
            principal.as_bytes(),
            tool.as_bytes(),
            scope.as_bytes(),
        ] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&hash.finalize()[..16]);
        Self(bytes)
    }
}

/// Which standing approval something was done under: its key and its id. A grant a queued tool
/// issued under a standing approval carries it, so that revoking the approval stops the grant if
/// it has not begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StandingRef {
    /// Where the approval is found.
    pub key: StandingKey,
    /// Which approval under that key (granting again replaces it with another id).
    pub id: StandingId,
}

impl StandingRef {
    /// `<key hex>.<id hex>`: how a grant record keeps it.
    pub fn to_text(&self) -> String {
        format!("{}.{}", hex(self.key.as_bytes()), self.id.to_hex())
    }

    /// Reads [`to_text`](Self::to_text)'s spelling, and nothing else.
    pub fn from_text(text: &str) -> Option<Self> {
        let (key, id) = text.split_once('.')?;
        Some(Self {
            key: StandingKey::from_bytes(crate::kernel::unhex(key)?),
            id: StandingId::from_hex(id)?,
        })
    }
}

/// One standing approval, as stored.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Standing {
    /// Its id.
    pub id: StandingId,
    /// The deployment that granted it.
    pub audience: String,
    /// The keyed digest of the principal it was granted to.
    pub principal: PrincipalKey,
    /// That principal's subject, shown when it is listed.
    pub subject: String,
    /// The tool it covers.
    pub tool: String,
    /// The scope it covers, as the policy's scope function named it (and the user was shown).
    pub scope: String,
    /// When it was granted.
    pub granted_at: SystemTime,
    /// When it ends, whatever is left of it.
    pub expires_at: SystemTime,
    /// How many later calls it may cover.
    pub uses: u32,
    /// How many it has covered.
    pub used: u32,
    /// Revoked by its holder: it covers nothing more.
    pub revoked: bool,
}

/// What asking a standing approval for one use came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Use {
    /// The use is spent; `left` more remain.
    Used {
        /// Uses left after this one.
        left: u32,
    },
    /// Every use was spent before this call.
    Exhausted,
    /// It has expired.
    Expired,
    /// Its holder revoked it.
    Revoked,
    /// No such approval under this key (never granted, replaced, or forgotten).
    Unknown,
}

impl Standing {
    /// A standing approval granted `at`, for `uses` later calls until `expires_at`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        audience: &str,
        principal: PrincipalKey,
        subject: &str,
        tool: &str,
        scope: &str,
        granted_at: SystemTime,
        expires_at: SystemTime,
        uses: u32,
    ) -> Self {
        Self {
            id: StandingId::random(),
            audience: audience.to_owned(),
            principal,
            subject: subject.to_owned(),
            tool: tool.to_owned(),
            scope: scope.to_owned(),
            granted_at,
            expires_at,
            uses: uses.min(MAX_STANDING_USES),
            used: 0,
            revoked: false,
        }
    }

    /// Whether a store may keep it: its scope is at most [`MAX_STANDING_SCOPE_BYTES`]. Every
    /// store checks this before it keeps anything.
    ///
    /// # Errors
    /// [`StoreError::Backend`] naming the bound.
    pub fn check_keepable(&self) -> Result<(), StoreError> {
        if self.scope.len() > MAX_STANDING_SCOPE_BYTES {
            return Err(StoreError::Backend(
                format!("a standing approval's scope is at most {MAX_STANDING_SCOPE_BYTES} bytes")
                    .into(),
            ));
        }
        Ok(())
    }

    /// The key later calls find it by.
    pub fn key(&self) -> StandingKey {
        StandingKey::new(&self.audience, self.principal, &self.tool, &self.scope)
    }

    /// This approval, by key and id.
    pub fn reference(&self) -> StandingRef {
        StandingRef {
            key: self.key(),
            id: self.id,
        }
    }

    /// Whether it may still cover a call at `now`.
    pub fn is_live(&self, now: SystemTime) -> bool {
        !self.revoked && now < self.expires_at && self.used < self.uses
    }

    /// Spends one use at `now`, if it is live: the one transition every store applies, atomically.
    pub fn use_one(&mut self, now: SystemTime) -> Use {
        if self.revoked {
            return Use::Revoked;
        }
        if now >= self.expires_at {
            return Use::Expired;
        }
        if self.used >= self.uses {
            return Use::Exhausted;
        }
        self.used += 1;
        Use::Used {
            left: self.uses - self.used,
        }
    }

    /// Gives back one use a refused call had reserved: the one transition
    /// [`StandingStore::give_back`] applies, atomically, once the store has found that call's
    /// ticket. Revoked or expired, the count still comes back, so a listing shows what ran.
    pub fn give_back(&mut self) {
        self.used = self.used.saturating_sub(1);
    }
}

/// The stored form of a [`Standing`] (Redis, Postgres): one JSON object, read back strictly. The
/// use count is kept apart, where the store counts atomically.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
struct Stored {
    id: String,
    audience: String,
    principal: String,
    subject: String,
    tool: String,
    scope: String,
    granted_at_ms: u64,
    expires_at_ms: u64,
    uses: u32,
    revoked: bool,
}

#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
impl Standing {
    /// The stored form, without the use count.
    pub(crate) fn encode(&self) -> String {
        let stored = Stored {
            id: self.id.to_hex(),
            audience: self.audience.clone(),
            principal: self.principal.to_hex(),
            subject: self.subject.clone(),
            tool: self.tool.clone(),
            scope: self.scope.clone(),
            granted_at_ms: millis(self.granted_at),
            expires_at_ms: millis(self.expires_at),
            uses: self.uses,
            revoked: self.revoked,
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// A record [`encode`](Self::encode) wrote, with `used` uses spent; `None` for anything else.
    pub(crate) fn decode(text: &str, used: u32) -> Option<Self> {
        let s: Stored = serde_json::from_str(text).ok()?;
        Some(Self {
            id: StandingId::from_hex(&s.id)?,
            audience: s.audience,
            principal: PrincipalKey::from_bytes(crate::kernel::unhex(&s.principal)?),
            subject: s.subject,
            tool: s.tool,
            scope: s.scope,
            granted_at: UNIX_EPOCH + Duration::from_millis(s.granted_at_ms),
            expires_at: UNIX_EPOCH + Duration::from_millis(s.expires_at_ms),
            uses: s.uses.min(MAX_STANDING_USES),
            used: used.min(s.uses),
            revoked: s.revoked,
        })
    }
}

impl fmt::Debug for Standing {
    // The subject and the scope are the user's; logs get the id, the tool and the counts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Standing")
            .field("id", &self.id)
            .field("tool", &self.tool)
            .field("expires_at", &self.expires_at)
            .field("uses", &self.uses)
            .field("used", &self.used)
            .field("revoked", &self.revoked)
            .finish_non_exhaustive()
    }
}

/// Where standing approvals are kept, shared by every instance: a use spent on one is spent on
/// all, and a revocation on one stops the next use on all.
///
/// Implementations keep each approval until its expiry, at most one live approval per
/// [`StandingKey`] (granting again replaces it), at most [`MAX_STANDING_PER_PRINCIPAL`] live ones per
/// principal, and spend a use with [`Standing::use_one`] as one atomic step.
///
/// Each use is spent under a ticket (the covered call's nonce) that the store keeps with the
/// approval until it expires (at most [`MAX_STANDING_USES`] of them), so that
/// [`give_back`](Self::give_back) returns exactly a use that ticket spent, once: a retried or
/// forged give-back returns nothing, and neither does one for an approval granted again since.
pub trait StandingStore: fmt::Debug + Send + Sync + 'static {
    /// Stores `standing`, replacing the approval its key held, if any.
    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The approval under `key` until it expires, live or ended (revoked, every use spent): a
    /// later call is covered only if it [is live](Standing::is_live), and a grant issued under it
    /// begins only if it was not revoked.
    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>>;

    /// Spends one use of the approval `id` under `key` for the call `ticket` names, atomically,
    /// by [`Standing::use_one`], and keeps the ticket with the approval. The use stays spent
    /// unless [`give_back`](Self::give_back) returns it.
    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>>;

    /// Returns the use `ticket` spent of the approval `id` under `key`, atomically, by
    /// [`Standing::give_back`]: `true` if a use came back. A ticket that spent nothing here, a
    /// use already given back, and an approval replaced (another id) or gone give nothing back.
    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// `principal`'s live approvals, soonest expiry first.
    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>>;

    /// Revokes `principal`'s approval `id`, or all of them (`None`); how many were live.
    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// How many standing approvals of `audience` are live (unexpired, unrevoked, uses left):
    /// the active standing approvals gauge. `None` (the default) when the store cannot count
    /// them; the Redis store cannot without an index of its own, and says so.
    fn live<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let _ = audience;
        Box::pin(std::future::ready(Ok(None)))
    }
}

impl<S: StandingStore + ?Sized> StandingStore for Arc<S> {
    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>> {
        (**self).grant(standing)
    }

    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>> {
        (**self).find(key)
    }

    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>> {
        (**self).use_one(key, id, ticket)
    }

    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        (**self).give_back(key, id, ticket)
    }

    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>> {
        (**self).list(principal)
    }

    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        (**self).revoke(principal, id)
    }

    fn live<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        (**self).live(audience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn standing(uses: u32) -> Standing {
        let alice = PrincipalKey::from_bytes([0xa1; 16]);
        Standing::new(
            "notes",
            alice,
            "alice",
            "notes_delete",
            "personal",
            at(0),
            at(600),
            uses,
        )
    }

    #[test]
    fn a_use_is_spent_once_and_the_last_one_exhausts() {
        let mut s = standing(2);
        assert!(s.is_live(at(1)));
        assert_eq!(s.use_one(at(1)), Use::Used { left: 1 });
        assert_eq!(s.use_one(at(2)), Use::Used { left: 0 });
        assert!(!s.is_live(at(3)));
        assert_eq!(s.use_one(at(3)), Use::Exhausted);
        assert_eq!(s.used, 2);
        // A use given back is there for the next call; never below none.
        s.give_back();
        assert_eq!(s.use_one(at(4)), Use::Used { left: 0 });
        let mut fresh = standing(1);
        fresh.give_back();
        assert_eq!(fresh.used, 0);
    }

    #[test]
    fn expiry_and_revocation_end_it_whatever_is_left() {
        let mut s = standing(5);
        assert_eq!(s.use_one(at(600)), Use::Expired);
        let mut r = standing(5);
        r.revoked = true;
        assert_eq!(r.use_one(at(1)), Use::Revoked);
        assert_eq!((s.used, r.used), (0, 0));
    }

    #[test]
    fn keys_separate_every_part_and_uses_are_bounded() {
        let alice = PrincipalKey::from_bytes([0xa1; 16]);
        let bob = PrincipalKey::from_bytes([0xb0; 16]);
        let key = StandingKey::new("notes", alice, "notes_delete", "personal");
        assert_eq!(key, standing(1).key());
        for other in [
            StandingKey::new("other", alice, "notes_delete", "personal"),
            StandingKey::new("notes", bob, "notes_delete", "personal"),
            StandingKey::new("notes", alice, "notes_purge", "personal"),
            StandingKey::new("notes", alice, "notes_delete", "team"),
            // Length-prefixed: moving a boundary is another key.
            StandingKey::new("notes", alice, "notes_deletep", "ersonal"),
        ] {
            assert_ne!(key, other);
        }
        assert_eq!(standing(u32::MAX).uses, MAX_STANDING_USES);
        let text = standing(1).id.to_hex();
        assert_eq!(
            StandingId::from_hex(&text).map(|id| id.to_hex()),
            Some(text)
        );
        assert!(!format!("{:?}", standing(1)).contains("alice"));
    }

    #[test]
    fn the_stored_form_reads_back_whole_and_nothing_else() {
        let mut s = standing(7);
        s.used = 3;
        assert_eq!(Standing::decode(&s.encode(), 3), Some(s.clone()));
        let extra = s.encode().replacen('{', "{\"x\":1,", 1);
        assert_eq!(Standing::decode(&extra, 0), None);
        assert_eq!(Standing::decode("{}", 0), None);
        // A count past the uses reads as exhausted, not as more uses.
        assert_eq!(Standing::decode(&s.encode(), 99).map(|s| s.used), Some(7));
    }
}
