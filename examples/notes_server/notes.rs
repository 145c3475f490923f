//! Notes as files: `<data-dir>/<workspace>/<note-id>.md`, first line the title.
//!
//! Every access goes through `mcp_confirm::scope`: the workspace URI is parsed and mapped to one
//! folder directly below the data directory by path components, and files are read, created and
//! removed only through a no-symlink directory handle opened on that folder.

use std::path::{Path, PathBuf};

use mcp_confirm::scope::{self, ScopeError, ScopedDir};

/// One note as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) excerpt: String,
}

/// The notes under one data directory.
#[derive(Debug)]
pub(crate) struct NotesStore {
    /// The canonical data directory; workspace URIs are matched against it.
    root_path: PathBuf,
    root: ScopedDir,
}

/// Why a notes operation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotesError {
    #[error("invalid workspace: {0}")]
    Workspace(#[source] ScopeError),
    #[error("invalid note id")]
    NoteId,
    #[error("note not found")]
    NotFound,
    #[error("note is not a plain file inside the workspace: {0}")]
    Refused(#[source] ScopeError),
    #[error("storage error: {0}")]
    Storage(String),
}

impl NotesStore {
    /// Opens (creating and seeding it if missing or empty) the data directory.
    pub(crate) fn open(data_dir: &Path) -> Result<Self, NotesError> {
        std::fs::create_dir_all(data_dir).map_err(|e| NotesError::Storage(e.to_string()))?;
        let root_path = data_dir
            .canonicalize()
            .map_err(|e| NotesError::Storage(e.to_string()))?;
        let root =
            ScopedDir::open_root(&root_path).map_err(|e| NotesError::Storage(e.to_string()))?;
        let store = Self { root_path, root };
        let empty = std::fs::read_dir(&store.root_path)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if empty {
            store.seed()?;
        }
        Ok(store)
    }

    /// The data directory, canonical.
    pub(crate) fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The `file://` URI of a workspace folder.
    pub(crate) fn workspace_uri(&self, workspace: &str) -> String {
        format!("file://{}", self.root_path.join(workspace).display())
    }

    /// Maps a workspace URI to the workspace name: exactly one folder directly below the data
    /// directory, by path components.
    pub(crate) fn workspace_name(&self, uri: &str) -> Result<String, NotesError> {
        let path = scope::file_uri_to_path(uri).map_err(NotesError::Workspace)?;
        scope::child_name(&self.root_path, &path)
            .map(str::to_owned)
            .map_err(NotesError::Workspace)
    }

    fn workspace(&self, name: &str) -> Result<ScopedDir, NotesError> {
        self.root.subdir(name).map_err(NotesError::Workspace)
    }

    /// Every note in a workspace, in id order.
    pub(crate) fn list(&self, workspace: &str) -> Result<Vec<Note>, NotesError> {
        let dir = self.workspace(workspace)?;
        let mut notes = Vec::new();
        for file in dir
            .file_names()
            .map_err(|e| NotesError::Storage(e.to_string()))?
        {
            let Some(id) = file.strip_suffix(".md") else {
                continue;
            };
            if let Ok(note) = read_note(&dir, id) {
                notes.push(note);
            }
        }
        notes.sort_by_key(|n| (id_number(&n.id), n.id.clone()));
        Ok(notes)
    }

    /// The notes in a workspace whose title is exactly `title`.
    pub(crate) fn find_by_title(
        &self,
        workspace: &str,
        title: &str,
    ) -> Result<Vec<Note>, NotesError> {
        Ok(self
            .list(workspace)?
            .into_iter()
            .filter(|n| n.title == title)
            .collect())
    }

    /// Loads one note live, refusing anything that is not a plain file in the workspace.
    pub(crate) fn load(&self, workspace: &str, id: &str) -> Result<Note, NotesError> {
        let dir = self.workspace(workspace)?;
        read_note(&dir, valid_id(id)?)
    }

    /// Creates a note and returns its id.
    pub(crate) fn create(
        &self,
        workspace: &str,
        title: &str,
        body: &str,
    ) -> Result<String, NotesError> {
        let title = title.lines().next().unwrap_or_default().trim();
        if title.is_empty() {
            return Err(NotesError::Storage("a note needs a title".into()));
        }
        let dir = self.workspace(workspace)?;
        let next = self
            .list(workspace)?
            .iter()
            .filter_map(|n| id_number(&n.id))
            .max()
            .unwrap_or(0)
            + 1;
        let id = format!("note-{next}");
        dir.create_new(&format!("{id}.md"), format!("{title}\n{body}").as_bytes())
            .map_err(|e| NotesError::Storage(e.to_string()))?;
        Ok(id)
    }

    /// Deletes exactly one note, through the workspace handle, never through a symlink.
    pub(crate) fn delete(&self, workspace: &str, id: &str) -> Result<(), NotesError> {
        let dir = self.workspace(workspace)?;
        dir.remove_file(&format!("{}.md", valid_id(id)?))
            .map_err(|e| match e {
                ScopeError::NotFound => NotesError::NotFound,
                other => NotesError::Refused(other),
            })
    }

    fn seed(&self) -> Result<(), NotesError> {
        let seed: [(&str, &[SeedNote]); 2] = [
            (
                "personal",
                &[
                    ("note-1", "Taxes 2026", "Collect receipts before March."),
                    (
                        "note-2",
                        "Holiday ideas",
                        "Lisbon in May, or the Alps in September.",
                    ),
                    ("note-3", "Groceries", "Milk, eggs, rye bread."),
                    (
                        "note-7",
                        "Groceries",
                        "Apples, coffee, oat milk for the office.",
                    ),
                    (
                        "note-14",
                        "Groceries",
                        "Party: crisps, lemonade, 40 paper cups.",
                    ),
                ],
            ),
            (
                "team",
                &[
                    (
                        "note-5",
                        "Sprint plan",
                        "Ship the confirmation layer; write the README.",
                    ),
                    ("note-8", "Retro notes", "Fewer meetings, more tests."),
                ],
            ),
        ];
        for (workspace, notes) in seed {
            let dir = self
                .root
                .create_subdir(workspace)
                .map_err(|e| NotesError::Storage(e.to_string()))?;
            for (id, title, body) in notes {
                dir.create_new(&format!("{id}.md"), format!("{title}\n{body}\n").as_bytes())
                    .map_err(|e| NotesError::Storage(e.to_string()))?;
            }
        }
        Ok(())
    }
}

/// `(id, title, body)` of a seeded note.
type SeedNote = (&'static str, &'static str, &'static str);

fn read_note(dir: &ScopedDir, id: &str) -> Result<Note, NotesError> {
    let text = dir
        .read_to_string(&format!("{id}.md"))
        .map_err(|e| match e {
            ScopeError::NotFound => NotesError::NotFound,
            other => NotesError::Refused(other),
        })?;
    let mut lines = text.lines();
    let title = lines.next().unwrap_or_default().trim().to_owned();
    let body: String = lines.collect::<Vec<_>>().join(" ");
    let excerpt: String = body.chars().take(40).collect();
    Ok(Note {
        id: id.to_owned(),
        title,
        excerpt,
    })
}

/// Note ids are `note-<digits>`: nothing else can name a file.
fn valid_id(id: &str) -> Result<&str, NotesError> {
    id_number(id).map(|_| id).ok_or(NotesError::NoteId)
}

fn id_number(id: &str) -> Option<u64> {
    let digits = id.strip_prefix("note-")?;
    if digits.is_empty() || digits.len() > 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
