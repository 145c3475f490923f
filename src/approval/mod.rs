//! Approval in the browser: for the tools where an `accept` from the client is not enough.
//!
//! A [`ToolPolicy::approve_in_browser`](crate::ToolPolicy::approve_in_browser) tool's first call
//! stores an [`Approval`] in the [`ApprovalStore`] and answers with a URL-mode elicitation to the
//! approval page (the crate `mcp-confirm-pages`). There the person, signed in as the principal the confirmation is bound to,
//! sees what will happen and approves or declines, once; the retry reads that decision. The page
//! and the retry may reach different instances: the record lives in a store they share.
//!
//! - the [`Approval`] record, its one [`Decision`] and the [`ApprovalStore`] trait live with the
//!   stores that keep them (`store/approval.rs`), and are published here;
//! - [`ApprovalDesk`]: the port every page goes through (the approval page, the inbox, the
//!   passkey page of `mcp-confirm-pages`, or one's own).
//!
//! Someone other than the caller may decide: [`Approvers`] names who (the caller, named
//! principals, a role, anyone but the caller) and how many, given with
//! [`ToolPolicy::approved_by`](crate::ToolPolicy::approved_by); the record carries the rule, and
//! every store applies it with the decision, atomically. [`crate::notify`] tells approvers.
//!
//! Calls of tools that share a [`batch_group`](crate::ToolPolicy::batch_group) and wait together
//! for one principal are shown, and may be decided, as one list ([`batch`]): one decision over the
//! exact set shown, kept once, then applied to each member.

mod desk;

pub use crate::approvers::{
    Approvers, MAX_NAMED_APPROVERS, MAX_REQUIRED_APPROVALS, PasskeyVerifier,
};
pub use crate::store::approval::{
    Approval, ApprovalChoice, ApprovalId, ApprovalStore, Decided, Decider, Decision, Endorsement,
    MAX_PENDING_APPROVALS, MAX_SHOWN_ARGUMENTS,
};
pub use desk::{ApprovalDesk, MIN_FORM_TAG_BYTES};

/// One decision over several approvals of one principal (a batch): the set shown, the record
/// of its decision, and how that record reaches each member.
pub mod batch {
    pub use crate::store::batch::{
        Applied, BatchDecision, BatchMark, MAX_BATCH, SetDigest, all_approved, apply, batchable,
    };
}
