//! Why a caller was refused, as a typed error that becomes a gRPC status with a stable rule.

use picket_core::locks::Role;
use picket_proto::proto;
use tonic::{Code, Status};

/// A refused caller. Every variant names what was wrong; [`AuthError::status`] turns it into the
/// gRPC answer (`UNAUTHENTICATED` for "who are you?", `PERMISSION_DENIED` for "not allowed",
/// `UNAVAILABLE` when the issuer's keys cannot be had right now) with an `ErrorDetail` whose
/// `rule` is [`AuthError::rule`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("authorization: required (`authorization: Bearer <JWT>` from the OIDC issuer)")]
    MissingToken,
    #[error("authorization: must be `Bearer <JWT>`")]
    MalformedHeader,
    #[error("token is not a JWT: {0}")]
    MalformedToken(String),
    #[error("token alg `none` is refused: tokens must be signed by the issuer")]
    AlgorithmNone,
    #[error(
        "token alg `{alg}` is refused: only asymmetric signatures verified against the issuer's \
         JWKS are accepted (an HMAC token keyed with a public key is a forgery)"
    )]
    SymmetricAlgorithm { alg: String },
    #[error("token alg `{alg}` is not supported")]
    UnsupportedAlgorithm { alg: String },
    #[error("token header has no `kid`: cannot pick the issuer's key")]
    MissingKid,
    #[error("token key id `{kid}` is not in the issuer's key set (even after a refresh)")]
    UnknownKid { kid: String },
    #[error("token alg `{token_alg}` does not match key `{kid}` ({key_alg})")]
    AlgorithmMismatch {
        kid: String,
        token_alg: String,
        key_alg: String,
    },
    #[error("token signature is invalid")]
    BadSignature,
    #[error("token expired (beyond the {leeway_s} s leeway): get a new token")]
    Expired { leeway_s: u64 },
    #[error("token is not valid yet (`nbf` is in the future beyond the {leeway_s} s leeway)")]
    NotYetValid { leeway_s: u64 },
    #[error("token issuer is wrong: expected `{expected}`")]
    WrongIssuer { expected: String },
    #[error("token audience is wrong: expected one of {expected:?}")]
    WrongAudience { expected: Vec<String> },
    #[error("token lacks the required claim `{0}`")]
    MissingClaim(String),
    #[error("token has no principal: claim `{claim}` is missing, empty or longer than 256 bytes")]
    NoPrincipal { claim: String },
    #[error("the issuer's keys are unavailable: {0}")]
    KeySetUnavailable(String),
    #[error(
        "admin changes need an authenticated operator: OIDC is not configured on this server \
         (development servers started with --insecure-dev-auth take the x-picket-principal \
         and x-picket-roles metadata)"
    )]
    NotConfigured,
    #[error("{header}: {problem}")]
    BadDevMetadata {
        header: &'static str,
        problem: String,
    },
    #[error("`{principal}` lacks a role for this{}: needs one of {}", namespace_part(.namespace), role_list(.needed))]
    MissingRole {
        principal: String,
        needed: Vec<Role>,
        namespace: Option<String>,
    },
    #[error("`{principal}` lacks a lock-client role{}: needs {}", namespace_part(.namespace), lock_roles_needed(.namespace))]
    MissingLockRole {
        principal: String,
        namespace: Option<String>,
    },
    #[error(
        "credentials required: this server authenticates lock clients and readers ({0}); \
         this call brought none"
    )]
    MissingCredentials(&'static str),
    #[error("client certificate refused: {0}")]
    BadCertificate(String),
}

fn lock_roles_needed(namespace: &Option<String>) -> String {
    match namespace {
        Some(ns) => format!("picket-client or picket-client:{ns}"),
        None => "picket-client or picket-client:<namespace>".to_owned(),
    }
}

fn namespace_part(namespace: &Option<String>) -> String {
    match namespace {
        Some(ns) => format!(" in namespace `{ns}`"),
        None => String::new(),
    }
}

fn role_list(roles: &[Role]) -> String {
    roles
        .iter()
        .map(|r| super::roles::role_claim_name(*r))
        .collect::<Vec<_>>()
        .join(", ")
}

impl AuthError {
    /// The stable snake_case rule of `ErrorDetail.rule`.
    pub fn rule(&self) -> &'static str {
        match self {
            AuthError::MissingToken => "missing_token",
            AuthError::MalformedHeader | AuthError::MalformedToken(_) => "malformed_token",
            AuthError::AlgorithmNone => "alg_none",
            AuthError::SymmetricAlgorithm { .. } => "alg_symmetric",
            AuthError::UnsupportedAlgorithm { .. } => "alg_unsupported",
            AuthError::MissingKid => "missing_kid",
            AuthError::UnknownKid { .. } => "unknown_kid",
            AuthError::AlgorithmMismatch { .. } => "alg_mismatch",
            AuthError::BadSignature => "bad_signature",
            AuthError::Expired { .. } => "token_expired",
            AuthError::NotYetValid { .. } => "token_not_yet_valid",
            AuthError::WrongIssuer { .. } => "wrong_issuer",
            AuthError::WrongAudience { .. } => "wrong_audience",
            AuthError::MissingClaim(_) => "missing_claim",
            AuthError::NoPrincipal { .. } => "no_principal",
            AuthError::KeySetUnavailable(_) => "keys_unavailable",
            AuthError::NotConfigured => "auth_not_configured",
            AuthError::BadDevMetadata { .. } => "bad_dev_metadata",
            AuthError::MissingRole { .. } | AuthError::MissingLockRole { .. } => "missing_role",
            AuthError::MissingCredentials(_) => "missing_credentials",
            AuthError::BadCertificate(_) => "bad_certificate",
        }
    }

    /// The gRPC code: who-are-you problems are `UNAUTHENTICATED`, a known caller without the
    /// role is `PERMISSION_DENIED`, an unreachable issuer is `UNAVAILABLE` (retryable).
    pub fn code(&self) -> Code {
        match self {
            AuthError::MissingRole { .. } | AuthError::MissingLockRole { .. } => {
                Code::PermissionDenied
            }
            AuthError::KeySetUnavailable(_) => Code::Unavailable,
            _ => Code::Unauthenticated,
        }
    }

    /// The gRPC answer, with an `ErrorDetail` carrying [`AuthError::rule`].
    pub fn status(&self) -> Status {
        let message = self.to_string();
        let detail = proto::ErrorDetail {
            rule: self.rule().to_owned(),
            message: message.clone(),
            retryable: matches!(self, AuthError::KeySetUnavailable(_)),
            ..proto::ErrorDetail::default()
        };
        picket_proto::status::detail_status(self.code(), detail, None)
    }
}

impl From<AuthError> for Status {
    fn from(error: AuthError) -> Status {
        error.status()
    }
}
