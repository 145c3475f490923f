//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}` under a `whsec_` secret, sent as
//! `webhook-signature: v1,<base64>`. The sender signs; [`verify`] is what a receiver runs, and
//! what this crate's tests run against every delivery.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

/// The header naming the message: the same on every retry of one notification, so a receiver
/// drops a repeat.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header holding the send time, in Unix seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header holding the signatures (`v1,<base64>`, space-separated).
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// How far a delivery's timestamp may be from the receiver's clock: older ones are replays.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// A webhook signing secret: 24 to 64 random bytes, written `whsec_<base64>`. Zeroized on drop
/// and never printed.
#[derive(Clone)]
pub struct WebhookSecret(Zeroizing<Vec<u8>>);

impl WebhookSecret {
    /// Reads `whsec_<base64>` (or bare base64), as a Standard Webhooks provider prints it.
    ///
    /// # Errors
    /// [`WebhookError::Secret`] for anything else, or fewer than 24 or more than 64 bytes.
    pub fn parse(text: &str) -> Result<Self, WebhookError> {
        let encoded = text.trim().strip_prefix("whsec_").unwrap_or(text.trim());
        let bytes = Zeroizing::new(STANDARD.decode(encoded).map_err(|_| WebhookError::Secret)?);
        if !(24..=64).contains(&bytes.len()) {
            return Err(WebhookError::Secret);
        }
        Ok(Self(bytes))
    }

    /// A fresh 32-byte secret from the operating system.
    ///
    /// # Panics
    /// If the OS random source fails.
    pub fn random() -> Self {
        let mut bytes = Zeroizing::new(vec![0u8; 32]);
        #[allow(clippy::expect_used)]
        getrandom::fill(&mut bytes).expect("the OS random source failed");
        Self(bytes)
    }

    /// The secret as `whsec_<base64>`, to hand to the receiving side once. Keep it out of logs.
    pub fn expose(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("whsec_{}", STANDARD.encode(&*self.0)))
    }

    fn mac(&self, id: &str, timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
        // Any key length is valid for HMAC.
        #[allow(clippy::expect_used)]
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(…)")
    }
}

/// Why a delivery was refused. One variant per class, so a receiver can log the reason and
/// answer every failure the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The secret is not `whsec_<base64>` of 24 to 64 bytes.
    #[error("malformed webhook secret")]
    Secret,
    /// A header is missing, repeated or malformed.
    #[error("missing or malformed webhook header")]
    Header,
    /// The timestamp is outside the tolerance: a replay, or a clock far off.
    #[error("webhook timestamp outside the tolerance")]
    Stale,
    /// No signature matches.
    #[error("no webhook signature matches")]
    Signature,
}

/// The `webhook-signature` value for `body`, sent as message `id` at `timestamp` (Unix seconds).
pub fn sign(secret: &WebhookSecret, id: &str, timestamp: u64, body: &[u8]) -> String {
    let tag = secret.mac(id, timestamp, body).finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// Checks a delivery as a receiver must, before acting on it: the three headers present once,
/// the timestamp within `tolerance` of `now`, and one `v1` signature over exactly these bytes
/// (compared in constant time). Keep the `webhook-id`s seen within the tolerance and drop a
/// repeat: a valid delivery replayed inside the window verifies again.
///
/// # Errors
/// [`WebhookError`], the class of the failure.
pub fn verify(
    secret: &WebhookSecret,
    headers: &http::HeaderMap,
    body: &[u8],
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), WebhookError> {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().map_err(|_| WebhookError::Header),
            _ => Err(WebhookError::Header),
        }
    };
    let id = one(WEBHOOK_ID)?;
    let timestamp: u64 = one(WEBHOOK_TIMESTAMP)?
        .parse()
        .map_err(|_| WebhookError::Header)?;
    let signatures = one(WEBHOOK_SIGNATURE)?;
    if id.is_empty() || id.len() > 256 {
        return Err(WebhookError::Header);
    }
    // A timestamp past what the clock can hold is no time this delivery was sent.
    let sent = UNIX_EPOCH
        .checked_add(Duration::from_secs(timestamp))
        .ok_or(WebhookError::Stale)?;
    let off = now
        .duration_since(sent)
        .or_else(|e| Ok::<_, ()>(e.duration()))
        .unwrap_or(Duration::MAX);
    if off > tolerance {
        return Err(WebhookError::Stale);
    }
    let expected = secret.mac(id, timestamp, body);
    let matches = signatures
        .split(' ')
        .take(8)
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|s| STANDARD.decode(s).ok())
        .any(|tag| expected.clone().verify_slice(&tag).is_ok());
    if matches {
        Ok(())
    } else {
        Err(WebhookError::Signature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str, ts: &str, sig: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in [
            (WEBHOOK_ID, id),
            (WEBHOOK_TIMESTAMP, ts),
            (WEBHOOK_SIGNATURE, sig),
        ] {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                h.insert(k, v);
            }
        }
        h
    }

    #[test]
    fn the_specifications_example_signs_and_verifies() {
        // The example of the Standard Webhooks specification (its reference libraries' tests).
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap_or_else(|_| WebhookSecret::random());
        let (id, ts, body) = (
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        let signature = sign(&secret, id, ts, body);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let now = UNIX_EPOCH + Duration::from_secs(ts + 10);
        let h = headers(id, &ts.to_string(), &format!("v1,bm90IGl0 {signature}"));
        assert_eq!(verify(&secret, &h, body, now, DEFAULT_TOLERANCE), Ok(()));
    }

    #[test]
    fn forged_altered_stale_and_malformed_deliveries_are_refused() {
        let secret = WebhookSecret::random();
        let other = WebhookSecret::random();
        let (id, ts, body) = ("msg_1", 1_800_000_000_u64, b"{\"a\":1}".as_slice());
        let now = UNIX_EPOCH + Duration::from_secs(ts);
        let good = sign(&secret, id, ts, body);
        let check = |h: &http::HeaderMap, body: &[u8], at: SystemTime| {
            verify(&secret, h, body, at, DEFAULT_TOLERANCE)
        };
        let h = headers(id, &ts.to_string(), &good);
        assert_eq!(check(&h, body, now), Ok(()));
        // Another secret, another body, another id, a moved timestamp.
        let forged = headers(id, &ts.to_string(), &sign(&other, id, ts, body));
        assert_eq!(check(&forged, body, now), Err(WebhookError::Signature));
        assert_eq!(check(&h, b"{\"a\":2}", now), Err(WebhookError::Signature));
        let moved = headers("msg_2", &ts.to_string(), &good);
        assert_eq!(check(&moved, body, now), Err(WebhookError::Signature));
        let later = headers(id, &(ts + 60).to_string(), &good);
        let at = now + Duration::from_secs(60);
        assert_eq!(check(&later, body, at), Err(WebhookError::Signature));
        // Replayed after the tolerance, or from the future.
        let late = now + DEFAULT_TOLERANCE + Duration::from_secs(1);
        assert_eq!(check(&h, body, late), Err(WebhookError::Stale));
        let early = now - DEFAULT_TOLERANCE - Duration::from_secs(1);
        assert_eq!(check(&h, body, early), Err(WebhookError::Stale));
        // Missing, malformed or unsupported signatures.
        for (i, t, s) in [
            ("", "1800000000", good.as_str()),
            (id, "soon", good.as_str()),
            (id, "1800000000", "v2,abc"),
            (id, "1800000000", "v1,!!!"),
        ] {
            assert!(check(&headers(i, t, s), body, now).is_err(), "{i} {t} {s}");
        }
        let huge = headers(id, &u64::MAX.to_string(), &good);
        assert_eq!(check(&huge, body, now), Err(WebhookError::Stale));
        let mut twice = h.clone();
        twice.append(WEBHOOK_SIGNATURE, http::HeaderValue::from_static("v1,AAAA"));
        assert_eq!(check(&twice, body, now), Err(WebhookError::Header));
        assert!(format!("{secret:?}").contains('…'));
        assert!(WebhookSecret::parse("whsec_c2hvcnQ=").is_err());
        assert!(WebhookSecret::parse(&secret.expose()).is_ok());
    }
}
