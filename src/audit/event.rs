//! Every decision as one typed event. The `tracing` output and the decision log's entry are
//! both written from a [`DecisionEvent`]: a name is spelled in one place, and a new decision
//! is a new variant the compiler makes each output handle.

use std::borrow::Cow;
use std::fmt::Display;
use std::time::SystemTime;

use super::sink::LogEntry;
use crate::kernel::{Nonce, PrincipalKey, hex};
use crate::principal::Principal;
use crate::store::approval::{Approval, Decision};
use crate::store::batch::BatchDecision;
use crate::store::standing::StandingId;

/// What the events of a call that runs name: who and what, the digest of the arguments it runs
/// with, the record chosen and its version, and the grant or standing approval it runs under.
pub(crate) struct Runs<'a> {
    pub(crate) tool: &'a str,
    pub(crate) principal: &'a Principal,
    pub(crate) nonce: &'a Nonce,
    pub(crate) arguments: &'a [u8; 32],
    pub(crate) chosen: Option<&'a str>,
    pub(crate) version: Option<&'a str>,
    /// Where an approver narrowed the call: the digest of the arguments as asked (`arguments`
    /// is then the narrowed one).
    pub(crate) original: Option<&'a [u8; 32]>,
    /// The grant id's first bytes (hex).
    pub(crate) grant: Option<String>,
    pub(crate) standing: Option<&'a StandingId>,
}

/// What a grant's events name: the grant module describes its grants in these terms. The
/// arguments are those the work acts on (the chosen id written in); only a log entry digests
/// them.
pub(crate) struct GrantFacts<'a> {
    /// The grant id's first bytes (hex).
    pub(crate) id: String,
    pub(crate) audience: &'a str,
    pub(crate) principal: &'a PrincipalKey,
    pub(crate) subject: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) arguments: &'a serde_json::Value,
    pub(crate) chosen: Option<&'a str>,
    pub(crate) version: Option<&'a str>,
    pub(crate) nonce: &'a Nonce,
    pub(crate) standing: Option<&'a StandingId>,
}

/// The `tracing` target of every audit event.
pub const TARGET: &str = "mcp_confirm::audit";

/// One decision, or one step of one, as operators see it and the decision log keeps it.
///
/// Events carry the tool, the principal, the first bytes of the nonce (to correlate rounds) and
/// the real reason of a refusal, which the wire never shows. They never carry keys, tokens,
/// argument values or the form's content.
pub(crate) enum DecisionEvent<'a> {
    /// A first call was asked: a state was sealed for it.
    Challenged {
        tool: &'a str,
        principal: &'a Principal,
        nonce: &'a Nonce,
        /// The digest of the arguments asked about.
        arguments: [u8; 32],
        candidates: usize,
        /// A digest of what the user is shown (computed only when a log keeps it).
        shown: Option<[u8; 32]>,
    },
    /// An acceptance that lets the call run.
    Accepted { call: Runs<'a> },
    /// A call that runs under a standing approval, `left` uses left.
    StandingUsed { call: Runs<'a>, left: u32 },
    /// The call went on to the inner service.
    Forwarded {
        tool: &'a str,
        principal: &'a Principal,
        nonce: &'a Nonce,
    },
    /// The user declined (or accepted without confirming: `unconfirmed`).
    Declined {
        tool: &'a str,
        principal: &'a Principal,
        nonce: &'a Nonce,
        unconfirmed: bool,
    },
    /// The user cancelled; nothing was spent.
    Cancelled {
        tool: &'a str,
        principal: &'a Principal,
        nonce: &'a Nonce,
    },
    /// A call, or a step of one, was refused. `class` is what the wire said (for refusals
    /// that end the call).
    Refused {
        tool: &'a str,
        principal: Option<&'a Principal>,
        nonce: Option<&'a Nonce>,
        class: Option<Cow<'a, str>>,
        reason: Cow<'a, str>,
    },
    /// A state already used (or in a call) came back.
    ReplayBlocked {
        tool: &'a str,
        principal: Option<&'a Principal>,
        nonce: &'a Nonce,
        class: Cow<'a, str>,
        /// `used`, `in_flight`, `consumed`.
        state: &'a str,
    },
    /// An accepted call failed its revalidation: nothing runs.
    Revoked {
        tool: &'a str,
        principal: &'a Principal,
        nonce: &'a Nonce,
        reason: &'a str,
    },
    /// A page (`channel`: `approval_page`, `standing_page`, …) refused a post before reading
    /// what it names.
    PageRefused {
        channel: &'static str,
        principal: &'a Principal,
        reason: &'a str,
    },
    /// A guarded handler refused to run: no confirmation (or waiver) of the layer came with
    /// the call. An error: the layer is missing, misconfigured or bypassed.
    #[cfg_attr(not(feature = "rmcp"), allow(dead_code))]
    Unguarded { tool: &'a str, reason: &'a str },
    /// A call let through without asking, on purpose (exempt, or a false condition).
    Waived {
        tool: &'a str,
        principal: Option<&'a Principal>,
        arguments: Option<[u8; 32]>,
        reason: &'a str,
    },
    /// A `tools/list` answer showed a tool that needs a confirmation the layer has no policy
    /// or exemption for: its calls are refused from now on.
    Undeclared {
        tool: &'a str,
        declared: Option<&'a str>,
    },
    /// A `tools/list` answer the layer could not read: every tool without a policy or
    /// exemption is refused from now on.
    ListingUnread { why: &'a str },
    /// Two layers confirm one tool on one route.
    StackedLayers { tool: &'a str },
    /// An accepted confirmation granted a standing approval.
    StandingGranted {
        tool: &'a str,
        principal: &'a Principal,
        nonce: &'a Nonce,
        id: &'a StandingId,
        secs: u64,
        uses: u32,
    },
    /// A standing approval covered the call's scope but could not be used (`outcome`:
    /// exhausted, expired, revoked, unknown), or its last use was spent.
    StandingEnded {
        tool: &'a str,
        principal: &'a Principal,
        id: &'a StandingId,
        outcome: &'a str,
    },
    /// A use a refused call had reserved was given back (`given`), or could not be: then it
    /// stays spent.
    StandingGivenBack {
        id: &'a StandingId,
        ticket: &'a Nonce,
        given: bool,
    },
    /// Its holder revoked a standing approval.
    StandingRevoked {
        tool: &'a str,
        principal: &'a Principal,
        id: &'a StandingId,
    },
    /// A forwarded call's response ended: its nonce is consumed (or the claim was lost).
    Completed { nonce: &'a Nonce, consumed: bool },
    /// A `claimed_by_handler` call ran and its handler did not claim: the layer burned the
    /// nonce after the call. A wiring error to fix.
    HandlerDidNotClaim { tool: &'a str, nonce: &'a Nonce },
    /// The check that a handler claimed its nonce could not reach the store.
    HandlerClaimUnchecked {
        tool: &'a str,
        nonce: &'a Nonce,
        error: &'a (dyn Display + Sync),
    },
    /// A queued tool's grant was stored.
    GrantIssued { grant: GrantFacts<'a> },
    /// An attempt began a grant's work (recorded durably before the work runs).
    GrantBegun { grant: GrantFacts<'a>, attempt: u32 },
    /// A grant's work finished.
    GrantConsumed { grant: GrantFacts<'a>, attempt: u32 },
    /// A grant's work was refused or failed.
    GrantFailed {
        grant: GrantFacts<'a>,
        reason: &'a str,
    },
    /// A grant was revoked.
    GrantRevoked {
        grant: GrantFacts<'a>,
        reason: Option<&'a str>,
    },
    /// A grant ran out; found by a `begin` that may no longer read it (`grant: None`).
    GrantExpired {
        id: String,
        grant: Option<GrantFacts<'a>>,
    },
    /// A grant's end could not be written; it stays begun until its lease runs out.
    GrantFinishLost {
        id: String,
        reason: &'a (dyn Display + Sync),
    },
    /// A person decided an approval on the page (`last`: the decision; otherwise one of the
    /// endorsements its rule requires).
    ApprovalDecided {
        approval: &'a Approval,
        principal: &'a Principal,
        decision: &'a Decision,
        last: bool,
        /// A digest of what the page showed (computed only when a log keeps it).
        shown: Option<[u8; 32]>,
    },
    /// A person decided a batch of approvals on the page, in one decision over the exact set
    /// shown (each member's own decision follows as an `ApprovalDecided` carrying the set).
    BatchDecided {
        batch: &'a BatchDecision,
        principal: &'a Principal,
    },
    /// The decision log is down and its policy is to fail open: `what_runs` unrecorded.
    LogBypassed { what_runs: &'static str },
}

/// What the log keeps of a principal: its keyed digest, and its subject.
pub(crate) type KeyOf<'k> = &'k dyn Fn(&Principal) -> PrincipalKey;

impl DecisionEvent<'_> {
    /// The event's one name: the `decision` field of its `tracing` event and the `event` of
    /// its log entry.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Challenged { .. } => "challenged",
            Self::Accepted { .. } => "accepted",
            Self::StandingUsed { .. } => "standing_used",
            Self::Forwarded { .. } => "forwarded",
            Self::Declined { .. } => "declined",
            Self::Cancelled { .. } => "cancelled",
            Self::Refused { .. } | Self::Revoked { .. } | Self::PageRefused { .. } => "refused",
            Self::StackedLayers { .. } => "refused",
            Self::ReplayBlocked { .. } => "replay_blocked",
            Self::Unguarded { .. } => "unguarded",
            Self::Waived { .. } => "waived",
            Self::Undeclared { .. } => "undeclared",
            Self::ListingUnread { .. } => "listing_unread",
            Self::StandingGranted { .. } => "standing_granted",
            Self::StandingEnded { .. } => "standing_ended",
            Self::StandingGivenBack { .. } => "standing_given_back",
            Self::StandingRevoked { .. } => "standing_revoked",
            Self::Completed { .. } => "completed",
            Self::HandlerDidNotClaim { .. } => "handler_did_not_claim",
            Self::HandlerClaimUnchecked { .. } => "handler_claim_unchecked",
            Self::GrantIssued { .. } => "grant_issued",
            Self::GrantBegun { .. } => "grant_begun",
            Self::GrantConsumed { .. } => "grant_consumed",
            Self::GrantFailed { .. } => "grant_failed",
            Self::GrantRevoked { .. } => "grant_revoked",
            Self::GrantExpired { .. } => "grant_expired",
            Self::GrantFinishLost { .. } => "grant_finish_lost",
            Self::ApprovalDecided {
                decision: Decision::Declined,
                ..
            } => "approval_declined",
            Self::ApprovalDecided { last: true, .. } => "approval_approved",
            Self::ApprovalDecided { .. } => "approval_endorsed",
            Self::BatchDecided { .. } => "batch_decided",
            Self::LogBypassed { .. } => "log_bypassed",
        }
    }

    /// Writes the event to `tracing`, under [`TARGET`], attached to no span: it names the
    /// principal and a nonce's first bytes, which spans exported elsewhere must not carry
    /// ([`observe`](crate::observe) writes the span's own event).
    #[allow(clippy::too_many_lines)] // one arm per event, each one statement
    pub(crate) fn trace(&self) {
        let decision = self.name();
        match *self {
            Self::Challenged {
                tool,
                principal,
                nonce,
                candidates,
                ..
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                nonce = %nonce.short(), candidates)
            }
            Self::Accepted { call: ref c } => {
                tracing::info!(target: TARGET, parent: None, decision, tool = c.tool,
                    principal = c.principal.subject(), nonce = %c.nonce.short(),
                    chosen = c.chosen.unwrap_or("-"));
            }
            Self::StandingUsed { call: ref c, left } => {
                tracing::info!(target: TARGET, parent: None, decision, tool = c.tool,
                    principal = c.principal.subject(),
                    standing = %c.standing.map(StandingId::to_hex).unwrap_or_default(),
                    arguments = %hex(&c.arguments[..8]), left);
            }
            Self::Forwarded {
                tool,
                principal,
                nonce,
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                nonce = %nonce.short())
            }
            Self::Declined {
                tool,
                principal,
                nonce,
                unconfirmed,
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                nonce = %nonce.short(), unconfirmed)
            }
            Self::Cancelled {
                tool,
                principal,
                nonce,
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                nonce = %nonce.short())
            }
            Self::Refused {
                tool,
                principal,
                nonce,
                ref class,
                ref reason,
            } => {
                tracing::warn!(target: TARGET, parent: None, decision, tool, principal = subject(principal),
                nonce = %nonce.map_or_else(|| "-".to_owned(), Nonce::short),
                class = class.as_deref().unwrap_or("-"), reason = &**reason)
            }
            Self::ReplayBlocked {
                tool,
                principal,
                nonce,
                ref class,
                state,
            } => {
                tracing::warn!(target: TARGET, parent: None, decision, tool, principal = subject(principal),
                nonce = %nonce.short(), class = &**class, state)
            }
            Self::Revoked {
                tool,
                principal,
                nonce,
                reason,
            } => {
                tracing::warn!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                nonce = %nonce.short(), class = "revoked",
                reason = %format_args!("revalidation: {reason}"))
            }
            Self::PageRefused {
                channel,
                principal,
                reason,
            } => tracing::warn!(target: TARGET, parent: None, decision, channel,
                principal = principal.subject(), reason),
            Self::Unguarded { tool, reason } => {
                tracing::error!(target: TARGET, parent: None, decision, tool, reason);
            }
            Self::Waived {
                tool,
                principal,
                reason,
                ..
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = subject(principal),
                reason)
            }
            Self::Undeclared { tool, declared } => {
                tracing::error!(target: TARGET, parent: None, decision, tool, declared = declared.unwrap_or("-"),
                    reason = "listed as needing a confirmation the layer was not configured with; its calls are refused: give it a policy or exempt it");
            }
            Self::ListingUnread { why } => {
                tracing::error!(target: TARGET, parent: None, decision, reason = why,
                effect = "every tool without a policy or exemption is refused from now on")
            }
            Self::StackedLayers { tool } => {
                tracing::error!(target: TARGET, parent: None, decision, tool,
                reason = "stacked_layers",
                "two ConfirmLayers confirm this tool on one route: build one layer with every policy (one key ring, one audience), and remove the other")
            }
            Self::StandingGranted {
                tool,
                principal,
                id,
                secs,
                uses,
                ..
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                standing = %id.to_hex(), secs, uses)
            }
            Self::StandingEnded {
                tool,
                principal,
                id,
                outcome,
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                standing = %id.to_hex(), outcome)
            }
            Self::StandingGivenBack {
                id,
                ticket,
                given: true,
            } => tracing::info!(target: TARGET, parent: None, decision, standing = %id.to_hex(),
                ticket = %ticket.short()),
            Self::StandingGivenBack {
                id, ticket, given, ..
            } => tracing::warn!(target: TARGET, parent: None, decision, standing = %id.to_hex(),
                ticket = %ticket.short(), given,
                reason = "the reserved use could not be given back; it stays spent"),
            Self::StandingRevoked {
                tool,
                principal,
                id,
            } => {
                tracing::info!(target: TARGET, parent: None, decision, tool, principal = principal.subject(),
                standing = %id.to_hex())
            }
            Self::Completed {
                nonce,
                consumed: true,
            } => tracing::info!(target: TARGET, parent: None, decision, nonce = %nonce.short()),
            Self::Completed { nonce, consumed } => {
                tracing::warn!(target: TARGET, parent: None, decision, nonce = %nonce.short(), consumed,
                    reason = "claim no longer held; it stays unusable until it expires");
            }
            Self::HandlerDidNotClaim { tool, nonce } => {
                tracing::error!(target: TARGET, parent: None, decision, tool, nonce = %nonce.short(),
                    "the handler of a claimed_by_handler tool ran without claiming its confirmation; the layer burned it after the call");
            }
            Self::HandlerClaimUnchecked { tool, nonce, error } => {
                tracing::error!(target: TARGET, parent: None, decision, tool, nonce = %nonce.short(),
                    error = %error, "could not check that the handler claimed its confirmation");
            }
            Self::GrantIssued { ref grant } => {
                tracing::info!(target: TARGET, parent: None, decision,
                tool = grant.tool, principal = grant.subject, grant = %grant.id,
                nonce = %grant.nonce.short(), chosen = grant.chosen.unwrap_or("-"))
            }
            Self::GrantBegun { ref grant, attempt }
            | Self::GrantConsumed { ref grant, attempt } => {
                tracing::info!(target: TARGET, parent: None, decision, tool = grant.tool,
                    principal = grant.subject, grant = %grant.id,
                    nonce = %grant.nonce.short(), attempt);
            }
            Self::GrantFailed { ref grant, reason } => {
                tracing::warn!(target: TARGET, parent: None, decision,
                tool = grant.tool, principal = grant.subject, grant = %grant.id,
                nonce = %grant.nonce.short(), reason)
            }
            Self::GrantRevoked { ref grant, reason } => {
                tracing::info!(target: TARGET, parent: None, decision,
                tool = grant.tool, principal = grant.subject, grant = %grant.id,
                nonce = %grant.nonce.short(), reason = reason.unwrap_or("-"))
            }
            Self::GrantExpired { ref id, ref grant } => {
                tracing::info!(target: TARGET, parent: None, decision,
                grant = %id,
                nonce = %grant.as_ref().map_or_else(|| "-".to_owned(), |g| g.nonce.short()))
            }
            Self::GrantFinishLost { ref id, reason } => {
                tracing::warn!(target: TARGET, parent: None, decision, grant = %id, %reason);
            }
            Self::ApprovalDecided {
                approval,
                principal,
                decision: verdict,
                ..
            } => {
                let (chosen, standing) = match verdict {
                    Decision::Approved {
                        chosen, standing, ..
                    } => (chosen.as_str(), *standing),
                    Decision::Declined => ("-", false),
                };
                tracing::info!(target: TARGET, parent: None, decision, tool = approval.tool,
                    principal = principal.subject(), nonce = %approval.nonce.short(), chosen,
                    standing);
            }
            Self::BatchDecided { batch, principal } => {
                tracing::info!(target: TARGET, parent: None, decision,
                    principal = principal.subject(), set = %hex(&batch.set.as_bytes()[..8]),
                    members = batch.members.len(), approved = batch.approved(),
                    all_or_nothing = batch.all_or_nothing);
            }
            Self::LogBypassed { what_runs } => {
                tracing::error!(target: TARGET, parent: None, decision,
                "the decision log is down and its policy is to fail open: {what_runs} unrecorded")
            }
        }
    }

    /// The decision log's entry for this event at `at` in the deployment `audience`; `key`
    /// gives a principal's keyed digest (grant events carry their own, and need none). `None`: the event is for operators only (it decides
    /// nothing on its own, or it is about the layer's own configuration).
    pub(crate) fn entry(
        &self,
        at: SystemTime,
        audience: &str,
        key: Option<KeyOf<'_>>,
    ) -> Option<LogEntry> {
        // Allocates nothing for the events that are no record (the last arm below).
        let mut entry = LogEntry::new(self.name(), at);
        let who = |entry: &mut LogEntry, principal: &Principal| {
            entry.principal = key.map(|key| key(principal).to_hex());
            entry.subject = Some(principal.subject().to_owned());
        };
        match *self {
            Self::Challenged {
                tool,
                principal,
                nonce,
                arguments,
                shown,
                ..
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.arguments = Some(hex(&arguments));
                entry.shown = shown.map(|d| hex(&d));
                entry.nonce = Some(nonce.short());
            }
            Self::Accepted { call: ref c } | Self::StandingUsed { call: ref c, .. } => {
                entry.tool = Some(c.tool.to_owned());
                who(&mut entry, c.principal);
                entry.arguments = Some(hex(c.arguments));
                entry.original = c.original.map(|d| hex(d));
                entry.chosen = c.chosen.map(str::to_owned);
                entry.version = c.version.map(str::to_owned);
                entry.nonce = Some(c.nonce.short());
                entry.grant.clone_from(&c.grant);
                entry.standing = c.standing.map(short_id);
            }
            Self::Declined {
                tool,
                principal,
                nonce,
                unconfirmed,
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.nonce = Some(nonce.short());
                entry.reason = unconfirmed.then(|| "accepted without confirming".to_owned());
            }
            Self::Cancelled {
                tool,
                principal,
                nonce,
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.nonce = Some(nonce.short());
            }
            Self::Refused {
                tool,
                principal,
                nonce,
                ref class,
                ref reason,
            } => {
                entry.tool = Some(tool.to_owned());
                if let Some(principal) = principal {
                    who(&mut entry, principal);
                }
                entry.nonce = nonce.map(Nonce::short);
                entry.class = class.as_deref().map(str::to_owned);
                entry.reason = Some(reason.to_string());
            }
            Self::ReplayBlocked {
                tool,
                principal,
                nonce,
                ref class,
                state,
            } => {
                entry.tool = Some(tool.to_owned());
                if let Some(principal) = principal {
                    who(&mut entry, principal);
                }
                entry.nonce = Some(nonce.short());
                entry.class = Some(class.to_string());
                entry.reason = Some(state.to_owned());
            }
            Self::Waived {
                tool,
                principal,
                arguments,
                reason,
            } => {
                entry.tool = Some(tool.to_owned());
                if let Some(principal) = principal {
                    who(&mut entry, principal);
                }
                entry.arguments = arguments.map(|d| hex(&d));
                entry.reason = Some(reason.to_owned());
            }
            Self::StandingGranted {
                tool,
                principal,
                nonce,
                id,
                ..
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.nonce = Some(nonce.short());
                entry.standing = Some(short_id(id));
            }
            Self::StandingEnded {
                tool,
                principal,
                id,
                outcome,
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.standing = Some(short_id(id));
                entry.class = Some(outcome.to_owned());
            }
            Self::StandingRevoked {
                tool,
                principal,
                id,
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.standing = Some(short_id(id));
            }
            Self::GrantIssued { ref grant }
            | Self::GrantBegun { ref grant, .. }
            | Self::GrantConsumed { ref grant, .. }
            | Self::GrantExpired {
                grant: Some(ref grant),
                ..
            } => grant_entry(&mut entry, grant, None),
            Self::GrantFailed { ref grant, reason } => {
                grant_entry(&mut entry, grant, Some(reason));
            }
            Self::GrantRevoked { ref grant, reason } => grant_entry(&mut entry, grant, reason),
            Self::ApprovalDecided {
                approval,
                principal,
                decision,
                shown,
                ..
            } => {
                entry.tool = Some(approval.tool.clone());
                who(&mut entry, principal);
                if let Decision::Approved {
                    chosen, standing, ..
                } = decision
                {
                    entry.chosen = Some(chosen.clone());
                    entry.version = approval
                        .choices
                        .iter()
                        .find(|c| c.id == *chosen)
                        .and_then(|c| c.version.clone());
                    entry.class = standing.then(|| "standing".to_owned());
                }
                entry.shown = shown.map(|d| hex(&d));
                entry.nonce = Some(approval.nonce.short());
                entry.batch = approval.batch.as_ref().map(|m| m.set.clone());
            }
            // An accepted call the revalidation refused: it did not run. The hook's own words
            // stay in `tracing` (they may describe the record); the log says which class.
            Self::Revoked {
                tool,
                principal,
                nonce,
                ..
            } => {
                entry.tool = Some(tool.to_owned());
                who(&mut entry, principal);
                entry.nonce = Some(nonce.short());
                entry.class = Some("revalidation".to_owned());
                entry.reason = Some("the revalidation refused the accepted call".to_owned());
            }
            Self::BatchDecided { batch, principal } => {
                who(&mut entry, principal);
                entry.batch = Some(batch.set.to_hex());
                entry.class = Some(
                    if batch.approved() == 0 {
                        "declined"
                    } else if batch.all_or_nothing {
                        "all_or_nothing"
                    } else {
                        "some"
                    }
                    .to_owned(),
                );
                entry.chosen = Some(format!("{}/{}", batch.approved(), batch.members.len()));
            }
            Self::Forwarded { .. }
            | Self::PageRefused { .. }
            | Self::Unguarded { .. }
            | Self::Undeclared { .. }
            | Self::ListingUnread { .. }
            | Self::StackedLayers { .. }
            | Self::StandingGivenBack { .. }
            | Self::Completed { .. }
            | Self::HandlerDidNotClaim { .. }
            | Self::HandlerClaimUnchecked { .. }
            | Self::GrantExpired { grant: None, .. }
            | Self::GrantFinishLost { .. }
            | Self::LogBypassed { .. } => return None,
        }
        if entry.audience.is_empty() {
            audience.clone_into(&mut entry.audience);
        }
        Some(entry)
    }
}

/// A grant's entry: digests and prefixes, never the arguments. A grant's audience and
/// principal digest are its own.
fn grant_entry(entry: &mut LogEntry, grant: &GrantFacts<'_>, reason: Option<&str>) {
    grant.audience.clone_into(&mut entry.audience);
    entry.tool = Some(grant.tool.to_owned());
    entry.principal = Some(grant.principal.to_hex());
    entry.subject = Some(grant.subject.to_owned());
    entry.arguments = Some(hex(&crate::token::claims::arguments_digest(
        Some(grant.arguments),
        None,
    )));
    entry.chosen = grant.chosen.map(str::to_owned);
    entry.version = grant.version.map(str::to_owned);
    entry.nonce = Some(grant.nonce.short());
    entry.grant = Some(grant.id.clone());
    entry.standing = grant.standing.map(short_id);
    entry.reason = reason.map(str::to_owned);
}

/// The first bytes of a standing approval's id, as records name it.
fn short_id(id: &StandingId) -> String {
    id.to_hex()[..8].to_owned()
}

/// Reports, for operators only, a step refused on the way: one that ends the call with an
/// outcome, goes on to ask, or refuses what a page or worker was asked. The decision, if any,
/// is its own event.
pub(crate) fn step_refused<'a>(
    tool: &str,
    principal: Option<&Principal>,
    reason: impl Into<Cow<'a, str>>,
) {
    DecisionEvent::Refused {
        tool,
        principal,
        nonce: None,
        class: None,
        reason: reason.into(),
    }
    .trace();
}

fn subject(principal: Option<&Principal>) -> &str {
    principal.map_or("-", Principal::subject)
}

/// A digest of what a person was shown (each choice's id, version and label, and the standing
/// option's words): the same for the form and the approval page, so a record can be matched
/// to what either displayed.
pub(crate) fn shown_digest<'a>(
    shown: impl Iterator<Item = (&'a str, Option<&'a str>, Option<&'a str>)>,
    standing: Option<&str>,
) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let shown: Vec<_> = shown.collect();
    let mut hash = Sha256::new();
    hash.update(serde_json::to_vec(&(shown, standing)).unwrap_or_default());
    hash.finalize().into()
}
