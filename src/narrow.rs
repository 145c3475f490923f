//! Narrowing a call before approving it: which arguments an approver may change, and how, so
//! that an edit can only ever make the call do less.
//!
//! A tool declares each narrowable argument with a [`Narrowing`]
//! ([`ToolPolicy::narrowable`](crate::ToolPolicy::narrowable)). The approver's edit is an object
//! of declared arguments only; [`narrow`] checks it against the declaration and the call's own
//! arguments and returns the arguments the handler will receive. Anything else is refused whole:
//! an undeclared argument, a wider value, another type, and, outside this module, any attempt to
//! change the tool (the edit has no place for a name).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How an approver may narrow one argument. Each kind only ever lets the call do less.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "values", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Narrowing {
    /// A list (of ids, say): the edit keeps some of its elements, at least one, none added.
    Subset,
    /// A number (a limit, a count): the edit is a number no larger, and no smaller than zero.
    AtMost,
    /// A flag such as `dry_run`: the edit may turn it on, never off.
    TurnOn,
    /// One of these strings, ordered from the narrowest to the widest (`["dry_run", "archive",
    /// "delete"]`): the edit is the call's own value or one before it.
    OneOf(Vec<String>),
}

impl Narrowing {
    /// What the approver is told the edit may do.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Subset => "keep some of these, at least one",
            Self::AtMost => "a number no larger",
            Self::TurnOn => "may be turned on",
            Self::OneOf(_) => "this or a narrower value",
        }
    }
}

/// Why an edit was refused; nothing of it applies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NarrowError {
    /// The edit names an argument the tool does not declare narrowable.
    #[error("argument {0:?} may not be changed")]
    Undeclared(String),
    /// The edit would let the call do more (or something else) than it asked.
    #[error("argument {0:?} would not be narrower")]
    Wider(String),
    /// The call's own argument is missing or not of the declared kind: it cannot be narrowed.
    #[error("argument {0:?} cannot be narrowed as declared")]
    NotNarrowable(String),
    /// The edit is not an object of arguments.
    #[error("the edit is not an object of arguments")]
    NotAnObject,
}

/// The most arguments one tool may declare narrowable.
pub const MAX_NARROWABLE: usize = 16;

/// The most bytes an edit may hold.
pub const MAX_EDIT_BYTES: usize = 4096;

/// The arguments the handler receives: `original` with `edit` applied, after every edited
/// argument is checked against `declared`. `Ok(None)`: the edit changes nothing.
///
/// # Errors
/// The first [`NarrowError`]; nothing of the edit applies.
pub fn narrow(
    declared: &[(String, Narrowing)],
    original: &Map<String, Value>,
    edit: &Map<String, Value>,
) -> Result<Option<Map<String, Value>>, NarrowError> {
    let mut narrowed = original.clone();
    let mut changed = false;
    for (name, value) in edit {
        let Some((_, how)) = declared.iter().find(|(n, _)| n == name) else {
            return Err(NarrowError::Undeclared(name.clone()));
        };
        let before = original.get(name);
        if before == Some(value) {
            continue;
        }
        check(name, how, before, value)?;
        narrowed.insert(name.clone(), value.clone());
        changed = true;
    }
    Ok(changed.then_some(narrowed))
}

/// Reads an edit as the page or a form carries it: a JSON object of at most
/// [`MAX_EDIT_BYTES`].
///
/// # Errors
/// [`NarrowError::NotAnObject`] for anything else.
pub fn read_edit(text: &str) -> Result<Map<String, Value>, NarrowError> {
    if text.len() > MAX_EDIT_BYTES {
        return Err(NarrowError::NotAnObject);
    }
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(NarrowError::NotAnObject),
    }
}

fn check(
    name: &str,
    how: &Narrowing,
    before: Option<&Value>,
    after: &Value,
) -> Result<(), NarrowError> {
    let wider = || NarrowError::Wider(name.to_owned());
    let not = || NarrowError::NotNarrowable(name.to_owned());
    match how {
        Narrowing::Subset => {
            let (Some(Value::Array(before)), Value::Array(after)) = (before, after) else {
                return Err(if matches!(before, Some(Value::Array(_))) {
                    wider()
                } else {
                    not()
                });
            };
            if after.is_empty() {
                return Err(wider());
            }
            // Each element kept at most as often as the call had it.
            let mut left: Vec<&Value> = before.iter().collect();
            for element in after {
                let Some(at) = left.iter().position(|v| *v == element) else {
                    return Err(wider());
                };
                left.swap_remove(at);
            }
            Ok(())
        }
        Narrowing::AtMost => {
            let Some(Value::Number(before)) = before else {
                return Err(not());
            };
            let Value::Number(after) = after else {
                return Err(wider());
            };
            // Whole numbers stay whole, and are compared exactly (as f64, 2^62 + 511 would pass
            // for 2^62); a fraction is never "less" of a whole limit.
            let whole = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (whole(before), whole(after)) {
                (Some(b), _) if b < 0 => Err(not()),
                (Some(b), Some(a)) if (0..=b).contains(&a) => Ok(()),
                (Some(_), _) => Err(wider()),
                (None, after_whole) => {
                    // A fractional limit: compared as f64, with a whole edit only where f64 holds
                    // it exactly.
                    let (Some(b), Some(a)) = (before.as_f64(), after.as_f64()) else {
                        return Err(wider());
                    };
                    let exact = after_whole.is_none_or(|w| a as i128 == w);
                    if b < 0.0 {
                        Err(not())
                    } else if exact && (0.0..=b).contains(&a) {
                        Ok(())
                    } else {
                        Err(wider())
                    }
                }
            }
        }
        Narrowing::TurnOn => match (before, after) {
            (None | Some(Value::Bool(false)), Value::Bool(true)) => Ok(()),
            (None | Some(Value::Bool(_)), _) => Err(wider()),
            _ => Err(not()),
        },
        Narrowing::OneOf(order) => {
            let Some(Value::String(before)) = before else {
                return Err(not());
            };
            let Some(was) = order.iter().position(|v| v == before) else {
                return Err(not());
            };
            let Value::String(after) = after else {
                return Err(wider());
            };
            match order.iter().position(|v| v == after) {
                Some(is) if is <= was => Ok(()),
                _ => Err(wider()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> Vec<(String, Narrowing)> {
        vec![
            ("ids".into(), Narrowing::Subset),
            ("limit".into(), Narrowing::AtMost),
            ("dry_run".into(), Narrowing::TurnOn),
            (
                "mode".into(),
                Narrowing::OneOf(vec!["dry_run".into(), "archive".into(), "delete".into()]),
            ),
        ]
    }

    fn call() -> Map<String, Value> {
        json!({"ids": ["a", "b", "c"], "limit": 50, "dry_run": false, "mode": "archive", "title": "x"})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    fn edit(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn narrower_edits_apply_and_nothing_else_changes() {
        let out = narrow(
            &declared(),
            &call(),
            &edit(json!({"ids": ["c", "a"], "limit": 10, "dry_run": true, "mode": "dry_run"})),
        );
        let expected = json!({"ids": ["c", "a"], "limit": 10, "dry_run": true, "mode": "dry_run", "title": "x"});
        assert_eq!(out.map(|m| m.map(Value::Object)), Ok(Some(expected)));
        // The same values: no narrowing.
        assert_eq!(
            narrow(
                &declared(),
                &call(),
                &edit(json!({"limit": 50, "mode": "archive"}))
            ),
            Ok(None)
        );
        assert_eq!(narrow(&declared(), &call(), &Map::new()), Ok(None));
        // Zero is the floor of a limit; a flag absent from the call may be turned on.
        let mut absent = call();
        absent.remove("dry_run");
        assert!(matches!(
            narrow(
                &declared(),
                &absent,
                &edit(json!({"dry_run": true, "limit": 0}))
            ),
            Ok(Some(_))
        ));
    }

    #[test]
    fn wider_other_and_undeclared_edits_are_refused_whole() {
        let wider = |v: Value| narrow(&declared(), &call(), &edit(v));
        let w = |n: &str| Err(NarrowError::Wider(n.into()));
        assert_eq!(wider(json!({"ids": ["a", "d"]})), w("ids"));
        assert_eq!(wider(json!({"ids": ["a", "a"]})), w("ids"));
        assert_eq!(wider(json!({"ids": []})), w("ids"));
        assert_eq!(wider(json!({"ids": "a"})), w("ids"));
        assert_eq!(wider(json!({"limit": 51})), w("limit"));
        assert_eq!(wider(json!({"limit": -1})), w("limit"));
        assert_eq!(wider(json!({"limit": 9.5})), w("limit"));
        assert_eq!(wider(json!({"limit": "1"})), w("limit"));
        // Large whole numbers are compared exactly, not as f64.
        let big = edit(json!({"limit": 4_611_686_018_427_387_904_u64}));
        assert_eq!(
            narrow(
                &declared(),
                &big,
                &edit(json!({"limit": 4_611_686_018_427_388_415_u64}))
            ),
            w("limit")
        );
        assert!(matches!(
            narrow(
                &declared(),
                &big,
                &edit(json!({"limit": 4_611_686_018_427_387_903_u64}))
            ),
            Ok(Some(_))
        ));
        let fraction = edit(json!({"limit": 2.5}));
        assert!(matches!(
            narrow(&declared(), &fraction, &edit(json!({"limit": 2}))),
            Ok(Some(_))
        ));
        assert_eq!(
            narrow(&declared(), &fraction, &edit(json!({"limit": 3}))),
            w("limit")
        );
        assert_eq!(wider(json!({"mode": "delete"})), w("mode"));
        assert_eq!(wider(json!({"mode": "shred"})), w("mode"));
        assert_eq!(
            narrow(
                &declared(),
                &edit(json!({"dry_run": true})),
                &edit(json!({"dry_run": false}))
            ),
            w("dry_run")
        );
        assert_eq!(
            wider(json!({"title": "y"})),
            Err(NarrowError::Undeclared("title".into()))
        );
        assert_eq!(
            wider(json!({"name": "notes_list"})),
            Err(NarrowError::Undeclared("name".into()))
        );
        // One bad argument refuses the good ones with it.
        assert_eq!(wider(json!({"limit": 1, "ids": ["z"]})), w("ids"));
        let mut odd = call();
        odd.insert("mode".into(), json!("other"));
        assert_eq!(
            narrow(&declared(), &odd, &edit(json!({"mode": "dry_run"}))),
            Err(NarrowError::NotNarrowable("mode".into()))
        );
        assert_eq!(read_edit("[1]"), Err(NarrowError::NotAnObject));
        assert_eq!(
            read_edit(&"x".repeat(MAX_EDIT_BYTES + 1)),
            Err(NarrowError::NotAnObject)
        );
        assert_eq!(read_edit("{\"limit\":1}").map(|m| m.len()), Ok(1));
    }
}
