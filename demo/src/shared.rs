//! What the server's parts share, below all of them: the demo identity provider and access
//! policy, the two shapes of a tool result, and running work on the notes store.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock};

use crate::notes::{NotesError, NotesStore};

/// The demo identity provider: bearer token → principal.
pub fn principal_for_token(token: &str) -> Option<&'static str> {
    match token {
        "alice-token" => Some("alice"),
        "bob-token" => Some("bob"),
        _ => None,
    }
}

/// The demo access policy: which workspaces a principal may use (`load` exists only in the
/// in-memory variant started for load tests).
pub fn may_use(principal: &str, workspace: &str) -> bool {
    matches!(
        (principal, workspace),
        ("alice", "personal" | "team" | "load") | ("bob", "team")
    )
}

/// Runs `f` on the notes store: on the blocking pool when the notes are files (so file I/O never
/// stalls an async worker), in place when they are in memory.
pub async fn with_notes<T: Send + 'static>(
    store: &Arc<NotesStore>,
    f: impl FnOnce(&NotesStore) -> Result<T, NotesError> + Send + 'static,
) -> Result<T, NotesError> {
    if !store.on_disk() {
        return f(store);
    }
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| NotesError::Storage(format!("the notes task failed: {e}")))?
}

/// A tool result of one text.
pub fn text(result: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(result)])
}

/// A tool result that refuses, with its reason as text.
pub fn refuse(result: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(result.into())])
}
