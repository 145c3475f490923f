//! What one upstream's tools get, as of its last tool list: each definition's verdict, keyed by
//! the definition's hash as well as its name (a tool renamed and swapped, or re-described, is
//! another tool and is judged again), and the revision of the whole (the list and the
//! operator's entries) that every decision made under it belongs to.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::ToolEntry;
use crate::policy::{self, Reason, Verdict};

/// One tool as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// Its verdict.
    pub verdict: Verdict,
    /// Why.
    pub reason: Reason,
    /// Whether the spec counts it destructive (the layer must then be told it is allowed).
    pub destructive: bool,
    /// The SHA-256 of its definition (canonical JSON).
    pub hash: [u8; 32],
}

/// One upstream's tools, judged.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The definitions, as listed.
    pub tools: Vec<Value>,
    /// Each name's judgement. A name listed twice has none (see
    /// [`duplicates`](Self::duplicates)).
    pub judged: BTreeMap<String, Judged>,
    /// Names listed more than once: never forwarded, since which definition a client saw is
    /// not known.
    pub duplicates: Vec<String>,
    /// A digest of the list and the operator's entries: the policy revision.
    pub revision: String,
    /// When it was listed.
    pub listed_at: Instant,
    /// Until when it is trusted.
    pub expires: Instant,
}

impl Catalog {
    /// Judges `tools` under the operator's `entries`, trusted for `ttl`.
    pub fn new(tools: Vec<Value>, entries: &BTreeMap<String, ToolEntry>, ttl: Duration) -> Self {
        let mut judged = BTreeMap::new();
        let mut duplicates = Vec::new();
        let mut whole = Sha256::new();
        whole.update(b"mcp-confirm-gateway/catalog/v1\0");
        for tool in &tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let hash: [u8; 32] = Sha256::digest(canonical(tool).as_bytes()).into();
            whole.update(hash);
            if judged.contains_key(name) {
                if !duplicates.iter().any(|d| d == name) {
                    duplicates.push(name.to_owned());
                }
                continue;
            }
            let (verdict, reason) = policy::decide(tool, entries);
            judged.insert(
                name.to_owned(),
                Judged {
                    verdict,
                    reason,
                    destructive: policy::destructive_by_spec(tool),
                    hash,
                },
            );
        }
        // A lookup runs unconfirmed: its tool must be one the gateway passes as it comes.
        let unsafe_lookups: Vec<String> = judged
            .iter()
            .filter(|(name, j)| {
                matches!(j.verdict, Verdict::PickOne { .. })
                    && entries
                        .get(name.as_str())
                        .and_then(|e| e.lookup.as_ref())
                        .is_none_or(|lookup| {
                            duplicates.contains(&lookup.tool)
                                || judged
                                    .get(&lookup.tool)
                                    .is_none_or(|read| read.verdict != Verdict::Pass)
                        })
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in unsafe_lookups {
            if let Some(j) = judged.get_mut(&name) {
                j.verdict = Verdict::Deny;
                j.reason = Reason::UnsafeLookup;
            }
        }
        // A name listed twice has no judgement: which definition a client saw is not known.
        for name in &duplicates {
            judged.remove(name);
        }
        for (name, entry) in entries {
            whole.update((name.len() as u64).to_be_bytes());
            whole.update(name.as_bytes());
            let entry = serde_json::to_string(entry).unwrap_or_default();
            whole.update((entry.len() as u64).to_be_bytes());
            whole.update(entry.as_bytes());
        }
        let revision = hex::encode(&whole.finalize()[..8]);
        let listed_at = Instant::now();
        Self {
            tools,
            judged,
            duplicates,
            revision,
            listed_at,
            expires: listed_at + ttl,
        }
    }

    /// Whether it should be listed again.
    pub fn stale(&self) -> bool {
        Instant::now() >= self.expires
    }

    /// The definitions the gateway serves, for the layer's tool list: each named tool listed
    /// once. A name listed twice is left out (the gateway refuses its calls), so one bad entry
    /// of the upstream's list does not stop the layer from being built for the others.
    pub fn served(&self) -> Vec<&Value> {
        self.tools
            .iter()
            .filter(|tool| {
                tool.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| !self.duplicates.iter().any(|d| d == name))
            })
            .collect()
    }

    /// The judgement of `name`; `None` when the list does not have it (or has it twice).
    pub fn judge(&self, name: &str) -> Option<&Judged> {
        if self.duplicates.iter().any(|d| d == name) {
            return None;
        }
        self.judged.get(name)
    }
}

/// `value` as JSON with object keys sorted, so that the same definition always hashes the same.
pub(crate) fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(canonical).collect::<Vec<_>>().join(",")
            )
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Operator;
    use serde_json::json;

    #[test]
    fn a_redescribed_or_swapped_tool_is_another_tool() {
        let entries = BTreeMap::new();
        let ttl = Duration::from_secs(60);
        let a = Catalog::new(
            vec![
                json!({"name": "wipe", "annotations": {"readOnlyHint": true}, "description": "x"}),
            ],
            &entries,
            ttl,
        );
        let b = Catalog::new(
            vec![
                json!({"description": "x", "annotations": {"readOnlyHint": true}, "name": "wipe"}),
            ],
            &entries,
            ttl,
        );
        // The same definition, keys in another order: the same tool.
        assert_eq!(a.judge("wipe").unwrap().hash, b.judge("wipe").unwrap().hash);
        assert_eq!(a.revision, b.revision);
        // Swapped for a destructive one under the same name: another hash, another verdict.
        let c = Catalog::new(
            vec![json!({"name": "wipe", "description": "x"})],
            &entries,
            ttl,
        );
        assert_ne!(a.judge("wipe").unwrap().hash, c.judge("wipe").unwrap().hash);
        assert_ne!(a.revision, c.revision);
        assert_eq!(a.judge("wipe").unwrap().verdict, Verdict::Pass);
        assert_eq!(
            c.judge("wipe").unwrap().verdict,
            Verdict::Confirm { message: None }
        );
    }

    #[test]
    fn a_name_listed_twice_is_never_judged_nor_given_to_the_layer() {
        let c = Catalog::new(
            vec![
                json!({"name": "wipe", "annotations": {"readOnlyHint": true}}),
                json!({"name": "keep", "annotations": {"readOnlyHint": true}}),
                json!({"name": "wipe"}),
                json!({"name": "wipe"}),
            ],
            &BTreeMap::new(),
            Duration::from_secs(60),
        );
        assert!(c.judge("wipe").is_none());
        assert!(!c.judged.contains_key("wipe"));
        assert!(c.judge("other").is_none());
        assert_eq!(c.duplicates, ["wipe"]);
        // The layer gets the rest of the list: one bad entry does not take it down.
        let served: Vec<&str> = c
            .served()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(served, ["keep"]);
        assert_eq!(c.judge("keep").unwrap().verdict, Verdict::Pass);
    }

    #[test]
    fn the_operators_entries_are_part_of_the_revision() {
        let tools = vec![json!({"name": "wipe"})];
        let ttl = Duration::from_secs(60);
        let none = Catalog::new(tools.clone(), &BTreeMap::new(), ttl);
        let entries = BTreeMap::from([(
            "wipe".to_owned(),
            ToolEntry {
                policy: Operator::Deny,
                message: None,
                lookup: None,
                standing: None,
                approve_in: crate::config::ApproveIn::Form,
                approvers: None,
            },
        )]);
        let denied = Catalog::new(tools, &entries, ttl);
        assert_ne!(none.revision, denied.revision);
        assert_eq!(denied.judge("wipe").unwrap().verdict, Verdict::Deny);
    }
}
