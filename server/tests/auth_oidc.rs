//! OIDC verification against a JWKS: the accepted token, each refusal, role mapping, key
//! refresh. Keys: server/tests/fixtures/oidc (test-only RSA keys, see generate.sh there).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use picket_core::locks::{Actor, Role};
use picket_server::auth::dev::{unix_now_s, DevIssuer};
use picket_server::auth::jwks::{
    parse_jwks, BoxFuture, FileJwks, JwksSource, RefreshPolicy, StaticJwks,
};
use picket_server::auth::{
    AuthError, AuthMethod, Authenticator, OidcConfig, OidcVerifier, AUTHORIZATION_METADATA,
    PRINCIPAL_METADATA, ROLES_METADATA,
};
use serde_json::{json, Value};
use tonic::metadata::MetadataMap;
use tonic::Code;

const ISSUER: &str = "https://sso.example.invalid/realms/ops";
const AUDIENCE: &str = "picket";
const KID: &str = "test-rsa-1";
const PRIVATE: &[u8] = include_bytes!("fixtures/oidc/rsa-private.pem");
const PUBLIC: &[u8] = include_bytes!("fixtures/oidc/rsa-public.pem");
const OTHER_PRIVATE: &[u8] = include_bytes!("fixtures/oidc/other-private.pem");
const JWKS: &[u8] = include_bytes!("fixtures/oidc/jwks.json");

fn jwks() -> JwkSet {
    parse_jwks(JWKS).unwrap()
}

fn verifier() -> OidcVerifier {
    OidcVerifier::new(
        OidcConfig::new(ISSUER, AUDIENCE),
        Box::new(StaticJwks(jwks())),
    )
    .unwrap()
}

fn claims(principal: &str, roles: &[&str]) -> Value {
    let now = unix_now_s();
    json!({
        "iss": ISSUER, "aud": ["account", AUDIENCE], "sub": "3f1c-uuid",
        "preferred_username": principal, "realm_access": {"roles": roles},
        "iat": now, "nbf": now, "exp": now + 300, "azp": "picketctl",
    })
}

fn sign_rs256(claims: &Value, key_pem: &[u8], kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(
        &header,
        claims,
        &EncodingKey::from_rsa_pem(key_pem).unwrap(),
    )
    .unwrap()
}

fn token(claims: &Value) -> String {
    sign_rs256(claims, PRIVATE, Some(KID))
}

async fn refused(token: &str) -> AuthError {
    verifier().verify(token).await.unwrap_err()
}

#[tokio::test]
async fn a_valid_keycloak_shaped_token_is_accepted_with_its_roles() {
    let roles = [
        "offline_access",
        "picket-operator",
        "picket-incident-commander:orders",
    ];
    let caller = verifier()
        .verify(&token(&claims("alice", &roles)))
        .await
        .unwrap();
    assert_eq!(caller.principal, "alice");
    assert_eq!(caller.method, AuthMethod::Oidc);
    assert_eq!(caller.actor(None), Actor::new("alice", &[Role::OnCall]));
    assert_eq!(
        caller.actor(Some("orders")),
        Actor::new("alice", &[Role::OnCall, Role::IncidentCommander])
    );
    let admin = caller
        .require(&[Role::ClassAdmin], Some("orders"))
        .unwrap_err();
    assert_eq!(admin.status().code(), Code::PermissionDenied);
    assert!(admin.status().message().contains("picket-admin"), "{admin}");
}

#[tokio::test]
async fn principal_can_be_the_subject() {
    let mut config = OidcConfig::new(ISSUER, AUDIENCE);
    config.claims.principal_claim = "sub".to_owned();
    let v = OidcVerifier::new(config, Box::new(StaticJwks(jwks()))).unwrap();
    let caller = v.verify(&token(&claims("alice", &[]))).await.unwrap();
    assert_eq!(caller.principal, "3f1c-uuid");
    assert!(caller.roles.is_empty());
}

#[tokio::test]
async fn expired_and_not_yet_valid_tokens_are_refused() {
    let now = unix_now_s();
    let mut c = claims("alice", &["picket-operator"]);
    c["exp"] = json!(now - 120); // beyond the 30 s leeway
    let error = refused(&token(&c)).await;
    assert_eq!(error, AuthError::Expired { leeway_s: 30 });
    assert_eq!(error.status().code(), Code::Unauthenticated);
    assert!(error.status().message().contains("expired"));

    let mut c = claims("alice", &[]);
    c["exp"] = json!(now - 10); // within the leeway: accepted
    assert!(verifier().verify(&token(&c)).await.is_ok());

    let mut c = claims("alice", &[]);
    c["nbf"] = json!(now + 600);
    assert_eq!(
        refused(&token(&c)).await,
        AuthError::NotYetValid { leeway_s: 30 }
    );
}

#[tokio::test]
async fn wrong_issuer_or_audience_is_refused() {
    let mut c = claims("alice", &[]);
    c["iss"] = json!("https://evil.example.invalid/realms/ops");
    let error = refused(&token(&c)).await;
    assert_eq!(error.rule(), "wrong_issuer");
    assert!(error.to_string().contains(ISSUER));

    let mut c = claims("alice", &[]);
    c["aud"] = json!("account");
    let error = refused(&token(&c)).await;
    assert_eq!(error.rule(), "wrong_audience");
    assert_eq!(error.status().code(), Code::Unauthenticated);

    let mut c = claims("alice", &[]);
    c.as_object_mut().unwrap().remove("aud");
    assert_eq!(
        refused(&token(&c)).await,
        AuthError::MissingClaim("aud".to_owned())
    );
}

#[tokio::test]
async fn a_bad_signature_is_refused() {
    // Signed by another key under the trusted kid.
    let forged = sign_rs256(
        &claims("mallory", &["picket-admin"]),
        OTHER_PRIVATE,
        Some(KID),
    );
    assert_eq!(refused(&forged).await, AuthError::BadSignature);
    // A valid token whose payload was swapped.
    let good = token(&claims("alice", &[]));
    let evil = token(&claims("mallory", &["picket-admin"]));
    let parts: Vec<&str> = good.split('.').collect();
    let evil_payload = evil.split('.').nth(1).unwrap();
    let spliced = format!("{}.{}.{}", parts[0], evil_payload, parts[2]);
    let error = refused(&spliced).await;
    assert_eq!(error, AuthError::BadSignature);
    assert_eq!(error.status().code(), Code::Unauthenticated);
}

#[tokio::test]
async fn alg_none_is_refused() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"none","kid":"{KID}"}}"#));
    let payload = URL_SAFE_NO_PAD.encode(claims("mallory", &["picket-admin"]).to_string());
    let error = refused(&format!("{header}.{payload}.")).await;
    assert_eq!(error, AuthError::AlgorithmNone);
    assert_eq!(error.status().code(), Code::Unauthenticated);
    assert!(error.status().message().contains("none"));
}

#[tokio::test]
async fn hs256_keyed_with_the_public_key_is_refused() {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(KID.to_owned());
    let confused = jsonwebtoken::encode(
        &header,
        &claims("mallory", &["picket-admin"]),
        &EncodingKey::from_secret(PUBLIC),
    )
    .unwrap();
    let error = refused(&confused).await;
    assert_eq!(
        error,
        AuthError::SymmetricAlgorithm {
            alg: "HS256".to_owned()
        }
    );
    assert_eq!(error.status().code(), Code::Unauthenticated);
}

#[tokio::test]
async fn a_token_alg_other_than_the_keys_is_refused() {
    let mut header = Header::new(Algorithm::RS512);
    header.kid = Some(KID.to_owned());
    let t = jsonwebtoken::encode(
        &header,
        &claims("alice", &[]),
        &EncodingKey::from_rsa_pem(PRIVATE).unwrap(),
    )
    .unwrap();
    assert_eq!(refused(&t).await.rule(), "alg_mismatch");
}

#[tokio::test]
async fn unknown_and_missing_kid_are_refused() {
    let error = refused(&sign_rs256(
        &claims("alice", &[]),
        PRIVATE,
        Some("rotated-away"),
    ))
    .await;
    assert_eq!(
        error,
        AuthError::UnknownKid {
            kid: "rotated-away".to_owned()
        }
    );
    assert_eq!(error.status().code(), Code::Unauthenticated);
    assert_eq!(
        refused(&sign_rs256(&claims("alice", &[]), PRIVATE, None)).await,
        AuthError::MissingKid
    );
}

/// A key set that can be rotated, counting fetches.
struct Rotating {
    set: Mutex<JwkSet>,
    fetches: Arc<AtomicUsize>,
}

impl JwksSource for Rotating {
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, String>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let set = self.set.lock().unwrap().clone();
        Box::pin(async move { Ok(set) })
    }
    fn describe(&self) -> String {
        "rotating".to_owned()
    }
}

#[tokio::test]
async fn unknown_kid_refreshes_the_keys_at_most_once_per_interval() {
    let dev = DevIssuer::generate(ISSUER, AUDIENCE).unwrap();
    let fetches = Arc::new(AtomicUsize::new(0));
    let source = Rotating {
        set: Mutex::new(jwks()),
        fetches: fetches.clone(),
    };
    let v = OidcVerifier::new(OidcConfig::new(ISSUER, AUDIENCE), Box::new(source)).unwrap();
    assert!(v.verify(&token(&claims("alice", &[]))).await.is_ok());
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "first use loads the keys"
    );
    let dev_token = dev.mint("bob", &["picket-operator"], Duration::from_secs(60));
    for _ in 0..5 {
        assert_eq!(
            v.verify(&dev_token).await.unwrap_err().rule(),
            "unknown_kid"
        );
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "the keys were fetched less than refresh_interval_min (30 s) ago: a flood of unknown \
         kids does not reach the issuer"
    );
    assert!(v.verify(&token(&claims("alice", &[]))).await.is_ok());
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "known kids use the cache"
    );
}

#[tokio::test]
async fn a_rotated_key_is_picked_up_on_its_first_token() {
    let dev = DevIssuer::generate(ISSUER, AUDIENCE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, JWKS).unwrap();
    let mut config = OidcConfig::new(ISSUER, AUDIENCE);
    config.refresh = RefreshPolicy {
        refresh_interval_min: Duration::ZERO,
        max_age: Duration::from_secs(3600),
    };
    let v = OidcVerifier::new(config, Box::new(FileJwks { path: path.clone() })).unwrap();
    assert_eq!(v.keys().refresh().await.unwrap(), 1);
    let dev_token = dev.mint("bob", &["picket-operator"], Duration::from_secs(60));
    assert_eq!(
        v.verify(&dev_token).await.unwrap_err().rule(),
        "unknown_kid"
    );
    dev.write_jwks(&path).unwrap(); // the issuer rotates to the new key
    let caller = v.verify(&dev_token).await.unwrap();
    assert_eq!(caller.actor(None), Actor::new("bob", &[Role::OnCall]));
    // The old key is gone from the set: its tokens are refused now.
    assert_eq!(
        v.verify(&token(&claims("alice", &[])))
            .await
            .unwrap_err()
            .rule(),
        "unknown_kid"
    );
}

#[tokio::test]
async fn an_unreadable_key_set_is_unavailable_not_unauthenticated() {
    let v = OidcVerifier::new(
        OidcConfig::new(ISSUER, AUDIENCE),
        Box::new(FileJwks {
            path: "/nonexistent/jwks.json".into(),
        }),
    )
    .unwrap();
    for _ in 0..2 {
        // Also the second time, within the refresh interval: still "unavailable", not the kid.
        let error = v.verify(&token(&claims("alice", &[]))).await.unwrap_err();
        assert_eq!(error.rule(), "keys_unavailable");
        assert_eq!(error.status().code(), Code::Unavailable);
        assert!(
            error.to_string().contains("/nonexistent/jwks.json"),
            "{error}"
        );
    }
}

fn metadata(pairs: &[(&'static str, &str)]) -> MetadataMap {
    let mut m = MetadataMap::new();
    for (k, v) in pairs {
        m.insert(*k, v.parse().unwrap());
    }
    m
}

#[tokio::test]
async fn the_authenticator_reads_bearer_tokens_from_metadata() {
    let dev = DevIssuer::generate(ISSUER, AUDIENCE).unwrap();
    let auth = Authenticator::oidc(dev.verifier());
    let t = dev.mint(
        "carol",
        &["picket-operator:orders"],
        Duration::from_secs(60),
    );
    let md = metadata(&[(AUTHORIZATION_METADATA, &format!("Bearer {t}"))]);
    assert_eq!(
        auth.admin_actor(&md, Some("orders")).await.unwrap(),
        Actor::new("carol", &[Role::OnCall])
    );
    assert_eq!(
        auth.admin_actor(&md, Some("billing")).await.unwrap(),
        Actor::new("carol", &[])
    );
    assert_eq!(auth.client_principal(&md).await.unwrap(), "carol");
    // The synchronous, cache-only path works once the keys are loaded.
    assert_eq!(auth.authenticate_cached(&md).unwrap().principal, "carol");

    let missing = auth.authenticate(&MetadataMap::new()).await.unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    assert!(
        missing.message().contains("Bearer"),
        "{}",
        missing.message()
    );
    let basic = metadata(&[(AUTHORIZATION_METADATA, "Basic YWxpY2U6cHc=")]);
    assert_eq!(
        auth.authenticate(&basic).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    // Dev metadata means nothing to an OIDC server.
    let dev_md = metadata(&[
        (PRINCIPAL_METADATA, "alice"),
        (ROLES_METADATA, "picket-admin"),
    ]);
    assert!(auth.authenticate(&dev_md).await.is_err());
    assert_eq!(
        auth.client_principal(&MetadataMap::new()).await.unwrap(),
        "unauthenticated"
    );
    // A lock client presenting a bad token is refused, not downgraded.
    let bad = metadata(&[(AUTHORIZATION_METADATA, "Bearer x.y.z")]);
    assert!(auth.client_principal(&bad).await.is_err());
}

#[tokio::test]
async fn status_details_carry_the_rule() {
    let error = refused(&sign_rs256(&claims("a", &[]), PRIVATE, Some("nope"))).await;
    let detail = picket_proto::status::error_detail(&error.status()).unwrap();
    assert_eq!(detail.rule, "unknown_kid");
    assert!(!detail.retryable);
}

#[tokio::test]
async fn insecure_dev_mode_believes_metadata_and_disabled_mode_refuses() {
    let auth = Authenticator::insecure_dev();
    assert!(auth.is_insecure());
    let md = metadata(&[
        (PRINCIPAL_METADATA, "alice"),
        (
            ROLES_METADATA,
            "on-call, picket-admin, picket-incident-commander:orders",
        ),
    ]);
    let caller = auth.authenticate(&md).await.unwrap();
    assert_eq!(caller.method, AuthMethod::InsecureDev);
    assert_eq!(
        caller.actor(None),
        Actor::new("alice", &[Role::OnCall, Role::ClassAdmin])
    );
    assert!(caller
        .actor(Some("orders"))
        .roles
        .contains(&Role::IncidentCommander));
    let bad = metadata(&[(PRINCIPAL_METADATA, "bob"), (ROLES_METADATA, "root")]);
    let error = auth.authenticate(&bad).await.unwrap_err();
    assert!(error.message().contains("root"), "{}", error.message());
    assert!(auth.authenticate(&MetadataMap::new()).await.is_err());
    assert_eq!(auth.client_principal(&md).await.unwrap(), "alice");

    let off = Authenticator::disabled();
    let error = off.admin_actor(&md, None).await.unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);
    assert_eq!(off.client_principal(&md).await.unwrap(), "unauthenticated");
}

#[tokio::test]
async fn the_dev_issuer_key_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("dev-issuer.key");
    let first = DevIssuer::load_or_generate(ISSUER, AUDIENCE, &key).unwrap();
    let t = first.mint("dave", &["picket-admin"], Duration::from_secs(60));
    let again = DevIssuer::load_or_generate(ISSUER, AUDIENCE, &key).unwrap();
    assert_eq!(first.kid(), again.kid());
    let caller = again.verifier().verify(&t).await.unwrap();
    assert_eq!(caller.actor(None), Actor::new("dave", &[Role::ClassAdmin]));
    let expired = first.mint_claims(json!({
        "iss": ISSUER, "aud": AUDIENCE, "preferred_username": "dave", "exp": unix_now_s() - 3600,
    }));
    assert_eq!(
        again.verifier().verify(&expired).await.unwrap_err().rule(),
        "token_expired"
    );
}

#[tokio::test]
async fn an_oidc_config_section_with_a_jwks_file_builds_a_working_authenticator() {
    let dir = tempfile::tempdir().unwrap();
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, JWKS).unwrap();
    let section: picket_server::auth::OidcSection = serde_json::from_value(json!({
        "issuer": ISSUER, "audiences": [AUDIENCE], "jwks_file": jwks_path,
        "principal_claim": "sub", "leeway_s": 5,
    }))
    .unwrap();
    let auth = section.authenticator().unwrap();
    assert_eq!(auth.verifier().unwrap().keys().refresh().await.unwrap(), 1);
    let t = token(&claims("alice", &["picket-admin"]));
    let md = metadata(&[(AUTHORIZATION_METADATA, &format!("bearer {t}"))]);
    assert_eq!(
        auth.admin_actor(&md, None).await.unwrap(),
        Actor::new("3f1c-uuid", &[Role::ClassAdmin])
    );
    let mut c = claims("alice", &[]);
    c["exp"] = json!(unix_now_s() - 10); // beyond the 5 s leeway configured here
    let expired = metadata(&[(AUTHORIZATION_METADATA, &format!("Bearer {}", token(&c)))]);
    let error = auth.authenticate(&expired).await.unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated);
    assert!(
        error.message().contains("5 s leeway"),
        "{}",
        error.message()
    );
}

#[tokio::test]
async fn an_id_token_is_checked_like_an_access_token_but_for_the_client_id() {
    let dev = DevIssuer::generate(ISSUER, AUDIENCE).unwrap();
    let verifier = dev.verifier();
    let now = unix_now_s();
    let id_claims = |aud: &str, exp: u64| {
        json!({
            "iss": ISSUER, "aud": aud, "sub": "alice", "nonce": "n-1",
            "iat": now, "exp": exp,
        })
    };
    let id_token = dev.mint_claims(id_claims("picket-console", now + 300));
    let claims = verifier
        .verify_id_token(&id_token, "picket-console")
        .await
        .unwrap();
    assert_eq!(claims["nonce"], "n-1");
    // An access token for Picket is not an ID token for the console, nor the reverse.
    let access = dev.mint("alice", &["picket-operator"], Duration::from_secs(60));
    let refused = verifier
        .verify_id_token(&access, "picket-console")
        .await
        .unwrap_err();
    assert_eq!(refused.rule(), "wrong_audience", "{refused}");
    assert!(verifier.verify(&id_token).await.is_err());
    let expired = dev.mint_claims(id_claims("picket-console", now - 600));
    let refused = verifier
        .verify_id_token(&expired, "picket-console")
        .await
        .unwrap_err();
    assert_eq!(refused.rule(), "token_expired", "{refused}");
}
