//! Which records a call may mean: the operator's lookup, run against the same upstream as the
//! same principal, turned into the candidates of a pick-one form.
//!
//! It is the route's [`Resolver`](mcp_confirm::Resolver): the layer runs it on the first call (the form's candidates)
//! and again right before the confirmed call is forwarded (revalidation: a record that is gone,
//! or whose version differs from the one shown, is refused and nothing is forwarded). A call
//! that lacks an argument the lookup reads is refused before anything runs: the read tool,
//! called without its filter, would find every record. The upstream's answer is data, never
//! trusted: records without a usable id refuse the call; each option reads its id first, then
//! the operator's labelled values, cleaned and capped, and options that would still read the
//! same refuse the call; and a record's version is, unless the operator names one, a digest of
//! the whole record as returned, so any change the read tool shows counts.

use std::collections::HashSet;
use std::sync::Arc;

use http::HeaderMap;
use mcp_confirm::{Candidate, Lookup as Asked, PolicyError};
use serde_json::{Map, Value};
use serde_json_path::JsonPath;
use sha2::{Digest, Sha256};

use crate::config::Lookup;
use crate::upstream::Upstream;

tokio::task_local! {
    /// The caller's request headers while its request is served: a lookup passes the caller's
    /// token on where the route does.
    pub static CALLER: HeaderMap;
}

/// The most records a lookup may return (more is an upstream that lies or a query too wide;
/// the form offers at most 16 anyway).
pub const MAX_RECORDS: usize = 256;

/// The longest label, in characters: the layer is given the same cap
/// ([`ToolPolicy::max_label_chars`](mcp_confirm::ToolPolicy::max_label_chars)), so it never
/// cuts a label the gateway checked for look-alikes.
pub const LABEL_CHARS: usize = 80;

/// The most characters of one record's value in a label: a title can say anything, and the
/// id in front must stay in view.
pub const LABEL_VALUE_CHARS: usize = 40;

/// Between the parts of a label.
pub const LABEL_SEPARATOR: &str = " · ";

/// Why a lookup found no candidates. The call is refused and nothing is shown; the reason goes
/// to the log only (on the wire, the gateway's or the layer's one answer for the class).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// The call lacks an argument the lookup reads: run without it, the lookup would find
    /// every record, and the form would offer them all.
    #[error(
        "the call has no value at {pointer:?} for the lookup's argument {argument:?}: \
         the lookup would run unfiltered"
    )]
    MissingArgument {
        /// The read tool's argument.
        argument: String,
        /// Where in the call's arguments it is read.
        pointer: String,
    },
    /// The read tool cannot be called.
    #[error("the lookup {tool}: {reason}")]
    Unreachable {
        /// The read tool.
        tool: String,
        /// What failed.
        reason: String,
    },
    /// The read tool answered an error.
    #[error("the lookup {tool} answered an error")]
    AnsweredError {
        /// The read tool.
        tool: String,
    },
    /// More than [`MAX_RECORDS`].
    #[error("the lookup {tool} returned {count} records (at most {MAX_RECORDS})")]
    TooManyRecords {
        /// The read tool.
        tool: String,
        /// How many.
        count: usize,
    },
    /// A record without a usable id.
    #[error("the lookup {tool} returned a record without a string or integer id at {pointer:?}")]
    NoId {
        /// The read tool.
        tool: String,
        /// The id's pointer.
        pointer: String,
    },
    /// A record without the version the operator names.
    #[error("the lookup {tool} returned a record without a version at {pointer:?}")]
    NoVersion {
        /// The read tool.
        tool: String,
        /// The version's pointer.
        pointer: String,
    },
    /// Two different records under one id: which one a choice means is not known.
    #[error("the lookup {tool} returned two different records with the id {id:?}")]
    DuplicateId {
        /// The read tool.
        tool: String,
        /// The id.
        id: String,
    },
    /// Two records whose options read the same: the user could not tell them apart.
    #[error("the lookup {tool} returned two records that read the same in the form: {label:?}")]
    SameLabel {
        /// The read tool.
        tool: String,
        /// What both would show.
        label: String,
    },
}

/// One tool's lookup, ready to run.
#[derive(Clone)]
pub struct RecordLookup {
    upstream: Upstream,
    spec: Arc<Lookup>,
    records: Arc<JsonPath>,
}

impl std::fmt::Debug for RecordLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordLookup")
            .field("tool", &self.spec.tool)
            .finish_non_exhaustive()
    }
}

impl RecordLookup {
    /// The lookup `spec` describes, against `upstream`.
    ///
    /// # Errors
    /// The JSONPath's, if `records` is not one (the file's validation already said so).
    pub fn new(upstream: Upstream, spec: Lookup) -> Result<Self, String> {
        let records = JsonPath::parse(&spec.records).map_err(|e| e.to_string())?;
        Ok(Self {
            upstream,
            spec: Arc::new(spec),
            records: Arc::new(records),
        })
    }

    /// The argument the chosen id is written into.
    pub fn select_into(&self) -> &str {
        &self.spec.select_into
    }

    /// The candidates for `asked`.
    ///
    /// # Errors
    /// [`PolicyError`] (a [`LookupError`] inside) when the call lacks an argument the lookup
    /// reads, or the read tool cannot be called, answers an error, or returns records the
    /// gateway cannot use: the call is refused, nothing shown.
    pub async fn candidates(&self, asked: Asked) -> Result<Vec<Candidate>, PolicyError> {
        let arguments = self.arguments(&asked.arguments).map_err(PolicyError::new)?;
        let caller = CALLER.try_with(HeaderMap::clone).ok();
        let result = self
            .upstream
            .call_tool(
                &self.spec.tool,
                arguments,
                &asked.principal,
                caller.as_ref(),
            )
            .await
            .map_err(|e| {
                PolicyError::new(LookupError::Unreachable {
                    tool: self.spec.tool.clone(),
                    reason: e.to_string(),
                })
            })?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(PolicyError::new(LookupError::AnsweredError {
                tool: self.spec.tool.clone(),
            }));
        }
        self.read(&result).map_err(PolicyError::new)
    }

    /// Whether `call` (a call's arguments) has every argument the lookup reads: a call without
    /// one is refused before anything is asked.
    ///
    /// # Errors
    /// [`LookupError::MissingArgument`] for the first one missing.
    pub fn check_call(&self, call: &Value) -> Result<(), LookupError> {
        self.arguments(call).map(drop)
    }

    /// The read tool's arguments: the fixed ones, then those taken from the call's, each of
    /// which must be there and name something (not `null`, nor empty).
    fn arguments(&self, call: &Value) -> Result<Value, LookupError> {
        let mut arguments: Map<String, Value> = self
            .spec
            .fixed_arguments
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, pointer) in &self.spec.arguments {
            match call.pointer(pointer) {
                Some(value) if !names_nothing(value) => {
                    arguments.insert(name.clone(), value.clone());
                }
                _ => {
                    return Err(LookupError::MissingArgument {
                        argument: name.clone(),
                        pointer: pointer.clone(),
                    });
                }
            }
        }
        Ok(Value::Object(arguments))
    }

    /// The candidates in a read tool's `result`: one per id (a record listed twice, the same
    /// each time, counts once), each labelled with its id first.
    fn read(&self, result: &Value) -> Result<Vec<Candidate>, LookupError> {
        let tool = || self.spec.tool.clone();
        let document = with_structured_content(result);
        let records = self.records.query(&document).all();
        if records.len() > MAX_RECORDS {
            return Err(LookupError::TooManyRecords {
                tool: tool(),
                count: records.len(),
            });
        }
        let mut candidates: Vec<Candidate> = Vec::with_capacity(records.len());
        for record in records {
            let id = match record.pointer(&self.spec.id) {
                Some(Value::String(id)) => id.clone(),
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                _ => {
                    return Err(LookupError::NoId {
                        tool: tool(),
                        pointer: self.spec.id.clone(),
                    });
                }
            };
            let version = match &self.spec.version {
                Some(pointer) => match record.pointer(pointer) {
                    Some(Value::String(v)) => v.clone(),
                    Some(v @ Value::Number(_)) => v.to_string(),
                    _ => {
                        return Err(LookupError::NoVersion {
                            tool: tool(),
                            pointer: pointer.clone(),
                        });
                    }
                },
                None => digest(record),
            };
            let candidate =
                Candidate::labelled(id.clone(), self.label(&id, record)).with_version(version);
            match candidates.iter().find(|c| c.id() == id) {
                Some(earlier) if *earlier == candidate => {}
                Some(_) => return Err(LookupError::DuplicateId { tool: tool(), id }),
                None => candidates.push(candidate),
            }
        }
        // More than the form can offer is the layer's to answer ("narrow the request").
        if candidates.len() <= mcp_confirm::token::MAX_CANDIDATES {
            let mut seen = HashSet::with_capacity(candidates.len());
            for candidate in &candidates {
                let label = candidate.label().unwrap_or_default();
                if !seen.insert(label) {
                    return Err(LookupError::SameLabel {
                        tool: tool(),
                        label: label.to_owned(),
                    });
                }
            }
        }
        Ok(candidates)
    }

    /// What the form shows of `record`: its id, then each labelled value that names something,
    /// each cleaned and capped, the whole capped at [`LABEL_CHARS`].
    fn label(&self, id: &str, record: &Value) -> String {
        let mut parts = vec![plain(id, LABEL_CHARS)];
        let pointers = self.spec.label.iter().flat_map(|l| l.pointers());
        for value in pointers.filter_map(|p| record.pointer(p)) {
            let text = match value {
                Value::String(s) => plain(s, LABEL_VALUE_CHARS),
                Value::Number(n) => plain(&n.to_string(), LABEL_VALUE_CHARS),
                _ => continue,
            };
            if !text.is_empty() {
                parts.push(text);
            }
        }
        plain(&parts.join(LABEL_SEPARATOR), LABEL_CHARS)
    }
}

/// Whether an argument's `value` names nothing a read tool could filter by: `null`, a blank
/// string, an empty list or object (many read tools take each of these as "everything").
fn names_nothing(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `text` as the form will show it: the core's own reduction of every label, so the labels
/// compared here for look-alikes are the ones the user sees.
fn plain(text: &str, max_chars: usize) -> String {
    Candidate::shown_label(text, max_chars)
}

/// `result` as the paths see it: a result without `structuredContent` whose one text block
/// holds JSON gets that JSON as its `structuredContent` (the spec asks servers that return
/// structured content to put it in a text block too; many put it only there).
fn with_structured_content(result: &Value) -> std::borrow::Cow<'_, Value> {
    if result.get("structuredContent").is_some() {
        return std::borrow::Cow::Borrowed(result);
    }
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    match texts.as_slice() {
        [text] => match serde_json::from_str::<Value>(text) {
            Ok(parsed) => {
                let mut result = result.clone();
                result["structuredContent"] = parsed;
                std::borrow::Cow::Owned(result)
            }
            Err(_) => std::borrow::Cow::Borrowed(result),
        },
        _ => std::borrow::Cow::Borrowed(result),
    }
}

/// A record's default version: SHA-256 of its canonical JSON, first 16 bytes, as hex.
fn digest(record: &Value) -> String {
    let hash = Sha256::digest(crate::catalog::canonical(record).as_bytes());
    hex::encode(&hash[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Label;
    use serde_json::json;

    fn lookup_with(version: Option<&str>, label: Option<Label>) -> RecordLookup {
        RecordLookup::new(
            Upstream::new("http://127.0.0.1:9/mcp".parse().unwrap(), None),
            Lookup {
                tool: "notes_search".into(),
                arguments: [("query".to_owned(), "/title".to_owned())].into(),
                fixed_arguments: [("limit".to_owned(), json!(20))].into(),
                records: "$.structuredContent.notes[*]".into(),
                id: "/id".into(),
                label,
                version: version.map(str::to_owned),
                select_into: "id".into(),
            },
        )
        .unwrap()
    }

    fn lookup(version: Option<&str>) -> RecordLookup {
        lookup_with(version, Some(Label::One("/title".into())))
    }

    fn notes(notes: Value) -> Value {
        json!({"structuredContent": {"notes": notes}})
    }

    fn labels(found: &[Candidate]) -> Vec<&str> {
        found.iter().map(|c| c.label().unwrap()).collect()
    }

    #[test]
    fn arguments_come_from_the_call_and_the_fixed_ones() {
        let l = lookup(None);
        assert_eq!(
            l.arguments(&json!({"title": "Groceries", "other": 1}))
                .unwrap(),
            json!({"query": "Groceries", "limit": 20})
        );
    }

    #[test]
    fn a_call_without_an_argument_the_lookup_reads_is_refused() {
        // Run without its filter, the read tool would return every record (#52, finding 3).
        let l = lookup(None);
        for call in [
            json!({}),
            json!({"id": "c-4"}),
            json!({"title": null}),
            json!({"title": "  "}),
            json!({"title": []}),
            json!({"title": {}}),
            json!("not an object"),
        ] {
            let refused = l.check_call(&call).unwrap_err();
            assert!(
                matches!(&refused, LookupError::MissingArgument { argument, pointer }
                    if argument == "query" && pointer == "/title"),
                "{call}: {refused}"
            );
        }
        l.check_call(&json!({"title": 0})).unwrap();
        l.check_call(&json!({"title": false})).unwrap();
    }

    #[test]
    fn records_become_candidates_with_versions() {
        let l = lookup(None);
        let result = notes(json!([
            {"id": "n1", "title": "Groceries", "body": "milk"},
            {"id": 7, "title": "Groceries", "body": "eggs"}]));
        let found = l.read(&result).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].id(), "n1");
        assert_eq!(found[1].id(), "7");
        // The default version changes with anything in the record.
        let changed = notes(json!([{"id": "n1", "title": "Groceries", "body": "MILK"}]));
        let again = l.read(&changed).unwrap();
        assert_ne!(found[0].version(), again[0].version());
        // The same record, its keys in another order: the same version.
        let reordered = notes(json!([{"body": "milk", "title": "Groceries", "id": "n1"}]));
        assert_eq!(found[0].version(), l.read(&reordered).unwrap()[0].version());
    }

    #[test]
    fn each_option_reads_its_id_first() {
        // Three records titled alike read apart (#52, finding 2).
        let l = lookup(None);
        let found = l
            .read(&notes(json!([
                {"id": "t-1", "title": "Login page"},
                {"id": "t-2", "title": "Login page"},
                {"id": "t-3", "title": "Login page"}])))
            .unwrap();
        assert_eq!(
            labels(&found),
            ["t-1 · Login page", "t-2 · Login page", "t-3 · Login page"]
        );
        // Without a label: the id alone; a value that is missing or not text is left out.
        let bare = lookup_with(None, None);
        let record = json!([{"id": "t-1", "title": "Login page"}]);
        assert_eq!(labels(&bare.read(&notes(record)).unwrap()), ["t-1"]);
        let l = lookup_with(
            None,
            Some(Label::Many(vec![
                "/title".into(),
                "/owner".into(),
                "/size".into(),
            ])),
        );
        let found = l
            .read(&notes(json!([
                {"id": "t-1", "title": "Login page", "owner": "alice", "size": 3},
                {"id": "t-2", "title": "Login page", "owner": {"name": "bob"}},
                {"id": "t-3", "owner": "carol"}])))
            .unwrap();
        assert_eq!(
            labels(&found),
            [
                "t-1 · Login page · alice · 3",
                "t-2 · Login page",
                "t-3 · carol"
            ]
        );
    }

    #[test]
    fn label_values_are_cleaned_and_capped() {
        let l = lookup_with(
            None,
            Some(Label::Many(vec!["/title".into(), "/owner".into()])),
        );
        let long = "x".repeat(100);
        let found = l
            .read(&notes(json!([
                {"id": "t-1", "title": "Log\u{202E}in\u{200B}  page\n", "owner": long},
                {"id": "t-2", "title": "\u{2066}\u{2069}", "owner": "bob"}])))
            .unwrap();
        let first = found[0].label().unwrap();
        assert!(first.starts_with("t-1 · Login page · xxx"), "{first}");
        assert!(first.ends_with('…'), "{first}");
        assert_eq!(
            first.chars().count(),
            "t-1 · Login page · ".chars().count() + LABEL_VALUE_CHARS
        );
        // A value with nothing visible is left out.
        assert_eq!(found[1].label(), Some("t-2 · bob"));
        // The whole label fits the layer's cap, whatever the values.
        let many = lookup_with(
            None,
            Some(Label::Many(vec!["/a".into(), "/b".into(), "/c".into()])),
        );
        let found = many
            .read(&notes(
                json!([{"id": "t-1", "a": long, "b": long, "c": long}]),
            ))
            .unwrap();
        assert_eq!(found[0].label().unwrap().chars().count(), LABEL_CHARS);
    }

    #[test]
    fn options_that_would_still_read_the_same_refuse_the_call() {
        let l = lookup(None);
        let long = "x".repeat(LABEL_CHARS);
        for records in [
            // Ids that differ past the cap.
            json!([{"id": format!("{long}1")}, {"id": format!("{long}2")}]),
            // Ids that differ in spacing only (the form collapses it).
            json!([{"id": "t 1", "title": "A"}, {"id": "t  1", "title": "A"}]),
            // A separator inside an id or a title.
            json!([{"id": "t-1 · A", "title": "B"}, {"id": "t-1", "title": "A · B"}]),
        ] {
            let refused = l.read(&notes(records.clone())).unwrap_err();
            assert!(
                matches!(refused, LookupError::SameLabel { .. }),
                "{records}: {refused}"
            );
        }
        // More than the form offers: the layer's to answer, not a look-alike.
        let many: Vec<Value> = (0..=mcp_confirm::token::MAX_CANDIDATES)
            .map(|n| json!({"id": format!("{long}{n}"), "title": "A"}))
            .collect();
        assert_eq!(l.read(&notes(json!(many))).unwrap().len(), many.len());
    }

    #[test]
    fn a_record_listed_twice_counts_once_and_two_under_one_id_refuse_the_call() {
        let l = lookup(None);
        let found = l
            .read(&notes(json!([
                {"id": "f001", "title": "A"},
                {"id": "f001", "title": "A"},
                {"id": "f002", "title": "B"}])))
            .unwrap();
        let ids: Vec<&str> = found.iter().map(Candidate::id).collect();
        assert_eq!(ids, ["f001", "f002"]);
        let refused = l
            .read(&notes(json!([
                {"id": "f001", "title": "A"},
                {"id": "f001", "title": "A", "body": "other"}])))
            .unwrap_err();
        assert!(
            matches!(refused, LookupError::DuplicateId { .. }),
            "{refused}"
        );
    }

    #[test]
    fn json_in_the_one_text_block_is_read_as_structured_content() {
        let l = lookup(Some("/v"));
        let result = json!({"content": [{"type": "text",
            "text": "{\"notes\": [{\"id\": \"n1\", \"title\": \"T\", \"v\": 3}]}"}]});
        let found = l.read(&result).unwrap();
        assert_eq!(found[0].version(), Some("3"));
    }

    #[test]
    fn records_the_gateway_cannot_use_refuse_the_call() {
        let l = lookup(Some("/v"));
        for records in [
            json!([{"title": "no id", "v": 1}]),
            json!([{"id": {"nested": 1}, "v": 1}]),
            json!([{"id": 1.5, "v": 1}]),
            json!([{"id": "n1"}]),
        ] {
            assert!(l.read(&notes(records.clone())).is_err(), "{records}");
        }
        let many: Vec<Value> = (0..=MAX_RECORDS)
            .map(|n| json!({"id": n, "v": 1}))
            .collect();
        assert!(l.read(&notes(json!(many))).is_err());
        // Nothing matched: no candidates (the layer answers that nothing matched).
        assert!(
            l.read(&json!({"structuredContent": {}}))
                .unwrap()
                .is_empty()
        );
    }
}
