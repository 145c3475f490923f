//! Which records a call may mean: the operator's lookup, run against the same upstream as the
//! same principal, turned into the candidates of a pick-one form.
//!
//! It is the route's [`Resolver`](mcp_confirm::Resolver): the layer runs it on the first call (the form's candidates)
//! and again right before the confirmed call is forwarded (revalidation: a record that is gone,
//! or whose version differs from the one shown, is refused and nothing is forwarded). The
//! upstream's answer is data, never trusted: records without a usable id refuse the call, labels
//! are cleaned by the layer like every label, and a record's version is, unless the operator
//! names one, a digest of the whole record as returned, so any change the read tool shows counts.

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
    /// [`PolicyError`] when the read tool cannot be called, answers an error, or returns
    /// records the gateway cannot use: the call is refused, nothing shown.
    pub async fn candidates(&self, asked: Asked) -> Result<Vec<Candidate>, PolicyError> {
        let arguments = self.arguments(&asked.arguments);
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
            .map_err(|e| PolicyError::new(format!("the lookup {}: {e}", self.spec.tool)))?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(PolicyError::new(format!(
                "the lookup {} answered an error",
                self.spec.tool
            )));
        }
        self.read(&result)
    }

    /// The read tool's arguments: the fixed ones, then those taken from the call's.
    fn arguments(&self, call: &Value) -> Value {
        let mut arguments: Map<String, Value> = self
            .spec
            .fixed_arguments
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, pointer) in &self.spec.arguments {
            if let Some(value) = call.pointer(pointer) {
                arguments.insert(name.clone(), value.clone());
            }
        }
        Value::Object(arguments)
    }

    /// The candidates in a read tool's `result`.
    fn read(&self, result: &Value) -> Result<Vec<Candidate>, PolicyError> {
        let document = with_structured_content(result);
        let records = self.records.query(&document).all();
        if records.len() > MAX_RECORDS {
            return Err(PolicyError::new(format!(
                "the lookup {} returned {} records (at most {MAX_RECORDS})",
                self.spec.tool,
                records.len()
            )));
        }
        let mut candidates = Vec::with_capacity(records.len());
        for record in records {
            let id = match record.pointer(&self.spec.id) {
                Some(Value::String(id)) => id.clone(),
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                _ => {
                    return Err(PolicyError::new(format!(
                        "the lookup {} returned a record without a string or integer id at {:?}",
                        self.spec.tool, self.spec.id
                    )));
                }
            };
            let label = self
                .spec
                .label
                .as_deref()
                .and_then(|p| record.pointer(p))
                .and_then(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                });
            let version = match &self.spec.version {
                Some(pointer) => match record.pointer(pointer) {
                    Some(Value::String(v)) => v.clone(),
                    Some(v @ Value::Number(_)) => v.to_string(),
                    _ => {
                        return Err(PolicyError::new(format!(
                            "the lookup {} returned a record without a version at {pointer:?}",
                            self.spec.tool
                        )));
                    }
                },
                None => digest(record),
            };
            let candidate = match label {
                Some(label) => Candidate::labelled(id, label),
                None => Candidate::new(id),
            };
            candidates.push(candidate.with_version(version));
        }
        Ok(candidates)
    }
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
    mcp_confirm::__private::hex(&hash[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lookup(version: Option<&str>) -> RecordLookup {
        RecordLookup::new(
            Upstream::new("http://127.0.0.1:9/mcp".parse().unwrap(), None),
            Lookup {
                tool: "notes_search".into(),
                arguments: [("query".to_owned(), "/title".to_owned())].into(),
                fixed_arguments: [("limit".to_owned(), json!(20))].into(),
                records: "$.structuredContent.notes[*]".into(),
                id: "/id".into(),
                label: Some("/title".into()),
                version: version.map(str::to_owned),
                select_into: "id".into(),
            },
        )
        .unwrap()
    }

    #[test]
    fn arguments_come_from_the_call_and_the_fixed_ones() {
        let l = lookup(None);
        assert_eq!(
            l.arguments(&json!({"title": "Groceries", "other": 1})),
            json!({"query": "Groceries", "limit": 20})
        );
        assert_eq!(l.arguments(&json!({})), json!({"limit": 20}));
    }

    #[test]
    fn records_become_candidates_with_versions() {
        let l = lookup(None);
        let result = json!({"structuredContent": {"notes": [
            {"id": "n1", "title": "Groceries", "body": "milk"},
            {"id": 7, "title": "Groceries", "body": "eggs"}]}});
        let found = l.read(&result).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].id(), "n1");
        assert_eq!(found[0].label(), Some("Groceries"));
        assert_eq!(found[1].id(), "7");
        // The default version changes with anything in the record.
        let changed = json!({"structuredContent": {"notes": [
            {"id": "n1", "title": "Groceries", "body": "MILK"}]}});
        let again = l.read(&changed).unwrap();
        assert_ne!(found[0].version(), again[0].version());
        // The same record, its keys in another order: the same version.
        let reordered = json!({"structuredContent": {"notes": [
            {"body": "milk", "title": "Groceries", "id": "n1"}]}});
        assert_eq!(found[0].version(), l.read(&reordered).unwrap()[0].version());
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
        for notes in [
            json!([{"title": "no id", "v": 1}]),
            json!([{"id": {"nested": 1}, "v": 1}]),
            json!([{"id": 1.5, "v": 1}]),
            json!([{"id": "n1"}]),
        ] {
            let result = json!({"structuredContent": {"notes": notes}});
            assert!(l.read(&result).is_err(), "{notes}");
        }
        let many: Vec<Value> = (0..=MAX_RECORDS)
            .map(|n| json!({"id": n, "v": 1}))
            .collect();
        assert!(
            l.read(&json!({"structuredContent": {"notes": many}}))
                .is_err()
        );
        // Nothing matched: no candidates (the layer answers that nothing matched).
        assert!(
            l.read(&json!({"structuredContent": {}}))
                .unwrap()
                .is_empty()
        );
    }
}
