//! The browser pages of [`mcp-confirm`](mcp_confirm): the approval page, the approvers' inbox,
//! the standing-approvals page and (feature `passkeys`) the passkey page, each a tower service
//! over a layer's [`ApprovalDesk`], the port through which they read and decide approvals,
//! report, find the visitor and sign their forms. They read nothing else of the layer.
//!
//! ```no_run
//! use mcp_confirm::{ConfirmLayer, KeyRing};
//! use mcp_confirm_pages::LayerPages as _;
//!
//! let layer = ConfirmLayer::builder(KeyRing::random())
//!     .without_tool_list_unchecked()
//!     .build();
//! let approval_page = layer.approval_page(); // mount at the layer's approval_url
//! let inbox = layer.inbox_page();
//! ```
//!
//! Pinned to the core's exact version: a page of one release never decides records that
//! another release's decision path reads.
//!
//! What the pages share is here, once:
//! - `visitor.rs`: who the visitor is (principal and session);
//! - `entrance.rs`: the way in every page takes (methods, sign-in, a bounded form body);
//! - `form.rs`: a form post's body and its values;
//! - `anti_forgery.rs`: the cross-site request checks (same origin, the forms' tokens);
//! - `skeleton.rs`: the one page skeleton, its headers and CSP;
//! - `approval/`: the approval page, its HTML, the inbox and the passkey step and page (its
//!   scripts in `approval/js/`);
//! - `standing.rs`: the standing-approvals page;
//! - `passkey/` (feature `passkeys`): WebAuthn registration and assertion, bound to the exact
//!   decision;
//! - `webhooks.rs` (feature `webhooks`): the notifier that tells approvers, as signed Standard
//!   Webhooks.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub(crate) mod anti_forgery;
pub(crate) mod approval;
mod defaults;
pub(crate) mod encoding;
pub(crate) mod entrance;
pub(crate) mod form;
#[cfg(feature = "passkeys")]
#[cfg_attr(docsrs, doc(cfg(feature = "passkeys")))]
pub mod passkey;
pub(crate) mod service;
pub(crate) mod skeleton;
pub(crate) mod standing;
pub(crate) mod visitor;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod webhooks;

pub use defaults::{DEFAULT_BATCH_WINDOW, DEFAULT_FORM_TTL};

pub use approval::inbox::{INBOX_LIMIT, InboxPage};
pub use approval::page::ApprovalPage;
#[cfg(feature = "passkeys")]
#[cfg_attr(docsrs, doc(cfg(feature = "passkeys")))]
pub use approval::passkeys::PasskeyPage;
pub use mcp_confirm::approval::ApprovalDesk;
pub use standing::StandingPage;

use mcp_confirm::ConfirmLayer;

/// The pages of a layer, in one line: `use mcp_confirm_pages::LayerPages as _;`, then
/// `layer.approval_page()`.
pub trait LayerPages {
    /// The approval page of [browser-approved](mcp_confirm::ToolPolicy::approve_in_browser)
    /// tools: a tower service to mount at the layer's
    /// [`approval_url`](mcp_confirm::ConfirmLayerBuilder::approval_url) (e.g. `/confirm/{id}` in
    /// axum), behind the same authentication as the MCP endpoint.
    fn approval_page(&self) -> ApprovalPage;

    /// The approvers' inbox: the approvals waiting for the signed-in principal, each linking to
    /// its approval page. Mount it behind the same authentication as the approval page.
    fn inbox_page(&self) -> InboxPage;

    /// The page where a signed-in person lists and revokes her standing approvals, to mount at
    /// `url` (its own absolute URL: its origin is the only one a revocation may come from).
    /// `None` when the layer keeps no standing approvals.
    fn standing_page(&self, url: impl Into<String>) -> Option<StandingPage>;

    /// Where approvers register and remove their passkeys: a tower service to mount behind the
    /// same authentication as the approval page (e.g. at `/passkeys`). `None` unless the layer
    /// was given [`Passkeys`](passkey::Passkeys)
    /// ([`ConfirmLayerBuilder::passkeys`](mcp_confirm::ConfirmLayerBuilder::passkeys)).
    #[cfg(feature = "passkeys")]
    #[cfg_attr(docsrs, doc(cfg(feature = "passkeys")))]
    fn passkey_page(&self) -> Option<PasskeyPage>;
}

/// The standing-approvals page of a [`StandingApprovals`](mcp_confirm::StandingApprovals)
/// handle: `use mcp_confirm_pages::StandingPages as _;`, then `approvals.page(url)`.
pub trait StandingPages {
    /// The page where a signed-in person lists and revokes her standing approvals, to mount at
    /// `url` (its own absolute URL: its origin is the only one a revocation may come from),
    /// behind the same authentication as the approval page.
    fn page(&self, url: impl Into<String>) -> StandingPage;
}

impl StandingPages for mcp_confirm::StandingApprovals {
    fn page(&self, url: impl Into<String>) -> StandingPage {
        StandingPage::of(self.clone(), self.approval_desk(), url.into())
    }
}

impl LayerPages for ConfirmLayer {
    fn approval_page(&self) -> ApprovalPage {
        ApprovalPage::new(self.approval_desk())
    }

    fn inbox_page(&self) -> InboxPage {
        InboxPage::new(self.approval_desk())
    }

    fn standing_page(&self, url: impl Into<String>) -> Option<StandingPage> {
        Some(StandingPage::of(
            self.standing_approvals()?,
            self.approval_desk(),
            url.into(),
        ))
    }

    #[cfg(feature = "passkeys")]
    fn passkey_page(&self) -> Option<PasskeyPage> {
        let desk = self.approval_desk();
        let passkeys = passkey::Passkeys::of(&desk)?.clone();
        Some(PasskeyPage::new(desk, passkeys))
    }
}
