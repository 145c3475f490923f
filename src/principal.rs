//! Who is asking: the authenticated principal a confirmation is bound to.
//!
//! The principal comes from the request's extensions, put there by the authentication layer in
//! front of this one. It is never taken from `clientInfo`, which the client reports about itself.

use std::fmt;
use std::sync::Arc;

use http::Extensions;

/// An authenticated identity, e.g. the `sub` of a verified access token.
///
/// Build it from the verified token only. If several issuers are trusted, include the issuer in the
/// subject (`"https://issuer.example|user-42"`), so equal subjects from different issuers differ.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    subject: Arc<str>,
}

impl Principal {
    /// A principal with the given subject.
    pub fn new(subject: impl Into<Arc<str>>) -> Self {
        Self {
            subject: subject.into(),
        }
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Principal").field(&&*self.subject).finish()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.subject)
    }
}

/// Finds the principal of a request in its extensions.
///
/// Implemented for closures `Fn(&Extensions) -> Option<Principal>`, so an auth layer that stores its
/// own claims type can be adapted in one line.
pub trait PrincipalExtractor: Send + Sync + 'static {
    /// The request's principal, or `None` if it is not authenticated.
    fn extract(&self, extensions: &Extensions) -> Option<Principal>;
}

/// The default extractor: a [`Principal`] stored in the extensions as is.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct PrincipalFromExtension;

impl PrincipalExtractor for PrincipalFromExtension {
    fn extract(&self, extensions: &Extensions) -> Option<Principal> {
        extensions.get::<Principal>().cloned()
    }
}

impl<F> PrincipalExtractor for F
where
    F: Fn(&Extensions) -> Option<Principal> + Send + Sync + 'static,
{
    fn extract(&self, extensions: &Extensions) -> Option<Principal> {
        self(extensions)
    }
}
