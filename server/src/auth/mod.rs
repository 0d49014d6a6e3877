//! Who is calling: OIDC bearer tokens (Keycloak-compatible) for admin calls, or, for
//! development only, principal and roles believed from metadata.
//!
//! The server builds one [`Authenticator`] and asks it at the top of each handler:
//!
//! - admin calls: [`Authenticator::admin_actor`]`(metadata, Some(namespace))` -> the core
//!   [`Actor`] put into the command (the state machine checks the role and the two-person rule);
//! - lock clients' sessions: [`Authenticator::client_principal`] -> the principal recorded in
//!   the session's identity;
//! - a synchronous tonic interceptor can use [`Authenticator::authenticate_cached`].
//!
//! Modes: [`Authenticator::oidc`] (tokens in `authorization: Bearer <JWT>`, checked by
//! [`oidc::OidcVerifier`]), [`Authenticator::insecure_dev`] (`x-picket-principal`,
//! `x-picket-roles`; logged loudly as insecure) and [`Authenticator::disabled`] (admin changes
//! refused). Roles and their namespace scopes: [`roles`]. Operator guide: docs/auth.md.

use std::sync::Arc;

use picket_core::locks::{Actor, Role};
use tonic::metadata::MetadataMap;
use tonic::Status;

pub mod config;
pub mod dev;
pub mod error;
pub mod jwks;
pub mod oidc;
pub mod roles;

pub use config::OidcSection;
pub use error::AuthError;
pub use oidc::{OidcConfig, OidcVerifier};
pub use roles::{AuthMethod, Caller, ClaimConfig};

/// The metadata holding the bearer token.
pub const AUTHORIZATION_METADATA: &str = "authorization";
/// Dev mode: the caller's principal.
pub const PRINCIPAL_METADATA: &str = "x-picket-principal";
/// Dev mode: the caller's roles, comma-separated (`picket-operator`, `on-call`,
/// `picket-operator:orders`, ...).
pub const ROLES_METADATA: &str = "x-picket-roles";
/// The principal of a lock client that presented no credentials.
pub const UNAUTHENTICATED_PRINCIPAL: &str = picket_core::locks::UNAUTHENTICATED_PRINCIPAL;

#[derive(Clone)]
enum Mode {
    Disabled,
    InsecureDev,
    Oidc(Arc<OidcVerifier>),
}

/// How a server authenticates its callers. Cheap to clone.
#[derive(Clone)]
pub struct Authenticator {
    mode: Mode,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match &self.mode {
            Mode::Disabled => "disabled".to_owned(),
            Mode::InsecureDev => "insecure-dev".to_owned(),
            Mode::Oidc(v) => format!("oidc({})", v.config().issuer),
        };
        f.debug_struct("Authenticator")
            .field("mode", &mode)
            .finish()
    }
}

impl Authenticator {
    /// No authentication configured: admin changes are refused (`auth_not_configured`), lock
    /// clients get the principal `unauthenticated`.
    pub fn disabled() -> Authenticator {
        Authenticator {
            mode: Mode::Disabled,
        }
    }

    /// `--insecure-dev-auth`: believe `x-picket-principal` / `x-picket-roles`. Logged as a
    /// warning, because anyone who can reach the port can claim any role.
    pub fn insecure_dev() -> Authenticator {
        tracing::warn!(
            "INSECURE: --insecure-dev-auth is on: callers' principal and roles are taken from \
             the {PRINCIPAL_METADATA} / {ROLES_METADATA} metadata without any check. \
             Development only."
        );
        Authenticator {
            mode: Mode::InsecureDev,
        }
    }

    /// OIDC bearer tokens verified by `verifier`.
    pub fn oidc(verifier: OidcVerifier) -> Authenticator {
        Authenticator {
            mode: Mode::Oidc(Arc::new(verifier)),
        }
    }

    /// Whether this is the insecure development mode.
    pub fn is_insecure(&self) -> bool {
        matches!(self.mode, Mode::InsecureDev)
    }

    /// The verifier, in OIDC mode (to pre-load the keys at start-up: `keys().refresh()`).
    pub fn verifier(&self) -> Option<&OidcVerifier> {
        match &self.mode {
            Mode::Oidc(v) => Some(v),
            _ => None,
        }
    }

    /// The authenticated caller (fetching the issuer's keys if a token names an unknown `kid`).
    pub async fn authenticate(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        match &self.mode {
            Mode::Disabled => Err(AuthError::NotConfigured.status()),
            Mode::InsecureDev => dev_caller(metadata).map_err(Status::from),
            Mode::Oidc(verifier) => {
                let token = bearer_token(metadata)?;
                Ok(verifier.verify(token).await?)
            }
        }
    }

    /// As [`Authenticator::authenticate`], with the cached keys only: synchronous, for a tonic
    /// interceptor. A token with a `kid` not yet loaded is refused (`unknown_kid`).
    pub fn authenticate_cached(&self, metadata: &MetadataMap) -> Result<Caller, Status> {
        match &self.mode {
            Mode::Disabled => Err(AuthError::NotConfigured.status()),
            Mode::InsecureDev => dev_caller(metadata).map_err(Status::from),
            Mode::Oidc(verifier) => Ok(verifier.verify_cached(bearer_token(metadata)?)?),
        }
    }

    /// Admits an admin **read** (inspection, holds, classes, audit, pending force-releases):
    /// with OIDC on, any caller with a valid bearer token (no role needed: who holds what is
    /// not public, but every operator may see it); without OIDC, anyone (dev and unconfigured
    /// clusters answer reads as before).
    pub async fn admit_reader(&self, metadata: &MetadataMap) -> Result<(), Status> {
        match &self.mode {
            Mode::Disabled | Mode::InsecureDev => Ok(()),
            Mode::Oidc(verifier) => {
                verifier.verify(bearer_token(metadata)?).await?;
                Ok(())
            }
        }
    }

    /// The actor of an admin call on `namespace` (`None` when the call names no namespace: only
    /// the caller's global roles count).
    pub async fn admin_actor(
        &self,
        metadata: &MetadataMap,
        namespace: Option<&str>,
    ) -> Result<Actor, Status> {
        Ok(self.authenticate(metadata).await?.actor(namespace))
    }

    /// [`Authenticator::admin_actor`] for a mutation that needs one of `needed` on `namespace`:
    /// refused here (`PERMISSION_DENIED`, `missing_role`) naming the roles as the identity
    /// provider spells them (`picket-operator`, ...), which is what the operator has to ask
    /// for. The state machine checks again, with its own role names.
    pub async fn admin_actor_with_role(
        &self,
        metadata: &MetadataMap,
        namespace: Option<&str>,
        needed: &[Role],
    ) -> Result<Actor, Status> {
        self.authenticate(metadata)
            .await?
            .require(needed, namespace)
            .map_err(|e| e.status())
    }

    /// The principal recorded in a new session's identity: the verified token's principal if a
    /// token was sent (a bad token is refused), else `unauthenticated`. A client that
    /// authenticated with a certificate (`require_client_cert`) is admitted by the TLS layer,
    /// but its certificate's name is not recorded yet: its sessions say `unauthenticated`.
    pub async fn client_principal(&self, metadata: &MetadataMap) -> Result<String, Status> {
        match &self.mode {
            Mode::Disabled => Ok(UNAUTHENTICATED_PRINCIPAL.to_owned()),
            Mode::InsecureDev => Ok(dev_caller(metadata)
                .map(|c| c.principal)
                .unwrap_or_else(|_| UNAUTHENTICATED_PRINCIPAL.to_owned())),
            Mode::Oidc(verifier) => {
                if metadata.get(AUTHORIZATION_METADATA).is_none() {
                    return Ok(UNAUTHENTICATED_PRINCIPAL.to_owned());
                }
                Ok(verifier.verify(bearer_token(metadata)?).await?.principal)
            }
        }
    }
}

/// The token of `authorization: Bearer <token>`.
pub fn bearer_token(metadata: &MetadataMap) -> Result<&str, AuthError> {
    let value = metadata
        .get(AUTHORIZATION_METADATA)
        .ok_or(AuthError::MissingToken)?
        .to_str()
        .map_err(|_| AuthError::MalformedHeader)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::MalformedHeader)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::MalformedHeader);
    }
    Ok(token)
}

/// The caller described by dev metadata.
fn dev_caller(metadata: &MetadataMap) -> Result<Caller, AuthError> {
    let bad = |header, problem: &str| AuthError::BadDevMetadata {
        header,
        problem: problem.to_owned(),
    };
    let principal = metadata
        .get(PRINCIPAL_METADATA)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|p| !p.is_empty() && p.len() <= roles::PRINCIPAL_LEN_MAX)
        .ok_or_else(|| {
            bad(
                PRINCIPAL_METADATA,
                "required (1..=256 bytes of ASCII) in --insecure-dev-auth mode",
            )
        })?;
    let mut caller = Caller {
        principal: principal.to_owned(),
        roles: Default::default(),
        namespace_roles: Default::default(),
        method: AuthMethod::InsecureDev,
    };
    if let Some(value) = metadata.get(ROLES_METADATA) {
        let value = value
            .to_str()
            .map_err(|_| bad(ROLES_METADATA, "must be ASCII"))?;
        let names = value.split(',').map(str::trim).filter(|n| !n.is_empty());
        for name in names.take(roles::ROLE_VALUES_MAX) {
            if !caller.add_role_value(name) {
                return Err(bad(
                    ROLES_METADATA,
                    &format!(
                        "unknown role `{name}` (known: picket-operator, \
                         picket-incident-commander, picket-admin, or on-call, \
                         incident-commander, class-admin; `:namespace` to scope)"
                    ),
                ));
            }
        }
    }
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev_metadata(principal: &str, roles: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert(PRINCIPAL_METADATA, principal.parse().unwrap());
        metadata.insert(ROLES_METADATA, roles.parse().unwrap());
        metadata
    }

    #[tokio::test]
    async fn a_missing_role_is_refused_with_the_token_role_names() {
        let auth = Authenticator::insecure_dev();
        let scoped = dev_metadata("victor", "picket-operator:billing");
        let needed = &[Role::OnCall, Role::IncidentCommander];
        let refused = auth
            .admin_actor_with_role(&scoped, Some("orders"), needed)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let detail = picket_net::status::error_detail(&refused).unwrap();
        assert_eq!(detail.rule, "missing_role");
        assert!(
            refused
                .message()
                .contains("picket-operator, picket-incident-commander"),
            "{}",
            refused.message()
        );
        assert!(
            refused.message().contains("`orders`"),
            "{}",
            refused.message()
        );
        let actor = auth
            .admin_actor_with_role(&scoped, Some("billing"), needed)
            .await
            .unwrap();
        assert_eq!(actor, Actor::new("victor", &[Role::OnCall]));
        let admin = auth
            .admin_actor_with_role(&scoped, Some("billing"), &[Role::ClassAdmin])
            .await
            .unwrap_err();
        assert!(
            admin.message().contains("picket-admin"),
            "{}",
            admin.message()
        );
    }
}
