//! One record of the decision log, and its one canonical spelling: a JSON object on one line,
//! keys in a fixed (sorted) order, absent facts left out. The line's bytes are the Merkle leaf,
//! so a record read back must spell exactly what was written; anything else is an edit.
//!
//! A record holds digests and short prefixes, never argument values: who (the principal's
//! keyed digest, and the subject only where the deployment keeps it), what (tool, argument
//! digest, the chosen id and version, a digest of what the user was shown) and how it ended.

use serde::{Deserialize, Serialize};

/// The longest record line read back.
pub const MAX_RECORD_BYTES: usize = 16 * 1024;

/// One decision, as the log keeps it. Fields are in the order they are written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Record {
    /// The argument digest of the call (hex), never the values.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub arguments: Option<String>,
    /// Unix time in milliseconds, as the writer's clock read it.
    pub at_ms: u64,
    /// The deployment (the layer's audience).
    pub audience: String,
    /// The set a batch decision covered (its digest, hex).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub batch: Option<String>,
    /// The chosen record's id; on a batch's own record (`batch_decided`), how many of its
    /// members it approved, as `approved/members`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chosen: Option<String>,
    /// The failure class of a refusal (the wire error's class, e.g. `state_expired`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub class: Option<String>,
    /// What happened: `challenged`, `accepted`, `declined`, `cancelled`, `refused`,
    /// `replay_blocked`, `grant_issued`, `standing_granted`, …
    pub event: String,
    /// The first bytes of the grant's id (hex).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub grant: Option<String>,
    /// Which instance wrote it.
    pub instance: String,
    /// The first bytes of the confirmation's nonce (hex).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub nonce: Option<String>,
    /// Where an approver narrowed the call: the digest of the arguments as asked (hex);
    /// `arguments` is then the digest of those that ran.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub original: Option<String>,
    /// The revision of the policy the decision was made under, where the deployment names one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub policy: Option<String>,
    /// The principal's keyed digest (hex).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub principal: Option<String>,
    /// The real reason of a refusal (never on the wire).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// Its place in the log, from 0.
    pub seq: u64,
    /// A digest of what the user was shown (the candidates' ids, versions and labels).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shown: Option<String>,
    /// The first bytes of a standing approval's id (hex).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub standing: Option<String>,
    /// The principal's subject, where the deployment keeps subjects in its log.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub subject: Option<String>,
    /// The writer's keyed tag over the rest of the line (hex): written by the holder of the
    /// log's key, at this place in this log. Records written before tags existed have none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tag: Option<String>,
    /// The tool.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool: Option<String>,
    /// The chosen record's version the user saw.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub version: Option<String>,
}

impl Record {
    /// A record of `event` (sequence number and time are set when it is appended).
    pub fn new(event: impl Into<String>) -> Self {
        Self {
            event: event.into(),
            ..Self::default()
        }
    }

    /// The canonical line (no newline): what is hashed into the tree.
    pub fn to_line(&self) -> String {
        self.spell(true).0
    }

    /// The line, with or without the tag, and the byte offset where the tag's field is (or
    /// would be): spelled once per record written, where `serde_json` would take twice as
    /// long (it escapes byte by byte, and the tag needs a second pass). The same bytes as
    /// `serde_json::to_string(self)` (a test holds it to that).
    pub(crate) fn spell(&self, with_tag: bool) -> (String, usize) {
        let mut line = Line(String::with_capacity(512));
        line.0.push('{');
        line.opt("arguments", self.arguments.as_deref());
        line.num("at_ms", self.at_ms);
        line.str("audience", &self.audience);
        line.opt("batch", self.batch.as_deref());
        line.opt("chosen", self.chosen.as_deref());
        line.opt("class", self.class.as_deref());
        line.str("event", &self.event);
        line.opt("grant", self.grant.as_deref());
        line.str("instance", &self.instance);
        line.opt("nonce", self.nonce.as_deref());
        line.opt("original", self.original.as_deref());
        line.opt("policy", self.policy.as_deref());
        line.opt("principal", self.principal.as_deref());
        line.opt("reason", self.reason.as_deref());
        line.num("seq", self.seq);
        line.opt("shown", self.shown.as_deref());
        line.opt("standing", self.standing.as_deref());
        line.opt("subject", self.subject.as_deref());
        let tag_at = line.0.len();
        if with_tag {
            line.opt("tag", self.tag.as_deref());
        }
        line.opt("tool", self.tool.as_deref());
        line.opt("version", self.version.as_deref());
        line.0.push('}');
        (line.0, tag_at)
    }

    /// A line [`to_line`](Self::to_line) wrote, and nothing else: unknown keys, another key
    /// order, spacing or escaping are refused, as is a line over [`MAX_RECORD_BYTES`].
    pub fn from_line(line: &str) -> Option<Self> {
        if line.len() > MAX_RECORD_BYTES {
            return None;
        }
        let record: Self = serde_json::from_str(line).ok()?;
        (record.to_line() == line).then_some(record)
    }
}

/// A record's line being spelled: `serde_json`'s compact form, field by field.
struct Line(String);

impl Line {
    fn key(&mut self, key: &str) {
        // Every line starts with `{` and a mandatory field comes before any optional one
        // could be the first (`arguments` is the only field before `at_ms`).
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push('"');
        self.0.push_str(key);
        self.0.push_str("\":");
    }

    fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            // Nothing to escape (digests, names, numbers): the string as it is.
            self.0.push('"');
            self.0.push_str(value);
            self.0.push('"');
        } else {
            // `serde_json`'s own escaping, so the spelling cannot drift from it.
            self.0
                .push_str(&serde_json::to_string(value).unwrap_or_default());
        }
    }

    fn opt(&mut self, key: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.str(key, value);
        }
    }

    fn num(&mut self, key: &str, value: u64) {
        use std::fmt::Write as _;
        self.key(key);
        let _ = write!(self.0, "{value}");
    }
}

impl From<mcp_confirm::audit::LogEntry> for Record {
    /// The record of a layer's entry (its `seq`, `instance` and `tag` are the writer's).
    fn from(entry: mcp_confirm::audit::LogEntry) -> Self {
        Self {
            arguments: entry.arguments,
            at_ms: entry.at_ms,
            audience: entry.audience,
            batch: entry.batch,
            chosen: entry.chosen,
            class: entry.class,
            event: entry.event.to_owned(),
            nonce: entry.nonce,
            original: entry.original,
            policy: entry.policy,
            principal: entry.principal,
            reason: entry.reason,
            shown: entry.shown,
            standing: entry.standing,
            subject: entry.subject,
            tool: entry.tool,
            version: entry.version,
            grant: entry.grant,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field, in every combination of present and absent, with strings that need
    /// escaping and strings that do not, spelled as `serde_json` spells the struct.
    #[test]
    fn the_spelling_is_serde_jsons() {
        let values = [
            "",
            "plain",
            "quote \" and backslash \\",
            "control \u{1} \n \t \u{1f} end",
            "del \u{7f}, é, 漢字, 🦀",
            "</script>",
        ];
        for i in 0..2_000usize {
            let pick = |k: usize| -> Option<String> {
                let n = (i.wrapping_mul(2_654_435_761) >> (k % 24)) % (values.len() + 1);
                values.get(n).map(|v| (*v).to_owned())
            };
            let record = Record {
                arguments: pick(1),
                at_ms: (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                audience: pick(2).unwrap_or_default(),
                batch: pick(3),
                chosen: pick(4),
                class: pick(5),
                event: pick(6).unwrap_or_default(),
                grant: pick(7),
                instance: pick(8).unwrap_or_default(),
                nonce: pick(9),
                original: pick(10),
                policy: pick(11),
                principal: pick(12),
                reason: pick(13),
                seq: if i % 7 == 0 { u64::MAX } else { i as u64 },
                shown: pick(14),
                standing: pick(15),
                subject: pick(16),
                tag: pick(17),
                tool: pick(18),
                version: pick(19),
            };
            let expected = serde_json::to_string(&record).unwrap();
            assert_eq!(record.to_line(), expected);
            let (untagged, at) = record.spell(false);
            let mut without = record.clone();
            without.tag = None;
            assert_eq!(untagged, serde_json::to_string(&without).unwrap());
            if let Some(tag) = &record.tag {
                let field = format!(",\"tag\":{}", serde_json::to_string(tag).unwrap());
                assert_eq!(
                    format!("{}{field}{}", &untagged[..at], &untagged[at..]),
                    expected
                );
            } else {
                assert_eq!(untagged, expected);
            }
        }
    }

    #[test]
    fn a_record_has_one_spelling() {
        let mut record = Record::new("accepted");
        record.seq = 7;
        record.at_ms = 1_800_000_000_000;
        record.audience = "notes.example".into();
        record.instance = "i-1".into();
        record.tool = Some("notes_delete".into());
        record.chosen = Some("note-7".into());
        let line = record.to_line();
        assert!(line.starts_with("{\"at_ms\":1800000000000,\"audience\":\"notes.example\","));
        assert_eq!(Record::from_line(&line), Some(record));
        for other in [
            line.replace("\"seq\":7", "\"seq\":07"),
            line.replace(',', ", "),
            line.replace("note-7", "note\\u002d7"),
            line.replacen('{', "{\"extra\":1,", 1),
            format!("{line}\n"),
        ] {
            assert_eq!(Record::from_line(&other), None, "{other}");
        }
    }
}
