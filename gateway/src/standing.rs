//! Standing approvals bound to the offer they were granted under (#52, 10f): a grant counts only
//! while the same offer (a tool's `standing = { … }` entry, with the same terms) has been in
//! force since it was made. Removing the entry and restoring it, or changing its terms, ends
//! every grant made before; a user's "allow for an hour" never comes back after the operator
//! took the offer away.
//!
//! How: each offered tool of a route has one marker in the shared standing store, under a
//! principal no one signs in as: the digest of the offer's terms and the time that offer came
//! into force. A build of the route that restores an offer (absent or other terms in the
//! configuration it replaces), or finds no marker or another offer's, writes a new one, dated
//! now; a grant counts only if it was made under the marker's terms and not before its date. The
//! marker lives where the grants do, so every gateway sharing a Redis or PostgreSQL store judges
//! them alike, whichever of them saw the offer come back, and a restart that keeps the offer
//! keeps the grants. Grants that no longer count are not listed on the standing page either.
//! Revoking a route's grants when the offer is removed was the other way, and it needs a store
//! that lists every principal's grants, which the core's stores do not (Redis keeps them per
//! principal); nor would a gateway that was stopped, or kept the offer, while another removed it
//! see the removal.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mcp_confirm::store::standing::{Standing, StandingId, StandingKey, StandingStore, Use};
use mcp_confirm::store::{BoxFuture, Nonce, PrincipalKey, StoreError};
use sha2::{Digest, Sha256};

use crate::config::ToolEntry;

/// How long a marker is kept without being read again; read by a later call, it is kept longer.
/// Far above a standing approval's longest life (24 h).
pub const MARKER_LIFE: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A marker read with less than this left is written again with the same date.
const MARKER_REFRESH: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The scope every marker is kept under (with its own audience, principal and tool).
const MARKER_SCOPE: &str = "offer";

/// One route's standing store: the shared one, with each grant judged against the offer in
/// force. Clones share one state.
#[derive(Clone)]
pub struct OfferBound(Arc<Inner>);

struct Inner {
    store: Arc<dyn StandingStore>,
    /// The route's audience (its URL): the grants it judges.
    resource: String,
    /// The offers of this build of the route, by tool.
    offers: BTreeMap<String, Offer>,
    /// When this build was made: an offer it restores is in force from then on.
    built_at: SystemTime,
}

struct Offer {
    /// The digest of its terms.
    terms: String,
    /// The offer came back (or changed) with this build: its marker is written anew.
    renew: bool,
    /// Made the one in force ([`OfferBound::prepare`]), once per build.
    ready: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for OfferBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferBound")
            .field("resource", &self.0.resource)
            .field("offers", &self.0.offers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl OfferBound {
    /// The standing store of the route `resource` under the operator's `entries`, over `store`.
    /// On a `reload`, `previous` is the same route's in the configuration this one replaces
    /// (none if it had no such route): an offer it lacked, or had with other terms, starts anew.
    pub fn new(
        store: Arc<dyn StandingStore>,
        resource: &str,
        entries: &BTreeMap<String, ToolEntry>,
        reload: bool,
        previous: Option<&OfferBound>,
    ) -> Self {
        let offers = entries
            .iter()
            .filter_map(|(tool, entry)| {
                let standing = entry.standing.as_ref()?;
                let terms = terms_digest(tool, standing);
                let before = previous.and_then(|p| p.0.offers.get(tool));
                let renew = reload && before.map(|o| o.terms.as_str()) != Some(terms.as_str());
                Some((
                    tool.clone(),
                    Offer {
                        terms,
                        renew,
                        ready: tokio::sync::OnceCell::new(),
                    },
                ))
            })
            .collect();
        Self(Arc::new(Inner {
            store,
            resource: resource.to_owned(),
            offers,
            built_at: SystemTime::now(),
        }))
    }

    /// Puts this build's offers in force in the shared store now, when the configuration is in
    /// force (not when it is only built: a refused reload must change nothing), so that other
    /// gateways sharing the store see an offer restored here before this one serves a call of
    /// it. Its own calls wait for it in any case.
    pub fn start_preparing(&self) {
        if self.0.offers.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let offers = self.clone();
        runtime.spawn(async move {
            if let Err(e) = offers.prepare().await {
                tracing::warn!(route = %offers.0.resource, error = %e,
                    "the standing offers could not be put in force yet: the next call tries again");
            }
        });
    }

    /// Makes each offer of this build the one in force, once per build, before any grant is
    /// judged or made under it: a marker is written, dated now, for an offer that the store has
    /// no marker of (or another offer's: the configuration being built is the newest this
    /// gateway knows), or that came back (or changed) with this build, unless another gateway
    /// marked it since this build was made. A marker of the same offer is kept otherwise, and
    /// with it the grants made under it (a restart keeps them).
    async fn prepare(&self) -> Result<(), StoreError> {
        for (tool, offer) in &self.0.offers {
            offer
                .ready
                .get_or_try_init(|| async {
                    let kept = self.0.store.find(self.marker_key(tool)).await?;
                    let now = SystemTime::now();
                    let in_force = kept.is_some_and(|marker| {
                        !marker.revoked
                            && now < marker.expires_at
                            && marker.subject == offer.terms
                            && (!offer.renew || marker.granted_at >= self.0.built_at)
                    });
                    if !in_force {
                        self.write_marker(tool, &offer.terms, now).await?;
                        tracing::info!(route = %self.0.resource, tool,
                            "a standing offer came into force: standing approvals granted \
                             before it do not count");
                    }
                    Ok::<(), StoreError>(())
                })
                .await?;
        }
        Ok(())
    }

    /// Since when the offer of `tool` in force is this build's: `None` if this build offers
    /// nothing for it, or another gateway sharing the store offers other terms.
    async fn since(&self, tool: &str) -> Result<Option<SystemTime>, StoreError> {
        let Some(offer) = self.0.offers.get(tool) else {
            return Ok(None);
        };
        let now = SystemTime::now();
        let marker = self.0.store.find(self.marker_key(tool)).await?;
        match marker {
            Some(marker) if !marker.revoked && now < marker.expires_at => {
                if marker.subject != offer.terms {
                    tracing::warn!(route = %self.0.resource, tool,
                        "another gateway sharing the store offers other standing terms for this \
                         tool: no standing approval of it counts here until the files agree");
                    return Ok(None);
                }
                let left = marker.expires_at.duration_since(now).unwrap_or_default();
                if left < MARKER_REFRESH {
                    // Best effort: the next read tries again.
                    if let Err(e) = self
                        .write_marker(tool, &offer.terms, marker.granted_at)
                        .await
                    {
                        tracing::warn!(route = %self.0.resource, tool, error = %e,
                            "a standing offer's marker could not be kept longer");
                    }
                }
                Ok(Some(marker.granted_at))
            }
            // Never written, or forgotten: the offer starts now, and what was granted before it
            // does not count.
            _ => self.write_marker(tool, &offer.terms, now).await.map(Some),
        }
    }

    /// Whether `standing` counts under the offers in force. Another route's is not this one's
    /// to judge.
    async fn counts(&self, standing: &Standing) -> Result<bool, StoreError> {
        if standing.audience != self.0.resource {
            return Ok(true);
        }
        self.prepare().await?;
        Ok(self
            .since(&standing.tool)
            .await?
            .is_some_and(|since| standing.granted_at >= since))
    }

    fn marker_key(&self, tool: &str) -> StandingKey {
        StandingKey::new(
            &self.marker_audience(),
            self.marker_principal(tool),
            tool,
            MARKER_SCOPE,
        )
    }

    /// Markers are kept apart from every route's grants: their own audience (so no listing or
    /// gauge of the route's counts them) and a principal no one signs in as.
    fn marker_audience(&self) -> String {
        format!("{}#mcp-confirm-gateway/standing-offer", self.0.resource)
    }

    fn marker_principal(&self, tool: &str) -> PrincipalKey {
        let mut hash = Sha256::new();
        hash.update(b"mcp-confirm-gateway/standing-offer/v1\0");
        for part in [self.0.resource.as_bytes(), tool.as_bytes()] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&hash.finalize()[..16]);
        PrincipalKey::from_bytes(key)
    }

    /// Writes the marker of `tool`'s offer (`terms`), in force since `since`; `since` back.
    async fn write_marker(
        &self,
        tool: &str,
        terms: &str,
        since: SystemTime,
    ) -> Result<SystemTime, StoreError> {
        let marker = Standing::new(
            &self.marker_audience(),
            self.marker_principal(tool),
            terms,
            tool,
            MARKER_SCOPE,
            since,
            SystemTime::now() + MARKER_LIFE,
            1,
        );
        self.0.store.grant(&marker).await?;
        Ok(since)
    }
}

/// The digest of an offer's terms: the tool, the scope's pointer, how long and how many uses.
fn terms_digest(tool: &str, standing: &crate::config::Standing) -> String {
    let mut hash = Sha256::new();
    hash.update(b"mcp-confirm-gateway/standing-terms/v1\0");
    for part in [tool.as_bytes(), standing.scope.as_bytes()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.update(standing.up_to.as_millis().to_be_bytes());
    hash.update(standing.uses.to_be_bytes());
    hex::encode(&hash.finalize()[..16])
}

impl StandingStore for OfferBound {
    fn grant(&self, standing: &Standing) -> BoxFuture<'_, Result<(), StoreError>> {
        let standing = standing.clone();
        Box::pin(async move {
            if !self.counts(&standing).await? {
                return Err(StoreError::Backend(
                    "the standing offer in force is not the one this approval was offered under"
                        .into(),
                ));
            }
            self.0.store.grant(&standing).await
        })
    }

    fn find(&self, key: StandingKey) -> BoxFuture<'_, Result<Option<Standing>, StoreError>> {
        Box::pin(async move {
            // Before the first grant of a build is made, its markers are.
            self.prepare().await?;
            match self.0.store.find(key).await? {
                Some(mut standing) if !self.counts(&standing).await? => {
                    // Ended: it covers nothing, and a grant issued under it does not begin.
                    standing.revoked = true;
                    Ok(Some(standing))
                }
                found => Ok(found),
            }
        })
    }

    fn use_one(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<Use, StoreError>> {
        self.0.store.use_one(key, id, ticket)
    }

    fn give_back(
        &self,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.0.store.give_back(key, id, ticket)
    }

    fn list(&self, principal: PrincipalKey) -> BoxFuture<'_, Result<Vec<Standing>, StoreError>> {
        Box::pin(async move {
            let mut counted = Vec::new();
            for standing in self.0.store.list(principal).await? {
                if self.counts(&standing).await? {
                    counted.push(standing);
                }
            }
            Ok(counted)
        })
    }

    fn revoke(
        &self,
        principal: PrincipalKey,
        id: Option<StandingId>,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.0.store.revoke(principal, id)
    }

    fn live<'a>(&'a self, audience: &'a str) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        self.0.store.live(audience)
    }
}
