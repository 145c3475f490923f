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

use super::forward::Object;
use crate::protocol::META_CONFIRMATION;

type Members<'a> = BTreeMap<String, &'a RawValue>;

/// The answer with each confirmed tool marked; `None` when nothing changed (or the body is not a
/// `tools/list` result), so the original bytes go out.
///
/// `mark` gives the `_meta` value for a tool name, or `None` for a tool the layer does not confirm.
pub(crate) fn annotate(body: &[u8], mark: &impl Fn(&str) -> Option<Value>) -> Option<Bytes> {
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

/// One tool with the mark in its `_meta`, or `None` to keep it as it was.
fn mark_tool(tool: &RawValue, mark: &impl Fn(&str) -> Option<Value>) -> Option<Vec<u8>> {
    let members: Members<'_> = serde_json::from_str(tool.get()).ok()?;
    let name: String = serde_json::from_str(members.get("name")?.get()).ok()?;
    let value = mark(&name)?;
    let mut meta: Map<String, Value> = match members.get("_meta") {
        None => Map::new(),
        Some(raw) => serde_json::from_str(raw.get()).ok()?,
    };
    meta.insert(META_CONFIRMATION.to_owned(), value);
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
/// result is rewritten as one `data:` line; every other line and event is kept as it was.
pub(crate) fn annotate_sse(body: &[u8], mark: &impl Fn(&str) -> Option<Value>) -> Option<Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    let mut out = String::with_capacity(text.len() + 256);
    let mut changed = false;
    // Events end at a blank line; keep the exact separators between them.
    let mut rest = text;
    while !rest.is_empty() {
        let (event, separator, tail) = match rest.find("\n\n") {
            Some(at) => (&rest[..at], "\n\n", &rest[at + 2..]),
            None => (rest, "", ""),
        };
        match annotate_event(event, mark) {
            Some(new) => {
                out.push_str(&new);
                changed = true;
            }
            None => out.push_str(event),
        }
        out.push_str(separator);
        rest = tail;
    }
    changed.then(|| Bytes::from(out))
}

fn annotate_event(event: &str, mark: &impl Fn(&str) -> Option<Value>) -> Option<String> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    let new = annotate(data.join("\n").as_bytes(), mark)?;
    let new = std::str::from_utf8(&new).ok()?;
    let mut out = String::with_capacity(event.len() + 256);
    let mut written = false;
    for line in event.lines() {
        if line.starts_with("data:") {
            if !written {
                out.push_str("data: ");
                out.push_str(new);
                out.push('\n');
                written = true;
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.pop();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mark(name: &str) -> Option<Value> {
        (name == "notes_delete").then(|| json!({"kind":"pick_one"}))
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
}
