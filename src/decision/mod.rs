//! The one async path of an intercepted call, shared by the HTTP and the message adapters, one
//! file per step, channel or settlement:
//!
//! - here: admission, the waiver, verifying a retry's state, and asking;
//! - [`challenge`]: a first call's candidates and its sealed state;
//! - [`answer`]: reading a retry's answer and settling a cancel, a decline or a withdrawn
//!   approval;
//! - [`accept`]: an acceptance, claimed and revalidated, and the one forward tail every call that
//!   runs ends in (an acceptance, a standing approval's use);
//! - [`standing`]: standing approvals, offered, granted and used;
//! - [`browser`]: the browser channel (the approval record, its page, the approvers' rule);
//! - [`queued`]: the queued settlement's durable grant;
//! - [`claim`]: the replay store's part (claim, check, burn).
//!
//! It strings the pure gates of [`engine`](crate::engine), the sealer and the form around the three
//! things that wait: the resolver, the replay store and the revalidation hook. Nothing is forwarded
//! unless the state verified, the answer is a valid acceptance, the nonce was claimed and the
//! revalidation passed, in that order. Every refusal on the way is a [`Refused`], recorded and
//! turned into the reply in one place.

mod accept;
mod answer;
mod browser;
mod challenge;
mod claim;
mod queued;
pub(crate) mod retired;
mod standing;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::audit::event::{DecisionEvent, Runs, step_refused};
use crate::completion::CompletionGuard;
use crate::config::{Config, GuardedTool};
use crate::confirmed::{Confirmed, Waived, WaiverReason};
use crate::engine::{self, Declared, Refused};
use crate::message::ToolCall;
use crate::policy::{Channel, Lookup, ToolPolicy};
use crate::principal::Principal;
use crate::protocol::{self, Ask, Outcome, Reply, RpcError};
use crate::token::StateError;
use crate::token::claims::Claims;

/// What an adapter does with an intercepted call.
pub(crate) enum Decision {
    /// Answer with this; the inner service never sees the call.
    Reply(Reply),
    /// Forward the call as received (`body`), with a waiver: its policy's condition says this
    /// call needs no confirmation.
    Pass { body: Bytes, waived: Waived },
    /// Forward this confirmed call.
    Forward(Box<Approved>),
    /// Not the layer's to decide (a tool it does not confirm, whose retry carries no state of
    /// the layer's): forward `body` as received, with `waived` if the tool is exempt.
    Untouched { body: Bytes, waived: Option<Waived> },
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
    /// The tool, for what an adapter adds of its own (the HTTP `Mcp-Param-*` header).
    pub(crate) tool: Arc<GuardedTool>,
    /// Under a standing approval: the uses it has left after this one.
    pub(crate) standing_left: Option<u32>,
}

/// The span of a decision, a child of the call's: the adapter enters it while it polls
/// [`decide`], inside the call's span.
pub(crate) fn span(config: &Config) -> crate::observe::CallSpan {
    crate::observe::decision_span(&config.spans, config.policy_revision.as_deref())
}

impl Decision {
    /// The JSON-RPC error the layer answers with, if it refuses the call.
    pub(crate) fn error_code(&self) -> Option<i64> {
        match self {
            Decision::Reply(Reply { error, .. }) => *error,
            _ => None,
        }
    }
}

/// Decides what happens to an intercepted call of `guarded`.
///
/// `principal` is what the request's extensions (or the local principal) say; `declared` is what
/// the transport declared outside the body, if it declares anything. The adapter runs this
/// inside the call's span and the decision's ([`span`]), and marks the call failed by what it
/// comes to ([`Decision::error_code`]).
pub(crate) async fn decide(
    config: Arc<Config>,
    guarded: Arc<GuardedTool>,
    call: ToolCall,
    principal: Option<Principal>,
    declared: Option<Declared>,
) -> Decision {
    let principal = match admit(&config, &call, principal, declared.as_ref()) {
        Ok(principal) => principal,
        Err(refused) => {
            config.report(refused.event(&call.tool, None));
            return Decision::Reply(refused.reply(&call));
        }
    };
    let decision = match try_decide(&config, &guarded, &call, &principal).await {
        Ok(decision) => decision,
        Err(refused) => {
            config.report(refused.event(&call.tool, Some(&principal)));
            return Decision::Reply(refused.reply(&call));
        }
    };
    // A call runs only once its record is durably in the decision log (or the log's policy says
    // to fail open). Should the log go down between the check before the claim and here, the
    // claimed confirmation is spent and nothing runs.
    let recorded = match &decision {
        Decision::Reply(_) | Decision::Untouched { .. } => Ok(()),
        Decision::Pass { waived, .. } => {
            config
                .report_decisive(DecisionEvent::Waived {
                    tool: &call.tool,
                    principal: Some(&principal),
                    arguments: Some(waived.arguments),
                    reason: match waived.reason {
                        WaiverReason::Exempt => "exempt",
                        _ => "the policy's condition is false",
                    },
                })
                .await
        }
        Decision::Forward(approved) => {
            let confirmed = &approved.confirmed;
            let call = Runs {
                tool: &confirmed.tool,
                principal: &confirmed.principal,
                nonce: &confirmed.nonce,
                arguments: &confirmed.arguments,
                chosen: confirmed.chosen.as_deref(),
                version: confirmed.version.as_deref(),
                original: confirmed.original.as_ref(),
                grant: confirmed.grant.map(|g| g.short()),
                standing: confirmed.standing.as_ref(),
            };
            let event = match approved.standing_left {
                Some(left) => DecisionEvent::StandingUsed { call, left },
                None => DecisionEvent::Accepted { call },
            };
            let recorded = config.report_decisive(event).await;
            if recorded.is_ok() {
                config.report(DecisionEvent::Forwarded {
                    tool: &confirmed.tool,
                    principal: &confirmed.principal,
                    nonce: &confirmed.nonce,
                });
            }
            recorded
        }
    };
    match recorded {
        Ok(()) => decision,
        Err(refused) => {
            config.trace(&refused.event(&call.tool, Some(&principal)));
            Decision::Reply(refused.reply(&call))
        }
    }
}

/// The waiver an exempt tool's call carries to its handler (reported, not a log record: an
/// exemption is configuration, not a decision).
pub(crate) fn exempt(call: &ToolCall, principal: Option<&Principal>) -> Waived {
    DecisionEvent::Waived {
        tool: &call.tool,
        principal,
        arguments: None,
        reason: "exempt",
    }
    .trace();
    Waived::new(&call.tool, WaiverReason::Exempt, call.arguments())
}

/// The answer to a call of a tool the server lists as needing a confirmation the layer was not
/// configured with.
pub(crate) fn undeclared(call: &ToolCall) -> Reply {
    step_refused(
        &call.tool,
        None,
        "undeclared: the server lists this tool as needing a confirmation, and the layer has no policy for it",
    );
    Reply::error(Some(&call.id), &RpcError::undeclared_tool())
}

/// The answer to a call of a tool that is not in the tool list the layer was built with.
pub(crate) fn unlisted(call: &ToolCall) -> Reply {
    step_refused(
        &call.tool,
        None,
        "unlisted: the tool is in no tool list the layer was built with (a router left out of \
         .declarations/.tool_list, or a stale list); give the server's whole list",
    );
    Reply::error(Some(&call.id), &RpcError::unlisted_tool())
}

/// Whether an outer `ConfirmLayer` already settled this request: its verdict is in the
/// extensions. Two layers on one route would ask forever (each strips the other's state), and
/// with two keys neither can verify the other's.
pub(crate) fn settled_outside(extensions: &http::Extensions) -> bool {
    extensions.get::<Confirmed>().is_some() || extensions.get::<Waived>().is_some()
}

/// The answer to a call that passed an outer `ConfirmLayer` and reached this one.
pub(crate) fn stacked(call: &ToolCall) -> Reply {
    DecisionEvent::StackedLayers { tool: &call.tool }.trace();
    Reply::error(Some(&call.id), &RpcError::stacked_layers())
}

/// The protocol gates, then authentication: who is asking, if the request may be considered.
fn admit(
    config: &Config,
    call: &ToolCall,
    principal: Option<Principal>,
    declared: Option<&Declared>,
) -> Result<Principal, Refused> {
    engine::check_protocol(&config.supported_versions, call, declared)?;
    principal.ok_or_else(|| {
        Refused::new(
            RpcError::unauthenticated(),
            "no principal in the request extensions",
        )
    })
}

/// The confirmation proper: challenge a first call, settle a retry.
async fn try_decide(
    config: &Config,
    guarded: &Arc<GuardedTool>,
    call: &ToolCall,
    principal: &Principal,
) -> Result<Decision, Refused> {
    let attempt = Attempt {
        config,
        guarded,
        call,
        principal,
    };
    if call.params.request_state.is_none()
        && let Some(waived) = attempt.waiver().await?
    {
        return Ok(Decision::Pass {
            body: call.body.clone(),
            waived,
        });
    }
    if call.params.request_state.is_none()
        && let Some(decision) = attempt.under_standing().await?
    {
        return Ok(decision);
    }
    let (claims, token) = match &call.params.request_state {
        None => (None, ""),
        Some(Value::String(token)) => match attempt.verify(token) {
            Ok(claims) => (Some(claims), token.as_str()),
            // Sound in every binding but the rule it was asked under: the tool's channel or
            // approvers changed while the form was open (a reload, a rolling deploy). A state
            // is judged by the rule it was issued under, which is gone, so the question is
            // asked again under the rule in force; the old state stays unspent.
            Err(StateError::InputKey) => {
                step_refused(
                    &call.tool,
                    Some(principal),
                    "a state issued under another rule for this tool: asked again",
                );
                (None, "")
            }
            Err(e) => return Err(Refused::state(e)),
        },
        Some(_) => return Err(Refused::state(StateError::Format)),
    };
    // Whatever an earlier request declared, this one must be able to show (or answer) the form.
    engine::check_elicitation(call, guarded.policy.channel != Channel::Form)?;
    // Each round's future is boxed: the decision's own stays small (under the allocator's
    // large-chunk size), so a call refused before either round allocates and copies little.
    match claims {
        None => Box::pin(attempt.challenge()).await,
        Some(claims) => Box::pin(attempt.settle(&claims, token)).await,
    }
}

/// What the user's answer, read on the policy's channel, comes to.
enum Verdict {
    /// Ask again with a fresh challenge; the old state stays unspent. `None` when nothing was
    /// answered for our key at all.
    AskAgain(Option<&'static str>),
    /// Asked and still undecided (the page has no decision yet): the same challenge again, with
    /// the same state; `status` says how far the approvers got.
    Pending { status: Option<String> },
    /// Approved, but an approver may no longer approve (or the rule changed since): spend the
    /// confirmation, run nothing.
    Withdrawn(&'static str),
    /// The user dismissed the question.
    Cancel,
    /// The user declined; `unconfirmed` when they accepted with `confirm: false`.
    Decline { unconfirmed: bool },
    /// A valid acceptance; `chosen` is a signed candidate (pick-one policies); `standing`: also
    /// grant the standing approval the state offered.
    Accept {
        chosen: Option<String>,
        standing: bool,
        /// The approver's narrowing of the arguments (browser channel), already checked
        /// against the tool's declaration.
        narrowed: Option<serde_json::Map<String, Value>>,
    },
}

/// One intercepted call on its way through the decision: the layer, the tool's policy, the call
/// and who asks. Every step of the path is a method on it.
struct Attempt<'a> {
    config: &'a Config,
    guarded: &'a Arc<GuardedTool>,
    call: &'a ToolCall,
    principal: &'a Principal,
}

impl Attempt<'_> {
    pub(super) fn policy(&self) -> &ToolPolicy {
        &self.guarded.policy
    }

    /// What a resolver or a condition is given: who asks, the tool, the arguments as sent.
    pub(super) fn lookup(&self) -> Lookup {
        Lookup {
            principal: self.principal.clone(),
            tool: self.call.tool.as_str().into(),
            arguments: Arc::new(self.guarded.confirmed_arguments(self.call, None)),
        }
    }

    /// The policy's condition on a first call: the waiver when it says no confirmation is needed.
    pub(super) async fn waiver(&self) -> Result<Option<Waived>, Refused> {
        let Some(condition) = &self.policy().when else {
            return Ok(None);
        };
        let needed = condition
            .needs_confirmation(self.lookup())
            .await
            .map_err(|e| Refused::new(RpcError::internal(), format!("condition failed: {e}")))?;
        if needed {
            return Ok(None);
        }
        Ok(Some(Waived::new(
            &self.call.tool,
            WaiverReason::ConditionFalse,
            self.call.arguments(),
        )))
    }

    /// Checks a retry's state against this request and principal.
    pub(super) fn verify(&self, token: &str) -> Result<Claims, StateError> {
        self.config
            .sealer
            .verify(
                &self.guarded.binding,
                self.principal.subject(),
                self.config.store_epoch(),
                token,
                || self.guarded.request_digests(self.call),
            )
            .inspect_err(crate::observe::state_refused)
    }

    /// The `input_required` answer asking `ask`, with the state `token`.
    pub(super) fn ask<S: serde::Serialize>(&self, ask: Ask<'_, S>, token: &str) -> Decision {
        self.ask_with(ask, token, &self.guarded.message(self.call))
    }

    /// The `input_required` answer asking `ask` with `message`, and the state `token`.
    pub(super) fn ask_with<S: serde::Serialize>(
        &self,
        ask: Ask<'_, S>,
        token: &str,
        message: &str,
    ) -> Decision {
        let result = protocol::InputRequired {
            key: &self.policy().input_key,
            message,
            ask,
            state: token,
            server_info: self.config.server_info.as_ref(),
        };
        Decision::Reply(Reply::result(&self.call.id, &result))
    }

    /// A result that ends the call with `outcome` and `text`, nothing run.
    pub(super) fn outcome(&self, outcome: Outcome, text: &str) -> Decision {
        let result = protocol::outcome_result(
            outcome,
            text,
            self.config.server_info.as_ref(),
            self.guarded.structured,
        );
        Decision::Reply(Reply::result(&self.call.id, &result))
    }
}
