//! Notes as files: `<data-dir>/<workspace>/<note-id>.md`, first line the title.
//!
//! Every access goes through `mcp_confirm::scope`: the workspace URI is parsed and mapped to one
//! folder directly below the data directory by path components, and files are read, created and
//! removed only through a no-symlink directory handle opened on that folder.
//!
//! `NotesStore::in_memory` keeps the same notes in memory instead (nothing touches the disk), so a
//! load test measures the server and its layers rather than the filesystem. Workspace URIs are
//! mapped exactly as for files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Files(ScopedDir),
    Memory(Mutex<BTreeMap<String, MemoryWorkspace>>),
}

/// One workspace in memory: notes by id number, and an index by title for the resolver.
#[derive(Debug, Default)]
struct MemoryWorkspace {
    notes: BTreeMap<u64, (String, String)>,
    by_title: HashMap<String, BTreeSet<u64>>,
}

impl MemoryWorkspace {
    fn note(&self, number: u64) -> Option<Note> {
        let (title, body) = self.notes.get(&number)?;
        Some(Note {
            id: format!("note-{number}"),
            title: title.clone(),
            excerpt: body.chars().take(40).collect(),
        })
    }

    fn insert(&mut self, number: u64, title: &str, body: &str) {
        self.notes
            .insert(number, (title.to_owned(), body.to_owned()));
        self.by_title
            .entry(title.to_owned())
            .or_default()
            .insert(number);
    }

    fn remove(&mut self, number: u64) -> bool {
        let Some((title, _)) = self.notes.remove(&number) else {
            return false;
        };
        if let Some(ids) = self.by_title.get_mut(&title) {
            ids.remove(&number);
            if ids.is_empty() {
                self.by_title.remove(&title);
            }
        }
        true
    }
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
        let store = Self {
            root_path,
            backend: Backend::Files(root),
        };
        let empty = std::fs::read_dir(&store.root_path)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if empty {
            store.seed()?;
        }
        Ok(store)
    }

    /// The seeded notes, in memory, under the (never touched) data directory `data_dir`; plus,
    /// for load tests, a workspace `load` holding `load_titles` titles `load-<k>` of three notes
    /// each.
    pub(crate) fn in_memory(data_dir: &Path, load_titles: u64) -> Result<Self, NotesError> {
        let root_path =
            std::path::absolute(data_dir).map_err(|e| NotesError::Storage(e.to_string()))?;
        let store = Self {
            root_path,
            backend: Backend::Memory(Mutex::new(BTreeMap::new())),
        };
        store.seed()?;
        if let Backend::Memory(workspaces) = &store.backend {
            let mut workspaces = workspaces.lock().map_err(|_| poisoned())?;
            let load = workspaces.entry("load".to_owned()).or_default();
            for k in 0..load_titles {
                for i in 0..3 {
                    load.insert(
                        3 * k + i + 1,
                        &format!("load-{k}"),
                        "A note for load tests.",
                    );
                }
            }
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

    fn workspace(&self, root: &ScopedDir, name: &str) -> Result<ScopedDir, NotesError> {
        root.subdir(name).map_err(NotesError::Workspace)
    }

    /// Runs `f` on an in-memory workspace.
    fn in_workspace<T>(
        workspaces: &Mutex<BTreeMap<String, MemoryWorkspace>>,
        name: &str,
        f: impl FnOnce(&mut MemoryWorkspace) -> Result<T, NotesError>,
    ) -> Result<T, NotesError> {
        let mut workspaces = workspaces.lock().map_err(|_| poisoned())?;
        let workspace = workspaces
            .get_mut(name)
            .ok_or(NotesError::Workspace(ScopeError::NotFound))?;
        f(workspace)
    }

    /// Every note in a workspace, in id order.
    pub(crate) fn list(&self, workspace: &str) -> Result<Vec<Note>, NotesError> {
        let root = match &self.backend {
            Backend::Files(root) => root,
            Backend::Memory(workspaces) => {
                return Self::in_workspace(workspaces, workspace, |ws| {
                    Ok(ws.notes.keys().filter_map(|&n| ws.note(n)).collect())
                });
            }
        };
        let dir = self.workspace(root, workspace)?;
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
        if let Backend::Memory(workspaces) = &self.backend {
            return Self::in_workspace(workspaces, workspace, |ws| {
                Ok(ws
                    .by_title
                    .get(title)
                    .into_iter()
                    .flatten()
                    .filter_map(|&n| ws.note(n))
                    .collect())
            });
        }
        Ok(self
            .list(workspace)?
            .into_iter()
            .filter(|n| n.title == title)
            .collect())
    }

    /// Loads one note live, refusing anything that is not a plain file in the workspace.
    pub(crate) fn load(&self, workspace: &str, id: &str) -> Result<Note, NotesError> {
        let number = id_number(id).ok_or(NotesError::NoteId)?;
        match &self.backend {
            Backend::Files(root) => read_note(&self.workspace(root, workspace)?, id),
            Backend::Memory(workspaces) => Self::in_workspace(workspaces, workspace, |ws| {
                ws.note(number).ok_or(NotesError::NotFound)
            }),
        }
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
        let root = match &self.backend {
            Backend::Files(root) => root,
            Backend::Memory(workspaces) => {
                return Self::in_workspace(workspaces, workspace, |ws| {
                    let next = ws.notes.keys().next_back().copied().unwrap_or(0) + 1;
                    ws.insert(next, title, body);
                    Ok(format!("note-{next}"))
                });
            }
        };
        let dir = self.workspace(root, workspace)?;
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
        let number = id_number(id).ok_or(NotesError::NoteId)?;
        match &self.backend {
            Backend::Files(root) => self
                .workspace(root, workspace)?
                .remove_file(&format!("{id}.md"))
                .map_err(|e| match e {
                    ScopeError::NotFound => NotesError::NotFound,
                    other => NotesError::Refused(other),
                }),
            Backend::Memory(workspaces) => Self::in_workspace(workspaces, workspace, |ws| {
                ws.remove(number).then_some(()).ok_or(NotesError::NotFound)
            }),
        }
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
            match &self.backend {
                Backend::Files(root) => {
                    let dir = root
                        .create_subdir(workspace)
                        .map_err(|e| NotesError::Storage(e.to_string()))?;
                    for (id, title, body) in notes {
                        dir.create_new(
                            &format!("{id}.md"),
                            format!("{title}\n{body}\n").as_bytes(),
                        )
                        .map_err(|e| NotesError::Storage(e.to_string()))?;
                    }
                }
                Backend::Memory(workspaces) => {
                    let mut workspaces = workspaces.lock().map_err(|_| poisoned())?;
                    let ws = workspaces.entry(workspace.to_owned()).or_default();
                    for (id, title, body) in notes {
                        let number = id_number(id).ok_or(NotesError::NoteId)?;
                        ws.insert(number, title, body);
                    }
                }
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

fn poisoned() -> NotesError {
    NotesError::Storage("the in-memory notes are unavailable after a panic".into())
}

/// Note ids are `note-<digits>`: nothing else can name a file.
fn id_number(id: &str) -> Option<u64> {
    let digits = id.strip_prefix("note-")?;
    // One spelling per note: no leading zeros, so `note-007` never names `note-7`.
    if digits.is_empty()
        || digits.len() > 12
        || digits.starts_with('0')
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    digits.parse().ok()
}
