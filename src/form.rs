//! The confirmation form: the flat schema the user fills in, and the strict reading of the answer.
//!
//! The form only ever asks for a choice among server-listed ids and a yes/no: never free text, never
//! a secret. The answer is checked against the schema and against the ids the signed state carries;
//! the client's own validation counts for nothing.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use crate::narrow::{NARROW_PREFIX, Narrowing, narrow_field};
use crate::policy::{Candidate, Channel, ChoiceStyle, ToolPolicy};
use crate::token::candidates::Shown;

pub(crate) use crate::kernel::plain_label;
use crate::kernel::plain_text;
pub(crate) use crate::policy::REMEMBER_FIELD;

/// The `requestedSchema` for a policy and the candidates shown; `standing` is the words of the
/// standing approval offered, if any.
pub(crate) fn schema<'a>(
    policy: &'a ToolPolicy,
    candidates: &'a [Candidate],
    standing: Option<String>,
    arguments: Option<&'a Value>,
) -> Schema<'a> {
    let titles = match (&policy.resolver, policy.style) {
        (Some(_), ChoiceStyle::Titled) => candidates
            .iter()
            .map(|c| {
                c.label()
                    .map(|l| plain_text(l, policy.max_label_chars))
                    .filter(|l| !l.is_empty())
                    .unwrap_or_else(|| plain_text(c.id(), policy.max_label_chars))
            })
            .collect(),
        _ => Vec::new(),
    };
    Schema {
        policy,
        candidates,
        titles,
        standing,
        arguments: arguments.and_then(Value::as_object),
    }
}

/// The form field offering to narrow `argument` (`value` is the call's own), filled with the
/// call's value so that leaving it as it is narrows nothing; `None` when the form cannot show
/// it (a list of anything but strings, a missing or mistyped value).
fn narrow_property(argument: &str, how: &Narrowing, value: Option<&Value>) -> Option<Value> {
    let title = format!("{argument}: {}", how.describe());
    Some(match (how, value) {
        (Narrowing::Subset, Some(Value::Array(items)))
            if !items.is_empty() && items.iter().all(Value::is_string) =>
        {
            // An enum lists each value once (strict validators refuse repeats); the call's own
            // list, repeats and all, stays the default.
            let mut choices: Vec<&Value> = Vec::with_capacity(items.len());
            for item in items {
                if !choices.contains(&item) {
                    choices.push(item);
                }
            }
            serde_json::json!({"type": "array", "title": title, "minItems": 1,
                "items": {"type": "string", "enum": choices}, "default": items})
        }
        (Narrowing::AtMost, Some(Value::Number(n))) if n.as_f64().is_some_and(|f| f >= 0.0) => {
            let kind = if n.is_f64() { "number" } else { "integer" };
            serde_json::json!({"type": kind, "title": title, "minimum": 0, "maximum": n,
                "default": n})
        }
        (Narrowing::TurnOn, None | Some(Value::Bool(_))) => {
            serde_json::json!({"type": "boolean", "title": title,
                "default": value.and_then(Value::as_bool).unwrap_or(false)})
        }
        (Narrowing::OneOf(order), Some(Value::String(now))) => {
            let at = order.iter().position(|v| v == now)?;
            serde_json::json!({"type": "string", "title": title, "enum": &order[..=at],
                "default": now})
        }
        _ => return None,
    })
}

/// A flat form: one choice among the candidates (pick-one policies) and a required yes/no.
///
/// It serializes straight into the reply; the challenge path builds no JSON tree.
pub(crate) struct Schema<'a> {
    policy: &'a ToolPolicy,
    candidates: &'a [Candidate],
    /// Plain-text titles, one per candidate, for [`ChoiceStyle::Titled`].
    titles: Vec<Cow<'a, str>>,
    /// The standing approval offered, in words.
    standing: Option<String>,
    /// The call's arguments, for the narrowing fields.
    arguments: Option<&'a serde_json::Map<String, Value>>,
}

impl Serialize for Schema<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("type", "object")?;
        m.serialize_entry("properties", &Properties(self))?;
        let confirm = self.policy.confirm_field.as_str();
        if self.policy.resolver.is_some() {
            m.serialize_entry("required", &[self.policy.choice_field.as_str(), confirm])?;
        } else {
            m.serialize_entry("required", &[confirm])?;
        }
        m.end()
    }
}

struct Properties<'s, 'a>(&'s Schema<'a>);

impl Serialize for Properties<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let policy = self.0.policy;
        let mut m = s.serialize_map(None)?;
        if policy.resolver.is_some() {
            m.serialize_entry(&policy.choice_field, &Choice(self.0))?;
        }
        m.serialize_entry(
            &policy.confirm_field,
            &Field {
                kind: "boolean",
                title: &policy.confirm_title,
                default: Some(false),
            },
        )?;
        if let Some(standing) = &self.0.standing {
            m.serialize_entry(
                REMEMBER_FIELD,
                &serde_json::json!({
                    "type": "string",
                    "title": "How long",
                    "oneOf": [
                        {"const": "once", "title": "Only this time"},
                        {"const": "standing", "title": standing},
                    ],
                    "default": "once",
                }),
            )?;
        }
        if let Some(arguments) = self.0.arguments {
            for (argument, how) in &policy.narrowing {
                if let Some(field) = narrow_property(argument, how, arguments.get(argument)) {
                    m.serialize_entry(&narrow_field(argument), &field)?;
                }
            }
        }
        m.end()
    }
}

#[derive(Serialize)]
struct Field<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    default: Option<bool>,
}

struct Choice<'s, 'a>(&'s Schema<'a>);

impl Serialize for Choice<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Schema {
            policy,
            candidates,
            titles,
            ..
        } = self.0;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("type", "string")?;
        m.serialize_entry("title", &policy.choice_title)?;
        match policy.style {
            ChoiceStyle::Titled => m.serialize_entry("oneOf", &Options(candidates, titles))?,
            ChoiceStyle::Plain => m.serialize_entry("enum", &Ids(candidates))?,
        }
        m.end()
    }
}

struct Options<'a>(&'a [Candidate], &'a [Cow<'a, str>]);

impl Serialize for Options<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct OneOf<'a> {
            #[serde(rename = "const")]
            id: &'a str,
            title: &'a str,
        }
        s.collect_seq(self.0.iter().zip(self.1).map(|(c, title)| OneOf {
            id: c.id(),
            title: title.as_ref(),
        }))
    }
}

struct Ids<'a>(&'a [Candidate]);

impl Serialize for Ids<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Candidate::id))
    }
}

/// `secs` in words: "10 minutes", "1 hour", "90 seconds".
pub(crate) fn duration_words(secs: u64) -> String {
    let (n, unit) = match secs {
        s if s >= 3600 && s % 3600 == 0 => (s / 3600, "hour"),
        s if s >= 60 && s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// The most arguments named in a call's summary, and the longest name and value shown.
const SUMMARY_ARGUMENTS: usize = 8;
const SUMMARY_NAME_CHARS: usize = 32;
const SUMMARY_VALUE_CHARS: usize = 60;

/// The form message of a tool confirmed by its annotations alone: `message`, then the call's
/// [`argument_lines`], so the user sees what the call will do, and no more than a screenful of
/// it.
pub(crate) fn describe_call(message: &str, arguments: Option<&Value>) -> String {
    let mut out = plain_label(message, 200);
    let lines = argument_lines(arguments);
    if lines.is_empty() {
        out.push_str("\nNo arguments.");
    }
    for line in lines {
        out.push('\n');
        out.push_str(&line);
    }
    out
}

/// A call's arguments in words: one line per argument (`name: value`, as compact JSON), each
/// cleaned and cut like a label, at most [`SUMMARY_ARGUMENTS`] of them and then how many more;
/// none for no arguments.
pub(crate) fn argument_lines(arguments: Option<&Value>) -> Vec<String> {
    let entries = match arguments {
        Some(Value::Object(map)) if !map.is_empty() => map,
        _ => return Vec::new(),
    };
    let mut lines: Vec<String> = entries
        .iter()
        .take(SUMMARY_ARGUMENTS)
        .map(|(name, value)| {
            format!(
                "{}: {}",
                plain_label(name, SUMMARY_NAME_CHARS),
                plain_label(&value.to_string(), SUMMARY_VALUE_CHARS)
            )
        })
        .collect();
    if entries.len() > SUMMARY_ARGUMENTS {
        lines.push(format!("(and {} more)", entries.len() - SUMMARY_ARGUMENTS));
    }
    lines
}

/// Fields of an answer that would name a tool: refused whole unless the form itself showed
/// them (a policy may call its choice field `name`).
const TOOL_FIELDS: [&str; 2] = ["tool", "name"];

/// What the client answered for our key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Our key is not among the responses: ask again.
    Missing,
    /// A well-formed answer that does not answer the form (content missing, a field left out,
    /// a choice that was not offered): ask again, as MRTR asks of servers, spending nothing.
    AskAgain(&'static str),
    /// Accepted with `confirm: true`; `chosen` is a signed candidate (pick-one policies);
    /// `standing`: the user also chose the standing approval the form offered.
    Accept {
        chosen: Option<String>,
        standing: bool,
        /// The narrowing fields the user answered, as an edit of the arguments (checked against
        /// the declaration and the call by the acceptance, not here).
        narrowed: Option<serde_json::Map<String, Value>>,
    },
    /// Accepted with `confirm: false`: a refusal.
    Unconfirmed,
    /// The user declined.
    Decline,
    /// The user dismissed the form.
    Cancel,
    /// Not a well-formed answer to the form that was shown.
    Invalid(&'static str),
}

/// Reads the client's answer for our key, strictly, as the policy's channel shapes it.
///
/// In a form the answer carries the content: a required `confirm` boolean and, for pick-one
/// policies, one of the `signed` candidate ids (anything else is asked again, never trusted). On
/// the browser channel the client only says whether the user went to the page (`accept`, no
/// content), declined or cancelled: the decision itself is the page's, read from the store.
pub(crate) fn read_answer(
    policy: &ToolPolicy,
    signed: &[Shown],
    responses: Option<&Value>,
) -> Answer {
    let Some(responses) = responses else {
        return Answer::Missing;
    };
    let Some(responses) = responses.as_object() else {
        return Answer::Invalid("inputResponses is not an object");
    };
    let Some(response) = responses.get(&policy.input_key) else {
        return Answer::Missing;
    };
    let Some(response) = response.as_object() else {
        return Answer::Invalid("the response is not an object");
    };
    match response.get("action").and_then(Value::as_str) {
        Some("decline") => return Answer::Decline,
        Some("cancel") => return Answer::Cancel,
        Some("accept") => {}
        _ => return Answer::Invalid("action is not accept, decline or cancel"),
    }
    match (policy.channel, response.get("content")) {
        (Channel::Browser { .. }, None | Some(Value::Null | Value::Object(_))) => Answer::Accept {
            chosen: None,
            standing: false,
            narrowed: None,
        },
        (_, Some(Value::Object(content))) => read_content(policy, signed, content),
        (Channel::Form, None | Some(Value::Null)) => Answer::AskAgain("accept without content"),
        (_, Some(_)) => Answer::Invalid("content is not an object"),
    }
}

/// The content of a form's `accept`.
fn read_content(
    policy: &ToolPolicy,
    signed: &[Shown],
    content: &serde_json::Map<String, Value>,
) -> Answer {
    // An answer edits at most the declared arguments, never the tool: a field that would name
    // one (and that the form did not show) makes the whole answer invalid, as on the page.
    let shown = |field: &str| {
        field == policy.confirm_field || (policy.resolver.is_some() && field == policy.choice_field)
    };
    if TOOL_FIELDS
        .iter()
        .any(|field| content.contains_key(*field) && !shown(field))
    {
        return Answer::Invalid("a field naming a tool");
    }
    let confirm = match content.get(&policy.confirm_field) {
        None => return Answer::AskAgain("the confirm field is missing"),
        Some(Value::Bool(confirm)) => *confirm,
        Some(_) => return Answer::Invalid("the confirm field is not a boolean"),
    };
    let chosen = if policy.resolver.is_some() {
        let choice = match content.get(&policy.choice_field) {
            None => return Answer::AskAgain("the choice field is missing"),
            Some(Value::String(choice)) => choice,
            Some(_) => return Answer::Invalid("the choice field is not a string"),
        };
        if !signed.iter().any(|shown| shown.id == *choice) {
            return Answer::AskAgain("the choice is not one of the signed candidates");
        }
        Some(choice.clone())
    } else {
        None
    };
    // Only a policy that offers a standing approval reads the choice; absent means "once".
    let standing = match (&policy.standing, content.get(REMEMBER_FIELD)) {
        (None, _) | (Some(_), None) => false,
        (Some(_), Some(Value::String(remember))) => match remember.as_str() {
            "once" => false,
            "standing" => true,
            _ => return Answer::AskAgain("the remember choice is not one offered"),
        },
        (Some(_), Some(_)) => return Answer::Invalid("the remember field is not a string"),
    };
    // The narrowing fields: each must be one the policy declares; what they say is checked
    // against the declaration and the call's arguments when the call is accepted.
    let mut narrowed = serde_json::Map::new();
    for (field, value) in content {
        let Some(argument) = field.strip_prefix(NARROW_PREFIX) else {
            continue;
        };
        if !policy.narrowing.iter().any(|(name, _)| name == argument) {
            return Answer::Invalid("a narrowing field the form did not show");
        }
        narrowed.insert(argument.to_owned(), value.clone());
    }
    if standing && !narrowed.is_empty() {
        return Answer::AskAgain("a narrowed call is approved only this time");
    }
    if confirm {
        Answer::Accept {
            chosen,
            standing,
            narrowed: (!narrowed.is_empty()).then_some(narrowed),
        }
    } else {
        Answer::Unconfirmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Lookup, PolicyError};
    use serde_json::json;

    fn pick() -> ToolPolicy {
        ToolPolicy::pick_one(|_: Lookup| async { Ok::<_, PolicyError>(vec![]) })
            .choice_field("note_id")
            .input_key("delete_choice")
    }

    fn signed() -> Vec<Shown> {
        ["note-3", "note-7", "note-14"]
            .into_iter()
            .map(|id| Shown::new(id, Some("v1")))
            .collect()
    }

    fn read(policy: &ToolPolicy, v: Value) -> Answer {
        read_answer(policy, &signed(), Some(&v))
    }

    /// An answer that names a tool is refused whole, as the approval page refuses it; a
    /// form that shows a field of that name reads it as its own.
    #[test]
    fn an_answer_naming_a_tool_is_refused_whole() {
        let policy = pick();
        for field in ["tool", "name"] {
            let mut content = json!({"note_id": "note-7", "confirm": true});
            content[field] = json!("notes_purge_all");
            assert_eq!(
                read(
                    &policy,
                    json!({"delete_choice": {"action": "accept", "content": content}})
                ),
                Answer::Invalid("a field naming a tool"),
                "{field}"
            );
        }
        let named = pick().choice_field("name");
        assert_eq!(
            read(
                &named,
                json!({"delete_choice": {"action": "accept",
                    "content": {"name": "note-7", "confirm": true}}})
            ),
            Answer::Accept {
                chosen: Some("note-7".into()),
                standing: false,
                narrowed: None
            }
        );
        // A confirm-only form never shows a choice: `name` is not its field.
        let plain = ToolPolicy::confirm_only();
        assert_eq!(
            read_answer(
                &plain,
                &[],
                Some(&json!({"confirmation": {"action": "accept",
                    "content": {"confirm": true, "name": "x"}}}))
            ),
            Answer::Invalid("a field naming a tool")
        );
    }

    /// A list argument with repeated values is offered with each value once (a strict JSON
    /// Schema validator refuses an enum with repeats); its default is the call's own list.
    #[test]
    fn a_subset_lists_each_value_once() {
        let policy = ToolPolicy::confirm_only().narrowable("ids", Narrowing::Subset);
        let call = json!({"ids": ["f001", "f001", "f002"]});
        let s = serde_json::to_value(schema(&policy, &[], None, Some(&call))).unwrap();
        let ids = &s["properties"]["narrow_ids"];
        assert_eq!(ids["items"]["enum"], json!(["f001", "f002"]));
        assert_eq!(ids["default"], json!(["f001", "f001", "f002"]));
    }

    #[test]
    fn narrowing_fields_are_shown_at_the_calls_values_and_read_back_only_if_declared() {
        let policy = ToolPolicy::confirm_only()
            .narrowable("ids", Narrowing::Subset)
            .narrowable("limit", Narrowing::AtMost)
            .narrowable("nums", Narrowing::Subset)
            .narrowable("mode", Narrowing::OneOf(vec!["a".into(), "b".into()]));
        let call = json!({"ids": ["x", "y"], "limit": 2.5, "nums": [1, 2], "mode": "z"});
        let s = serde_json::to_value(schema(&policy, &[], None, Some(&call))).unwrap();
        let p = &s["properties"];
        assert_eq!(p["narrow_ids"]["items"]["enum"], json!(["x", "y"]));
        assert_eq!(p["narrow_limit"]["type"], "number");
        // A list of numbers, or a mode outside the declared order: not shown.
        assert!(
            p.get("narrow_nums").is_none() && p.get("narrow_mode").is_none(),
            "{p}"
        );
        assert_eq!(s["required"], json!(["confirm"]));
        let read = |content: Value| {
            read_answer(
                &policy,
                &[],
                Some(&json!({"confirmation": {"action": "accept", "content": content}})),
            )
        };
        match read(json!({"confirm": true, "narrow_limit": 1})) {
            Answer::Accept {
                narrowed: Some(edit),
                ..
            } => assert_eq!(edit["limit"], 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read(json!({"confirm": true, "narrow_title": "x"})),
            Answer::Invalid(_)
        ));
        assert!(matches!(
            read(json!({"confirm": true})),
            Answer::Accept { narrowed: None, .. }
        ));
    }

    #[test]
    fn titled_schema_is_flat_and_requires_both_fields() {
        let c = vec![
            Candidate::labelled("note-3", "Groceries — milk, eggs"),
            Candidate::new("note-7"),
        ];
        let s = serde_json::to_value(schema(&pick(), &c, None, None)).unwrap();
        assert_eq!(
            s,
            json!({"type":"object","properties":{
                "note_id":{"type":"string","title":"Which one?","oneOf":[
                    {"const":"note-3","title":"Groceries — milk, eggs"},
                    {"const":"note-7","title":"note-7"}]},
                "confirm":{"type":"boolean","title":"Yes, go ahead","default":false}},
              "required":["note_id","confirm"]})
        );
        let plain = serde_json::to_value(schema(&pick().plain_enum(), &c, None, None)).unwrap();
        assert_eq!(
            plain["properties"]["note_id"]["enum"],
            json!(["note-3", "note-7"])
        );
        let only =
            serde_json::to_value(schema(&ToolPolicy::confirm_only(), &[], None, None)).unwrap();
        assert_eq!(only["required"], json!(["confirm"]));
        assert_eq!(only["properties"].as_object().unwrap().len(), 1);
    }

    #[test]
    fn a_call_is_described_by_bounded_clean_lines() {
        let arguments = json!({
            "path": "/srv/\u{202E}txt.exe",
            "recursive": true,
            "note": "x".repeat(500),
        });
        let text = describe_call("Run Wipe files?", Some(&arguments));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Run Wipe files?");
        assert!(lines.contains(&"path: \"/srv/txt.exe\""), "{text}");
        assert!(lines.contains(&"recursive: true"), "{text}");
        let note = lines.iter().find(|l| l.starts_with("note: ")).unwrap();
        assert!(note.chars().count() <= 6 + SUMMARY_VALUE_CHARS && note.ends_with('…'));
        assert_eq!(describe_call("Run it?", None), "Run it?\nNo arguments.");
        let many: serde_json::Map<String, Value> =
            (0..20).map(|i| (format!("a{i:02}"), json!(i))).collect();
        let text = describe_call("Run it?", Some(&Value::Object(many)));
        assert_eq!(text.lines().count(), 1 + SUMMARY_ARGUMENTS + 1);
        assert!(text.ends_with("(and 12 more)"), "{text}");
    }

    #[test]
    fn the_plain_ascii_shortcut_agrees_with_the_full_reduction() {
        let alphabet = ['a', ' ', '\t', '~', '\u{7f}', 'é', '\u{200B}', '\n', '!'];
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (x >> 60) as usize;
            let text: String = (0..len)
                .map(|i| alphabet[((x >> (i * 4)) as usize) % alphabet.len()])
                .collect();
            let max = ((x >> 8) % 8) as usize;
            assert_eq!(
                plain_label(&text, max),
                crate::kernel::reduce_label(&text, max),
                "{text:?} {max}"
            );
        }
    }

    #[test]
    fn labels_become_short_plain_text() {
        assert_eq!(plain_label("  Groceries\n\tlist  ", 80), "Groceries list");
        assert_eq!(plain_label("a\u{202E}b\u{200B}c\u{0007}", 80), "abc");
        let long = "x".repeat(200);
        let cut = plain_label(&long, 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(cut.ends_with('…'));
        assert_eq!(plain_label(&"y".repeat(20), 20), "y".repeat(20));
        assert_eq!(plain_label("\u{202E}\u{200B}", 20), "");
    }

    #[test]
    fn accept_needs_exact_content_a_signed_id_and_true() {
        let p = pick();
        assert_eq!(
            read(
                &p,
                json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":true}}})
            ),
            Answer::Accept {
                chosen: Some("note-7".into()),
                standing: false,
                narrowed: None
            }
        );
        assert_eq!(
            read(
                &p,
                json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":false}}})
            ),
            Answer::Unconfirmed
        );
        // Members the form did not ask for are ignored.
        assert_eq!(
            read(
                &p,
                json!({"delete_choice":{"action":"accept","extra":[],"content":{"note_id":"note-7","confirm":true,"extra":1}},"other":7})
            ),
            Answer::Accept {
                chosen: Some("note-7".into()),
                standing: false,
                narrowed: None
            }
        );
        // Well formed, but not an answer to the form: asked again.
        for again in [
            json!({"delete_choice":{"action":"accept"}}),
            json!({"delete_choice":{"action":"accept","content":null}}),
            json!({"delete_choice":{"action":"accept","content":{}}}),
            json!({"delete_choice":{"action":"accept","content":{"note_id":"note-99","confirm":true}}}),
            json!({"delete_choice":{"action":"accept","content":{"confirm":true}}}),
            json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7"}}}),
        ] {
            assert!(
                matches!(read(&p, again.clone()), Answer::AskAgain(_)),
                "{again}"
            );
        }
        // Malformed: an error.
        for bad in [
            json!({"delete_choice":{"action":"accept","content":{"note_id":"note-7","confirm":"true"}}}),
            json!({"delete_choice":{"action":"accept","content":{"note_id":7,"confirm":true}}}),
            json!({"delete_choice":{"action":"accept","content":{"note_id":["note-7"],"confirm":true}}}),
            json!({"delete_choice":{"action":"accept","content":"yes"}}),
            json!({"delete_choice":{"action":"ACCEPT","content":{"note_id":"note-7","confirm":true}}}),
            json!({"delete_choice":{"content":{"note_id":"note-7","confirm":true}}}),
            json!({"delete_choice":null}),
            json!({"delete_choice":"accept"}),
            json!(null),
            json!([]),
        ] {
            assert!(matches!(read(&p, bad.clone()), Answer::Invalid(_)), "{bad}");
        }
    }

    #[test]
    fn decline_cancel_and_missing() {
        let p = pick();
        assert_eq!(
            read(&p, json!({"delete_choice":{"action":"decline"}})),
            Answer::Decline
        );
        assert_eq!(
            read(&p, json!({"delete_choice":{"action":"cancel"}})),
            Answer::Cancel
        );
        assert_eq!(
            read(&p, json!({"other":{"action":"accept"}})),
            Answer::Missing
        );
        assert_eq!(read_answer(&p, &signed(), None), Answer::Missing);
    }

    #[test]
    fn confirm_only_takes_just_the_checkbox() {
        let p = ToolPolicy::confirm_only()
            .input_key("confirm")
            .confirm_field("ok");
        assert_eq!(
            read(
                &p,
                json!({"confirm":{"action":"accept","content":{"ok":true}}})
            ),
            Answer::Accept {
                chosen: None,
                standing: false,
                narrowed: None
            }
        );
        assert_eq!(
            read(
                &p,
                json!({"confirm":{"action":"accept","content":{"ok":true,"choice":"note-3"}}})
            ),
            Answer::Accept {
                chosen: None,
                standing: false,
                narrowed: None
            },
            "a member the form did not ask for is ignored"
        );
    }
}
