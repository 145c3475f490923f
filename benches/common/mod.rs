//! What the benchmarks share: polling the memory stores' futures, and the three notes every
//! confirmation form offers.

use std::task::{Context, Poll, Waker};

use mcp_confirm::Candidate;

/// Polls a future that is expected to be ready at once (the memory stores').
///
/// # Panics
/// If it is not: a bench must not time a store that waits.
pub(crate) fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("expected a ready future"),
    }
}

/// Three notes titled "Groceries", each with its version: what the benches' resolvers find.
pub(crate) fn three_candidates() -> Vec<Candidate> {
    vec![
        Candidate::labelled("note-3", "Groceries (Monday)").with_version("v1-3"),
        Candidate::labelled("note-7", "Groceries (Tuesday)").with_version("v1-7"),
        Candidate::labelled("note-14", "Groceries (Friday)").with_version("v1-14"),
    ]
}

/// The benches' key: 32 bytes that look random, fixed per seed.
pub(crate) use mcp_confirm::testing::fixed_test_secret as secret;
