//! What the inner service learns about a confirmed call.

use std::sync::Arc;
use std::time::SystemTime;

use http::Extensions;

use crate::grant::GrantId;
use crate::principal::Principal;
use crate::store::Nonce;

/// Proof, in the forwarded request's extensions, that the layer confirmed this call.
///
/// A handler that deletes anything should refuse to act when this value is absent, or when it does
/// not match the arguments it is about to act on: that way a route that accidentally bypasses the
/// layer fails closed.
///
/// Behind rmcp's `StreamableHttpService`, HTTP extensions reach a tool handler inside
/// `http::request::Parts`: read it with
/// `ctx.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<Confirmed>())`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Confirmed {
    /// The principal who confirmed.
    pub principal: Principal,
    /// The confirmed tool.
    pub tool: Arc<str>,
    /// The id the user chose (pick-one policies), also written into the arguments.
    pub chosen: Option<String>,
    /// The version of the chosen record the user saw ([`Candidate::with_version`](crate::Candidate::with_version)).
    /// Make the change conditional on it where the data allows (`DELETE … WHERE id = $1 AND
    /// version = $2`): the version is then the fence, whatever happened since the revalidation.
    pub version: Option<String>,
    /// The nonce claimed for this call; unique per confirmation.
    pub nonce: Nonce,
    /// When the confirmation expires (and the replay store may forget its nonce).
    pub expires_at: SystemTime,
    /// Whether the layer claimed the nonce. `false` only for a
    /// [`claimed_by_handler`](crate::ToolPolicy::claimed_by_handler) policy: the handler must then
    /// consume [`nonce`](Self::nonce) itself, in the transaction that makes the change, and act
    /// only if that succeeded.
    pub claimed: bool,
    /// The grant of a [`queued`](crate::ToolPolicy::queued) tool: enqueue this id, and nothing
    /// the job carries besides it decides what runs. The worker runs it with
    /// [`Grants`](crate::grant::Grants). `None` for tools that run in the request.
    pub grant: Option<GrantId>,
}

impl Confirmed {
    /// The `Confirmed` value in `extensions`, if any.
    pub fn from_extensions(extensions: &Extensions) -> Option<&Self> {
        extensions.get::<Self>()
    }

    /// Whether this confirmation covers `tool` acting on `chosen`.
    pub fn covers(&self, tool: &str, chosen: Option<&str>) -> bool {
        &*self.tool == tool && self.chosen.as_deref() == chosen
    }
}
