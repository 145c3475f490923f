//! Acting on files through an opened directory handle that never follows a symbolic link.

use std::io::{self, Read, Write};
use std::path::Path;
use std::time::SystemTime;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
#[cfg(unix)]
use cap_std::fs::MetadataExt;
use cap_std::fs::{Dir, File, Metadata, OpenOptions};

use super::{ScopeError, plain_name};

/// A directory capability: every operation is relative to the opened handle, takes one plain
/// name, and refuses symbolic links.
///
/// Because the handle is opened once and everything below resolves relative to it (`openat`,
/// `unlinkat`), swapping a directory or a file for a symlink between a check and an action cannot
/// redirect the action outside: a swapped-in symlink is refused on open, and removing one removes
/// the link, never its target.
#[derive(Debug)]
pub struct ScopedDir {
    dir: Dir,
}

impl ScopedDir {
    /// Opens `root` (an operator-chosen path, resolved once) as the outermost capability.
    ///
    /// # Errors
    /// If `root` cannot be opened as a directory.
    pub fn open_root(root: &Path) -> io::Result<Self> {
        Ok(Self {
            dir: Dir::open_ambient_dir(root, ambient_authority())?,
        })
    }

    /// Opens the subdirectory `name` without following a symlink.
    ///
    /// # Errors
    /// [`ScopeError::NotAName`], [`ScopeError::NotFound`], [`ScopeError::Symlink`] (or
    /// [`ScopeError::WrongType`] for a non-directory), or [`ScopeError::Io`].
    pub fn subdir(&self, name: &str) -> Result<ScopedDir, ScopeError> {
        let name = plain_name(name)?;
        self.expect_kind(name, Kind::Dir)?;
        let dir = self
            .dir
            .open_dir_nofollow(name)
            .map_err(|e| classify(&e, self, name))?;
        Ok(Self { dir })
    }

    /// Creates the subdirectory `name` if it does not exist.
    ///
    /// # Errors
    /// As [`subdir`](Self::subdir), or if it cannot be created.
    pub fn create_subdir(&self, name: &str) -> Result<ScopedDir, ScopeError> {
        let name = plain_name(name)?;
        match self.dir.create_dir(name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ScopeError::Io(e)),
        }
        self.subdir(name)
    }

    /// Reads the regular file `name` as UTF-8, refusing a symlink.
    ///
    /// # Errors
    /// [`ScopeError::NotAName`], [`ScopeError::NotFound`], [`ScopeError::Symlink`],
    /// [`ScopeError::WrongType`], or [`ScopeError::Io`] (also for non-UTF-8 content).
    pub fn read_to_string(&self, name: &str) -> Result<String, ScopeError> {
        let (mut file, _) = self.open_regular(name)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(ScopeError::Io)?;
        Ok(text)
    }

    /// Reads the regular file `name`, refusing a symlink, and returns its bytes with its
    /// modification time (`None` where the platform has none), both from the one opened file.
    ///
    /// # Errors
    /// [`ScopeError::NotAName`], [`ScopeError::NotFound`], [`ScopeError::Symlink`],
    /// [`ScopeError::WrongType`], or [`ScopeError::Io`].
    pub fn read_with_modified(
        &self,
        name: &str,
    ) -> Result<(Vec<u8>, Option<SystemTime>), ScopeError> {
        let (mut file, meta) = self.open_regular(name)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(ScopeError::Io)?;
        let modified = meta
            .modified()
            .ok()
            .map(cap_std::time::SystemTime::into_std);
        Ok((bytes, modified))
    }

    /// Creates the file `name` with `contents`; fails if anything (even a dangling symlink) exists
    /// there.
    ///
    /// # Errors
    /// [`ScopeError::NotAName`], or [`ScopeError::Io`] (`AlreadyExists` when taken).
    pub fn create_new(&self, name: &str, contents: &[u8]) -> Result<(), ScopeError> {
        let name = plain_name(name)?;
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create_new(true)
            .follow(FollowSymlinks::No);
        let mut file = self.dir.open_with(name, &options).map_err(ScopeError::Io)?;
        file.write_all(contents).map_err(ScopeError::Io)?;
        file.sync_all().map_err(ScopeError::Io)
    }

    /// Removes the regular file `name`, refusing a symlink or anything but a regular file.
    ///
    /// The removal is an `unlinkat` on this handle: if `name` was swapped for a symlink after the
    /// check, the link itself is what disappears; its target is never touched.
    ///
    /// # Errors
    /// [`ScopeError::NotAName`], [`ScopeError::NotFound`], [`ScopeError::Symlink`],
    /// [`ScopeError::WrongType`], or [`ScopeError::Io`].
    pub fn remove_file(&self, name: &str) -> Result<(), ScopeError> {
        let name = plain_name(name)?;
        self.expect_kind(name, Kind::File)?;
        self.dir
            .remove_file_or_symlink(name)
            .map_err(|e| classify(&e, self, name))
    }

    /// Removes the regular file `name` only if `condition` holds for its contents: a conditional
    /// delete (compare a content hash or a version, then remove) done through this one handle.
    ///
    /// The file is opened without following a symlink and read once; `condition` sees exactly
    /// those bytes. Right before the `unlinkat`, the name is looked up again (without following
    /// it) and must still be the same file (device and inode) with the same size, modification and
    /// status-change times as when it was opened; otherwise nothing is removed. Returns whether
    /// the file was removed.
    ///
    /// What stays racy (POSIX has no "unlink if this inode" call): a rename over `name`, or a write
    /// into the file, that lands after that last lookup and before the `unlinkat` itself, a window
    /// of two adjacent system calls; and a write that keeps the size and lands within the
    /// filesystem's timestamp granularity of the open, which the times cannot show. Anything
    /// earlier is caught by the condition or by the lookup.
    ///
    /// # Errors
    /// [`ScopeError::NotAName`], [`ScopeError::NotFound`] (also when the name disappears before
    /// the removal), [`ScopeError::Symlink`], [`ScopeError::WrongType`], or [`ScopeError::Io`].
    pub fn remove_file_if(
        &self,
        name: &str,
        condition: impl FnOnce(&[u8]) -> bool,
    ) -> Result<bool, ScopeError> {
        let (mut file, opened) = self.open_regular(name)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(ScopeError::Io)?;
        if !condition(&bytes) {
            return Ok(false);
        }
        let named = self
            .dir
            .symlink_metadata(name)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => ScopeError::NotFound,
                _ => ScopeError::Io(e),
            })?;
        if !named.file_type().is_file() || !same_unchanged_file(&opened, &named) {
            return Ok(false);
        }
        self.dir
            .remove_file_or_symlink(name)
            .map_err(|e| classify(&e, self, name))?;
        Ok(true)
    }

    /// The names of the regular files directly inside, sorted; symlinks and other entries are
    /// skipped.
    ///
    /// # Errors
    /// [`ScopeError::Io`].
    pub fn file_names(&self) -> Result<Vec<String>, ScopeError> {
        let mut names = Vec::new();
        for entry in self.dir.entries().map_err(ScopeError::Io)? {
            let entry = entry.map_err(ScopeError::Io)?;
            let is_file = entry.file_type().map_err(ScopeError::Io)?.is_file();
            if let (true, Ok(name)) = (is_file, entry.file_name().into_string()) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// When this directory last changed (an entry created, removed or renamed), from the opened
    /// handle. A cache of the directory's contents can compare it to notice changes made by
    /// others; timestamps are coarse (a clock tick), so two changes may share one.
    ///
    /// # Errors
    /// [`ScopeError::Io`].
    pub fn modified(&self) -> Result<std::time::SystemTime, ScopeError> {
        self.dir
            .dir_metadata()
            .and_then(|meta| meta.modified())
            .map(cap_std::time::SystemTime::into_std)
            .map_err(ScopeError::Io)
    }

    /// Whether a regular file `name` exists here (not a symlink).
    pub fn has_file(&self, name: &str) -> bool {
        plain_name(name).is_ok() && self.expect_kind(name, Kind::File).is_ok()
    }

    /// Opens the regular file `name` for reading without following a symlink; with the metadata
    /// of the opened file.
    fn open_regular(&self, name: &str) -> Result<(File, Metadata), ScopeError> {
        let name = plain_name(name)?;
        self.expect_kind(name, Kind::File)?;
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No);
        let file = self
            .dir
            .open_with(name, &options)
            .map_err(|e| classify(&e, self, name))?;
        let meta = file.metadata().map_err(ScopeError::Io)?;
        if !meta.is_file() {
            return Err(ScopeError::WrongType);
        }
        Ok((file, meta))
    }

    fn expect_kind(&self, name: &str, kind: Kind) -> Result<(), ScopeError> {
        let meta = self
            .dir
            .symlink_metadata(name)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => ScopeError::NotFound,
                _ => ScopeError::Io(e),
            })?;
        let file_type = meta.file_type();
        if file_type.is_symlink() {
            return Err(ScopeError::Symlink);
        }
        let right = match kind {
            Kind::File => file_type.is_file(),
            Kind::Dir => file_type.is_dir(),
        };
        if right {
            Ok(())
        } else {
            Err(ScopeError::WrongType)
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    File,
    Dir,
}

/// Whether `now` is the file `then` described (device and inode), not written to since (size,
/// modification and status-change times).
#[cfg(unix)]
fn same_unchanged_file(then: &Metadata, now: &Metadata) -> bool {
    then.dev() == now.dev()
        && then.ino() == now.ino()
        && then.size() == now.size()
        && (then.mtime(), then.mtime_nsec()) == (now.mtime(), now.mtime_nsec())
        && (then.ctime(), then.ctime_nsec()) == (now.ctime(), now.ctime_nsec())
}

/// Without inode numbers: the same size and modification time.
#[cfg(not(unix))]
fn same_unchanged_file(then: &Metadata, now: &Metadata) -> bool {
    then.len() == now.len() && then.modified().ok() == now.modified().ok()
}

/// Maps an open/remove failure to why, re-reading the entry without following it.
fn classify(error: &io::Error, dir: &ScopedDir, name: &str) -> ScopeError {
    match dir.dir.symlink_metadata(name) {
        Ok(meta) if meta.file_type().is_symlink() => ScopeError::Symlink,
        Err(e) if e.kind() == io::ErrorKind::NotFound => ScopeError::NotFound,
        _ => ScopeError::Io(io::Error::new(error.kind(), error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn temp() -> (tempdir::TempDir, ScopedDir) {
        let t = tempdir::TempDir::new();
        let d = ScopedDir::open_root(t.path()).unwrap();
        (t, d)
    }

    /// A throwaway directory, removed on drop.
    mod tempdir {
        use std::path::{Path, PathBuf};

        pub(super) struct TempDir(PathBuf);

        impl TempDir {
            pub(super) fn new() -> Self {
                let n = crate::store::Nonce::random().to_hex();
                let p = std::env::temp_dir().join(format!("mcp-confirm-scope-{n}"));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
            pub(super) fn path(&self) -> &Path {
                &self.0
            }
        }

        impl Drop for TempDir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn reads_creates_lists_and_removes_regular_files() {
        let (_t, root) = temp();
        let ws = root.create_subdir("personal").unwrap();
        ws.create_new("note-1.md", b"Groceries\nmilk").unwrap();
        assert!(matches!(
            ws.create_new("note-1.md", b"x"),
            Err(ScopeError::Io(_))
        ));
        assert_eq!(ws.read_to_string("note-1.md").unwrap(), "Groceries\nmilk");
        assert_eq!(ws.file_names().unwrap(), ["note-1.md"]);
        ws.remove_file("note-1.md").unwrap();
        assert!(matches!(
            ws.read_to_string("note-1.md"),
            Err(ScopeError::NotFound)
        ));
        assert!(matches!(
            ws.remove_file("note-1.md"),
            Err(ScopeError::NotFound)
        ));
        assert!(matches!(
            ws.read_to_string("../x"),
            Err(ScopeError::NotAName)
        ));
    }

    #[test]
    fn symlinks_are_refused_and_their_targets_never_touched() {
        let (t, root) = temp();
        let ws = root.create_subdir("personal").unwrap();
        let outside = t.path().join("outside.md");
        std::fs::write(&outside, "secret").unwrap();
        symlink(&outside, t.path().join("personal/note-9.md")).unwrap();
        assert!(matches!(
            ws.read_to_string("note-9.md"),
            Err(ScopeError::Symlink)
        ));
        assert!(matches!(
            ws.remove_file("note-9.md"),
            Err(ScopeError::Symlink)
        ));
        assert!(!ws.has_file("note-9.md"));
        assert!(ws.file_names().unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
        // A workspace that is itself a symlink is refused.
        symlink(t.path().join("personal"), t.path().join("alias")).unwrap();
        assert!(matches!(root.subdir("alias"), Err(ScopeError::Symlink)));
        // Creating through a dangling symlink is refused too.
        symlink(
            t.path().join("nowhere.md"),
            t.path().join("personal/note-10.md"),
        )
        .unwrap();
        assert!(ws.create_new("note-10.md", b"x").is_err());
        assert!(!t.path().join("nowhere.md").exists());
    }

    #[test]
    fn a_handle_stays_on_the_directory_it_opened() {
        let (t, root) = temp();
        let ws = root.create_subdir("personal").unwrap();
        ws.create_new("note-1.md", b"mine").unwrap();
        // Swap the workspace folder for a symlink to elsewhere after it was opened.
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("note-1.md"), "not mine").unwrap();
        std::fs::rename(t.path().join("personal"), t.path().join("moved")).unwrap();
        symlink(&elsewhere, t.path().join("personal")).unwrap();
        ws.remove_file("note-1.md").unwrap();
        assert!(!t.path().join("moved/note-1.md").exists());
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("note-1.md")).unwrap(),
            "not mine"
        );
        // And opening it fresh now refuses the symlink.
        assert!(matches!(root.subdir("personal"), Err(ScopeError::Symlink)));
    }
    #[test]
    fn remove_file_if_removes_only_what_the_condition_saw() {
        let (_t, root) = temp();
        let ws = root.create_subdir("personal").unwrap();
        ws.create_new("note-1.md", b"Groceries\nmilk").unwrap();
        let (bytes, modified) = ws.read_with_modified("note-1.md").unwrap();
        assert_eq!(bytes, b"Groceries\nmilk");
        assert!(modified.is_some());
        // The condition refuses: nothing is removed.
        assert!(!ws.remove_file_if("note-1.md", |b| b == b"other").unwrap());
        assert!(ws.has_file("note-1.md"));
        // The condition holds: removed.
        assert!(
            ws.remove_file_if("note-1.md", |b| b == b"Groceries\nmilk")
                .unwrap()
        );
        assert!(!ws.has_file("note-1.md"));
        assert!(matches!(
            ws.remove_file_if("note-1.md", |_| true),
            Err(ScopeError::NotFound)
        ));
        assert!(matches!(
            ws.remove_file_if("../note-1.md", |_| true),
            Err(ScopeError::NotAName)
        ));
    }

    #[test]
    fn remove_file_if_keeps_a_file_renamed_over_or_written_after_the_read() {
        let (t, root) = temp();
        let ws = root.create_subdir("personal").unwrap();
        let path = t.path().join("personal/note-1.md");
        // Renamed over between the read and the removal: another inode now holds the name.
        ws.create_new("note-1.md", b"old").unwrap();
        let removed = ws
            .remove_file_if("note-1.md", |b| {
                std::fs::write(t.path().join("personal/tmp"), "new").unwrap();
                std::fs::rename(t.path().join("personal/tmp"), &path).unwrap();
                b == b"old"
            })
            .unwrap();
        assert!(!removed);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        // Written in place between the read and the removal.
        let removed = ws
            .remove_file_if("note-1.md", |b| {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap();
                f.write_all(b", and more").unwrap();
                b == b"new"
            })
            .unwrap();
        assert!(!removed);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new, and more");
        // Removed between the read and the removal.
        assert!(matches!(
            ws.remove_file_if("note-1.md", |_| {
                std::fs::remove_file(&path).unwrap();
                true
            }),
            Err(ScopeError::NotFound)
        ));
        // A symlink in its place is refused, its target untouched.
        std::fs::write(t.path().join("outside.md"), "secret").unwrap();
        symlink(t.path().join("outside.md"), &path).unwrap();
        assert!(matches!(
            ws.remove_file_if("note-1.md", |_| true),
            Err(ScopeError::Symlink)
        ));
        assert_eq!(
            std::fs::read_to_string(t.path().join("outside.md")).unwrap(),
            "secret"
        );
    }
}
