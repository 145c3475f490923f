//! How the signer tells its own writing from anyone else's: every record it writes carries a
//! keyed tag, and it keeps its own view of the tree (size, root, newest checkpoint) in a small
//! tagged file. Opening a log compares the records to both, so that a record appended, edited or
//! removed by someone with access to the log's storage but not its key is a stop, never a new
//! signature.
//!
//! The tag key is derived from the signing seed with HKDF (its own label), so whoever can forge
//! a tag can sign checkpoints anyway. Tags are for the writer; the offline verifier, which holds
//! only the public key, relies on the checkpoints (and `mcp-confirm-audit inspect` checks the
//! tags for an operator who holds the seed).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::LogError;
use super::merkle::{Frontier, Hash};
use super::record::Record;

type HmacSha256 = Hmac<Sha256>;

/// HKDF label of the tag key.
const TAG_KEY_INFO: &[u8] = b"mcp-confirm/decision-log/tag-key/v1";
/// Domain of a record's tag.
const RECORD_DOMAIN: &[u8] = b"record/v1";
/// Domain of the view's tag.
const VIEW_DOMAIN: &[u8] = b"view/v1";
/// Bytes of a record's tag kept (hex in the line: twice as many characters).
const RECORD_TAG_BYTES: usize = 16;
/// The view file's first line.
const VIEW_HEADER: &str = "mcp-confirm signer view v1";
/// The view file holds two slots of this many bytes, written in turn in place: a write cut
/// short by a crash spoils one, and the other (one write older) still reads. In place, because
/// a rename per write costs a flush on ext4 (`auto_da_alloc`).
const SLOT: usize = 512;

/// The key that tags records and the view, kept as HMAC's keyed state (each tag starts from a
/// copy, not from the key: two compressions fewer per record). Zeroized when dropped (the
/// `zeroize` feature of `hmac`), never printed.
#[derive(Clone)]
pub(crate) struct TagKey(HmacSha256);

impl std::fmt::Debug for TagKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TagKey(…)")
    }
}

impl TagKey {
    /// The tag key of the signing key with this seed.
    pub(crate) fn derive(seed: &[u8; 32]) -> Self {
        let hk = Hkdf::<Sha256>::new(None, seed);
        let mut key = Zeroizing::new([0u8; 32]);
        // 32 bytes is far below HKDF-SHA256's output limit: expand cannot fail.
        let _ = hk.expand(TAG_KEY_INFO, &mut key[..]);
        // HMAC takes keys of any length.
        Self(<HmacSha256 as KeyInit>::new_from_slice(&key[..]).unwrap_or_else(|_| unreachable!()))
    }

    fn mac(&self, domain: &[u8], origin: &str, data: &[u8]) -> [u8; 32] {
        let mut mac = self.0.clone();
        for part in [domain, origin.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// Sets `record`'s tag (over its line without one, which holds its `seq`) and answers the
    /// line to write.
    pub(crate) fn tag(&self, origin: &str, record: &mut Record) -> String {
        let (mut line, at) = record.spell(false);
        let mac = self.mac(RECORD_DOMAIN, origin, line.as_bytes());
        let tag = mcp_confirm::__private::hex(&mac[..RECORD_TAG_BYTES]);
        // The tag's field where the spelling puts it: hex needs no escaping.
        line.insert_str(at, &format!(",\"tag\":\"{tag}\""));
        record.tag = Some(tag);
        line
    }

    /// Whether `record` carries a tag this key made (for its `seq`, in this log).
    pub(crate) fn verifies(&self, origin: &str, record: &Record) -> bool {
        let Some(tag) = &record.tag else {
            return false;
        };
        let mac = self.mac(RECORD_DOMAIN, origin, record.spell(false).0.as_bytes());
        let expected = mcp_confirm::__private::hex(&mac[..RECORD_TAG_BYTES]);
        bool::from(expected.as_bytes().ct_eq(tag.as_bytes()))
    }
}

/// Roots the tree must have at given sizes (a checkpoint's, the view's, a witness's), each with
/// whose it is.
pub(crate) type Expected = [(u64, Hash, String)];

/// Each of `expected` that the tree at its current size contradicts, as the stop's message.
pub(crate) fn root_mismatches<'a>(
    expected: &'a Expected,
    frontier: &'a Frontier,
) -> impl Iterator<Item = String> + 'a {
    expected
        .iter()
        .filter(|(size, root, _)| *size == frontier.size() && frontier.root() != *root)
        .map(|(size, _, what)| {
            format!("the first {size} records do not hash to the root of {what}")
        })
}

/// The signer's own view of its log: what it last wrote and signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// How many records it had written.
    pub size: u64,
    /// Their root.
    pub root: Hash,
    /// The number of the newest checkpoint it had signed (0 for none)…
    pub checkpoint: u64,
    /// …and that checkpoint's size.
    pub checkpoint_size: u64,
}

impl View {
    fn body(&self, origin: &str, generation: u64) -> String {
        format!(
            "{VIEW_HEADER}\n{origin}\ngeneration {generation}\nsize {}\nroot {}\ncheckpoint {} {}\n",
            self.size,
            STANDARD.encode(self.root),
            self.checkpoint,
            self.checkpoint_size
        )
    }

    fn encode(&self, origin: &str, key: &TagKey, generation: u64) -> String {
        let body = self.body(origin, generation);
        let tag = key.mac(VIEW_DOMAIN, origin, body.as_bytes());
        format!("{body}tag {}\n", mcp_confirm::__private::hex(&tag))
    }

    /// One slot's view and generation, if it is one this key wrote for this log.
    fn decode(text: &str, origin: &str, key: &TagKey) -> Option<(Self, u64)> {
        let (body, tag_line) = text.strip_suffix('\n')?.rsplit_once('\n')?;
        let body = format!("{body}\n");
        let tag = tag_line.strip_prefix("tag ")?;
        let expected = mcp_confirm::__private::hex(&key.mac(VIEW_DOMAIN, origin, body.as_bytes()));
        if !bool::from(expected.as_bytes().ct_eq(tag.as_bytes())) {
            return None;
        }
        let mut lines = body.lines();
        (lines.next()? == VIEW_HEADER).then_some(())?;
        (lines.next()? == origin).then_some(())?;
        let generation = lines.next()?.strip_prefix("generation ")?.parse().ok()?;
        let size = lines.next()?.strip_prefix("size ")?.parse().ok()?;
        let root = STANDARD
            .decode(lines.next()?.strip_prefix("root ")?)
            .ok()?
            .try_into()
            .ok()?;
        let (number, checkpoint_size) =
            lines.next()?.strip_prefix("checkpoint ")?.split_once(' ')?;
        Some((
            Self {
                size,
                root,
                checkpoint: number.parse().ok()?,
                checkpoint_size: checkpoint_size.parse().ok()?,
            },
            generation,
        ))
    }

    /// The newest slot that reads back, and its generation.
    fn newest(bytes: &[u8], origin: &str, key: &TagKey) -> Option<(Self, u64)> {
        bytes
            .chunks(SLOT)
            .take(2)
            .filter_map(|slot| {
                let text = std::str::from_utf8(slot).ok()?.trim_end_matches('\0');
                Self::decode(text, origin, key)
            })
            .max_by_key(|(_, generation)| *generation)
    }

    /// Reads the view at `path`: `None` if there is none.
    ///
    /// # Errors
    /// [`LogError::Damaged`] if neither slot holds a view this key wrote for this log (edited,
    /// or another log's); [`LogError::Io`] if it cannot be read.
    pub(crate) fn read(path: &Path, origin: &str, key: &TagKey) -> Result<Option<Self>, LogError> {
        Ok(read_slots(path, origin, key)?.map(|(view, _)| view))
    }
}

fn read_slots(path: &Path, origin: &str, key: &TagKey) -> Result<Option<(View, u64)>, LogError> {
    let file = match super::open::regular(path) {
        Ok(file) => file,
        Err(LogError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::with_capacity(2 * SLOT);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, 2 * SLOT as u64 + 1),
        &mut bytes,
    )?;
    if bytes.len() > 2 * SLOT {
        return Err(damaged(path));
    }
    View::newest(&bytes, origin, key)
        .map(Some)
        .ok_or_else(|| damaged(path))
}

fn damaged(path: &Path) -> LogError {
    LogError::Damaged(format!(
        "the signer's view {} was not written by this log's key (edited, or another log's)",
        path.display()
    ))
}

/// The view file, open for writing: each write goes to the older slot.
#[derive(Debug)]
pub(crate) struct ViewFile {
    file: File,
    generation: u64,
    /// The newest view written: an older one (a sync that finished after a checkpoint) is not
    /// written over it.
    last: Option<View>,
}

impl ViewFile {
    /// Opens (creating) the view file at `path`, continuing after the generation it holds.
    ///
    /// # Errors
    /// As [`View::read`]; [`LogError::Io`] if it cannot be opened for writing.
    pub(crate) fn open(path: &Path, origin: &str, key: &TagKey) -> Result<Self, LogError> {
        let generation = read_slots(path, origin, key)?.map_or(0, |(_, g)| g);
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Self {
            file,
            generation,
            last: None,
        })
    }

    /// Writes `view` into the older slot; a `checkpoint`'s view into both, so that spoiling the
    /// newer slot falls back to no less than the last checkpoint. With `sync`, it reaches the
    /// disk before this returns. A view older than the last one written is not written (a sync
    /// that finished after a checkpoint); one that goes back on the checkpoint is an error.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub(crate) fn write(
        &mut self,
        view: &View,
        origin: &str,
        key: &TagKey,
        checkpoint: bool,
        sync: bool,
    ) -> Result<(), LogError> {
        if let Some(last) = &self.last {
            if checkpoint && (view.checkpoint < last.checkpoint || view.size < last.size) {
                return Err(LogError::Damaged(
                    "the signer's view would go back on a checkpoint it recorded".into(),
                ));
            }
            if view.size < last.size
                || view.checkpoint < last.checkpoint
                || (view == last && !checkpoint)
            {
                return Ok(());
            }
        }
        for _ in 0..if checkpoint { 2 } else { 1 } {
            let generation = self.generation + 1;
            let mut slot = view.encode(origin, key, generation).into_bytes();
            if slot.len() > SLOT {
                return Err(LogError::Io(std::io::Error::other(
                    "the log's name is too long for its view",
                )));
            }
            slot.resize(SLOT, 0);
            self.file
                .write_all_at(&slot, (generation % 2) * SLOT as u64)?;
            self.generation = generation;
        }
        if sync {
            self.file.sync_data()?;
        }
        self.last = Some(*view);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_binds_the_line_the_log_and_the_key() {
        let key = TagKey::derive(&[7; 32]);
        let mut record = Record::new("accepted");
        record.seq = 3;
        record.subject = Some("alice".into());
        let line = key.tag("a/log", &mut record);
        assert!(line.contains("\"tag\":"));
        assert!(key.verifies("a/log", &record));
        assert!(!key.verifies("another/log", &record));
        assert!(!TagKey::derive(&[8; 32]).verifies("a/log", &record));
        let mut edited = record.clone();
        edited.subject = Some("mallory".into());
        assert!(!key.verifies("a/log", &edited));
        let mut moved = record.clone();
        moved.seq = 4;
        assert!(!key.verifies("a/log", &moved));
        let mut untagged = record;
        untagged.tag = None;
        assert!(!key.verifies("a/log", &untagged));
    }

    #[test]
    fn a_view_reads_back_only_under_its_key_and_log() {
        let key = TagKey::derive(&[7; 32]);
        let view = View {
            size: 12,
            root: [9; 32],
            checkpoint: 2,
            checkpoint_size: 10,
        };
        let text = view.encode("a/log", &key, 4);
        assert_eq!(View::decode(&text, "a/log", &key), Some((view, 4)));
        assert_eq!(View::decode(&text, "b/log", &key), None);
        assert_eq!(
            View::decode(&text, "a/log", &TagKey::derive(&[8; 32])),
            None
        );
        let edited = text.replace("size 12", "size 13");
        assert_eq!(View::decode(&edited, "a/log", &key), None);
    }

    #[test]
    fn a_torn_slot_falls_back_to_the_other_and_two_spoiled_slots_are_damage() {
        let key = TagKey::derive(&[7; 32]);
        let path = std::env::temp_dir().join(format!("mcp-confirm-view-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut file = ViewFile::open(&path, "a/log", &key).unwrap();
        let view = |size| View {
            size,
            root: [1; 32],
            checkpoint: 0,
            checkpoint_size: 0,
        };
        file.write(&view(1), "a/log", &key, false, false).unwrap();
        file.write(&view(2), "a/log", &key, false, false).unwrap();
        assert_eq!(View::read(&path, "a/log", &key).unwrap(), Some(view(2)));
        // The newer slot (generation 2: the first) is cut short: the older one reads.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[40] = b'#';
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(View::read(&path, "a/log", &key).unwrap(), Some(view(1)));
        // A reopened file goes on after the newest generation that reads; a synced write (a
        // checkpoint) fills both slots.
        let mut file = ViewFile::open(&path, "a/log", &key).unwrap();
        file.write(&view(3), "a/log", &key, true, true).unwrap();
        bytes = std::fs::read(&path).unwrap();
        bytes[40] = b'#';
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(View::read(&path, "a/log", &key).unwrap(), Some(view(3)));
        bytes[SLOT + 40] = b'#';
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            View::read(&path, "a/log", &key),
            Err(LogError::Damaged(_))
        ));
        let _ = std::fs::remove_file(&path);
    }
}
