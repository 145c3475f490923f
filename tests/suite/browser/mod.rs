//! Approval in the browser: the page, its decision, and the attacks on it.

mod approval;
mod approval_attacks;
mod approver_attacks;
mod approvers;
mod attacks;
mod batch;
mod batch_narrowing_attacks;
mod desk;
mod fetch_metadata;
mod form_tokens;
mod narrowing;
mod passkey_narrowing;
mod passkeys;
pub(crate) mod repeated_fields;
mod webhooks;
