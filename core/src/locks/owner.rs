//! Who may act on a session: the holder of its secret (and, for a session opened by an
//! authenticated principal, only that principal).
//!
//! The state machine never sees a secret, only its SHA-256 hash ([`SecretHash`]), computed at
//! the edge (`picket_proto::secret`). A session remembers the hash it was created with; every
//! command that acts on it carries a [`SessionProof`] (the hash of the secret the caller
//! presented and the caller's principal), checked here at apply time, so every replica gives
//! the same answer. Sessions and commands written before secrets existed have no hash
//! ("legacy"): a legacy session is acted on only by a legacy command, so replaying an old log
//! gives the old result, and a new command (which always carries a hash) cannot touch it.

use std::fmt;

use super::error::LockError;
use super::ids::SessionId;

/// The principal recorded for a lock client that presented no credentials. Sessions opened
/// under it are not bound to a principal (the secret alone proves ownership).
pub const UNAUTHENTICATED_PRINCIPAL: &str = "unauthenticated";

/// Bytes of a [`SecretHash`] (SHA-256).
pub const SECRET_HASH_LEN: usize = 32;

/// The SHA-256 hash of a session's secret. Not secret itself, but shown nowhere (inspection,
/// watch and the audit never carry it).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretHash(pub [u8; SECRET_HASH_LEN]);

impl fmt::Debug for SecretHash {
    /// The first four bytes: enough to tell two hashes apart in a test failure.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, ..] = self.0;
        write!(f, "SecretHash({a:02x}{b:02x}{c:02x}{d:02x}..)")
    }
}

/// What a command that acts on a session presents: the hash of the caller's secret (`None`
/// only in legacy commands) and the caller's principal (as the server authenticated it;
/// `""` in legacy commands).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionProof {
    pub secret_hash: Option<SecretHash>,
    pub principal: String,
}

impl SessionProof {
    /// The proof of a caller who presented the secret hashing to `hash`, as `principal`.
    pub fn new(hash: SecretHash, principal: &str) -> SessionProof {
        SessionProof {
            secret_hash: Some(hash),
            principal: principal.to_owned(),
        }
    }

    /// The proof of a command written before session secrets: no hash, no principal.
    pub fn legacy() -> SessionProof {
        SessionProof::default()
    }
}

/// Why a caller may not act on a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotYours {
    /// The command carries no secret hash, but the session has one.
    SecretMissing,
    /// The secret presented is not the session's.
    WrongSecret,
    /// The session was opened before session secrets; only a command without one acts on it.
    LegacySession,
    /// The session was opened by another authenticated principal.
    OtherPrincipal { owner: String, caller: String },
}

impl fmt::Display for NotYours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotYours::SecretMissing => write!(f, "no session secret was presented"),
            NotYours::WrongSecret => write!(f, "the session secret presented is not its secret"),
            NotYours::LegacySession => write!(
                f,
                "it was opened before session secrets existed and cannot be acted on with one"
            ),
            NotYours::OtherPrincipal { owner, caller } => write!(
                f,
                "it is owned by principal `{owner}`, and the caller is `{caller}`"
            ),
        }
    }
}

/// Whether `principal` is an authenticated identity a session can be bound to.
pub fn is_authenticated(principal: &str) -> bool {
    !principal.is_empty() && principal != UNAUTHENTICATED_PRINCIPAL
}

/// Checks that `proof` may act on `session`, opened with `secret_hash` by `owner`.
pub(crate) fn check_proof(
    session: SessionId,
    secret_hash: Option<SecretHash>,
    owner: &str,
    proof: &SessionProof,
) -> Result<(), LockError> {
    let why = match (secret_hash, proof.secret_hash) {
        (None, None) => return Ok(()),
        (None, Some(_)) => NotYours::LegacySession,
        (Some(_), None) => NotYours::SecretMissing,
        (Some(ours), Some(theirs)) if ours != theirs => NotYours::WrongSecret,
        (Some(_), Some(_)) if is_authenticated(owner) && proof.principal != owner => {
            NotYours::OtherPrincipal {
                owner: owner.to_owned(),
                caller: proof.principal.clone(),
            }
        }
        (Some(_), Some(_)) => return Ok(()),
    };
    Err(LockError::SessionNotYours { session, why })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: SecretHash = SecretHash([1; SECRET_HASH_LEN]);
    const THEIRS: SecretHash = SecretHash([2; SECRET_HASH_LEN]);

    fn why(secret_hash: Option<SecretHash>, owner: &str, proof: &SessionProof) -> Option<NotYours> {
        match check_proof(SessionId(5), secret_hash, owner, proof) {
            Ok(()) => None,
            Err(LockError::SessionNotYours { session, why }) => {
                assert_eq!(session, SessionId(5));
                Some(why)
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_secret_and_an_authenticated_owner_decide() {
        let alice = SessionProof::new(OURS, "alice");
        assert_eq!(why(Some(OURS), "alice", &alice), None);
        assert_eq!(
            why(Some(OURS), "alice", &SessionProof::new(OURS, "mallory")),
            Some(NotYours::OtherPrincipal {
                owner: "alice".into(),
                caller: "mallory".into()
            })
        );
        assert_eq!(
            why(Some(OURS), "alice", &SessionProof::new(THEIRS, "alice")),
            Some(NotYours::WrongSecret)
        );
        assert_eq!(
            why(Some(OURS), "alice", &SessionProof::legacy()),
            Some(NotYours::SecretMissing)
        );
        // An unauthenticated session is bound by its secret alone.
        let anyone = SessionProof::new(OURS, "bob");
        assert_eq!(why(Some(OURS), UNAUTHENTICATED_PRINCIPAL, &anyone), None);
        assert_eq!(why(Some(OURS), "", &anyone), None);
    }

    #[test]
    fn a_legacy_session_answers_only_legacy_commands() {
        assert_eq!(why(None, "alice", &SessionProof::legacy()), None);
        assert_eq!(
            why(None, "alice", &SessionProof::new(OURS, "alice")),
            Some(NotYours::LegacySession)
        );
    }

    #[test]
    fn the_debug_form_shows_a_prefix_only() {
        assert_eq!(format!("{OURS:?}"), "SecretHash(01010101..)");
    }
}
