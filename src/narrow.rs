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

    /// Whether the call's own value of an argument (`None`: not sent) can be narrowed as
    /// declared: a list with an element, a number not below zero, a boolean (or no value, for
    /// a flag the call did not set), a string of the declared order. Anything else (a `"true"`
    /// or a `"50"` sent as a string, `null`, a list for a `OneOf`) cannot: every channel shows
    /// it as it was sent and approves it as asked, and [`narrow`] refuses any edit of it.
    #[must_use]
    pub fn can_narrow(&self, value: Option<&Value>) -> bool {
        match (self, value) {
            (Self::Subset, Some(Value::Array(items))) => !items.is_empty(),
            (Self::AtMost, Some(Value::Number(n))) => {
                n.as_u64().is_some() || n.as_f64().is_some_and(|f| f >= 0.0)
            }
            (Self::TurnOn, None | Some(Value::Bool(_))) => true,
            (Self::OneOf(order), Some(Value::String(now))) => order.contains(now),
            _ => false,
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

/// What every narrowing field of a client's form begins with.
pub(crate) const NARROW_PREFIX: &str = "narrow_";

/// The client's form field of narrowable argument `argument`.
pub(crate) fn narrow_field(argument: &str) -> String {
    format!("{NARROW_PREFIX}{argument}")
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
    // The one place that says what can be narrowed: the page and the form show an input only
    // where this holds, and approve the rest as asked.
    if !how.can_narrow(before) {
        return Err(NarrowError::NotNarrowable(name.to_owned()));
    }
    let narrower = match (how, before) {
        (Narrowing::Subset, Some(Value::Array(before))) => subset(before, after),
        (Narrowing::AtMost, Some(Value::Number(before))) => at_most(before, after),
        (Narrowing::TurnOn, _) => *after == Value::Bool(true),
        (Narrowing::OneOf(order), Some(Value::String(before))) => {
            let at = |v: &str| order.iter().position(|o| o == v);
            match (at(before), after) {
                (Some(was), Value::String(after)) => at(after).is_some_and(|is| is <= was),
                _ => false,
            }
        }
        _ => false,
    };
    if narrower {
        Ok(())
    } else {
        Err(NarrowError::Wider(name.to_owned()))
    }
}

/// Whether `after` keeps some of `before`'s elements, at least one, each at most as often as
/// the call had it.
fn subset(before: &[Value], after: &Value) -> bool {
    let Value::Array(after) = after else {
        return false;
    };
    if after.is_empty() {
        return false;
    }
    let mut left: Vec<&Value> = before.iter().collect();
    for element in after {
        let Some(at) = left.iter().position(|v| *v == element) else {
            return false;
        };
        left.swap_remove(at);
    }
    true
}

/// Whether `after` is a number from zero to `before` (which is not below zero).
fn at_most(before: &serde_json::Number, after: &Value) -> bool {
    let Value::Number(after) = after else {
        return false;
    };
    // Whole numbers stay whole, and are compared exactly (as f64, 2^62 + 511 would pass for
    // 2^62); a fraction is never "less" of a whole limit.
    let whole = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (whole(before), whole(after)) {
        (Some(b), Some(a)) => (0..=b).contains(&a),
        (Some(_), None) => false,
        (None, after_whole) => {
            // A fractional limit: compared as f64, with a whole edit only where f64 holds it
            // exactly.
            let (Some(b), Some(a)) = (before.as_f64(), after.as_f64()) else {
                return false;
            };
            after_whole.is_none_or(|w| a as i128 == w) && (0.0..=b).contains(&a)
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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn element() -> impl Strategy<Value = Value> {
            prop_oneof![
                (0i64..2).prop_map(Value::from),
                prop::sample::select(vec!["a", "b"]).prop_map(Value::from),
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            prop_oneof![
                prop::collection::vec(element(), 0..5).prop_map(Value::Array),
                (-1i64..5).prop_map(Value::from),
                prop::sample::select(vec![-0.5, 0.0, 1.5, 2.0, 4.5]).prop_map(Value::from),
                Just(Value::from(u64::MAX)),
                any::<bool>().prop_map(Value::Bool),
                prop::sample::select(vec!["dry_run", "archive", "delete", "shred"])
                    .prop_map(Value::from),
                Just(Value::Null),
            ]
        }

        /// A value of the kind `key` usually holds, or now and then of any kind.
        fn typed(key: &'static str) -> BoxedStrategy<Value> {
            let usual: BoxedStrategy<Value> = match key {
                "ids" => prop::collection::vec(element(), 0..4)
                    .prop_map(Value::Array)
                    .boxed(),
                "limit" => prop_oneof![
                    3 => (-1i64..5).prop_map(Value::from),
                    1 => prop::sample::select(vec![-0.5, 0.0, 1.5, 2.0, 4.5]).prop_map(Value::from),
                ]
                .boxed(),
                "dry_run" => any::<bool>().prop_map(Value::Bool).boxed(),
                "mode" => prop::sample::select(vec!["dry_run", "archive", "delete", "shred"])
                    .prop_map(Value::from)
                    .boxed(),
                _ => Just(Value::from("x")).boxed(),
            };
            prop_oneof![4 => usual, 1 => value()].boxed()
        }

        /// An object of the five keys, each present with probability `p`.
        fn object_with(p: f64) -> impl Strategy<Value = Map<String, Value>> {
            ["ids", "limit", "dry_run", "mode", "title"]
                .into_iter()
                .map(move |key| prop::option::weighted(p, typed(key)).prop_map(move |v| (key, v)))
                .collect::<Vec<_>>()
                .prop_map(|pairs| {
                    pairs
                        .into_iter()
                        .filter_map(|(key, v)| v.map(|v| (key.to_owned(), v)))
                        .collect()
                })
        }

        /// Whether `after` is narrower than `before` as `how` says, written apart from the
        /// code it checks.
        fn narrower(how: &Narrowing, before: Option<&Value>, after: &Value) -> bool {
            match (how, before, after) {
                (Narrowing::Subset, Some(Value::Array(b)), Value::Array(a)) => {
                    !a.is_empty()
                        && a.iter().all(|x| {
                            a.iter().filter(|y| *y == x).count()
                                <= b.iter().filter(|y| *y == x).count()
                        })
                }
                (Narrowing::AtMost, Some(Value::Number(b)), Value::Number(a)) => {
                    match (b.as_i64(), a.as_i64(), b.as_u64(), a.as_u64()) {
                        (Some(b), Some(a), _, _) => 0 <= a && a <= b,
                        (None, Some(a), Some(_), _) => a >= 0,
                        (None, None, Some(b), Some(a)) => a <= b,
                        _ => a
                            .as_f64()
                            .zip(b.as_f64())
                            .is_some_and(|(a, b)| 0.0 <= a && a <= b),
                    }
                }
                (Narrowing::TurnOn, _, Value::Bool(true)) => true,
                (Narrowing::OneOf(order), Some(Value::String(b)), Value::String(a)) => {
                    let at = |v: &String| order.iter().position(|o| o == v);
                    matches!((at(a), at(b)), (Some(a), Some(b)) if a <= b)
                }
                _ => false,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2000),
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Whatever the call and the edit, a narrowing that applies changes declared
            /// arguments only, each to a narrower value, and nothing else.
            #[test]
            fn an_applied_edit_only_ever_narrows(
                original in object_with(0.7),
                // Few keys per edit, so that one bad key does not hide the others.
                edit in object_with(0.3),
            ) {
                let declared = declared();
                if let Ok(Some(out)) = narrow(&declared, &original, &edit) {
                    for (key, value) in &out {
                        if original.get(key) == Some(value) {
                            continue;
                        }
                        let how = declared.iter().find(|(d, _)| d == key).map(|(_, h)| h);
                        prop_assert!(how.is_some(), "undeclared {key} changed");
                        prop_assert_eq!(edit.get(key), Some(value));
                        let how = how.unwrap_or(&Narrowing::TurnOn);
                        prop_assert!(
                            narrower(how, original.get(key), value),
                            "{key}: {:?} -> {value}", original.get(key)
                        );
                        // Only a value the page and the form offer to narrow is ever changed.
                        prop_assert!(
                            how.can_narrow(original.get(key)),
                            "{key}: {:?} cannot be narrowed", original.get(key)
                        );
                    }
                    for key in original.keys() {
                        prop_assert!(out.contains_key(key), "{key} dropped");
                    }
                }
            }
        }
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
    fn a_value_of_another_kind_cannot_be_narrowed_and_any_edit_of_it_is_refused() {
        // What models send: booleans and numbers as strings, a list for an enum, null, nothing.
        let cases = [
            (
                "dry_run",
                vec![
                    json!("true"),
                    json!("false"),
                    json!(1),
                    json!(null),
                    json!([true]),
                ],
            ),
            (
                "limit",
                vec![
                    json!("50"),
                    json!(null),
                    json!(-5),
                    json!(-0.5),
                    json!([50]),
                    json!(true),
                ],
            ),
            (
                "ids",
                vec![
                    json!("a"),
                    json!([]),
                    json!(null),
                    json!({"a": 1}),
                    json!(3),
                ],
            ),
            (
                "mode",
                vec![
                    json!(["delete"]),
                    json!(null),
                    json!("other"),
                    json!(2),
                    json!(true),
                ],
            ),
        ];
        for (name, values) in cases {
            let how = &declared().into_iter().find(|(n, _)| n == name).unwrap().1;
            // Not sent: a flag may still be turned on; anything else cannot be narrowed.
            assert_eq!(how.can_narrow(None), name == "dry_run", "{name} not sent");
            for value in values {
                assert!(!how.can_narrow(Some(&value)), "{name}: {value}");
                let mut asked = call();
                asked.insert(name.into(), value.clone());
                // As asked: no edit. Anything else, even what would narrow the right kind:
                // refused as not narrowable.
                assert_eq!(
                    narrow(&declared(), &asked, &edit(json!({ name: value }))),
                    Ok(None)
                );
                for other in [
                    json!(true),
                    json!(0),
                    json!(["a"]),
                    json!("dry_run"),
                    json!(false),
                ] {
                    if other != value {
                        assert_eq!(
                            narrow(&declared(), &asked, &edit(json!({ name: other }))),
                            Err(NarrowError::NotNarrowable(name.into())),
                            "{name}: {value} -> {other}"
                        );
                    }
                }
            }
        }
        // The right kinds can.
        for (name, value) in [
            ("dry_run", json!(false)),
            ("dry_run", json!(true)),
            ("limit", json!(0)),
            ("limit", json!(2.5)),
            ("limit", json!(u64::MAX)),
            ("ids", json!([1])),
            ("mode", json!("dry_run")),
        ] {
            let how = &declared().into_iter().find(|(n, _)| n == name).unwrap().1;
            assert!(how.can_narrow(Some(&value)), "{name}: {value}");
        }
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
