//! The replay store's part of a decision: claiming a state's nonce, checking it unused, burning
//! it, and a store error as a refusal.

use crate::completion;
use crate::config::Config;
use crate::engine::Refused;
use crate::protocol::RpcError;
use crate::store::{Claim, ClaimRequest, Owner, StoreError};
use crate::token::StateError;
use crate::token::claims::Claims;

/// Marks a nonce used without running anything (best effort: a failure leaves it fresh, and a
/// `claimed_by_handler` tool's used state is refused before its handler, whose own claim fails
/// too).
pub(super) async fn burn(config: &Config, request: &ClaimRequest) {
    let _ = completion::burn(&*config.store, request).await;
}

/// A claim of the state's nonce by a fresh owner, charged to the principal the state names, kept
/// until the state can no longer verify.
pub(super) fn claim_request(config: &Config, claims: &Claims) -> ClaimRequest {
    ClaimRequest::new(
        claims.nonce,
        Owner::random(),
        claims.principal,
        config.sealer.retention(claims),
    )
}

/// Refuses a state whose nonce is already held (in flight or consumed), without claiming it:
/// a cancel, and the settlements that do not claim before the call (a queued tool's grant comes
/// first; a `claimed_by_handler` tool's handler claims).
pub(super) async fn unused(config: &Config, claims: &Claims) -> Result<(), Refused> {
    let used = config
        .store
        .is_used(claims.nonce, claims.principal)
        .await
        .map_err(|e| replay_store_failed(config, e))?;
    if used {
        return Err(Refused::replay(claims.nonce, "used", StateError::Consumed));
    }
    Ok(())
}

/// Claims the state's nonce; any answer but [`Claim::Claimed`] is a refusal.
pub(super) async fn claim(
    config: &Config,
    claims: &Claims,
    request: &ClaimRequest,
) -> Result<(), Refused> {
    match config
        .store
        .claim(request)
        .await
        .map_err(|e| replay_store_failed(config, e))?
    {
        Claim::Claimed => {
            crate::observe::claimed();
            Ok(())
        }
        Claim::InFlight => Err(Refused::replay(
            claims.nonce,
            "in_flight",
            StateError::InFlight,
        )),
        _ => Err(Refused::replay(
            claims.nonce,
            "consumed",
            StateError::Consumed,
        )),
    }
}

/// A store error as a refusal: over budget says when to retry; anything else is "unavailable".
/// A failure of the replay store: counted under its backend, then refused as any store's.
fn replay_store_failed(config: &Config, e: StoreError) -> Refused {
    // A principal over its budget is a refusal of hers, not a failing store.
    if !matches!(e, StoreError::OverBudget { .. }) {
        crate::observe::store_failed(config.store.backend());
    }
    store_failed(e)
}

pub(super) fn store_failed(e: StoreError) -> Refused {
    let error = match &e {
        StoreError::OverBudget { retry_after } => RpcError::over_budget(*retry_after),
        _ => RpcError::store_unavailable(),
    };
    Refused::new(error, format!("replay store: {e}"))
}
