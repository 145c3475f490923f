//! [`Confirm`], the service a [`ConfirmLayer`](crate::ConfirmLayer) wraps around an inner service.
//!
//! It is one service with two faces: over HTTP requests (`http/`) and over bare JSON-RPC messages
//! (`rpc.rs`). Both hand intercepted calls to the same decision path.

use std::sync::Arc;

use crate::config::Config;

/// Confirms destructive tool calls before they reach the inner service `S`.
///
/// Created by [`ConfirmLayer`](crate::ConfirmLayer). It is a `Service<http::Request<B>>` when `S`
/// is an HTTP service (its future is [`ResponseFuture`](crate::ResponseFuture), its bodies are in
/// [`body`](crate::body)), and a `Service<JsonRpcMessage>` when `S` takes one
/// [`JsonRpcMessage`](crate::JsonRpcMessage) at a time.
#[derive(Clone, Debug)]
pub struct Confirm<S> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config>,
}

impl<S> Confirm<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}
