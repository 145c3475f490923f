//! Attacks on the demo's sign-in and its page refusals (the adversarial pass on #19).
//!
//! Tests named `holds_` held when written; the others failed then, and their doc comment says
//! **Was broken**, what broke and how it was fixed.

use crate::demo::cluster::*;

// =============================================================================================
// The demo's sign-in and page refusals.
// =============================================================================================

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Origin spellings that are not exactly the server's own: trailing slash, upper case, default
/// port spelled out, `localhost` for `127.0.0.1`, a path, two Origin headers (one right), and a
/// right Origin with `Sec-Fetch-Site` other than same-origin. None signs in, none signs out.
#[tokio::test]
async fn holds_signin_and_signout_take_the_exact_origin_only() {
    let (_dir, store) = notes_store();
    let demo = instance(&store, shared_grants()).await;
    let base = demo.base.clone();
    let port = base.rsplit(':').next().unwrap().to_owned();
    let wrong: Vec<Vec<(&str, String)>> = vec![
        vec![("origin", format!("{base}/"))],
        vec![("origin", base.to_uppercase())],
        vec![("origin", format!("http://localhost:{port}"))],
        vec![("origin", format!("{base}/signin"))],
        vec![("origin", format!("https://127.0.0.1:{port}"))],
        vec![("origin", "null".to_owned()), ("origin", base.clone())],
        vec![("origin", base.clone()), ("origin", base.clone())],
        vec![
            ("origin", base.clone()),
            ("sec-fetch-site", "same-site".to_owned()),
        ],
        vec![
            ("origin", base.clone()),
            ("sec-fetch-site", "none".to_owned()),
        ],
        vec![
            ("origin", base.clone()),
            ("sec-fetch-site", "SAME-ORIGIN".to_owned()),
        ],
        vec![("sec-fetch-site", "cross-site".to_owned())],
    ];
    for headers in &wrong {
        let mut request = no_redirects()
            .post(format!("{base}/signin"))
            .header("content-type", "application/x-www-form-urlencoded");
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let response = request.body("token=bob-token&next=").send().await.unwrap();
        assert!(
            response.status() == 403 && response.headers().get("set-cookie").is_none(),
            "{headers:?}: {}",
            response.status()
        );
        assert_eq!(
            response.headers()["x-content-type-options"],
            "nosniff",
            "{headers:?}"
        );
    }
    // A real session, then the same spellings on /signout: it survives them all.
    let signed_in = no_redirects()
        .post(format!("{base}/signin"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", base.as_str())
        .header("sec-fetch-site", "same-origin")
        .body("token=alice-token&next=")
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let session = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    for headers in &wrong {
        let mut request = no_redirects()
            .post(format!("{base}/signout"))
            .header("cookie", session.as_str());
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 403, "{headers:?}");
    }
    // Still signed in: the page knows her (404 for an unknown approval, not 401).
    let page = no_redirects()
        .get(format!("{base}/confirm/{}", "0".repeat(32)))
        .header("cookie", session.as_str())
        .send()
        .await
        .unwrap();
    assert_ne!(page.status(), 401, "a refused sign-out ended the session");
}

/// **Was broken (hardening, low).** Every answer the demo's browser-facing routes give to a refused
/// or unroutable request should carry `nosniff` and `X-Frame-Options: DENY`, like its pages.
///
/// The guard's 403s in front of /signin and /signout and the 404 fallback do (#19). A method the
/// route does not serve does not: `GET /signout` and `PUT /signin` get axum's bare `405 Method
/// Not Allowed` (the `MethodRouter`s built in `app::app`, demo/src/app.rs, have no
/// method-not-allowed fallback), without CSP, `X-Frame-Options`, `nosniff` or `no-store`. The
/// body is empty, so the impact is small, but "every refusal carries the page headers" is not
/// true of the demo.
///
/// Fixed: the sign-in routes have a method fallback (`signin::method_not_allowed`) that answers
/// 405 with `Allow` and the pages' headers.
#[tokio::test]
async fn every_demo_refusal_carries_the_page_headers() {
    let (_dir, store) = notes_store();
    let demo = instance(&store, shared_grants()).await;
    let base = demo.base.clone();
    let http = no_redirects();
    let cases = [
        ("POST", "/signin", Some("http://evil.example")),
        ("POST", "/signout", Some("http://evil.example")),
        ("GET", "/signin", Some("http://evil.example")),
        ("GET", "/nothing-here", None),
        ("GET", "/signout", None),
        ("PUT", "/signin", None),
    ];
    let mut missing = Vec::new();
    for (method, path, origin) in cases {
        let mut request = http.request(method.parse().unwrap(), format!("{base}{path}"));
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        let headers = response.headers();
        let ok = headers.get("x-content-type-options").map(|v| v.as_bytes())
            == Some(b"nosniff".as_slice())
            && headers.get("x-frame-options").map(|v| v.as_bytes()) == Some(b"DENY".as_slice());
        if !ok {
            missing.push(format!("{method} {path} -> {}", response.status()));
        }
    }
    assert!(missing.is_empty(), "without the page headers: {missing:?}");
}
