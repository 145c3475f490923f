//! Passkey-bound approvals (feature `passkeys`): WebAuthn registration and assertion through
//! webauthn-rs, with the assertion's challenge bound to one decision.
//!
//! The challenge is 16 random bytes followed by a digest of the approval's id, the call's
//! argument digest, the approver's narrowing of the arguments, the chosen record's id and
//! version, and the approver's subject. The authenticator signs it (inside `clientDataJSON`), so
//! an assertion made for one decision verifies for no other: another approval, another
//! narrowing (or none), another record, another version, another approver.
//! User verification is required at registration and at every assertion.
//!
//! The ceremony's state (webauthn-rs's, with our challenge written in) travels with the page as
//! a sealed value: tagged under the key ring, bound to the subject and the decision, expiring
//! after five minutes. No store is written until the decision itself, which counts once per
//! approver, so a replayed assertion gains nothing.

mod ceremony;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use webauthn_rs::prelude::{
    Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Url, Uuid, Webauthn, WebauthnBuilder,
};

pub use ceremony::Binding;
use ceremony::{Kind, Sealed};

use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::store::StoreError;
use mcp_confirm::store::passkey::{PasskeyStore, Registered, RegisteredPasskey};

/// How long a ceremony (the options shown, the assertion posted back) may take.
pub const CEREMONY_TTL: Duration = Duration::from_secs(300);

/// Why a passkey ceremony failed. On the page each class has one message; the real reason goes
/// to the audit log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PasskeyError {
    /// The relying party's id or origin is not usable (an id that is not the origin's host or a
    /// parent of it, an origin that is not an absolute URL).
    #[error("passkeys: invalid relying party: {0}")]
    Config(String),
    /// The approver has no registered passkey.
    #[error("no registered passkey")]
    NoPasskey,
    /// The sealed ceremony is not ours, not for this decision or approver, or expired.
    #[error("the passkey ceremony is not valid for this decision")]
    Ceremony,
    /// The posted credential is not one this approver registered (or it was removed).
    #[error("the passkey is not registered to this approver")]
    Unknown,
    /// WebAuthn refused it: signature, challenge, origin, user verification, counter.
    #[error("the passkey did not verify: {0}")]
    Verify(String),
    /// The approver holds the most passkeys one may, or this one is registered already.
    #[error("the passkey cannot be registered: {0}")]
    Refused(&'static str),
    /// The store did not answer.
    #[error("passkey store: {0}")]
    Store(#[from] StoreError),
}

/// Passkeys for approvers: the relying party and the store the registered passkeys are kept in.
/// Give it to the layer ([`ConfirmLayerBuilder::passkeys`](mcp_confirm::ConfirmLayerBuilder::passkeys));
/// the approval page then asks for a passkey wherever the rule says
/// [`with_passkey`](mcp_confirm::approval::Approvers::with_passkey), and
/// [`LayerPages::passkey_page`](crate::LayerPages::passkey_page) lets approvers register
/// theirs.
#[derive(Clone)]
pub struct Passkeys {
    webauthn: Arc<Webauthn>,
    store: Arc<dyn PasskeyStore>,
    rp_id: String,
}

impl mcp_confirm::approval::PasskeyVerifier for Passkeys {}

impl Passkeys {
    /// The passkeys the layer behind `desk` was given, if they are these (WebAuthn).
    pub(crate) fn of(desk: &ApprovalDesk) -> Option<&Self> {
        let verifier: &dyn std::any::Any = desk.passkeys()?;
        verifier.downcast_ref::<Self>()
    }
}

impl fmt::Debug for Passkeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Passkeys")
            .field("rp_id", &self.rp_id)
            .finish_non_exhaustive()
    }
}

/// One ceremony for the page: the options for the browser (JSON) and the sealed state to post
/// back with its answer.
#[derive(Debug, Clone)]
pub(crate) struct Ceremony {
    pub(crate) options: String,
    pub(crate) sealed: String,
}

impl Passkeys {
    /// Passkeys for relying party `rp_id` (the approval page's host, e.g. `notes.example`, or a
    /// parent domain of it) at `origin` (the page's origin, e.g. `https://notes.example`;
    /// `http` only for `localhost`), kept in `store` (every store of this crate is one).
    ///
    /// # Errors
    /// [`PasskeyError::Config`] when webauthn-rs refuses the pair.
    pub fn new(rp_id: &str, origin: &str, store: impl PasskeyStore) -> Result<Self, PasskeyError> {
        let url = Url::parse(origin).map_err(|e| PasskeyError::Config(e.to_string()))?;
        let webauthn = WebauthnBuilder::new(rp_id, &url)
            .and_then(|b| b.rp_name(rp_id).build())
            .map_err(|e| PasskeyError::Config(e.to_string()))?;
        Ok(Self {
            webauthn: Arc::new(webauthn),
            store: Arc::new(store),
            rp_id: rp_id.to_owned(),
        })
    }

    /// The store the passkeys are kept in.
    pub fn store(&self) -> &dyn PasskeyStore {
        &*self.store
    }

    /// `subject`'s registered passkeys.
    ///
    /// # Errors
    /// [`PasskeyError::Store`].
    pub async fn registered(&self, subject: &str) -> Result<Vec<RegisteredPasskey>, PasskeyError> {
        Ok(self.store.passkeys(subject).await?)
    }

    /// Removes `subject`'s passkey `id`: from then on it verifies nothing; `false` if they had
    /// none such.
    ///
    /// # Errors
    /// [`PasskeyError::Store`].
    pub async fn remove(&self, subject: &str, id: &str) -> Result<bool, PasskeyError> {
        Ok(self.store.remove(subject, id).await?)
    }

    /// Starts registering a passkey for `subject` (user verification required; the subject's
    /// passkeys excluded, so one authenticator is not registered twice).
    pub(crate) async fn start_registration(
        &self,
        keys: &ApprovalDesk,
        subject: &str,
        now: SystemTime,
    ) -> Result<Ceremony, PasskeyError> {
        let held = self.store.passkeys(subject).await?;
        let exclude = held
            .iter()
            .filter_map(|p| serde_json::from_str::<Passkey>(&p.credential).ok())
            .map(|p| p.cred_id().clone())
            .collect::<Vec<_>>();
        let (options, state) = self
            .webauthn
            .start_passkey_registration(user_id(subject), subject, subject, Some(exclude))
            .map_err(|e| PasskeyError::Verify(e.to_string()))?;
        let state =
            serde_json::to_value(&state).map_err(|e| PasskeyError::Verify(e.to_string()))?;
        let sealed = Sealed::new(Kind::Register, subject, None, state, now + CEREMONY_TTL);
        Ok(Ceremony {
            options: json_text(&options)?,
            sealed: sealed.seal(keys),
        })
    }

    /// Finishes a registration: the credential `response` (the browser's JSON) against the
    /// sealed state, then kept for `subject` under `name`.
    pub(crate) async fn finish_registration(
        &self,
        keys: &ApprovalDesk,
        subject: &str,
        sealed: &str,
        response: &str,
        name: &str,
        now: SystemTime,
    ) -> Result<RegisteredPasskey, PasskeyError> {
        let ceremony = Sealed::open(keys, sealed, Kind::Register, subject, None, now)?;
        let state: PasskeyRegistration =
            serde_json::from_value(ceremony.state).map_err(|_| PasskeyError::Ceremony)?;
        let credential: RegisterPublicKeyCredential =
            serde_json::from_str(response).map_err(|e| PasskeyError::Verify(e.to_string()))?;
        let passkey = self
            .webauthn
            .finish_passkey_registration(&credential, &state)
            .map_err(|e| PasskeyError::Verify(e.to_string()))?;
        let id = credential_id(&passkey)?;
        let text =
            serde_json::to_string(&passkey).map_err(|e| PasskeyError::Verify(e.to_string()))?;
        let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
        let record = RegisteredPasskey::new(id, name, now, text);
        match self.store.register(subject, &record).await? {
            Registered::Added => Ok(record),
            Registered::Exists => Err(PasskeyError::Refused("this passkey is registered already")),
            Registered::Full => Err(PasskeyError::Refused("the most passkeys one may register")),
            _ => Err(PasskeyError::Refused(
                "the store did not register this passkey",
            )),
        }
    }

    /// Starts an assertion by `subject` over `binding`, offering their registered passkeys.
    pub(crate) async fn start_assertion(
        &self,
        keys: &ApprovalDesk,
        subject: &str,
        binding: &Binding,
        now: SystemTime,
    ) -> Result<Ceremony, PasskeyError> {
        let passkeys = self.passkeys_of(subject).await?;
        if passkeys.is_empty() {
            return Err(PasskeyError::NoPasskey);
        }
        let (mut options, state) = self
            .webauthn
            .start_passkey_authentication(&passkeys)
            .map_err(|e| PasskeyError::Verify(e.to_string()))?;
        let challenge = binding.challenge();
        options.public_key.challenge = challenge.clone();
        let state = ceremony::with_challenge(&state, &challenge)?;
        let sealed = Sealed::new(
            Kind::Assert,
            subject,
            Some(binding.digest()),
            state,
            now + CEREMONY_TTL,
        );
        Ok(Ceremony {
            options: json_text(&options)?,
            sealed: sealed.seal(keys),
        })
    }

    /// Verifies `subject`'s assertion `response` (the browser's JSON) over `binding`: the sealed
    /// state is ours, this subject's, for this decision and unexpired; the credential is still
    /// registered to them; webauthn-rs accepts it (challenge, origin, signature, user
    /// verification, counter); and the signed challenge is this decision's. Returns the
    /// credential's id, after keeping its new counter.
    pub(crate) async fn verify_assertion(
        &self,
        keys: &ApprovalDesk,
        subject: &str,
        binding: &Binding,
        sealed: &str,
        response: &str,
        now: SystemTime,
    ) -> Result<String, PasskeyError> {
        let ceremony = Sealed::open(
            keys,
            sealed,
            Kind::Assert,
            subject,
            Some(binding.digest()),
            now,
        )?;
        let state: PasskeyAuthentication =
            serde_json::from_value(ceremony.state).map_err(|_| PasskeyError::Ceremony)?;
        let credential: PublicKeyCredential =
            serde_json::from_str(response).map_err(|e| PasskeyError::Verify(e.to_string()))?;
        // Still registered to this approver: a removed passkey verifies nothing, even with a
        // ceremony started before its removal.
        let posted = URL_SAFE_NO_PAD.encode(&credential.raw_id);
        let held = self.store.passkeys(subject).await?;
        let Some(record) = held.into_iter().find(|p| p.id == posted) else {
            return Err(PasskeyError::Unknown);
        };
        let result = self
            .webauthn
            .finish_passkey_authentication(&credential, &state)
            .map_err(|e| PasskeyError::Verify(e.to_string()))?;
        if !result.user_verified() {
            return Err(PasskeyError::Verify("user not verified".into()));
        }
        // What the authenticator signed is this decision's challenge, whatever the state says.
        let signed = ceremony::signed_challenge(&credential.response.client_data_json)
            .ok_or_else(|| PasskeyError::Verify("clientDataJSON".into()))?;
        if !binding.is_challenge(&signed) {
            return Err(PasskeyError::Ceremony);
        }
        let mut passkey: Passkey =
            serde_json::from_str(&record.credential).map_err(|_| PasskeyError::Unknown)?;
        if passkey.update_credential(&result) == Some(true) {
            let mut updated = record.clone();
            updated.credential =
                serde_json::to_string(&passkey).map_err(|e| PasskeyError::Verify(e.to_string()))?;
            self.store.update(subject, &updated).await?;
        }
        Ok(record.id)
    }

    async fn passkeys_of(&self, subject: &str) -> Result<Vec<Passkey>, PasskeyError> {
        Ok(self
            .store
            .passkeys(subject)
            .await?
            .iter()
            .filter_map(|p| serde_json::from_str::<Passkey>(&p.credential).ok())
            .collect())
    }
}

/// The WebAuthn user handle of `subject`: a digest, so the authenticator learns no name it
/// was not shown, and the same on every registration.
fn user_id(subject: &str) -> Uuid {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(
        [
            b"mcp-confirm/passkey-user/v1\0".as_slice(),
            subject.as_bytes(),
        ]
        .concat(),
    );
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(bytes)
}

/// A credential's id, base64url, as the browser's `rawId` spells it.
fn credential_id(passkey: &Passkey) -> Result<String, PasskeyError> {
    Ok(URL_SAFE_NO_PAD.encode(passkey.cred_id()))
}

fn json_text(value: &impl serde::Serialize) -> Result<String, PasskeyError> {
    serde_json::to_string(value).map_err(|e| PasskeyError::Verify(e.to_string()))
}
