//! [`Confirm`], the service a [`ConfirmLayer`](crate::ConfirmLayer) wraps around an inner service.
//!
//! It is one service with two faces: over HTTP requests (see [`crate::http`]) and over bare JSON-RPC
//! messages (see [`crate::rpc`]). Both hand intercepted calls to the same decision path.

use std::sync::Arc;

use crate::layer::Config;

/// Confirms destructive tool calls before they reach the inner service `S`.
///
/// Created by [`ConfirmLayer`](crate::ConfirmLayer).
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
