//! The one async path of an intercepted call, shared by the HTTP and the message adapters.
//!
//! It strings the pure gates of [`engine`](crate::engine), the sealer and the form around the three
//! things that wait: the resolver, the replay store and the revalidation hook. Nothing is forwarded
//! unless the state verified, the answer is a valid acceptance, the nonce was claimed and the
//! revalidation passed, in that order. Every refusal on the way is a [`Refused`], recorded and
//! turned into the reply in one place.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use std::borrow::Cow;

use crate::audit::event::{self, DecisionEvent, step_refused};
use crate::completion::{self, CompletionGuard, HandlerCall, ReservedUse};
use crate::config::{Config, GuardedTool};
use crate::confirmed::{Confirmed, Waived, WaiverReason};
use crate::engine::{self, Declared, Refused};
use crate::form::{self, Answer};
use crate::grant::{Grant, GrantId, GrantState, GrantStoreError};
use crate::kernel::{Nonce, PrincipalKey};
use crate::message::{self, ToolCall};
use crate::policy::{
    ApproverQuery, Candidate, Channel, Lookup, Revalidation, Settlement, ToolPolicy, Versions,
};
use crate::principal::Principal;
use crate::protocol::{self, Ask, Outcome, Reply, RpcError};
use crate::store::approval::{
    Approval, ApprovalChoice, ApprovalId, ApprovalStore, Decision as ApprovalDecision,
};
use crate::store::standing::{Standing, StandingKey, StandingRef, Use};
use crate::store::{Claim, ClaimRequest, Owner, StoreError};
use crate::token::StateError;
use crate::token::candidates::{Candidates, Shown};
use crate::token::claims::{Claims, StandingTerms, arguments_digest};

/// What an adapter does with an intercepted call.
pub(crate) enum Decision {
    /// Answer with this; the inner service never sees the call.
    Reply(Reply),
    /// Forward the call as received (`body`), with a waiver: its policy's condition says this
    /// call needs no confirmation.
    Pass { body: Bytes, waived: Waived },
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
    /// The tool, for what an adapter adds of its own (the HTTP `Mcp-Param-*` header).
    pub(crate) tool: Arc<GuardedTool>,
    /// Under a standing approval: the uses it has left after this one.
    pub(crate) standing_left: Option<u32>,
}

/// Decides what happens to an intercepted call of `guarded`.
///
/// `principal` is what the request's extensions (or the local principal) say; `declared` is what
/// the transport declared outside the body, if it declares anything.
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
        Decision::Reply(_) => Ok(()),
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
            let event = match approved.standing_left {
                Some(left) => DecisionEvent::StandingUsed { confirmed, left },
                None => DecisionEvent::Accepted { confirmed },
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
            refused.event(&call.tool, Some(&principal)).trace();
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
        Some(Value::String(token)) => (Some(attempt.verify(token)?), token.as_str()),
        Some(_) => return Err(Refused::state(StateError::Format)),
    };
    // Whatever an earlier request declared, this one must be able to show (or answer) the form.
    engine::check_elicitation(call, guarded.policy.channel != Channel::Form)?;
    match claims {
        None => attempt.challenge().await,
        Some(claims) => attempt.settle(&claims, token).await,
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
    fn policy(&self) -> &ToolPolicy {
        &self.guarded.policy
    }

    /// What a resolver or a condition is given: who asks, the tool, the arguments as sent.
    fn lookup(&self) -> Lookup {
        Lookup {
            principal: self.principal.clone(),
            tool: self.call.tool.as_str().into(),
            arguments: Arc::new(self.guarded.confirmed_arguments(self.call, None)),
        }
    }

    /// The policy's condition on a first call: the waiver when it says no confirmation is needed.
    async fn waiver(&self) -> Result<Option<Waived>, Refused> {
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
    fn verify(&self, token: &str) -> Result<Claims, Refused> {
        self.config
            .sealer
            .verify(
                &self.guarded.binding,
                self.principal.subject(),
                self.config.store_epoch(),
                token,
                || self.guarded.request_digests(self.call),
            )
            .map_err(Refused::state)
    }

    /// Resolves candidates, seals a fresh state, and asks on the policy's channel.
    async fn challenge(&self) -> Result<Decision, Refused> {
        let (config, call, policy) = (self.config, self.call, self.policy());
        if policy.settlement == Settlement::Queued {
            // A grant keeps the arguments: too many to keep is refused now, before anyone
            // confirms.
            check_grant_arguments(&self.guarded.confirmed_arguments(call, None))?;
        }
        if let Some(limiter) = &config.challenge_limiter
            && let Err(wait) = limiter.check(&config.principal_key(self.principal))
        {
            return Err(Refused::new(
                RpcError::challenge_rate_limited(wait),
                "challenge rate limit",
            ));
        }
        let candidates = match self.candidates().await? {
            Ok(candidates) => candidates,
            Err(outcome) => return Ok(outcome),
        };
        let shown = candidates
            .iter()
            .map(|c| Shown::new(c.id(), c.version()))
            .collect();
        let shown = Candidates::new(shown)
            .map_err(|e| Refused::new(RpcError::internal(), format!("resolver returned {e}")))?;
        if policy.settlement == Settlement::Queued && policy.select_into.is_some() {
            // The grant keeps the arguments with the chosen id written in: the form is shown
            // only if every choice fits. The id longest in JSON makes the largest arguments.
            let longest = candidates
                .iter()
                .map(Candidate::id)
                .max_by_key(|id| serde_json::to_string(id).map_or(usize::MAX, |json| json.len()));
            if let Some(longest) = longest {
                check_grant_arguments(&self.guarded.confirmed_arguments(call, Some(longest)))?;
            }
        }
        let offer = self.standing_offer();
        let words = offer
            .as_ref()
            .map(|(scope, terms)| self.standing_words(scope, *terms));
        let (token, claims) = config
            .sealer
            .seal(
                &self.guarded.binding,
                self.guarded.request_digests(call),
                self.principal.subject(),
                config.store_epoch(),
                shown,
                offer.as_ref().map(|(_, terms)| *terms),
            )
            .map_err(|e| Refused::new(RpcError::internal(), format!("seal: {e}")))?;
        config.report(DecisionEvent::Challenged {
            tool: &call.tool,
            principal: self.principal,
            nonce: &claims.nonce,
            arguments: claims.arguments,
            candidates: candidates.len(),
            shown: config
                .logging()
                .then(|| shown_digest(&candidates, words.as_deref())),
        });
        let ask = match policy.channel {
            Channel::Form => Ask::Form(form::schema(policy, &candidates, words)),
            Channel::Browser { typed_id } => {
                let approval = self.approval(&claims, &candidates, typed_id, words);
                self.approvals()?
                    .propose(&approval)
                    .await
                    .map_err(store_failed)?;
                let id = approval.id;
                // Only where others decide: the caller has the URL already.
                if let Some(notifier) = &self.config.notifier
                    && !approval.approvers.is_caller_only()
                {
                    let notice = crate::notify::ApprovalNotice::of(&approval, &self.page_url(id))
                        .with_argument_values(|| form::argument_lines(call.arguments()));
                    notifier.approval_requested(notice);
                }
                return Ok(self.ask_page(id, &token, None));
            }
        };
        Ok(self.ask(ask, &token))
    }

    /// The candidates of a pick-one policy (none for a confirm-only one), or the outcome that
    /// ends the call when none or too many match.
    async fn candidates(&self) -> Result<Result<Vec<Candidate>, Decision>, Refused> {
        let policy = self.policy();
        let Some(resolver) = &policy.resolver else {
            return Ok(Ok(Vec::new()));
        };
        let found = resolver
            .resolve(self.lookup())
            .await
            .map_err(|e| Refused::new(RpcError::internal(), format!("resolver failed: {e}")))?;
        if found.is_empty() {
            step_refused(&self.call.tool, Some(self.principal), "no candidates");
            return Ok(Err(
                self.outcome(Outcome::NoCandidates, &policy.no_candidates_text)
            ));
        }
        if found.len() > policy.max_candidates {
            step_refused(&self.call.tool, Some(self.principal), "too many candidates");
            let text = format!(
                "{} records match; at most {} can be offered. Narrow the request; nothing was changed.",
                found.len(),
                policy.max_candidates
            );
            return Ok(Err(self.outcome(Outcome::TooManyCandidates, &text)));
        }
        if policy.versions == Versions::Required && found.iter().any(|c| c.version().is_none()) {
            return Err(Refused::new(
                RpcError::internal(),
                "resolver returned a candidate without a version: give each Candidate a \
                 version, or opt out with ToolPolicy::without_versions",
            ));
        }
        Ok(Ok(found))
    }

    /// The standing approval this call's form may offer: its scope and terms, if the policy
    /// offers one, the layer keeps them, and the call's arguments name a scope.
    fn standing_offer(&self) -> Option<(String, StandingTerms)> {
        let offer = self.policy().standing.as_ref()?;
        self.config.standing.as_ref()?;
        // A blank scope, or one too long to keep, is offered nothing: the form says "only this
        // time".
        let scope = offer.scope_of(&self.lookup())?;
        let terms = StandingTerms {
            scope: StandingTerms::scope_digest(&scope),
            for_secs: u32::try_from(offer.up_to.as_secs()).unwrap_or(u32::MAX),
            uses: offer.uses,
        };
        Some((scope, terms))
    }

    /// The standing option in words: what the user would allow.
    fn standing_words(&self, scope: &str, terms: StandingTerms) -> String {
        let times = match terms.uses {
            1 => "once more".to_owned(),
            n => format!("at most {n} times"),
        };
        format!(
            "Also allow {} on {} for the next {} ({times})",
            form::plain_label(self.call.tool.as_str(), 64),
            form::plain_label(scope, 80),
            form::duration_words(u64::from(terms.for_secs)),
        )
    }

    /// Grants the standing approval an accepted state offered and the user chose, after its
    /// confirmed call passed every check. Best effort: if the scope no longer matches or the store
    /// refuses, the next call simply gets the form again.
    async fn grant_standing(&self, claims: &Claims) {
        let (Some(terms), Some(offer), Some(store)) = (
            claims.standing,
            &self.policy().standing,
            &self.config.standing,
        ) else {
            return;
        };
        let tool = self.call.tool.as_str();
        let scope = offer.scope_of(&self.lookup());
        let Some(scope) = scope.filter(|s| StandingTerms::scope_digest(s) == terms.scope) else {
            step_refused(
                tool,
                Some(self.principal),
                "standing approval not granted: the call's scope is not the one offered",
            );
            return;
        };
        // What the state offered, and never more than the policy allows now.
        let secs = u64::from(terms.for_secs).min(offer.up_to.as_secs());
        let uses = terms.uses.min(offer.uses);
        let now = self.config.sealer.now();
        // Under the digest of the key that signs now (not the one that sealed the state): where
        // this instance lists it, and where every instance that signs with it looks first.
        let standing = Standing::new(
            &self.config.audience,
            self.config.principal_key(self.principal),
            self.principal.subject(),
            tool,
            &scope,
            now,
            now + std::time::Duration::from_secs(secs),
            uses,
        );
        match store.grant(&standing).await {
            Ok(()) => self.config.report(DecisionEvent::StandingGranted {
                tool,
                principal: self.principal,
                nonce: &claims.nonce,
                id: &standing.id,
                secs,
                uses,
            }),
            Err(e) => step_refused(
                tool,
                Some(self.principal),
                format!("standing approval not kept: {e}"),
            ),
        }
    }

    /// A first call covered by a live standing approval of this principal, tool and scope: run
    /// it without a form if it resolves to exactly one record, reserves one use and passes the
    /// revalidation (a refused call gives its use back). `None`: not covered (or not
    /// unambiguous), so the form is shown as usual.
    async fn under_standing(&self) -> Result<Option<Decision>, Refused> {
        let (Some(offer), Some(store)) = (&self.policy().standing, &self.config.standing) else {
            return Ok(None);
        };
        let (config, call, policy) = (self.config, self.call, self.policy());
        let Some(scope) = offer.scope_of(&self.lookup()) else {
            return Ok(None);
        };
        // Granted under the digest of any key of the ring: during a rotation, instances that
        // still sign with the old key grant under it. The signing key's first.
        let mut found = None;
        for principal_key in config.principal_keys(self.principal) {
            let key = StandingKey::new(&config.audience, principal_key, call.tool.as_str(), &scope);
            // A store that cannot answer covers nothing: the form is shown, as without a
            // standing approval (never a refusal the form would have avoided, never a pass).
            match store.find(key).await {
                Ok(Some(standing)) if standing.is_live(config.sealer.now()) => {
                    found = Some((key, principal_key, standing));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    step_refused(
                        call.tool.as_str(),
                        Some(self.principal),
                        format!("standing store unavailable, asking instead: {e}"),
                    );
                    return Ok(None);
                }
            }
        }
        let Some((key, principal_key, standing)) = found else {
            return Ok(None);
        };
        // As unambiguous as a confirmed call: exactly one record, versioned as the policy asks.
        let (chosen, version) = match &policy.resolver {
            None => (None, None),
            Some(resolver) => {
                let found = resolver.resolve(self.lookup()).await.map_err(|e| {
                    Refused::new(RpcError::internal(), format!("resolver failed: {e}"))
                })?;
                let [one] = found.as_slice() else {
                    return Ok(None);
                };
                if policy.versions == Versions::Required && one.version().is_none() {
                    return Ok(None);
                }
                let shown = vec![Shown::new(one.id(), one.version())];
                if Candidates::new(shown).is_err() {
                    return Ok(None);
                }
                (Some(one.id().to_owned()), one.version().map(str::to_owned))
            }
        };
        let tool = call.tool.as_str();
        let arguments = self.guarded.confirmed_arguments(call, chosen.as_deref());
        let digest = arguments_digest(Some(&arguments), None);
        let nonce = Nonce::random();
        // A log that is down refuses before a use is spent.
        config.log_ready()?;
        // A queued tool's grant is stored before the use is spent (a grant store that refuses
        // leaves the approval's uses as they were), bound to the standing approval so that
        // revoking it stops the grant if the work has not begun; withdrawn if the use is not
        // spent or the revalidation refuses.
        let grant = if policy.settlement == Settlement::Queued {
            check_grant_arguments(&arguments)?;
            let terms = GrantTerms {
                principal: principal_key,
                arguments_digest: digest,
                nonce,
                standing: Some(standing.reference()),
            };
            Some(
                self.issue_grant(terms, &arguments, &chosen, &version)
                    .await?,
            )
        } else {
            None
        };
        // The use is reserved before the revalidation, under this call's nonce, so racing calls
        // never hold more uses than the approval has; it is spent only if the call passes (and
        // given back otherwise: see `ReservedUse`).
        let spent = store
            .use_one(key, standing.id, nonce)
            .await
            .unwrap_or_else(|e| {
                step_refused(
                    tool,
                    Some(self.principal),
                    format!("standing store unavailable, asking instead: {e}"),
                );
                Use::Unknown
            });
        let left = match spent {
            Use::Used { left } => left,
            ended => {
                let outcome = match ended {
                    Use::Exhausted => "exhausted",
                    Use::Expired => "expired",
                    Use::Revoked => "revoked",
                    _ => "unknown",
                };
                config.report(DecisionEvent::StandingEnded {
                    tool,
                    principal: self.principal,
                    id: &standing.id,
                    outcome,
                });
                withdraw(config, grant).await;
                return Ok(None);
            }
        };
        let reserved = ReservedUse::new(Arc::clone(store), key, standing.id, nonce);
        if let Some(hook) = &policy.revalidate {
            let check = Revalidation {
                principal: self.principal.clone(),
                tool: tool.into(),
                arguments: Arc::new(arguments.clone()),
                chosen: chosen.clone(),
                seen_version: version.clone(),
            };
            if let Err(refusal) = hook.revalidate(check).await {
                step_refused(tool, Some(self.principal), refusal.reason());
                reserved.give_back().await;
                withdraw(config, grant).await;
                return Ok(Some(self.outcome(
                    Outcome::Revoked,
                    "The action is no longer allowed or its target changed; nothing was changed.",
                )));
            }
        }
        // Short of a bug the body rebuilds; if not, dropping `reserved` gives the use back.
        let body = message::forward_body(call, &arguments).ok_or_else(|| {
            Refused::new(RpcError::internal(), "confirmed body could not be rebuilt")
        })?;
        reserved.keep();
        if left == 0 {
            config.report(DecisionEvent::StandingEnded {
                tool,
                principal: self.principal,
                id: &standing.id,
                outcome: "exhausted",
            });
        }
        let confirmed = Confirmed {
            principal: self.principal.clone(),
            tool: tool.into(),
            chosen,
            version,
            nonce,
            expires_at: standing.expires_at,
            claimed: true,
            grant,
            selected_into: policy.select_into.as_deref().map(Arc::from),
            standing: Some(standing.id),
            arguments: digest,
        };
        Ok(Some(Decision::Forward(Box::new(Approved {
            body,
            confirmed,
            guard: None,
            tool: Arc::clone(self.guarded),
            standing_left: Some(left),
        }))))
    }

    /// Where the browser channel's approvals wait (the builder requires one with such a tool).
    fn approvals(&self) -> Result<&dyn ApprovalStore, Refused> {
        self.config.approvals.as_deref().ok_or_else(|| {
            Refused::new(
                RpcError::internal(),
                "browser-approved tool without an approval store",
            )
        })
    }

    /// The approval record the browser channel's page shows and decides.
    fn approval(
        &self,
        claims: &Claims,
        candidates: &[Candidate],
        typed_id: bool,
        standing: Option<String>,
    ) -> Approval {
        let policy = self.policy();
        Approval {
            id: ApprovalId::for_nonce(&claims.nonce),
            audience: self.config.audience.clone(),
            nonce: claims.nonce,
            principal: claims.principal,
            subject: self.principal.subject().to_owned(),
            tool: self.call.tool.as_str().to_owned(),
            arguments: Some(claims.arguments),
            message: self.guarded.message(self.call).into_owned(),
            choices: candidates
                .iter()
                .map(|c| {
                    // The same cleaning as the form's labels: one for every channel.
                    let label =
                        form::plain_label(c.label().unwrap_or(c.id()), policy.max_label_chars);
                    ApprovalChoice::new(c.id(), &label, c.version().map(str::to_owned))
                })
                .collect(),
            typed: typed_id,
            standing,
            expires_at: std::time::UNIX_EPOCH + std::time::Duration::from_secs(claims.expires_at),
            approvers: policy.approvers.clone(),
            endorsements: Vec::new(),
            created_at: self.config.sealer.now(),
            decision: None,
        }
    }

    /// Approval `id`'s page.
    fn page_url(&self, id: ApprovalId) -> String {
        let base = self.config.approval_url.as_deref().unwrap_or_default();
        format!("{base}{}", id.to_hex())
    }

    /// The browser channel's question: open approval `id`'s page; `status`, where approvers
    /// other than the caller decide, says how far they got.
    fn ask_page(&self, id: ApprovalId, token: &str, status: Option<&str>) -> Decision {
        let url = self.page_url(id);
        let ask: Ask<'_, ()> = Ask::Url {
            url: &url,
            elicitation_id: &id.to_hex(),
        };
        let message = self.guarded.message(self.call);
        match status {
            Some(status) => self.ask_with(ask, token, &format!("{message} {status}")),
            None => self.ask_with(ask, token, &message),
        }
    }

    /// The `input_required` answer asking `ask`, with the state `token`.
    fn ask<S: serde::Serialize>(&self, ask: Ask<'_, S>, token: &str) -> Decision {
        self.ask_with(ask, token, &self.guarded.message(self.call))
    }

    /// The `input_required` answer asking `ask` with `message`, and the state `token`.
    fn ask_with<S: serde::Serialize>(
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

    /// A retry: read the answer on the policy's channel, then act on it. `token` is the verified
    /// state, asked with again while the answer is pending.
    async fn settle(&self, claims: &Claims, token: &str) -> Result<Decision, Refused> {
        match self.verdict(claims).await? {
            Verdict::AskAgain(reason) => {
                if let Some(reason) = reason {
                    step_refused(
                        &self.call.tool,
                        Some(self.principal),
                        format!("asked again: {reason}"),
                    );
                }
                self.challenge().await
            }
            Verdict::Pending { status } => {
                step_refused(
                    &self.call.tool,
                    Some(self.principal),
                    "not decided on the page yet",
                );
                Ok(self.ask_page(
                    ApprovalId::for_nonce(&claims.nonce),
                    token,
                    status.as_deref(),
                ))
            }
            Verdict::Withdrawn(reason) => self.withdrawn(claims, reason).await,
            Verdict::Cancel => self.cancel(claims).await,
            Verdict::Decline { unconfirmed } => self.decline(claims, unconfirmed).await,
            Verdict::Accept { chosen, standing } => self.accept(claims, chosen, standing).await,
        }
    }

    /// What the client's answer comes to: read strictly from the retry, and on the browser
    /// channel from the page's recorded decision.
    async fn verdict(&self, claims: &Claims) -> Result<Verdict, Refused> {
        let policy = self.policy();
        let responses = self.call.input_responses();
        let answer = form::read_answer(policy, &claims.candidates, responses);
        let browser = matches!(policy.channel, Channel::Browser { .. });
        Ok(match answer {
            Answer::Missing => Verdict::AskAgain(None),
            Answer::AskAgain(reason) => Verdict::AskAgain(Some(reason)),
            Answer::Invalid(reason) => {
                return Err(Refused::new(
                    RpcError::invalid_input_responses(),
                    format!("inputResponses: {reason}"),
                ));
            }
            Answer::Cancel => Verdict::Cancel,
            Answer::Decline => Verdict::Decline { unconfirmed: false },
            Answer::Unconfirmed => Verdict::Decline { unconfirmed: true },
            Answer::Accept { .. } if browser => self.page_decision(claims).await?,
            // A standing approval the state did not offer is not an answer to this form.
            Answer::Accept { standing: true, .. } if claims.standing.is_none() => {
                Verdict::AskAgain(Some("a standing approval that was not offered"))
            }
            Answer::Accept { chosen, standing } => Verdict::Accept { chosen, standing },
        })
    }

    /// The browser channel's answer: the decision recorded on the page for this state.
    async fn page_decision(&self, claims: &Claims) -> Result<Verdict, Refused> {
        let id = ApprovalId::for_nonce(&claims.nonce);
        let approval = self.approvals()?.approval(id).await.map_err(store_failed)?;
        // The state verified, so its approval was proposed; gone means a store that lost it.
        // A record that is not this state's (another nonce or principal) decides nothing.
        let Some(approval) = approval.filter(|a| {
            a.nonce == claims.nonce
                && a.principal == claims.principal
                && a.audience == self.config.audience
        }) else {
            return Err(Refused::state(StateError::Consumed));
        };
        match approval.decision.clone() {
            None => {
                // Undecided on the page, but the client may have spent the state already
                // (declined it): a used state gets the one answer every replay gets, never the
                // page again.
                if self
                    .config
                    .store
                    .is_used(claims.nonce, claims.principal)
                    .await
                    .map_err(store_failed)?
                {
                    return Err(Refused::replay(
                        claims.nonce,
                        "consumed",
                        StateError::Consumed,
                    ));
                }
                let status = (!approval.approvers.is_caller_only()).then(|| {
                    format!(
                        "Waiting for approval by {}: {} of {} so far.",
                        if approval.approvers.admits_caller() {
                            "an approver"
                        } else {
                            "someone other than you"
                        },
                        approval.endorsements.len(),
                        approval.approvers.required_approvals()
                    )
                });
                Ok(Verdict::Pending { status })
            }
            Some(ApprovalDecision::Declined) => Ok(Verdict::Decline { unconfirmed: false }),
            Some(ApprovalDecision::Approved { chosen, standing }) => {
                if let Err(reason) = self.approvers_hold(&approval).await? {
                    return Ok(Verdict::Withdrawn(reason));
                }
                // The page offers the standing approval only where the state did; a record that
                // says otherwise is not an answer to this state.
                if standing && claims.standing.is_none() {
                    return Err(Refused::new(
                        RpcError::invalid_input_responses(),
                        "the page's decision names a standing approval the state did not offer",
                    ));
                }
                if self.policy().resolver.is_none() {
                    return Ok(Verdict::Accept {
                        chosen: None,
                        standing,
                    });
                }
                // Only a signed candidate; the page could offer nothing else, and this checks it.
                if !claims.candidates.iter().any(|c| c.id == chosen) {
                    return Err(Refused::new(
                        RpcError::invalid_input_responses(),
                        "the page's choice is not a signed candidate",
                    ));
                }
                Ok(Verdict::Accept {
                    chosen: Some(chosen),
                    standing,
                })
            }
        }
    }

    /// Whether the approvals recorded on `approval` still suffice as the approved call is about
    /// to run: made under the rule the policy names now, by as many distinct approvers as it
    /// requires, none of them the caller where it excludes them, each with a passkey where it
    /// requires one, and each still an approver by the policy's [`recheck`](ToolPolicy::recheck_approvers).
    /// `Err(reason)`: they do not.
    async fn approvers_hold(
        &self,
        approval: &Approval,
    ) -> Result<Result<(), &'static str>, Refused> {
        let rule = &self.policy().approvers;
        if approval.approvers != *rule {
            return Ok(Err("the approver rule changed since the approval was made"));
        }
        let endorsements = &approval.endorsements;
        let mut subjects: Vec<&str> = endorsements.iter().map(|e| e.subject.as_str()).collect();
        subjects.sort_unstable();
        subjects.dedup();
        if rule.is_caller_only() && endorsements.is_empty() {
            // Recorded before approvers: the caller's own decision, as the page checked it.
            return Ok(Ok(()));
        }
        if subjects.len() != endorsements.len()
            || endorsements.len() < usize::from(rule.required_approvals())
        {
            return Ok(Err("fewer distinct approvals than the rule requires"));
        }
        let chosen = match &approval.decision {
            Some(ApprovalDecision::Approved { chosen, .. }) => Some(chosen.as_str()),
            _ => None,
        };
        for endorsement in endorsements {
            // The caller is who sends this retry: their subject, whatever the record says of
            // itself.
            let by_caller = endorsement.caller || endorsement.subject == self.principal.subject();
            if by_caller && !rule.admits_caller() {
                return Ok(Err("the caller approved their own request"));
            }
            if chosen.is_some_and(|chosen| endorsement.chosen != chosen) {
                return Ok(Err("approvals of different records"));
            }
            if rule.needs_passkey() && endorsement.passkey.is_none() {
                return Ok(Err("an approval without the passkey the rule requires"));
            }
            if rule.still_names(&endorsement.subject) == Some(false) {
                return Ok(Err("an approver the rule does not name"));
            }
            if let Some(check) = &self.policy().recheck_approvers {
                let query = ApproverQuery {
                    approver: endorsement.subject.clone(),
                    tool: self.call.tool.as_str().to_owned(),
                    caller: self.principal.clone(),
                };
                match check.still_approver(query).await {
                    Ok(true) => {}
                    Ok(false) => return Ok(Err("an approver may no longer approve")),
                    Err(e) => {
                        return Err(Refused::new(
                            RpcError::internal(),
                            format!("approver re-check failed: {e}"),
                        ));
                    }
                }
            }
        }
        Ok(Ok(()))
    }

    /// Approved, but the approvals no longer hold (`reason`): the confirmation is spent, as
    /// for a decline, and the call refused with the `revoked` outcome.
    async fn withdrawn(&self, claims: &Claims, reason: &'static str) -> Result<Decision, Refused> {
        let request = claim_request(self.config, claims);
        claim(self.config, claims, &request).await?;
        let _ = self.config.store.complete(&request).await;
        self.config.report(DecisionEvent::Refused {
            tool: &self.call.tool,
            principal: Some(self.principal),
            nonce: Some(&claims.nonce),
            class: Some(Cow::Borrowed("approval_withdrawn")),
            reason: Cow::Borrowed(reason),
        });
        Ok(self.outcome(
            Outcome::Revoked,
            "The approval no longer holds (an approver's right to approve was withdrawn); \
             nothing was changed. Call again to ask anew.",
        ))
    }

    /// A cancel: nothing is consumed, so the same state may be answered again, unless it was
    /// already used, which is refused like any other replay.
    async fn cancel(&self, claims: &Claims) -> Result<Decision, Refused> {
        unused(self.config, claims).await?;
        self.config.report(DecisionEvent::Cancelled {
            tool: &self.call.tool,
            principal: self.principal,
            nonce: &claims.nonce,
        });
        Ok(self.outcome(
            Outcome::Cancelled,
            "The confirmation was cancelled; nothing was changed.",
        ))
    }

    /// A decline (or an acceptance with `confirm: false`): consume the nonce, run nothing.
    async fn decline(&self, claims: &Claims, unconfirmed: bool) -> Result<Decision, Refused> {
        let request = claim_request(self.config, claims);
        claim(self.config, claims, &request).await?;
        // Best effort: if completing fails the entry stays InFlight, which refuses replays just
        // the same.
        let _ = self.config.store.complete(&request).await;
        self.config.report(DecisionEvent::Declined {
            tool: &self.call.tool,
            principal: self.principal,
            nonce: &claims.nonce,
            unconfirmed,
        });
        Ok(self.outcome(Outcome::Declined, "The user declined; nothing was changed."))
    }

    /// An acceptance: claim, revalidate, and hand the rewritten call over to be forwarded.
    async fn accept(
        &self,
        claims: &Claims,
        chosen: Option<String>,
        standing: bool,
    ) -> Result<Decision, Refused> {
        let (config, call, policy) = (self.config, self.call, self.policy());
        // A log that is down refuses before anything is claimed: no confirmation is spent.
        config.log_ready()?;
        let principal = self.principal.clone();
        let request = claim_request(config, claims);
        // The version of the record the user chose, exactly as the state signed it.
        let version = chosen
            .as_deref()
            .and_then(|id| claims.candidates.version_of(id))
            .map(str::to_owned);
        let arguments = self.guarded.confirmed_arguments(call, chosen.as_deref());
        // A queued tool's grant is stored before the claim, so a full or unavailable grant store
        // refuses with the confirmation still unspent. Its id leaves this function only with the
        // forwarded call; if the claim fails, it is withdrawn.
        let grant = if policy.settlement == Settlement::Queued {
            unused(config, claims).await?;
            let terms = GrantTerms {
                principal: claims.principal,
                arguments_digest: claims.arguments,
                nonce: claims.nonce,
                standing: None,
            };
            Some(
                self.issue_grant(terms, &arguments, &chosen, &version)
                    .await?,
            )
        } else {
            None
        };
        let mut handler_call = None;
        let guard = if policy.settlement == Settlement::ByHandler {
            // The handler claims inside the transaction that makes the change; a state in a
            // call here, or already used (burned, or claimed by an earlier run), never reaches
            // it again.
            handler_call = Some(
                HandlerCall::begin(&config.handler_calls, claims.nonce).ok_or_else(|| {
                    Refused::replay(claims.nonce, "in_flight", StateError::InFlight)
                })?,
            );
            unused(config, claims).await?;
            None
        } else {
            if let Err(refused) = claim(config, claims, &request).await {
                withdraw(config, grant).await;
                return Err(refused);
            }
            // From here on the nonce is burned whatever happens: the guard completes it when
            // dropped.
            Some(CompletionGuard::new(Arc::clone(&config.store), request))
        };
        if let Some(hook) = &policy.revalidate {
            let check = Revalidation {
                principal: principal.clone(),
                tool: call.tool.as_str().into(),
                arguments: Arc::new(arguments.clone()),
                chosen: chosen.clone(),
                seen_version: version.clone(),
            };
            if let Err(refusal) = hook.revalidate(check).await {
                DecisionEvent::Revoked {
                    tool: &call.tool,
                    principal: &principal,
                    nonce: &claims.nonce,
                    reason: refusal.reason(),
                }
                .trace();
                withdraw(config, grant).await;
                if guard.is_none() {
                    // Nothing was claimed yet (the handler was to claim): burn the state all
                    // the same.
                    burn(config, &request).await;
                }
                drop(guard);
                return Ok(self.outcome(
                    Outcome::Revoked,
                    "The confirmed action is no longer allowed or its target changed; nothing was changed.",
                ));
            }
        }
        // The handler claims in its own transaction; once its response is over the layer
        // checks that it did, and burns the nonce if not.
        let guard = match (guard, handler_call) {
            (None, Some(handler_call)) => Some(CompletionGuard::after_handler(
                Arc::clone(&config.store),
                request,
                call.tool.as_str().into(),
                handler_call,
            )),
            (guard, _) => guard,
        };
        if standing {
            self.grant_standing(claims).await;
        }
        // Short of a bug the body reads as it was classified; if not, the guard burns the nonce
        // and nothing runs.
        let body = message::forward_body(call, &arguments).ok_or_else(|| {
            Refused::new(RpcError::internal(), "confirmed body could not be rebuilt")
        })?;
        let confirmed = Confirmed {
            principal,
            tool: call.tool.as_str().into(),
            chosen,
            version,
            nonce: claims.nonce,
            expires_at: request.expires_at,
            claimed: policy.settlement != Settlement::ByHandler,
            grant,
            selected_into: policy.select_into.as_deref().map(Arc::from),
            standing: None,
            arguments: arguments_digest(Some(&arguments), None),
        };
        Ok(Decision::Forward(Box::new(Approved {
            body,
            confirmed,
            guard,
            tool: Arc::clone(self.guarded),
            standing_left: None,
        })))
    }

    /// Stores a queued tool's grant for this confirmation. A grant store that refuses leaves the
    /// confirmation unspent (the claim comes after), so the same answer can be sent again.
    async fn issue_grant(
        &self,
        terms: GrantTerms,
        arguments: &Value,
        chosen: &Option<String>,
        version: &Option<String>,
    ) -> Result<GrantId, Refused> {
        let config = self.config;
        let store = config.grants.as_ref().ok_or_else(|| {
            Refused::new(RpcError::internal(), "queued tool without a grant store")
        })?;
        check_grant_arguments(arguments)?;
        let now = config.sealer.now();
        let grant = Grant {
            id: GrantId::random(),
            audience: config.audience.clone(),
            principal: terms.principal,
            subject: self.principal.subject().to_owned(),
            tool: self.call.tool.as_str().to_owned(),
            arguments: arguments.clone(),
            arguments_digest: terms.arguments_digest,
            chosen: chosen.clone(),
            version: version.clone(),
            nonce: terms.nonce,
            issued_at: now,
            expires_at: now + config.grant_ttl,
            state: GrantState::Granted,
            standing: terms.standing,
        };
        store.issue(&grant).await.map_err(|e| {
            let error = match &e {
                GrantStoreError::OverBudget { retry_after } => RpcError::over_budget(*retry_after),
                _ => RpcError::store_unavailable(),
            };
            Refused::new(error, format!("grant store: {e}"))
        })?;
        config
            .grant_log()
            .report(DecisionEvent::GrantIssued { grant: &grant }, now);
        Ok(grant.id)
    }

    /// A result that ends the call with `outcome` and `text`, nothing run.
    fn outcome(&self, outcome: Outcome, text: &str) -> Decision {
        let result = protocol::outcome_result(outcome, text, self.config.server_info.as_ref());
        Decision::Reply(Reply::result(&self.call.id, &result))
    }
}

/// A digest of what the user was shown: each candidate's id, version and label as the form
/// cleaned it, and the standing option's words.
fn shown_digest(candidates: &[Candidate], standing: Option<&str>) -> [u8; 32] {
    event::shown_digest(
        candidates.iter().map(|c| (c.id(), c.version(), c.label())),
        standing,
    )
}

/// What a grant is issued on: the principal's key, the digest of the arguments approved, the
/// nonce of the confirmation (or of the standing approval's use), and the standing approval it
/// was issued under, if any.
struct GrantTerms {
    principal: PrincipalKey,
    arguments_digest: [u8; 32],
    nonce: Nonce,
    standing: Option<StandingRef>,
}

/// The most a queued call's arguments may weigh in its grant, as JSON.
const MAX_GRANT_ARGUMENTS_BYTES: usize = 64 * 1024;

/// Refuses arguments too large to keep in a grant.
fn check_grant_arguments(arguments: &Value) -> Result<(), Refused> {
    if serde_json::to_vec(arguments).map_or(usize::MAX, |json| json.len())
        > MAX_GRANT_ARGUMENTS_BYTES
    {
        return Err(Refused::new(
            RpcError::arguments_too_large_to_queue(),
            "arguments too large to keep in a grant",
        ));
    }
    Ok(())
}

/// Withdraws a grant that will not be forwarded (best effort: its id never left this process,
/// so nothing can run it either way).
async fn withdraw(config: &Config, grant: Option<GrantId>) {
    if let (Some(store), Some(id)) = (&config.grants, grant) {
        let _ = store.revoke(id).await;
    }
}

/// Marks a nonce used without running anything (best effort: a failure leaves it fresh, and a
/// `claimed_by_handler` tool's used state is refused before its handler, whose own claim fails
/// too).
async fn burn(config: &Config, request: &ClaimRequest) {
    let _ = completion::burn(&*config.store, request).await;
}

/// A claim of the state's nonce by a fresh owner, charged to the principal the state names, kept
/// until the state can no longer verify.
fn claim_request(config: &Config, claims: &Claims) -> ClaimRequest {
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
async fn unused(config: &Config, claims: &Claims) -> Result<(), Refused> {
    let used = config
        .store
        .is_used(claims.nonce, claims.principal)
        .await
        .map_err(store_failed)?;
    if used {
        return Err(Refused::replay(claims.nonce, "used", StateError::Consumed));
    }
    Ok(())
}

/// Claims the state's nonce; any answer but [`Claim::Claimed`] is a refusal.
async fn claim(config: &Config, claims: &Claims, request: &ClaimRequest) -> Result<(), Refused> {
    match config.store.claim(request).await.map_err(store_failed)? {
        Claim::Claimed => Ok(()),
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
fn store_failed(e: StoreError) -> Refused {
    let error = match &e {
        StoreError::OverBudget { retry_after } => RpcError::over_budget(*retry_after),
        _ => RpcError::store_unavailable(),
    };
    Refused::new(error, format!("replay store: {e}"))
}
