//! Marking the confirmed tools in a `tools/list` answer, so a host that asks its own question
//! before a `destructiveHint` tool can see that the server asks one already.
//!
//! The answer is rewritten member by member, like a forwarded call: only the `_meta` of each
//! confirmed tool changes; every other member travels as the raw text the server wrote. Anything
//! that does not read as a JSON-RPC result with a `tools` array is left exactly as it was: the
//! mark is a courtesy, never a reason to fail an answer.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::message::Object;
use crate::protocol::{META_CONFIRMATION, META_DECLARED};
use crate::tools;

type Members<'a> = BTreeMap<String, &'a RawValue>;

/// What a `tools/list` answer says of one tool, as far as the layer's rules go.
#[derive(Debug)]
pub(crate) struct Listed<'a> {
    /// The tool's name.
    pub(crate) name: &'a str,
    /// Whether its annotations make it destructive (the spec's defaults; unreadable ones do).
    pub(crate) destructive: bool,
    /// The kind `#[confirm_router]` declared for it (`_meta[META_DECLARED].kind`), if any.
    pub(crate) declared: Option<&'a str>,
}

/// The answer with each confirmed tool marked; `None` when nothing changed (or the body is not a
/// `tools/list` result), so the original bytes go out.
///
/// `mark` gives the `_meta` value for a listed tool, or `None` for a tool the layer does not
/// confirm; it sees every tool of the answer.
pub(crate) fn annotate(body: &[u8], mark: &impl Fn(&Listed<'_>) -> Option<Value>) -> Option<Bytes> {
    let message: Members<'_> = serde_json::from_slice(body).ok()?;
    let result: Members<'_> = serde_json::from_str(message.get("result")?.get()).ok()?;
    let tools: Vec<&RawValue> = serde_json::from_str(result.get("tools")?.get()).ok()?;
    let mut marked = false;
    let mut rewritten = Vec::with_capacity(tools.len());
    for tool in &tools {
        let new = mark_tool(tool, mark);
        marked |= new.is_some();
        rewritten.push(new);
    }
    if !marked {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + 64 * tools.len());
    let mut top = Object::open(&mut out);
    for (key, value) in &message {
        if key != "result" {
            top.member(key, value.get().as_bytes())?;
            continue;
        }
        top.key(key)?;
        let mut inner = Object::open(top.out);
        for (key, value) in &result {
            if key != "tools" {
                inner.member(key, value.get().as_bytes())?;
                continue;
            }
            inner.key(key)?;
            inner.out.push(b'[');
            for (i, (tool, new)) in tools.iter().zip(&rewritten).enumerate() {
                if i > 0 {
                    inner.out.push(b',');
                }
                match new {
                    Some(new) => inner.out.extend_from_slice(new),
                    None => inner.out.extend_from_slice(tool.get().as_bytes()),
                }
            }
            inner.out.push(b']');
        }
        inner.close();
    }
    top.close();
    Some(Bytes::from(out))
}

/// One tool with the layer's mark in its `_meta` (and, on a tool the layer does not confirm, a
/// mark the server wrote itself taken out: only the layer may say it asks; the declaration mark
/// of `#[confirm_router]` is the layer's business and always goes), or `None` to keep the tool as
/// it was.
fn mark_tool(tool: &RawValue, mark: &impl Fn(&Listed<'_>) -> Option<Value>) -> Option<Vec<u8>> {
    let members: Members<'_> = serde_json::from_str(tool.get()).ok()?;
    let name: String = serde_json::from_str(members.get("name")?.get()).ok()?;
    // Unreadable annotations read as something that is not an object: destructive.
    let annotations: Option<Value> = members
        .get("annotations")
        .map(|raw| serde_json::from_str(raw.get()).unwrap_or(Value::Bool(false)));
    let mut meta: Option<Map<String, Value>> = match members.get("_meta") {
        None => None,
        // A `_meta` that is not an object: the tool is kept as it is (and seen without a mark).
        Some(raw) => serde_json::from_str(raw.get()).ok(),
    };
    let declared = meta
        .as_ref()
        .and_then(|m| m.get(META_DECLARED)?.get("kind")?.as_str());
    let listed = Listed {
        name: &name,
        destructive: tools::is_destructive(annotations.as_ref()),
        declared,
    };
    let value = mark(&listed);
    let mut meta = match meta.take() {
        None if value.is_none() => return None,
        None if members.contains_key("_meta") => return None,
        None => Map::new(),
        Some(meta) => meta,
    };
    let declared = meta.remove(META_DECLARED).is_some();
    match value {
        Some(value) => {
            meta.insert(META_CONFIRMATION.to_owned(), value);
        }
        None => {
            if meta.remove(META_CONFIRMATION).is_none() && !declared {
                return None;
            }
        }
    }
    let mut out = Vec::with_capacity(tool.get().len() + 64);
    let mut object = Object::open(&mut out);
    for (key, value) in &members {
        if key != "_meta" {
            object.member(key, value.get().as_bytes())?;
        }
    }
    object.key("_meta")?;
    serde_json::to_writer(&mut *object.out, &meta).ok()?;
    object.close();
    Some(out)
}

/// The same for a `text/event-stream` answer: each event whose data is a marked `tools/list`
/// result is rewritten as one `data:` line; every other line, terminator and event is kept as it
/// was. Lines may end in LF or CRLF (an event ends at a blank line); a stream that ends inside an
/// event keeps that event as it was.
pub(crate) fn annotate_sse(
    body: &[u8],
    mark: &impl Fn(&Listed<'_>) -> Option<Value>,
) -> Option<Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    let mut out = String::with_capacity(text.len() + 256);
    let mut changed = false;
    let mut rest = text;
    while !rest.is_empty() {
        let end = event_end(rest.as_bytes(), 0).unwrap_or(rest.len());
        let (event, tail) = rest.split_at(end);
        match annotate_event(event, mark) {
            Some(new) => {
                out.push_str(&new);
                changed = true;
            }
            None => out.push_str(event),
        }
        rest = tail;
    }
    changed.then(|| Bytes::from(out))
}

/// Where the first event of `bytes` ends (just past its blank line), searching from `from`: the
/// end of the first empty line at or after `from`. Lines end in LF, CRLF or a lone CR, as the
/// SSE spec allows, mixed or not. A CR that is the last byte may be the first half of a CRLF
/// still on its way, so it ends nothing yet.
pub(crate) fn event_end(bytes: &[u8], from: usize) -> Option<usize> {
    // Where the line terminator at `at` ends, if `at` starts one that is complete.
    let terminator = |at: usize| match bytes.get(at..)? {
        [b'\n', ..] => Some(at + 1),
        [b'\r', b'\n', ..] => Some(at + 2),
        [b'\r', _, ..] => Some(at + 1),
        _ => None,
    };
    let mut i = from;
    while let Some(at) = bytes
        .get(i..)?
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
    {
        let end = terminator(i + at)?;
        // A line ended at `end`; an empty line right after it ends the event.
        if let Some(blank) = terminator(end) {
            return Some(blank);
        }
        i = end;
    }
    None
}

/// Where the last complete event of `bytes` ends, looking only at what follows `from` (and the
/// two bytes before it, where a blank line split across two reads may begin).
pub(crate) fn last_event_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut last = None;
    let mut at = from.saturating_sub(2);
    while let Some(end) = event_end(bytes, at) {
        last = Some(end);
        at = end;
    }
    last
}

/// One event (its lines and the blank line ending it, if any) with its data marked.
fn annotate_event(event: &str, mark: &impl Fn(&Listed<'_>) -> Option<Value>) -> Option<String> {
    let lines: Vec<(&str, &str)> = lines_with_ends(event).collect();
    // Only a complete event is rewritten: one that ends with its blank line.
    if !matches!(lines.last(), Some(("", end)) if !end.is_empty()) {
        return None;
    }
    let data: Vec<&str> = lines
        .iter()
        .filter_map(|(line, _)| line.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    let new = annotate(data.join("\n").as_bytes(), mark)?;
    let new = std::str::from_utf8(&new).ok()?;
    let mut out = String::with_capacity(event.len() + 256);
    let mut written = false;
    for (line, end) in lines {
        if line.starts_with("data:") {
            if written {
                continue;
            }
            out.push_str("data: ");
            out.push_str(new);
            written = true;
        } else {
            out.push_str(line);
        }
        out.push_str(end);
    }
    Some(out)
}

/// The lines of `text`, each with its terminator (`"\n"`, `"\r\n"`, `"\r"`, or `""` for a last
/// line without one).
fn lines_with_ends(text: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let line = match rest.find(['\n', '\r']) {
            None => (rest, ""),
            Some(at) => {
                let len = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
                (&rest[..at], &rest[at..at + len])
            }
        };
        rest = &rest[line.0.len() + line.1.len()..];
        Some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mark(listed: &Listed<'_>) -> Option<Value> {
        (listed.name == "notes_delete").then(|| json!({"kind":"pick_one"}))
    }

    #[test]
    fn only_confirmed_tools_are_marked_and_the_rest_is_byte_for_byte() {
        let body = br#"{"jsonrpc":"2.0","id":"l","result":{"tools":[
            {"name":"notes_list","inputSchema":{"type":"object","x":1.50}},
            {"name":"notes_delete","_meta":{"com.example/k":[1,2]},"inputSchema":{"type":"object"}}
        ],"nextCursor":"c-1"}}"#;
        let out = annotate(body, &mark).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.contains(r#"{"name":"notes_list","inputSchema":{"type":"object","x":1.50}}"#),
            "{text}"
        );
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["result"]["nextCursor"], "c-1");
        assert_eq!(
            value["result"]["tools"][1]["_meta"],
            json!({"com.example/k":[1,2], META_CONFIRMATION: {"kind":"pick_one"}})
        );
        assert!(value["result"]["tools"][0].get("_meta").is_none());
    }

    #[test]
    fn anything_else_is_left_alone() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"notes_list"}]}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":"nope"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"notes_delete","_meta":7}]}}"#,
            b"not json",
        ] {
            assert_eq!(
                annotate(body, &mark),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn sse_answers_are_marked_event_by_event() {
        let body = "id: 0\nretry: 1000\ndata:\n\nevent: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[{\"name\":\"notes_delete\"}]}}\n\n";
        let out = annotate_sse(body.as_bytes(), &mark).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.starts_with("id: 0\nretry: 1000\ndata:\n\nevent: message\nid: 1\ndata: {"),
            "{text}"
        );
        assert!(text.ends_with("}}\n\n"), "{text}");
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data: {"))
            .map(|rest| format!("{{{rest}"))
            .unwrap();
        let value: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(
            value["result"]["tools"][0]["_meta"][META_CONFIRMATION],
            json!({"kind":"pick_one"})
        );
        assert_eq!(annotate_sse(b"data: {}\n\n", &mark), None);
    }

    #[test]
    fn events_end_at_a_blank_line_whatever_the_line_ends() {
        for (text, end) in [
            ("data: x\n\nmore", Some(9)),
            ("data: x\r\n\r\nmore", Some(11)),
            ("data: x\r\rmore", Some(9)),
            ("data: x\r\n\rmore", Some(10)),
            ("data: x\r\r\nmore", Some(10)),
            ("data: x\n\r\nmore", Some(10)),
            // A CR at the end may be half of a CRLF: nothing ends yet.
            ("data: x\r\r", None),
            ("data: x\r", None),
            ("data: x\n", None),
            ("data: x", None),
        ] {
            assert_eq!(event_end(text.as_bytes(), 0), end, "{text:?}");
        }
        let lines: Vec<_> = lines_with_ends("a\rb\r\nc\nd").collect();
        assert_eq!(lines, [("a", "\r"), ("b", "\r\n"), ("c", "\n"), ("d", "")]);
    }

    #[test]
    fn cr_framed_events_are_marked() {
        let body = "event: message\rdata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[{\"name\":\"notes_delete\"}]}}\r\r";
        let out = annotate_sse(body.as_bytes(), &mark).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.starts_with("event: message\rdata: {") && text.ends_with("}}\r\r"),
            "{text}"
        );
        assert!(text.contains(META_CONFIRMATION), "{text}");
    }
}
