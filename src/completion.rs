//! The guard that marks a claimed nonce Consumed once the confirmed call is over.

use std::sync::Arc;
use std::task::{Context, Waker};

use crate::audit;
use crate::store::{ClaimRequest, ReplayStore};

/// Moves a claimed nonce to Consumed when dropped: after the inner response has ended, or was
/// dropped, or when the call never got that far. A claimed nonce never returns to Fresh.
pub(crate) struct CompletionGuard {
    store: Arc<dyn ReplayStore>,
    request: ClaimRequest,
}

impl CompletionGuard {
    pub(crate) fn new(store: Arc<dyn ReplayStore>, request: ClaimRequest) -> Self {
        Self { store, request }
    }
}

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        let (store, request) = (Arc::clone(&self.store), self.request);
        let nonce = request.nonce;
        let mut completion = Box::pin(async move {
            let consumed = matches!(store.complete(&request).await, Ok(true));
            audit::completed(&request.nonce, consumed);
        });
        // Stores that answer at once (the memory store) complete right here, deterministically.
        if completion
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
        {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(completion);
            }
            Err(_) => audit::completed(&nonce, false),
        }
    }
}

impl std::fmt::Debug for CompletionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionGuard")
            .field("nonce", &self.request.nonce)
            .finish_non_exhaustive()
    }
}
