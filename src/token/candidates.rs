//! The candidate set a state signs: built once, checked once.
//!
//! A resolver's output, a payload being decoded and a test fixture all become a [`Candidates`]
//! through [`Candidates::new`], so the bounds the format relies on (count, id and version lengths,
//! unique ids) are checked in exactly one place and every `Candidates` value is sealable.

use std::ops::Deref;

/// The most candidates one state can carry.
pub const MAX_CANDIDATES: usize = 16;
/// The longest candidate id, in bytes.
pub const MAX_CANDIDATE_ID_LEN: usize = 128;
/// The longest candidate version, in bytes.
pub const MAX_VERSION_LEN: usize = 128;

/// One candidate as the form showed it: its id and, unless the policy opted out, its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    pub(crate) id: String,
    pub(crate) version: Option<String>,
}

impl Shown {
    pub(crate) fn new(id: impl Into<String>, version: Option<&str>) -> Self {
        Self {
            id: id.into(),
            version: version.map(str::to_owned),
        }
    }
}

/// Why a list of candidates cannot be signed. The reason goes to the audit log only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CandidatesError {
    /// More than [`MAX_CANDIDATES`].
    #[error("more than {MAX_CANDIDATES} candidates")]
    TooMany,
    /// An empty id, one longer than [`MAX_CANDIDATE_ID_LEN`] bytes, or one with a character
    /// the user cannot see (a control, format or other default-ignorable character, or
    /// whitespace other than a plain space): an id is shown and sent back exactly, so it cannot
    /// be cleaned like a label, and such an id could pass for another.
    #[error("an empty, oversized or unprintable candidate id")]
    BadId,
    /// Two candidates with the same id.
    #[error("duplicate candidate ids")]
    DuplicateId,
    /// An empty version, or one longer than [`MAX_VERSION_LEN`] bytes.
    #[error("an empty or oversized candidate version")]
    BadVersion,
}

/// Whether `c` may not appear in a candidate id: see [`CandidatesError::BadId`].
fn unprintable(c: char) -> bool {
    crate::kernel::is_invisible(c) || (c.is_whitespace() && c != ' ')
}

/// At most [`MAX_CANDIDATES`] candidates with unique, non-empty, bounded ids and, where present,
/// non-empty bounded versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Candidates(Vec<Shown>);

impl Candidates {
    /// Checks every bound the state format relies on.
    pub(crate) fn new(shown: Vec<Shown>) -> Result<Self, CandidatesError> {
        if shown.iter().any(|c| c.id.chars().any(unprintable)) {
            return Err(CandidatesError::BadId);
        }
        Self::from_sealed(shown)
    }

    /// The candidates of a state whose MAC verified: they passed [`Candidates::new`] when the
    /// state was sealed, so only the bounds parsing relies on are checked again, not what the ids
    /// look like to a user.
    pub(crate) fn from_sealed(shown: Vec<Shown>) -> Result<Self, CandidatesError> {
        if shown.len() > MAX_CANDIDATES {
            return Err(CandidatesError::TooMany);
        }
        for (i, candidate) in shown.iter().enumerate() {
            if candidate.id.is_empty() || candidate.id.len() > MAX_CANDIDATE_ID_LEN {
                return Err(CandidatesError::BadId);
            }
            if candidate
                .version
                .as_ref()
                .is_some_and(|v| v.is_empty() || v.len() > MAX_VERSION_LEN)
            {
                return Err(CandidatesError::BadVersion);
            }
            if shown[..i].iter().any(|earlier| earlier.id == candidate.id) {
                return Err(CandidatesError::DuplicateId);
            }
        }
        Ok(Self(shown))
    }

    /// The version the state signed for the candidate `id`.
    pub(crate) fn version_of(&self, id: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|shown| shown.id == id)
            .and_then(|shown| shown.version.as_deref())
    }
}

impl Deref for Candidates {
    type Target = [Shown];

    fn deref(&self) -> &[Shown] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(shown: Vec<Shown>) -> Result<Candidates, CandidatesError> {
        Candidates::new(shown)
    }

    #[test]
    fn every_bound_is_checked_here() {
        let many = (0..=MAX_CANDIDATES)
            .map(|i| Shown::new(format!("id-{i}"), Some("v")))
            .collect();
        assert_eq!(build(many), Err(CandidatesError::TooMany));
        assert_eq!(
            build(vec![Shown::new("", Some("v"))]),
            Err(CandidatesError::BadId)
        );
        for unprintable in [
            "note-7\u{202E}exe.txt",
            "note-7\u{200B}",
            "a\nb",
            "a\u{00A0}b",
            "\u{E0041}",
        ] {
            assert_eq!(
                build(vec![Shown::new(unprintable, None)]),
                Err(CandidatesError::BadId),
                "{unprintable:?}"
            );
        }
        assert!(build(vec![Shown::new("my note (1).txt", None)]).is_ok());
        let long_id = "x".repeat(MAX_CANDIDATE_ID_LEN + 1);
        assert_eq!(
            build(vec![Shown::new(long_id, None)]),
            Err(CandidatesError::BadId)
        );
        assert_eq!(
            build(vec![Shown::new("x", Some(""))]),
            Err(CandidatesError::BadVersion)
        );
        let long_version = "v".repeat(MAX_VERSION_LEN + 1);
        assert_eq!(
            build(vec![Shown::new("x", Some(&long_version))]),
            Err(CandidatesError::BadVersion)
        );
        assert_eq!(
            build(vec![Shown::new("a", Some("1")), Shown::new("a", Some("2"))]),
            Err(CandidatesError::DuplicateId)
        );
    }

    #[test]
    fn the_largest_legal_set_and_the_empty_set_are_accepted() {
        let largest: Vec<Shown> = (0..MAX_CANDIDATES)
            .map(|i| {
                let id = format!("{i:0>width$}", width = MAX_CANDIDATE_ID_LEN);
                Shown::new(id, Some(&"v".repeat(MAX_VERSION_LEN)))
            })
            .collect();
        assert_eq!(build(largest.clone()).unwrap().len(), MAX_CANDIDATES);
        assert!(build(Vec::new()).unwrap().is_empty());
        let set = build(vec![Shown::new("a", Some("1")), Shown::new("b", None)]).unwrap();
        assert_eq!(set.version_of("a"), Some("1"));
        assert_eq!(set.version_of("b"), None);
        assert_eq!(set.version_of("c"), None);
    }
}
