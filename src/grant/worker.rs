//! The worker's side of a grant: begin an attempt, re-check the live record, act, finish.
//!
//! The approval happened minutes ago, in another request, maybe on another instance. Before a
//! queued action runs, the worker asks the same [`Revalidate`] hook the layer asked at approval
//! time (is the principal still allowed, does the record still exist, is its version the one the
//! user saw?) with what the grant recorded. Every attempt asks again, so an attempt after a crash
//! finds the record already gone and never acts twice.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Begin, Finish, Grant, GrantId, GrantState, GrantStore, Lease};
use crate::audit;
use crate::policy::{Refusal, Revalidate, Revalidation};
use crate::principal::Principal;
use crate::store::StoreError;

/// Why a queued action must not run now. Only [`is_retryable`](Self::is_retryable) errors may
/// succeed on a later attempt; the others are final.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The store could not be asked, or did not answer in time: the outcome of the call is
    /// unknown, nothing ran. Retry later.
    #[error("the grant store is unavailable")]
    Unavailable(#[source] StoreError),
    /// Another attempt holds the grant. Retry after `retry_after`.
    #[error("another attempt holds the grant")]
    Busy {
        /// The earliest time a new attempt can start.
        retry_after: SystemTime,
    },
    /// The grant has ended (consumed, failed, revoked or expired): never run it.
    #[error("the grant has ended")]
    Ended(GrantState),
    /// No such grant, or it was forgotten after it ended: never run it.
    #[error("no such grant")]
    Unknown,
    /// The re-check at execution refused: the principal lost access or the record changed. The
    /// grant is now [`GrantState::Failed`]; never run it.
    #[error("the grant no longer holds: {0}")]
    Refused(Refusal),
    /// This attempt's lease ran out and another attempt took over: its result was not recorded.
    #[error("this attempt was superseded by a later one")]
    Superseded,
    /// The principal asking is not the one the grant was issued to; nothing changed.
    #[error("the grant belongs to another principal")]
    NotOwner,
}

impl GrantError {
    /// Whether a later attempt may succeed (the store was unavailable, or another attempt holds
    /// the lease). Every other error is final.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Busy { .. })
    }
}

/// What a [`Grants::run`] ends with when it does not return the action's value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError<E> {
    /// The action did not start.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The action started and failed. Its outcome is unknown to the grant, which stays
    /// executing until its lease ends; the next attempt re-checks the live record first.
    #[error("the action failed")]
    Action(#[source] E),
}

/// Runs the work that confirmations queued: the handle a worker uses, by grant id.
///
/// Get one from [`ConfirmLayer::grants`](crate::ConfirmLayer::grants) (the layer's grant store
/// and the revalidation hooks of its queued tools), or build one with [`Grants::new`] in a
/// worker process. Cheap to clone.
///
/// A grant whose tool has no revalidation hook here never runs: the re-check at execution is the
/// point of a grant.
pub struct Grants<S = Arc<dyn GrantStore>> {
    pub(super) store: S,
    pub(super) lease: Duration,
    hooks: Arc<HashMap<String, Arc<dyn Revalidate>>>,
}

impl<S: Clone> Clone for Grants<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            lease: self.lease,
            hooks: Arc::clone(&self.hooks),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Grants<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tools: Vec<_> = self.hooks.keys().collect();
        tools.sort();
        f.debug_struct("Grants")
            .field("store", &self.store)
            .field("lease", &self.lease)
            .field("tools", &tools)
            .finish()
    }
}

impl<S: GrantStore> Grants<S> {
    /// The default lease: how long one attempt may run before another may start.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

    /// Grants kept in `store`, with no revalidation hook yet.
    pub fn new(store: S) -> Self {
        Self {
            store,
            lease: Self::DEFAULT_LEASE,
            hooks: Arc::default(),
        }
    }

    /// How long one attempt may run (default [`Self::DEFAULT_LEASE`]). Keep it well above the
    /// work's duration: an attempt that outlives its lease can be superseded by another.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Re-checks grants of `tool` with `hook` before they run (usually the hook of the tool's
    /// [`ToolPolicy::revalidate`](crate::ToolPolicy::revalidate)).
    pub fn revalidate(mut self, tool: impl Into<String>, hook: impl Revalidate) -> Self {
        Arc::make_mut(&mut self.hooks).insert(tool.into(), Arc::new(hook));
        self
    }

    pub(crate) fn with_hooks(
        store: S,
        lease: Duration,
        hooks: HashMap<String, Arc<dyn Revalidate>>,
    ) -> Self {
        Self {
            store,
            lease,
            hooks: Arc::new(hooks),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Starts an attempt at grant `id` and re-checks it: the attempt is yours to act on only if
    /// this returns `Ok`. Then call [`Attempt::consumed`] once the action happened.
    ///
    /// # Errors
    /// [`GrantError`]: retry later if [`is_retryable`](GrantError::is_retryable), never otherwise.
    pub async fn begin(&self, id: GrantId) -> Result<Attempt<'_, S>, GrantError> {
        let lease = match self
            .store
            .begin(id, self.lease)
            .await
            .map_err(GrantError::Unavailable)?
        {
            Begin::Started(lease) => lease,
            Begin::Busy { until } => return Err(GrantError::Busy { retry_after: until }),
            Begin::Unknown => return Err(GrantError::Unknown),
            Begin::Finished(state) => {
                if state == GrantState::Expired {
                    // This begin may be what expired it: record it, with the nonce if the
                    // store still answers.
                    let nonce = self.store.get(id).await.ok().flatten().map(|g| g.nonce);
                    audit::grant_expired(&id, nonce.as_ref());
                }
                return Err(GrantError::Ended(state));
            }
        };
        let grant = match self.store.get(id).await {
            Ok(Some(grant)) => grant,
            // Begun but unreadable: leave the lease to run out; the next attempt starts over.
            Ok(None) => return Err(GrantError::Unknown),
            Err(e) => return Err(GrantError::Unavailable(e)),
        };
        audit::grant_executing(&grant, lease.attempt);
        if let Err(refusal) = self.check(&grant).await {
            audit::grant_failed(&grant, refusal.reason());
            // If this write is lost the lease runs out and the next attempt is refused the same way.
            let _ = self.store.finish(lease, Finish::Failed).await;
            return Err(GrantError::Refused(refusal));
        }
        Ok(Attempt {
            store: &self.store,
            grant,
            lease,
        })
    }

    /// Begins grant `id`, runs `action` on it, and records it consumed when `action` succeeds.
    ///
    /// A job retried after success gets [`GrantError::Ended`] and never runs `action` again.
    ///
    /// # Errors
    /// [`RunError::Grant`] if the action must not start; [`RunError::Action`] if it failed (the
    /// grant stays executing until the lease ends; the next attempt re-checks first).
    pub async fn run<T, E, F, Fut>(&self, id: GrantId, action: F) -> Result<T, RunError<E>>
    where
        F: FnOnce(Grant) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let attempt = self.begin(id).await?;
        let value = action(attempt.grant().clone())
            .await
            .map_err(RunError::Action)?;
        if let Err(e) = attempt.consumed().await {
            // The action happened; only its record did not. The lease runs out and the next
            // attempt's re-check finds the record gone (or unchanged, for idempotent work).
            tracing::warn!(target: audit::TARGET, decision = "grant_finish_lost", grant = %id.short(),
                reason = %e);
        }
        Ok(value)
    }

    /// Withdraws grant `id` on behalf of `principal` (e.g. its `tasks/cancel`): `Ok(true)` if
    /// it stopped a grant that had not ended, `Ok(false)` if it had already ended. An attempt
    /// already running is not interrupted, but its result is no longer recorded.
    ///
    /// # Errors
    /// [`GrantError::NotOwner`] if the grant was issued to someone else (nothing changes),
    /// [`GrantError::Unknown`], or [`GrantError::Unavailable`].
    pub async fn revoke(&self, id: GrantId, principal: &Principal) -> Result<bool, GrantError> {
        let grant = self
            .store
            .get(id)
            .await
            .map_err(GrantError::Unavailable)?
            .ok_or(GrantError::Unknown)?;
        if grant.subject != principal.subject() {
            audit::refused(&grant.tool, Some(principal), "revoke by another principal");
            return Err(GrantError::NotOwner);
        }
        let revoked = self
            .store
            .revoke(id)
            .await
            .map_err(GrantError::Unavailable)?;
        if revoked {
            audit::grant_revoked(&grant);
        }
        Ok(revoked)
    }

    /// The tool's revalidation hook on what the grant recorded; no hook is a refusal.
    pub(super) async fn check(&self, grant: &Grant) -> Result<(), Refusal> {
        let Some(hook) = self.hooks.get(&grant.tool) else {
            return Err(Refusal::new("no revalidation hook for this tool"));
        };
        hook.revalidate(Revalidation {
            principal: Principal::new(grant.subject.as_str()),
            tool: grant.tool.as_str().into(),
            arguments: Arc::new(grant.arguments.clone()),
            chosen: grant.chosen.clone(),
            seen_version: grant.version.clone(),
        })
        .await
    }
}

/// One running attempt at a grant: re-checked, leased, fenced by its attempt number.
///
/// Call [`consumed`](Self::consumed) once the action happened. Dropping it unfinished leaves the
/// grant executing until the lease ends; the next attempt then re-checks the live record.
#[must_use = "an attempt must be finished with `consumed` or `failed`"]
#[derive(Debug)]
pub struct Attempt<'a, S> {
    store: &'a S,
    grant: Grant,
    lease: Lease,
}

impl<S: GrantStore> Attempt<'_, S> {
    /// What was approved: the principal, tool, arguments, chosen record and its version.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The lease: the attempt number is the fence to write with the change, where the data
    /// allows.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Records that the action happened; the grant never runs again.
    ///
    /// # Errors
    /// [`GrantError::Superseded`] if the lease ran out and another attempt took over;
    /// [`GrantError::Unavailable`] if the store did not answer.
    pub async fn consumed(self) -> Result<(), GrantError> {
        self.finish(Finish::Consumed).await?;
        audit::grant_consumed(&self.grant, self.lease.attempt);
        Ok(())
    }

    /// Records that the action will not happen; the grant never runs again.
    ///
    /// # Errors
    /// As for [`consumed`](Self::consumed).
    pub async fn failed(self, reason: &str) -> Result<(), GrantError> {
        self.finish(Finish::Failed).await?;
        audit::grant_failed(&self.grant, reason);
        Ok(())
    }

    async fn finish(&self, outcome: Finish) -> Result<(), GrantError> {
        match self.store.finish(self.lease, outcome).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(GrantError::Superseded),
            Err(e) => Err(GrantError::Unavailable(e)),
        }
    }
}
