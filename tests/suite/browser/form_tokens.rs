//! The anti-forgery tokens of the pages' forms (issue 33): on the standing-approvals page, the
//! passkey page and the approval page, a token is good only for the page (or approval) it was
//! shown for, the principal it was shown to, the session it was shown in, and until it expires
//! (30 minutes by default). Anything else is refused with the pages' one refusal ("This form
//! has expired or was not issued to you"), and changes nothing.
//!
//! Before the fix the standing and passkey pages' token was a fixed keyed hash of the
//! principal: the tests of another session and of expiry failed there.

use mcp_confirm_pages::LayerPages as _;
use mcp_confirm_pages::StandingPages as _;
use mcp_confirm_pages::{ApprovalPage, PasskeyPage, StandingPage};
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_confirm::clock::ManualClock;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{
    ConfirmLayerBuilder, KeyRing, Lookup, PageSession, Principal, StandingApprovals,
};
use mcp_confirm_pages::passkey::Passkeys;
use serde_json::json;
use tower::ServiceExt;

use crate::common::browser::*;
use crate::common::*;

pub(super) const STANDING_URL: &str = "http://notes.example/standing";
pub(super) const KEYS_URL: &str = "http://notes.example/passkeys";
const REFUSED: &str = "This form has expired or was not issued to you";

/// The session a page request comes in, as the authentication in front shows it.
#[derive(Clone, Copy)]
enum Session<'a> {
    /// A session cookie (the page digests the request's credentials).
    Cookie(&'a str),
    /// A bearer token.
    Bearer(&'a str),
    /// A session the authentication names with `PageSession` (and a cookie that says otherwise).
    Named(&'a str),
}

/// A request to `page` as `who` in `session`.
async fn visit_in<P>(
    page: &P,
    method: &str,
    url: &str,
    who: &str,
    session: Session<'_>,
    body: &str,
) -> (StatusCode, String)
where
    P: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone,
{
    let mut request = Request::builder().method(method).uri(url);
    if method == "POST" {
        for (name, value) in FORM_HEADERS {
            request = request.header(name, value);
        }
    }
    request = match session {
        Session::Cookie(id) => request.header("cookie", format!("theme=dark; session={id}")),
        Session::Bearer(token) => request.header("authorization", format!("Bearer {token}")),
        Session::Named(_) => request.header("cookie", "session=the-same-for-all"),
    };
    let mut request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    request.extensions_mut().insert(Principal::new(who));
    if let Session::Named(id) = session {
        request.extensions_mut().insert(PageSession::new(id));
    }
    let response = page
        .clone()
        .oneshot(request)
        .await
        .unwrap_or_else(|e: Infallible| match e {});
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The token of the page at `url`, shown to `who` in `session`.
async fn token_of<P>(page: &P, url: &str, who: &str, session: Session<'_>) -> String
where
    P: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone,
{
    let (status, html) = visit_in(page, "GET", url, who, session, "").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let token = csrf(&html);
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    token
}

/// The scope of a notes call: its workspace.
fn workspace(lookup: &Lookup) -> Option<String> {
    lookup.arguments["workspaceUri"].as_str().map(str::to_owned)
}

/// One deployment with all three pages: `notes_destroy` approved on the approval page,
/// `notes_delete` offering standing approvals, and passkeys.
pub(super) struct Pages {
    pub(super) f: Fixture,
    pub(super) approval: ApprovalPage,
    pub(super) standing: StandingPage,
    pub(super) passkeys: PasskeyPage,
    pub(super) approvals: StandingApprovals,
}

fn all_pages(
    keys: KeyRing,
    notes: &Notes,
    clock: &ManualClock,
    store: &MemoryReplayStore,
) -> ConfirmLayerBuilder {
    let passkeys = Passkeys::new("notes.example", "https://notes.example", store.clone()).unwrap();
    base(keys, clock, store)
        .tool("notes_destroy", destroy_policy(notes))
        .tool(
            "notes_delete",
            delete_policy(notes).standing(Duration::from_secs(7_200), 5, workspace),
        )
        .passkeys(passkeys)
}

fn pages_with(keys: KeyRing, clock: &ManualClock, store: &MemoryReplayStore) -> Pages {
    let notes = Notes::seeded();
    let layer = all_pages(keys, &notes, clock, store).build();
    let approvals = layer.standing_approvals().unwrap();
    Pages {
        approval: layer.approval_page(),
        standing: approvals.page(STANDING_URL),
        passkeys: layer.passkey_page().unwrap(),
        approvals,
        f: Fixture::new(layer, notes, clock.clone(), store.clone()),
    }
}

pub(super) fn pages() -> Pages {
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    pages_with(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
}

/// Alice grants a standing approval (through the form), so the standing page has one to revoke.
pub(super) async fn grant(f: &Fixture) {
    grant_as(f, "alice", PERSONAL, "note-7").await;
}

/// `who` confirms `choice`, a Groceries note in `ws`, and chooses the standing option.
async fn grant_as(f: &Fixture, who: &str, ws: &str, choice: &str) {
    let call = |id| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "_meta": meta(), "name":"notes_delete",
            "arguments":{"workspaceUri": ws, "title": "Groceries"}}})
    };
    let first = send(&f.svc, post(&call(json!(1)), Some(who))).await;
    let retry = retry(
        call(json!(1)),
        json!(2),
        &first.state(),
        json!({"delete_choice":{"action":"accept","content":{
            "note_id": choice, "confirm": true, "remember": "standing"}}}),
    );
    assert_ran(&send(&f.svc, post(&retry, Some(who))).await);
}

/// Alice's approval of `notes_destroy` waiting on the approval page: its URL.
async fn approval_url(f: &Fixture) -> String {
    elicitation(&f.alice(&destroy_call(json!(9))).await).0
}

pub(super) async fn alices_standing(p: &Pages) -> usize {
    p.approvals
        .list(&Principal::new("alice"))
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_form_is_good_in_the_session_it_was_shown_in() {
    let p = pages();
    grant(&p.f).await;
    for session in [
        Session::Cookie("s1"),
        Session::Bearer("t1"),
        Session::Named("n1"),
    ] {
        let token = token_of(&p.passkeys, KEYS_URL, "alice", session).await;
        let form = format!("csrf={token}&action=remove&id=none");
        let (status, html) = visit_in(&p.passkeys, "POST", KEYS_URL, "alice", session, &form).await;
        assert_eq!(status, StatusCode::OK, "{html}");
        assert!(!html.contains(REFUSED), "{html}");
    }
    let session = Session::Cookie("s1");
    let url = approval_url(&p.f).await;
    let token = token_of(&p.approval, &url, "alice", session).await;
    let form = format!("csrf={token}&decision=decline");
    let (status, html) = visit_in(&p.approval, "POST", &url, "alice", session, &form).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Declined"), "{html}");
    let token = token_of(&p.standing, STANDING_URL, "alice", session).await;
    let form = format!("csrf={token}&revoke=all");
    let (status, html) = visit_in(&p.standing, "POST", STANDING_URL, "alice", session, &form).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Revoked one standing approval."), "{html}");
    assert_eq!(alices_standing(&p).await, 0);
}

#[tokio::test]
async fn a_token_shown_in_another_session_of_the_same_person_is_refused() {
    let p = pages();
    grant(&p.f).await;
    let url = approval_url(&p.f).await;
    for (shown, posted) in [
        (Session::Cookie("s1"), Session::Cookie("s2")),
        (Session::Bearer("t1"), Session::Bearer("t2")),
        (Session::Cookie("s1"), Session::Bearer("t1")),
        // Named sessions are compared by name, whatever the cookies say.
        (Session::Named("n1"), Session::Named("n2")),
    ] {
        let token = token_of(&p.standing, STANDING_URL, "alice", shown).await;
        let (status, html) = visit_in(
            &p.standing,
            "POST",
            STANDING_URL,
            "alice",
            posted,
            &format!("csrf={token}&revoke=all"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
        assert!(html.contains(REFUSED), "{html}");
        let token = token_of(&p.passkeys, KEYS_URL, "alice", shown).await;
        let (status, html) = visit_in(
            &p.passkeys,
            "POST",
            KEYS_URL,
            "alice",
            posted,
            &format!("csrf={token}&action=remove&id=none"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
        assert!(html.contains(REFUSED), "{html}");
        let token = token_of(&p.approval, &url, "alice", shown).await;
        let (status, html) = visit_in(
            &p.approval,
            "POST",
            &url,
            "alice",
            posted,
            &format!("csrf={token}&decision=decline"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
        assert!(html.contains(REFUSED), "{html}");
    }
    assert_eq!(alices_standing(&p).await, 1, "nothing was revoked");
    let (_, html) = visit_in(&p.approval, "GET", &url, "alice", Session::Cookie("s1"), "").await;
    assert!(
        html.contains("name=\"decision\""),
        "still undecided: {html}"
    );
}

#[tokio::test]
async fn a_token_shown_to_another_person_is_refused_even_with_their_session() {
    let p = pages();
    grant(&p.f).await;
    grant_as(&p.f, "bob", TEAM, "note-30").await;
    let bobs = Session::Cookie("bob-1");
    for (page, url) in [
        (&p.standing as &dyn PageService, STANDING_URL),
        (&p.passkeys as &dyn PageService, KEYS_URL),
    ] {
        let token = page.token(url, "bob", bobs).await;
        for session in [bobs, Session::Cookie("alice-1")] {
            let form = format!("csrf={token}&revoke=all&action=remove&id=none");
            let (status, html) = page.post(url, "alice", session, &form).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{url}: {html}");
            assert!(html.contains(REFUSED), "{html}");
        }
    }
    assert_eq!(alices_standing(&p).await, 1, "nothing was revoked");
}

#[tokio::test]
async fn a_token_of_another_page_is_refused() {
    let p = pages();
    grant(&p.f).await;
    let session = Session::Cookie("s1");
    let url = approval_url(&p.f).await;
    let standing = token_of(&p.standing, STANDING_URL, "alice", session).await;
    let passkeys = token_of(&p.passkeys, KEYS_URL, "alice", session).await;
    let approval = token_of(&p.approval, &url, "alice", session).await;
    for token in [&passkeys, &approval] {
        let form = format!("csrf={token}&revoke=all");
        let (status, html) =
            visit_in(&p.standing, "POST", STANDING_URL, "alice", session, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    }
    for token in [&standing, &approval] {
        let form = format!("csrf={token}&action=remove&id=none");
        let (status, html) = visit_in(&p.passkeys, "POST", KEYS_URL, "alice", session, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    }
    // Nor is one approval's token another's.
    let other = elicitation(
        &p.f.alice(&destroy_call_in(json!(10), TEAM, "Groceries"))
            .await,
    )
    .0;
    for token in [&standing, &passkeys, &approval] {
        let form = format!("csrf={token}&decision=decline");
        let (status, html) = visit_in(&p.approval, "POST", &other, "alice", session, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    }
    assert_eq!(alices_standing(&p).await, 1);
}

#[tokio::test]
async fn a_token_expires_thirty_minutes_after_the_page_showed_it() {
    let p = pages();
    grant(&p.f).await;
    let session = Session::Cookie("s1");
    let revoke = |token: &str| format!("csrf={token}&revoke=all");
    let remove = |token: &str| format!("csrf={token}&action=remove&id=none");
    let old_standing = token_of(&p.standing, STANDING_URL, "alice", session).await;
    let old_passkeys = token_of(&p.passkeys, KEYS_URL, "alice", session).await;
    p.f.clock.advance(Duration::from_secs(29 * 60));
    let fresh_passkeys = token_of(&p.passkeys, KEYS_URL, "alice", session).await;
    let (status, html) = visit_in(
        &p.passkeys,
        "POST",
        KEYS_URL,
        "alice",
        session,
        &remove(&old_passkeys),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "still good after 29 minutes: {html}"
    );
    p.f.clock.advance(Duration::from_secs(60));
    let (status, html) = visit_in(
        &p.standing,
        "POST",
        STANDING_URL,
        "alice",
        session,
        &revoke(&old_standing),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "expired after 30 minutes: {html}"
    );
    assert!(html.contains(REFUSED), "{html}");
    let (status, html) = visit_in(
        &p.passkeys,
        "POST",
        KEYS_URL,
        "alice",
        session,
        &remove(&old_passkeys),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    // The one shown a minute in is good for its own thirty minutes.
    let (status, html) = visit_in(
        &p.passkeys,
        "POST",
        KEYS_URL,
        "alice",
        session,
        &remove(&fresh_passkeys),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_eq!(alices_standing(&p).await, 1, "nothing was revoked");
    // A page with a shorter lifetime: a minute.
    let short = p.standing.clone().form_ttl(Duration::from_secs(60));
    let token = token_of(&short, STANDING_URL, "alice", session).await;
    p.f.clock.advance(Duration::from_secs(61));
    let (status, _) = visit_in(
        &short,
        "POST",
        STANDING_URL,
        "alice",
        session,
        &revoke(&token),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The approval page's too (its approval lives longer than the form here).
    let url = approval_url(&p.f).await;
    let short = p.approval.clone().form_ttl(Duration::from_secs(60));
    let token = token_of(&short, &url, "alice", session).await;
    p.f.clock.advance(Duration::from_secs(61));
    let form = format!("csrf={token}&decision=decline");
    let (status, html) = visit_in(&short, "POST", &url, "alice", session, &form).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
}

#[tokio::test]
async fn an_altered_token_is_refused_and_a_rotated_ring_still_accepts_its_old_key() {
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let p = pages_with(KeyRing::single("k1", KEY).unwrap(), &clock, &store);
    grant(&p.f).await;
    let session = Session::Cookie("s1");
    let token = token_of(&p.standing, STANDING_URL, "alice", session).await;
    // Its issue time moved on (to stretch its life) or its tag changed: a forgery.
    let mut later = token.clone().into_bytes();
    later[15] = if later[15] == b'f' { b'e' } else { b'f' };
    let mut tag = token.clone().into_bytes();
    tag[63] = if tag[63] == b'0' { b'1' } else { b'0' };
    for forged in [
        String::from_utf8(later).unwrap(),
        String::from_utf8(tag).unwrap(),
        token[..62].to_owned(),
        token.to_uppercase(),
        "0".repeat(64),
    ] {
        let form = format!("csrf={forged}&revoke=all");
        let (status, _) =
            visit_in(&p.standing, "POST", STANDING_URL, "alice", session, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{forged}");
    }
    // After a rotation, a page signing with the new key still takes the old one's tokens.
    let rotated = pages_with(
        KeyRing::new([("k2", secret(0x22)), ("k1", KEY)]).unwrap(),
        &clock,
        &store,
    );
    let form = format!("csrf={token}&revoke=all");
    let (status, html) = visit_in(
        &rotated.standing,
        "POST",
        STANDING_URL,
        "alice",
        session,
        &form,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert_eq!(alices_standing(&p).await, 0);
}

/// The standing and passkey pages behind one interface, for the tests that post the same form
/// to both.
trait PageService: Sync {
    fn token<'a>(
        &'a self,
        url: &'a str,
        who: &'a str,
        session: Session<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send + 'a>>;
    fn post<'a>(
        &'a self,
        url: &'a str,
        who: &'a str,
        session: Session<'a>,
        form: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = (StatusCode, String)> + Send + 'a>>;
}

impl<P> PageService for P
where
    P: tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + Sync,
    P::Future: Send,
{
    fn token<'a>(
        &'a self,
        url: &'a str,
        who: &'a str,
        session: Session<'a>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send + 'a>> {
        Box::pin(token_of(self, url, who, session))
    }
    fn post<'a>(
        &'a self,
        url: &'a str,
        who: &'a str,
        session: Session<'a>,
        form: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = (StatusCode, String)> + Send + 'a>>
    {
        Box::pin(visit_in(self, "POST", url, who, session, form))
    }
}
