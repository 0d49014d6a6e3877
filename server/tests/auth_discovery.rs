//! The issuer's key set found through its discovery document, over real HTTP on loopback.

use std::time::Duration;

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
