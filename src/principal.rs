//! Who is asking: the authenticated principal a confirmation is bound to.
//!
//! The principal comes from the request's extensions, put there by the authentication layer in
//! front of this one. It is never taken from `clientInfo`, which the client reports about itself.

use std::fmt;
use std::sync::Arc;

use http::Extensions;
use sha2::{Digest, Sha256};

/// An authenticated identity, e.g. the `sub` of a verified access token.
///
/// Build it from the verified token only. If several issuers are trusted, include the issuer in the
/// subject (`"https://issuer.example|user-42"`), so equal subjects from different issuers differ.
///
/// Roles, where the authenticator supplies them ([`with_roles`](Self::with_roles)), are what an
/// [approver policy](crate::approval::Approvers::role) may name; nothing else reads them.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    subject: Arc<str>,
    /// `None` for none (most principals, built per request, have none): never `Some` empty,
    /// so that equal principals compare equal.
    roles: Option<Arc<[Arc<str>]>>,
}

impl Principal {
    /// A principal with the given subject.
    pub fn new(subject: impl Into<Arc<str>>) -> Self {
        Self {
            subject: subject.into(),
            roles: None,
        }
    }

    /// Whether the subject names no one: empty or only whitespace. The layer and its pages
    /// treat such a principal as absent (unauthenticated), so that an authenticator that writes
    /// `Principal::new(user.unwrap_or_default())` does not make every anonymous caller one
    /// shared user who confirms, and approves her own requests.
    pub fn is_blank(&self) -> bool {
        self.subject.trim().is_empty()
    }

    /// The same principal holding `roles`, as the deployment's authenticator verified them
    /// (e.g. a token's `roles` claim); never from anything the client says about itself.
    #[must_use]
    pub fn with_roles<R: Into<Arc<str>>>(mut self, roles: impl IntoIterator<Item = R>) -> Self {
        let roles: Arc<[Arc<str>]> = roles.into_iter().map(Into::into).collect();
        self.roles = (!roles.is_empty()).then_some(roles);
        self
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The roles the authenticator supplied (none unless [`with_roles`](Self::with_roles)).
    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.roles
            .iter()
            .flat_map(|roles| roles.iter())
            .map(|r| &**r)
    }

    /// Whether the authenticator supplied `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles().any(|r| r == role)
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tuple = f.debug_tuple("Principal");
        tuple.field(&&*self.subject);
        if let Some(roles) = &self.roles {
            tuple.field(roles);
        }
        tuple.finish()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.subject)
    }
}

/// The signed-in session a page request came in, as the deployment's page authentication names
/// it (e.g. its session id): the pages bind their anti-forgery tokens to it, so a form shown in
/// one session is refused in any other. Only a digest of the name is kept.
///
/// Put it in the request's extensions beside the [`Principal`]. A page request without one is
/// bound to the credentials it carried instead (its `Cookie` and `Authorization` headers, all
/// of them), so any change to those cookies also ends the forms shown before it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PageSession([u8; 32]);

impl PageSession {
    /// The session named by `id`: a value only that session has, such as the session cookie's.
    pub fn new(id: impl AsRef<[u8]>) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"mcp-confirm/page-session/v1\0");
        hash.update(id.as_ref());
        Self(hash.finalize().into())
    }

    /// The digest the pages bind their forms to.
    #[must_use]
    pub fn digest(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for PageSession {
    /// Nothing of the session: it is a credential's digest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PageSession(..)")
    }
}

/// Finds the principal of a request in its extensions.
///
/// Implemented for closures `Fn(&Extensions) -> Option<Principal>`, so an auth layer that stores its
/// own claims type can be adapted in one line.
pub trait PrincipalExtractor: Send + Sync + 'static {
    /// The request's principal, or `None` if it is not authenticated.
    fn extract(&self, extensions: &Extensions) -> Option<Principal>;

    /// The signed-in session of a page request, if the authentication names one: by default the
    /// [`PageSession`] in the extensions. The pages bind their forms to it.
    fn session(&self, extensions: &Extensions) -> Option<PageSession> {
        extensions.get::<PageSession>().cloned()
    }
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
