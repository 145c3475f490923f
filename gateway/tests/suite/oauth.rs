//! The gateway as an OAuth 2.1 resource server, against a small issuer of the test's own (its
//! metadata and key set over HTTP, counting each fetch) and tokens signed here: what is let in,
//! what is refused and how it is answered, and that the caller's token stays with the gateway.

use crate::common;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use mcp_confirm_gateway::config::GatewayConfig;
use mcp_confirm_gateway::server::Gateway;
use serde_json::{Value, json};

/// Ed25519 key "k1" (public `x` below), the one the issuer publishes first.
const K1_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEICez1bKzGjJmzXZK7VN12MYZHDy2/7Q2ICACRhwEagJu
-----END PRIVATE KEY-----
";
const K1_X: &str = "SzvCO7VpZ0JTzJp-YxPslHXpHTLTZyKaVj2cLsB7odI";
/// Ed25519 key "k2": published only after a rotation.
const K2_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEINsQvcXAOfpabmQkcNcQZEl27w1l+vgn3/P0/Slrys/7
-----END PRIVATE KEY-----
";
const K2_X: &str = "O6Vb8eIfW5LkxW1DVsR4iGyMiyPnmW-bs3sdH7hKt-A";
/// A P-256 key, published as "ec" for ES256.
const EC_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQggCMrbVkKomVGrAPG
nU4oXLmywFhcTmYxBOAAlE3A2rehRANCAARLHS7MrUUcCSpAqLit3WTyvon+lYSK
tov43BAICxkqPzapv0M2AOpfG7+5VvwFO/1wLuH94PGtfPUVjZnC2i8W
-----END PRIVATE KEY-----
";
const EC_X: &str = "Sx0uzK1FHAkqQKi4rd1k8r6J_pWEiraL-NwQCAsZKj8";
const EC_Y: &str = "Nqm_QzYA6l8bv7lW_AU7_XAu4f3g8a189RWNmcLaLxY";

fn jwk_ed(kid: &str, x: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig", "x": x})
}

fn jwk_ec(kid: &str) -> Value {
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "x": EC_X, "y": EC_Y})
}

/// The issuer: its metadata names `issuer` and its key set; each fetch of the set is counted.
#[derive(Clone)]
struct Issuer {
    url: Arc<Mutex<String>>,
    keys: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    /// The issuer its metadata claims (a lying metadata document names another).
    claims_issuer: Arc<Mutex<Option<String>>>,
}

async fn issuer() -> Issuer {
    let issuer = Issuer {
        url: Arc::default(),
        keys: Arc::new(Mutex::new(
            json!({"keys": [jwk_ed("k1", K1_X), jwk_ec("ec")]}),
        )),
        fetches: Arc::default(),
        claims_issuer: Arc::default(),
    };
    let app = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(|State(i): State<Issuer>| async move {
                let url = i.url.lock().unwrap().clone();
                let named = i
                    .claims_issuer
                    .lock()
                    .unwrap()
                    .clone()
                    .unwrap_or(url.clone());
                axum::Json(json!({"issuer": named, "jwks_uri": format!("{url}/jwks"),
                    "authorization_endpoint": format!("{url}/authorize"),
                    "token_endpoint": format!("{url}/token")}))
            }),
        )
        .route(
            "/jwks",
            get(|State(i): State<Issuer>| async move {
                i.fetches.fetch_add(1, Ordering::SeqCst);
                axum::Json(i.keys.lock().unwrap().clone())
            }),
        )
        .with_state(issuer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    *issuer.url.lock().unwrap() = format!("http://{addr}");
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    issuer
}

impl Issuer {
    fn url(&self) -> String {
        self.url.lock().unwrap().clone()
    }
}

/// One request the upstream saw: its `Authorization` header and its method.
type Request = (Option<String>, String);

/// What the upstream saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

async fn upstream() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/mcp",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: axum::Json<Value>| async move {
                    let message = body.0;
                    let method = message["method"].as_str().unwrap_or("").to_owned();
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let result = if method == "tools/list" {
                        json!({"resultType": "complete", "tools": [
                            {"name": "notes_list", "inputSchema": {"type": "object"},
                             "annotations": {"readOnlyHint": true}},
                            {"name": "notes_delete", "inputSchema": {"type": "object"},
                             "annotations": {"destructiveHint": true}}]})
                    } else {
                        seen.0.lock().unwrap().push((auth, method));
                        json!({"resultType": "complete",
                               "content": [{"type": "text", "text": "ran"}]})
                    };
                    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
                },
            ),
        )
        .with_state(seen.clone());
    (common::serve_upstream(app).await, seen)
}

struct Fixture {
    origin: String,
    issuer: Issuer,
    seen: Seen,
    client: common::Client,
}

/// A gateway at a free port (its audience that port's origin) with OAuth for `issuer`, the
/// `[auth]` section's further lines in `auth`, the route's in `route`.
async fn gateway(auth: &str, route: &str) -> Fixture {
    let operator =
        "upstream_header = { name = \"authorization\", value = { file = \"upstream-token\" } }";
    let route = if route.contains("upstream_header") {
        route.to_owned()
    } else {
        format!("{operator}\n{route}")
    };
    let issuer = issuer().await;
    let (upstream_url, seen) = upstream().await;
    let dir = common::temp_dir("oauth");
    std::fs::write(dir.join("upstream-token"), "Bearer operator-secret\n").unwrap();
    let (listener, addr) = common::bind().await;
    let text = format!(
        r#"
        listen = "{addr}"
        audience = "http://{addr}"
        [auth]
        kind = "oauth"
        issuer = "{issuer}"
        {auth}

        [[route]]
        path = "/notes/mcp"
        upstream = "{upstream_url}"
        {route}

        [[route]]
        path = "/other/mcp"
        upstream = "{upstream_url}"
        "#,
        issuer = issuer.url(),
    );
    let gateway = common::build(&dir, &text).unwrap();
    common::serve(&gateway, listener);
    Fixture {
        origin: format!("http://{addr}"),
        issuer,
        seen,
        client: common::client(),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token signed with `pem` (Ed25519 unless `alg` says ES256) under `kid`, its claims
/// `claims` over the defaults for `fixture`'s `/notes/mcp`.
fn token(f: &Fixture, alg: Algorithm, kid: Option<&str>, pem: &str, claims: Value) -> String {
    let mut body = json!({"iss": f.issuer.url(), "sub": "alice",
        "aud": format!("{}/notes/mcp", f.origin), "exp": now() + 300, "iat": now()});
    for (k, v) in claims.as_object().unwrap() {
        if v.is_null() {
            body.as_object_mut().unwrap().remove(k);
        } else {
            body[k] = v.clone();
        }
    }
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    let key = match alg {
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()).unwrap(),
        _ => EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
    };
    encode(&header, &body, &key).unwrap()
}

fn good(f: &Fixture) -> String {
    token(f, Algorithm::EdDSA, Some("k1"), K1_PEM, json!({}))
}

fn list_call() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}},
            "name": "notes_list", "arguments": {}}})
}

impl Fixture {
    async fn send(
        &self,
        method: http::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, HeaderMap, String) {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.origin))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28");
        if let Some(body) = body {
            request = request
                .header("mcp-method", body["method"].as_str().unwrap_or(""))
                .header("mcp-name", body["params"]["name"].as_str().unwrap_or(""));
        }
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let body = body.map(Value::to_string).unwrap_or_default();
        common::send(&self.client, request, body).await
    }

    async fn call_as(&self, path: &str, token: Option<&str>) -> (u16, HeaderMap, String) {
        self.send(http::Method::POST, path, token, Some(&list_call()))
            .await
    }

    fn challenge(headers: &HeaderMap) -> String {
        headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn the_metadata_names_the_issuer_and_a_401_points_at_it() {
    let f = gateway("scopes = [\"notes\"]", "").await;
    let (status, headers, body) = f
        .send(
            http::Method::GET,
            "/.well-known/oauth-protected-resource/notes/mcp",
            None,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    let metadata: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(metadata["resource"], format!("{}/notes/mcp", f.origin));
    assert_eq!(metadata["authorization_servers"], json!([f.issuer.url()]));
    assert_eq!(metadata["scopes_supported"], json!(["notes"]));
    // No route there, no metadata.
    let (status, _, _) = f
        .send(
            http::Method::GET,
            "/.well-known/oauth-protected-resource/nothing",
            None,
            None,
        )
        .await;
    assert_eq!(status, 404);

    let (status, headers, _) = f.call_as("/notes/mcp", None).await;
    assert_eq!(status, 401);
    assert_eq!(
        Fixture::challenge(&headers),
        format!(
            "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/notes/mcp\"",
            f.origin
        )
    );
    assert!(f.seen.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_valid_token_is_let_in_and_never_passed_upstream() {
    let f = gateway("", "").await;
    let token = good(&f);
    let (status, _, body) = f.call_as("/notes/mcp", Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ran\""), "{body}");
    let seen = f.seen.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [(
            Some("Bearer operator-secret".to_owned()),
            "tools/call".to_owned()
        )],
        "the upstream sees the operator's credential, not the caller's token"
    );
    // The key set was fetched once, by discovery.
    assert_eq!(f.issuer.fetches.load(Ordering::SeqCst), 1);
    // ES256 with the EC key works as well.
    let ec = token_es(&f);
    let (status, _, body) = f.call_as("/notes/mcp", Some(&ec)).await;
    assert_eq!(status, 200, "{body}");
}

fn token_es(f: &Fixture) -> String {
    token(f, Algorithm::ES256, Some("ec"), EC_PEM, json!({}))
}

#[tokio::test]
async fn the_caller_token_goes_upstream_only_where_the_route_says_so() {
    let f = gateway(
        "",
        "pass_caller_token_upstream = true\n\
         upstream_header = { name = \"x-operator\", value = { file = \"upstream-token\" } }",
    )
    .await;
    let token = good(&f);
    let (status, _, body) = f.call_as("/notes/mcp", Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    let seen = f.seen.0.lock().unwrap().clone();
    assert_eq!(
        seen[0].0.as_deref(),
        Some(format!("Bearer {token}").as_str())
    );
}

#[tokio::test]
async fn tokens_that_do_not_hold_are_refused_as_invalid() {
    let f = gateway("scopes = [\"notes\"]", "").await;
    let scoped = json!({"scope": "notes other"});
    let ok = token(&f, Algorithm::EdDSA, Some("k1"), K1_PEM, scoped.clone());
    let (status, _, body) = f.call_as("/notes/mcp", Some(&ok)).await;
    assert_eq!(status, 200, "{body}");

    let with = |claims: Value| {
        let mut all = scoped.clone();
        for (k, v) in claims.as_object().unwrap() {
            all[k] = v.clone();
        }
        token(&f, Algorithm::EdDSA, Some("k1"), K1_PEM, all)
    };
    let cases = [
        ("expired", with(json!({"exp": now() - 600}))),
        ("not yet valid", with(json!({"nbf": now() + 600}))),
        (
            "another issuer",
            with(json!({"iss": "https://evil.example"})),
        ),
        (
            "for another route",
            with(json!({"aud": format!("{}/other/mcp", f.origin)})),
        ),
        (
            "for the bare origin",
            with(json!({"aud": f.origin.clone()})),
        ),
        ("without an audience", with(json!({"aud": null}))),
        ("without exp", with(json!({"exp": null}))),
        ("without a subject", with(json!({"sub": null}))),
        ("a blank subject", with(json!({"sub": "  "}))),
        (
            "signed by another key under k1",
            token(&f, Algorithm::EdDSA, Some("k1"), K2_PEM, scoped.clone()),
        ),
        (
            "ES256 claiming the EdDSA key",
            token(&f, Algorithm::ES256, Some("k1"), EC_PEM, scoped.clone()),
        ),
        (
            "no key id, two keys published",
            token(&f, Algorithm::EdDSA, None, K1_PEM, scoped.clone()),
        ),
        ("garbage", "not.a.jwt".to_owned()),
        ("alg none", unsigned(&f)),
        (
            "HS256 with the public key as its secret",
            hs256_confusion(&f),
        ),
    ];
    for (what, token) in cases {
        let (status, headers, body) = f.call_as("/notes/mcp", Some(&token)).await;
        assert_eq!(status, 401, "{what}: {body}");
        let challenge = Fixture::challenge(&headers);
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\", resource_metadata="),
            "{what}: {challenge}"
        );
        assert_eq!(body, "The bearer token is not valid here.", "{what}");
    }
    // A valid token without the scope: 403, and the scope named.
    let unscoped = good(&f);
    let (status, headers, _) = f.call_as("/notes/mcp", Some(&unscoped)).await;
    assert_eq!(status, 403);
    assert!(
        Fixture::challenge(&headers)
            .starts_with("Bearer error=\"insufficient_scope\", scope=\"notes\""),
        "{:?}",
        headers
    );
    // Only the one good call ran.
    assert_eq!(f.seen.0.lock().unwrap().len(), 1);
}

/// `alg: none`, no signature.
fn unsigned(f: &Fixture) -> String {
    use base64_url as b64;
    let header = b64::encode(br#"{"alg":"none","typ":"JWT"}"#);
    let claims = b64::encode(
        json!({"iss": f.issuer.url(), "sub": "alice",
            "aud": format!("{}/notes/mcp", f.origin), "exp": now() + 300})
        .to_string()
        .as_bytes(),
    );
    format!("{header}.{claims}.")
}

/// The classic confusion: HS256 keyed with the bytes of a public key.
fn hs256_confusion(f: &Fixture) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let claims = json!({"iss": f.issuer.url(), "sub": "alice",
        "aud": format!("{}/notes/mcp", f.origin), "exp": now() + 300});
    encode(&header, &claims, &EncodingKey::from_secret(K1_X.as_bytes())).unwrap()
}

/// Base64url without padding, for the hand-made token.
mod base64_url {
    pub fn encode(bytes: &[u8]) -> String {
        const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_made_up_key_ids_fetch_nothing_more() {
    let f = gateway("", "").await;
    let (status, _, _) = f.call_as("/notes/mcp", Some(&good(&f))).await;
    assert_eq!(status, 200);
    assert_eq!(f.issuer.fetches.load(Ordering::SeqCst), 1);
    // A token under a key the set in force lacks fetches again at most once per 30 s, so a
    // rotation is shown on a second gateway whose first fetch finds the rotated set.
    let g = gateway("", "").await;
    *g.issuer.keys.lock().unwrap() = json!({"keys": [jwk_ed("k1", K1_X), jwk_ed("k2", K2_X)]});
    let k2 = token(&g, Algorithm::EdDSA, Some("k2"), K2_PEM, json!({}));
    let (status, _, body) = g.call_as("/notes/mcp", Some(&k2)).await;
    assert_eq!(status, 200, "{body}");
    // A flood of tokens under key ids nobody published: at most one more fetch.
    for n in 0..20 {
        let kid = format!("made-up-{n}");
        let forged = token(&g, Algorithm::EdDSA, Some(&kid), K1_PEM, json!({}));
        let (status, _, _) = g.call_as("/notes/mcp", Some(&forged)).await;
        assert_eq!(status, 401);
    }
    assert!(g.issuer.fetches.load(Ordering::SeqCst) <= 2);
    // And the known key still works throughout.
    let (status, _, _) = g.call_as("/notes/mcp", Some(&good(&g))).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn metadata_that_names_another_issuer_yields_no_keys() {
    let f = gateway("", "").await;
    *f.issuer.claims_issuer.lock().unwrap() = Some("https://evil.example".into());
    let (status, headers, _) = f.call_as("/notes/mcp", Some(&good(&f))).await;
    assert_eq!(status, 401);
    assert!(Fixture::challenge(&headers).contains("invalid_token"));
    assert_eq!(f.issuer.fetches.load(Ordering::SeqCst), 0);
    assert!(f.seen.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_key_file_needs_no_issuer_online() {
    let dir = common::temp_dir("oauth-jwks");
    std::fs::write(
        dir.join("jwks.json"),
        json!({"keys": [jwk_ed("k1", K1_X)]}).to_string(),
    )
    .unwrap();
    let (upstream_url, seen) = upstream().await;
    let (listener, addr) = common::bind().await;
    // The issuer's address is a closed port: nothing is fetched.
    let text = format!(
        r#"
        listen = "{addr}"
        audience = "http://{addr}"
        [auth]
        kind = "oauth"
        issuer = "http://127.0.0.1:9"
        jwks = {{ file = "jwks.json" }}
        [[route]]
        path = "/notes/mcp"
        upstream = "{upstream_url}"
        "#
    );
    let gateway = common::build(&dir, &text).unwrap();
    common::serve(&gateway, listener);
    let f = Fixture {
        origin: format!("http://{addr}"),
        issuer: Issuer {
            url: Arc::new(Mutex::new("http://127.0.0.1:9".into())),
            keys: Arc::default(),
            fetches: Arc::default(),
            claims_issuer: Arc::default(),
        },
        seen,
        client: common::client(),
    };
    let (status, _, body) = f.call_as("/notes/mcp", Some(&good(&f))).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_key_removed_from_the_key_file_stops_verifying_without_touching_the_configuration() {
    // #52, finding 7a, for a JWKS file: read only with the configuration, a key removed from it
    // kept verifying tokens until the configuration file itself changed.
    let dir = common::temp_dir("oauth-jwks-watch");
    let jwks = dir.join("jwks.json");
    let both = json!({"keys": [jwk_ed("k1", K1_X), jwk_ed("k2", K2_X)]});
    std::fs::write(&jwks, both.to_string()).unwrap();
    let (upstream_url, seen) = upstream().await;
    let (listener, addr) = common::bind().await;
    let text = format!(
        r#"
        listen = "{addr}"
        audience = "http://{addr}"
        [auth]
        kind = "oauth"
        issuer = "http://127.0.0.1:9"
        jwks = {{ file = "jwks.json" }}
        [[route]]
        path = "/notes/mcp"
        upstream = "{upstream_url}"
        "#
    );
    let gateway = common::build(&dir, &text).unwrap();
    common::serve(&gateway, listener);
    gateway.watch(dir.join("gateway.toml"), dir.clone());
    let f = Fixture {
        origin: format!("http://{addr}"),
        issuer: Issuer {
            url: Arc::new(Mutex::new("http://127.0.0.1:9".into())),
            keys: Arc::default(),
            fetches: Arc::default(),
            claims_issuer: Arc::default(),
        },
        seen,
        client: common::client(),
    };
    let k2 = token(&f, Algorithm::EdDSA, Some("k2"), K2_PEM, json!({}));
    assert_eq!(f.call_as("/notes/mcp", Some(&k2)).await.0, 200);
    // k2 leaves the key file; the configuration file is not touched.
    std::fs::write(&jwks, json!({"keys": [jwk_ed("k1", K1_X)]}).to_string()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut status = 200;
    while status != 401 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        status = f.call_as("/notes/mcp", Some(&k2)).await.0;
    }
    assert_eq!(status, 401, "a token of the removed key still verifies");
    assert_eq!(f.call_as("/notes/mcp", Some(&good(&f))).await.0, 200);
}

#[test]
fn oauth_files_a_hurried_operator_writes_are_refused() {
    let base = r#"
        [auth]
        kind = "oauth"
        issuer = "https://id.example"
        [[route]]
        path = "/notes/mcp"
        upstream = "http://127.0.0.1:9000/mcp"
    "#;
    for (text, says) in [
        // An audience with a path: tokens would name URLs the gateway does not serve.
        (
            format!("audience = \"https://gw.example/base\"\n{base}"),
            "no path",
        ),
        (format!("audience = \"gw.example\"\n{base}"), "no path"),
        (
            base.replace(
                "issuer = \"https://id.example\"",
                "issuer = \"https://id.example\"\nleeway = \"1h\"",
            ),
            "at most 5 minutes",
        ),
    ] {
        let error = GatewayConfig::from_toml(&text).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
    }
    // These parse, and are refused when the gateway is built.
    let dir = std::env::temp_dir();
    for (text, says) in [
        (
            base.replace("https://id.example", "http://id.example"),
            "https URL",
        ),
        (
            base.replace(
                "issuer = \"https://id.example\"",
                "issuer = \"https://id.example\"\nalgorithms = [\"HS256\"]",
            ),
            "asymmetric",
        ),
        (
            base.replace(
                "issuer = \"https://id.example\"",
                "issuer = \"https://id.example\"\njwks = { url = \"http://keys.example/jwks\" }",
            ),
            "https URL",
        ),
    ] {
        let config = GatewayConfig::from_toml(&text).unwrap();
        let error = Gateway::build(&config, &dir).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
    }
}
