//! The guards that settle what a call holds once it is over: a claimed nonce is marked
//! Consumed; a use of a standing approval reserved for a call that never ran is given back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};

use crate::audit::event::DecisionEvent;
use crate::kernel::Nonce;
use crate::store::standing::{StandingId, StandingKey, StandingStore};
use crate::store::{ClaimRequest, ReplayStore};

/// Runs `work` to its end from a `Drop`: right here if it is ready at once (the memory stores,
/// deterministically), otherwise on the current tokio runtime; `None` if there is none.
fn finish(mut work: Pin<Box<dyn Future<Output = ()> + Send>>) -> Option<()> {
    if work
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
    {
        return Some(());
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    runtime.spawn(work);
    Some(())
}

/// Marks a nonce used without running anything: claims it and, if the claim was fresh, consumes
/// it. `Ok(true)`: it was fresh (this burned it); `Ok(false)`: it was already held.
pub(crate) async fn burn(
    store: &dyn ReplayStore,
    request: &ClaimRequest,
) -> Result<bool, crate::store::StoreError> {
    match store.claim(request).await? {
        crate::store::Claim::Claimed => {
            let _ = store.complete(request).await;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Moves a claimed nonce to Consumed when dropped: after the inner response has ended, or was
/// dropped, or when the call never got that far. A claimed nonce never returns to Fresh.
///
/// For a [`claimed_by_handler`](crate::ToolPolicy::claimed_by_handler) call, which the layer
/// forwards unclaimed, the guard checks instead that the handler claimed the nonce: if it can
/// still be claimed, the handler did not (a handler copied without its `consume_in`), and the
/// guard burns it, so the same answer never runs the handler a second time.
pub(crate) struct CompletionGuard {
    store: Arc<dyn ReplayStore>,
    request: ClaimRequest,
    /// `Some`: the handler was to claim; check that it did.
    after_handler: Option<(Arc<str>, HandlerCall)>,
}

/// A `claimed_by_handler` call of this process, from its acceptance until the layer has checked
/// its handler's claim: while it lives, another answer with the same nonce is refused.
pub(crate) struct HandlerCall {
    calls: Arc<dashmap::DashSet<Nonce>>,
    nonce: Nonce,
}

impl HandlerCall {
    /// `None` when a call with this nonce is already running here.
    pub(crate) fn begin(calls: &Arc<dashmap::DashSet<Nonce>>, nonce: Nonce) -> Option<Self> {
        calls.insert(nonce).then(|| Self {
            calls: Arc::clone(calls),
            nonce,
        })
    }
}

impl Drop for HandlerCall {
    fn drop(&mut self) {
        self.calls.remove(&self.nonce);
    }
}

impl CompletionGuard {
    pub(crate) fn new(store: Arc<dyn ReplayStore>, request: ClaimRequest) -> Self {
        Self {
            store,
            request,
            after_handler: None,
        }
    }

    /// The guard of a call whose handler claims the nonce itself.
    pub(crate) fn after_handler(
        store: Arc<dyn ReplayStore>,
        request: ClaimRequest,
        tool: Arc<str>,
        call: HandlerCall,
    ) -> Self {
        Self {
            store,
            request,
            after_handler: Some((tool, call)),
        }
    }
}

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        let (store, request) = (Arc::clone(&self.store), self.request);
        let nonce = request.nonce;
        let completion: Pin<Box<dyn Future<Output = ()> + Send>> = match self.after_handler.take() {
            None => Box::pin(async move {
                let consumed = matches!(store.complete(&request).await, Ok(true));
                DecisionEvent::Completed {
                    nonce: &request.nonce,
                    consumed,
                }
                .trace();
            }),
            Some((tool, call)) => Box::pin(async move {
                // Held until the check is done: no answer with this nonce runs meanwhile.
                let _call = call;
                if store.take_handler_attempt(request.nonce) {
                    // The handler claimed in its transaction: committed, the nonce is used;
                    // rolled back, the confirmation stays usable, as the transaction left it.
                    return;
                }
                match burn(&*store, &request).await {
                    Ok(true) => DecisionEvent::HandlerDidNotClaim {
                        tool: &tool,
                        nonce: &request.nonce,
                    }
                    .trace(),
                    Ok(false) => DecisionEvent::Completed {
                        nonce: &request.nonce,
                        consumed: true,
                    }
                    .trace(),
                    Err(e) => DecisionEvent::HandlerClaimUnchecked {
                        tool: &tool,
                        nonce: &request.nonce,
                        error: &e,
                    }
                    .trace(),
                }
            }),
        };
        if finish(completion).is_none() {
            DecisionEvent::Completed {
                nonce: &nonce,
                consumed: false,
            }
            .trace();
        }
    }
}

/// One use of a standing approval, reserved under `ticket` for a call that has not passed its
/// revalidation yet. The call that passes [`keep`](Self::keep)s it; a refused call
/// [`give_back`](Self::give_back)s it; dropped otherwise (the client went away mid-check, or
/// the call failed before it was forwarded), it is given back all the same. A use is spent
/// only by a call that runs.
pub(crate) struct ReservedUse {
    held: Option<Held>,
}

struct Held {
    store: Arc<dyn StandingStore>,
    key: StandingKey,
    id: StandingId,
    ticket: Nonce,
}

impl Held {
    async fn give_back(self) {
        let given = matches!(
            self.store.give_back(self.key, self.id, self.ticket).await,
            Ok(true)
        );
        DecisionEvent::StandingGivenBack {
            id: &self.id,
            ticket: &self.ticket,
            given,
        }
        .trace();
    }
}

impl ReservedUse {
    /// The use `ticket` spent of approval `id` under `key`, held until kept or given back.
    pub(crate) fn new(
        store: Arc<dyn StandingStore>,
        key: StandingKey,
        id: StandingId,
        ticket: Nonce,
    ) -> Self {
        Self {
            held: Some(Held {
                store,
                key,
                id,
                ticket,
            }),
        }
    }

    /// The call passed and goes on: the use stays spent.
    pub(crate) fn keep(mut self) {
        self.held = None;
    }

    /// The call was refused: the use goes back before the refusal is answered, so the next
    /// call finds it.
    pub(crate) async fn give_back(mut self) {
        if let Some(held) = self.held.take() {
            held.give_back().await;
        }
    }
}

impl Drop for ReservedUse {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        let (id, ticket) = (held.id, held.ticket);
        if finish(Box::pin(held.give_back())).is_none() {
            DecisionEvent::StandingGivenBack {
                id: &id,
                ticket: &ticket,
                given: false,
            }
            .trace();
        }
    }
}

impl std::fmt::Debug for ReservedUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservedUse")
            .field("held", &self.held.as_ref().map(|h| h.id))
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CompletionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionGuard")
            .field("nonce", &self.request.nonce)
            .finish_non_exhaustive()
    }
}
