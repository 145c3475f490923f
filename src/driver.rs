//! The one async path of an intercepted call, shared by the HTTP and the message adapters.
//!
//! It strings the pure decisions of [`engine`](crate::engine) and [`form`](crate::form) around the
//! three things that wait: the resolver, the replay store and the revalidation hook. Nothing is
//! forwarded unless the state verified, the answer is a valid acceptance, the nonce was claimed and
//! the revalidation passed, in that order.

use std::sync::Arc;
use std::task::{Context, Waker};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::audit;
use crate::confirmed::Confirmed;
use crate::engine::{self, GuardedTool, Headers, Refused};
use crate::form::{self, Answer};
use crate::layer::Config;
use crate::message::ToolCall;
use crate::policy::{Lookup, Revalidation, ToolPolicy, candidate_id_ok, candidate_version_ok};
use crate::principal::Principal;
use crate::protocol::{self, Outcome, Reply, RpcError};
use crate::store::{Claim, ClaimRequest, Owner, PrincipalKey, ReplayStore, StoreError};
use crate::token::StateError;
use crate::token::claims::{Claims, Shown};

/// What an adapter does with an intercepted call.
pub(crate) enum Decision {
    /// Answer with this; the inner service never sees the call.
    Reply(Reply),
    /// Forward this confirmed call.
    Forward(Box<Approved>),
}

/// A confirmed call, ready for the inner service.
pub(crate) struct Approved {
    /// The rewritten JSON-RPC message.
    pub(crate) body: Bytes,
    /// Goes into the forwarded request's extensions.
    pub(crate) confirmed: Confirmed,
    /// Marks the nonce Consumed when dropped; the adapter keeps it alive until the response ends.
    /// `None` when the policy leaves the claim to the handler.
    pub(crate) guard: Option<CompletionGuard>,
    /// The `Mcp-Param-*` header of the rewritten argument, if the tool marks it `x-mcp-header`.
    pub(crate) param_header: Option<(HeaderName, HeaderValue)>,
}

/// Decides what happens to an intercepted call.
pub(crate) async fn decide(
    config: Arc<Config>,
    call: ToolCall,
    principal: Option<Principal>,
    headers: Option<Headers>,
) -> Decision {
    let Some(guarded) = config.tools.get(&call.tool).map(Arc::clone) else {
        // The parser only intercepts configured tools.
        return reply_error(&call, &RpcError::internal());
    };
    if let Err(refused) = engine::check_protocol(&config, &call, headers.as_ref()) {
        return refuse(&call, None, refused);
    }
    let Some(principal) = principal.or_else(|| config.local_principal.clone()) else {
        return refuse(
            &call,
            None,
            Refused::new(
                RpcError::unauthenticated(),
                "no principal in the request extensions",
            ),
        );
    };
    let policy = &guarded.policy;
    let state = match &call.params.request_state {
        None => None,
        Some(Value::String(token)) => Some(token.as_str()),
        Some(_) => return refuse(&call, Some(&principal), Refused::state(StateError::Format)),
    };
    let Some(token) = state else {
        if let Err(refused) = engine::check_form_capability(&call) {
            return refuse(&call, Some(&principal), refused);
        }
        return challenge(&config, &guarded, &call, &principal).await;
    };
    let claims = match engine::verify_retry(&config, &guarded, &call, &principal, token) {
        Ok(claims) => claims,
        Err(e) => return refuse(&call, Some(&principal), Refused::state(e)),
    };
    if let Err(refused) = engine::check_form_capability(&call) {
        return refuse(&call, Some(&principal), refused);
    }
    match form::read_answer(
        policy,
        &claims.candidates,
        call.params.input_responses.as_ref(),
    ) {
        Answer::Missing => challenge(&config, &guarded, &call, &principal).await,
        Answer::Invalid(reason) => refuse(
            &call,
            Some(&principal),
            Refused::new(
                RpcError::invalid_input_responses(),
                format!("inputResponses: {reason}"),
            ),
        ),
        Answer::Cancel => cancel(&config, &call, &principal, &claims).await,
        Answer::Decline => decline(&config, &call, &principal, &claims, false).await,
        Answer::Unconfirmed => decline(&config, &call, &principal, &claims, true).await,
        Answer::Accept { chosen } => {
            accept(&config, policy, call, principal, &claims, chosen).await
        }
    }
}

/// Resolves candidates and answers `input_required` with a form and a fresh signed state.
async fn challenge(
    config: &Config,
    guarded: &GuardedTool,
    call: &ToolCall,
    principal: &Principal,
) -> Decision {
    let policy = &guarded.policy;
    if let Some(limiter) = &config.challenge_limiter
        && let Err(wait) = limiter.check(&engine::principal_key(config, principal))
    {
        audit::refused(&call.tool, Some(principal), "challenge rate limit");
        return reply_error(call, &RpcError::challenge_rate_limited(wait));
    }
    let candidates = match &policy.resolver {
        None => Vec::new(),
        Some(resolver) => {
            let lookup = Lookup {
                principal: principal.clone(),
                tool: call.tool.as_str().into(),
                arguments: Arc::new(engine::confirmed_arguments(policy, call, None)),
            };
            match resolver.resolve(lookup).await {
                Ok(found) => found,
                Err(e) => {
                    let reason = format!("resolver failed: {e}");
                    return refuse(
                        call,
                        Some(principal),
                        Refused::new(RpcError::internal(), reason),
                    );
                }
            }
        }
    };
    if policy.resolver.is_some() {
        if candidates.is_empty() {
            audit::refused(&call.tool, Some(principal), "no candidates");
            return outcome(call, Outcome::NoCandidates, &policy.no_candidates_text);
        }
        if candidates.len() > policy.max_candidates {
            audit::refused(&call.tool, Some(principal), "too many candidates");
            let text = format!(
                "{} records match; at most {} can be offered. Narrow the request; nothing was changed.",
                candidates.len(),
                policy.max_candidates
            );
            return outcome(call, Outcome::TooManyCandidates, &text);
        }
        let unique = candidates
            .iter()
            .enumerate()
            .all(|(i, c)| !candidates[..i].iter().any(|d| d.id() == c.id()));
        if !unique || !candidates.iter().all(|c| candidate_id_ok(c.id())) {
            let reason = "resolver returned empty, oversized or duplicate ids";
            return refuse(
                call,
                Some(principal),
                Refused::new(RpcError::internal(), reason),
            );
        }
        if !candidates
            .iter()
            .all(|c| candidate_version_ok(policy, c.version()))
        {
            let reason = "resolver returned a candidate without a version (or with an empty or \
                          oversized one): give each Candidate a version, or opt out with \
                          ToolPolicy::without_versions";
            return refuse(
                call,
                Some(principal),
                Refused::new(RpcError::internal(), reason),
            );
        }
    }
    let shown = candidates
        .iter()
        .map(|c| Shown::new(c.id(), c.version()))
        .collect();
    let (token, claims) = match engine::seal_challenge(config, guarded, call, principal, shown) {
        Ok(sealed) => sealed,
        Err(e) => {
            return refuse(
                call,
                Some(principal),
                Refused::new(RpcError::internal(), format!("seal: {e}")),
            );
        }
    };
    audit::challenged(&call.tool, principal, &claims.nonce, candidates.len());
    let result = protocol::InputRequired {
        key: &policy.input_key,
        message: &policy.message,
        schema: form::schema(policy, &candidates),
        state: &token,
    };
    Decision::Reply(Reply::result(&call.id, &result))
}

/// A cancel: nothing is consumed, so the same state may be answered again, unless it was already
/// used, which is refused like any other replay.
async fn cancel(
    config: &Config,
    call: &ToolCall,
    principal: &Principal,
    claims: &Claims,
) -> Decision {
    let key = PrincipalKey::from_bytes(claims.principal);
    match config.store.is_used(claims.nonce, key).await {
        Ok(false) => {
            audit::cancelled(&call.tool, principal, &claims.nonce);
            outcome(
                call,
                Outcome::Cancelled,
                "The confirmation was cancelled; nothing was changed.",
            )
        }
        Ok(true) => {
            audit::replay_blocked(&call.tool, principal, &claims.nonce, "used");
            reply_error(call, &Refused::state(StateError::Consumed).error)
        }
        Err(e) => store_failed(call, principal, &e),
    }
}

/// A decline (or an acceptance with `confirm: false`): consume the nonce, run nothing.
async fn decline(
    config: &Config,
    call: &ToolCall,
    principal: &Principal,
    claims: &Claims,
    unconfirmed: bool,
) -> Decision {
    let request = claim_request(config, claims);
    if let Err(decision) = claim(config, call, principal, claims, &request).await {
        return decision;
    }
    // Best effort: if completing fails the entry stays InFlight, which refuses replays just the same.
    let _ = config.store.complete(&request).await;
    audit::declined(&call.tool, principal, &claims.nonce, unconfirmed);
    outcome(
        call,
        Outcome::Declined,
        "The user declined; nothing was changed.",
    )
}

/// An acceptance: claim, revalidate, and hand the rewritten call over to be forwarded.
async fn accept(
    config: &Config,
    policy: &ToolPolicy,
    call: ToolCall,
    principal: Principal,
    claims: &Claims,
    chosen: Option<String>,
) -> Decision {
    let request = claim_request(config, claims);
    let until = request.expires_at;
    let guard = if policy.claimed_by_handler {
        // The handler claims inside the transaction that makes the change.
        None
    } else {
        if let Err(decision) = claim(config, &call, &principal, claims, &request).await {
            return decision;
        }
        // From here on the nonce is burned whatever happens: the guard completes it when dropped.
        Some(CompletionGuard::new(Arc::clone(&config.store), request))
    };
    // The version of the record the user chose, exactly as the state signed it.
    let version = chosen.as_deref().and_then(|id| {
        claims
            .candidates
            .iter()
            .find(|shown| shown.id == id)
            .and_then(|shown| shown.version.clone())
    });
    audit::accepted(&call.tool, &principal, &claims.nonce, chosen.as_deref());
    let arguments = engine::confirmed_arguments(policy, &call, chosen.as_deref());
    if let Some(hook) = &policy.revalidate {
        let check = Revalidation {
            principal: principal.clone(),
            tool: call.tool.as_str().into(),
            arguments: Arc::new(arguments.clone()),
            chosen: chosen.clone(),
            seen_version: version.clone(),
        };
        if let Err(refusal) = hook.revalidate(check).await {
            audit::revoked(&call.tool, &principal, &claims.nonce, refusal.reason());
            if guard.is_none() {
                // Nothing was claimed yet: burn the state all the same.
                burn(config, &request).await;
            }
            drop(guard);
            return outcome(
                &call,
                Outcome::Revoked,
                "The confirmed action is no longer allowed or its target changed; nothing was changed.",
            );
        }
    }
    let confirmed = Confirmed {
        principal,
        tool: call.tool.as_str().into(),
        chosen,
        version,
        nonce: claims.nonce,
        expires_at: until,
        claimed: guard.is_some(),
    };
    let param_header = engine::param_header(policy, confirmed.chosen.as_deref());
    let Some(body) = engine::forward_body(&call, &arguments) else {
        // Unreachable short of a bug; the guard burns the nonce and nothing runs.
        let refused = Refused::new(RpcError::internal(), "confirmed body could not be rebuilt");
        return refuse(&call, Some(&confirmed.principal), refused);
    };
    audit::forwarded(&confirmed.tool, &confirmed.principal, &claims.nonce);
    Decision::Forward(Box::new(Approved {
        body,
        confirmed,
        guard,
        param_header,
    }))
}

/// Marks a nonce used without running anything (best effort: a failure leaves it fresh, and the
/// handler of a `claimed_by_handler` policy still refuses a second use).
async fn burn(config: &Config, request: &ClaimRequest) {
    if let Ok(Claim::Claimed) = config.store.claim(request).await {
        let _ = config.store.complete(request).await;
    }
}

/// A claim of the state's nonce by a fresh owner, charged to the principal the state names, kept
/// until the state can no longer verify.
fn claim_request(config: &Config, claims: &Claims) -> ClaimRequest {
    ClaimRequest::new(
        claims.nonce,
        Owner::random(),
        PrincipalKey::from_bytes(claims.principal),
        engine::retention(config, claims),
    )
}

/// Claims the state's nonce; any answer but [`Claim::Claimed`] becomes the reply.
async fn claim(
    config: &Config,
    call: &ToolCall,
    principal: &Principal,
    claims: &Claims,
    request: &ClaimRequest,
) -> Result<(), Decision> {
    match config.store.claim(request).await {
        Ok(Claim::Claimed) => Ok(()),
        Ok(held) => {
            let (state, e) = match held {
                Claim::InFlight => ("in_flight", StateError::InFlight),
                _ => ("consumed", StateError::Consumed),
            };
            audit::replay_blocked(&call.tool, principal, &claims.nonce, state);
            Err(reply_error(call, &Refused::state(e).error))
        }
        Err(e) => Err(store_failed(call, principal, &e)),
    }
}

/// A store error as the reply: over budget says when to retry; anything else is "unavailable".
fn store_failed(call: &ToolCall, principal: &Principal, e: &StoreError) -> Decision {
    let error = match e {
        StoreError::OverBudget { retry_after } => RpcError::over_budget(*retry_after),
        _ => RpcError::store_unavailable(),
    };
    refuse(
        call,
        Some(principal),
        Refused::new(error, format!("replay store: {e}")),
    )
}

fn refuse(call: &ToolCall, principal: Option<&Principal>, refused: Refused) -> Decision {
    audit::refused(&call.tool, principal, &refused.reason);
    reply_error(call, &refused.error)
}

fn reply_error(call: &ToolCall, error: &RpcError) -> Decision {
    Decision::Reply(Reply::error(Some(&call.id), error))
}

fn outcome(call: &ToolCall, outcome: Outcome, text: &str) -> Decision {
    Decision::Reply(Reply::result(
        &call.id,
        &protocol::outcome_result(outcome, text),
    ))
}

/// Moves a claimed nonce to Consumed when dropped: after the inner response has ended, or was
/// dropped, or when the call never got that far. A claimed nonce never returns to Fresh.
pub(crate) struct CompletionGuard {
    store: Arc<dyn ReplayStore>,
    request: ClaimRequest,
}

impl CompletionGuard {
    fn new(store: Arc<dyn ReplayStore>, request: ClaimRequest) -> Self {
        Self { store, request }
    }
}

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        let (store, request) = (Arc::clone(&self.store), self.request);
        let nonce = request.nonce;
        let mut completion = Box::pin(async move {
            let consumed = matches!(store.complete(&request).await, Ok(true));
            audit::completed(&request.nonce, consumed);
        });
        // Stores that answer at once (the memory store) complete right here, deterministically.
        if completion
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
        {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(completion);
            }
            Err(_) => audit::completed(&nonce, false),
        }
    }
}

impl std::fmt::Debug for CompletionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionGuard")
            .field("nonce", &self.request.nonce)
            .finish_non_exhaustive()
    }
}
