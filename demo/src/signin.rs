//! The demo's minimal sign-in for the approval page: a person pastes a demo token once and gets a
//! session cookie (`HttpOnly`, `SameSite=Strict`) that only the page reads.
//!
//! It is deliberately not a way into the MCP endpoint. The cookie holds a random session id, never
//! the token, and `/mcp` reads the `Authorization` header and nothing else, so the cookie
//! authenticates the person at the page and nowhere else. The form is posted from this origin
//! only: a post whose `Origin` is not exactly the server's own (another port of the same host
//! included), or whose `Sec-Fetch-Site` is not `same-origin`, is refused, so no other site —
//! not even another local one — can sign a browser in, or out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use mcp_confirm::{PageSession, Principal};
use serde::Deserialize;

use crate::shared::principal_for_token;

/// The session cookie's name.
const COOKIE: &str = "notes_session";

/// How long a session lasts.
const SESSION_TTL: Duration = Duration::from_secs(3600);

/// Signed-in sessions: a random id → the principal, until it expires; and the server's own
/// origin, the only one the sign-in forms may be posted from. Clones share the map.
#[derive(Clone)]
pub struct Sessions {
    map: Arc<Mutex<HashMap<String, (&'static str, Instant)>>>,
    origin: Arc<str>,
}

impl Sessions {
    /// No sessions yet; forms are accepted from `origin` (`http://127.0.0.1:3000`) only.
    pub fn new(origin: &str) -> Self {
        Self {
            map: Arc::default(),
            origin: Arc::from(origin.trim_end_matches('/')),
        }
    }

    /// Whether a form post comes from the server's own pages: `Sec-Fetch-Site`, when the
    /// browser sends it, says same-origin, and `Origin`, when present, is exactly ours. (A
    /// browser always sends one of them on a cross-site post; a client that is not a browser
    /// cannot be used to forge a sign-in for someone else.)
    fn same_origin(&self, headers: &http::HeaderMap) -> bool {
        let site_ok = headers
            .get("sec-fetch-site")
            .is_none_or(|site| site.as_bytes() == b"same-origin");
        let mut origins = headers.get_all(header::ORIGIN).iter();
        let origin_ok = match (origins.next(), origins.next()) {
            (None, _) => true,
            (Some(origin), None) => origin.as_bytes() == self.origin.as_bytes(),
            (Some(_), Some(_)) => false,
        };
        site_ok && origin_ok
    }

    /// Ends the session `id`.
    fn close(&self, id: &str) {
        let mut sessions = self.map.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(id);
    }

    /// A new session for `principal`; its id goes into the cookie.
    fn open(&self, principal: &'static str) -> String {
        let id = mcp_confirm::store::Nonce::random().to_hex();
        let mut sessions = self.map.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, (_, at)| at.elapsed() < SESSION_TTL);
        sessions.insert(id.clone(), (principal, Instant::now()));
        id
    }

    fn principal(&self, id: &str) -> Option<&'static str> {
        let sessions = self.map.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .get(id)
            .filter(|(_, at)| at.elapsed() < SESSION_TTL)
            .map(|(principal, _)| *principal)
    }
}

/// Where the sign-in page may send the person afterwards: approval pages, the
/// standing-approvals page, the approvers' inbox and their passkeys only.
fn safe_next(next: &str) -> &str {
    let ok = (next.starts_with("/confirm/")
        || ["/standing", "/inbox", "/passkeys"].contains(&next))
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
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Any path the demo does not serve: a 404 with the same headers as its pages.
pub async fn not_found() -> Response {
    html(
        StatusCode::NOT_FOUND,
        "<!doctype html><title>Not found</title><p>Not found.</p>".to_owned(),
    )
}

/// A method a sign-in route does not serve: a 405 naming the ones it does (`allow`), with the
/// same headers as the pages.
pub fn method_not_allowed(
    allow: &'static str,
) -> impl Fn() -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    move || {
        let mut response = html(
            StatusCode::METHOD_NOT_ALLOWED,
            "<!doctype html><title>Method not allowed</title><p>Method not allowed.</p>".to_owned(),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        std::future::ready(response)
    }
}

/// The page to return to after signing in.
#[derive(Deserialize)]
pub struct Next_ {
    #[serde(default)]
    next: String,
}

/// `GET /signin?next=…`: the token form.
pub async fn form(Query(query): Query<Next_>) -> Response {
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

/// The sign-in form.
#[derive(Deserialize)]
pub struct SignIn {
    token: String,
    #[serde(default)]
    next: String,
}

/// The answer to a form posted from anywhere but the server's own pages.
fn cross_site() -> Response {
    html(
        StatusCode::FORBIDDEN,
        "<!doctype html><title>Sign in</title><p>Sign in from this server's own page.</p>"
            .to_owned(),
    )
}

/// `POST /signin`: a valid demo token sets the session cookie and goes back to the page.
pub async fn submit(
    State(sessions): State<Sessions>,
    headers: http::HeaderMap,
    Form(form): Form<SignIn>,
) -> Response {
    if !sessions.same_origin(&headers) {
        return cross_site();
    }
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

/// `POST /signout`: ends this browser's session and clears its cookie (from our own pages only,
/// so no other site can sign a person out either).
pub async fn sign_out(State(sessions): State<Sessions>, headers: http::HeaderMap) -> Response {
    if !sessions.same_origin(&headers) {
        return cross_site();
    }
    for id in session_ids(&headers) {
        sessions.close(id);
    }
    let mut response = html(
        StatusCode::OK,
        "<!doctype html><title>Signed out</title><p>Signed out.</p>".to_owned(),
    );
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("notes_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    response
}

/// The session ids the request's cookies carry.
fn session_ids(headers: &http::HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// The page's authentication: the session cookie's principal, if any, into the extensions, and
/// the session itself, which the pages bind their forms to (a form shown before a sign-out, or
/// in another browser, is refused).
pub async fn from_cookie(
    State(sessions): State<Sessions>,
    mut request: Request,
    next: Next,
) -> Response {
    let signed_in = session_ids(request.headers())
        .find_map(|id| Some((PageSession::new(id), sessions.principal(id)?)));
    if let Some((session, principal)) = signed_in {
        request.extensions_mut().insert(Principal::new(principal));
        request.extensions_mut().insert(session);
    }
    next.run(request).await
}
