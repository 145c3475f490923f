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

use std::fs::{self, File};
use std::io::Write as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::LogError;
use super::merkle::Hash;
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

/// The key that tags records and the view. Zeroized when dropped, never printed.
#[derive(Clone)]
pub(crate) struct TagKey(Zeroizing<[u8; 32]>);

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
        Self(key)
    }

    fn mac(&self, domain: &[u8], origin: &str, data: &[u8]) -> [u8; 32] {
        // HMAC takes keys of any length.
        let mut mac =
            <HmacSha256 as KeyInit>::new_from_slice(&self.0[..]).unwrap_or_else(|_| unreachable!());
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
        record.tag = None;
        let untagged = record.to_line();
        let mac = self.mac(RECORD_DOMAIN, origin, untagged.as_bytes());
        record.tag = Some(crate::kernel::hex(&mac[..RECORD_TAG_BYTES]));
        record.to_line()
    }

    /// Whether `record` carries a tag this key made (for its `seq`, in this log).
    pub(crate) fn verifies(&self, origin: &str, record: &Record) -> bool {
        let Some(tag) = &record.tag else {
            return false;
        };
        let mut untagged = record.clone();
        untagged.tag = None;
        let mac = self.mac(RECORD_DOMAIN, origin, untagged.to_line().as_bytes());
        let expected = crate::kernel::hex(&mac[..RECORD_TAG_BYTES]);
        bool::from(expected.as_bytes().ct_eq(tag.as_bytes()))
    }
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
    fn body(&self, origin: &str) -> String {
        format!(
            "{VIEW_HEADER}\n{origin}\nsize {}\nroot {}\ncheckpoint {} {}\n",
            self.size,
            STANDARD.encode(self.root),
            self.checkpoint,
            self.checkpoint_size
        )
    }

    fn encode(&self, origin: &str, key: &TagKey) -> String {
        let body = self.body(origin);
        let tag = key.mac(VIEW_DOMAIN, origin, body.as_bytes());
        format!("{body}tag {}\n", crate::kernel::hex(&tag))
    }

    fn decode(text: &str, origin: &str, key: &TagKey) -> Option<Self> {
        let (body, tag_line) = text.strip_suffix('\n')?.rsplit_once('\n')?;
        let body = format!("{body}\n");
        let tag = tag_line.strip_prefix("tag ")?;
        let expected = crate::kernel::hex(&key.mac(VIEW_DOMAIN, origin, body.as_bytes()));
        if !bool::from(expected.as_bytes().ct_eq(tag.as_bytes())) {
            return None;
        }
        let mut lines = body.lines();
        (lines.next()? == VIEW_HEADER).then_some(())?;
        (lines.next()? == origin).then_some(())?;
        let size = lines.next()?.strip_prefix("size ")?.parse().ok()?;
        let root = STANDARD
            .decode(lines.next()?.strip_prefix("root ")?)
            .ok()?
            .try_into()
            .ok()?;
        let (number, checkpoint_size) =
            lines.next()?.strip_prefix("checkpoint ")?.split_once(' ')?;
        Some(Self {
            size,
            root,
            checkpoint: number.parse().ok()?,
            checkpoint_size: checkpoint_size.parse().ok()?,
        })
    }

    /// Reads the view at `path`: `None` if there is none.
    ///
    /// # Errors
    /// [`LogError::Damaged`] if the file is not a view this key wrote for this log (edited, or
    /// another log's); [`LogError::Io`] if it cannot be read.
    pub(crate) fn read(path: &Path, origin: &str, key: &TagKey) -> Result<Option<Self>, LogError> {
        let text = match fs::read(path) {
            Ok(bytes) if bytes.len() <= 4096 => String::from_utf8(bytes).ok(),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        text.as_deref()
            .and_then(|text| Self::decode(text, origin, key))
            .map(Some)
            .ok_or_else(|| {
                LogError::Damaged(format!(
                    "the signer's view {} was not written by this log's key (edited, or another log's)",
                    path.display()
                ))
            })
    }

    /// Writes the view to `path`, whole (a temporary file renamed over it); with `sync`, it and
    /// its directory reach the disk before this returns.
    ///
    /// # Errors
    /// [`LogError::Io`].
    pub(crate) fn write(
        &self,
        path: &Path,
        origin: &str,
        key: &TagKey,
        sync: bool,
    ) -> Result<(), LogError> {
        let temporary = path.with_extension("tmp");
        {
            let mut file = File::create(&temporary)?;
            file.write_all(self.encode(origin, key).as_bytes())?;
            if sync {
                file.sync_all()?;
            }
        }
        fs::rename(&temporary, path)?;
        if sync && let Some(parent) = path.parent() {
            File::open(if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            })?
            .sync_all()?;
        }
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
        let text = view.encode("a/log", &key);
        assert_eq!(View::decode(&text, "a/log", &key), Some(view));
        assert_eq!(View::decode(&text, "b/log", &key), None);
        assert_eq!(
            View::decode(&text, "a/log", &TagKey::derive(&[8; 32])),
            None
        );
        let edited = text.replace("size 12", "size 13");
        assert_eq!(View::decode(&edited, "a/log", &key), None);
    }
}
