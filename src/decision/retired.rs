//! A retry of a tool the layer does not (or no longer) confirm.
//!
//! A form was asked for under one policy; before the user answered, the policy changed (the
//! operator allowed the tool, a rolling deploy reached an instance without `#[confirm]`, the
//! upstream re-annotated the tool read-only). Forwarded as it came, the retry would reach a
//! server that never asks questions, which ignores `requestState` and runs the call, whatever
//! the user answered. So a retry that carries a state this deployment sealed never reaches the
//! inner service as it came: it is checked like any state (MAC, expiry, audience, principal,
//! tool, input key, a new request id, the store's epoch) and then
//!
//! - a decline spends the state and ends as a decline;
//! - a cancel spends nothing and ends as a cancel;
//! - an acceptance runs nothing and asks the client to call again: the call is then judged
//!   under the policy as it is now (the layer has no policy left to revalidate, rewrite or
//!   settle the old answer by).
//!
//! A state that does not open under the layer's keys is another server's (a server that asks
//! its own questions, or a confirming server behind this one): the call goes on untouched. An
//! answer under one of the layer's own input keys that arrives with no state at all answers no
//! question anyone asked, and is refused.

use std::sync::Arc;

use serde_json::Value;

use crate::audit::event::{DecisionEvent, step_refused};
use crate::config::Config;
use crate::engine::Refused;
use crate::message::{TOOLS_CALL, ToolCall};
use crate::principal::Principal;
use crate::protocol::{self, Outcome, Reply, RpcError};
use crate::token::claims::{Claims, digest16, request_id_digest};
use crate::token::sealer::ToolBinding;

use super::Decision;
use super::claim::{claim, claim_request, unused};

/// The text of an acceptance that arrives after the tool stopped needing a confirmation.
pub(crate) const CALL_AGAIN: &str = "This tool's confirmation policy changed while the question \
     was open; nothing was changed. Call the tool again.";

/// What the adapter does with `call`, a `tools/call` of a tool the layer does not confirm that
/// carries `requestState` or `inputResponses`; `exempt`: the tool is exempt by configuration,
/// and goes on with its waiver if it is forwarded.
pub(crate) async fn decide(
    config: Arc<Config>,
    call: ToolCall,
    principal: Option<Principal>,
    exempt: bool,
) -> Decision {
    match judge(&config, &call, principal.as_ref()).await {
        Ok(Some(reply)) => Decision::Reply(reply),
        Ok(None) => Decision::Untouched {
            waived: exempt.then(|| super::exempt(&call, principal.as_ref())),
            body: call.body,
        },
        Err(refused) => {
            config.report(refused.event(&call.tool, principal.as_ref()));
            Decision::Reply(refused.reply(&call))
        }
    }
}

/// `None`: not ours, forward it as it came.
async fn judge(
    config: &Config,
    call: &ToolCall,
    principal: Option<&Principal>,
) -> Result<Option<Reply>, Refused> {
    let opened = match &call.params.request_state {
        Some(Value::String(token)) => config.sealer.open_own(token),
        _ => None,
    };
    let Some((claims, key)) = opened else {
        if call.params.request_state.is_none() && answers_own_key(config, call) {
            return Err(Refused::new(
                RpcError::invalid_input_responses(),
                "an answer under one of the layer's input keys without a requestState, for a \
                 tool the layer does not confirm",
            ));
        }
        return Ok(None);
    };
    // Ours: it is settled here, whatever comes next.
    let principal = principal.ok_or_else(|| {
        Refused::new(
            RpcError::unauthenticated(),
            "no principal in the request extensions",
        )
    })?;
    let Some(input_key) = answered_key(call, &claims) else {
        step_refused(
            &call.tool,
            Some(principal),
            "a retry of a tool no longer confirmed, with no answer to the state's question",
        );
        return Ok(Some(outcome(
            config,
            call,
            Outcome::PolicyChanged,
            CALL_AGAIN,
        )));
    };
    let binding = ToolBinding::new(&config.audience, TOOLS_CALL, &call.tool, input_key);
    let claims = config
        .sealer
        .check_retired(
            claims,
            key,
            &binding,
            principal.subject(),
            config.store_epoch(),
            request_id_digest(&call.id),
        )
        .map_err(|e| {
            crate::observe::state_refused(&e);
            Refused::state(e)
        })?;
    let action = call
        .input_responses()
        .and_then(|responses| responses.get(input_key))
        .and_then(|response| response.get("action"))
        .and_then(Value::as_str);
    match action {
        Some("decline") => decline(config, call, principal, &claims).await.map(Some),
        Some("cancel") => cancel(config, call, principal, &claims).await.map(Some),
        Some("accept") => {
            step_refused(
                &call.tool,
                Some(principal),
                "accepted after the tool stopped needing a confirmation: call again",
            );
            Ok(Some(outcome(
                config,
                call,
                Outcome::PolicyChanged,
                CALL_AGAIN,
            )))
        }
        _ => Err(Refused::new(
            RpcError::invalid_input_responses(),
            "inputResponses: action is not accept, decline or cancel",
        )),
    }
}

/// The key of `inputResponses` the state's question was asked under, if the client answered it:
/// the key whose digest the state binds, or else the only key answered (a question asked on the
/// approval page binds its rule with its key, which the policy that is gone knew). Nothing runs
/// on what is read here, so the key need not be proven.
fn answered_key<'c>(call: &'c ToolCall, claims: &Claims) -> Option<&'c str> {
    let responses = call.input_responses()?.as_object()?;
    let bound = responses
        .keys()
        .find(|key| digest16("input-key", key.as_bytes()) == claims.input_key);
    match (bound, responses.len()) {
        (Some(key), _) => Some(key.as_str()),
        (None, 1) => responses.keys().next().map(String::as_str),
        (None, _) => None,
    }
}

/// Whether `inputResponses` holds an answer under a key one of the layer's policies asks with.
fn answers_own_key(config: &Config, call: &ToolCall) -> bool {
    let Some(responses) = call.input_responses().and_then(Value::as_object) else {
        return false;
    };
    config
        .tools
        .values()
        .any(|tool| responses.contains_key(&tool.policy.input_key))
}

/// A decline: the state is spent, nothing runs.
async fn decline(
    config: &Config,
    call: &ToolCall,
    principal: &Principal,
    claims: &Claims,
) -> Result<Reply, Refused> {
    let request = claim_request(config, claims);
    claim(config, claims, &request).await?;
    // Best effort: an entry left in flight refuses replays just the same.
    let _ = config.store.complete(&request).await;
    config.report(DecisionEvent::Declined {
        tool: &call.tool,
        principal,
        nonce: &claims.nonce,
        unconfirmed: false,
    });
    Ok(outcome(
        config,
        call,
        Outcome::Declined,
        "The user declined; nothing was changed.",
    ))
}

/// A cancel: nothing is spent (a used state is a replay), nothing runs.
async fn cancel(
    config: &Config,
    call: &ToolCall,
    principal: &Principal,
    claims: &Claims,
) -> Result<Reply, Refused> {
    unused(config, claims).await?;
    config.report(DecisionEvent::Cancelled {
        tool: &call.tool,
        principal,
        nonce: &claims.nonce,
    });
    Ok(outcome(
        config,
        call,
        Outcome::Cancelled,
        "The confirmation was cancelled; nothing was changed.",
    ))
}

/// A result that ends the call with `outcome`, nothing run. The tool's `outputSchema` is not
/// known here (its policy is gone), so the result is an error result for a tool the listing
/// says declares one.
fn outcome(config: &Config, call: &ToolCall, outcome: Outcome, text: &str) -> Reply {
    let structured = config.listing.structured(&call.tool);
    let result = protocol::outcome_result(outcome, text, config.server_info.as_ref(), structured);
    Reply::result(&call.id, &result)
}
