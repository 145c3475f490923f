//! The browser channel's port: everything a page does with the layer (who the visitor is,
//! reading an approval and its siblings, deciding, reporting, the narrowable arguments, the
//! forms' anti-forgery tags, passkeys, standing approvals) goes through an [`ApprovalDesk`].
//!
//! Why a port: the pages are a channel of the decision path, not part of it. Through the desk
//! they see the approvals of this deployment only, decide them through the store's one atomic
//! `decide` (which applies the record's rule), and report what they did into the layer's one
//! event stream; they never read the layer's configuration, its keys or its replay store.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::approvers::{PasskeyVerifier, routes_of};
use crate::audit::event::{self, DecisionEvent, step_refused};
use crate::config::Config;
use crate::narrow::Narrowing;
use crate::principal::{Principal, PrincipalExtractor};
use crate::store::StoreError;
use crate::store::approval::{Approval, ApprovalId, ApprovalStore, Decision};
use crate::store::batch::BatchDecision;

/// The shortest anti-forgery tag [`ApprovalDesk::form_tag_matches`] accepts, in bytes.
pub const MIN_FORM_TAG_BYTES: usize = 16;

/// The pages' way into one layer: get it from
/// [`ConfirmLayer::approval_desk`](crate::ConfirmLayer::approval_desk). Clones are cheap and
/// share the layer's stores and keys.
#[derive(Clone)]
pub struct ApprovalDesk {
    config: Arc<Config>,
}

impl fmt::Debug for ApprovalDesk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalDesk")
            .field("audience", &self.config.audience)
            .field("approval_url", &self.config.approval_url)
            .finish_non_exhaustive()
    }
}

impl ApprovalDesk {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Self { config }
    }

    /// The deployment this layer serves: an approval of another (sharing the store) is none of
    /// its pages' business.
    #[must_use]
    pub fn audience(&self) -> &str {
        &self.config.audience
    }

    /// Where the approval page is mounted (its origin is the pages' own), if configured.
    #[must_use]
    pub fn approval_url(&self) -> Option<&str> {
        self.config.approval_url.as_deref()
    }

    /// Who a visitor is: the layer's principal extractor, never its local principal (which would
    /// let anyone who reaches a page act as that user).
    #[must_use]
    pub fn principals(&self) -> &dyn PrincipalExtractor {
        &*self.config.principal
    }

    /// The layer's clock.
    #[must_use]
    pub fn now(&self) -> SystemTime {
        self.config.sealer.now()
    }

    /// How far apart the layer allows its instances' clocks to be.
    #[must_use]
    pub fn skew(&self) -> Duration {
        self.config.sealer.skew()
    }

    /// The anti-forgery tag of a page form over `data`, under the ring's newest key and the
    /// forms' own derived key (nothing else is signed with it).
    #[must_use]
    pub fn form_tag(&self, data: &[u8]) -> [u8; 32] {
        self.config.sealer.keys().form_tag(data)
    }

    /// Whether `tag` begins a [`form_tag`](Self::form_tag) over `data` under any key of the
    /// ring, compared in constant time. A tag shorter than [`MIN_FORM_TAG_BYTES`] never
    /// matches: an empty one would begin every tag.
    #[must_use]
    pub fn form_tag_matches(&self, data: &[u8], tag: &[u8]) -> bool {
        tag.len() >= MIN_FORM_TAG_BYTES && self.config.sealer.keys().form_tag_matches(data, tag)
    }

    /// The approval store, if the layer has browser-approved tools.
    #[must_use]
    pub fn approvals(&self) -> Option<&dyn ApprovalStore> {
        self.config.approvals.as_deref()
    }

    /// Approval `id` if it is this deployment's; one of another deployment is `None` (its
    /// reading by `principal` goes to the audit log), and so is any without an approval store.
    ///
    /// # Errors
    /// The store's, if it cannot be read.
    pub async fn approval(
        &self,
        id: ApprovalId,
        principal: &Principal,
    ) -> Result<Option<Approval>, StoreError> {
        let Some(store) = self.approvals() else {
            return Ok(None);
        };
        match store.approval(id).await? {
            Some(approval) if approval.audience == self.config.audience => Ok(Some(approval)),
            Some(approval) => {
                step_refused(
                    &approval.tool,
                    Some(principal),
                    "approval of another audience",
                );
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Whether `principal` is the one who asked for `approval`: their keyed digest under any key
    /// of the ring, or their subject as recorded. Either suffices, so a page whose ring lacks the
    /// key the approval was made under still knows the caller (and refuses them under four
    /// eyes).
    #[must_use]
    pub fn is_caller(&self, approval: &Approval, principal: &Principal) -> bool {
        let by_digest = self
            .config
            .sealer
            .keys()
            .principal_matches_any(&approval.principal, principal.subject());
        by_digest | (approval.subject == principal.subject())
    }

    /// Whether `principal` may decide `approval`: its rule admits them (the caller only where
    /// the rule lets the caller decide).
    #[must_use]
    pub fn admits(&self, approval: &Approval, principal: &Principal) -> bool {
        let caller = self.is_caller(approval, principal);
        approval
            .approvers
            .admits(principal.subject(), principal.roles(), caller)
    }

    /// The approvals `principal` may decide now, newest first, at most `limit`: the store's
    /// candidates for their routes (their subject and roles), kept only where the rule admits
    /// them (the caller of a four-eyes approval is not admitted) and they have not approved
    /// already. None without an approval store.
    ///
    /// # Errors
    /// The store's, if it cannot be read.
    pub async fn inbox(
        &self,
        principal: &Principal,
        limit: usize,
    ) -> Result<Vec<Approval>, StoreError> {
        let Some(store) = self.approvals() else {
            return Ok(Vec::new());
        };
        let routes = routes_of(principal.subject(), principal.roles());
        let found = store.inbox(&self.config.audience, &routes, limit).await?;
        Ok(found
            .into_iter()
            .filter(|a| {
                self.admits(a, principal)
                    && !a
                        .endorsements
                        .iter()
                        .any(|e| e.subject == principal.subject())
            })
            .collect())
    }

    /// Whether the client already spent the confirmation (declined, or a retry claimed it): a
    /// page then has nothing left to decide. A store that cannot answer counts as answered.
    pub async fn answered_by_client(&self, approval: &Approval) -> bool {
        self.config
            .store
            .is_used(approval.nonce, approval.principal)
            .await
            .unwrap_or(true)
    }

    /// The arguments of `tool` an approver may narrow, and how, as configured now (empty for a
    /// tool the layer no longer confirms).
    #[must_use]
    pub fn narrowing(&self, tool: &str) -> &[(String, Narrowing)] {
        self.config
            .tools
            .get(tool)
            .map_or(&[], |guarded| guarded.policy.narrowing.as_slice())
    }

    /// Reports a page's decision of `approval` by `principal` (`last`: it settled the approval)
    /// into the layer's events: `tracing`, the metrics, the decision log (with a digest of all
    /// the page showed).
    pub fn report_decided(
        &self,
        approval: &Approval,
        principal: &Principal,
        decision: &Decision,
        last: bool,
    ) {
        let shown = self.config.logging().then(|| {
            event::shown_digest(
                approval
                    .choices
                    .iter()
                    .map(|c| (c.id.as_str(), c.version.as_deref(), Some(c.label.as_str()))),
                approval.standing.as_deref(),
            )
        });
        self.config.report(DecisionEvent::ApprovalDecided {
            approval,
            principal,
            decision,
            last,
            shown,
        });
    }

    /// Reports a page step refused to `principal` on `tool`'s approval (someone the rule does
    /// not admit, a decision made twice, a bad passkey): `reason` goes to `tracing` only.
    pub fn refused(&self, tool: &str, principal: &Principal, reason: &str) {
        step_refused(tool, Some(principal), reason);
    }

    /// Reports a page request refused before it reached any approval (another origin, an
    /// anti-forgery token that does not verify, a repeated field), on page `channel`.
    pub fn page_refused(&self, channel: &'static str, principal: &Principal, reason: &str) {
        DecisionEvent::PageRefused {
            channel,
            principal,
            reason,
        }
        .trace();
    }

    /// Reports a batch decision kept by `principal`, before it is applied to its members.
    pub fn report_batch(&self, batch: &BatchDecision, principal: &Principal) {
        self.config
            .report(DecisionEvent::BatchDecided { batch, principal });
    }

    /// A tag over `data` for a page's own sealed value (a passkey ceremony's state, say), under
    /// the ring's newest key and a key derived for the pages alone; `domain` keeps each use's
    /// tags apart.
    #[must_use]
    pub fn page_tag(&self, domain: &[u8], data: &[u8]) -> [u8; 32] {
        self.config.sealer.keys().page_tag(domain, data)
    }

    /// Whether `tag` is a whole [`page_tag`](Self::page_tag) of `data` in `domain` under any
    /// key of the ring, compared in constant time.
    #[must_use]
    pub fn page_tag_matches(&self, domain: &[u8], data: &[u8], tag: &[u8]) -> bool {
        self.config
            .sealer
            .keys()
            .page_tag_matches(domain, data, tag)
    }

    /// What the layer was given to verify approvers' passkeys with
    /// ([`ConfirmLayerBuilder::passkeys`](crate::ConfirmLayerBuilder::passkeys)), if anything:
    /// a page downcasts it to the verifier it knows.
    #[must_use]
    pub fn passkeys(&self) -> Option<&dyn PasskeyVerifier> {
        self.config.passkeys.as_deref()
    }

    /// Whether any tool's rule requires approvals made with a passkey
    /// ([`Approvers::with_passkey`](crate::approval::Approvers::with_passkey)): a page that
    /// cannot verify passkeys can then approve none of them.
    #[must_use]
    pub fn needs_passkeys(&self) -> bool {
        self.config
            .tools
            .values()
            .any(|tool| tool.policy.approvers.needs_passkey())
    }
}
