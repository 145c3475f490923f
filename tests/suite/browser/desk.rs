//! The browser channel's port (`ApprovalDesk`, #53): what a page of one's own can do with a
//! layer, and what it cannot. Tags are refused when short, empty, for other data or under a key
//! the ring lost; another deployment's approval (same store, same key) is not readable through
//! it; a tool's narrowing is the one configured now, none for a tool not confirmed.

use mcp_confirm::approval::{ApprovalDesk, ApprovalId, MIN_FORM_TAG_BYTES};
use mcp_confirm::clock::ManualClock;
use mcp_confirm::narrow::Narrowing;
use mcp_confirm::store::MemoryReplayStore;
use mcp_confirm::{KeyRing, Principal};
use serde_json::json;

use crate::common::browser::*;
use crate::common::*;

const OTHER_KEY: [u8; 32] = secret(0x5a);

fn desk_with(keys: KeyRing) -> ApprovalDesk {
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(100, clock.clone());
    builder(keys, &Notes::seeded(), &clock, &store)
        .build()
        .approval_desk()
}

#[test]
fn a_form_tag_matches_its_data_under_the_ring_and_nothing_shorter_or_else() {
    let desk = desk_with(KeyRing::single("k1", KEY).unwrap());
    let tag = desk.form_tag(b"approval:1");
    assert!(desk.form_tag_matches(b"approval:1", &tag));
    assert!(desk.form_tag_matches(b"approval:1", &tag[..MIN_FORM_TAG_BYTES]));
    // An empty or short prefix begins every tag: never a match.
    assert!(!desk.form_tag_matches(b"approval:1", &[]));
    assert!(!desk.form_tag_matches(b"approval:1", &tag[..MIN_FORM_TAG_BYTES - 1]));
    assert!(!desk.form_tag_matches(b"approval:2", &tag));
    let mut flipped = tag;
    flipped[31] ^= 1;
    assert!(!desk.form_tag_matches(b"approval:1", &flipped));
    // Longer than a tag: no match either.
    let mut longer = tag.to_vec();
    longer.push(0);
    assert!(!desk.form_tag_matches(b"approval:1", &longer));

    // A ring that kept the old key as a second one still knows the tag; one without it does not.
    let rotated = desk_with(KeyRing::new([("k2", OTHER_KEY), ("k1", KEY)]).unwrap());
    assert!(rotated.form_tag_matches(b"approval:1", &tag));
    assert_ne!(
        rotated.form_tag(b"approval:1"),
        tag,
        "signs with its newest key"
    );
    let lost = desk_with(KeyRing::single("k2", OTHER_KEY).unwrap());
    assert!(!lost.form_tag_matches(b"approval:1", &tag));
}

#[tokio::test]
async fn another_deployments_approval_is_not_read_through_the_desk() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(10_000, clock.clone());
    let layer = builder(KeyRing::single("k1", KEY).unwrap(), &notes, &clock, &store).build();
    let other = builder(KeyRing::single("k1", KEY).unwrap(), &notes, &clock, &store)
        .audience("https://other.example/mcp")
        .build();
    let (desk, theirs) = (layer.approval_desk(), other.approval_desk());
    assert_eq!(desk.audience(), "https://notes.example/mcp");
    assert_eq!(desk.approval_url(), Some(BASE));

    let f = Fixture::new(layer, notes, clock, store);
    let (url, _, _) = elicitation(&f.alice(&destroy_call(json!(1))).await);
    let id = ApprovalId::from_hex(url.rsplit('/').next().unwrap()).unwrap();
    let alice = Principal::new("alice");
    let bob = Principal::new("bob");

    let approval = desk.approval(id, &alice).await.unwrap().expect("its own");
    assert_eq!(approval.tool, "notes_destroy");
    assert!(desk.is_caller(&approval, &alice));
    assert!(!desk.is_caller(&approval, &bob));
    // The caller decides their own (the default rule); nobody else.
    assert!(desk.admits(&approval, &alice));
    assert!(!desk.admits(&approval, &bob));
    assert!(!desk.answered_by_client(&approval).await);
    let waiting = desk.inbox(&alice, 10).await.unwrap();
    assert_eq!(waiting.iter().map(|a| a.id).collect::<Vec<_>>(), [id]);
    assert!(desk.inbox(&bob, 10).await.unwrap().is_empty());
    assert!(theirs.inbox(&alice, 10).await.unwrap().is_empty());

    // The same store and key, another audience: nothing to read, nothing changed.
    assert!(theirs.approval(id, &alice).await.unwrap().is_none());
    let again = desk.approval(id, &alice).await.unwrap().unwrap();
    assert!(again.decision.is_none());
}

#[test]
fn a_tools_narrowing_is_the_one_configured_now() {
    let notes = Notes::seeded();
    let clock = ManualClock::new(now());
    let store = MemoryReplayStore::with_clock(100, clock.clone());
    let desk = base(KeyRing::single("k1", KEY).unwrap(), &clock, &store)
        .tool(
            "notes_destroy",
            destroy_policy(&notes).narrowable("dry_run", Narrowing::TurnOn),
        )
        .build()
        .approval_desk();
    let declared = desk.narrowing("notes_destroy");
    assert_eq!(declared.len(), 1);
    assert_eq!(declared[0], ("dry_run".to_owned(), Narrowing::TurnOn));
    assert!(desk.narrowing("notes_delete").is_empty());
    assert!(desk.narrowing("").is_empty());
}
