//! Narrowing on the approval page: the inputs for a tool's narrowable arguments, filled with
//! the call's own values, and the edit read back from a post, checked against the declaration
//! before anything is recorded (the retry checks it again).

use maud::{Markup, html};
use serde_json::{Map, Value};

use crate::config::Config;
use crate::narrow::{self, Narrowing};
use crate::pages::form_values;
use crate::store::approval::Approval;

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
    config: &Config,
    approval: &Approval,
) -> Option<(Declared, Map<String, Value>)> {
    if !approval.endorsements.is_empty() {
        return None;
    }
    declared(config, approval)
}

/// The tool's declaration as configured now and the arguments kept with `approval`, whoever
/// approved before.
fn declared(config: &Config, approval: &Approval) -> Option<(Declared, Map<String, Value>)> {
    let declared = &config.tools.get(&approval.tool)?.policy.narrowing;
    if declared.is_empty() {
        return None;
    }
    match serde_json::from_str(approval.shown_arguments.as_deref()?) {
        Ok(Value::Object(asked)) => Some((declared.clone(), asked)),
        _ => None,
    }
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
pub(super) fn render(declared: &[(String, Narrowing)], asked: &Map<String, Value>) -> Markup {
    html! {
        fieldset id="narrowing" {
            legend { "Narrow it before approving (optional)" }
            @for (name, how) in declared {
                @let input = field(name);
                p class="narrow" {
                    strong { (name) } " — " (how.describe()) ": "
                    @match (how, asked.get(name)) {
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
                            input type="number" name=(input) id=(input) value=(n.to_string())
                                min="0" max=(n.to_string());
                        }
                        (Narrowing::TurnOn, value) => {
                            input type="checkbox" name=(input) id=(input) value="true"
                                checked[value == Some(&Value::Bool(true))];
                        }
                        (Narrowing::OneOf(order), Some(Value::String(now))) => {
                            @if let Some(at) = order.iter().position(|v| v == now) {
                                select name=(input) id=(input) {
                                    @for value in &order[..=at] {
                                        option value=(value) selected[value == now] { (value) }
                                    }
                                }
                            } @else {
                                em { "cannot be narrowed" }
                            }
                        }
                        _ => { em { "cannot be narrowed" } }
                    }
                }
            }
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
    config: &Config,
    approval: &Approval,
    body: &[u8],
) -> Result<Option<String>, Refused> {
    if let Some(first) = approval.endorsements.first() {
        let theirs = match declared(config, approval) {
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
    let (declared, asked, why) = match offered(config, approval) {
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
        let value = match how {
            Narrowing::Subset => {
                if !matches!(asked.get(name), Some(Value::Array(_))) {
                    continue;
                }
                let items: Result<Vec<Value>, _> =
                    values.iter().map(|v| serde_json::from_str(v)).collect();
                Value::Array(items.map_err(|_| NOT_NARROWER)?)
            }
            Narrowing::AtMost => match values.first() {
                None => continue,
                Some(text) => serde_json::from_str(text.trim()).map_err(|_| NOT_NARROWER)?,
            },
            // Off (absent) or exactly "true": anything else is no answer this page asked for.
            Narrowing::TurnOn => match values.as_slice() {
                [] => Value::Bool(false),
                [on] if on == "true" => Value::Bool(true),
                _ => return Err(NOT_NARROWER),
            },
            Narrowing::OneOf(_) => match values.first() {
                None => continue,
                Some(text) => Value::String(text.clone()),
            },
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
