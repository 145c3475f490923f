//! What each upstream tool's calls get, and why, in this order: the operator's entry (`deny` >
//! `confirm` > `allow`), then the upstream's annotations (`readOnlyHint: true` → pass,
//! `destructiveHint: false` → pass, `destructiveHint: true` → confirm), then the spec's
//! default: a tool that says nothing may be destructive, so it is confirmed. Pure: the same
//! inputs always give the same verdict, which `check` prints and the gateway enforces.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::{Operator, ToolEntry};

/// What a tool's calls get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forwarded only after the user confirms (a yes/no form naming the tool and showing its
    /// arguments).
    Confirm {
        /// The form's question, if the operator wrote one.
        message: Option<String>,
    },
    /// Forwarded only after the user picks one of the records the operator's lookup finds and
    /// confirms; the chosen id is written into the call.
    PickOne {
        /// The form's question, if the operator wrote one.
        message: Option<String>,
    },
    /// Forwarded as it comes.
    Pass,
    /// Never forwarded.
    Deny,
}

/// Why a tool got its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The operator's entry for it.
    Operator,
    /// `readOnlyHint: true`.
    ReadOnly,
    /// `destructiveHint: false` (and not read-only).
    NotDestructive,
    /// `destructiveHint: true`.
    Destructive,
    /// No annotations say: the spec's default is that it may be destructive.
    Unannotated,
    /// Annotations that are not an object, or a hint that is not a boolean: counted
    /// destructive (fail closed), as the core counts them.
    Malformed,
    /// The operator gave it a lookup through a tool the gateway does not pass as it comes (a
    /// lookup runs unconfirmed, so it must be a read tool): denied until that is fixed.
    UnsafeLookup,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Operator => "the operator's entry",
            Self::ReadOnly => "the upstream says readOnlyHint: true",
            Self::NotDestructive => "the upstream says destructiveHint: false",
            Self::Destructive => "the upstream says destructiveHint: true",
            Self::Unannotated => {
                "the upstream says neither readOnlyHint nor destructiveHint (the spec: it may be destructive)"
            }
            Self::Malformed => {
                "the upstream's annotations are malformed (a hint that is not a boolean): counted destructive"
            }
            Self::UnsafeLookup => {
                "its lookup tool is missing or is confirmed or denied here, and a lookup runs unconfirmed: denied"
            }
        })
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Confirm { .. } => "confirm",
            Self::PickOne { .. } => "pick one",
            Self::Pass => "pass",
            Self::Deny => "deny",
        })
    }
}

/// The verdict on the tool `definition` (one entry of a `tools/list` result) under the
/// operator's `entries`.
pub fn decide(definition: &Value, entries: &BTreeMap<String, ToolEntry>) -> (Verdict, Reason) {
    let name = definition.get("name").and_then(Value::as_str).unwrap_or("");
    if let Some(entry) = entries.get(name) {
        let verdict = match entry.policy {
            Operator::Deny => Verdict::Deny,
            Operator::Confirm if entry.lookup.is_some() => Verdict::PickOne {
                message: entry.message.clone(),
            },
            Operator::Confirm => Verdict::Confirm {
                message: entry.message.clone(),
            },
            Operator::Allow => Verdict::Pass,
        };
        return (verdict, Reason::Operator);
    }
    // The core's rule decides (the layer reads the same list by it); the hints only say why.
    let annotations = definition.get("annotations");
    let hint = |key: &str| annotations.and_then(|a| a.get(key));
    let says = |key: &str, value: bool| hint(key) == Some(&Value::Bool(value));
    if !mcp_confirm::tools::is_destructive(annotations) {
        let reason = match says("readOnlyHint", true) {
            true => Reason::ReadOnly,
            false => Reason::NotDestructive,
        };
        return (Verdict::Pass, reason);
    }
    let malformed = annotations.is_some_and(|a| !a.is_object() && !a.is_null())
        || ["readOnlyHint", "destructiveHint"]
            .iter()
            .any(|key| hint(key).is_some_and(|v| !v.is_boolean() && !v.is_null()));
    let reason = match (malformed, says("destructiveHint", true)) {
        (true, _) => Reason::Malformed,
        (false, true) => Reason::Destructive,
        (false, false) => Reason::Unannotated,
    };
    (Verdict::Confirm { message: None }, reason)
}

/// Whether the core's layer, reading `definition` in a tool list, counts it destructive (the
/// spec's rule, which `decide` follows when the operator says nothing): such a tool that the
/// operator allows is exempted, not left unconfigured.
pub fn destructive_by_spec(definition: &Value) -> bool {
    mcp_confirm::tools::is_destructive(definition.get("annotations"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entries(pairs: &[(&str, Operator)]) -> BTreeMap<String, ToolEntry> {
        pairs
            .iter()
            .map(|(name, policy)| {
                (
                    (*name).to_owned(),
                    ToolEntry {
                        policy: *policy,
                        message: None,
                        lookup: None,
                        standing: None,
                        approve_in: crate::config::ApproveIn::Form,
                        approvers: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn annotations_decide_when_the_operator_does_not() {
        let none = BTreeMap::new();
        let cases = [
            (
                json!({"name": "a"}),
                Verdict::Confirm { message: None },
                Reason::Unannotated,
            ),
            (
                json!({"name": "a", "annotations": {}}),
                Verdict::Confirm { message: None },
                Reason::Unannotated,
            ),
            (
                json!({"name": "a", "annotations": {"readOnlyHint": true, "destructiveHint": true}}),
                Verdict::Pass,
                Reason::ReadOnly,
            ),
            (
                json!({"name": "a", "annotations": {"destructiveHint": true}}),
                Verdict::Confirm { message: None },
                Reason::Destructive,
            ),
            (
                json!({"name": "a", "annotations": {"destructiveHint": false}}),
                Verdict::Pass,
                Reason::NotDestructive,
            ),
            (
                json!({"name": "a", "annotations": {"readOnlyHint": false}}),
                Verdict::Confirm { message: None },
                Reason::Unannotated,
            ),
            // A hint of the wrong type is malformed: destructive, as the core counts it
            // (#52, 8: one rule), even beside a read-only hint.
            (
                json!({"name": "a", "annotations": {"readOnlyHint": "true"}}),
                Verdict::Confirm { message: None },
                Reason::Malformed,
            ),
            (
                json!({"name": "a", "annotations": {"readOnlyHint": true, "destructiveHint": 0}}),
                Verdict::Confirm { message: None },
                Reason::Malformed,
            ),
            (
                json!({"name": "a", "annotations": "read-only"}),
                Verdict::Confirm { message: None },
                Reason::Malformed,
            ),
        ];
        for (definition, verdict, reason) in cases {
            assert_eq!(
                decide(&definition, &none),
                (verdict, reason),
                "{definition}"
            );
        }
    }

    #[test]
    fn the_operator_wins_over_annotations() {
        let read_only = json!({"name": "wipe", "annotations": {"readOnlyHint": true}});
        let destructive = json!({"name": "wipe", "annotations": {"destructiveHint": true}});
        let deny = entries(&[("wipe", Operator::Deny)]);
        let confirm = entries(&[("wipe", Operator::Confirm)]);
        let allow = entries(&[("wipe", Operator::Allow)]);
        assert_eq!(decide(&read_only, &deny).0, Verdict::Deny);
        assert_eq!(
            decide(&read_only, &confirm).0,
            Verdict::Confirm { message: None }
        );
        assert_eq!(
            decide(&destructive, &allow),
            (Verdict::Pass, Reason::Operator)
        );
        // An entry for another name does not apply.
        assert_eq!(
            decide(&json!({"name": "other"}), &deny).1,
            Reason::Unannotated
        );
    }
}
