//! `notes_purge`'s background work: a confirmed purge becomes a grant, a Tasks-extension task
//! (rmcp's `TaskManager`) runs it, and `tasks/cancel` revokes it.
//!
//! rmcp's tasks live in the process that started them, but the grant lives in the shared store.
//! So a task's id names its grant too (`<grant id>.<rmcp task id>`): on another instance,
//! `tasks/cancel` revokes the grant (the purge then never runs, wherever its task is) and
//! `tasks/get` answers from the grant's state; both for the grant's principal only.
//!
//! The task carries only the grant id. When it runs, `Grants::run` begins the grant (one attempt
//! at a time, fenced), re-checks that the notes are still exactly the set the user confirmed, and
//! consumes the grant once they are deleted: a retried job, a replayed grant id or a stale
//! approval never deletes anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mcp_confirm::Principal;
use mcp_confirm::grant::{GrantError, GrantId, GrantState, Grants, RunError};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, Task, TaskPayload, TaskStatus,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions, current_timestamp};
use sha2::{Digest, Sha256};

use crate::notes::{Note, NotesError, NotesStore};
use crate::shared::{refuse, text};

/// The id of the one choice a purge form offers: every note with the title.
pub const WHOLE_SET: &str = "all";

/// How long a queued purge waits before it starts: the window in which `tasks/cancel` stops it
/// before anything is touched.
const QUEUE_DELAY: Duration = Duration::from_millis(500);

/// How long a finished task stays readable with `tasks/get`.
const TASK_TTL_MS: u64 = 10 * 60 * 1000;

/// The version of a set of notes: its members' ids and versions, in id order. Adding, editing or
/// removing any note of the set changes it.
pub fn set_version(notes: &[Note]) -> String {
    let mut members: Vec<(&str, &str)> = notes
        .iter()
        .map(|n| (n.id.as_str(), n.version.as_str()))
        .collect();
    members.sort_unstable();
    let mut hash = Sha256::new();
    for (id, version) in members {
        hash.update(id.as_bytes());
        hash.update(b"\0");
        hash.update(version.as_bytes());
        hash.update(b"\n");
    }
    hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The request's principal (the auth layer put it into the HTTP request's extensions).
pub fn principal_of(context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("not authenticated", None))
}

/// Whose a task is, which grant it runs, and its id in rmcp's task manager.
#[derive(Debug, Clone)]
struct Owner {
    subject: String,
    grant: GrantId,
    local: String,
    created: Instant,
}

/// The purge queue: tasks, their owners, and the grants they run. Clones share everything.
#[derive(Clone)]
pub struct Queue {
    notes: Arc<NotesStore>,
    grants: Arc<OnceLock<Grants>>,
    tasks: TaskManager,
    owners: Arc<Mutex<HashMap<String, Owner>>>,
}

impl Queue {
    /// A queue running purges on `notes`.
    pub fn new(notes: Arc<NotesStore>) -> Self {
        Self {
            notes,
            grants: Arc::default(),
            tasks: TaskManager::new(),
            owners: Arc::default(),
        }
    }

    /// Gives the queue the layer's grants (built after the server, whose hooks they use).
    pub fn start(&self, grants: Option<Grants>) {
        if let Some(grants) = grants {
            let _ = self.grants.set(grants);
        }
    }

    /// Starts a task that runs `grant` after the queue delay, owned by `principal`.
    pub fn enqueue(&self, grant: GrantId, principal: &Principal) -> CreateTaskResult {
        let queue = self.clone();
        let options = TaskOptions::new()
            .with_ttl_ms(TASK_TTL_MS)
            .with_poll_interval_ms(250);
        let task = self.tasks.spawn(options, move |context| {
            Box::pin(async move {
                tokio::select! {
                    () = context.cancelled() => Err(TaskExit::Cancelled),
                    () = tokio::time::sleep(QUEUE_DELAY) => Ok(queue.run(grant).await),
                }
            })
        });
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        // Forget owners of tasks past their time to live (the manager has forgotten them too):
        // one pass, so the map stays as small as the live tasks.
        let ttl = Duration::from_millis(TASK_TTL_MS) + QUEUE_DELAY;
        owners.retain(|_, owner| owner.created.elapsed() < ttl);
        let mut task = task;
        let external = format!("{grant}.{}", task.task_id);
        let local = std::mem::replace(&mut task.task_id, external);
        owners.insert(
            task.task_id.clone(),
            Owner {
                subject: principal.subject().to_owned(),
                grant,
                local,
                created: Instant::now(),
            },
        );
        CreateTaskResult::new(task)
    }

    /// Runs `grant` now: re-checked, then every note of the confirmed set deleted, once.
    pub async fn run(&self, grant: GrantId) -> CallToolResult {
        let Some(grants) = self.grants.get() else {
            return refuse("Refused: no grant store; nothing was changed.");
        };
        let notes = Arc::clone(&self.notes);
        let outcome = grants
            .run(grant, |grant| async move {
                let uri = grant.arguments["workspaceUri"].as_str().unwrap_or_default();
                let title = grant.arguments["title"].as_str().unwrap_or_default();
                let (workspace, title) = (notes.workspace_name(uri)?, title.to_owned());
                let version = grant.version.unwrap_or_default();
                crate::shared::with_notes(&notes, move |notes| {
                    purge(notes, &workspace, &title, &version)
                })
                .await
            })
            .await;
        match outcome {
            Ok(done) => text(done),
            Err(RunError::Grant(GrantError::Refused(_))) => {
                refuse("Refused: the notes changed since they were confirmed; nothing was changed.")
            }
            Err(RunError::Grant(e)) if e.is_retryable() => {
                refuse("Not run yet: the grant store is busy or unavailable; nothing was changed.")
            }
            Err(RunError::Grant(_)) => refuse(
                "Refused: this confirmation was already used, revoked, or has expired; nothing was changed.",
            ),
            Err(RunError::Action(e)) => refuse(format!("The purge failed: {e}.")),
            Err(_) => refuse("Refused; nothing was changed."),
        }
    }

    /// `tasks/get`, for the task's owner only: from rmcp's task manager when the task runs here,
    /// else from its grant's state in the shared store.
    pub async fn get(
        &self,
        task_id: &str,
        principal: &Principal,
    ) -> Result<GetTaskResult, ErrorData> {
        if let Some(owner) = self.owned(task_id, principal)? {
            let mut task = self.tasks.get_task(&owner.local)?;
            task_id.clone_into(&mut task.task.task_id);
            return Ok(GetTaskResult::new(task));
        }
        let (grants, grant) = self.remote(task_id)?;
        let state = match grants.state(grant, principal).await {
            Ok(state) => state,
            Err(e) if e.is_retryable() => return Err(store_unavailable()),
            Err(_) => return Err(unknown_task(task_id)),
        };
        Ok(GetTaskResult::new(remote_task(task_id, state)))
    }

    /// `tasks/update`, for the task's owner only.
    pub fn update(
        &self,
        task_id: &str,
        principal: &Principal,
        responses: impl IntoIterator<Item = (String, serde_json::Value)>,
    ) -> Result<(), ErrorData> {
        match self.owned(task_id, principal)? {
            Some(owner) => self.tasks.update_task(&owner.local, responses),
            // A purge never asks for input: nothing to answer on another instance.
            None => Err(unknown_task(task_id)),
        }
    }

    /// `tasks/cancel`, for the task's owner only: revokes the grant first (so it never runs,
    /// whatever the task does next), then asks the task to stop.
    pub async fn cancel(&self, task_id: &str, principal: &Principal) -> Result<(), ErrorData> {
        let owner = self.owned(task_id, principal)?;
        let grant = match &owner {
            Some(owner) => owner.grant,
            None => self.remote(task_id)?.1,
        };
        if let Some(grants) = self.grants.get() {
            match grants.revoke(grant, principal).await {
                Ok(_) => {}
                // Ended and forgotten: nothing left to stop.
                Err(GrantError::Unknown) if owner.is_some() => {}
                Err(e) if e.is_retryable() => return Err(store_unavailable()),
                Err(_) => return Err(unknown_task(task_id)),
            }
        }
        match owner {
            Some(owner) => self.tasks.cancel_task(&owner.local),
            // The task runs on another instance: its grant is revoked, so it never purges.
            None => Ok(()),
        }
    }

    /// The owner of `task_id` if the task runs here: `Some` if it is `principal`'s, `None` if
    /// this instance does not know it, and "unknown task" to anyone else.
    fn owned(&self, task_id: &str, principal: &Principal) -> Result<Option<Owner>, ErrorData> {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get(task_id) {
            Some(owner) if owner.subject == principal.subject() => Ok(Some(owner.clone())),
            Some(_) => Err(unknown_task(task_id)),
            None => Ok(None),
        }
    }

    /// The grants, and the grant a task id names, for a task that runs on another instance.
    fn remote(&self, task_id: &str) -> Result<(&Grants, GrantId), ErrorData> {
        let grant = task_id
            .split_once('.')
            .and_then(|(grant, _)| grant.parse::<GrantId>().ok());
        match (self.grants.get(), grant) {
            (Some(grants), Some(grant)) => Ok((grants, grant)),
            _ => Err(unknown_task(task_id)),
        }
    }
}

/// A task running on another instance, as its grant's state tells: working until the grant
/// ends, then completed (with an error result if the purge did not run) or cancelled. (Its
/// result stays with the instance that ran it.)
fn remote_task(task_id: &str, state: GrantState) -> DetailedTask {
    let payload = match state {
        GrantState::Consumed => TaskPayload::Completed {
            result: serde_json::json!({"content": [{"type": "text",
                "text": "The purge ran on another instance of this server."}]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        },
        GrantState::Revoked => TaskPayload::Cancelled,
        // As the instance running it reports a purge that did not run: a completed tool call
        // whose result is an error (`failed` is for JSON-RPC errors).
        GrantState::Failed | GrantState::Expired => TaskPayload::Completed {
            result: serde_json::json!({"isError": true, "content": [{"type": "text",
                "text": "Refused: the purge did not run; nothing was changed."}]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        },
        _ => TaskPayload::Working,
    };
    let now = current_timestamp();
    let mut task = Task::new(task_id, TaskStatus::Working, now.clone(), now);
    task.ttl_ms = Some(TASK_TTL_MS);
    task.poll_interval_ms = Some(250);
    DetailedTask::new(task, payload)
}

/// The grant store did not answer: the client may try again.
fn store_unavailable() -> ErrorData {
    ErrorData::internal_error("the grant store is unavailable; try again", None)
}

/// The answer rmcp gives for a task it does not know.
fn unknown_task(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown task: {task_id}"), None)
}

/// Deletes every note titled `title` if the set is still the confirmed one, each only at the
/// version confirmed.
fn purge(
    notes: &NotesStore,
    workspace: &str,
    title: &str,
    version: &str,
) -> Result<String, NotesError> {
    let set = notes.find_by_title(workspace, title)?;
    if set.is_empty() || set_version(&set) != version {
        return Err(NotesError::Changed);
    }
    let mut deleted = Vec::new();
    for note in &set {
        notes.delete_if_version(workspace, &note.id, &note.version)?;
        deleted.push(note.id.as_str());
    }
    Ok(format!(
        "Deleted {} notes titled {title:?} from {workspace}: {}.",
        deleted.len(),
        deleted.join(", ")
    ))
}
