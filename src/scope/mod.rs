//! Workspace scoping for tools that act on files: turn a `file://` workspace URI into a path,
//! decide containment by path components, and (feature `fs`) act on files only through an opened
//! directory handle that never follows a symbolic link.
//!
//! ```
//! use std::path::Path;
//! use mcp_confirm::scope::{self, ScopeError};
//!
//! let root = Path::new("/data");
//! // Percent-decoded once, `.` and `..` resolved, then compared by components:
//! let path = scope::file_uri_to_path("file:///data/personal/./notes/../")?;
//! assert_eq!(scope::child_name(root, &path)?, "personal");
//! // A sibling that merely starts with the same letters is not inside.
//! let sibling = scope::file_uri_to_path("file:///data-evil/personal")?;
//! assert!(!scope::is_within(root, &sibling));
//! // Decoded before `..` is resolved, so an encoded climb is seen as one; encoded separators
//! // are refused outright.
//! let climb = scope::file_uri_to_path("file:///data/%2e%2e/etc")?;
//! assert_eq!(climb, Path::new("/etc"));
//! assert!(!scope::is_within(root, &climb));
//! assert!(scope::file_uri_to_path("file:///data/a%2fb").is_err());
//! assert!(scope::plain_name("../note-7.md").is_err());
//! # Ok::<(), ScopeError>(())
//! ```
//!
//! With the `fs` feature, act through `ScopedDir`: every operation is relative to a directory
//! handle opened once, and no symbolic link is ever followed, so swapping a folder for a link
//! between the check and the delete cannot send the delete elsewhere.
//!
//! ```
//! # #[cfg(feature = "fs")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_confirm::scope::{ScopeError, ScopedDir};
//!
//! let tmp = std::env::temp_dir().join(format!("scope-doc-{}", std::process::id()));
//! std::fs::create_dir_all(tmp.join("personal"))?;
//! let workspaces = ScopedDir::open_root(&tmp)?;
//! let personal = workspaces.subdir("personal")?;
//! personal.create_new("note-7.md", b"milk, eggs")?;
//! assert!(matches!(personal.read_to_string("../escape.md"), Err(ScopeError::NotAName)));
//! // Delete only if the note is still what the user confirmed.
//! assert!(personal.remove_file_if("note-7.md", |bytes| bytes == b"milk, eggs")?);
//! assert!(!personal.has_file("note-7.md"));
//! # std::fs::remove_dir_all(&tmp)?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "fs"))]
//! # fn main() {}
//! ```
//!
//! The checks here are the ones filesystem MCP servers got wrong in public: string-prefix
//! containment (`/data/personal-evil` "inside" `/data/personal`), decode-after-normalize bugs
//! (`%2e%2e`), and check-then-act by path, which a symlink swap turns into an escape.
//!
//! The lexical functions are a pre-filter; the decision that matters is made against the live
//! filesystem by `ScopedDir` at the moment of acting. A confirmation's revalidation hook should
//! call both.

#[cfg(feature = "fs")]
mod dir;

use std::path::{Component, Path, PathBuf};

#[cfg(feature = "fs")]
#[cfg_attr(docsrs, doc(cfg(feature = "fs")))]
pub use dir::ScopedDir;

/// Why a URI, a name or a file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeError {
    /// Not a `file:` URI.
    #[error("not a file: URI")]
    NotAFileUri,
    /// The URI names a host other than empty or `localhost`.
    #[error("file: URIs must not name a remote host")]
    RemoteHost,
    /// The URI has a query or a fragment.
    #[error("file: URIs must not have a query or fragment")]
    QueryOrFragment,
    /// Bad or forbidden percent-encoding (`%00`, an encoded separator, double encoding, not UTF-8).
    #[error("bad or forbidden percent-encoding")]
    Encoding,
    /// A character no workspace path may contain (NUL, backslash, control characters).
    #[error("forbidden character in path")]
    ForbiddenCharacter,
    /// The path is relative, or `..` climbs above the root.
    #[error("path escapes the filesystem root or is not absolute")]
    NotAbsolute,
    /// The path is not inside the allowed root.
    #[error("path is outside the allowed root")]
    OutsideRoot,
    /// Not a single plain file or directory name.
    #[error("not a plain name")]
    NotAName,
    /// The entry is a symbolic link, or a path to it crosses one.
    #[error("symbolic links are not followed")]
    Symlink,
    /// The entry exists but is not a regular file (or not a directory, where one was expected).
    #[error("unexpected file type")]
    WrongType,
    /// The entry does not exist.
    #[error("not found")]
    NotFound,
    /// Any other I/O failure.
    #[error("I/O error: {0}")]
    Io(#[source] std::io::Error),
}

/// Parses a `file://` URI into an absolute, normalized path.
///
/// Accepts an empty or `localhost` host (RFC 8089), percent-decodes exactly once, refuses encoded
/// separators, `%00`, a `%` that survives decoding (double encoding), control characters and
/// backslashes, then resolves `.` and `..` lexically. A `..` that would climb above `/` is refused.
/// A trailing slash is ignored.
///
/// # Errors
/// A [`ScopeError`] naming the first rule broken.
pub fn file_uri_to_path(uri: &str) -> Result<PathBuf, ScopeError> {
    let (scheme, rest) = uri.split_once(':').ok_or(ScopeError::NotAFileUri)?;
    if !scheme.eq_ignore_ascii_case("file") {
        return Err(ScopeError::NotAFileUri);
    }
    if rest.contains(['?', '#']) {
        return Err(ScopeError::QueryOrFragment);
    }
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let (host, path) = match authority_and_path.find('/') {
                Some(i) => authority_and_path.split_at(i),
                None => (authority_and_path, ""),
            };
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(ScopeError::RemoteHost);
            }
            path
        }
        // `file:/path` (no authority) is also RFC 8089.
        None => rest,
    };
    let decoded = percent_decode(path)?;
    if decoded.contains('%') {
        return Err(ScopeError::Encoding);
    }
    if decoded.chars().any(|c| c.is_control() || c == '\\') {
        return Err(ScopeError::ForbiddenCharacter);
    }
    normalize(Path::new(&decoded))
}

/// Resolves `.` and `..` in an absolute path without touching the filesystem.
///
/// # Errors
/// [`ScopeError::NotAbsolute`] for a relative path or one whose `..` climbs above the root.
pub fn normalize(path: &Path) -> Result<PathBuf, ScopeError> {
    let mut out = PathBuf::from("/");
    let mut components = path.components();
    if components.next() != Some(Component::RootDir) {
        return Err(ScopeError::NotAbsolute);
    }
    for component in components {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(ScopeError::NotAbsolute);
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(ScopeError::NotAbsolute),
        }
    }
    Ok(out)
}

/// The part of `path` below `root`, compared component by component (never as strings), or `None`
/// if `path` is not inside `root`. `root` itself yields an empty path. Both must be normalized.
pub fn relative_to<'a>(root: &Path, path: &'a Path) -> Option<&'a Path> {
    path.strip_prefix(root).ok()
}

/// Whether `path` is `root` or below it, by components.
pub fn is_within(root: &Path, path: &Path) -> bool {
    relative_to(root, path).is_some()
}

/// The single directory directly below `root` that `path` names, as a plain name: how a workspace
/// URI maps to one workspace folder.
///
/// # Errors
/// [`ScopeError::OutsideRoot`] when `path` is not exactly one level below `root`.
pub fn child_name<'a>(root: &Path, path: &'a Path) -> Result<&'a str, ScopeError> {
    let rest = relative_to(root, path).ok_or(ScopeError::OutsideRoot)?;
    let mut components = rest.components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(name)), None) => name.to_str().ok_or(ScopeError::Encoding),
        _ => Err(ScopeError::OutsideRoot),
    }
}

/// Checks that `name` is one plain file name: not empty, not `.` or `..`, no separator, no NUL or
/// control character, at most 255 bytes.
///
/// # Errors
/// [`ScopeError::NotAName`].
pub fn plain_name(name: &str) -> Result<&str, ScopeError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control());
    if ok {
        Ok(name)
    } else {
        Err(ScopeError::NotAName)
    }
}

fn percent_decode(s: &str) -> Result<String, ScopeError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(ScopeError::Encoding)?;
            let hex = std::str::from_utf8(hex).map_err(|_| ScopeError::Encoding)?;
            let byte = u8::from_str_radix(hex, 16).map_err(|_| ScopeError::Encoding)?;
            // An encoded separator or NUL would change what the path means after decoding.
            if matches!(byte, 0 | b'/' | b'\\') {
                return Err(ScopeError::Encoding);
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ScopeError::Encoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(uri: &str) -> Result<PathBuf, ScopeError> {
        file_uri_to_path(uri)
    }

    #[test]
    fn parses_and_normalizes_file_uris() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(path("file:///data/personal").ok(), p("/data/personal"));
        assert_eq!(path("file:///data/personal/").ok(), p("/data/personal"));
        assert_eq!(
            path("FILE://localhost/data/personal").ok(),
            p("/data/personal")
        );
        assert_eq!(path("file:/data/personal").ok(), p("/data/personal"));
        assert_eq!(
            path("file:///data/./personal/notes/..").ok(),
            p("/data/personal")
        );
        assert_eq!(path("file:///data/my%20notes").ok(), p("/data/my notes"));
        assert_eq!(path("file:///data/caf%C3%A9").ok(), p("/data/café"));
        // Dot segments spelled with percent-encoding are decoded first, then resolved.
        assert_eq!(
            path("file:///data/personal/%2e%2e/team").ok(),
            p("/data/team")
        );
    }

    #[test]
    fn refuses_what_could_mean_two_things() {
        for (uri, why) in [
            ("http:///data/personal", "scheme"),
            ("file://evil.example/data/personal", "host"),
            ("file://127.0.0.1/data/personal", "host"),
            ("file:///data/personal?x=1", "query"),
            ("file:///data/personal#frag", "fragment"),
            ("file:///data/personal%2fteam", "encoded slash"),
            ("file:///data/personal%5Cteam", "encoded backslash"),
            ("file:///data/personal%00", "NUL"),
            ("file:///data/%252e%252e/etc", "double encoding"),
            ("file:///data/%zz", "bad escape"),
            ("file:///data/%c3", "not UTF-8"),
            ("file:///data/%", "truncated escape"),
            ("file:///data/a\\b", "backslash"),
            ("file:///data/a%0Ab", "control"),
            ("file:///..", "above root"),
            ("file:///data/../../etc", "above root"),
            ("file:data/personal", "relative"),
            ("data/personal", "no scheme"),
        ] {
            assert!(path(uri).is_err(), "{why}: {uri}");
        }
    }

    #[test]
    fn containment_is_by_component_never_by_prefix() {
        let root = Path::new("/data/personal");
        assert!(is_within(root, Path::new("/data/personal")));
        assert!(is_within(root, Path::new("/data/personal/note-3.md")));
        assert!(!is_within(root, Path::new("/data/personal-evil")));
        assert!(!is_within(root, Path::new("/data/personal-evil/note.md")));
        assert!(!is_within(root, Path::new("/data")));
        assert!(!is_within(root, Path::new("/data/team")));
    }

    #[test]
    fn child_name_is_exactly_one_level_down() {
        let data = Path::new("/data");
        assert_eq!(
            child_name(data, Path::new("/data/personal")).ok(),
            Some("personal")
        );
        assert!(child_name(data, Path::new("/data")).is_err());
        assert!(child_name(data, Path::new("/data/personal/deeper")).is_err());
        assert!(child_name(data, Path::new("/data-evil/personal")).is_err());
        assert!(child_name(data, Path::new("/elsewhere")).is_err());
    }

    #[test]
    fn plain_names() {
        assert!(plain_name("note-3.md").is_ok());
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a\\b",
            "a\0b",
            "a\nb",
            &"x".repeat(256),
        ] {
            assert!(plain_name(bad).is_err(), "{bad:?}");
        }
    }
}
