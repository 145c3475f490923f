//! The gateway's own answers: its body type, and the JSON and text answers it writes itself
//! (refusals, errors, metadata), one builder each.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// A response of the gateway's.
pub type GatewayBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A JSON-RPC error answer of the gateway's own.
pub fn rpc_error(
    status: StatusCode,
    code: i64,
    message: &'static str,
    id: Option<Value>,
) -> Response<GatewayBody> {
    json_answer(
        status,
        &json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null),
            "error": {"code": code, "message": message}}),
    )
}

/// As [`rpc_error`], with `data.reason`: the failure's class, for clients to tell refusals
/// apart (never the real reason, which goes to the log).
pub fn rpc_refusal(
    status: StatusCode,
    code: i64,
    message: &'static str,
    reason: &'static str,
    id: Option<Value>,
) -> Response<GatewayBody> {
    json_answer(
        status,
        &json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null),
            "error": {"code": code, "message": message, "data": {"reason": reason}}}),
    )
}

/// A JSON answer of the gateway's own.
pub fn json_answer(status: StatusCode, body: &Value) -> Response<GatewayBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A short text answer of the gateway's.
pub fn plain(status: StatusCode, text: &'static str) -> Response<GatewayBody> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
