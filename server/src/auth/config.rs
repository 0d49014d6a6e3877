//! The `[oidc]` section of the `picketd` configuration, ready to embed in the server's config
//! (serde), and how it becomes an [`Authenticator`]. Field reference: docs/auth.md.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::jwks::{FileJwks, JwksSource, RefreshPolicy};
use super::oidc::{OidcConfig, OidcVerifier};
use super::roles::ClaimConfig;
use super::Authenticator;

/// `[oidc]`: who issues operators' tokens and how to read them.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OidcSection {
    /// Exactly the tokens' `iss` (Keycloak: `https://<host>/realms/<realm>`).
    pub issuer: String,
    /// `aud` must contain one of these.
    pub audiences: Vec<String>,
    /// The issuer's key set as a file; absent: fetched through the issuer's discovery document.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    #[serde(default = "default_leeway_s")]
    pub leeway_s: u64,
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    #[serde(default = "default_roles_claim_path")]
    pub roles_claim_path: String,
    #[serde(default = "default_refresh_interval_min_s")]
    pub refresh_interval_min_s: u64,
    #[serde(default = "default_max_age_s")]
    pub max_age_s: u64,
    /// `[oidc.console]`: the web console signs people in through this issuer (authorization
    /// code flow with PKCE, docs/console.md). Absent: no OIDC sign-in in the console.
    #[serde(default)]
    pub console: Option<ConsoleOidcSection>,
}

/// `[oidc.console]`: the console as a relying party (an OIDC client) of the `[oidc]` issuer.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ConsoleOidcSection {
    /// The console's client id at the issuer; the ID token's `aud` must contain it.
    pub client_id: String,
    /// The client's secret (a confidential client, sent with HTTP Basic at the token endpoint).
    /// Absent, with no `client_secret_file`: a public client (PKCE alone).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// The secret in a file (its first line), instead of `client_secret`.
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// The base URL browsers reach the console at; the redirect URL to register at the issuer
    /// is `<redirect_url_base>/console/oidc/callback`. Absent: the cluster's `external_url`.
    #[serde(default)]
    pub redirect_url_base: Option<String>,
    /// The scopes asked for (must include `openid`).
    #[serde(default = "default_console_scopes")]
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for ConsoleOidcSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleOidcSection")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_secret_file", &self.client_secret_file)
            .field("redirect_url_base", &self.redirect_url_base)
            .field("scopes", &self.scopes)
            .finish()
    }
}

fn default_console_scopes() -> Vec<String> {
    vec!["openid".to_owned(), "profile".to_owned()]
}

impl ConsoleOidcSection {
    /// The client secret (read from its file now), or `None` for a public client; refuses a
    /// section that would not work.
    pub fn secret(&self) -> Result<Option<String>, String> {
        if self.client_id.trim().is_empty() {
            return Err("oidc.console.client_id: required".to_owned());
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return Err("oidc.console.scopes: must include `openid`".to_owned());
        }
        match (&self.client_secret, &self.client_secret_file) {
            (Some(_), Some(_)) => Err(
                "oidc.console: client_secret and client_secret_file are exclusive: choose one"
                    .to_owned(),
            ),
            (Some(secret), None) => Ok(Some(secret.clone())),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!("oidc.console.client_secret_file: {}: {e}", path.display())
                })?;
                let secret = text.lines().next().unwrap_or("").trim().to_owned();
                if secret.is_empty() {
                    return Err(format!(
                        "oidc.console.client_secret_file: {}: empty",
                        path.display()
                    ));
                }
                Ok(Some(secret))
            }
            (None, None) => Ok(None),
        }
    }
}

fn default_leeway_s() -> u64 {
    30
}

fn default_principal_claim() -> String {
    ClaimConfig::default().principal_claim
}

fn default_roles_claim_path() -> String {
    ClaimConfig::default().roles_claim_path
}

fn default_refresh_interval_min_s() -> u64 {
    RefreshPolicy::default().refresh_interval_min.as_secs()
}

fn default_max_age_s() -> u64 {
    RefreshPolicy::default().max_age.as_secs()
}

impl OidcSection {
    /// The verifier's configuration.
    pub fn oidc_config(&self) -> OidcConfig {
        OidcConfig {
            issuer: self.issuer.clone(),
            audiences: self.audiences.clone(),
            leeway_s: self.leeway_s,
            claims: ClaimConfig {
                principal_claim: self.principal_claim.clone(),
                roles_claim_path: self.roles_claim_path.clone(),
            },
            refresh: RefreshPolicy {
                refresh_interval_min: Duration::from_secs(self.refresh_interval_min_s),
                max_age: Duration::from_secs(self.max_age_s),
            },
        }
    }

    /// Where the keys come from: the file, else the discovery document (real network only).
    pub fn source(&self) -> Result<Box<dyn JwksSource>, String> {
        if let Some(path) = &self.jwks_file {
            return Ok(Box::new(FileJwks { path: path.clone() }));
        }
        #[cfg(not(madsim))]
        {
            let source = super::jwks::DiscoveryJwks::new(&self.issuer, super::oidc::FETCH_TIMEOUT)?;
            Ok(Box::new(source))
        }
        #[cfg(madsim)]
        {
            Err("oidc.jwks_file: required in the simulator (no network for discovery)".to_owned())
        }
    }

    /// The authenticator for this section. Call `verifier().keys().refresh()` on it at start-up
    /// to fail early on a bad key file or an unreachable issuer.
    pub fn authenticator(&self) -> Result<Authenticator, String> {
        let verifier = OidcVerifier::new(self.oidc_config(), self.source()?)?;
        Ok(Authenticator::oidc(verifier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_unknown_fields() {
        let section: OidcSection = serde_json::from_str(
            r#"{"issuer": "https://sso/realms/ops", "audiences": ["picket"]}"#,
        )
        .unwrap();
        let config = section.oidc_config();
        assert_eq!(config, OidcConfig::new("https://sso/realms/ops", "picket"));
        assert!(section.jwks_file.is_none());
        let typo = serde_json::from_str::<OidcSection>(
            r#"{"issuer": "i", "audiences": ["a"], "audience": "a"}"#,
        );
        assert!(typo.unwrap_err().to_string().contains("audience"));
        let console: OidcSection = serde_json::from_str(
            r#"{"issuer": "i", "audiences": ["a"], "console": {"client_id": "picket-console"}}"#,
        )
        .unwrap();
        let console = console.console.unwrap();
        assert_eq!(console.scopes, ["openid", "profile"]);
        assert_eq!(console.secret(), Ok(None));
        let both = ConsoleOidcSection {
            client_secret: Some("s".to_owned()),
            client_secret_file: Some("f".into()),
            ..console.clone()
        };
        assert!(both.secret().unwrap_err().contains("exclusive"));
        assert!(!format!("{both:?}").contains("\"s\""));
        let no_openid = ConsoleOidcSection {
            scopes: vec!["profile".to_owned()],
            ..console
        };
        assert!(no_openid.secret().unwrap_err().contains("openid"));
        let empty: OidcSection =
            serde_json::from_str(r#"{"issuer": "i", "audiences": []}"#).unwrap();
        assert!(empty.authenticator().unwrap_err().contains("audience"));
    }
}
