//! The crate's human-facing pages (feature `pages`): the approval page, the approvers' inbox, the
//! standing-approvals page and the passkey page (feature `passkeys`). Each is a tower service
//! that reads the layer's configuration and stores; what they share is here, once:
//!
//! - `visitor.rs`: who the visitor is (principal and session);
//! - `entrance.rs`: the way in every page takes (methods, sign-in, a bounded form body);
//! - `form.rs`: a form post's body and its values;
//! - `anti_forgery.rs`: the cross-site request checks (same origin, the forms' tokens);
//! - `skeleton.rs`: the one page skeleton, its headers and CSP;
//! - `approval/`: the approval page, its HTML, the inbox and the passkey step and page (its
//!   scripts in `approval/js/`);
//! - `standing.rs`: the standing-approvals page.

use std::time::Duration;

/// The tower `Service` of a page, one text for all of them: a page is always ready, never
/// fails (every refusal is a page), and answers each request from a clone of itself with its
/// own `answer`.
macro_rules! page_service {
    ($page:ty) => {
        impl<B> tower_service::Service<http::Request<B>> for $page
        where
            B: http_body::Body + Send + 'static,
            B::Data: Send,
            B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        {
            type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
            type Error = std::convert::Infallible;
            type Future = crate::kernel::BoxFuture<'static, Result<Self::Response, Self::Error>>;

            fn poll_ready(
                &mut self,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn call(&mut self, request: http::Request<B>) -> Self::Future {
                let page = self.clone();
                Box::pin(async move { Ok(page.answer(request).await) })
            }
        }
    };
}
pub(crate) use page_service;

pub(crate) mod anti_forgery;
pub(crate) mod approval;
pub(crate) mod entrance;
pub(crate) mod form;
pub(crate) mod skeleton;
pub(crate) mod standing;
pub(crate) mod visitor;

pub(crate) use anti_forgery::{FormPurpose, FormTokens, form_refused};
pub(crate) use entrance::{Entrance, Entry};
pub(crate) use form::{form_value, form_values, no_lists, repeated_refused, repeats};
#[cfg(feature = "passkeys")]
pub(crate) use skeleton::page_with_script;
pub(crate) use skeleton::{http_date, notice, page};
pub(crate) use visitor::Visitor;

/// How long a page's form stays good once the page showed it, by default: a form posted later
/// is refused, and the page asks to be reloaded.
pub const DEFAULT_FORM_TTL: Duration = Duration::from_secs(30 * 60);

/// How far apart, by default, two calls of one principal may have been made for the approval
/// page to offer them as one batch (tools of one [`batch_group`](crate::ToolPolicy::batch_group)).
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_secs(2 * 60);
