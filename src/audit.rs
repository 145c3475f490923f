//! The audit trail: one structured `tracing` event per decision, all under one target.
//!
//! Subscribe to the `mcp_confirm::audit` target to record every confirmation decision. Events carry
//! the tool, the principal's subject, the first bytes of the nonce (to correlate rounds) and the
//! specific reason of a refusal, which the wire never shows. They never carry keys, tokens, or the
//! form's content.

use crate::grant::{Grant, GrantId};
use crate::principal::Principal;
use crate::store::Nonce;

/// The `tracing` target of every audit event.
pub const TARGET: &str = "mcp_confirm::audit";

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

pub(crate) fn grant_issued(grant: &Grant) {
    tracing::info!(target: TARGET, decision = "grant_issued", tool = grant.tool, principal = grant.subject,
        grant = %grant.id.short(), nonce = %grant.nonce.short(), chosen = grant.chosen.as_deref().unwrap_or("-"));
}

pub(crate) fn grant_executing(grant: &Grant, attempt: u32) {
    tracing::info!(target: TARGET, decision = "grant_executing", tool = grant.tool, principal = grant.subject,
        grant = %grant.id.short(), nonce = %grant.nonce.short(), attempt);
}

pub(crate) fn grant_consumed(grant: &Grant, attempt: u32) {
    tracing::info!(target: TARGET, decision = "grant_consumed", tool = grant.tool, principal = grant.subject,
        grant = %grant.id.short(), nonce = %grant.nonce.short(), attempt);
}

pub(crate) fn grant_failed(grant: &Grant, reason: &str) {
    tracing::warn!(target: TARGET, decision = "grant_failed", tool = grant.tool, principal = grant.subject,
        grant = %grant.id.short(), nonce = %grant.nonce.short(), reason);
}

pub(crate) fn grant_revoked(grant: &Grant) {
    tracing::info!(target: TARGET, decision = "grant_revoked", tool = grant.tool, principal = grant.subject,
        grant = %grant.id.short(), nonce = %grant.nonce.short());
}

pub(crate) fn grant_expired(id: &GrantId, nonce: Option<&Nonce>) {
    tracing::info!(target: TARGET, decision = "grant_expired", grant = %id.short(),
        nonce = %nonce.map_or_else(|| "-".to_owned(), Nonce::short));
}
