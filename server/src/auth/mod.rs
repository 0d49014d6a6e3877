//! Who is calling: OIDC bearer tokens (Keycloak-compatible) for admin calls, or, for
//! development only, principal and roles believed from metadata.
//!
//! The server builds one [`Authenticator`] and asks it at the top of each handler:
//!
//! - admin calls: [`Authenticator::admin_actor`]`(metadata, Some(namespace))` -> the core
//!   [`Actor`] put into the command (the state machine checks the role and the two-person rule);
//! - lock calls: [`Authenticator::lock_caller`]`(request, namespace)` -> the principal (recorded
//!   in the session's identity), after checking the lock-client role when auth is on;
//! - reads and `Watch`: [`Authenticator::admit_reader`]`(request)`;
//! - a synchronous tonic interceptor can use [`Authenticator::authenticate_cached`].
//!
//! Modes: [`Authenticator::oidc`] (tokens in `authorization: Bearer <JWT>`, checked by
//! [`oidc::OidcVerifier`]), [`Authenticator::insecure_dev`] (`x-picket-principal`,
//! `x-picket-roles`; logged loudly as insecure) and [`Authenticator::disabled`] (admin changes
//! refused), each optionally with verified client certificates as credentials
//! ([`Authenticator::with_certificates`], [`cert`]). Roles and their namespace scopes:
//! [`roles`]. Operator guide: docs/auth.md.

use std::sync::Arc;

use picket_core::locks::{Actor, Role};
use tonic::metadata::MetadataMap;
use tonic::Status;

pub mod cert;
pub mod config;
pub mod dev;
pub mod error;
pub mod jwks;
pub mod oidc;
pub mod roles;

pub use cert::{CertAuth, PrincipalFrom, PrincipalSource};
pub use config::{ConsoleOidcSection, OidcSection};
pub use error::AuthError;
pub use oidc::{OidcConfig, OidcVerifier};
pub use roles::{AuthMethod, Caller, ClaimConfig, LockRoles};

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
    /// Verified client certificates as credentials (`[tls] require_client_cert`).
    certs: Option<Arc<CertAuth>>,
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
            .field("certificates", &self.certs.is_some())
            .finish()
    }
}

impl Authenticator {
    /// No authentication configured: admin changes are refused (`auth_not_configured`), lock
    /// clients get the principal `unauthenticated`.
    pub fn disabled() -> Authenticator {
        Authenticator {
            mode: Mode::Disabled,
            certs: None,
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
            certs: None,
        }
    }

    /// OIDC bearer tokens verified by `verifier`.
    pub fn oidc(verifier: OidcVerifier) -> Authenticator {
        Authenticator {
            mode: Mode::Oidc(Arc::new(verifier)),
            certs: None,
        }
    }

    /// Also takes verified client certificates as credentials (mutual TLS).
    pub fn with_certificates(mut self, certs: CertAuth) -> Authenticator {
        self.certs = Some(Arc::new(certs));
        self
    }

    /// Whether callers must authenticate: OIDC or client certificates are on. Then lock calls
    /// need a lock-client role and every read a valid credential.
    pub fn is_on(&self) -> bool {
        matches!(self.mode, Mode::Oidc(_)) || self.certs.is_some()
    }

    /// Logs, once at start-up, that lock calls are open to anyone who reaches the port.
    pub fn warn_if_open(&self) {
        if !self.is_on() {
            tracing::warn!(
                "INSECURE: neither [oidc] nor [tls] require_client_cert is configured: lock \
                 calls (sessions, acquire, release), watch and reads are open to anyone who \
                 can reach the client port. Development only."
            );
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

    /// The caller of `request` from all its credentials: a bearer token (OIDC) if it carries
    /// one (a bad token is refused even if a certificate is good: the token's principal wins,
    /// and the certificate was checked by the TLS layer anyway), else its verified client
    /// certificate (with `[tls] require_client_cert`), else as the mode says without
    /// credentials (dev metadata; `UNAUTHENTICATED` with OIDC or certificates on).
    pub async fn caller<T>(&self, request: &tonic::Request<T>) -> Result<Caller, Status> {
        self.caller_with(request.metadata(), self.certificate_caller(request)?)
            .await
    }

    /// [`Authenticator::caller`] from metadata and the caller of the connection's certificate
    /// (the HTTP port reads its certificate itself).
    pub async fn caller_with(
        &self,
        metadata: &MetadataMap,
        certificate: Option<Caller>,
    ) -> Result<Caller, Status> {
        if let Mode::Oidc(verifier) = &self.mode {
            if metadata.get(AUTHORIZATION_METADATA).is_some() {
                return Ok(verifier.verify(bearer_token(metadata)?).await?);
            }
        }
        if let Some(caller) = certificate {
            return Ok(caller);
        }
        match (&self.mode, &self.certs) {
            (Mode::Oidc(_), Some(_)) => Err(AuthError::MissingCredentials(
                "an OIDC bearer token or a client certificate",
            )
            .status()),
            (Mode::Oidc(_), None) => Err(AuthError::MissingToken.status()),
            (_, Some(_)) => {
                Err(AuthError::MissingCredentials("a client certificate signed by its CA").status())
            }
            (Mode::InsecureDev, None) => dev_caller(metadata).map_err(Status::from),
            (Mode::Disabled, None) => Err(AuthError::NotConfigured.status()),
        }
    }

    /// The caller proved by the request's verified client certificate, if certificates are
    /// credentials here and it brought one. (The simulator has no TLS: never a certificate.)
    pub fn certificate_caller<T>(
        &self,
        request: &tonic::Request<T>,
    ) -> Result<Option<Caller>, Status> {
        let Some(certs) = &self.certs else {
            return Ok(None);
        };
        #[cfg(not(madsim))]
        {
            let _ = certs;
            match request
                .peer_certs()
                .as_ref()
                .and_then(|chain| chain.first())
            {
                Some(leaf) => self.certificate_caller_der(leaf.as_ref()),
                None => Ok(None),
            }
        }
        #[cfg(madsim)]
        {
            let _ = (certs, request);
            Ok(None)
        }
    }

    /// The caller of a verified client certificate given as DER (the HTTP port's connections),
    /// if certificates are credentials here.
    pub fn certificate_caller_der(&self, leaf_der: &[u8]) -> Result<Option<Caller>, Status> {
        let Some(certs) = &self.certs else {
            return Ok(None);
        };
        #[cfg(not(madsim))]
        {
            certs.caller(leaf_der).map(Some).map_err(Status::from)
        }
        #[cfg(madsim)]
        {
            let _ = (certs, leaf_der);
            Ok(None)
        }
    }

    /// The principal of a lock call (`CreateSession`, `CloseSession`, `KeepAlive`, `Acquire`,
    /// `Release`) on `namespace` (`None` for the calls that name none).
    ///
    /// With OIDC or client certificates on: the authenticated caller ([`Authenticator::caller`])
    /// must have `picket-client` or `picket-client:<namespace>` (for `None`: any of them), else
    /// `UNAUTHENTICATED` (no or bad credentials) or `PERMISSION_DENIED` (`missing_role`, naming
    /// the role). Without them (dev): open; the principal is the dev metadata's, else
    /// `unauthenticated` (logged as insecure at start-up).
    ///
    /// Everything is read from `request` before the returned future first waits, so it is
    /// `Send` even for a streaming request whose body is not `Sync` (the simulator's).
    pub fn lock_caller<T>(
        &self,
        request: &tonic::Request<T>,
        namespace: Option<&str>,
    ) -> impl std::future::Future<Output = Result<String, Status>> + Send + '_ {
        let metadata = request.metadata().clone();
        let certificate = self.certificate_caller(request);
        let namespace = namespace.map(str::to_owned);
        async move {
            self.lock_caller_with(&metadata, &certificate, namespace.as_deref())
                .await
        }
    }

    /// [`Authenticator::lock_caller`] from a request's metadata and its connection's
    /// certificate caller ([`Authenticator::certificate_caller`]), read once: the session
    /// stream checks each of its calls with this, without copying the stream's metadata.
    pub async fn lock_caller_with(
        &self,
        metadata: &MetadataMap,
        certificate: &Result<Option<Caller>, Status>,
        namespace: Option<&str>,
    ) -> Result<String, Status> {
        if !self.is_on() {
            return self.client_principal(metadata).await;
        }
        let caller = self.caller_with(metadata, certificate.clone()?).await?;
        caller.require_lock_role(namespace).map_err(Status::from)
    }

    /// Admits a read (inspection, holds, classes, audit, pending force-releases, `Watch`): with
    /// OIDC or client certificates on, any caller with a valid credential (no role needed: who
    /// holds what is not public, but every operator and lock client may see it); without them,
    /// anyone (dev and unconfigured clusters answer reads as before).
    pub async fn admit_reader<T>(&self, request: &tonic::Request<T>) -> Result<(), Status> {
        if !self.is_on() {
            return Ok(());
        }
        self.caller(request).await.map(|_| ())
    }

    /// [`Authenticator::admit_reader`] from metadata and the connection's certificate caller
    /// (the HTTP inspection routes).
    pub async fn admit_reader_with(
        &self,
        metadata: &MetadataMap,
        certificate: Option<Caller>,
    ) -> Result<(), Status> {
        if !self.is_on() {
            return Ok(());
        }
        self.caller_with(metadata, certificate).await.map(|_| ())
    }

    /// The actor of an admin mutation on `namespace` that needs one of `needed`, from all the
    /// request's credentials ([`Authenticator::caller`]): refused here (`PERMISSION_DENIED`,
    /// `missing_role`) naming the roles as the identity provider spells them.
    pub async fn admin_actor_for<T>(
        &self,
        request: &tonic::Request<T>,
        namespace: Option<&str>,
        needed: &[Role],
    ) -> Result<Actor, Status> {
        let caller = self.caller(request).await?;
        if needed.is_empty() {
            return Ok(caller.actor(namespace));
        }
        caller.require(needed, namespace).map_err(|e| e.status())
    }

    /// The principal recorded in a new session's identity from metadata alone: the verified
    /// token's principal if a token was sent (a bad token is refused), else `unauthenticated`.
    /// Lock calls use [`Authenticator::lock_caller`], which also reads client certificates
    /// and checks the lock-client role.
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
        lock_roles: Default::default(),
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
        let detail = picket_proto::status::error_detail(&refused).unwrap();
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

    fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            AUTHORIZATION_METADATA,
            format!("Bearer {token}").parse().unwrap(),
        );
        request
    }

    #[tokio::test]
    async fn lock_calls_need_a_lock_client_role_for_the_namespace_with_oidc_on() {
        let issuer = dev::DevIssuer::generate("https://sso.test/realms/ops", "picket").unwrap();
        let auth = Authenticator::oidc(issuer.verifier());
        assert!(auth.is_on());
        let hour = std::time::Duration::from_secs(3600);
        let scoped = issuer.mint("svc", &["picket-client:orders"], hour);
        let request = with_token((), &scoped);
        assert_eq!(
            auth.lock_caller(&request, Some("orders")).await.unwrap(),
            "svc"
        );
        // Sessions and keepalives name no namespace: any lock-client role will do.
        assert_eq!(auth.lock_caller(&request, None).await.unwrap(), "svc");
        let refused = auth
            .lock_caller(&request, Some("billing"))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            picket_proto::status::error_detail(&refused).unwrap().rule,
            "missing_role"
        );
        assert!(
            refused.message().contains("picket-client:billing"),
            "{}",
            refused.message()
        );
        // An operator is not a lock client.
        let operator = issuer.mint("alice", &["picket-operator"], hour);
        let refused = auth
            .lock_caller(&with_token((), &operator), None)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        // No token at all: who are you? Reads (and Watch) need a valid token, any role.
        let anonymous = tonic::Request::new(());
        let refused = auth.lock_caller(&anonymous, None).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert!(auth.admit_reader(&anonymous).await.is_err());
        assert!(auth.admit_reader(&with_token((), &operator)).await.is_ok());
        let global = issuer.mint("batch", &["picket-client"], hour);
        assert!(auth
            .lock_caller(&with_token((), &global), Some("anything"))
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn without_auth_lock_calls_and_reads_stay_open() {
        let off = Authenticator::disabled();
        assert!(!off.is_on());
        let anonymous = tonic::Request::new(());
        assert_eq!(
            off.lock_caller(&anonymous, Some("orders")).await.unwrap(),
            UNAUTHENTICATED_PRINCIPAL
        );
        assert!(off.admit_reader(&anonymous).await.is_ok());
        let dev = Authenticator::insecure_dev();
        let mut named = tonic::Request::new(());
        named
            .metadata_mut()
            .insert(PRINCIPAL_METADATA, "alice".parse().unwrap());
        assert_eq!(
            dev.lock_caller(&named, Some("orders")).await.unwrap(),
            "alice"
        );
    }

    #[tokio::test]
    async fn with_certificates_on_a_request_without_one_is_unauthenticated() {
        let certs = CertAuth::new(
            &PrincipalFrom::default(),
            &["picket-client".to_owned()],
            &Default::default(),
        )
        .unwrap();
        let auth = Authenticator::disabled().with_certificates(certs);
        assert!(auth.is_on());
        let anonymous = tonic::Request::new(());
        let refused = auth.lock_caller(&anonymous, None).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert_eq!(
            picket_proto::status::error_detail(&refused).unwrap().rule,
            "missing_credentials"
        );
        assert!(auth.admit_reader(&anonymous).await.is_err());
    }
}
