//! The demo's minimal sign-in for the approval page: a person pastes a demo token once and gets a
//! session cookie (`HttpOnly`, `SameSite=Strict`) that only the page reads.
//!
//! It is deliberately not a way into the MCP endpoint. The cookie holds a random session id, never
//! the token, and `/mcp` reads the `Authorization` header and nothing else, so the cookie
//! authenticates the person at the page and nowhere else. The form is posted from this origin
//! only (the Host/Origin guard sits in front), so no other site can sign a browser in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use mcp_confirm::Principal;
use serde::Deserialize;

use crate::app::principal_for_token;

/// The session cookie's name.
const COOKIE: &str = "notes_session";

/// How long a session lasts.
const SESSION_TTL: Duration = Duration::from_secs(3600);

/// Signed-in sessions: a random id → the principal, until it expires. Clones share the map.
#[derive(Clone, Default)]
pub(crate) struct Sessions(Arc<Mutex<HashMap<String, (&'static str, Instant)>>>);

impl Sessions {
    /// A new session for `principal`; its id goes into the cookie.
    fn open(&self, principal: &'static str) -> String {
        let id = mcp_confirm::store::Nonce::random().to_hex();
        let mut sessions = self.0.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, (_, at)| at.elapsed() < SESSION_TTL);
        sessions.insert(id.clone(), (principal, Instant::now()));
        id
    }

    fn principal(&self, id: &str) -> Option<&'static str> {
        let sessions = self.0.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .get(id)
            .filter(|(_, at)| at.elapsed() < SESSION_TTL)
            .map(|(principal, _)| *principal)
    }
}

/// Where the sign-in page may send the person afterwards: approval pages only.
fn safe_next(next: &str) -> &str {
    let ok = next.starts_with("/confirm/")
        && next.len() <= 64
        && next[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'/');
    if ok { next } else { "/signin" }
}

/// The answer headers every page of the demo's own carries (the approval page sets its own).
fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[derive(Deserialize)]
pub(crate) struct Next_ {
    #[serde(default)]
    next: String,
}

/// `GET /signin?next=…`: the token form.
pub(crate) async fn form(Query(query): Query<Next_>) -> Response {
    let next = safe_next(&query.next);
    html(
        StatusCode::OK,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in</title></head>\
             <body><h1>Sign in</h1><p>Demo accounts: <code>alice-token</code>, <code>bob-token</code>.</p>\
             <form method=\"post\" action=\"/signin\"><input type=\"hidden\" name=\"next\" value=\"{next}\">\
             <label>Token <input name=\"token\" id=\"token\" type=\"password\" autocomplete=\"off\"></label> \
             <button type=\"submit\" id=\"signin\">Sign in</button></form></body></html>"
        ),
    )
}

#[derive(Deserialize)]
pub(crate) struct SignIn {
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /signin`: a valid demo token sets the session cookie and goes back to the page.
pub(crate) async fn submit(State(sessions): State<Sessions>, Form(form): Form<SignIn>) -> Response {
    let Some(principal) = principal_for_token(&form.token) else {
        return html(
            StatusCode::UNAUTHORIZED,
            "<!doctype html><title>Sign in</title><p>Unknown token.</p>".to_owned(),
        );
    };
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        sessions.open(principal),
        SESSION_TTL.as_secs()
    );
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let (Ok(cookie), Ok(location)) = (
        HeaderValue::from_str(&cookie),
        HeaderValue::from_str(safe_next(&form.next)),
    ) {
        headers.insert(header::SET_COOKIE, cookie);
        headers.insert(header::LOCATION, location);
    }
    response
}

/// The page's authentication: the session cookie's principal, if any, into the extensions.
pub(crate) async fn from_cookie(
    State(sessions): State<Sessions>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .find_map(|id| sessions.principal(id));
    if let Some(principal) = principal {
        request.extensions_mut().insert(Principal::new(principal));
    }
    next.run(request).await
}
