//! [`DevIssuer`]: a tiny OIDC issuer for development and tests. It holds an ECDSA P-256 key
//! (generated with `ring`), publishes the public half as a JWKS (in memory or a file that
//! `picketd` can be pointed at) and mints ES256 tokens for a principal and roles, shaped like
//! Keycloak's (`preferred_username`, `realm_access.roles`).
//!
//! ```
//! use picket_server::auth::dev::DevIssuer;
//! use std::time::Duration;
//! let issuer = DevIssuer::generate("https://picket.dev.invalid", "picket").unwrap();
//! let token = issuer.mint("alice", &["picket-operator"], Duration::from_secs(3600));
//! assert_eq!(token.split('.').count(), 3);
//! assert!(issuer.jwks_json().contains("\"kty\":\"EC\""));
//! ```
//!
//! Never use it in production: whoever has the key file can mint any role.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

use super::jwks::{parse_jwks, StaticJwks};
use super::oidc::{OidcConfig, OidcVerifier};

/// A development token issuer with its own signing key.
pub struct DevIssuer {
    issuer: String,
    audience: String,
    kid: String,
    /// PKCS#8 document of the private key.
    pkcs8: Vec<u8>,
    encoding: EncodingKey,
    jwk: Value,
}

impl DevIssuer {
    /// A new issuer with a fresh key.
    pub fn generate(issuer: &str, audience: &str) -> Result<DevIssuer, String> {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|_| "generating a P-256 key failed".to_owned())?;
        DevIssuer::from_pkcs8(issuer, audience, pkcs8.as_ref())
    }

    /// An issuer with a key saved by [`DevIssuer::save_key`] (so tokens survive a restart).
    pub fn from_pkcs8(issuer: &str, audience: &str, pkcs8: &[u8]) -> Result<DevIssuer, String> {
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &SystemRandom::new(),
        )
        .map_err(|e| format!("not a P-256 PKCS#8 key: {e}"))?;
        // Uncompressed point: 0x04 || x (32 bytes) || y (32 bytes).
        let point = pair.public_key().as_ref();
        assert_eq!(
            point.len(),
            65,
            "P-256 public key is 65 bytes, got {}",
            point.len()
        );
        let (x, y) = point[1..].split_at(32);
        let kid = format!("picket-dev-{}", &URL_SAFE_NO_PAD.encode(&point[1..9]));
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        });
        Ok(DevIssuer {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            kid,
            pkcs8: pkcs8.to_vec(),
            encoding: EncodingKey::from_ec_der(pkcs8),
            jwk,
        })
    }

    /// Loads the key at `path` (base64 of the PKCS#8 document), or generates one and saves it.
    pub fn load_or_generate(
        issuer: &str,
        audience: &str,
        path: &Path,
    ) -> Result<DevIssuer, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let pkcs8 = base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .map_err(|e| format!("{}: not base64: {e}", path.display()))?;
                DevIssuer::from_pkcs8(issuer, audience, &pkcs8)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let dev = DevIssuer::generate(issuer, audience)?;
                dev.save_key(path)
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
                Ok(dev)
            }
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// Writes the private key (base64 PKCS#8) to `path`.
    pub fn save_key(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(
            path,
            base64::engine::general_purpose::STANDARD.encode(&self.pkcs8),
        )
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key set, as JSON.
    pub fn jwks_json(&self) -> String {
        json!({ "keys": [self.jwk] }).to_string()
    }

    pub fn jwks(&self) -> JwkSet {
        parse_jwks(self.jwks_json().as_bytes()).expect("the dev issuer's own JWKS parses")
    }

    /// Writes the public key set to `path` (for `picketd --oidc-jwks-file`).
    pub fn write_jwks(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.jwks_json())
    }

    /// The server config that accepts this issuer's tokens.
    pub fn oidc_config(&self) -> OidcConfig {
        OidcConfig::new(&self.issuer, &self.audience)
    }

    /// A verifier for this issuer's tokens, keys in memory.
    pub fn verifier(&self) -> OidcVerifier {
        OidcVerifier::new(self.oidc_config(), Box::new(StaticJwks(self.jwks())))
            .expect("the dev issuer's config is valid")
    }

    /// A token for `principal` with realm roles `roles` (e.g. `picket-operator`,
    /// `picket-operator:orders`), valid from now for `ttl`.
    pub fn mint(&self, principal: &str, roles: &[&str], ttl: Duration) -> String {
        let now = unix_now_s();
        self.mint_claims(json!({
            "iss": self.issuer, "aud": self.audience, "sub": principal,
            "preferred_username": principal, "realm_access": { "roles": roles },
            "iat": now, "nbf": now, "exp": now + ttl.as_secs(),
        }))
    }

    /// A token with exactly `claims` (tests use it for expired, wrong-issuer, ... tokens).
    pub fn mint_claims(&self, claims: Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, &claims, &self.encoding)
            .expect("ES256 signing with a valid key")
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
