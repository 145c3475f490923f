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

/// The load generator's principals, on a server seeded for load tests: token `load-<k>-token`
/// is principal `load-<k>`.
pub fn load_principal_for_token(token: &str) -> Option<String> {
    let k = token.strip_prefix("load-")?.strip_suffix("-token")?;
    (!k.is_empty() && k.len() <= 9 && k.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("load-{k}"))
}

/// The demo access policy: which workspaces a principal may use (`load` exists only in the
/// variants started for load tests, and only they let `load-<k>` principals in).
pub fn may_use(principal: &str, workspace: &str) -> bool {
    matches!(
        (principal, workspace),
        ("alice", "personal" | "team" | "load") | ("bob", "team")
    ) || (workspace == "load" && principal.starts_with("load-"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_principals_are_numbered_and_use_only_the_load_workspace() {
        assert_eq!(
            load_principal_for_token("load-7-token").as_deref(),
            Some("load-7")
        );
        assert_eq!(
            load_principal_for_token("load-123456789-token").as_deref(),
            Some("load-123456789")
        );
        for bad in [
            "load--token",
            "load-x-token",
            "load-1234567890-token",
            "load-1-token ",
            "alice-token",
            "load-1",
            "load-+1-token",
        ] {
            assert_eq!(load_principal_for_token(bad), None, "{bad}");
        }
        assert!(may_use("load-7", "load"));
        assert!(!may_use("load-7", "personal"));
        assert!(!may_use("load-7", "team"));
    }

    #[test]
    fn only_a_store_seeded_for_load_lets_load_principals_in() {
        let dir = std::env::temp_dir().join(format!("notes-load-users-{}", std::process::id()));
        let plain = NotesStore::in_memory(&dir, 0, 3).unwrap();
        assert!(!plain.load_users());
        let seeded = NotesStore::in_memory(&dir, 5, 3).unwrap();
        assert!(seeded.load_users());
    }
}
