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

use super::{
    Begin, Finish, Grant, GrantId, GrantState, GrantStore, GrantStoreError, Lease, Revoke,
};
use crate::audit::event::{DecisionEvent, step_refused as refused};
use crate::clock::{Clock, SystemClock};
use crate::policy::{Refusal, Revalidate, Revalidation};
use crate::principal::Principal;
use crate::store::standing::StandingStore;

use super::log::GrantLog;

/// Why a queued action must not run now. Only [`is_retryable`](Self::is_retryable) errors may
/// succeed on a later attempt; the others are final.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The store could not be asked, or did not answer in time: the outcome of the call is
    /// unknown, nothing ran. Retry later.
    #[error("the grant store is unavailable")]
    Unavailable(#[source] GrantStoreError),
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
    /// The decision log is down and its policy is to fail closed: nothing began. Retry later.
    #[error("the decision log is unavailable")]
    LogUnavailable,
}

impl GrantError {
    /// Whether a later attempt may succeed (the store was unavailable, or another attempt holds
    /// the lease). Every other error is final.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Busy { .. } | Self::LogUnavailable
        )
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
    audience: Option<String>,
    clock: Arc<dyn Clock>,
    standing: Option<Arc<dyn StandingStore>>,
    pub(super) log: GrantLog,
}

impl<S: Clone> Clone for Grants<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            lease: self.lease,
            hooks: Arc::clone(&self.hooks),
            audience: self.audience.clone(),
            clock: Arc::clone(&self.clock),
            standing: self.standing.clone(),
            log: self.log.clone(),
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
            .field("audience", &self.audience)
            .field("clock", &self.clock)
            .field("standing", &self.standing.is_some())
            .finish()
    }
}

impl<S: GrantStore> Grants<S> {
    /// The default lease: how long one attempt may run before another may start.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// The shortest lease: a zero lease would let attempts overlap.
    pub const MIN_LEASE: Duration = Duration::from_secs(1);
    /// The longest lease.
    pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

    /// Grants kept in `store`, with no revalidation hook yet.
    pub fn new(store: S) -> Self {
        Self {
            store,
            lease: Self::DEFAULT_LEASE,
            hooks: Arc::default(),
            audience: None,
            clock: Arc::new(SystemClock),
            standing: None,
            log: GrantLog::default(),
        }
    }

    /// The clock [`state`](Self::state) reads expiries against (the system clock by default;
    /// give the store's own in tests).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long one attempt may run (default [`Self::DEFAULT_LEASE`], kept between
    /// [`Self::MIN_LEASE`] and [`Self::MAX_LEASE`]). Keep it well above the work's duration: an
    /// attempt that outlives its lease can be superseded by another.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.clamp(Self::MIN_LEASE, Self::MAX_LEASE);
        self
    }

    /// Runs only grants issued for `audience` (the layer's; set by
    /// [`ConfirmLayer::grants`](crate::ConfirmLayer::grants)). A grant of another deployment
    /// sharing the store is refused and left alone.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// Where the standing approvals are kept (the layer's
    /// [`standing_store`](crate::ConfirmLayerBuilder::standing_store); set by
    /// [`ConfirmLayer::grants`](crate::ConfirmLayer::grants)). A grant issued under a standing
    /// approval begins only if that approval was not revoked; without this store such a grant
    /// is refused (and left for a worker that has it).
    #[must_use]
    pub fn standing_store(mut self, store: impl StandingStore) -> Self {
        self.standing = Some(Arc::new(store));
        self
    }

    /// Records each grant's life in `log` (`mcp-confirm-log`'s `AuditLog`, or any
    /// [`DecisionLog`](crate::audit::DecisionLog); set by
    /// [`ConfirmLayer::grants`](crate::ConfirmLayer::grants) when the layer has one): begun,
    /// consumed, failed, revoked, expired. With a log that is down, a grant does not begin
    /// ([`GrantError::LogUnavailable`], retryable) unless the log's policy is to fail open.
    #[must_use]
    pub fn audit_log(mut self, log: impl crate::audit::DecisionLog) -> Self {
        self.log = GrantLog {
            log: Some(Arc::new(log)),
        };
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
        audience: &str,
        hooks: HashMap<String, Arc<dyn Revalidate>>,
        standing: Option<Arc<dyn StandingStore>>,
        log: GrantLog,
    ) -> Self {
        Self {
            store,
            lease: Self::DEFAULT_LEASE,
            hooks: Arc::new(hooks),
            audience: Some(audience.to_owned()),
            clock: Arc::new(SystemClock),
            standing,
            log,
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
        self.stop_if_standing_revoked(id).await?;
        self.log.ready()?;
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
                    let grant = self.store.get(id).await.ok().flatten();
                    self.log.report(
                        DecisionEvent::GrantExpired {
                            id: id.short(),
                            grant: grant.as_ref().map(Grant::facts),
                        },
                        self.clock.now(),
                    );
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
        if self.audience.as_ref().is_some_and(|a| *a != grant.audience) {
            // Another deployment's grant in a shared store: not ours to run or to fail. Its lease
            // runs out and its own workers begin it again.
            refused(&grant.tool, None, "grant issued for another audience");
            return Err(GrantError::Refused(Refusal::new(
                "the grant was issued for another deployment",
            )));
        }
        // Unrecorded, the attempt does not act: its lease runs out and a later one starts over.
        let begun = DecisionEvent::GrantBegun {
            grant: grant.facts(),
            attempt: lease.attempt,
        };
        self.log.begun(begun, self.clock.now()).await?;
        if let Err(refusal) = self.check(&grant).await {
            let failed = DecisionEvent::GrantFailed {
                grant: grant.facts(),
                reason: refusal.reason(),
            };
            self.log.report(failed, self.clock.now());
            // If this write is lost the lease runs out and the next attempt is refused the same way.
            let _ = self.store.finish(lease, Finish::Failed).await;
            return Err(GrantError::Refused(refusal));
        }
        // The re-check took time: the grant may have been revoked, or the lease run out and
        // another attempt begun. Only a live, unrevoked attempt may act.
        match self.store.confirm(lease).await {
            Ok(true) => {}
            Ok(false) => {
                let state = self.store.get(id).await.ok().flatten().map(|g| g.state);
                return Err(match state {
                    Some(GrantState::Revoking { .. } | GrantState::Revoked) => {
                        GrantError::Ended(GrantState::Revoked)
                    }
                    _ => GrantError::Superseded,
                });
            }
            Err(e) => return Err(GrantError::Unavailable(e)),
        }
        Ok(Attempt {
            store: &self.store,
            grant,
            lease,
            log: self.log.clone(),
            clock: Arc::clone(&self.clock),
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
            DecisionEvent::GrantFinishLost {
                id: id.short(),
                reason: &e,
            }
            .trace();
        }
        Ok(value)
    }

    /// Withdraws grant `id` on behalf of `principal` (e.g. its `tasks/cancel`): [`Revoke::Revoked`]
    /// if it will never run; [`Revoke::Stopping`] if an attempt is under way (it does not start
    /// acting if it has not yet, nothing else begins, and one already acting records what it
    /// did); [`Revoke::Ended`] if it had already ended.
    ///
    /// # Errors
    /// [`GrantError::NotOwner`] if the grant was issued to someone else (nothing changes),
    /// [`GrantError::Unknown`], or [`GrantError::Unavailable`].
    pub async fn revoke(&self, id: GrantId, principal: &Principal) -> Result<Revoke, GrantError> {
        let grant = self
            .store
            .get(id)
            .await
            .map_err(GrantError::Unavailable)?
            .ok_or(GrantError::Unknown)?;
        if self.audience.as_ref().is_some_and(|a| *a != grant.audience) {
            // Another deployment's grant: as if it did not exist here.
            return Err(GrantError::Unknown);
        }
        if grant.subject != principal.subject() {
            refused(&grant.tool, Some(principal), "revoke by another principal");
            return Err(GrantError::NotOwner);
        }
        let revoked = self
            .store
            .revoke(id)
            .await
            .map_err(GrantError::Unavailable)?;
        match revoked {
            Revoke::Revoked | Revoke::Stopping { .. } => {
                let revoked = DecisionEvent::GrantRevoked {
                    grant: grant.facts(),
                    reason: None,
                };
                self.log.report(revoked, self.clock.now());
            }
            Revoke::Unknown => return Err(GrantError::Unknown),
            _ => {}
        }
        Ok(revoked)
    }

    /// Where grant `id` is, for the principal it was issued to: how a task's status is answered
    /// on an instance other than the one running it. The effective state: a grant still stored
    /// as [`Granted`](GrantState::Granted) past its expiry, or as executing past both its expiry
    /// and the lease of an attempt that never finished, reads [`Expired`](GrantState::Expired)
    /// (it never runs; only the next attempt to begin it would record that), and one revoked
    /// while an attempt ran reads [`Revoked`](GrantState::Revoked) once that attempt's lease is
    /// over.
    ///
    /// # Errors
    /// [`GrantError::NotOwner`] if the grant was issued to someone else, [`GrantError::Unknown`]
    /// (also for another audience's grant), or [`GrantError::Unavailable`].
    pub async fn state(
        &self,
        id: GrantId,
        principal: &Principal,
    ) -> Result<GrantState, GrantError> {
        let grant = self
            .store
            .get(id)
            .await
            .map_err(GrantError::Unavailable)?
            .ok_or(GrantError::Unknown)?;
        if self.audience.as_ref().is_some_and(|a| *a != grant.audience) {
            return Err(GrantError::Unknown);
        }
        if grant.subject != principal.subject() {
            return Err(GrantError::NotOwner);
        }
        let now = self.clock.now();
        Ok(match grant.state {
            GrantState::Granted if now >= grant.expires_at => GrantState::Expired,
            GrantState::Executing { lease_until, .. }
                if now >= lease_until && now >= grant.expires_at =>
            {
                GrantState::Expired
            }
            GrantState::Revoking { lease_until, .. } if now >= lease_until => GrantState::Revoked,
            state => state,
        })
    }

    /// The tool's revalidation hook on what the grant recorded; no hook is a refusal.
    /// A grant issued under a standing approval and not yet begun is revoked if that approval
    /// was revoked (or is no longer on record: it ended and was forgotten, or was replaced). A
    /// revocation that completes before the work begins stops it; work already begun is not
    /// interrupted. A handle with no standing store to ask refuses to begin it and leaves it.
    async fn stop_if_standing_revoked(&self, id: GrantId) -> Result<(), GrantError> {
        let grant = match self.store.get(id).await {
            Ok(Some(grant)) => grant,
            // `begin` answers for a grant it cannot read.
            Ok(None) | Err(_) => return Ok(()),
        };
        let Some(under) = grant.standing else {
            return Ok(());
        };
        if grant.state != GrantState::Granted
            || self.audience.as_ref().is_some_and(|a| *a != grant.audience)
        {
            return Ok(());
        }
        let Some(store) = &self.standing else {
            // A worker set up without the standing store cannot tell: it leaves the grant to one
            // that can.
            refused(
                &grant.tool,
                None,
                "grant issued under a standing approval, and this worker has no standing store \
                 (Grants::standing_store)",
            );
            return Err(GrantError::Refused(Refusal::new(
                "the grant was issued under a standing approval this worker cannot check",
            )));
        };
        let standing = store
            .find(under.key)
            .await
            .map_err(|e| GrantError::Unavailable(e.into()))?;
        if standing.is_some_and(|s| s.id == under.id && !s.revoked) {
            return Ok(());
        }
        refused(
            &grant.tool,
            None,
            "the standing approval the grant was issued under was revoked or is gone",
        );
        match self
            .store
            .revoke(id)
            .await
            .map_err(GrantError::Unavailable)?
        {
            Revoke::Revoked => {
                let revoked = DecisionEvent::GrantRevoked {
                    grant: grant.facts(),
                    reason: Some("its standing approval was revoked or is gone"),
                };
                self.log.report(revoked, self.clock.now());
                Err(GrantError::Ended(GrantState::Revoked))
            }
            Revoke::Ended(state) => Err(GrantError::Ended(state)),
            Revoke::Stopping { until } => Err(GrantError::Busy { retry_after: until }),
            _ => Err(GrantError::Unknown),
        }
    }

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
    log: GrantLog,
    clock: Arc<dyn Clock>,
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
        let consumed = DecisionEvent::GrantConsumed {
            grant: self.grant.facts(),
            attempt: self.lease.attempt,
        };
        self.log.report(consumed, self.clock.now());
        Ok(())
    }

    /// Records that the action will not happen; the grant never runs again.
    ///
    /// # Errors
    /// As for [`consumed`](Self::consumed).
    pub async fn failed(self, reason: &str) -> Result<(), GrantError> {
        self.finish(Finish::Failed).await?;
        let failed = DecisionEvent::GrantFailed {
            grant: self.grant.facts(),
            reason,
        };
        self.log.report(failed, self.clock.now());
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::grant::{MemoryGrantStore, Revoke, conformance};
    use crate::kernel::BoxFuture;

    const LEASE: Duration = Duration::from_secs(30);

    /// A hook that lets the grant run while `allowed` holds, counting its calls.
    #[derive(Clone, Default)]
    struct Live {
        calls: Arc<AtomicUsize>,
        changed: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Revalidate for Live {
        fn revalidate(&self, check: Revalidation) -> BoxFuture<'static, Result<(), Refusal>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let changed = self.changed.load(Ordering::SeqCst);
            Box::pin(async move {
                assert_eq!(check.principal.subject(), "alice");
                assert_eq!(check.chosen.as_deref(), Some("note-7"));
                if changed || check.seen_version.as_deref() != Some("v1") {
                    return Err(Refusal::new("the record changed"));
                }
                Ok(())
            })
        }
    }

    fn setup() -> (Grants<Arc<MemoryGrantStore>>, ManualClock, Live) {
        let clock = ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let store = Arc::new(MemoryGrantStore::with_clock(100, clock.clone()));
        let live = Live::default();
        let grants = Grants::new(store)
            .clock(clock.clone())
            .lease(LEASE)
            .revalidate("notes_purge", live.clone());
        (grants, clock, live)
    }

    async fn issued(grants: &Grants<Arc<MemoryGrantStore>>, clock: &ManualClock) -> Grant {
        let grant = conformance::grant(clock, Duration::from_secs(600));
        grants.store().issue(&grant).await.unwrap();
        grant
    }

    async fn state(grants: &Grants<Arc<MemoryGrantStore>>, id: GrantId) -> GrantState {
        grants.store().get(id).await.unwrap().unwrap().state
    }

    #[tokio::test]
    async fn state_and_revoke_answer_the_owner_of_this_audience_only() {
        let (grants, clock, _) = setup();
        let grant = issued(&grants, &clock).await;
        let alice = Principal::new("alice");
        let bob = Principal::new("bob");
        assert_eq!(
            grants.state(grant.id, &alice).await.unwrap(),
            GrantState::Granted
        );
        assert!(matches!(
            grants.state(grant.id, &bob).await,
            Err(GrantError::NotOwner)
        ));
        let elsewhere = grants
            .clone()
            .audience("https://another-deployment.example/mcp");
        assert!(matches!(
            elsewhere.state(grant.id, &alice).await,
            Err(GrantError::Unknown)
        ));
        assert!(matches!(
            elsewhere.revoke(grant.id, &alice).await,
            Err(GrantError::Unknown)
        ));
        assert_eq!(state(&grants, grant.id).await, GrantState::Granted);
        assert!(matches!(
            grants.revoke(grant.id, &alice).await,
            Ok(Revoke::Revoked)
        ));
        assert_eq!(
            grants.state(grant.id, &alice).await.unwrap(),
            GrantState::Revoked
        );
        assert!(matches!(
            grants.state(GrantId::random(), &alice).await,
            Err(GrantError::Unknown)
        ));
        // Past its expiry, a grant never begun reads as expired, though stored as granted.
        let late = issued(&grants, &clock).await;
        clock.advance(Duration::from_secs(601));
        assert_eq!(state(&grants, late.id).await, GrantState::Granted);
        assert_eq!(
            grants.state(late.id, &alice).await.unwrap(),
            GrantState::Expired
        );
        // An attempt that never finished: working while its lease runs, or while another could
        // still begin; expired once both its lease and the grant's expiry are over.
        let stalled = issued(&grants, &clock).await;
        let Ok(Begin::Started(_)) = grants.store().begin(stalled.id, LEASE).await else {
            panic!("the attempt begins");
        };
        let working = |state| matches!(state, GrantState::Executing { .. });
        assert!(working(grants.state(stalled.id, &alice).await.unwrap()));
        clock.advance(LEASE);
        assert!(working(grants.state(stalled.id, &alice).await.unwrap()));
        clock.advance(Duration::from_secs(600));
        assert_eq!(
            grants.state(stalled.id, &alice).await.unwrap(),
            GrantState::Expired
        );
    }

    #[tokio::test]
    async fn a_job_retried_after_success_runs_once() {
        let (grants, clock, live) = setup();
        let grant = issued(&grants, &clock).await;
        let runs = AtomicUsize::new(0);
        let action = |_: Grant| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>("deleted")
        };
        assert_eq!(grants.run(grant.id, action).await.unwrap(), "deleted");
        for _ in 0..3 {
            let again = grants.run(grant.id, action).await;
            assert!(
                matches!(
                    again,
                    Err(RunError::Grant(GrantError::Ended(GrantState::Consumed)))
                ),
                "{again:?}"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(live.calls.load(Ordering::SeqCst), 1);
        assert_eq!(state(&grants, grant.id).await, GrantState::Consumed);
    }

    #[tokio::test]
    async fn the_live_record_is_checked_at_execution_and_a_changed_one_never_runs() {
        let (grants, clock, live) = setup();
        let grant = issued(&grants, &clock).await;
        live.changed.store(true, Ordering::SeqCst);
        let ran = AtomicUsize::new(0);
        let result = grants
            .run(grant.id, |_| async {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            })
            .await;
        assert!(
            matches!(result, Err(RunError::Grant(GrantError::Refused(_)))),
            "{result:?}"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(state(&grants, grant.id).await, GrantState::Failed);
        // Changed back or not, a failed grant never runs.
        live.changed.store(false, Ordering::SeqCst);
        assert!(matches!(
            grants.begin(grant.id).await,
            Err(GrantError::Ended(GrantState::Failed))
        ));
    }

    #[tokio::test]
    async fn an_expired_grant_never_runs() {
        let (grants, clock, live) = setup();
        let grant = issued(&grants, &clock).await;
        clock.advance(Duration::from_secs(600));
        assert!(matches!(
            grants.begin(grant.id).await,
            Err(GrantError::Ended(GrantState::Expired))
        ));
        assert_eq!(live.calls.load(Ordering::SeqCst), 0);
        assert_eq!(state(&grants, grant.id).await, GrantState::Expired);
    }

    #[tokio::test]
    async fn a_tool_without_a_hook_never_runs() {
        let (grants, clock, _) = setup();
        let mut grant = conformance::grant(&clock, Duration::from_secs(600));
        grant.tool = "workspace_wipe".to_owned();
        grants.store().issue(&grant).await.unwrap();
        assert!(matches!(
            grants.begin(grant.id).await,
            Err(GrantError::Refused(_))
        ));
        assert_eq!(state(&grants, grant.id).await, GrantState::Failed);
    }

    #[tokio::test]
    async fn a_dead_worker_leaves_the_lease_to_run_out_and_the_next_attempt_rechecks() {
        let (grants, clock, live) = setup();
        let grant = issued(&grants, &clock).await;
        let first = grants.begin(grant.id).await.unwrap();
        assert_eq!(first.lease().attempt, 1);
        // The worker "dies": its attempt is never finished.
        std::mem::forget(first);
        assert!(matches!(
            grants.begin(grant.id).await,
            Err(GrantError::Busy { retry_after }) if retry_after == clock.now() + LEASE
        ));
        clock.advance(LEASE);
        // It had deleted the record before dying: the next attempt's re-check refuses.
        live.changed.store(true, Ordering::SeqCst);
        assert!(matches!(
            grants.begin(grant.id).await,
            Err(GrantError::Refused(_))
        ));
        assert_eq!(live.calls.load(Ordering::SeqCst), 2);
        assert_eq!(state(&grants, grant.id).await, GrantState::Failed);
    }

    #[tokio::test]
    async fn a_superseded_attempt_cannot_record_its_result() {
        let (grants, clock, _) = setup();
        let grant = issued(&grants, &clock).await;
        let stale = grants.begin(grant.id).await.unwrap();
        clock.advance(LEASE);
        let current = grants.begin(grant.id).await.unwrap();
        assert_eq!(current.lease().attempt, 2);
        assert!(matches!(
            stale.consumed().await,
            Err(GrantError::Superseded)
        ));
        current.consumed().await.unwrap();
        assert_eq!(state(&grants, grant.id).await, GrantState::Consumed);
    }

    #[tokio::test]
    async fn only_the_grants_principal_may_revoke_it_and_a_revoked_grant_never_runs() {
        let (grants, clock, _) = setup();
        let grant = issued(&grants, &clock).await;
        assert!(matches!(
            grants.revoke(grant.id, &Principal::new("bob")).await,
            Err(GrantError::NotOwner)
        ));
        assert_eq!(state(&grants, grant.id).await, GrantState::Granted);
        assert_eq!(
            grants
                .revoke(grant.id, &Principal::new("alice"))
                .await
                .unwrap(),
            Revoke::Revoked
        );
        assert_eq!(
            grants
                .revoke(grant.id, &Principal::new("alice"))
                .await
                .unwrap(),
            Revoke::Ended(GrantState::Revoked)
        );
        assert!(matches!(
            grants.begin(grant.id).await,
            Err(GrantError::Ended(GrantState::Revoked))
        ));
        assert!(matches!(
            grants
                .revoke(GrantId::random(), &Principal::new("alice"))
                .await,
            Err(GrantError::Unknown)
        ));
    }

    /// A store that is unreachable for its first `down` calls.
    #[derive(Debug)]
    struct Flaky {
        inner: MemoryGrantStore,
        down: AtomicUsize,
    }

    impl Flaky {
        fn up(&self) -> Result<(), GrantStoreError> {
            let left = self.down.load(Ordering::SeqCst);
            if left == 0 {
                return Ok(());
            }
            self.down.store(left - 1, Ordering::SeqCst);
            Err(GrantStoreError::Timeout)
        }
    }

    impl GrantStore for Flaky {
        fn issue(&self, grant: &Grant) -> BoxFuture<'_, Result<(), GrantStoreError>> {
            self.inner.issue(grant)
        }
        fn begin(
            &self,
            id: GrantId,
            lease: Duration,
        ) -> BoxFuture<'_, Result<Begin, GrantStoreError>> {
            match self.up() {
                Ok(()) => self.inner.begin(id, lease),
                Err(e) => Box::pin(std::future::ready(Err(e))),
            }
        }
        fn finish(
            &self,
            lease: Lease,
            outcome: Finish,
        ) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
            self.inner.finish(lease, outcome)
        }
        fn revoke(&self, id: GrantId) -> BoxFuture<'_, Result<Revoke, GrantStoreError>> {
            self.inner.revoke(id)
        }
        fn confirm(&self, lease: Lease) -> BoxFuture<'_, Result<bool, GrantStoreError>> {
            self.inner.confirm(lease)
        }
        fn get(&self, id: GrantId) -> BoxFuture<'_, Result<Option<Grant>, GrantStoreError>> {
            self.inner.get(id)
        }
    }

    #[tokio::test]
    async fn an_unreachable_store_at_begin_fails_closed_and_the_job_can_retry() {
        let clock = ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let store = Flaky {
            inner: MemoryGrantStore::with_clock(10, clock.clone()),
            down: AtomicUsize::new(2),
        };
        let live = Live::default();
        let grants = Grants::new(store).revalidate("notes_purge", live.clone());
        let grant = conformance::grant(&clock, Duration::from_secs(600));
        grants.store().issue(&grant).await.unwrap();
        let runs = AtomicUsize::new(0);
        let action = |_: Grant| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        };
        for _ in 0..2 {
            match grants.run(grant.id, action).await {
                Err(RunError::Grant(e)) => assert!(e.is_retryable(), "{e:?}"),
                other => panic!("expected a retryable refusal, got {other:?}"),
            }
        }
        assert_eq!(
            (
                runs.load(Ordering::SeqCst),
                live.calls.load(Ordering::SeqCst)
            ),
            (0, 0)
        );
        grants.run(grant.id, action).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failed_action_leaves_the_grant_to_its_lease_and_the_retry_rechecks() {
        let (grants, clock, live) = setup();
        let grant = issued(&grants, &clock).await;
        let failed = grants
            .run(grant.id, |_| async { Err::<(), _>("disk full") })
            .await;
        assert!(matches!(failed, Err(RunError::Action("disk full"))));
        assert!(matches!(
            state(&grants, grant.id).await,
            GrantState::Executing { attempt: 1, .. }
        ));
        clock.advance(LEASE);
        grants
            .run(grant.id, |_| async { Ok::<_, &str>(()) })
            .await
            .unwrap();
        assert_eq!(live.calls.load(Ordering::SeqCst), 2);
        assert_eq!(state(&grants, grant.id).await, GrantState::Consumed);
    }
}
