//! The standing approvals a layer grants, for the people who hold them: list a principal's live
//! ones and revoke one or all, on every instance sharing the store (a revocation stops the next
//! use everywhere).
//!
//! - [`StandingApprovals`]: the library API (list, revoke);
//! - `pages/standing.rs` (feature `pages`): the `StandingPage` tower service where a person does the same
//!   in her browser.

use std::fmt;
use std::sync::Arc;

use crate::config::Config;
use crate::principal::Principal;
use crate::store::StoreError;
use crate::store::standing::{Standing, StandingId, StandingStore};

/// A handle on the standing approvals of one layer's deployment
/// ([`ConfirmLayer::standing_approvals`](crate::ConfirmLayer::standing_approvals)). Clones are
/// cheap and share the layer's store and keys.
#[derive(Clone)]
pub struct StandingApprovals {
    config: Arc<Config>,
    store: Arc<dyn StandingStore>,
}

impl fmt::Debug for StandingApprovals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandingApprovals")
            .field("audience", &self.config.audience)
            .finish_non_exhaustive()
    }
}

impl StandingApprovals {
    /// The port of the layer these approvals are granted by, for pages (`mcp-confirm-pages`'s
    /// standing-approvals page lists and revokes through it).
    #[must_use]
    pub fn approval_desk(&self) -> crate::approval::ApprovalDesk {
        crate::approval::ApprovalDesk::new(Arc::clone(&self.config))
    }

    pub(crate) fn new(config: Arc<Config>) -> Option<Self> {
        let store = Arc::clone(config.standing.as_ref()?);
        Some(Self { config, store })
    }

    /// `principal`'s live standing approvals in this deployment, soonest expiry first: those
    /// granted under every key of the ring (during a key rotation, instances that sign with the
    /// old key keep granting under it).
    ///
    /// # Errors
    /// The store's, if it cannot be read.
    pub async fn list(&self, principal: &Principal) -> Result<Vec<Standing>, StoreError> {
        let mut live = Vec::new();
        for key in self.config.principal_keys(principal) {
            live.extend(
                self.store
                    .list(key)
                    .await?
                    .into_iter()
                    .filter(|s| s.audience == self.config.audience),
            );
        }
        // A ring may hold one secret under two ids: the same record is then listed once.
        live.sort_by_key(|s| (s.expires_at, s.id));
        live.dedup_by_key(|s| s.id);
        Ok(live)
    }

    /// Revokes `principal`'s standing approval `id`, or all of them in this deployment (`None`),
    /// and answers how many were live. Another principal's id revokes nothing.
    ///
    /// # Errors
    /// The store's, if it cannot be reached; nothing is then known to be revoked.
    pub async fn revoke(
        &self,
        principal: &Principal,
        id: Option<StandingId>,
    ) -> Result<usize, StoreError> {
        let mut revoked = 0;
        for standing in self.list(principal).await? {
            if id.is_none_or(|id| id == standing.id) {
                let done = self
                    .store
                    .revoke(standing.principal, Some(standing.id))
                    .await?;
                if done > 0 {
                    self.config
                        .report(crate::audit::event::DecisionEvent::StandingRevoked {
                            tool: &standing.tool,
                            principal,
                            id: &standing.id,
                        });
                }
                revoked += done;
            }
        }
        Ok(revoked)
    }
}
