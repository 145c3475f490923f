//! Narrowing on the approval page: the inputs for a tool's narrowable arguments, filled with
//! the call's own values, and the edit read back from a post, checked against the declaration
//! before anything is recorded (the retry checks it again).

use maud::{Markup, html};
use serde_json::{Map, Value};

use crate::form::form_values;
use mcp_confirm::approval::Approval;
use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::narrow::{self, Narrowing};

/// A tool's narrowable arguments and how each may be narrowed.
type Declared = Vec<(String, Narrowing)>;

/// The form field of argument `name`'s edit.
fn field(name: &str) -> String {
    format!("narrow-{name}")
}

/// What may be narrowed on `approval`, and the call's arguments it narrows: the tool's
/// declaration as configured now, and the arguments kept with the approval. Nothing where the
/// tool declares nothing, the arguments were too large to keep, or a later approver follows the
/// first one's narrowing.
pub(super) fn offered(
    desk: &ApprovalDesk,
    approval: &Approval,
) -> Option<(Declared, Map<String, Value>)> {
    if !approval.endorsements.is_empty() {
        return None;
    }
    declared(desk, approval)
}

/// The tool's declaration as configured now and the arguments kept with `approval`, whoever
/// approved before.
fn declared(desk: &ApprovalDesk, approval: &Approval) -> Option<(Declared, Map<String, Value>)> {
    let declared = desk.narrowing(&approval.tool);
    if declared.is_empty() {
        return None;
    }
    match serde_json::from_str(approval.shown_arguments.as_deref()?) {
        Ok(Value::Object(asked)) => Some((declared.to_vec(), asked)),
        _ => None,
    }
}

/// Whether form field `name` may repeat in a post deciding `approval`: the checkboxes of an
/// argument the tool, as configured now, declares narrowable to a subset.
pub(super) fn is_list(desk: &ApprovalDesk, approval: &Approval, name: &str) -> bool {
    let Some(argument) = name.strip_prefix("narrow-") else {
        return false;
    };
    desk.narrowing(&approval.tool)
        .iter()
        .any(|(declared, how)| declared == argument && *how == Narrowing::Subset)
}

/// Whether a post carries any narrowing field.
fn posted(body: &[u8]) -> bool {
    form_urlencoded::parse(body).any(|(name, _)| name.starts_with("narrow-"))
}

/// What a later approver is told of the first one's narrowing.
pub(super) fn render_approved(narrowed: &str) -> Markup {
    html! {
        p id="narrowed" {
            "The first approver narrowed this request to: " code { (narrowed) }
            ". Approving approves that narrowing."
        }
    }
}

/// The inputs, each filled with the call's own value: submitting them unchanged narrows nothing.
/// An argument whose value cannot be narrowed as declared (another type, `null`, not sent) gets
/// no input: it is shown as it was sent, and approved as asked.
pub(super) fn render(declared: &[(String, Narrowing)], asked: &Map<String, Value>) -> Markup {
    html! {
        fieldset id="narrowing" {
            legend { "Narrow it before approving (optional)" }
            @for (name, how) in declared {
                @let input = field(name);
                @let value = asked.get(name);
                p class="narrow" {
                    strong { (name) } " — " (how.describe()) ": "
                    @match (how, value) {
                        _ if !how.can_narrow(value) => { (as_sent(&input, value)) }
                        (Narrowing::Subset, Some(Value::Array(items))) => {
                            @for (i, item) in items.iter().enumerate() {
                                label {
                                    input type="checkbox" name=(input) id={ (input) "-" (i) }
                                        value=(item.to_string()) checked;
                                    " " code { (item.to_string()) }
                                }
                                " "
                            }
                        }
                        (Narrowing::AtMost, Some(Value::Number(n))) => {
                            // A fractional limit steps by any amount: with the default step of 1
                            // the browser would not send the value as shown.
                            input type="number" name=(input) id=(input) value=(n.to_string())
                                min="0" max=(n.to_string()) step=[n.is_f64().then_some("any")];
                        }
                        (Narrowing::TurnOn, value) => {
                            input type="checkbox" name=(input) id=(input) value="true"
                                checked[value == Some(&Value::Bool(true))];
                        }
                        (Narrowing::OneOf(order), Some(Value::String(now))) => {
                            select name=(input) id=(input) {
                                @for value in order.iter().take_while(|v| *v != now) {
                                    option value=(value) { (value) }
                                }
                                option value=(now) selected { (now) }
                            }
                        }
                        _ => { (as_sent(&input, value)) }
                    }
                }
            }
        }
    }
}

/// An argument that cannot be narrowed: said so, with its value as the call sent it.
fn as_sent(input: &str, value: Option<&Value>) -> Markup {
    html! {
        em { "cannot be narrowed" } ", approved as sent: "
        @match value {
            Some(value) => { code id={ (input) "-sent" } { (value.to_string()) } }
            None => { em id={ (input) "-sent" } { "not sent" } }
        }
    }
}

/// A post's narrowing refused: the page's words, and the reason the audit log gets.
pub(super) struct Refused {
    pub(super) words: &'static str,
    pub(super) why: &'static str,
}

/// The narrowing a post to decide `approval` records, if any. A later approver approves the
/// first one's narrowing or nothing: a post that narrows otherwise is refused, never silently
/// replaced. The first approver's edit is read against the tool's declaration; where the tool
/// declares nothing (or the arguments were too large to keep), any narrowing or tool field is
/// refused.
pub(super) fn of_post(
    desk: &ApprovalDesk,
    approval: &Approval,
    body: &[u8],
) -> Result<Option<String>, Refused> {
    if let Some(first) = approval.endorsements.first() {
        let theirs = match declared(desk, approval) {
            Some((declared, asked)) if posted(body) => read(&declared, &asked, body).ok(),
            _ => Some(first.narrowed.clone()),
        };
        return if theirs.as_ref() == Some(&first.narrowed) {
            Ok(first.narrowed.clone())
        } else {
            Err(Refused {
                words: "Another approver already approved this request with another narrowing: \
                        approve theirs, as shown, or decline.",
                why: "a later approval narrowed otherwise than the first",
            })
        };
    }
    let (declared, asked, why) = match offered(desk, approval) {
        Some((declared, asked)) => (
            declared,
            asked,
            "approval with a narrowing the tool does not allow",
        ),
        None => (
            Vec::new(),
            Map::new(),
            "approval with an edit the tool does not allow",
        ),
    };
    read(&declared, &asked, body).map_err(|words| Refused { words, why })
}

/// Why a post's narrowing is refused, in the words the page shows.
pub(super) const NOT_NARROWER: &str = "That would not narrow the request: keep at least one item, lower a number, turn a flag on, \
     or pick a narrower value. Nothing was approved.";

/// Why a post that edits an argument shown as "cannot be narrowed" is refused.
const CANNOT_NARROW: &str =
    "An argument that cannot be narrowed is approved as sent. Nothing was approved.";

/// The edit a post makes, as the decision records it (a JSON object of the arguments changed):
/// `Ok(None)` when it changes nothing. `Err` with the page's words for an edit the declaration
/// does not allow, a field for an undeclared argument, or an attempt to change the tool.
fn read(
    declared: &[(String, Narrowing)],
    asked: &Map<String, Value>,
    body: &[u8],
) -> Result<Option<String>, &'static str> {
    // An approver changes arguments, never the tool, and only those declared.
    let names: Vec<String> = form_urlencoded::parse(body)
        .map(|(name, _)| name.into_owned())
        .collect();
    if names.iter().any(|n| n == "tool" || n == "name") {
        return Err("A request's tool cannot be changed. Nothing was approved.");
    }
    let undeclared = names.iter().any(|n| {
        n.strip_prefix("narrow-")
            .is_some_and(|arg| !declared.iter().any(|(d, _)| d == arg))
    });
    if undeclared {
        return Err("Only the arguments the tool declares may be narrowed. Nothing was approved.");
    }
    let mut edit = Map::new();
    for (name, how) in declared {
        let values = form_values(body, &field(name), narrow::MAX_EDIT_BYTES);
        // The page offered no input for it: it is approved as asked, and a post that edits it
        // anyway is refused.
        if !how.can_narrow(asked.get(name)) {
            if values.is_empty() {
                continue;
            }
            return Err(CANNOT_NARROW);
        }
        let value = match (how, values.as_slice()) {
            (Narrowing::Subset, items) => {
                let items: Result<Vec<Value>, _> =
                    items.iter().map(|v| serde_json::from_str(v)).collect();
                Value::Array(items.map_err(|_| NOT_NARROWER)?)
            }
            // Off (absent) or exactly "true": anything else is no answer this page asked for.
            (Narrowing::TurnOn, []) => Value::Bool(false),
            (Narrowing::TurnOn, [on]) if on == "true" => Value::Bool(true),
            (Narrowing::AtMost, [text]) => {
                serde_json::from_str(text.trim()).map_err(|_| NOT_NARROWER)?
            }
            (Narrowing::OneOf(_), [text]) => Value::String(text.clone()),
            (Narrowing::AtMost | Narrowing::OneOf(_), []) => continue,
            _ => return Err(NOT_NARROWER),
        };
        // Unchanged (a flag the call did not set, left off) is no edit.
        if asked.get(name).unwrap_or(&Value::Bool(false)) != &value {
            edit.insert(name.clone(), value);
        }
    }
    match narrow::narrow(declared, asked, &edit) {
        Ok(Some(_)) => Ok(Some(Value::Object(edit).to_string())),
        Ok(None) => Ok(None),
        Err(_) => Err(NOT_NARROWER),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(name: &str, how: Narrowing) -> Vec<(String, Narrowing)> {
        vec![(name.to_owned(), how)]
    }

    fn asked(name: &str, value: Option<Value>) -> Map<String, Value> {
        value
            .map(|v| Map::from_iter([(name.to_owned(), v)]))
            .unwrap_or_default()
    }

    #[test]
    fn a_value_that_cannot_be_narrowed_is_shown_as_sent_and_approved_as_asked() {
        let mode = || Narrowing::OneOf(vec!["archive".into(), "delete".into()]);
        let cases = [
            ("dry_run", Narrowing::TurnOn, Some(json!("true"))),
            ("dry_run", Narrowing::TurnOn, Some(json!("<b>on</b>"))),
            ("dry_run", Narrowing::TurnOn, Some(json!(null))),
            ("dry_run", Narrowing::TurnOn, Some(json!(1))),
            ("limit", Narrowing::AtMost, Some(json!("50"))),
            ("limit", Narrowing::AtMost, Some(json!(-5))),
            ("limit", Narrowing::AtMost, Some(json!(null))),
            ("limit", Narrowing::AtMost, None),
            ("ids", Narrowing::Subset, Some(json!("note-3"))),
            ("ids", Narrowing::Subset, Some(json!([]))),
            ("ids", Narrowing::Subset, None),
            ("mode", mode(), Some(json!(["delete"]))),
            ("mode", mode(), Some(json!("shred"))),
            ("mode", mode(), Some(json!(null))),
            ("mode", mode(), None),
        ];
        for (name, how, value) in cases {
            let (declared, asked) = (one(name, how), asked(name, value.clone()));
            let html = render(&declared, &asked).into_string();
            let sent = match &value {
                Some(v) => format!(
                    "<code id=\"narrow-{name}-sent\">{}</code>",
                    maud::html! { (v.to_string()) }.into_string()
                ),
                None => format!("<em id=\"narrow-{name}-sent\">not sent</em>"),
            };
            assert!(html.contains("cannot be narrowed"), "{value:?}: {html}");
            assert!(html.contains(&sent), "{value:?}: {sent} not in {html}");
            assert!(!html.contains("name=\"narrow-"), "{value:?}: {html}");
            assert!(!html.contains("<b>"), "{value:?}: {html}");
            // As shown (no field for it): approved as asked. An edit of it: refused.
            assert_eq!(read(&declared, &asked, b""), Ok(None), "{value:?}");
            let edit = format!("narrow-{name}=true");
            assert_eq!(
                read(&declared, &asked, edit.as_bytes()),
                Err(CANNOT_NARROW),
                "{value:?}"
            );
        }
    }

    #[test]
    fn what_can_be_narrowed_is_offered_at_the_calls_value_and_approved_unchanged() {
        let cases = [
            (
                "dry_run",
                Narrowing::TurnOn,
                None,
                "",
                "narrow-dry_run=true",
            ),
            (
                "dry_run",
                Narrowing::TurnOn,
                Some(json!(false)),
                "",
                "narrow-dry_run=true",
            ),
            (
                "limit",
                Narrowing::AtMost,
                Some(json!(50)),
                "narrow-limit=50",
                "narrow-limit=5",
            ),
            (
                "limit",
                Narrowing::AtMost,
                Some(json!(2.5)),
                "narrow-limit=2.5",
                "narrow-limit=2",
            ),
            (
                "ids",
                Narrowing::Subset,
                Some(json!(["a", "b"])),
                "narrow-ids=%22a%22&narrow-ids=%22b%22",
                "narrow-ids=%22b%22",
            ),
        ];
        for (name, how, value, shown, narrower) in cases {
            let (declared, asked) = (one(name, how), asked(name, value.clone()));
            let html = render(&declared, &asked).into_string();
            assert!(html.contains(&format!("name=\"narrow-{name}\"")), "{html}");
            assert!(!html.contains("cannot be narrowed"), "{html}");
            assert_eq!(
                read(&declared, &asked, shown.as_bytes()),
                Ok(None),
                "{value:?}"
            );
            assert!(
                matches!(read(&declared, &asked, narrower.as_bytes()), Ok(Some(_))),
                "{value:?}: {narrower}"
            );
        }
        // A fractional limit's input steps by any amount, so the browser sends it as shown.
        let html = render(
            &one("limit", Narrowing::AtMost),
            &asked("limit", Some(json!(2.5))),
        );
        assert!(html.into_string().contains("step=\"any\""));
        let html = render(
            &one("limit", Narrowing::AtMost),
            &asked("limit", Some(json!(50))),
        );
        assert!(!html.into_string().contains("step="));
    }
}
