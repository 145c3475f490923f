//! The body forwarded for a confirmed call, written member by member from the raw text received.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use super::ToolCall;

/// The body forwarded for a confirmed call: the original message with the final arguments, and
/// without `inputResponses` and `requestState`. Every other member is copied as the raw text it
/// was received as. `None` if the body no longer reads as the object it was classified as (it
/// cannot, short of a bug: then nothing is forwarded).
pub(crate) fn forward_body(call: &ToolCall, arguments: &Value) -> Option<Bytes> {
    type Members<'a> = BTreeMap<String, &'a RawValue>;
    let message: Members<'_> = serde_json::from_slice(&call.body).ok()?;
    let params: Members<'_> = serde_json::from_str(message.get("params")?.get()).ok()?;
    let mut out = Vec::with_capacity(call.body.len() + 64);
    let mut object = Object::open(&mut out);
    for (key, value) in &message {
        if key != "params" {
            object.member(key, value.get().as_bytes())?;
            continue;
        }
        object.key(key)?;
        let mut inner = Object::open(object.out);
        for (key, value) in &params {
            if !matches!(
                key.as_str(),
                "inputResponses" | "requestState" | "arguments"
            ) {
                inner.member(key, value.get().as_bytes())?;
            }
        }
        inner.key("arguments")?;
        serde_json::to_writer(&mut *inner.out, arguments).ok()?;
        inner.close();
    }
    object.close();
    Some(Bytes::from(out))
}

/// Writes one JSON object member by member.
pub(crate) struct Object<'a> {
    pub(crate) out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Object<'a> {
    pub(crate) fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    pub(crate) fn key(&mut self, key: &str) -> Option<()> {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        serde_json::to_writer(&mut *self.out, key).ok()?;
        self.out.push(b':');
        Some(())
    }

    pub(crate) fn member(&mut self, key: &str, raw: &[u8]) -> Option<()> {
        self.key(key)?;
        self.out.extend_from_slice(raw);
        Some(())
    }

    pub(crate) fn close(self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarded_body_keeps_every_other_member_and_drops_the_confirmation() {
        let body =
            br#"{"jsonrpc":"2.0","id":"r-2","method":"tools/call","x-top":{"k":[1,2.50,"\u00e9"]},
            "params":{"name":"notes_delete","_meta":{"progressToken":7},"arguments":{"title":"Old"},
            "requestState":"mcpc1.x","inputResponses":{"a":{"action":"accept"}},"extra":"\"q\""}}"#;
        let call = match super::super::classify(&Bytes::from_static(body), |t| {
            (t == "notes_delete").then_some(())
        }) {
            super::super::Parsed::Intercept(call, ()) => call,
            other => panic!("{other:?}"),
        };
        let forwarded = forward_body(
            &call,
            &serde_json::json!({"title":"Old","note_id":"note-7"}),
        )
        .unwrap();
        let text = std::str::from_utf8(&forwarded).unwrap();
        // Raw members travel byte for byte (`2.50` and the escape stay as sent).
        assert!(
            text.contains(r#""x-top":{"k":[1,2.50,"\u00e9"]}"#),
            "{text}"
        );
        let value: Value = serde_json::from_slice(&forwarded).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"jsonrpc":"2.0","id":"r-2","method":"tools/call","x-top":{"k":[1,2.5,"é"]},
                "params":{"name":"notes_delete","_meta":{"progressToken":7},
                    "arguments":{"title":"Old","note_id":"note-7"},"extra":"\"q\""}})
        );
    }
}
