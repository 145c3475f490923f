//! The approval page (show, decide once), what it renders, the approvers' inbox, and the passkey
//! step of a decision with the page where people register their passkeys.

pub(crate) mod batch;
pub(crate) mod html;
pub(crate) mod inbox;
mod narrowing;
pub(crate) mod page;
#[cfg(feature = "passkeys")]
pub(crate) mod passkeys;
