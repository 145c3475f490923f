//! Who a page request comes from: the principal its authentication names and the session it
//! came in, which every page's anti-forgery token is bound to.

use http::{Extensions, HeaderMap, header};
use sha2::{Digest, Sha256};

use mcp_confirm::{Principal, PrincipalExtractor};

/// Who a page request comes from: the principal its authentication names (never the layer's
/// local one) and a digest of the session it came in.
pub(crate) struct Visitor {
    pub(crate) principal: Principal,
    pub(super) session: [u8; 32],
}

impl Visitor {
    /// The visitor of a request: `None` when authentication names no principal. The session is
    /// the authentication's [`PageSession`](mcp_confirm::PageSession), or else the credentials the
    /// request carried.
    pub(crate) fn of(
        extractor: &dyn PrincipalExtractor,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Option<Self> {
        // A blank principal names no one: the page asks to sign in, as for no principal.
        let principal = extractor.extract(extensions).filter(|p| !p.is_blank())?;
        let session = match extractor.session(extensions) {
            Some(session) => *session.digest(),
            None => credentials_digest(headers),
        };
        Some(Self { principal, session })
    }
}

/// A digest of every `Authorization` and `Cookie` header a request carried, in order: the
/// session of a page whose authentication names none. Each value is tagged and length-prefixed,
/// so no two sets of headers share a digest.
fn credentials_digest(headers: &HeaderMap) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"mcp-confirm/page-session/credentials/v1\0");
    for (tag, name) in [(b'a', header::AUTHORIZATION), (b'c', header::COOKIE)] {
        for value in headers.get_all(name) {
            hash.update([tag]);
            hash.update((value.len() as u64).to_be_bytes());
            hash.update(value.as_bytes());
        }
    }
    hash.finalize().into()
}
