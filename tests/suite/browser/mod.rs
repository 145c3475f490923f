//! Approval in the browser: the page, its decision, and the attacks on it.

mod approval;
mod approvers;
mod attack_pass_23;
mod attacks;
mod form_tokens;
mod passkeys;
mod webhooks;
