//! Approval in the browser: the page, its decision, and the attacks on it.

mod approval;
mod approvers;
mod attacks;
mod webhooks;
