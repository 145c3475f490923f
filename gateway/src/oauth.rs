//! The gateway as an OAuth 2.1 resource server: bearer JWTs checked for issuer, audience (the
//! route's resource, RFC 8707), expiry and signature against the issuer's JWKS, and the
//! route's protected-resource metadata (RFC 9728) served for clients to find the issuer.
//!
//! The principal is the pair `(iss, sub)`, written `"{iss} {sub}"` (an issuer is a URL, which
//! holds no space, so the pair reads back unambiguously); nothing the client says about itself
//! (`clientInfo`) names anyone. The JWKS comes from a file, a URL, or the issuer's own metadata
//! (RFC 8414, then OpenID discovery); a token signed by a key the set does not hold makes the
//! gateway fetch the set again, at most once per [`REFETCH_AT_MOST_EVERY`].
//!
//! Only asymmetric algorithms are accepted: a JWKS is public, and a shared secret in it would
//! let anyone who reads it sign. `jsonwebtoken` checks the signature, `exp` and `nbf` (with the
//! configured leeway), `iss` and `aud`; this module picks the key by `kid`, refuses a key whose
//! own `alg` differs from the token's, and checks the subject and scopes.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::{HeaderMap, header};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mcp_confirm::Principal;
use serde::Deserialize;
use serde_json::Value;

use crate::config::ConfigError;

/// How long a fetched key set is used before it is fetched again.
pub const JWKS_TTL: Duration = Duration::from_secs(600);

/// The least time between two fetches of the key set (a flood of tokens with made-up key ids
/// does not become a flood of requests to the issuer).
pub const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(30);

/// The most a key set or an issuer's metadata may hold (bytes).
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// How long a fetch of the key set or the issuer's metadata may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest bearer token looked at (bytes); a longer one is refused unread.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The algorithms accepted when the file names none.
pub const DEFAULT_ALGORITHMS: [&str; 4] = ["RS256", "PS256", "ES256", "EdDSA"];

/// Where the issuer's signing keys are.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// A JWKS file, read when the configuration is loaded.
    File(PathBuf),
    /// A JWKS at this URL.
    Url(String),
    /// The `jwks_uri` of the issuer's metadata.
    Discover,
}

/// Why a request was not let in. The reason is logged; the caller sees only the class.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// No bearer token (answered `401` without an error code, as RFC 6750 §3.1 says).
    #[error("no bearer token")]
    Missing,
    /// A token that does not hold: `401 invalid_token`.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// A valid token without a scope the route requires: `403 insufficient_scope`.
    #[error("the token lacks the scope {0:?}")]
    InsufficientScope(String),
    /// The keys cannot be had right now (the issuer is down): `401 invalid_token` too, so a
    /// caller cannot tell an outage from a bad token.
    #[error("the issuer's keys cannot be fetched: {0}")]
    NoKeys(String),
}

/// The keys in force, by key id.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Key>,
    /// Keys without a `kid`: usable only when the set holds exactly one key.
    anonymous: Vec<Key>,
    fetched: Option<Instant>,
}

#[derive(Clone)]
struct Key {
    decoding: DecodingKey,
    /// The key's own `alg`, if it names one: a token signed with another is refused.
    alg: Option<Algorithm>,
}

/// The claims the gateway reads (the rest are ignored).
#[derive(Debug, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
    #[serde(flatten)]
    rest: HashMap<String, Value>,
}

/// A resource server for one issuer.
pub struct OAuth {
    issuer: String,
    algorithms: Vec<Algorithm>,
    scopes: Vec<String>,
    roles_claim: Option<String>,
    leeway: Duration,
    source: KeySource,
    keys: ArcSwap<KeySet>,
    /// One fetch at a time; the time of the last attempt.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    client: reqwest::Client,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("issuer", &self.issuer)
            .field("algorithms", &self.algorithms)
            .field("scopes", &self.scopes)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What the file says about the issuer.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// The issuer, exactly as its tokens' `iss` says.
    pub issuer: String,
    /// Where its keys are.
    pub keys: KeySource,
    /// Accepted signature algorithms (asymmetric only).
    pub algorithms: Vec<String>,
    /// Scopes every token must carry.
    pub scopes: Vec<String>,
    /// A claim holding the principal's roles (a list of strings, or one space-separated string).
    pub roles_claim: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
}

impl OAuth {
    /// A resource server for `settings`; a key file is read now.
    ///
    /// # Errors
    /// [`ConfigError`] for an algorithm that is not an asymmetric one, an issuer or key URL
    /// that is not `https` (plain `http` only on a loopback host, for tests), or a key file
    /// that cannot be read or holds no usable key.
    pub fn new(settings: OAuthSettings) -> Result<Self, ConfigError> {
        // One provider for the process, whatever features other crates turned on.
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        let invalid = |why: String| ConfigError::Invalid(format!("auth (oauth): {why}"));
        check_url(&settings.issuer).map_err(|e| invalid(format!("issuer: {e}")))?;
        if let KeySource::Url(url) = &settings.keys {
            check_url(url).map_err(|e| invalid(format!("jwks url: {e}")))?;
        }
        let names: Vec<&str> = if settings.algorithms.is_empty() {
            DEFAULT_ALGORITHMS.to_vec()
        } else {
            settings.algorithms.iter().map(String::as_str).collect()
        };
        let mut algorithms = Vec::new();
        for name in names {
            let algorithm: Algorithm = name
                .parse()
                .map_err(|_| invalid(format!("{name:?} is not a JWS algorithm")))?;
            if matches!(
                algorithm,
                Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
            ) {
                return Err(invalid(format!(
                    "{name}: only asymmetric algorithms (RS*, PS*, ES*, EdDSA): a key set is public"
                )));
            }
            algorithms.push(algorithm);
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| invalid(format!("the HTTP client: {e}")))?;
        let keys = match &settings.keys {
            KeySource::File(path) => {
                let text = std::fs::read(path).map_err(|e| {
                    ConfigError::Secret(format!("the JWKS file {}: {e}", path.display()))
                })?;
                let set = parse_key_set(&text)
                    .map_err(|e| invalid(format!("the JWKS file {}: {e}", path.display())))?;
                KeySet {
                    fetched: Some(Instant::now()),
                    ..set
                }
            }
            _ => KeySet::default(),
        };
        Ok(Self {
            issuer: settings.issuer,
            algorithms,
            scopes: settings.scopes,
            roles_claim: settings.roles_claim,
            leeway: settings.leeway,
            source: settings.keys,
            keys: ArcSwap::from_pointee(keys),
            fetching: tokio::sync::Mutex::new(None),
            client,
        })
    }

    /// The issuer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The scopes every token must carry.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// The principal a request's bearer token names for `resource` (the route's URL, which the
    /// token's `aud` must contain).
    ///
    /// # Errors
    /// [`Rejection`], with the reason for the log.
    pub async fn principal(
        &self,
        headers: &HeaderMap,
        resource: &str,
    ) -> Result<Principal, Rejection> {
        let token = bearer(headers)?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Rejection::Invalid(format!("its header: {e}")))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Rejection::Invalid(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        let key = self.key_for(header.kid.as_deref()).await?;
        if key.alg.is_some_and(|alg| alg != header.alg) {
            return Err(Rejection::Invalid(
                "the token's algorithm is not its key's".into(),
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway.as_secs();
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation)
            .map_err(|e| Rejection::Invalid(e.to_string()))?
            .claims;
        if claims.iss != self.issuer {
            return Err(Rejection::Invalid("another issuer".into()));
        }
        if claims.sub.trim().is_empty() || claims.sub.chars().any(char::is_control) {
            return Err(Rejection::Invalid("an empty or unprintable subject".into()));
        }
        let granted: BTreeSet<&str> = claims
            .scope
            .as_deref()
            .map(|s| s.split_whitespace().collect())
            .or_else(|| {
                claims
                    .scp
                    .as_ref()
                    .map(|s| s.iter().map(String::as_str).collect())
            })
            .unwrap_or_default();
        if let Some(missing) = self.scopes.iter().find(|s| !granted.contains(s.as_str())) {
            return Err(Rejection::InsufficientScope(missing.clone()));
        }
        let mut principal = Principal::new(principal_subject(&claims.iss, &claims.sub));
        if let Some(claim) = &self.roles_claim {
            let roles: Vec<String> = match claims.rest.get(claim) {
                Some(Value::Array(items)) => items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
                _ => Vec::new(),
            };
            principal = principal.with_roles(roles);
        }
        Ok(principal)
    }

    /// The key for `kid`: from the set in force, or from the set fetched again when it does not
    /// hold it (or is stale), at most once per [`REFETCH_AT_MOST_EVERY`].
    async fn key_for(&self, kid: Option<&str>) -> Result<Key, Rejection> {
        let pick = |set: &KeySet| -> Option<Key> {
            match kid {
                Some(kid) => set.by_kid.get(kid).cloned(),
                None if set.by_kid.len() + set.anonymous.len() == 1 => set
                    .anonymous
                    .first()
                    .cloned()
                    .or_else(|| set.by_kid.values().next().cloned()),
                None => None,
            }
        };
        let fresh = |set: &KeySet| {
            matches!(self.source, KeySource::File(_))
                || set.fetched.is_some_and(|at| at.elapsed() < JWKS_TTL)
        };
        {
            let set = self.keys.load();
            if fresh(&set)
                && let Some(key) = pick(&set)
            {
                return Ok(key);
            }
        }
        if matches!(self.source, KeySource::File(_)) {
            return Err(Rejection::Invalid(format!(
                "no key {kid:?} in the key set file"
            )));
        }
        let mut last = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let set = self.keys.load_full();
        if fresh(&set)
            && let Some(key) = pick(&set)
        {
            return Ok(key);
        }
        let recently = last.is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY);
        if !recently {
            *last = Some(Instant::now());
            match self.fetch().await {
                Ok(set) => {
                    tracing::info!(issuer = %self.issuer,
                        keys = set.by_kid.len() + set.anonymous.len(), "the issuer's keys were fetched");
                    self.keys.store(Arc::new(set));
                }
                Err(e) => {
                    tracing::error!(issuer = %self.issuer, error = %e,
                        "the issuer's keys cannot be fetched; the keys in force stay");
                    if set.fetched.is_none() {
                        return Err(Rejection::NoKeys(e));
                    }
                }
            }
        }
        pick(&self.keys.load())
            .ok_or_else(|| Rejection::Invalid(format!("no key {kid:?} in the issuer's key set")))
    }

    /// Fetches the key set from its URL, or from the `jwks_uri` the issuer's metadata names.
    async fn fetch(&self) -> Result<KeySet, String> {
        let url = match &self.source {
            KeySource::Url(url) => url.clone(),
            KeySource::File(_) => return Err("the keys come from a file".into()),
            KeySource::Discover => self.discover().await?,
        };
        let body = self.get(&url).await?;
        let set = parse_key_set(&body)?;
        Ok(KeySet {
            fetched: Some(Instant::now()),
            ..set
        })
    }

    /// The issuer's `jwks_uri`: from its OAuth metadata (RFC 8414), else its OpenID
    /// configuration. The metadata must name this issuer (RFC 8414 §3.3).
    async fn discover(&self) -> Result<String, String> {
        let (origin, path) = split_origin(&self.issuer)?;
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!(
                "{}/.well-known/openid-configuration",
                self.issuer.trim_end_matches('/')
            ),
        ];
        let mut last = String::new();
        for url in candidates {
            match self.get(&url).await {
                Ok(body) => {
                    let metadata: Value = serde_json::from_slice(&body)
                        .map_err(|e| format!("{url}: not JSON: {e}"))?;
                    if metadata.get("issuer").and_then(Value::as_str) != Some(&self.issuer) {
                        return Err(format!("{url}: names another issuer"));
                    }
                    let jwks = metadata
                        .get("jwks_uri")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("{url}: no jwks_uri"))?;
                    check_url(jwks).map_err(|e| format!("{url}: jwks_uri: {e}"))?;
                    return Ok(jwks.to_owned());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// GETs `url`, bounded in size and time.
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self
            .client
            .get(url)
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!("{url}: more than {MAX_DOCUMENT_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// The subject of the principal an issuer's `sub` names: `"{iss} {sub}"` (an issuer is a URL,
/// which holds no space). Bearer tokens and the pages' visitors are named the same way.
pub fn principal_subject(issuer: &str, subject: &str) -> String {
    format!("{issuer} {subject}")
}

/// The bearer token of a request: one `Authorization` header, scheme `Bearer` (any case, RFC
/// 9110 §11.1), a token of sane length.
fn bearer(headers: &HeaderMap) -> Result<&str, Rejection> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(Rejection::Missing);
    };
    if values.next().is_some() {
        return Err(Rejection::Invalid("two Authorization headers".into()));
    }
    let value = value
        .to_str()
        .map_err(|_| Rejection::Invalid("an unreadable Authorization header".into()))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| Rejection::Invalid("not a bearer token".into()))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Rejection::Missing);
    }
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(Rejection::Invalid("an empty or oversized token".into()));
    }
    Ok(token)
}

/// Parses a JWKS, keeping the keys it can use: a key it cannot (an unknown type, a symmetric
/// `oct` key, a key for encryption) is skipped, not an error; a set with none left is.
fn parse_key_set(bytes: &[u8]) -> Result<KeySet, String> {
    #[derive(Deserialize)]
    struct Raw {
        keys: Vec<Value>,
    }
    let raw: Raw = serde_json::from_slice(bytes).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut set = KeySet::default();
    for value in raw.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
            continue;
        };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            continue;
        }
        if jwk
            .common
            .public_key_use
            .as_ref()
            .is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature)
        {
            continue;
        }
        let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        let alg = jwk
            .common
            .key_algorithm
            .and_then(|a| a.to_string().parse::<Algorithm>().ok());
        let key = Key { decoding, alg };
        match jwk.common.key_id {
            Some(kid) => {
                set.by_kid.insert(kid, key);
            }
            None => set.anonymous.push(key),
        }
    }
    if set.by_kid.is_empty() && set.anonymous.is_empty() {
        return Err("it holds no usable signing key".into());
    }
    Ok(set)
}

/// An issuer or key URL must be `https`, or `http` on a loopback host (tests, a local issuer).
fn check_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    let host = uri.host().unwrap_or_default();
    match uri.scheme_str() {
        Some("https") if !host.is_empty() => Ok(()),
        Some("http") if matches!(host, "127.0.0.1" | "localhost" | "[::1]" | "::1") => Ok(()),
        _ => Err(format!(
            "{url:?}: an https URL (plain http only on a loopback host)"
        )),
    }
}

/// `https://host/a/b` → (`https://host`, `/a/b`), trailing `/` dropped.
fn split_origin(url: &str) -> Result<(String, String), String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("{url:?} is not an absolute URL"));
    };
    Ok((
        format!("{scheme}://{authority}"),
        uri.path().trim_end_matches('/').to_owned(),
    ))
}

/// The URL of `resource`'s protected-resource metadata (RFC 9728 §3.1: the well-known name goes
/// between the host and the resource's path).
pub fn metadata_url(resource: &str) -> Option<String> {
    let (origin, path) = split_origin(resource).ok()?;
    Some(format!(
        "{origin}/.well-known/oauth-protected-resource{path}"
    ))
}

/// The protected-resource metadata of `resource` (RFC 9728 §2).
pub fn metadata(resource: &str, oauth: &OAuth) -> Value {
    let mut document = serde_json::json!({
        "resource": resource,
        "authorization_servers": [oauth.issuer],
        "bearer_methods_supported": ["header"],
    });
    if !oauth.scopes.is_empty()
        && let Some(map) = document.as_object_mut()
    {
        map.insert("scopes_supported".into(), oauth.scopes.clone().into());
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_puts_the_well_known_name_before_the_path() {
        assert_eq!(
            metadata_url("https://gw.example/notes/mcp").as_deref(),
            Some("https://gw.example/.well-known/oauth-protected-resource/notes/mcp")
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080/").as_deref(),
            Some("http://127.0.0.1:8080/.well-known/oauth-protected-resource")
        );
        assert!(metadata_url("/relative").is_none());
    }

    #[test]
    fn issuers_and_key_urls_are_https_except_on_loopback() {
        assert!(check_url("https://id.example").is_ok());
        assert!(check_url("http://127.0.0.1:9000").is_ok());
        assert!(check_url("http://localhost:9000/realms/x").is_ok());
        assert!(check_url("http://id.example").is_err());
        assert!(check_url("ftp://id.example").is_err());
        assert!(check_url("id.example").is_err());
    }

    #[test]
    fn symmetric_algorithms_are_refused() {
        let settings = OAuthSettings {
            issuer: "https://id.example".into(),
            keys: KeySource::Discover,
            algorithms: vec!["HS256".into()],
            scopes: Vec::new(),
            roles_claim: None,
            leeway: Duration::from_secs(30),
        };
        let error = OAuth::new(settings).unwrap_err().to_string();
        assert!(error.contains("asymmetric"), "{error}");
    }

    #[test]
    fn a_key_set_keeps_what_it_can_use_and_refuses_none() {
        assert!(parse_key_set(br#"{"keys":[]}"#).is_err());
        assert!(parse_key_set(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err());
        assert!(parse_key_set(b"[]").is_err());
        let set = parse_key_set(
            br#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"},
                {"kty":"weird"},
                {"kty":"OKP","crv":"Ed25519","kid":"e","alg":"EdDSA",
                 "x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#,
        )
        .unwrap();
        assert_eq!(set.by_kid.len(), 1);
        assert!(set.by_kid.contains_key("e"));
        assert_eq!(set.by_kid["e"].alg, Some(Algorithm::EdDSA));
    }

    #[test]
    fn only_one_bearer_token_is_read() {
        let mut headers = HeaderMap::new();
        assert!(matches!(bearer(&headers), Err(Rejection::Missing)));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert!(matches!(bearer(&headers), Err(Rejection::Missing)));
        headers.insert(header::AUTHORIZATION, "bearer abc".parse().unwrap());
        assert_eq!(bearer(&headers).unwrap(), "abc");
        headers.append(header::AUTHORIZATION, "Bearer def".parse().unwrap());
        assert!(matches!(bearer(&headers), Err(Rejection::Invalid(_))));
        headers.insert(
            header::AUTHORIZATION,
            format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1))
                .parse()
                .unwrap(),
        );
        assert!(matches!(bearer(&headers), Err(Rejection::Invalid(_))));
    }
}
