//! Every decision leaves one structured event under the audit target, and none carries a secret.

use std::time::Duration;

use crate::common::audit_events::Events;
use crate::common::*;
use mcp_confirm::grant::GrantId;
use serde_json::json;

#[tokio::test]
async fn every_decision_is_an_audit_event_without_secrets() {
    let (events, _guard) = Events::record();
    let (f, state) = challenged().await;
    let call = |id: i64, responses| answered(&state, json!(id), responses);
    send(
        &f.svc,
        post(
            &call(2, json!({"delete_choice":{"action":"cancel"}})),
            Some("alice"),
        ),
    )
    .await;
    send(&f.svc, post(&call(3, json!({"delete_choice":{"action":"accept","content":{"note_id":"nope","confirm":true}}})), Some("alice"))).await;
    send(&f.svc, post(&call(4, accept("note-7")), Some("bob"))).await;
    send(&f.svc, post(&call(5, accept("note-7")), Some("alice"))).await;
    send(&f.svc, post(&call(6, accept("note-7")), Some("alice"))).await;
    let other = challenge(&f).await;
    send(
        &f.svc,
        post(
            &retry(
                delete_call(json!(1), "Groceries"),
                json!(7),
                &other,
                json!({"delete_choice":{"action":"decline"}}),
            ),
            Some("alice"),
        ),
    )
    .await;

    assert_eq!(
        events.field("decision"),
        [
            "challenged",
            "cancelled",
            "refused",
            // A choice that was not offered is asked again: a fresh form.
            "challenged",
            "refused",
            "accepted",
            "forwarded",
            "completed",
            "replay_blocked",
            "challenged",
            "declined"
        ]
    );
    let reasons = events.field("reason");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("asked again: the choice is not one of the signed candidates")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("principal mismatch")),
        "{reasons:?}"
    );
    // No event carries the token, the key or the form content.
    let all = format!("{:?}", events.0.lock().unwrap());
    assert!(
        !all.contains(&state[6..30]),
        "state leaked into the audit log"
    );
    assert!(!all.contains("mcpc1."));
    assert!(!all.contains("17, 17, 17"));
}

#[tokio::test]
async fn grants_are_audited_with_their_id_and_nonce() {
    let (events, _guard) = Events::record();
    let (f, worker, _) = crate::common::queued::queued();
    let id = crate::common::queued::approved(&f).await;
    let nonce = f.seen.last().confirmed.unwrap().nonce;
    worker
        .run(id, |_| async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    let revoked = crate::common::queued::approved(&f).await;
    worker
        .revoke(revoked, &mcp_confirm::Principal::new("alice"))
        .await
        .unwrap();
    let expired = crate::common::queued::approved(&f).await;
    f.clock.advance(Duration::from_secs(120));
    let _ = worker.begin(expired).await;
    let short = |id: GrantId| id.to_string()[..8].to_owned();
    for (decision, grant) in [
        ("grant_issued", id),
        ("grant_begun", id),
        ("grant_consumed", id),
        ("grant_revoked", revoked),
        ("grant_expired", expired),
    ] {
        let seen = events.with("decision", decision);
        assert!(
            seen.iter()
                .any(|e| e.contains(&("grant".into(), short(grant)))
                    && e.iter().any(|(k, v)| k == "nonce" && v.len() == 8)),
            "{decision} for {grant:?}: {seen:?}"
        );
    }
    let issued = events.with("decision", "grant_issued");
    assert!(issued[0].contains(&("nonce".into(), nonce.to_hex()[..8].to_owned())));
    // The full id, a handle on the work, is never logged.
    let all = format!("{:?}", events.0.lock().unwrap());
    assert!(!all.contains(&id.to_string()));
}
