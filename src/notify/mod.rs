//! Telling approvers that an approval waits for them: a [`Notifier`] the layer calls once per
//! new approval, never waiting on it. `mcp-confirm-pages` (feature `webhooks`) has `Webhooks`,
//! which delivers signed [Standard Webhooks](https://www.standardwebhooks.com) with retries
//! from a bounded queue.
//!
//! A notice carries the approval page's link, the tool, who asks, the approver rule and the
//! expiry: no text taken from the call or from its records. Each kind of such text is sent only
//! where the rule opts into exactly it:
//! [`share_candidate_labels`](crate::approval::Approvers::share_candidate_labels) (the records'
//! labels, which the resolver makes from what the records hold) and
//! [`share_argument_values`](crate::approval::Approvers::share_argument_values) (the call's
//! argument values); the policy's message comes with either. The page decides nothing from a
//! notification: the approver signs in, and the page's own rules apply.
//!
//! - [`signature`]: signing and verifying Standard Webhooks (what a receiver runs);
//! - [`payload`]: the JSON a notice becomes (the Standard Webhooks event, or a Slack message);

pub mod payload;
pub mod signature;

use std::fmt;
use std::time::SystemTime;

pub use payload::Payload;
pub use signature::{WebhookError, WebhookSecret, sign, verify};

use crate::store::approval::Approval;

/// Hears of each new approval that others decide. Called in the request that proposed it,
/// after the approval is stored: return at once (queue the work), and never fail the request;
/// a notifier that cannot deliver drops the notice and counts it.
pub trait Notifier: Send + Sync + 'static {
    /// A new approval waits for its approvers.
    fn approval_requested(&self, notice: ApprovalNotice);
}

impl<N: Notifier + ?Sized> Notifier for std::sync::Arc<N> {
    fn approval_requested(&self, notice: ApprovalNotice) {
        (**self).approval_requested(notice);
    }
}

/// What a notification says about a new approval.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalNotice {
    /// The approval's id (hex): the same on every retry of its notification.
    pub id: String,
    /// The deployment that asks (the layer's audience).
    pub audience: String,
    /// The approval page, where the approver signs in and decides.
    pub url: String,
    /// The tool that will run.
    pub tool: String,
    /// Who asks (the caller's subject).
    pub requested_by: String,
    /// Who may decide, in words ("anyone but the caller", "role notes-admin").
    pub approvers: String,
    /// How many must approve.
    pub required: u8,
    /// Whether approving needs a passkey.
    pub passkey: bool,
    /// When it expires.
    pub expires_at: SystemTime,
    /// What the rule shares of the call and its records; `None` (the default) shares nothing.
    pub details: Option<Details>,
}

/// The details a rule may share, each only where it opts into exactly that.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Details {
    /// The policy's message: its own words, the same for every call (what the page shows above
    /// the records). Sent with either kind of detail.
    pub message: String,
    /// Each record's label, as the page shows it: text made from the records' contents. Only
    /// under [`share_candidate_labels`](crate::approval::Approvers::share_candidate_labels).
    pub records: Option<Vec<String>>,
    /// The call's arguments, one `name: value` line each, cleaned and cut as the form's summary
    /// of a call. Only under
    /// [`share_argument_values`](crate::approval::Approvers::share_argument_values).
    pub arguments: Option<Vec<String>>,
}

impl fmt::Debug for ApprovalNotice {
    /// The id and tool only: who asks and about what stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalNotice")
            .field("id", &self.id)
            .field("tool", &self.tool)
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Details {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Details")
            .field("records", &self.records.as_ref().map(Vec::len))
            .field("arguments", &self.arguments.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl ApprovalNotice {
    /// The notice of `approval`, whose page is at `url`, with the details its rule shares. The
    /// record keeps no argument values, so a rule that shares them gets an empty list here
    /// until the layer fills it in from the call.
    pub fn of(approval: &Approval, url: &str) -> Self {
        let rule = &approval.approvers;
        let (labels, values) = (
            rule.shares_candidate_labels(),
            rule.shares_argument_values(),
        );
        // A browser approval's message is its policy's own words: only generated form-channel
        // policies describe the call in their message, and they make no approvals.
        let details = (labels || values).then(|| Details {
            message: approval.message.clone(),
            records: labels.then(|| approval.choices.iter().map(|c| c.label.clone()).collect()),
            arguments: values.then(Vec::new),
        });
        Self {
            id: approval.id.to_hex(),
            audience: approval.audience.clone(),
            url: url.to_owned(),
            tool: approval.tool.clone(),
            requested_by: approval.subject.clone(),
            approvers: approval.approvers.describe(),
            required: approval.approvers.required_approvals(),
            passkey: approval.approvers.needs_passkey(),
            expires_at: approval.expires_at,
            details,
        }
    }

    /// The call's argument values (`name: value` lines, made by `lines` only when needed),
    /// where the rule shares them; never otherwise.
    #[must_use]
    pub(crate) fn with_argument_values(mut self, lines: impl FnOnce() -> Vec<String>) -> Self {
        if let Some(Details {
            arguments: Some(arguments),
            ..
        }) = &mut self.details
        {
            *arguments = lines();
        }
        self
    }
}
