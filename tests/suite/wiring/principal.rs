//! Issue 34, mistake 3: an authenticator that inserts `Principal::new(user.unwrap_or_default())`
//! gives every anonymous caller one blank subject. A blank principal (empty or whitespace) names
//! no one: the call is unauthenticated, nothing is asked, claimed or run.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn a_blank_principal_is_unauthenticated_and_runs_nothing() {
    let f = fixture();
    for blank in ["", " ", "\t\n"] {
        let first = send(
            &f.svc,
            post(&delete_call(json!(1), "Groceries"), Some(blank)),
        )
        .await;
        assert_eq!(
            first.error()["data"]["reason"],
            "unauthenticated",
            "{blank:?}: {:?}",
            first.json()
        );
    }
    // Alice's own state, answered by an anonymous caller: refused the same way.
    let state = f.alice(&delete_call(json!(2), "Groceries")).await.state();
    let anonymous = send(
        &f.svc,
        post(&accepted(&state, json!(3), "note-7"), Some("")),
    )
    .await;
    assert_eq!(anonymous.error()["data"]["reason"], "unauthenticated");
    assert_eq!(f.seen.count(), 0, "nothing ran");
    // Alice still can: nothing was claimed.
    assert_ran(&f.accept(&state, json!(4), "note-7").await);
}

/// The same authenticator in front of the approval page: a signed-out caller (blank subject) is
/// asked to sign in, sees nothing, and cannot decide anyone's request, her own included.
#[tokio::test]
async fn a_blank_principal_on_the_approval_page_is_signed_out() {
    use crate::common::browser::*;
    use http::StatusCode;
    let (f, page) = browser();
    let (url, _, _) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    for blank in ["", "  "] {
        let (status, _, html) = visit(&page, "GET", &url, Some(blank), &[], "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{blank:?}: {html}");
        assert!(!html.contains("note-7"), "{html}");
        let (status, _) = decide(&page, &url, blank, "choice=note-7&decision=approve&csrf=x").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(f.seen.count(), 0);
}
