//! Verifying an OIDC bearer token (Keycloak-compatible): signature against the issuer's JWKS,
//! then issuer, audience, expiry and not-before.
//!
//! The order matters for safety: the header is read first only to refuse `alg: none` and HMAC
//! algorithms outright and to pick the key by `kid`; the algorithm used to verify is the **key's**
//! (from the JWKS), and a token whose `alg` differs is refused, so a token cannot choose how it is
//! checked (the "HS256 signed with the public key" confusion). Claims are trusted only after the
//! signature verified.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::Validation;

use super::error::AuthError;
use super::jwks::{JwksSource, KeyCache, RefreshPolicy, VerifyKey};
use super::roles::{Caller, ClaimConfig};

/// Longest token accepted, in bytes.
pub const TOKEN_BYTES_MAX: usize = 16 * 1024;

/// What a valid token must say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcConfig {
    /// The `iss` of valid tokens, exactly (Keycloak: `https://<host>/realms/<realm>`).
    pub issuer: String,
    /// A valid token's `aud` contains one of these (required: Keycloak needs an audience
    /// mapper for the Picket client, see docs/auth.md).
    pub audiences: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_s: u64,
    pub claims: ClaimConfig,
    pub refresh: RefreshPolicy,
}

impl OidcConfig {
    /// A config for `issuer` and `audience` with the defaults: 30 s leeway,
    /// `preferred_username`, `realm_access.roles`.
    pub fn new(issuer: &str, audience: &str) -> OidcConfig {
        OidcConfig {
            issuer: issuer.to_owned(),
            audiences: vec![audience.to_owned()],
            leeway_s: 30,
            claims: ClaimConfig::default(),
            refresh: RefreshPolicy::default(),
        }
    }

    /// Refuses a config that would accept too much.
    pub fn validate(&self) -> Result<(), String> {
        if self.issuer.trim().is_empty() {
            return Err("oidc.issuer: required".to_owned());
        }
        if self.audiences.iter().all(|a| a.trim().is_empty()) {
            return Err("oidc.audiences: at least one audience is required".to_owned());
        }
        if self.leeway_s > 300 {
            return Err(format!(
                "oidc.leeway_s: {} is above 300 s (clock skew, not a grace period)",
                self.leeway_s
            ));
        }
        if self.claims.principal_claim.is_empty() || self.claims.roles_claim_path.is_empty() {
            return Err("oidc.claims: principal_claim and roles_claim_path must be set".to_owned());
        }
        Ok(())
    }
}

/// Verifies tokens of one issuer.
pub struct OidcVerifier {
    config: OidcConfig,
    keys: KeyCache,
}

/// What the unverified header says, read only to choose a key.
#[derive(Debug, PartialEq, Eq)]
struct HeaderView {
    alg: String,
    kid: String,
}

impl OidcVerifier {
    pub fn new(config: OidcConfig, source: Box<dyn JwksSource>) -> Result<OidcVerifier, String> {
        config.validate()?;
        let keys = KeyCache::new(source, config.refresh);
        Ok(OidcVerifier { config, keys })
    }

    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    pub fn keys(&self) -> &KeyCache {
        &self.keys
    }

    /// The caller a token proves, fetching the issuer's keys if needed.
    pub async fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        let header = read_header(token)?;
        let key = self.keys.get(&header.kid).await?;
        self.verify_with(token, &header, &key)
    }

    /// As [`OidcVerifier::verify`] with the cached keys only (usable from a synchronous tonic
    /// interceptor); an unknown `kid` is refused without asking the issuer.
    pub fn verify_cached(&self, token: &str) -> Result<Caller, AuthError> {
        let header = read_header(token)?;
        let key = self
            .keys
            .cached(&header.kid)
            .ok_or_else(|| AuthError::UnknownKid {
                kid: header.kid.clone(),
            })?;
        self.verify_with(token, &header, &key)
    }

    fn verify_with(
        &self,
        token: &str,
        header: &HeaderView,
        key: &VerifyKey,
    ) -> Result<Caller, AuthError> {
        check_algorithm(header, key)?;
        let claims = self.verified_claims(token, key, &self.config.audiences)?;
        self.config.claims.caller(&claims)
    }

    /// The claims of an OpenID Connect ID token for the relying party `client_id` (the console's
    /// sign-in), checked as access tokens are (signature by the issuer's key, `iss`, `exp`,
    /// `nbf`, the key's algorithm) except that `aud` must contain `client_id`. The caller checks
    /// the `nonce` it sent.
    pub async fn verify_id_token(
        &self,
        token: &str,
        client_id: &str,
    ) -> Result<serde_json::Value, AuthError> {
        let header = read_header(token)?;
        let key = self.keys.get(&header.kid).await?;
        check_algorithm(&header, &key)?;
        self.verified_claims(token, &key, &[client_id.to_owned()])
    }

    fn verified_claims(
        &self,
        token: &str,
        key: &VerifyKey,
        audiences: &[String],
    ) -> Result<serde_json::Value, AuthError> {
        let mut validation = Validation::new(key.algorithm);
        validation.leeway = self.config.leeway_s;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &key.key, &validation)
            .map_err(|e| self.decode_error(e, key, audiences))?;
        Ok(data.claims)
    }

    fn decode_error(
        &self,
        error: jsonwebtoken::errors::Error,
        key: &VerifyKey,
        audiences: &[String],
    ) -> AuthError {
        let leeway_s = self.config.leeway_s;
        match error.into_kind() {
            ErrorKind::InvalidSignature => AuthError::BadSignature,
            ErrorKind::ExpiredSignature => AuthError::Expired { leeway_s },
            ErrorKind::ImmatureSignature => AuthError::NotYetValid { leeway_s },
            ErrorKind::InvalidIssuer => AuthError::WrongIssuer {
                expected: self.config.issuer.clone(),
            },
            ErrorKind::InvalidAudience => AuthError::WrongAudience {
                expected: audiences.to_vec(),
            },
            ErrorKind::MissingRequiredClaim(claim) => AuthError::MissingClaim(claim),
            ErrorKind::InvalidAlgorithm => AuthError::AlgorithmMismatch {
                kid: key.kid.clone(),
                token_alg: "?".to_owned(),
                key_alg: format!("{:?}", key.algorithm),
            },
            // A signature that is not even well-formed (wrong length, bad base64) is a bad
            // signature too, as far as the caller is concerned.
            ErrorKind::Crypto(_) | ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidRsaKey(_) => {
                AuthError::BadSignature
            }
            other => AuthError::MalformedToken(format!("{other:?}")),
        }
    }
}

/// The token must name the algorithm of the key it is checked with (the key's, never the
/// token's choice).
fn check_algorithm(header: &HeaderView, key: &VerifyKey) -> Result<(), AuthError> {
    let key_alg = format!("{:?}", key.algorithm);
    if header.alg != key_alg {
        return Err(AuthError::AlgorithmMismatch {
            kid: key.kid.clone(),
            token_alg: header.alg.clone(),
            key_alg,
        });
    }
    Ok(())
}

/// Reads `alg` and `kid` from the token's header, refusing `none` and HMAC algorithms before
/// anything else is looked at.
fn read_header(token: &str) -> Result<HeaderView, AuthError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(AuthError::MalformedToken(format!(
            "{} bytes, above {TOKEN_BYTES_MAX}",
            token.len()
        )));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(_payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::MalformedToken(
            "expected three dot-separated parts".to_owned(),
        ));
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .map_err(|e| AuthError::MalformedToken(format!("header is not base64url: {e}")))?;
    let header: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| AuthError::MalformedToken(format!("header is not JSON: {e}")))?;
    let alg = header
        .get("alg")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| AuthError::MalformedToken("header has no `alg`".to_owned()))?;
    if alg.eq_ignore_ascii_case("none") {
        return Err(AuthError::AlgorithmNone);
    }
    if alg.to_ascii_uppercase().starts_with("HS") {
        return Err(AuthError::SymmetricAlgorithm {
            alg: alg.to_owned(),
        });
    }
    let kid = header
        .get("kid")
        .and_then(serde_json::Value::as_str)
        .filter(|k| !k.is_empty())
        .ok_or(AuthError::MissingKid)?;
    Ok(HeaderView {
        alg: alg.to_owned(),
        kid: kid.to_owned(),
    })
}

/// The default timeout of the discovery and JWKS requests.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn header_refusals_come_before_any_key_lookup() {
        let none = format!("{}.{}.", b64(r#"{"alg":"none","kid":"k"}"#), b64("{}"));
        assert_eq!(read_header(&none), Err(AuthError::AlgorithmNone));
        let hs = format!("{}.{}.c2ln", b64(r#"{"alg":"HS256","kid":"k"}"#), b64("{}"));
        assert_eq!(
            read_header(&hs),
            Err(AuthError::SymmetricAlgorithm {
                alg: "HS256".to_owned()
            })
        );
        let no_kid = format!("{}.{}.c2ln", b64(r#"{"alg":"RS256"}"#), b64("{}"));
        assert_eq!(read_header(&no_kid), Err(AuthError::MissingKid));
        assert_eq!(read_header("a.b").unwrap_err().rule(), "malformed_token");
        assert_eq!(read_header("%%.b.c").unwrap_err().rule(), "malformed_token");
        let ok = format!(
            "{}.{}.c2ln",
            b64(r#"{"alg":"RS256","kid":"k1"}"#),
            b64("{}")
        );
        assert_eq!(
            read_header(&ok),
            Ok(HeaderView {
                alg: "RS256".to_owned(),
                kid: "k1".to_owned()
            })
        );
    }

    #[test]
    fn config_needs_issuer_and_audience() {
        assert!(OidcConfig::new("https://sso/realms/ops", "picket")
            .validate()
            .is_ok());
        assert!(OidcConfig::new("", "picket").validate().is_err());
        assert!(OidcConfig::new("https://sso/realms/ops", " ")
            .validate()
            .is_err());
    }
}
