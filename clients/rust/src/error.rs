//! What can go wrong for a client: typed, each variant naming what happened.

use std::fmt;

use thiserror::Error;
use tonic::{Code, Status};

use picket_proto::status::{error_detail, rule};

/// Why a session (and every lock it held) is lost. Final: a lost session never comes back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The server answered a keepalive with `lost = true`: the session was closed, expired or
    /// revoked (e.g. by an approved force-release with `revoke_session`).
    Revoked,
    /// The server answered `NOT_FOUND` / `unknown_session` for the session.
    UnknownSession,
    /// No keepalive was acknowledged in time: `last acknowledged keepalive send time + ttl`
    /// passed. The server may not have expired the session yet, but it can from now on, so the
    /// client stops claiming its locks first.
    KeepAliveExpired {
        /// The session's TTL the deadline was counted with.
        ttl_ms: u64,
    },
    /// The client closed the session ([`crate::Session::close`] or its last handle was
    /// dropped).
    Closed,
    /// The server refused the session's keepalive on its own (e.g. `session_not_yours`: the
    /// caller's principal is not the one that opened the session). The client stops claiming
    /// the session's locks at once; the server will expire the session.
    KeepAliveRefused { rule: String, message: String },
    /// This lock (not the session, which lives on) was force-released by two operators without
    /// revoking the session; the keepalive answers said so. Fires only the guard of that token.
    ForceReleased {
        /// The revision of the release: the key's floor, above this guard's token.
        revision: u64,
        force_release_id: u64,
    },
    /// The server pushed the session's end on the session stream, with its cause, as soon as
    /// its lock log showed it (a keepalive answer would have said [`LostReason::Revoked`],
    /// later).
    Ended {
        cause: SessionEnd,
        /// The revision of the lock log where the session ended.
        revision: u64,
    },
}

/// How a session ended at the server (the cause in [`LostReason::Ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// Closed with its secret (by this process or any other that has the secret).
    Closed,
    /// Its TTL ran out at the leader.
    Expired,
    /// Revoked by an approved force-release with `revoke_session`.
    Revoked {
        /// The force-release request (0: not known).
        force_release_id: u64,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Revoked => write!(f, "the server says the session is gone (closed, expired or revoked)"),
            LostReason::UnknownSession => write!(f, "the server does not know the session (unknown_session)"),
            LostReason::KeepAliveExpired { ttl_ms } => write!(
                f,
                "no keepalive was acknowledged within the session TTL of {ttl_ms} ms (counted from the last acknowledged send)"
            ),
            LostReason::Closed => write!(f, "the session was closed by this client"),
            LostReason::KeepAliveRefused { rule, message } => {
                write!(f, "the server refused the session's keepalive ({rule}): {message}")
            }
            LostReason::Ended { cause, revision } => {
                let how = match cause {
                    SessionEnd::Closed => "closed".to_owned(),
                    SessionEnd::Expired => "expired (its TTL ran out at the leader)".to_owned(),
                    SessionEnd::Revoked { force_release_id } => {
                        format!("revoked by force-release request {force_release_id}")
                    }
                };
                write!(f, "the server says the session was {how} (revision {revision})")
            }
            LostReason::ForceReleased { revision, force_release_id } => write!(
                f,
                "the lock was force-released by two operators (request {force_release_id}, revision {revision}); the session lives on but no longer holds it"
            ),
        }
    }
}

/// A refusal by the server: the status code and the `ErrorDetail` rule (`""` when the status
/// carried no detail, e.g. from a proxy or the transport).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: Code,
    /// The stable rule name (`unknown_session`, `not_holder`, `fenced_not_acknowledged`, ...).
    pub rule: String,
    pub message: String,
    /// For `invalid_argument`: the request field at fault.
    pub field: String,
    /// For `compacted`: where the retained history starts.
    pub oldest_available_revision: Option<u64>,
}

impl Refusal {
    pub fn from_status(status: &Status) -> Refusal {
        let detail = error_detail(status);
        Refusal {
            code: status.code(),
            rule: detail.as_ref().map(|d| d.rule.clone()).unwrap_or_default(),
            message: status.message().to_owned(),
            field: detail.as_ref().map(|d| d.field.clone()).unwrap_or_default(),
            oldest_available_revision: detail.and_then(|d| d.oldest_available_revision),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rule.is_empty() {
            write!(f, "{:?}: {}", self.code, self.message)
        } else {
            write!(f, "{:?} ({}): {}", self.code, self.rule, self.message)
        }
    }
}

/// Every error of the client library.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ClientError {
    #[error("no endpoints: give at least one replica address (e.g. 127.0.0.1:7401)")]
    NoEndpoints,
    #[error("bad endpoint `{endpoint}`: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    #[error("bad credential `{name}`: {reason}")]
    BadCredential { name: &'static str, reason: String },
    #[error("the client configuration is invalid: {0}")]
    BadConfig(String),
    /// A TLS file or setting is unusable (`what`: `ca`, `cert` or `key`).
    #[error("bad TLS {what}: {reason}")]
    BadTls { what: &'static str, reason: String },
    /// No replica gave an answer (unreachable, no leader, busy, timed out) within the retry
    /// budget. The request may or may not have been applied; a retry with the same request id is
    /// safe.
    #[error("{what}: no replica answered within the retry budget ({attempts} attempts over {elapsed_ms} ms); last error: {last}")]
    Unavailable {
        what: &'static str,
        attempts: u32,
        elapsed_ms: u64,
        last: String,
        /// The last attempt failed as a TLS disagreement does (see [`super::TlsMismatch`]).
        tls_mismatch: Option<super::TlsMismatch>,
    },
    /// The server refused the request; branch on `refusal.rule`.
    #[error("{what} refused: {refusal}")]
    Refused {
        what: &'static str,
        refusal: Refusal,
    },
    /// The session is lost, and with it every lock it held.
    #[error("session {session_id} is lost: {reason}")]
    SessionLost { session_id: u64, reason: LostReason },
    /// One lock of a live session is lost (force-released without revoking the session).
    #[error("`{namespace}`/`{key}` (token {token}) is no longer held: {reason}")]
    LockLost {
        namespace: String,
        key: String,
        token: u64,
        reason: LostReason,
    },
    /// `try_lock` found the key held.
    #[error("`{namespace}`/`{key}` is held by session {holder_session_id} with token {token}")]
    Held {
        namespace: String,
        key: String,
        holder_session_id: u64,
        token: u64,
    },
    /// `lock_within` did not get the key in time; the server removed the wait.
    #[error("`{namespace}`/`{key}` was not granted within {timeout_ms} ms: the wait was removed")]
    WaitTimedOut {
        namespace: String,
        key: String,
        timeout_ms: u64,
    },
    /// The server's answer lacked something it must carry (a server bug).
    #[error("{what}: the server's answer has no `{field}`")]
    BadAnswer {
        what: &'static str,
        field: &'static str,
    },
    /// A watch asked for history the server no longer keeps.
    #[error("watch: revision {from_revision} is compacted; history starts at {oldest_available_revision}: re-read the state and watch from there")]
    Compacted {
        from_revision: u64,
        oldest_available_revision: u64,
    },
}

impl ClientError {
    /// The server's rule name, for a refusal.
    pub fn rule(&self) -> Option<&str> {
        match self {
            ClientError::Refused { refusal, .. } => Some(&refusal.rule),
            _ => None,
        }
    }

    /// Whether the failure looks like the two ends disagreeing about TLS (plaintext to a TLS
    /// port, TLS to a plaintext one, an untrusted server, a missing client certificate): only
    /// for [`ClientError::Unavailable`], judged from its last error and the scheme it used.
    pub fn tls_mismatch(&self) -> Option<super::TlsMismatch> {
        match self {
            ClientError::Unavailable { tls_mismatch, .. } => *tls_mismatch,
            _ => None,
        }
    }

    pub(crate) fn refused(what: &'static str, status: &Status) -> ClientError {
        ClientError::Refused {
            what,
            refusal: Refusal::from_status(status),
        }
    }

    /// Whether a refusal means the session is gone.
    pub(crate) fn is_unknown_session(&self) -> bool {
        self.rule() == Some(UNKNOWN_SESSION)
    }
}

/// The rule of a session the state machine does not know (closed, expired, revoked).
pub const UNKNOWN_SESSION: &str = "unknown_session";
/// The rule of a request id that fell out of the session's dedup window.
pub const REQUEST_TOO_OLD: &str = "request_too_old";
/// The rule of a wait removed at its deadline.
pub const WAIT_EXPIRED: &str = "wait_expired";
/// The rule of a retried `Acquire` whose wait is gone (timed out, cancelled, or granted and
/// released since).
pub const WAIT_ENDED: &str = "wait_ended";

/// How the retry loop treats a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A non-leader pointed at the leader: go there now.
    Redirect(String),
    /// Another replica may answer (transport failure, no leader known, timeout): rotate.
    Rotate,
    /// The same replica may answer later (busy).
    Later,
    /// Final: hand the refusal to the caller.
    No,
}

/// Classifies a status per docs/api.md's error mapping.
pub(crate) fn classify(status: &Status) -> Retry {
    let detail = error_detail(status);
    let rule_name = detail.as_ref().map(|d| d.rule.as_str()).unwrap_or("");
    if rule_name == rule::NOT_LEADER || (detail.is_none() && status.code() == Code::Unavailable) {
        return match picket_proto::status::leader_hint(status).and_then(|h| h.endpoint) {
            Some(endpoint) => Retry::Redirect(endpoint),
            None => Retry::Rotate,
        };
    }
    if rule_name == rule::BUSY {
        return Retry::Later;
    }
    if detail.as_ref().is_some_and(|d| d.retryable) {
        return Retry::Rotate;
    }
    match status.code() {
        // Transport-level trouble without a Picket detail: another replica may do better.
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
            if detail.is_none() =>
        {
            Retry::Rotate
        }
        _ => Retry::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::status::{busy_status, not_leader_status, LeaderHint};

    #[test]
    fn statuses_are_classified_per_the_error_mapping() {
        let hinted = not_leader_status(&LeaderHint {
            node_id: Some(2),
            endpoint: Some("http://127.0.0.1:7402".into()),
        });
        assert_eq!(
            classify(&hinted),
            Retry::Redirect("http://127.0.0.1:7402".into())
        );
        assert_eq!(
            classify(&not_leader_status(&LeaderHint::default())),
            Retry::Rotate
        );
        assert_eq!(classify(&busy_status("waits")), Retry::Later);
        assert_eq!(
            classify(&Status::unavailable("connection refused")),
            Retry::Rotate
        );
        assert_eq!(classify(&Status::permission_denied("no")), Retry::No);
    }

    #[test]
    fn a_refusal_names_its_rule() {
        let status = Status::from(picket_proto::ConvertError::new("acquire.key", "too long"));
        let error = ClientError::refused("acquire", &status);
        assert_eq!(error.rule(), Some("invalid_argument"));
        assert!(error.to_string().contains("acquire.key: too long"));
    }
}
