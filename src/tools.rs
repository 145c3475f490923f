//! What the layer learns from the server's own tool definitions: which tools are destructive (so
//! `confirm_destructive` can confirm them), and which argument travels in which `Mcp-Param-*`
//! header (the tool's `x-mcp-header` schema annotations).
//!
//! [`is_destructive`] is public: one rule for every component that judges tool lists.
//!
//! The list is read from the JSON a `tools/list` answers with, so it comes from rmcp's
//! `ToolRouter::list_all()` (serialized) as easily as from a server in another framework.

use std::collections::HashMap;

use serde_json::Value;

use crate::protocol::META_DECLARED;

/// One tool of the server's list, as far as the layer cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolInfo {
    /// Whether the tool's annotations say destructive: `readOnlyHint: true` never is; otherwise an
    /// unset `destructiveHint` counts as destructive, the spec's default.
    pub(crate) destructive: bool,
    /// Top-level argument name → the header name its `x-mcp-header` annotation gives.
    pub(crate) param_headers: HashMap<String, String>,
    /// What the tool is called for people: its `title`, else its annotations' `title`.
    pub(crate) title: Option<String>,
    /// The kind `#[confirm_router]` marked it with (`_meta[META_DECLARED].kind`), if any.
    pub(crate) declared: Option<String>,
    /// The top-level arguments its input schema names (`properties`), sorted; `None` when the
    /// schema names none (a free-form tool).
    pub(crate) arguments: Option<Vec<String>>,
    /// Whether it declares an `outputSchema`: its successful results must then carry
    /// structured content, which the layer's own answers cannot.
    pub(crate) structured: bool,
}

/// Why a tool list could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ToolListError {
    /// Neither an array of tools nor an object with a `tools` array.
    #[error("a tool list is an array of tools or an object with a \"tools\" array")]
    Shape,
    /// A tool without a string `name`.
    #[error("tool #{0} has no string \"name\"")]
    Name(usize),
    /// The same name twice.
    #[error("tool {0:?} is listed twice")]
    Duplicate(String),
    /// A tool whose annotations are not an object, or whose hints are not booleans.
    #[error("tool {0:?} has malformed annotations")]
    Annotations(String),
    /// A tool whose `x-mcp-header` annotation is not a string.
    #[error("tool {0:?} has an x-mcp-header that is not a string")]
    Header(String),
    /// One page of a paginated list (`nextCursor` set): the rest is unknown, so the layer would
    /// miss tools on later pages.
    #[error("the tool list is one page of several (nextCursor is set); give the whole list")]
    Paginated,
}

/// Reads a tool list: `[tool, …]` or `{"tools": [tool, …]}`.
pub(crate) fn read(list: &Value) -> Result<HashMap<String, ToolInfo>, ToolListError> {
    let tools = match list {
        Value::Array(tools) => tools,
        Value::Object(result) => {
            if result.get("nextCursor").is_some_and(|c| !c.is_null()) {
                return Err(ToolListError::Paginated);
            }
            match result.get("tools") {
                Some(Value::Array(tools)) => tools,
                _ => return Err(ToolListError::Shape),
            }
        }
        _ => return Err(ToolListError::Shape),
    };
    let mut out = HashMap::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return Err(ToolListError::Name(i));
        };
        let title = tool
            .get("title")
            .or_else(|| tool.get("annotations")?.get("title"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let declared = tool
            .get("_meta")
            .and_then(|meta| meta.get(META_DECLARED)?.get("kind")?.as_str())
            .map(str::to_owned);
        let arguments = tool
            .get("inputSchema")
            .and_then(|schema| schema.get("properties")?.as_object())
            .map(|properties| {
                let mut names: Vec<String> = properties.keys().cloned().collect();
                names.sort();
                names
            });
        let info = ToolInfo {
            destructive: destructive(name, tool.get("annotations"))?,
            param_headers: param_headers(name, tool.get("inputSchema"))?,
            title,
            declared,
            arguments,
            structured: tool.get("outputSchema").is_some_and(Value::is_object),
        };
        if out.insert(name.to_owned(), info).is_some() {
            return Err(ToolListError::Duplicate(name.to_owned()));
        }
    }
    Ok(out)
}

/// Whether a tool's `annotations` member (if any) makes it destructive, by the spec's rule:
/// `readOnlyHint: true` never is; otherwise it is unless `destructiveHint: false`, so a tool that
/// says nothing may be destructive. Malformed annotations (a hint that is not a boolean, annotations
/// that are not an object) count as destructive: fail closed. The rule the layer applies to the
/// tool list (`confirm_destructive`, `tools/list` marks) and the gateway to its upstreams'.
pub fn is_destructive(annotations: Option<&Value>) -> bool {
    destructive("", annotations).unwrap_or(true)
}

fn destructive(name: &str, annotations: Option<&Value>) -> Result<bool, ToolListError> {
    let malformed = || ToolListError::Annotations(name.to_owned());
    let annotations = match annotations {
        None | Some(Value::Null) => return Ok(true),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(malformed()),
    };
    let hint = |key: &str| match annotations.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(malformed()),
    };
    let read_only = hint("readOnlyHint")?.unwrap_or(false);
    let destructive = hint("destructiveHint")?.unwrap_or(true);
    Ok(!read_only && destructive)
}

/// The `x-mcp-header` annotations on the schema's top-level properties. (The layer only ever
/// rewrites a top-level argument, so deeper annotations do not concern it.)
fn param_headers(
    name: &str,
    schema: Option<&Value>,
) -> Result<HashMap<String, String>, ToolListError> {
    let Some(properties) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return Ok(HashMap::new());
    };
    let mut headers = HashMap::new();
    for (argument, property) in properties {
        match property.get("x-mcp-header") {
            None => {}
            Some(Value::String(header)) => {
                headers.insert(argument.clone(), header.clone());
            }
            Some(_) => return Err(ToolListError::Header(name.to_owned())),
        }
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn destructive_follows_the_spec_defaults() {
        let list = json!({"tools":[
            {"name":"unset"},
            {"name":"empty","annotations":{}},
            {"name":"destructive","annotations":{"destructiveHint":true}},
            {"name":"additive","annotations":{"destructiveHint":false}},
            {"name":"read_only","annotations":{"readOnlyHint":true}},
            {"name":"read_only_destructive","annotations":{"readOnlyHint":true,"destructiveHint":true}},
            {"name":"not_read_only","annotations":{"readOnlyHint":false}},
        ]});
        let tools = read(&list).unwrap();
        let destructive = |n: &str| tools[n].destructive;
        assert!(destructive("unset"));
        assert!(destructive("empty"));
        assert!(destructive("destructive"));
        assert!(!destructive("additive"));
        assert!(!destructive("read_only"));
        assert!(!destructive("read_only_destructive"));
        assert!(destructive("not_read_only"));
    }

    #[test]
    fn malformed_lists_are_refused_with_the_reason() {
        assert_eq!(read(&json!("tools")), Err(ToolListError::Shape));
        assert_eq!(read(&json!({"tool":[]})), Err(ToolListError::Shape));
        assert_eq!(read(&json!([{"name":1}])), Err(ToolListError::Name(0)));
        assert_eq!(
            read(&json!([{"name":"a"},{"name":"a"}])),
            Err(ToolListError::Duplicate("a".into()))
        );
        assert_eq!(
            read(&json!([{"name":"a","annotations":{"readOnlyHint":"yes"}}])),
            Err(ToolListError::Annotations("a".into()))
        );
        assert_eq!(read(&json!([])).map(|t| t.len()), Ok(0));
        assert_eq!(
            read(&json!({"tools":[{"name":"a"}],"nextCursor":"page-2"})),
            Err(ToolListError::Paginated)
        );
        assert_eq!(
            read(&json!({"tools":[{"name":"a"}],"nextCursor":null})).map(|t| t.len()),
            Ok(1)
        );
        assert_eq!(
            read(&json!([{"name":"a","inputSchema":{"properties":{"x":{"x-mcp-header":7}}}}])),
            Err(ToolListError::Header("a".into()))
        );
    }

    #[test]
    fn x_mcp_header_annotations_are_read_from_top_level_properties() {
        let list = json!([{"name":"notes_delete","inputSchema":{"type":"object","properties":{
            "note_id":{"type":"string","x-mcp-header":"Note-Id"},
            "title":{"type":"string"},
            "nested":{"type":"object","properties":{"deep":{"type":"string","x-mcp-header":"Deep"}}}
        }}}]);
        let tools = read(&list).unwrap();
        let headers = &tools["notes_delete"].param_headers;
        assert_eq!(headers.len(), 1);
        assert_eq!(headers["note_id"], "Note-Id");
    }
}
