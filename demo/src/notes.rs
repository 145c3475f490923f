//! Notes as files: `<data-dir>/<workspace>/<note-id>.md`, first line the title.
//!
//! A note made by `notes_create` has a second line naming its creator,
//! `<!-- creator: alice -->` (an HTML comment, so the Markdown still reads as the note); files
//! without that line (the seeded notes, notes written by hand) read as before, creator unknown.
//!
//! Every access goes through `mcp_confirm::scope`: the workspace URI is parsed and mapped to one
//! folder directly below the data directory by path components, and files are read, created and
//! removed only through a no-symlink directory handle opened on that folder.
//!
//! A note's **version** is a hash of its file's bytes: the confirmation form binds it, the
//! revalidation hook compares it with the live file, and the delete removes the file only if it
//! still has it (`ScopedDir::remove_file_if`). Ids are never reused: a new note gets a random
//! 12-digit id, created with `create_new` (a taken id is retried, never overwritten).
//!
//! `NotesStore::in_memory` keeps the same notes in memory instead (nothing touches the disk), so a
//! load test measures the server and its layers rather than the filesystem. Workspace URIs are
//! mapped exactly as for files; ids come from a counter that only grows, versions from a
//! generation counter.
//!
//! **Finding notes by title** would mean reading every file of the workspace. Instead each workspace
//! has a title index (id → title, title → ids), built by one full read and kept up to date by this
//! process's own creates and deletes. Changes made by anyone else (another server on the same
//! directory, an editor) show as a change of the directory's modification time that this process
//! did not make, and the next lookup reads the workspace again. Every hit is read live before it is
//! shown, so the index can hide a note for a while, but never show one that is not there or show an
//! old version. It hides one when an outside change lands within the same clock tick as one of
//! ours, or when a file is retitled by editing it in place (which leaves the directory's time
//! alone): such a note appears under its new title after the next change to the directory, or
//! after a lookup under its old title.
//!
//! Every method blocks (file I/O); async callers run them on the blocking pool.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use mcp_confirm::scope::{self, ScopeError, ScopedDir};
use sha2::{Digest, Sha256};

/// One note as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Its id (`note-<n>`), its file's name.
    pub id: String,
    /// Its title.
    pub title: String,
    /// The start of the body (40 characters at most).
    pub excerpt: String,
    /// Who made it, when known (notes made by `notes_create`).
    pub creator: Option<String>,
    /// When it last changed, when known.
    pub modified: Option<SystemTime>,
    /// Changes whenever the note does: a hash of the file's bytes (files), a generation (memory).
    pub version: String,
}

/// The longest title shown in a label, in characters.
const LABEL_TITLE_CHARS: usize = 32;
/// The longest excerpt of the body shown in a label, in characters.
const LABEL_EXCERPT_CHARS: usize = 24;

impl Note {
    /// How the note is shown in a confirmation form: the server's facts first (id, creator,
    /// modification time in UTC), then the user-written title and a short excerpt, both capped.
    pub fn label(&self) -> String {
        let mut label = self.id.clone();
        let mut facts = Vec::new();
        if let Some(creator) = &self.creator {
            facts.push(format!("by {creator}"));
        }
        if let Some(modified) = self.modified {
            facts.push(utc_minute(modified));
        }
        if !facts.is_empty() {
            let _ = write!(label, " ({})", facts.join(", "));
        }
        let _ = write!(label, " {}", capped(&self.title, LABEL_TITLE_CHARS));
        if !self.excerpt.is_empty() {
            let _ = write!(label, ": {}", capped(&self.excerpt, LABEL_EXCERPT_CHARS));
        }
        label
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn capped(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// `YYYY-MM-DD HH:MM UTC`.
pub fn utc_minute(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (year, month, day) = civil_from_days(days);
    let minute_of_day = secs % 86_400 / 60;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        minute_of_day / 60,
        minute_of_day % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The notes under one data directory.
#[derive(Debug)]
pub struct NotesStore {
    /// The canonical data directory; workspace URIs are matched against it.
    root_path: PathBuf,
    backend: Backend,
    /// Seeded for load tests: the load generator's principals (`load-<k>`) are let in.
    load_users: bool,
}

#[derive(Debug)]
enum Backend {
    Files {
        root: ScopedDir,
        /// Title indexes by workspace name, each behind its own lock.
        indexes: Mutex<HashMap<String, Arc<Mutex<TitleIndex>>>>,
    },
    Memory(Mutex<BTreeMap<String, MemoryWorkspace>>),
}

/// Which note ids of one workspace have which title, as of a directory modification time.
#[derive(Debug, Default)]
struct TitleIndex {
    /// The directory's modification time when the index last matched it; `None`: read it again.
    current_as_of: Option<SystemTime>,
    titles: HashMap<String, String>,
    by_title: HashMap<String, BTreeSet<String>>,
}

impl TitleIndex {
    fn insert(&mut self, id: &str, title: &str) {
        self.remove(id);
        self.titles.insert(id.to_owned(), title.to_owned());
        self.by_title
            .entry(title.to_owned())
            .or_default()
            .insert(id.to_owned());
    }

    fn remove(&mut self, id: &str) {
        if let Some(title) = self.titles.remove(id)
            && let Some(ids) = self.by_title.get_mut(&title)
        {
            ids.remove(id);
            if ids.is_empty() {
                self.by_title.remove(&title);
            }
        }
    }

    /// Reads every note of `dir` (whose modification time, taken before reading, is `as_of`).
    fn rebuild(&mut self, dir: &ScopedDir, as_of: SystemTime) -> Result<(), NotesError> {
        self.titles.clear();
        self.by_title.clear();
        for note in read_all(dir)? {
            self.insert(&note.id, &note.title);
        }
        self.current_as_of = Some(as_of);
        Ok(())
    }
}

/// One note in memory.
#[derive(Debug)]
struct MemoryNote {
    title: String,
    body: String,
    creator: Option<String>,
    modified: SystemTime,
    generation: u64,
}

/// One workspace in memory: notes by id number, an index by title for the resolver, and the
/// counters ids and versions come from (they only grow).
#[derive(Debug, Default)]
struct MemoryWorkspace {
    notes: BTreeMap<u64, MemoryNote>,
    by_title: HashMap<String, BTreeSet<u64>>,
    next_id: u64,
    generation: u64,
}

impl MemoryWorkspace {
    fn note(&self, number: u64) -> Option<Note> {
        let note = self.notes.get(&number)?;
        Some(Note {
            id: format!("note-{number}"),
            title: note.title.clone(),
            excerpt: note.body.chars().take(40).collect(),
            creator: note.creator.clone(),
            modified: Some(note.modified),
            version: format!("g{}", note.generation),
        })
    }

    fn insert(&mut self, number: u64, title: &str, body: &str, creator: Option<&str>) {
        self.generation += 1;
        self.next_id = self.next_id.max(number + 1);
        let note = MemoryNote {
            title: title.to_owned(),
            body: body.to_owned(),
            creator: creator.map(str::to_owned),
            modified: SystemTime::now(),
            generation: self.generation,
        };
        if let Some(old) = self.notes.insert(number, note) {
            self.unindex(number, &old.title);
        }
        self.by_title
            .entry(title.to_owned())
            .or_default()
            .insert(number);
    }

    fn unindex(&mut self, number: u64, title: &str) {
        if let Some(ids) = self.by_title.get_mut(title) {
            ids.remove(&number);
            if ids.is_empty() {
                self.by_title.remove(title);
            }
        }
    }

    /// Removes the note if its version is `version`.
    fn remove_if(&mut self, number: u64, version: &str) -> Result<Note, NotesError> {
        let note = self.note(number).ok_or(NotesError::NotFound)?;
        if note.version != version {
            return Err(NotesError::Changed);
        }
        if let Some(old) = self.notes.remove(&number) {
            self.unindex(number, &old.title);
        }
        Ok(note)
    }
}

/// Why a notes operation failed.
/// Why a notes operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NotesError {
    /// The workspace URI is not one of ours.
    #[error("invalid workspace: {0}")]
    Workspace(#[source] ScopeError),
    /// Not a note id.
    #[error("invalid note id")]
    NoteId,
    /// No such note.
    #[error("note not found")]
    NotFound,
    /// The note is not the version the user was shown.
    #[error("the note changed since it was shown")]
    Changed,
    /// The note is not a plain file inside the workspace.
    #[error("note is not a plain file inside the workspace: {0}")]
    Refused(#[source] ScopeError),
    /// The storage failed.
    #[error("storage error: {0}")]
    Storage(String),
}

/// How many random ids a create tries before giving up (a collision among 9 × 10¹¹ ids is rare;
/// sixteen in a row means something else is wrong).
const CREATE_ATTEMPTS: usize = 16;

impl NotesStore {
    /// Opens (creating and seeding it if missing or empty) the data directory.
    pub fn open(data_dir: &Path) -> Result<Self, NotesError> {
        std::fs::create_dir_all(data_dir).map_err(|e| NotesError::Storage(e.to_string()))?;
        let root_path = data_dir
            .canonicalize()
            .map_err(|e| NotesError::Storage(e.to_string()))?;
        let root =
            ScopedDir::open_root(&root_path).map_err(|e| NotesError::Storage(e.to_string()))?;
        let store = Self {
            root_path,
            backend: Backend::Files {
                root,
                indexes: Mutex::new(HashMap::new()),
            },
            load_users: false,
        };
        let empty = std::fs::read_dir(&store.root_path)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if empty {
            store.seed()?;
        }
        Ok(store)
    }

    /// Like [`open`](Self::open), plus (for load tests) a workspace `load` holding `load_titles`
    /// titles `load-<k>` of three notes each, written as files unless already there; every
    /// workspace's title index is built before the server starts.
    pub fn open_with_load(data_dir: &Path, load_titles: u64) -> Result<Self, NotesError> {
        let mut store = Self::open(data_dir)?;
        store.load_users = load_titles > 0;
        if load_titles > 0 {
            let load = store.root_path.join("load");
            std::fs::create_dir_all(&load).map_err(|e| NotesError::Storage(e.to_string()))?;
            for k in 0..load_titles {
                for i in 0..3 {
                    let path = load.join(format!("note-{}.md", 3 * k + i + 1));
                    if !path.exists() {
                        // Seeding at start-up, before anything is served: no fsync per file.
                        std::fs::write(&path, format!("load-{k}\nA note for load tests.\n"))
                            .map_err(|e| NotesError::Storage(e.to_string()))?;
                    }
                }
            }
        }
        let names = std::fs::read_dir(&store.root_path)
            .map_err(|e| NotesError::Storage(e.to_string()))?
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok());
        for workspace in names {
            // Not every entry is a workspace; those that are not are skipped.
            let _ = store.find_by_title(&workspace, "");
        }
        Ok(store)
    }

    /// Whether the store was seeded for load tests, so that the load generator's many
    /// principals (`load-<k>`, token `load-<k>-token`) may sign in and use the `load` workspace.
    pub fn load_users(&self) -> bool {
        self.load_users
    }

    /// The seeded notes, in memory, under the (never touched) data directory `data_dir`; plus,
    /// for load tests, a workspace `load` holding `load_titles` titles `load-<k>` of
    /// `per_title` notes each (three: every form offers three; one: a standing approval covers
    /// each call).
    pub fn in_memory(
        data_dir: &Path,
        load_titles: u64,
        per_title: u64,
    ) -> Result<Self, NotesError> {
        let root_path =
            std::path::absolute(data_dir).map_err(|e| NotesError::Storage(e.to_string()))?;
        let store = Self {
            root_path,
            backend: Backend::Memory(Mutex::new(BTreeMap::new())),
            load_users: load_titles > 0,
        };
        store.seed()?;
        if let Backend::Memory(workspaces) = &store.backend {
            let mut workspaces = workspaces.lock().map_err(|_| poisoned())?;
            let load = workspaces.entry("load".to_owned()).or_default();
            for k in 0..load_titles {
                for i in 0..per_title {
                    load.insert(
                        per_title * k + i + 1,
                        &format!("load-{k}"),
                        "A note for load tests.",
                        None,
                    );
                }
            }
        }
        Ok(store)
    }

    /// Whether the notes are files (so calls block on I/O), not in memory.
    pub fn on_disk(&self) -> bool {
        matches!(self.backend, Backend::Files { .. })
    }

    /// The data directory, canonical.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The `file://` URI of a workspace folder.
    pub fn workspace_uri(&self, workspace: &str) -> String {
        format!("file://{}", self.root_path.join(workspace).display())
    }

    /// Maps a workspace URI to the workspace name: exactly one folder directly below the data
    /// directory, by path components.
    pub fn workspace_name(&self, uri: &str) -> Result<String, NotesError> {
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
    pub fn list(&self, workspace: &str) -> Result<Vec<Note>, NotesError> {
        let root = match &self.backend {
            Backend::Files { root, .. } => root,
            Backend::Memory(workspaces) => {
                return Self::in_workspace(workspaces, workspace, |ws| {
                    Ok(ws.notes.keys().filter_map(|&n| ws.note(n)).collect())
                });
            }
        };
        read_all(&self.workspace(root, workspace)?)
    }

    /// The notes in a workspace whose title is exactly `title`.
    pub fn find_by_title(&self, workspace: &str, title: &str) -> Result<Vec<Note>, NotesError> {
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
        let Backend::Files { root, indexes } = &self.backend else {
            return Ok(Vec::new());
        };
        let dir = self.workspace(root, workspace)?;
        let index = Self::index(indexes, workspace)?;
        let ids: Vec<String> = {
            let mut index = index.lock().map_err(|_| poisoned())?;
            let now = dir
                .modified()
                .map_err(|e| NotesError::Storage(e.to_string()))?;
            if index.current_as_of != Some(now) {
                index.rebuild(&dir, now)?;
            }
            index
                .by_title
                .get(title)
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        };
        // Read live: a hit the index still holds but the file no longer matches is not shown,
        // and the index is read again at the next lookup (the file was edited in place, which
        // leaves the directory's time alone).
        let live: Vec<Result<Note, NotesError>> =
            ids.iter().map(|id| read_note(&dir, id)).collect();
        if live
            .iter()
            .any(|n| n.as_ref().map_or(true, |n| n.title != title))
        {
            index.lock().map_err(|_| poisoned())?.current_as_of = None;
        }
        let mut notes: Vec<Note> = live
            .into_iter()
            .filter_map(Result::ok)
            .filter(|note| note.title == title)
            .collect();
        notes.sort_by_key(|n| (id_number(&n.id), n.id.clone()));
        Ok(notes)
    }

    /// The title index of `workspace` (empty and out of date when new).
    fn index(
        indexes: &Mutex<HashMap<String, Arc<Mutex<TitleIndex>>>>,
        workspace: &str,
    ) -> Result<Arc<Mutex<TitleIndex>>, NotesError> {
        let mut indexes = indexes.lock().map_err(|_| poisoned())?;
        Ok(Arc::clone(indexes.entry(workspace.to_owned()).or_default()))
    }

    /// Runs `change` (a create or a delete in `dir`) under the workspace's index lock, then lets
    /// `update` record it in the index. If the index matched the directory before the change, it
    /// matches it after (the directory's new modification time is ours); if not, it is read again
    /// at the next lookup.
    fn changing<T>(
        &self,
        workspace: &str,
        dir: &ScopedDir,
        change: impl FnOnce() -> Result<T, NotesError>,
        update: impl FnOnce(&mut TitleIndex, &T),
    ) -> Result<T, NotesError> {
        let Backend::Files { indexes, .. } = &self.backend else {
            return change();
        };
        let index = Self::index(indexes, workspace)?;
        let mut index = index.lock().map_err(|_| poisoned())?;
        let before = dir.modified().ok();
        let current = before.is_some() && index.current_as_of == before;
        let done = change();
        match &done {
            Ok(value) if current => {
                update(&mut index, value);
                index.current_as_of = dir.modified().ok();
            }
            _ => index.current_as_of = None,
        }
        done
    }

    /// Loads one note live, refusing anything that is not a plain file in the workspace.
    pub fn load(&self, workspace: &str, id: &str) -> Result<Note, NotesError> {
        let number = id_number(id).ok_or(NotesError::NoteId)?;
        match &self.backend {
            Backend::Files { root, .. } => read_note(&self.workspace(root, workspace)?, id),
            Backend::Memory(workspaces) => Self::in_workspace(workspaces, workspace, |ws| {
                ws.note(number).ok_or(NotesError::NotFound)
            }),
        }
    }

    /// Creates a note (recording `creator`, when given) and returns its id, one never used before.
    pub fn create(
        &self,
        workspace: &str,
        title: &str,
        body: &str,
        creator: Option<&str>,
    ) -> Result<String, NotesError> {
        let title = title.lines().next().unwrap_or_default().trim();
        if title.is_empty() {
            return Err(NotesError::Storage("a note needs a title".into()));
        }
        let creator = creator.map(clean_creator).filter(|c| !c.is_empty());
        let root = match &self.backend {
            Backend::Files { root, .. } => root,
            Backend::Memory(workspaces) => {
                return Self::in_workspace(workspaces, workspace, |ws| {
                    let id = ws.next_id.max(1);
                    ws.insert(id, title, body, creator.as_deref());
                    Ok(format!("note-{id}"))
                });
            }
        };
        let dir = self.workspace(root, workspace)?;
        let contents = match &creator {
            Some(creator) => format!("{title}\n{CREATOR_PREFIX}{creator}{CREATOR_SUFFIX}\n{body}"),
            None => format!("{title}\n{body}"),
        };
        self.changing(
            workspace,
            &dir,
            || {
                for _ in 0..CREATE_ATTEMPTS {
                    let id = random_id()?;
                    match dir.create_new(&format!("{id}.md"), contents.as_bytes()) {
                        Ok(()) => return Ok(id),
                        Err(ScopeError::Io(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        }
                        Err(e) => return Err(NotesError::Storage(e.to_string())),
                    }
                }
                Err(NotesError::Storage(
                    "no free note id after several tries".into(),
                ))
            },
            |index, id| index.insert(id, title),
        )
    }

    /// Deletes exactly one note, and only if its version is still `version` (the one the user
    /// confirmed): compared and removed through the workspace handle, never through a symlink
    /// (see `ScopedDir::remove_file_if` for the window that remains). Returns the deleted note.
    pub fn delete_if_version(
        &self,
        workspace: &str,
        id: &str,
        version: &str,
    ) -> Result<Note, NotesError> {
        let number = id_number(id).ok_or(NotesError::NoteId)?;
        let root = match &self.backend {
            Backend::Files { root, .. } => root,
            Backend::Memory(workspaces) => {
                return Self::in_workspace(workspaces, workspace, |ws| {
                    ws.remove_if(number, version)
                });
            }
        };
        let dir = self.workspace(root, workspace)?;
        self.changing(
            workspace,
            &dir,
            || {
                let mut seen = None;
                let removed = dir
                    .remove_file_if(&format!("{id}.md"), |bytes| {
                        let note = parse_note(id, bytes, None);
                        let same = note.version == version;
                        seen = Some(note);
                        same
                    })
                    .map_err(|e| match e {
                        ScopeError::NotFound => NotesError::NotFound,
                        other => NotesError::Refused(other),
                    })?;
                match (removed, seen) {
                    (true, Some(note)) => Ok(note),
                    _ => Err(NotesError::Changed),
                }
            },
            |index, note| index.remove(&note.id),
        )
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
                Backend::Files { root, .. } => {
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
                        ws.insert(number, title, body, None);
                    }
                }
            }
        }
        Ok(())
    }
}

/// `(id, title, body)` of a seeded note.
type SeedNote = (&'static str, &'static str, &'static str);

/// The creator line of a note made by `notes_create`: `<!-- creator: alice -->`.
const CREATOR_PREFIX: &str = "<!-- creator: ";
const CREATOR_SUFFIX: &str = " -->";

/// A creator name as stored: letters, digits and `-_.@` only, at most 64 characters, so it can
/// neither end the comment nor start another line.
fn clean_creator(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
        .take(64)
        .collect()
}

/// The version of a note file: the first 16 bytes of the SHA-256 of its bytes, in hex.
pub fn version_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest[..16]
        .iter()
        .fold(String::with_capacity(32), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A new note id: `note-` and 12 random digits, the first not zero.
fn random_id() -> Result<String, NotesError> {
    const LOW: u64 = 100_000_000_000;
    const SPAN: u64 = 900_000_000_000;
    let random = getrandom::u64().map_err(|e| NotesError::Storage(e.to_string()))?;
    Ok(format!("note-{}", LOW + random % SPAN))
}

/// Every note of a workspace, in id order (files that are not notes are skipped).
fn read_all(dir: &ScopedDir) -> Result<Vec<Note>, NotesError> {
    let mut notes = Vec::new();
    for file in dir
        .file_names()
        .map_err(|e| NotesError::Storage(e.to_string()))?
    {
        let Some(id) = file.strip_suffix(".md") else {
            continue;
        };
        if id_number(id).is_none() {
            continue;
        }
        if let Ok(note) = read_note(dir, id) {
            notes.push(note);
        }
    }
    notes.sort_by_key(|n| (id_number(&n.id), n.id.clone()));
    Ok(notes)
}

fn read_note(dir: &ScopedDir, id: &str) -> Result<Note, NotesError> {
    let (bytes, modified) = dir
        .read_with_modified(&format!("{id}.md"))
        .map_err(|e| match e {
            ScopeError::NotFound => NotesError::NotFound,
            other => NotesError::Refused(other),
        })?;
    Ok(parse_note(id, &bytes, modified))
}

/// A note from its file's bytes: the first line is the title; an optional creator line follows;
/// the rest is the body. Bytes that are not UTF-8 are shown replaced (the version still hashes
/// the bytes as they are).
fn parse_note(id: &str, bytes: &[u8], modified: Option<SystemTime>) -> Note {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().peekable();
    let title = lines.next().unwrap_or_default().trim().to_owned();
    let creator = lines
        .peek()
        .and_then(|l| l.strip_prefix(CREATOR_PREFIX))
        .and_then(|l| l.strip_suffix(CREATOR_SUFFIX))
        .map(clean_creator);
    if creator.is_some() {
        lines.next();
    }
    let body: String = lines.collect::<Vec<_>>().join(" ");
    let excerpt: String = body.chars().take(40).collect();
    Note {
        id: id.to_owned(),
        title,
        excerpt,
        creator,
        modified,
        version: version_of(bytes),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc() {
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        assert_eq!(utc_minute(at(0)), "1970-01-01 00:00 UTC");
        assert_eq!(utc_minute(at(951_782_400)), "2000-02-29 00:00 UTC");
        assert_eq!(utc_minute(at(1_777_777_777)), "2026-05-03 03:09 UTC");
    }
}
