//! The issuer's key set found through its discovery document, over real HTTP on loopback: with
//! a small server of the test's own, and end to end, three `picketd` in front of a real OpenID
//! Provider (npm's `oidc-provider`, `tests/oidc_provider/`) that rotates its signing keys.
#![cfg(not(madsim))]

mod common;

use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use picket_core::locks::{Actor, Role};
use picket_server::auth::dev::DevIssuer;
use picket_server::auth::jwks::{DiscoveryJwks, JwksSource};
use picket_server::auth::oidc::FETCH_TIMEOUT;
use picket_server::auth::{OidcConfig, OidcVerifier};

/// Serves a discovery document naming `doc_issuer` and the dev issuer's JWKS; answers the base URL.
async fn serve_issuer(jwks_json: String, doc_issuer: Option<&str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let issuer = doc_issuer.map_or_else(|| base.clone(), str::to_owned);
    let discovery = serde_json::json!({
        "issuer": issuer,
        "jwks_uri": format!("{base}/protocol/openid-connect/certs"),
    })
    .to_string();
    let app = Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move || async move { discovery }),
        )
        .route(
            "/protocol/openid-connect/certs",
            get(move || async move { jwks_json }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn keys_come_from_the_discovery_documents_jwks_uri() {
    // The issuer URL is only known once the port is: mint with a second issuer of the same key.
    let key = DevIssuer::generate("placeholder", "picket").unwrap();
    let base = serve_issuer(key.jwks_json(), None).await;
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("k");
    key.save_key(&key_path).unwrap();
    let dev = DevIssuer::load_or_generate(&base, "picket", &key_path).unwrap();

    let source = DiscoveryJwks::new(&base, FETCH_TIMEOUT).unwrap();
    assert_eq!(source.fetch().await.unwrap().keys.len(), 1);
    let verifier = OidcVerifier::new(OidcConfig::new(&base, "picket"), Box::new(source)).unwrap();
    let token = dev.mint("erin", &["picket-operator"], Duration::from_secs(60));
    let caller = verifier.verify(&token).await.unwrap();
    assert_eq!(caller.actor(None), Actor::new("erin", &[Role::OnCall]));
}

#[tokio::test]
async fn a_discovery_document_for_another_issuer_is_refused() {
    let dev = DevIssuer::generate("placeholder", "picket").unwrap();
    let base = serve_issuer(dev.jwks_json(), Some("https://evil.example.invalid")).await;
    let source = DiscoveryJwks::new(&base, FETCH_TIMEOUT).unwrap();
    let error = source.fetch().await.unwrap_err();
    assert!(error.contains("evil.example.invalid"), "{error}");
    let unreachable = DiscoveryJwks::new("http://127.0.0.1:1", Duration::from_secs(2)).unwrap();
    assert!(unreachable.fetch().await.is_err());
}

/// The key id a JWT's header names.
fn kid_of(token: &str) -> String {
    use base64::Engine;
    let header = token.split('.').next().unwrap();
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .unwrap();
    let header: serde_json::Value = serde_json::from_slice(&header).unwrap();
    header["kid"].as_str().unwrap().to_owned()
}

/// Reads `holds` with `token` until it is accepted; until then it must be refused for its
/// unknown key (`unknown_kid`), which makes picketd read the keys again once a refresh is due.
async fn until_accepted(holds: &str, token: &str, what: &str) {
    common::eventually(Duration::from_secs(20), what, || async move {
        let (status, body) = common::get_as(holds, Some(token)).await.unwrap();
        if status == 200 {
            return Some(());
        }
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("unknown_kid"), "{body}");
        None
    })
    .await;
}

/// docs/auth.md, "Key cache and rotation", against the real provider: `picketd` with `[oidc]
/// issuer` and no `jwks_file` loads the keys through the discovery document; when the provider
/// rotates (publishes a new key and signs with it), a token of the new key is accepted without a
/// restart (its unknown `kid` refreshes the keys); tokens naming unknown keys refresh at most
/// once per `refresh_interval_min_s`; and a key the provider removed stops verifying after the
/// next refresh (`unknown_kid`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picketd_follows_the_real_providers_key_rotation() {
    use common::oidc_provider::{cluster_with, Provider};

    let provider = Provider::start().await;
    let interval = Duration::from_secs(1);
    let (cluster, _secret) = cluster_with(&provider, "refresh_interval_min_s = 1").await;
    // A local read (`?stale=true`): the token is verified by replica 0 alone, never forwarded.
    let holds = format!("{}/v1/namespaces/orders/holds?stale=true", cluster.http[0]);
    let read = |token: String| {
        let holds = holds.clone();
        async move { common::get_as(&holds, Some(&token)).await.unwrap() }
    };

    // Found by discovery: every replica read the discovery document and the JWKS it names at
    // start, and the provider's token is accepted.
    let at_start = provider.fetches().await;
    assert!(at_start.discovery >= 3, "{at_start:?}");
    assert!(at_start.jwks >= 3, "{at_start:?}");
    let first = provider.worker_token().await;
    assert_eq!(kid_of(&first), "test-key-1");
    let (status, body) = read(first.clone()).await;
    assert_eq!(status, 200, "{body}");

    // The provider rotates: a new key, signing, and the old one still published.
    provider.publish_keys(&["test-key-2", "test-key-1"]).await;
    let second = provider.worker_token().await;
    assert_eq!(kid_of(&second), "test-key-2");
    // Its kid is unknown to picketd: refused (`unknown_kid`) only while a refresh is not due,
    // then accepted, the same processes running.
    until_accepted(&holds, &second, "the new key's token is accepted").await;
    assert_eq!(
        read(first.clone()).await.0,
        200,
        "the old key is still published"
    );

    // Tokens naming a key the provider never had: refused, naming the rule, and they make
    // picketd read the JWKS at most once per refresh interval, however many come.
    let stranger = picket_server::auth::dev::DevIssuer::generate(&provider.issuer, "picket")
        .unwrap()
        .mint("mallory", &["picket-admin"], Duration::from_secs(60));
    let before = provider.fetches().await.jwks;
    let began = Instant::now();
    for _ in 0..30 {
        let (status, body) = read(stranger.clone()).await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("unknown_kid"), "{body}");
    }
    let elapsed = began.elapsed();
    let fetched = provider.fetches().await.jwks - before;
    let allowed = 1 + elapsed.as_secs() / interval.as_secs();
    assert!(
        fetched <= allowed,
        "{fetched} JWKS reads for 30 unknown kids in {elapsed:?} (at most one a second)"
    );

    // The provider rotates again and removes the first key: once a refresh happened (the
    // newest key's token brings one), the first key's tokens are refused.
    provider.publish_keys(&["test-key-3", "test-key-2"]).await;
    let third = provider.worker_token().await;
    assert_eq!(kid_of(&third), "test-key-3");
    until_accepted(&holds, &third, "the newest key's token is accepted").await;
    let (status, body) = read(first).await;
    assert_eq!(status, 401, "the removed key: {body}");
    assert!(body.contains("unknown_kid"), "{body}");
    assert!(body.contains("test-key-1"), "{body}");
    assert_eq!(read(second).await.0, 200, "test-key-2 is still published");

    drop(cluster);
    drop(provider);
}
