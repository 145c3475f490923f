//! The audit trail: one structured `tracing` event per decision, all under one target.
//!
//! Subscribe to the `mcp_confirm::audit` target to record every confirmation decision. Events carry
//! the tool, the principal's subject, the first bytes of the nonce (to correlate rounds) and the
//! specific reason of a refusal, which the wire never shows. They never carry keys, tokens, or the
//! form's content.

use crate::kernel::Nonce;
use crate::principal::Principal;

/// The `tracing` target of every audit event.
pub const TARGET: &str = "mcp_confirm::audit";

/// One decision as the decision log records it (feature `audit-log`; without a log, nothing is
/// built from it): digests and prefixes, never argument values.
#[derive(Default)]
#[cfg_attr(not(feature = "audit-log"), allow(dead_code))]
pub(crate) struct Event<'a> {
    /// What happened (`challenged`, `accepted`, `refused`, …).
    pub(crate) event: &'static str,
    pub(crate) tool: Option<&'a str>,
    pub(crate) principal: Option<&'a Principal>,
    /// The digest of the arguments the decision is about.
    pub(crate) arguments: Option<[u8; 32]>,
    pub(crate) chosen: Option<&'a str>,
    pub(crate) version: Option<&'a str>,
    /// A digest of what the user was shown.
    pub(crate) shown: Option<[u8; 32]>,
    pub(crate) nonce: Option<&'a Nonce>,
    pub(crate) grant: Option<String>,
    pub(crate) standing: Option<String>,
    /// A refusal's class (its wire reason or code).
    pub(crate) class: Option<String>,
    /// A refusal's real reason.
    pub(crate) reason: Option<&'a str>,
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

fn subject(principal: Option<&Principal>) -> &str {
    principal.map_or("-", Principal::subject)
}

pub(crate) fn challenged(tool: &str, principal: &Principal, nonce: &Nonce, candidates: usize) {
    tracing::info!(target: TARGET, decision = "challenged", tool, principal = principal.subject(),
        nonce = %nonce.short(), candidates);
}

pub(crate) fn refused(tool: &str, principal: Option<&Principal>, reason: &str) {
    tracing::warn!(target: TARGET, decision = "refused", tool, principal = subject(principal), reason);
}

/// A page (`channel`: `approval_page`, `standing_page`) refused a post before reading what it
/// names (so no tool yet).
pub(crate) fn page_refused(channel: &'static str, principal: &Principal, reason: &str) {
    tracing::warn!(target: TARGET, decision = "refused", channel,
        principal = principal.subject(), reason);
}

/// A guarded handler refused to run: no confirmation (or waiver) of the layer came with the call.
/// An error, not a warning: it means the layer is missing, misconfigured or bypassed.
#[cfg_attr(not(feature = "rmcp"), allow(dead_code))]
pub(crate) fn unguarded(tool: &str, reason: &str) {
    tracing::error!(target: TARGET, decision = "unguarded", tool, reason);
}

/// A call the layer let through without asking, on purpose (exempt, or a false condition).
pub(crate) fn waived(tool: &str, principal: Option<&Principal>, reason: &str) {
    tracing::info!(target: TARGET, decision = "waived", tool, principal = subject(principal), reason);
}

/// A `tools/list` answer showed a tool that needs a confirmation (destructive, or declared with
/// `#[confirm]`) and the layer has neither a policy nor an exemption for it: its calls are
/// refused from now on.
pub(crate) fn undeclared(tool: &str, declared: Option<&str>) {
    tracing::error!(target: TARGET, decision = "undeclared", tool, declared = declared.unwrap_or("-"),
        reason = "listed as needing a confirmation the layer was not configured with; its calls are refused: give it a policy or exempt it");
}

/// A `tools/list` answer the layer could not read: every tool without a policy or exemption is
/// refused from now on.
pub(crate) fn listing_unread(why: &str) {
    tracing::error!(target: TARGET, decision = "listing_unread", reason = why,
        effect = "every tool without a policy or exemption is refused from now on");
}

pub(crate) fn accepted(tool: &str, principal: &Principal, nonce: &Nonce, chosen: Option<&str>) {
    tracing::info!(target: TARGET, decision = "accepted", tool, principal = principal.subject(),
        nonce = %nonce.short(), chosen = chosen.unwrap_or("-"));
}

pub(crate) fn declined(tool: &str, principal: &Principal, nonce: &Nonce, unconfirmed: bool) {
    tracing::info!(target: TARGET, decision = "declined", tool, principal = principal.subject(),
        nonce = %nonce.short(), unconfirmed);
}

pub(crate) fn cancelled(tool: &str, principal: &Principal, nonce: &Nonce) {
    tracing::info!(target: TARGET, decision = "cancelled", tool, principal = principal.subject(),
        nonce = %nonce.short());
}

pub(crate) fn replay_blocked(tool: &str, principal: &Principal, nonce: &Nonce, state: &str) {
    tracing::warn!(target: TARGET, decision = "replay_blocked", tool, principal = principal.subject(),
        nonce = %nonce.short(), state);
}

pub(crate) fn revoked(tool: &str, principal: &Principal, nonce: &Nonce, reason: &str) {
    tracing::warn!(target: TARGET, decision = "refused", tool, principal = principal.subject(),
        nonce = %nonce.short(), reason = %format_args!("revalidation: {reason}"));
}

/// A standing approval was granted by an accepted confirmation.
pub(crate) fn standing_granted(tool: &str, principal: &Principal, id: &str, secs: u64, uses: u32) {
    tracing::info!(target: TARGET, decision = "standing_granted", tool,
        principal = principal.subject(), standing = id, secs, uses);
}

/// A call ran under a standing approval (with the digest of its arguments), `left` uses left.
pub(crate) fn standing_used(
    tool: &str,
    principal: &Principal,
    id: &str,
    arguments: &str,
    left: u32,
) {
    tracing::info!(target: TARGET, decision = "standing_used", tool,
        principal = principal.subject(), standing = id, arguments, left);
}

/// A standing approval covered this call's scope but could not be used (`outcome`: exhausted,
/// expired, revoked, unknown): the call gets the form.
pub(crate) fn standing_ended(tool: &str, principal: &Principal, id: &str, outcome: &str) {
    tracing::info!(target: TARGET, decision = "standing_ended", tool,
        principal = principal.subject(), standing = id, outcome);
}

/// A use of standing approval `id` that a refused call had reserved was given back (`given`),
/// or could not be (the store did not answer, or no longer holds it): then it stays spent.
pub(crate) fn standing_given_back(id: &str, ticket: &Nonce, given: bool) {
    if given {
        tracing::info!(target: TARGET, decision = "standing_given_back", standing = id,
            ticket = %ticket.short());
    } else {
        tracing::warn!(target: TARGET, decision = "standing_given_back", standing = id,
            ticket = %ticket.short(), given,
            reason = "the reserved use could not be given back; it stays spent");
    }
}

/// Its holder revoked a standing approval.
pub(crate) fn standing_revoked(tool: &str, principal: &Principal, id: &str) {
    tracing::info!(target: TARGET, decision = "standing_revoked", tool,
        principal = principal.subject(), standing = id);
}

pub(crate) fn forwarded(tool: &str, principal: &Principal, nonce: &Nonce) {
    tracing::info!(target: TARGET, decision = "forwarded", tool, principal = principal.subject(),
        nonce = %nonce.short());
}

pub(crate) fn completed(nonce: &Nonce, consumed: bool) {
    if consumed {
        tracing::info!(target: TARGET, decision = "completed", nonce = %nonce.short());
    } else {
        tracing::warn!(target: TARGET, decision = "completed", nonce = %nonce.short(), consumed,
            reason = "claim no longer held; it stays unusable until it expires");
    }
}

/// A `claimed_by_handler` call ran and its handler did not claim the nonce: the layer burned it
/// after the call, so the answer cannot run the handler again. A wiring error to fix: the
/// handler must consume the nonce in its transaction and act only if that succeeded.
pub(crate) fn handler_did_not_claim(tool: &str, nonce: &Nonce) {
    tracing::error!(target: TARGET, decision = "handler_did_not_claim", tool, nonce = %nonce.short(),
        "the handler of a claimed_by_handler tool ran without claiming its confirmation; the layer burned it after the call");
}

/// The check that a handler claimed its nonce could not reach the store.
pub(crate) fn handler_claim_unchecked(tool: &str, nonce: &Nonce, error: &dyn std::fmt::Display) {
    tracing::error!(target: TARGET, decision = "handler_claim_unchecked", tool, nonce = %nonce.short(),
        error = %error, "could not check that the handler claimed its confirmation");
}

/// What every grant event names: the tool, who approved, the grant (short) and the nonce (short).
pub(crate) struct GrantFields<'a> {
    pub(crate) tool: &'a str,
    pub(crate) subject: &'a str,
    pub(crate) grant: String,
    pub(crate) nonce: String,
}

pub(crate) fn grant_issued(g: &GrantFields<'_>, chosen: Option<&str>) {
    tracing::info!(target: TARGET, decision = "grant_issued", tool = g.tool, principal = g.subject,
        grant = %g.grant, nonce = %g.nonce, chosen = chosen.unwrap_or("-"));
}

pub(crate) fn grant_executing(g: &GrantFields<'_>, attempt: u32) {
    tracing::info!(target: TARGET, decision = "grant_executing", tool = g.tool, principal = g.subject,
        grant = %g.grant, nonce = %g.nonce, attempt);
}

pub(crate) fn grant_consumed(g: &GrantFields<'_>, attempt: u32) {
    tracing::info!(target: TARGET, decision = "grant_consumed", tool = g.tool, principal = g.subject,
        grant = %g.grant, nonce = %g.nonce, attempt);
}

pub(crate) fn grant_failed(g: &GrantFields<'_>, reason: &str) {
    tracing::warn!(target: TARGET, decision = "grant_failed", tool = g.tool, principal = g.subject,
        grant = %g.grant, nonce = %g.nonce, reason);
}

pub(crate) fn grant_revoked(g: &GrantFields<'_>) {
    tracing::info!(target: TARGET, decision = "grant_revoked", tool = g.tool, principal = g.subject,
        grant = %g.grant, nonce = %g.nonce);
}

/// Expiry is found by a `begin`, which may no longer be able to read the grant: `nonce` is `-`
/// then.
pub(crate) fn grant_expired(grant: &str, nonce: Option<&Nonce>) {
    tracing::info!(target: TARGET, decision = "grant_expired", grant,
        nonce = %nonce.map_or_else(|| "-".to_owned(), Nonce::short));
}

pub(crate) fn grant_finish_lost(grant: &str, reason: &dyn std::fmt::Display) {
    tracing::warn!(target: TARGET, decision = "grant_finish_lost", grant, %reason);
}

pub(crate) fn page_decided(
    tool: &str,
    principal: &Principal,
    nonce: &Nonce,
    decision: &crate::store::approval::Decision,
) {
    let (decision, chosen, standing) = match decision {
        crate::store::approval::Decision::Approved { chosen, standing } => {
            ("page_approved", chosen.as_str(), *standing)
        }
        crate::store::approval::Decision::Declined => ("page_declined", "-", false),
    };
    tracing::info!(target: TARGET, decision, tool, principal = principal.subject(),
        nonce = %nonce.short(), chosen, standing);
}
