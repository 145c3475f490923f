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
        // A struct of strings and integers always serializes.
        serde_json::to_string(self).unwrap_or_default()
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
