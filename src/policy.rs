//! Per-tool confirmation policies: what the user is asked, and the hooks that look at live data.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use crate::approvers::Approvers;
use crate::kernel::BoxFuture;
use crate::narrow::{MAX_NARROWABLE, Narrowing};
use crate::principal::Principal;
use crate::token::MAX_CANDIDATES;

/// One record the user may pick, e.g. one of three notes titled "Groceries".
///
/// Give every candidate a [version](Candidate::with_version): the signed state binds the id *and*
/// the version, and the revalidation hook gets the version back, so an approval means "this
/// record as it was shown", not "whatever holds this id when the answer arrives".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    id: String,
    label: Option<String>,
    version: Option<String>,
}

impl Candidate {
    /// `text` as the form shows a label: one line of plain text of at most `max_chars`
    /// characters, control, format and other invisible characters dropped, runs of whitespace
    /// one space, a cut text ending in `…`. For a resolver that must tell whether the labels
    /// it builds will read apart once shown (the gateway's lookups).
    pub fn shown_label(text: &str, max_chars: usize) -> String {
        crate::kernel::plain_label(text, max_chars)
    }

    /// A candidate shown by its id alone.
    ///
    /// An id is shown and sent back exactly, so it must be printable: a resolver that returns an
    /// empty id, one over [`MAX_CANDIDATE_ID_LEN`](crate::token::MAX_CANDIDATE_ID_LEN) bytes, or
    /// one with a control, format or zero-width character (or whitespace other than a space) has
    /// the call refused, nothing shown.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            label: None,
            version: None,
        }
    }

    /// A candidate shown with a human-readable label. Labels are reduced to plain text and capped
    /// in length before they reach the form.
    ///
    /// Put server-side facts first (id, owner, modification time) and keep text written by users
    /// short: a label is what the user decides on, and a title can say anything.
    pub fn labelled(id: impl Into<String>, label: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            label: Some(label.into()),
            version: None,
        }
    }

    /// The record's version as shown: an opaque fingerprint that changes whenever the record does
    /// (a content hash, a generation counter, an ETag), at most 128 bytes.
    ///
    /// It is bound into the state and handed to the revalidation hook as
    /// [`Revalidation::seen_version`], which compares it with the live record.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// The id written into the call when this candidate is chosen.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The label, if any.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The version, if any.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

/// What a [`Resolver`] is asked: which records does this principal's call refer to?
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Lookup {
    /// The authenticated principal.
    pub principal: Principal,
    /// The tool being called.
    pub tool: Arc<str>,
    /// The call's `arguments` (`{}` when absent).
    pub arguments: Arc<Value>,
}

/// What a [`Revalidate`] hook is asked right before the confirmed call runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Revalidation {
    /// The authenticated principal making the confirmed retry.
    pub principal: Principal,
    /// The tool being called.
    pub tool: Arc<str>,
    /// The arguments the tool will receive (with the chosen id written in).
    pub arguments: Arc<Value>,
    /// The id the user chose, for pick-one policies.
    pub chosen: Option<String>,
    /// The version of the chosen record as the user saw it ([`Candidate::with_version`]); `None`
    /// for confirm-only policies and for policies that opted out with
    /// [`ToolPolicy::without_versions`].
    ///
    /// Refuse when the live record's version differs: the user approved something else.
    pub seen_version: Option<String>,
}

/// The revalidation of a pick-one policy that gave none: the resolver, asked again.
struct ResolveAgain {
    resolver: Arc<dyn Resolver>,
    /// The argument the layer writes the choice into: not part of what the resolver was asked.
    select_into: Option<String>,
}

impl Revalidate for ResolveAgain {
    fn revalidate(&self, check: Revalidation) -> BoxFuture<'static, Result<(), Refusal>> {
        // The arguments as the resolver first saw them: without the choice the layer wrote in
        // (copied only when there is one to take out).
        let arguments = match (&self.select_into, &*check.arguments) {
            (Some(field), Value::Object(map)) if map.contains_key(field) => {
                let mut map = map.clone();
                map.remove(field);
                Arc::new(Value::Object(map))
            }
            _ => Arc::clone(&check.arguments),
        };
        let lookup = Lookup {
            principal: check.principal,
            tool: check.tool,
            arguments,
        };
        let candidates = self.resolver.resolve(lookup);
        Box::pin(async move {
            let candidates = candidates
                .await
                .map_err(|e| Refusal::new(format!("resolving again failed: {e}")))?;
            let still = candidates.iter().any(|c| {
                Some(c.id()) == check.chosen.as_deref()
                    && c.version() == check.seen_version.as_deref()
            });
            if still {
                Ok(())
            } else {
                Err(Refusal::new(
                    "the chosen record is gone or changed since the form (resolved again)",
                ))
            }
        })
    }
}

/// A failure of a resolver: the call is refused with an internal error, nothing is shown.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl PolicyError {
    /// Wraps any error.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// Why a revalidation refused the confirmed call. Logged, never sent to the client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    reason: Cow<'static, str>,
}

impl Refusal {
    /// A refusal with a reason for the audit log.
    pub fn new(reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Finds the records a call may refer to, for the principal making it.
///
/// Implemented for async closures `Fn(Lookup) -> impl Future<Output = Result<Vec<Candidate>, PolicyError>>`.
pub trait Resolver: Send + Sync + 'static {
    /// The candidates, in the order they should be shown.
    fn resolve(&self, lookup: Lookup) -> BoxFuture<'static, Result<Vec<Candidate>, PolicyError>>;
}

impl<F, Fut> Resolver for F
where
    F: Fn(Lookup) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<Candidate>, PolicyError>> + Send + 'static,
{
    fn resolve(&self, lookup: Lookup) -> BoxFuture<'static, Result<Vec<Candidate>, PolicyError>> {
        Box::pin(self(lookup))
    }
}

/// The last check before a confirmed call runs: re-authorize the principal, re-load the live record
/// and re-check that it is still where the confirmation said it was.
///
/// It runs after the nonce is claimed, so a refusal burns the confirmation.
pub trait Revalidate: Send + Sync + 'static {
    /// `Ok` lets the call through.
    fn revalidate(&self, check: Revalidation) -> BoxFuture<'static, Result<(), Refusal>>;
}

impl<F, Fut> Revalidate for F
where
    F: Fn(Revalidation) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Refusal>> + Send + 'static,
{
    fn revalidate(&self, check: Revalidation) -> BoxFuture<'static, Result<(), Refusal>> {
        Box::pin(self(check))
    }
}

/// What an [`ApproverCheck`] is asked: whether `approver`, who approved `caller`'s call of
/// `tool`, may still approve it now, as the approved call is about to run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApproverQuery {
    /// The approver's subject, as the page recorded it.
    pub approver: String,
    /// The tool.
    pub tool: String,
    /// Who asked for the call.
    pub caller: Principal,
}

/// Re-checks, as an approved call is about to run, that each approver who approved it may still
/// approve: a removed role, a disabled account, a revoked delegation. The layer cannot know
/// these for a role (the approver is not the one sending the retry), so give this hook
/// wherever the rule names a role.
///
/// `Ok(false)` for any approver refuses the call with the `revoked` outcome and spends the
/// confirmation; `Err` refuses it too. Implemented for async closures
/// `Fn(ApproverQuery) -> impl Future<Output = Result<bool, PolicyError>>`.
pub trait ApproverCheck: Send + Sync + 'static {
    /// Whether `query.approver` may still approve.
    fn still_approver(&self, query: ApproverQuery)
    -> BoxFuture<'static, Result<bool, PolicyError>>;
}

impl<F, Fut> ApproverCheck for F
where
    F: Fn(ApproverQuery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool, PolicyError>> + Send + 'static,
{
    fn still_approver(
        &self,
        query: ApproverQuery,
    ) -> BoxFuture<'static, Result<bool, PolicyError>> {
        Box::pin(self(query))
    }
}

/// Decides, call by call, whether a call needs a confirmation at all: e.g. only deletes in shared
/// workspaces, or only bulk deletes above a limit.
///
/// Run by the layer on every first call of the tool, over the exact arguments and the
/// authenticated principal. `Ok(false)`: the call goes through with a [`Waived`](crate::Waived)
/// bound to exactly these arguments; `Ok(true)`: the usual confirmation; `Err`: refused.
///
/// Implemented for async closures `Fn(Lookup) -> impl Future<Output = Result<bool, PolicyError>>`.
pub trait Condition: Send + Sync + 'static {
    /// Whether this call must be confirmed.
    fn needs_confirmation(&self, lookup: Lookup) -> BoxFuture<'static, Result<bool, PolicyError>>;
}

impl<F, Fut> Condition for F
where
    F: Fn(Lookup) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool, PolicyError>> + Send + 'static,
{
    fn needs_confirmation(&self, lookup: Lookup) -> BoxFuture<'static, Result<bool, PolicyError>> {
        Box::pin(self(lookup))
    }
}

/// What a call's arguments fall in, for a [standing approval](ToolPolicy::standing): e.g. its
/// workspace. The scope is shown to the user ("also allow notes_delete on `<scope>`…") and a
/// standing approval covers only later calls of the same scope, so return the narrowest resource
/// the arguments name, normalized (one spelling per resource: resolve paths and URIs first).
pub trait Scope: Send + Sync + 'static {
    /// The call's scope; `None`: this call cannot be covered by a standing approval.
    fn scope_of(&self, lookup: &Lookup) -> Option<String>;
}

impl<F> Scope for F
where
    F: Fn(&Lookup) -> Option<String> + Send + Sync + 'static,
{
    fn scope_of(&self, lookup: &Lookup) -> Option<String> {
        self(lookup)
    }
}

/// The widest standing approval a policy lets the user give: how long, how many later calls, and
/// which scope of the arguments it covers.
#[derive(Clone)]
pub(crate) struct StandingOffer {
    pub(crate) up_to: std::time::Duration,
    pub(crate) uses: u32,
    pub(crate) scope: Arc<dyn Scope>,
}

impl StandingOffer {
    /// The call's scope as the policy's function names it, if a standing approval may cover
    /// it. A blank scope (an `unwrap_or_default()` on a missing or misspelt argument) covers
    /// nothing: granted, it would cover every other call whose scope is blank too. Nor does one
    /// too long to keep.
    pub(crate) fn scope_of(&self, lookup: &Lookup) -> Option<String> {
        self.scope.scope_of(lookup).filter(|scope| {
            !scope.trim().is_empty()
                && scope.len() <= crate::store::standing::MAX_STANDING_SCOPE_BYTES
        })
    }
}

impl fmt::Debug for StandingOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandingOffer")
            .field("up_to", &self.up_to)
            .field("uses", &self.uses)
            .finish_non_exhaustive()
    }
}

/// The form field that offers a standing approval besides "only this time".
pub(crate) const REMEMBER_FIELD: &str = "remember";

/// The longest standing approval a policy may offer.
pub const MAX_STANDING_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How the choice among candidates is rendered in the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChoiceStyle {
    /// A titled single-select (`oneOf` of `{const, title}`), labels shown to the user.
    Titled,
    /// A plain `enum` of ids.
    Plain,
}

/// Where the user answers a confirmation. The challenge, the reading of the answer and the
/// asking-again all go through it, so a new channel is one more variant, not a copy of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// A form elicitation the client shows.
    Form,
    /// The layer's approval page, in the user's browser (a URL-mode elicitation).
    Browser {
        /// Approving requires typing the chosen record's id.
        typed_id: bool,
    },
}

/// What follows an accepted, claimed confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// The layer claims the nonce and forwards the call (the default).
    Forward,
    /// The layer forwards the call unclaimed; the handler claims the nonce inside the
    /// transaction that makes the change.
    ByHandler,
    /// The layer records a grant, claims the nonce and forwards the call; a worker runs the
    /// grant later.
    Queued,
}

/// Whether every candidate must carry a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Versions {
    /// A candidate without one is a resolver bug: the call is refused.
    Required,
    /// The explicit opt-out: the state binds ids only.
    Optional,
}

/// How one destructive tool is confirmed.
///
/// ```
/// use mcp_confirm::{Candidate, Lookup, PolicyError, ToolPolicy};
///
/// let policy = ToolPolicy::pick_one(|lookup: Lookup| async move {
///     let title = lookup.arguments["title"].as_str().unwrap_or_default().to_owned();
///     Ok::<_, PolicyError>(vec![
///         Candidate::labelled("note-3", format!("{title} (Monday)")).with_version("v7"),
///     ])
/// })
/// .message("Choose one matching note and confirm deletion.")
/// .input_key("delete_choice")
/// .choice_field("note_id")
/// .select_into("note_id");
/// # let _ = policy;
/// ```
#[derive(Clone)]
pub struct ToolPolicy {
    pub(crate) resolver: Option<Arc<dyn Resolver>>,
    pub(crate) revalidate: Option<Arc<dyn Revalidate>>,
    pub(crate) when: Option<Arc<dyn Condition>>,
    pub(crate) message: String,
    /// The form's message also summarises the call's arguments: every confirm-only policy (the
    /// layer sets it when it builds).
    pub(crate) describe_call: bool,
    pub(crate) input_key: String,
    pub(crate) choice_field: String,
    pub(crate) choice_title: String,
    pub(crate) confirm_field: String,
    pub(crate) confirm_title: String,
    pub(crate) select_into: Option<String>,
    pub(crate) select_header: Option<String>,
    pub(crate) style: ChoiceStyle,
    pub(crate) max_candidates: usize,
    pub(crate) max_label_chars: usize,
    pub(crate) no_candidates_text: String,
    pub(crate) settlement: Settlement,
    pub(crate) versions: Versions,
    pub(crate) channel: Channel,
    /// The standing approval the form may offer besides "only this time".
    pub(crate) standing: Option<StandingOffer>,
    /// Who decides on the approval page, and how many.
    pub(crate) approvers: Approvers,
    /// Re-checks each approver as the approved call is about to run.
    pub(crate) recheck_approvers: Option<Arc<dyn ApproverCheck>>,
    /// The group of tools whose waiting calls the approval page may show and decide together.
    pub(crate) batch_group: Option<String>,
    /// The arguments an approver may narrow before approving, and how.
    pub(crate) narrowing: Vec<(String, Narrowing)>,
    /// Which of the keys the build-time rules are about were given, as given (`queued` and
    /// `claimed_by_handler` both, say, though the settlement keeps the last): the rules refuse
    /// the combination instead of one silently winning.
    given: Given,
}

/// The keys given to a policy that its fields alone do not tell apart.
#[derive(Debug, Clone, Copy, Default)]
struct Given {
    /// A setting only a pick-one policy uses (the choice's field, title, style, limits,
    /// versions or the no-candidates text).
    choice_settings: bool,
    queued: bool,
    claimed_by_handler: bool,
    /// The form's message and checkbox title, as given (else the layer words them).
    message: bool,
    confirm_title: bool,
}

impl ToolPolicy {
    /// The rule an answer to this tool's question is judged by, canonical, where it is not the
    /// plain form answered by the caller: the channel and who approves. A state binds it, so a
    /// state issued under a stricter rule (the approval page, four eyes, a passkey) is asked
    /// again, never settled, under a relaxed one.
    pub(crate) fn rule(&self) -> Option<String> {
        match self.channel {
            Channel::Form if self.approvers == Approvers::caller() => None,
            Channel::Form => Some(format!("form;{}", canonical_approvers(&self.approvers))),
            Channel::Browser { typed_id } => Some(format!(
                "browser;typed_id={typed_id};{}",
                canonical_approvers(&self.approvers)
            )),
        }
    }
}

/// The approvers' rule as JSON (its fields in declaration order: the same text on every
/// instance of a build).
fn canonical_approvers(approvers: &Approvers) -> String {
    serde_json::to_string(approvers).unwrap_or_else(|_| format!("{approvers:?}"))
}

impl fmt::Debug for ToolPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolPolicy")
            .field("pick_one", &self.resolver.is_some())
            .field("revalidate", &self.revalidate.is_some())
            .field("when", &self.when.is_some())
            .field("message", &self.message)
            .field("input_key", &self.input_key)
            .field("choice_field", &self.choice_field)
            .field("confirm_field", &self.confirm_field)
            .field("select_into", &self.select_into)
            .field("select_header", &self.select_header)
            .field("style", &self.style)
            .field("max_candidates", &self.max_candidates)
            .field("settlement", &self.settlement)
            .field("versions", &self.versions)
            .field("channel", &self.channel)
            .field("standing", &self.standing)
            .field("approvers", &self.approvers)
            .field("recheck_approvers", &self.recheck_approvers.is_some())
            .field("batch_group", &self.batch_group)
            .field("narrowing", &self.narrowing)
            .finish_non_exhaustive()
    }
}

impl ToolPolicy {
    fn base(resolver: Option<Arc<dyn Resolver>>, message: &str) -> Self {
        Self {
            resolver,
            revalidate: None,
            when: None,
            message: message.to_owned(),
            describe_call: false,
            input_key: "confirmation".to_owned(),
            choice_field: "choice".to_owned(),
            choice_title: "Which one?".to_owned(),
            confirm_field: "confirm".to_owned(),
            confirm_title: "Yes, go ahead".to_owned(),
            select_into: None,
            select_header: None,
            style: ChoiceStyle::Titled,
            max_candidates: MAX_CANDIDATES,
            max_label_chars: 80,
            no_candidates_text: "Nothing matched this request, so nothing was changed.".to_owned(),
            settlement: Settlement::Forward,
            versions: Versions::Required,
            channel: Channel::Form,
            standing: None,
            approvers: Approvers::caller(),
            recheck_approvers: None,
            batch_group: None,
            narrowing: Vec::new(),
            given: Given::default(),
        }
    }

    /// The user picks exactly one of the candidates `resolver` finds, and confirms.
    ///
    /// Every candidate must carry a [version](Candidate::with_version); a resolver that returns
    /// one without is a bug, and the call is refused with an internal error, unless the policy
    /// opts out with [`without_versions`](Self::without_versions).
    pub fn pick_one(resolver: impl Resolver) -> Self {
        Self::base(Some(Arc::new(resolver)), "Choose one item and confirm.")
    }

    /// The user confirms the call as it is: the form names the tool (its `title`, else its
    /// name), lists the call's arguments (one `name: value` line each, cleaned and cut to a
    /// screenful) under the [`message`](Self::message), and holds the confirmation checkbox.
    /// Nobody is asked to approve a call they cannot see.
    pub fn confirm_only() -> Self {
        Self::base(None, "Confirm this action.")
    }

    /// The message shown above the form. Write it server-side; never take it from arguments.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self.given.message = true;
        self
    }

    /// Words a confirm-only form for the tool titled `title` where the policy left it to the
    /// layer, and makes it list the call's arguments: a form that says "Confirm this action."
    /// over nothing else lets a user approve a call they never saw.
    pub(crate) fn describe_for(&mut self, title: &str) {
        if self.resolver.is_some() {
            return;
        }
        self.describe_call = true;
        if !self.given.message {
            self.message = format!("Run {title}?");
        }
        if !self.given.confirm_title {
            self.confirm_title = format!("Yes, run {title}");
        }
    }

    /// Gives a pick-one policy that names no [`revalidate`](Self::revalidate) hook the layer's
    /// own: ask the resolver again, as the principal, over the same arguments, right before the
    /// call runs, and refuse unless the chosen record is still among the candidates at the
    /// version the user saw. Versions that are signed but never compared protect nothing: an
    /// invoice changed from 12.00 to 9,000.00 between form and answer would be voided anyway.
    pub(crate) fn revalidate_by_default(&mut self) {
        if self.revalidate.is_some() || self.versions != Versions::Required {
            return;
        }
        if let Some(resolver) = &self.resolver {
            self.revalidate = Some(Arc::new(ResolveAgain {
                resolver: Arc::clone(resolver),
                select_into: self.select_into.clone(),
            }));
        }
    }

    /// The `inputRequests` / `inputResponses` key (default `"confirmation"`).
    pub fn input_key(mut self, key: impl Into<String>) -> Self {
        self.input_key = key.into();
        self
    }

    /// The form field holding the chosen id (default `"choice"`), and its title.
    pub fn choice_field(mut self, field: impl Into<String>) -> Self {
        self.choice_field = field.into();
        self.given.choice_settings = true;
        self
    }

    /// The title shown for the choice field.
    pub fn choice_title(mut self, title: impl Into<String>) -> Self {
        self.choice_title = title.into();
        self.given.choice_settings = true;
        self
    }

    /// The boolean form field that must be `true` (default `"confirm"`).
    pub fn confirm_field(mut self, field: impl Into<String>) -> Self {
        self.confirm_field = field.into();
        self
    }

    /// The title shown for the confirmation checkbox.
    pub fn confirm_title(mut self, title: impl Into<String>) -> Self {
        self.confirm_title = title.into();
        self.given.confirm_title = true;
        self
    }

    /// Writes the chosen id into this top-level argument of the forwarded call, replacing whatever
    /// the client sent there. That argument is therefore not part of the bound argument digest.
    pub fn select_into(mut self, argument: impl Into<String>) -> Self {
        self.select_into = Some(argument.into());
        self
    }

    /// The argument named by [`select_into`](Self::select_into) is marked `x-mcp-header: <name>` in
    /// the tool's schema: keep the `Mcp-Param-<name>` header in step with the rewritten value.
    pub fn select_header(mut self, header_name: impl Into<String>) -> Self {
        self.select_header = Some(header_name.into());
        self
    }

    /// Show the choice as a plain `enum` of ids instead of a titled single-select.
    pub fn plain_enum(mut self) -> Self {
        self.style = ChoiceStyle::Plain;
        self.given.choice_settings = true;
        self
    }

    /// The most candidates offered in one form (at most 16). More matches are refused with a
    /// message asking to narrow the request.
    pub fn max_candidates(mut self, max: usize) -> Self {
        self.max_candidates = max.clamp(1, MAX_CANDIDATES);
        self.given.choice_settings = true;
        self
    }

    /// The longest label shown, in characters (default 80).
    pub fn max_label_chars(mut self, max: usize) -> Self {
        self.max_label_chars = max.max(8);
        self.given.choice_settings = true;
        self
    }

    /// The text of the result when nothing matches.
    pub fn no_candidates_text(mut self, text: impl Into<String>) -> Self {
        self.no_candidates_text = text.into();
        self.given.choice_settings = true;
        self
    }

    /// Leaves the nonce claim of an accepted confirmation to the handler, for data that lives in the
    /// replay store's database: the handler records [`Confirmed::nonce`](crate::Confirmed) inside
    /// the transaction that makes the change (e.g. `PostgresStore::consume_in`), so the claim
    /// and the change commit or roll back together, and a crash leaves neither.
    ///
    /// The layer still verifies, validates the answer and revalidates, and declines still consume
    /// the nonce in the layer's replay store, which must therefore be the same table. A handler of
    /// such a tool **must** consume the nonce and act only if that succeeded; the forwarded
    /// [`Confirmed`](crate::Confirmed) says so with `claimed: false`.
    pub fn claimed_by_handler(mut self) -> Self {
        self.settlement = Settlement::ByHandler;
        self.given.claimed_by_handler = true;
        self
    }

    /// Lets candidates come without versions. **An explicit opt-out of a protection**: the state
    /// then binds only ids, so a record edited between form and answer, or deleted and replaced
    /// by another under the same id, is acted on by the old approval.
    ///
    /// Only for records that never change and ids that are never reused (append-only logs,
    /// content-addressed objects). Everything else should give each candidate a version.
    pub fn without_versions(mut self) -> Self {
        self.versions = Versions::Optional;
        self.given.choice_settings = true;
        self
    }

    /// Asks for the approval on the layer's approval page, in the user's browser, instead of in a
    /// form the client shows: for the most dangerous tools, where an `accept` from the client
    /// (which some clients let a model give) is not enough.
    ///
    /// The first call answers with a URL-mode elicitation to the page
    /// (`ConfirmLayer::approval_page`, at the builder's
    /// [`approval_url`](crate::ConfirmLayerBuilder::approval_url)); the URL carries only an opaque
    /// id. There the person, signed in as the same principal, sees the tool, the candidates with
    /// their versions, who asks and until when, picks one and approves or declines, once. The
    /// client's retry then runs (approved), is refused (declined), or is asked again with the same
    /// URL (not decided yet).
    pub fn approve_in_browser(mut self) -> Self {
        if self.channel == Channel::Form {
            self.channel = Channel::Browser { typed_id: false };
        }
        self
    }

    /// Someone else decides (implies [`approve_in_browser`](Self::approve_in_browser)): the
    /// principals, role or "anyone but the caller" that `rule` names, as many as it requires,
    /// with a passkey where it says so. The caller's client gets the page's URL as before; the
    /// approvers find the approval in their inbox (`InboxPage`) or in a
    /// [notification](crate::notify); the caller's retries see it pending until it is decided.
    ///
    /// A rule that admits no one or cannot be met, or one with a [`standing`](Self::standing)
    /// offer (later calls would run without the approvers), is refused when the layer is built.
    /// Where the rule names a role, give [`recheck_approvers`](Self::recheck_approvers) too.
    pub fn approved_by(mut self, rule: Approvers) -> Self {
        self.approvers = rule;
        self.approve_in_browser()
    }

    /// The live check of each approver as the approved call is about to run (needs
    /// [`approved_by`](Self::approved_by)).
    pub fn recheck_approvers(mut self, hook: impl ApproverCheck) -> Self {
        self.recheck_approvers = Some(Arc::new(hook));
        self
    }

    /// With [`approve_in_browser`](Self::approve_in_browser): calls of this tool that wait for
    /// one principal at once, with calls of the other tools of the same `group`, are shown on
    /// the approval page as one list, each row with its tool, arguments and record, and may be
    /// decided together: approve all (no member runs unless every member was approved), decline
    /// all, or approve some. The decision binds the exact set shown; each call still runs on its
    /// own retry, after its own claim and revalidation. See [`crate::approval::batch`].
    ///
    /// Only calls decided by one approver without a passkey or a typed id can be batched; the
    /// build refuses this with [`require_typed_id`](Self::require_typed_id) or a rule that needs
    /// more.
    pub fn batch_group(mut self, group: impl Into<String>) -> Self {
        self.batch_group = Some(group.into());
        self
    }

    /// With [`approve_in_browser`](Self::approve_in_browser): the approver may narrow argument
    /// `argument` on the approval page before approving, as `how` allows (keep some ids of a
    /// list, lower a limit, turn `dry_run` on, pick a narrower mode), and never otherwise: an edit
    /// that widens, touches an undeclared argument or names another tool is refused whole. The
    /// handler receives the narrowed arguments, and its [`Confirmed`](crate::Confirmed) says
    /// they were narrowed ([`Confirmed::narrowed`](crate::Confirmed::narrowed)); the decision
    /// log keeps the digests of both. Call it once per argument; see [`crate::narrow`].
    pub fn narrowable(mut self, argument: impl Into<String>, how: Narrowing) -> Self {
        let argument = argument.into();
        self.narrowing.retain(|(name, _)| *name != argument);
        self.narrowing.push((argument, how));
        self
    }

    /// With [`approve_in_browser`](Self::approve_in_browser): approving requires typing the
    /// chosen record's id on the page, so a reflexive click does not delete anything.
    pub fn require_typed_id(mut self) -> Self {
        self.channel = Channel::Browser { typed_id: true };
        self
    }

    /// Runs the tool's work later, as a durable grant: the layer settles the confirmation in the
    /// request as usual, then records a [`Grant`](crate::grant::Grant) in the layer's
    /// [grant store](crate::ConfirmLayerBuilder::grant_store) and forwards the call with
    /// [`Confirmed::grant`](crate::Confirmed::grant) set. The handler enqueues only the grant id;
    /// the worker runs it with [`Grants`](crate::grant::Grants), which re-checks the live record
    /// with this policy's [`revalidate`](Self::revalidate) hook (required) before each attempt.
    pub fn queued(mut self) -> Self {
        self.settlement = Settlement::Queued;
        self.given.queued = true;
        self
    }

    /// Lets the user also allow later calls: the form offers "only this time" or "also allow
    /// this tool on this scope for the next `up_to`, at most `uses` times". `scope` maps a call's
    /// arguments to what the approval covers (e.g. one workspace); a call whose scope is `None`
    /// gets no such offer.
    ///
    /// A later call of the same principal, tool and scope, in this deployment, then runs without
    /// a form if it is as unambiguous as a confirmed call (exactly one candidate), passes the
    /// [revalidation](Self::revalidate) on the live record, and spends one use, atomically in the
    /// [standing store](crate::ConfirmLayerBuilder::standing_store). Its
    /// [`Confirmed::standing`](crate::Confirmed::standing) names the approval. Anything else
    /// (another scope, principal or audience, expiry, no uses left, revocation) gets the form.
    ///
    /// `up_to` is at most [`MAX_STANDING_FOR`](crate::defaults::MAX_STANDING_FOR), `uses` at most
    /// [`MAX_STANDING_USES`](crate::store::standing::MAX_STANDING_USES); a build error otherwise.
    pub fn standing(mut self, up_to: std::time::Duration, uses: u32, scope: impl Scope) -> Self {
        self.standing = Some(StandingOffer {
            up_to,
            uses,
            scope: Arc::new(scope),
        });
        self
    }

    /// Asks for a confirmation only when `condition` says this call needs one (like Vercel AI's
    /// `needsApproval(input)`): e.g. only in shared workspaces, or only above a number of records.
    ///
    /// The layer runs it on every first call, over the exact arguments and the authenticated
    /// principal. False: the call goes through unconfirmed, with a [`Waived`](crate::Waived)
    /// bound to this tool and these arguments (so a guarded handler accepts it for this call and
    /// no other); true: the usual confirmation; an error: the call is refused. A retry carrying a
    /// `requestState` is settled as usual, whatever the condition says by then.
    pub fn when(mut self, condition: impl Condition) -> Self {
        self.when = Some(Arc::new(condition));
        self
    }

    /// The live check run right before the confirmed call is forwarded (and, for a
    /// [`queued`](Self::queued) tool, again before each attempt at its grant).
    pub fn revalidate(mut self, hook: impl Revalidate) -> Self {
        self.revalidate = Some(Arc::new(hook));
        self
    }

    /// Which keys this policy was given, for the rules in [`PolicyShape::check`].
    fn shape(&self) -> PolicyShape {
        PolicyShape {
            pick_one: self.resolver.is_some(),
            revalidate: self.revalidate.is_some(),
            choice_settings: self.given.choice_settings,
            select_into: self.select_into.is_some(),
            select_header: self.select_header.is_some(),
            queued: self.given.queued,
            claimed_by_handler: self.given.claimed_by_handler,
            when: self.when.is_some(),
            standing: self.standing.is_some(),
        }
    }

    pub(crate) fn validate(&self, tool: &str) -> Result<(), String> {
        self.shape()
            .check()
            .map_err(|rule| format!("tool {tool:?}: {rule}"))?;
        let field_ok = |s: &str| !s.is_empty() && s.len() <= 64 && !s.chars().any(char::is_control);
        if !field_ok(&self.input_key) {
            return Err(format!(
                "tool {tool:?}: invalid input key {:?}",
                self.input_key
            ));
        }
        if !field_ok(&self.confirm_field) {
            return Err(format!(
                "tool {tool:?}: invalid confirm field {:?}",
                self.confirm_field
            ));
        }
        if self.resolver.is_some() {
            if !field_ok(&self.choice_field) {
                return Err(format!(
                    "tool {tool:?}: invalid choice field {:?}",
                    self.choice_field
                ));
            }
            if self.choice_field == self.confirm_field {
                return Err(format!(
                    "tool {tool:?}: choice and confirm fields must differ"
                ));
            }
        }
        if let Some(arg) = &self.select_into
            && !field_ok(arg)
        {
            return Err(format!(
                "tool {tool:?}: invalid select_into argument {arg:?}"
            ));
        }
        if let Some(name) = &self.select_header
            && (name.is_empty() || http::HeaderName::try_from(format!("mcp-param-{name}")).is_err())
        {
            return Err(format!("tool {tool:?}: invalid header name {name:?}"));
        }
        self.approvers
            .validate()
            .map_err(|e| format!("tool {tool:?}: {e}"))?;
        if self.recheck_approvers.is_some() && self.approvers.is_caller_only() {
            return Err(format!(
                "tool {tool:?}: `recheck_approvers` needs `approved_by`: there is no one else to re-check"
            ));
        }
        if !self.approvers.admits_caller() && self.recheck_approvers.is_none() {
            // The page compares who approves with who asked by name; an approval page signed in
            // by e-mail and an endpoint that names people by user id make the caller "someone
            // else". Only the deployment's directory knows both names of one person.
            return Err(format!(
                "tool {tool:?}: approvers that exclude the caller need `recheck_approvers`, which \
                 gets the caller as the endpoint names them and each approver as the page names \
                 them, and must answer false when they are the same person (the page and the \
                 endpoint may name one person differently, an e-mail and a user id)"
            ));
        }
        if let Some(group) = &self.batch_group {
            if !field_ok(group) {
                return Err(format!("tool {tool:?}: invalid batch group {group:?}"));
            }
            match self.channel {
                Channel::Form => {
                    return Err(format!(
                        "tool {tool:?}: `batch_group` needs `approve_in_browser`: a client's form \
                         shows one call; only the approval page shows several together"
                    ));
                }
                Channel::Browser { typed_id: true } => {
                    return Err(format!(
                        "tool {tool:?}: `batch_group` cannot go with `require_typed_id`: a \
                         batch is approved without typing each record's id"
                    ));
                }
                Channel::Browser { typed_id: false } => {}
            }
            if self.approvers.required_approvals() > 1 || self.approvers.needs_passkey() {
                return Err(format!(
                    "tool {tool:?}: `batch_group` needs a rule one approver meets without a \
                     passkey: approvals that need more are decided one by one"
                ));
            }
        }
        if !self.narrowing.is_empty() {
            if self.narrowing.len() > MAX_NARROWABLE {
                return Err(format!(
                    "tool {tool:?}: at most {MAX_NARROWABLE} narrowable arguments"
                ));
            }
            for (name, how) in &self.narrowing {
                if !field_ok(name) {
                    return Err(format!(
                        "tool {tool:?}: invalid narrowable argument {name:?}"
                    ));
                }
                let field = crate::narrow::narrow_field(name);
                if [&self.confirm_field, &self.choice_field, REMEMBER_FIELD].contains(&&*field) {
                    return Err(format!(
                        "tool {tool:?}: the form field {field:?} of narrowable {name:?} is taken"
                    ));
                }
                if self.select_into.as_deref() == Some(name.as_str()) {
                    return Err(format!(
                        "tool {tool:?}: {name:?} is the `select_into` argument: the layer writes \
                         the chosen id there, so it cannot also be narrowed"
                    ));
                }
                if let Narrowing::OneOf(values) = how {
                    let mut unique = values.clone();
                    unique.sort();
                    unique.dedup();
                    if values.len() < 2 || unique.len() != values.len() {
                        return Err(format!(
                            "tool {tool:?}: `one_of` for {name:?} needs two or more distinct values, \
                             narrowest first"
                        ));
                    }
                }
            }
        }
        if self.standing.is_some() && !self.approvers.is_caller_only() {
            return Err(format!(
                "tool {tool:?}: `standing` cannot go with `approved_by`: the later calls it \
                 covers would run without the approvers"
            ));
        }
        if let Some(offer) = &self.standing {
            if offer.up_to.is_zero() || offer.up_to > MAX_STANDING_FOR {
                return Err(format!(
                    "tool {tool:?}: a standing approval lasts between 1 s and {} h",
                    MAX_STANDING_FOR.as_secs() / 3600
                ));
            }
            if offer.uses == 0 || offer.uses > crate::store::standing::MAX_STANDING_USES {
                return Err(format!(
                    "tool {tool:?}: a standing approval covers between 1 and {} later calls",
                    crate::store::standing::MAX_STANDING_USES
                ));
            }
            let remember = REMEMBER_FIELD;
            if self.confirm_field == remember
                || (self.resolver.is_some() && self.choice_field == remember)
            {
                return Err(format!(
                    "tool {tool:?}: with `standing`, the form's `{remember}` field is taken"
                ));
            }
        }
        Ok(())
    }
}

/// Which keys a policy was given: the input of the rules every policy must follow, written once
/// and checked twice — by [`ConfirmLayerBuilder::try_build`](crate::ConfirmLayerBuilder::try_build)
/// for policies built in code, and at compile time (a `const` the attribute emits) for
/// `#[confirm(…)]`. Not part of the API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(clippy::struct_excessive_bools)]
pub struct PolicyShape {
    /// `pick_one` is given.
    pub pick_one: bool,
    /// `revalidate` is given.
    pub revalidate: bool,
    /// A setting only a pick-one policy uses is given.
    pub choice_settings: bool,
    /// `select_into` is given.
    pub select_into: bool,
    /// `select_header` is given.
    pub select_header: bool,
    /// `queued` is given.
    pub queued: bool,
    /// `claimed_by_handler` is given.
    pub claimed_by_handler: bool,
    /// `when` is given.
    pub when: bool,
    /// `standing` is given.
    pub standing: bool,
}

impl PolicyShape {
    /// The first rule these keys break.
    ///
    /// # Errors
    /// The rule, in words.
    pub const fn check(&self) -> Result<(), &'static str> {
        if self.select_into && !self.pick_one {
            return Err(
                "`select_into` needs `pick_one`: only a pick-one policy has a chosen id to write in",
            );
        }
        if self.choice_settings && !self.pick_one {
            return Err(
                "the choice's settings (choice_field, choice_title, plain_enum, max_candidates, \
                 max_label_chars, no_candidates_text, without_versions) need `pick_one`: only a \
                 pick-one policy offers a choice",
            );
        }
        if self.select_header && !self.select_into {
            return Err(
                "`select_header` needs `select_into`: it names the header of the rewritten argument",
            );
        }
        if self.queued && !self.revalidate {
            return Err(
                "a `queued` tool needs `revalidate`: the worker re-checks the live record before it runs",
            );
        }
        if self.when && self.select_into {
            return Err(
                "`when` cannot go with `select_into`: a call the condition lets through unasked \
                 would reach the handler with the client's own value in the argument the handler \
                 trusts as the user's choice",
            );
        }
        if self.standing && self.claimed_by_handler {
            return Err(
                "`standing` cannot go with `claimed_by_handler`: a call under a standing \
                 approval has no confirmation of its own for the handler to claim",
            );
        }
        if self.queued && self.claimed_by_handler {
            return Err(
                "a `queued` tool's claim becomes its grant; it cannot be `claimed_by_handler`",
            );
        }
        Ok(())
    }

    /// [`check`](Self::check) at compile time: a broken rule fails the `const` evaluation with
    /// its words.
    pub const fn assert_valid(self) {
        if let Err(rule) = self.check() {
            panic!("{}", rule);
        }
    }
}
