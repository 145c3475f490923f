//! What a ceremony binds and how its state travels: the decision's digest and challenge, and
//! the sealed value (state, subject, decision, expiry, tag) the page hands the browser and gets
//! back. Pure: no WebAuthn verification here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::PasskeyError;
use mcp_confirm::approval::ApprovalDesk;

/// The tag's domain: what else the ring's sealing key tags cannot be taken for a ceremony.
const DOMAIN: &[u8] = b"mcp-confirm/passkey-ceremony/v1";

/// The most a sealed ceremony may weigh, as posted back.
pub(crate) const MAX_SEALED_BYTES: usize = 12 * 1024;

/// One decision a passkey assertion is made for: the approval, the arguments of the call and the
/// approver's narrowing of them, the chosen record and its version, and who decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Binding {
    /// The approval's id (hex).
    pub approval: String,
    /// The digest of the call's arguments (hex; empty when the record has none).
    pub arguments: String,
    /// The approver's narrowing of those arguments, exactly as the decision records it (a JSON
    /// object of the arguments changed, [`mcp_confirm::narrow`]; empty for the call as asked). With
    /// `arguments` it fixes the arguments that run, so an assertion made for one narrowing
    /// approves no other, nor the call as asked.
    pub narrowed: String,
    /// The chosen record's id (empty for a confirm-only tool).
    pub chosen: String,
    /// The chosen record's version as the page showed it (empty without one).
    pub version: String,
    /// The approver's subject.
    pub subject: String,
}

impl Binding {
    /// The decision's digest: SHA-256 over a domain and each field, length-prefixed.
    pub fn digest(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(b"mcp-confirm/passkey-approval/v2\0");
        for part in [
            &self.approval,
            &self.arguments,
            &self.narrowed,
            &self.chosen,
            &self.version,
            &self.subject,
        ] {
            hash.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
            hash.update(part.as_bytes());
        }
        hash.finalize().into()
    }

    /// A fresh challenge for this decision: 16 random bytes, then its digest (48 bytes).
    pub(crate) fn challenge(&self) -> Vec<u8> {
        let nonce = mcp_confirm::store::Nonce::random();
        [nonce.as_bytes().as_slice(), &self.digest()].concat()
    }

    /// Whether `challenge` is one of this decision's.
    pub(crate) fn is_challenge(&self, challenge: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        challenge.len() == 48 && bool::from(challenge[16..].ct_eq(&self.digest()))
    }
}

/// Which ceremony a sealed value is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Register,
    Assert,
}

/// A ceremony's state as it travels with the page.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sealed {
    kind: Kind,
    subject: String,
    /// The decision's digest (hex), for an assertion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision: Option<String>,
    expires: u64,
    pub(crate) state: Value,
}

impl Sealed {
    pub(crate) fn new(
        kind: Kind,
        subject: &str,
        decision: Option<[u8; 32]>,
        state: Value,
        expires: SystemTime,
    ) -> Self {
        Self {
            kind,
            subject: subject.to_owned(),
            decision: decision.map(|d| crate::encoding::hex(&d)),
            expires: expires
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            state,
        }
    }

    /// `base64url(json) "." base64url(tag)`.
    pub(crate) fn seal(&self, keys: &ApprovalDesk) -> String {
        let payload = serde_json::to_vec(self).unwrap_or_default();
        let tag = keys.page_tag(DOMAIN, &payload);
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The sealed value, if it is ours (tag under any key of the ring), of `kind`, for
    /// `subject` and `decision`, and unexpired at `now`.
    pub(crate) fn open(
        keys: &ApprovalDesk,
        text: &str,
        kind: Kind,
        subject: &str,
        decision: Option<[u8; 32]>,
        now: SystemTime,
    ) -> Result<Self, PasskeyError> {
        if text.len() > MAX_SEALED_BYTES {
            return Err(PasskeyError::Ceremony);
        }
        let (payload, tag) = text.split_once('.').ok_or(PasskeyError::Ceremony)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| PasskeyError::Ceremony)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| PasskeyError::Ceremony)?;
        if !keys.page_tag_matches(DOMAIN, &payload, &tag) {
            return Err(PasskeyError::Ceremony);
        }
        let sealed: Sealed =
            serde_json::from_slice(&payload).map_err(|_| PasskeyError::Ceremony)?;
        let expires = UNIX_EPOCH + Duration::from_secs(sealed.expires);
        let decision = decision.map(|d| crate::encoding::hex(&d));
        if sealed.kind != kind
            || sealed.subject != subject
            || sealed.decision != decision
            || now >= expires
        {
            return Err(PasskeyError::Ceremony);
        }
        Ok(sealed)
    }
}

/// webauthn-rs's authentication state with `challenge` in place of its own: the crate offers
/// no setter, so the serialized state's `ast.challenge` is replaced, and the round trip checked
/// (a change of its layout fails closed here, never silently).
pub(crate) fn with_challenge(
    state: &impl Serialize,
    challenge: &[u8],
) -> Result<Value, PasskeyError> {
    let encoded = Value::String(URL_SAFE_NO_PAD.encode(challenge));
    let mut value = serde_json::to_value(state).map_err(|_| PasskeyError::Ceremony)?;
    let slot = value
        .pointer_mut("/ast/challenge")
        .filter(|c| c.is_string())
        .ok_or(PasskeyError::Ceremony)?;
    *slot = encoded.clone();
    let back: webauthn_rs::prelude::PasskeyAuthentication =
        serde_json::from_value(value.clone()).map_err(|_| PasskeyError::Ceremony)?;
    let again = serde_json::to_value(&back).map_err(|_| PasskeyError::Ceremony)?;
    if again.pointer("/ast/challenge") != Some(&encoded) {
        return Err(PasskeyError::Ceremony);
    }
    Ok(value)
}

/// The challenge the authenticator signed, read from `clientDataJSON`.
pub(crate) fn signed_challenge(client_data_json: &[u8]) -> Option<Vec<u8>> {
    #[derive(Deserialize)]
    struct ClientData {
        challenge: String,
    }
    let data: ClientData = serde_json::from_slice(client_data_json).ok()?;
    URL_SAFE_NO_PAD.decode(data.challenge).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desk() -> ApprovalDesk {
        mcp_confirm::ConfirmLayer::builder(mcp_confirm::KeyRing::random())
            .without_tool_list_unchecked()
            .audience("https://notes.example/mcp")
            .build()
            .approval_desk()
    }

    fn binding() -> Binding {
        Binding {
            approval: "00ff".into(),
            arguments: "ab".into(),
            narrowed: r#"{"limit":1}"#.into(),
            chosen: "note-7".into(),
            version: "g4".into(),
            subject: "bob".into(),
        }
    }

    #[test]
    fn each_field_moves_the_digest_and_challenges_are_fresh() {
        let base = binding();
        let mut seen = vec![base.digest()];
        for change in [
            |b: &mut Binding| b.approval.push('0'),
            |b: &mut Binding| b.arguments.push('0'),
            |b: &mut Binding| b.narrowed = r#"{"limit":2}"#.into(),
            // A narrowed decision's challenge is not the call's as asked.
            |b: &mut Binding| b.narrowed.clear(),
            |b: &mut Binding| b.chosen.push('0'),
            |b: &mut Binding| b.version.push('0'),
            |b: &mut Binding| b.subject.push('0'),
            // Moving a character from one field to the next changes it too.
            |b: &mut Binding| {
                b.chosen = "note-".into();
                b.version = "7g4".into();
            },
        ] {
            let mut b = base.clone();
            change(&mut b);
            assert!(!seen.contains(&b.digest()));
            seen.push(b.digest());
        }
        let (one, two) = (base.challenge(), base.challenge());
        assert_ne!(one, two);
        assert!(base.is_challenge(&one) && base.is_challenge(&two));
        let mut other = base.clone();
        other.version = "g5".into();
        assert!(!other.is_challenge(&one));
        assert!(!base.is_challenge(&one[..47]));
    }

    #[test]
    fn a_sealed_ceremony_opens_only_as_sealed() {
        let keys = desk();
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let d = binding().digest();
        let sealed = Sealed::new(
            Kind::Assert,
            "bob",
            Some(d),
            serde_json::json!({"x": 1}),
            now + Duration::from_secs(300),
        );
        let text = sealed.seal(&keys);
        assert!(Sealed::open(&keys, &text, Kind::Assert, "bob", Some(d), now).is_ok());
        let refused =
            |t: &str,
             k: Kind,
             s: &str,
             d2: Option<[u8; 32]>,
             at: SystemTime,
             ring: &ApprovalDesk| { Sealed::open(ring, t, k, s, d2, at).is_err() };
        assert!(refused(&text, Kind::Register, "bob", Some(d), now, &keys));
        assert!(refused(&text, Kind::Assert, "alice", Some(d), now, &keys));
        assert!(refused(
            &text,
            Kind::Assert,
            "bob",
            Some([0; 32]),
            now,
            &keys
        ));
        assert!(refused(&text, Kind::Assert, "bob", None, now, &keys));
        assert!(refused(
            &text,
            Kind::Assert,
            "bob",
            Some(d),
            now + Duration::from_secs(300),
            &keys
        ));
        assert!(refused(&text, Kind::Assert, "bob", Some(d), now, &desk()));
        let (payload, tag) = text.split_once('.').unwrap_or_default();
        let mut bytes = URL_SAFE_NO_PAD.decode(payload).unwrap_or_default();
        if let Some(b) = bytes.iter_mut().find(|b| **b == b'1') {
            *b = b'2';
        }
        let edited = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(bytes));
        assert!(refused(&edited, Kind::Assert, "bob", Some(d), now, &keys));
        assert!(refused("", Kind::Assert, "bob", Some(d), now, &keys));
        assert!(refused(
            &"a".repeat(MAX_SEALED_BYTES + 1),
            Kind::Assert,
            "bob",
            Some(d),
            now,
            &keys
        ));
    }
}
