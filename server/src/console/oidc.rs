//! The console's OpenID Connect sign-in: the authorization code flow with PKCE (RFC 7636, S256)
//! against the `[oidc]` issuer, the console being a client registered there
//! (`[oidc.console]`, docs/console.md).
//!
//! `begin` makes a pending sign-in (random `state`, `nonce` and PKCE verifier, kept here on the
//! replica, bounded in number and age, and bound to the browser by a pre-sign-in cookie) and
//! the authorization URL; `finish` takes the issuer's answer at `/console/oidc/callback`: the
//! `state` must be pending (it is removed: single use) and belong to this browser, the code is
//! exchanged at the token endpoint with the verifier, the ID token is verified (the issuer's keys,
//! `iss`, `aud` = the client id, `exp`, the `nonce`), and the person's principal and roles come
//! from the **access token**, verified by the same [`crate::auth::OidcVerifier`] and role rules
//! as every gRPC call, because the console then calls the cluster with that very token.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

use crate::auth::roles::{role_claim_name, LOCK_CLIENT_ROLE};
use crate::auth::{Authenticator, Caller, ConsoleOidcSection};

use super::signin::{cookie_value, random_token};

/// The pre-sign-in cookie: binds a pending sign-in to the browser that began it.
pub const BINDING_COOKIE: &str = "picket_console_oidc";
/// How long a pending sign-in waits for the issuer's answer.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// Most pending sign-ins on one replica; beyond, sign-ins are refused until some finish or
/// expire.
pub const PENDING_MAX: usize = 1_000;
/// How long the issuer's discovery document (its endpoints) is kept.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(900);
/// Largest token-endpoint answer read, in bytes.
pub const TOKEN_RESPONSE_BYTES_MAX: usize = 256 * 1024;
/// The path the issuer redirects back to.
pub const CALLBACK_PATH: &str = "/console/oidc/callback";
/// A sign-in lasts as long as its access token, when the issuer does not say how long that is.
pub const ACCESS_TOKEN_TTL_DEFAULT: Duration = Duration::from_secs(300);

/// What the console needs to sign people in through the issuer.
#[derive(Clone)]
pub struct ConsoleOidc {
    pub section: ConsoleOidcSection,
    /// The client secret (read at start-up), `None` for a public client.
    pub secret: Option<String>,
    /// `<redirect_url_base>/console/oidc/callback`, as registered at the issuer.
    pub redirect_uri: String,
    /// The `[oidc]` authenticator: its verifier checks the ID and access tokens.
    pub auth: Authenticator,
}

impl std::fmt::Debug for ConsoleOidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleOidc")
            .field("section", &self.section)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("redirect_uri", &self.redirect_uri)
            .field("auth", &self.auth)
            .finish()
    }
}

/// The issuer's endpoints, from its discovery document.
#[derive(Clone, Debug)]
struct Endpoints {
    authorization: String,
    token: String,
    end_session: Option<String>,
}

struct Pending {
    verifier: String,
    nonce: String,
    binding: String,
    next: String,
    since: Instant,
}

/// A sign-in refused: the rule, in words for the page.
#[derive(Debug, PartialEq, Eq)]
pub struct SignInRefused {
    pub rule: &'static str,
    pub message: String,
}

fn refused(rule: &'static str, message: impl Into<String>) -> SignInRefused {
    SignInRefused {
        rule,
        message: message.into(),
    }
}

/// A finished sign-in.
pub struct SignedInAs {
    pub principal: String,
    /// As the issuer spells them (`picket-operator`, `picket-client:orders`, ...).
    pub roles: Vec<String>,
    /// The access token the console calls the cluster with.
    pub access_token: String,
    /// How long the sign-in lasts: the access token's lifetime.
    pub ttl: Duration,
    /// Where to go next (a console path).
    pub next: String,
}

/// The issuer's answer at the callback.
#[derive(Debug, Default, Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    /// RFC 9207: the issuer names itself in its answer.
    #[serde(default)]
    pub iss: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_description: Option<String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    id_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// One replica's OIDC sign-in: the pending sign-ins and the issuer's endpoints. Cheap to clone.
#[derive(Clone)]
pub struct OidcSignIn {
    config: Arc<ConsoleOidc>,
    http: reqwest::Client,
    pending: Arc<Mutex<BTreeMap<String, Pending>>>,
    endpoints: Arc<Mutex<Option<(Instant, Endpoints)>>>,
}

impl OidcSignIn {
    pub fn new(config: ConsoleOidc) -> Result<OidcSignIn, String> {
        if config.auth.verifier().is_none() {
            return Err("oidc.console: needs the [oidc] issuer's verifier".to_owned());
        }
        let http = reqwest::Client::builder()
            .timeout(crate::auth::oidc::FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("oidc.console: building the HTTP client: {e}"))?;
        Ok(OidcSignIn {
            config: Arc::new(config),
            http,
            pending: Arc::default(),
            endpoints: Arc::default(),
        })
    }

    /// The issuer (`[oidc] issuer`).
    pub fn issuer(&self) -> String {
        self.verifier().config().issuer.clone()
    }

    fn verifier(&self) -> &crate::auth::OidcVerifier {
        self.config
            .auth
            .verifier()
            .expect("checked in OidcSignIn::new")
    }

    async fn endpoints(&self) -> Result<Endpoints, SignInRefused> {
        if let Some((at, endpoints)) = &*self.endpoints.lock().expect("endpoints lock") {
            if at.elapsed() < DISCOVERY_TTL {
                return Ok(endpoints.clone());
            }
        }
        let issuer = self.issuer();
        let doc = crate::auth::jwks::discovery_document(&self.http, &issuer)
            .await
            .map_err(|e| {
                refused(
                    "issuer_unavailable",
                    format!("the issuer's discovery document could not be read: {e}"),
                )
            })?;
        let field = |name: &str| {
            doc.get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let (Some(authorization), Some(token)) =
            (field("authorization_endpoint"), field("token_endpoint"))
        else {
            return Err(refused(
                "issuer_unavailable",
                "the issuer's discovery document names no authorization_endpoint or token_endpoint",
            ));
        };
        let endpoints = Endpoints {
            authorization,
            token,
            end_session: field("end_session_endpoint"),
        };
        *self.endpoints.lock().expect("endpoints lock") = Some((Instant::now(), endpoints.clone()));
        Ok(endpoints)
    }

    /// Where to sign out at the issuer too (its `end_session_endpoint`, if it advertises one).
    pub async fn end_session_url(&self) -> Option<String> {
        let endpoint = self.endpoints().await.ok()?.end_session?;
        let mut url = reqwest::Url::parse(&endpoint).ok()?;
        url.query_pairs_mut()
            .append_pair("client_id", &self.config.section.client_id);
        Some(url.into())
    }

    /// Starts a sign-in that returns to `next`: the issuer's authorization URL and the binding
    /// cookie's value (the browser's existing one, if it has one).
    pub async fn begin(
        &self,
        headers: &HeaderMap,
        next: String,
    ) -> Result<(String, String), SignInRefused> {
        let endpoints = self.endpoints().await?;
        let binding = cookie_value(headers, BINDING_COOKIE)
            .filter(|b| {
                b.len() == 43
                    && b.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            })
            .unwrap_or_else(random_token);
        let (state, verifier, nonce) = (random_token(), random_token(), random_token());
        let mut url = reqwest::Url::parse(&endpoints.authorization).map_err(|e| {
            refused(
                "issuer_unavailable",
                format!("the issuer's authorization_endpoint is not a URL: {e}"),
            )
        })?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.section.client_id)
            .append_pair("redirect_uri", &self.config.redirect_uri)
            .append_pair("scope", &self.config.section.scopes.join(" "))
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair("code_challenge", &code_challenge(&verifier))
            .append_pair("code_challenge_method", "S256");
        let mut pending = self.pending.lock().expect("pending sign-ins lock");
        pending.retain(|_, p| p.since.elapsed() < PENDING_TTL);
        if pending.len() >= PENDING_MAX {
            return Err(refused(
                "too_many_pending_sign_ins",
                format!("{PENDING_MAX} sign-ins are waiting for the issuer on this replica: try again in a few minutes"),
            ));
        }
        pending.insert(
            state,
            Pending {
                verifier,
                nonce,
                binding: binding.clone(),
                next,
                since: Instant::now(),
            },
        );
        Ok((url.into(), binding))
    }

    /// Finishes a sign-in from the issuer's answer. On any refusal nothing is signed in (the
    /// `state`, if it was pending, is used up).
    pub async fn finish(
        &self,
        headers: &HeaderMap,
        query: &CallbackQuery,
    ) -> Result<SignedInAs, SignInRefused> {
        let state = query.state.as_deref().unwrap_or("");
        let pending = self
            .pending
            .lock()
            .expect("pending sign-ins lock")
            .remove(state)
            .filter(|p| p.since.elapsed() < PENDING_TTL)
            .ok_or_else(|| refused("state_unknown", "this answer's `state` is not a sign-in this replica began, or it was used already or is older than 10 minutes"))?;
        if cookie_value(headers, BINDING_COOKIE).as_deref() != Some(pending.binding.as_str()) {
            return Err(refused(
                "state_not_this_browser",
                "this answer belongs to a sign-in begun in another browser (the console's pre-sign-in cookie does not match)",
            ));
        }
        if let Some(error) = &query.error {
            return Err(refused(
                "issuer_refused",
                format!(
                    "the issuer refused the sign-in: {error}{}",
                    query
                        .error_description
                        .as_deref()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                ),
            ));
        }
        let issuer = self.issuer();
        if let Some(iss) = &query.iss {
            if iss.trim_end_matches('/') != issuer.trim_end_matches('/') {
                return Err(refused(
                    "wrong_issuer",
                    format!("the answer names issuer `{iss}`, not `{issuer}`"),
                ));
            }
        }
        let code = query
            .code
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| refused("no_code", "the issuer's answer carries no `code`"))?;
        let tokens = self.exchange(code, &pending.verifier).await?;
        let id_token = tokens.id_token.as_deref().ok_or_else(|| {
            refused(
                "id_token_invalid",
                "the token endpoint gave no ID token (is `openid` among the scopes?)",
            )
        })?;
        let id_claims = self
            .verifier()
            .verify_id_token(id_token, &self.config.section.client_id)
            .await
            .map_err(|e| refused("id_token_invalid", format!("{} ({})", e, e.rule())))?;
        let nonce = id_claims.get("nonce").and_then(serde_json::Value::as_str);
        if nonce != Some(pending.nonce.as_str()) {
            return Err(refused(
                "nonce_mismatch",
                "the ID token's `nonce` is not the one this sign-in sent",
            ));
        }
        let caller = self
            .verifier()
            .verify(&tokens.access_token)
            .await
            .map_err(|e| refused("access_token_invalid", format!("{} ({})", e, e.rule())))?;
        if caller.roles.is_empty() && caller.namespace_roles.values().all(|r| r.is_empty()) {
            return Err(refused(
                "missing_role",
                format!(
                    "{} has none of the console's roles (picket-operator, picket-incident-commander, picket-admin, in every namespace or `:<namespace>`): ask for one at the issuer",
                    caller.principal
                ),
            ));
        }
        let ttl = tokens
            .expires_in
            .map_or(ACCESS_TOKEN_TTL_DEFAULT, Duration::from_secs)
            .min(super::signin::SIGN_IN_TTL);
        Ok(SignedInAs {
            principal: caller.principal.clone(),
            roles: role_names(&caller),
            access_token: tokens.access_token,
            ttl,
            next: pending.next,
        })
    }

    /// The token endpoint's answer for `code` and the PKCE `verifier`.
    async fn exchange(&self, code: &str, verifier: &str) -> Result<TokenResponse, SignInRefused> {
        let endpoints = self.endpoints().await?;
        let section = &self.config.section;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.config.redirect_uri.as_str()),
            ("code_verifier", verifier),
        ];
        let mut request = self.http.post(&endpoints.token);
        match &self.config.secret {
            Some(secret) => request = request.basic_auth(&section.client_id, Some(secret)),
            None => form.push(("client_id", section.client_id.as_str())),
        }
        let unavailable =
            |e: String| refused("issuer_unavailable", format!("the token endpoint: {e}"));
        let response = request
            .form(&form)
            .send()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if bytes.len() > TOKEN_RESPONSE_BYTES_MAX {
            return Err(unavailable(format!("{} bytes, too large", bytes.len())));
        }
        if !status.is_success() {
            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let field = |name: &str| {
                body.get(name)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("")
            };
            return Err(refused(
                "code_refused",
                format!(
                    "the issuer refused to exchange the code (HTTP {status}): {} {}",
                    field("error"),
                    field("error_description")
                )
                .trim_end()
                .to_owned(),
            ));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| unavailable(format!("not a token response: {e}")))
    }
}

/// The PKCE S256 challenge of `verifier`.
pub fn code_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        verifier.as_bytes(),
    ))
}

/// A caller's Picket roles as the issuer spells them.
pub fn role_names(caller: &Caller) -> Vec<String> {
    let mut names: Vec<String> = caller
        .roles
        .iter()
        .map(|r| role_claim_name(*r).to_owned())
        .collect();
    for (namespace, roles) in &caller.namespace_roles {
        names.extend(
            roles
                .iter()
                .map(|r| format!("{}:{namespace}", role_claim_name(*r))),
        );
    }
    if caller.lock_roles.every_namespace {
        names.push(LOCK_CLIENT_ROLE.to_owned());
    }
    names.extend(
        caller
            .lock_roles
            .namespaces
            .iter()
            .map(|namespace| format!("{LOCK_CLIENT_ROLE}:{namespace}")),
    );
    names
}

/// The `Set-Cookie` value of the binding cookie: `SameSite=Lax`, because the issuer's redirect
/// back is a navigation from another site (a `Strict` cookie would not be sent with it); it
/// names no sign-in, only the browser, and is useless without a pending `state`.
pub fn binding_cookie(binding: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{BINDING_COOKIE}={binding}; Path=/console; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        PENDING_TTL.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_rfc_7636s_s256() {
        // base64url(SHA-256(verifier)) without padding, as computed by Python's hashlib and
        // base64 (the provider in tests/console_oidc.rs checks real ones).
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mJ92K1Cuc4iEVfZb1zE4lQ7D3yM7nw"),
            "SeeYl7SPqAN3pximUCzwr0O1qvct36Y6TgfcCr0dLDw"
        );
        assert_eq!(code_challenge(&random_token()).len(), 43);
    }

    #[test]
    fn the_binding_cookie_survives_the_issuers_redirect() {
        let cookie = binding_cookie("b", false);
        assert!(cookie.contains("SameSite=Lax") && cookie.contains("HttpOnly"));
        assert!(cookie.contains("Path=/console;"));
        assert!(binding_cookie("b", true).ends_with("; Secure"));
    }
}
