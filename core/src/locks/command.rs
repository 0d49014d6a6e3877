//! The commands the log carries and the replies the state machine gives.

use std::collections::BTreeSet;

use super::class::ClassSpec;
use super::error::LockError;
use super::ids::{ForceReleaseId, RequestId, Revision, SessionId, Token};
use crate::time::Instant;

/// Who a client session says it is. `principal` is the authenticated identity (filled in by the
/// server from TLS/OIDC); the other fields are what the client reports, for inspection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub principal: String,
}

/// An operator role, asserted by the server after authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// May request, approve and deny force-releases.
    OnCall,
    /// May request, approve and deny force-releases (approving in place of a second on-call);
    /// like anyone, never both request and approve the same one.
    IncidentCommander,
    /// May register, change and remove classes.
    ClassAdmin,
}

/// The operator behind an admin command: an authenticated principal and its roles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actor {
    pub principal: String,
    pub roles: BTreeSet<Role>,
}

impl Actor {
    pub fn new(principal: &str, roles: &[Role]) -> Actor {
        Actor {
            principal: principal.to_owned(),
            roles: roles.iter().copied().collect(),
        }
    }

    pub fn has_any(&self, roles: &[Role]) -> bool {
        roles.iter().any(|role| self.roles.contains(role))
    }
}

/// A command in the replicated log. Applying it is deterministic: same state, same command, same
/// time -> same new state and same reply, on every replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Opens a session. `ttl_ms: None` takes the cluster default.
    CreateSession {
        ttl_ms: Option<u64>,
        identity: Identity,
    },
    /// Closes a session: releases its holds and removes its waits in this revision.
    CloseSession { session: SessionId },
    /// Proposed by the leader when sessions' deadlines passed. Unknown ids are skipped.
    ExpireSessions { sessions: Vec<SessionId> },
    /// Takes `key` in `namespace`, or queues for it (`wait`), or answers `Busy`.
    Acquire {
        session: SessionId,
        request: RequestId,
        namespace: String,
        key: String,
        wait: bool,
    },
    /// Releases a hold; the next waiter (if any) is granted in this revision.
    Release {
        session: SessionId,
        request: RequestId,
        namespace: String,
        key: String,
        token: Token,
    },
    /// Registers a class, or replaces the class registered at the same prefix.
    PutClass {
        actor: Actor,
        namespace: String,
        class: ClassSpec,
    },
    /// Removes the class registered at `prefix` (`""` = back to the built-in default).
    RemoveClass {
        actor: Actor,
        namespace: String,
        prefix: String,
    },
    /// First step of the two-person rule.
    RequestForceRelease {
        actor: Actor,
        namespace: String,
        key: String,
        expected_token: Token,
        reason: String,
        revoke_session: bool,
    },
    /// Second step, by a different principal who acknowledges the fenced flag they were shown.
    ApproveForceRelease {
        actor: Actor,
        id: ForceReleaseId,
        acknowledged_fenced: bool,
    },
    /// Withdraws (requester) or denies (anyone else with the role) a pending request.
    DenyForceRelease {
        actor: Actor,
        id: ForceReleaseId,
        reason: String,
    },
}

/// The answer to `Acquire`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// The session holds the key with this token (also the answer to a retry by the holder).
    Granted { token: Token },
    /// The session waits; `position` 1 is next in line.
    Queued { position: u32 },
    /// Held by another session and the caller did not want to wait.
    Busy { holder: SessionId, token: Token },
}

/// The successful reply to a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    SessionCreated {
        session: SessionId,
        ttl_ms: u64,
    },
    SessionClosed {
        holds_released: usize,
        waits_removed: usize,
    },
    SessionsExpired {
        expired: Vec<SessionId>,
    },
    Acquire(AcquireReply),
    Released {
        token: Token,
        /// The waiter granted in the same revision, if any.
        next: Option<(SessionId, Token)>,
    },
    ClassPut {
        replaced: bool,
    },
    ClassRemoved,
    ForceReleaseRequested {
        id: ForceReleaseId,
        fenced: bool,
        safety: &'static str,
        expires_at: Instant,
    },
    ForceReleaseApproved {
        /// The key's new floor: every later token on it is above this.
        floor: Revision,
        released_token: Token,
        /// The waiter granted in the same revision, if any.
        next: Option<(SessionId, Token)>,
        session_revoked: Option<SessionId>,
        /// The class's kind at the release (the request's, or the approval was refused).
        fenced: bool,
    },
    ForceReleaseDenied,
}

/// A reply a session remembers for retried request ids (only `Acquire` and `Release` carry
/// request ids). Small and `Copy`: every session keeps up to `dedup_window` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RememberedReply {
    Acquire(AcquireReply),
    Released {
        token: Token,
        next: Option<(SessionId, Token)>,
    },
}

impl RememberedReply {
    pub fn to_reply(self) -> Reply {
        match self {
            RememberedReply::Acquire(reply) => Reply::Acquire(reply),
            RememberedReply::Released { token, next } => Reply::Released { token, next },
        }
    }
}

/// What applying one command produced.
pub type Outcome = Result<Reply, LockError>;
