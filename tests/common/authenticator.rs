//! A software WebAuthn authenticator and client for the tests: one ES256 (P-256) credential,
//! registrations with `none` attestation, assertions over the page's options, user presence and
//! (unless told otherwise) user verification. What it makes is verified by webauthn-rs, an
//! independent implementation; CI also drives real Chromium with a virtual authenticator.
//!
//! It is written here rather than taken from a crate: the one that exists (1Password's
//! `passkey-types`) turns on serde_json's `preserve_order` for the whole test build, and the
//! tests must run on the serde_json users get.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub struct SoftAuthenticator {
    origin: String,
    key: SigningKey,
    credential: Vec<u8>,
    user: Option<Vec<u8>>,
    counter: u32,
    /// Whether the user is verified (flag UV); presence is always given.
    pub verify: bool,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(text).expect("base64url")
}

// Minimal CBOR (RFC 8949) for the two structures an authenticator writes.
fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend([m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend((n as u16).to_be_bytes());
        }
        _ => {
            out.push(m | 26);
            out.extend((n as u32).to_be_bytes());
        }
    }
}

fn int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        head(out, 0, n as u64);
    } else {
        head(out, 1, (-1 - n) as u64);
    }
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    head(out, 2, b.len() as u64);
    out.extend(b);
}

fn text(out: &mut Vec<u8>, t: &str) {
    head(out, 3, t.len() as u64);
    out.extend(t.as_bytes());
}

impl SoftAuthenticator {
    /// An authenticator for pages at `origin` (e.g. `https://notes.example`).
    pub fn new(origin: &str) -> Self {
        let key = loop {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).unwrap();
            if let Ok(key) = SigningKey::from_slice(&seed) {
                break key;
            }
        };
        let mut credential = vec![0u8; 32];
        getrandom::fill(&mut credential).unwrap();
        Self {
            origin: origin.to_owned(),
            key,
            credential,
            user: None,
            counter: 0,
            verify: true,
        }
    }

    /// The credential id, base64url.
    pub fn id(&self) -> String {
        b64(&self.credential)
    }

    fn client_data(&self, kind: &str, challenge: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": false
        }))
        .unwrap()
    }

    fn flags(&self, attested: bool) -> u8 {
        0x01 | if self.verify { 0x04 } else { 0 } | if attested { 0x40 } else { 0 }
    }

    /// The browser's `PublicKeyCredential` JSON for `navigator.credentials.create(options)`.
    pub fn register(&mut self, options: &Value) -> String {
        let o = &options["publicKey"];
        let rp = o["rp"]["id"].as_str().expect("rp.id");
        self.user = Some(unb64(o["user"]["id"].as_str().expect("user.id")));
        let client_data = self.client_data("webauthn.create", o["challenge"].as_str().unwrap());
        let point = self.key.verifying_key().to_sec1_point(false);
        let sec1 = point.as_bytes();
        let (x, y) = (&sec1[1..33], &sec1[33..65]);
        let mut cose = Vec::new();
        head(&mut cose, 5, 5);
        int(&mut cose, 1);
        int(&mut cose, 2); // kty: EC2
        int(&mut cose, 3);
        int(&mut cose, -7); // alg: ES256
        int(&mut cose, -1);
        int(&mut cose, 1); // crv: P-256
        int(&mut cose, -2);
        bytes(&mut cose, x);
        int(&mut cose, -3);
        bytes(&mut cose, y);
        let mut auth = Sha256::digest(rp.as_bytes()).to_vec();
        auth.push(self.flags(true));
        auth.extend(self.counter.to_be_bytes());
        auth.extend([0u8; 16]); // AAGUID
        auth.extend((self.credential.len() as u16).to_be_bytes());
        auth.extend(&self.credential);
        auth.extend(cose);
        let mut attestation = Vec::new();
        head(&mut attestation, 5, 3);
        text(&mut attestation, "fmt");
        text(&mut attestation, "none");
        text(&mut attestation, "attStmt");
        head(&mut attestation, 5, 0);
        text(&mut attestation, "authData");
        bytes(&mut attestation, &auth);
        json!({
            "id": self.id(), "rawId": self.id(), "type": "public-key", "extensions": {},
            "response": {
                "attestationObject": b64(&attestation),
                "clientDataJSON": b64(&client_data),
                "transports": ["internal"],
            },
        })
        .to_string()
    }

    /// The browser's `PublicKeyCredential` JSON for `navigator.credentials.get(options)`.
    pub fn assert(&mut self, options: &Value) -> String {
        let o = &options["publicKey"];
        let rp = o["rpId"].as_str().expect("rpId");
        let allowed = o["allowCredentials"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            allowed.is_empty() || allowed.iter().any(|c| c["id"] == self.id()),
            "this authenticator's credential is not among those allowed"
        );
        self.counter += 1;
        let client_data = self.client_data("webauthn.get", o["challenge"].as_str().unwrap());
        let mut auth = Sha256::digest(rp.as_bytes()).to_vec();
        auth.push(self.flags(false));
        auth.extend(self.counter.to_be_bytes());
        let signed = [auth.as_slice(), &Sha256::digest(&client_data)].concat();
        let signature: Signature = self.key.sign(&signed);
        json!({
            "id": self.id(), "rawId": self.id(), "type": "public-key", "extensions": {},
            "response": {
                "authenticatorData": b64(&auth),
                "clientDataJSON": b64(&client_data),
                "signature": b64(&signature.to_der().to_bytes()),
                "userHandle": self.user.as_deref().map(b64),
            },
        })
        .to_string()
    }
}
