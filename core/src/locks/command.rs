//! The commands the log carries and the replies the state machine gives.

use std::collections::BTreeSet;

use super::class::ClassSpec;
use super::error::LockError;
use super::ids::{ForceReleaseId, PermitSlot, RequestId, Revision, SessionId, Token};
use super::owner::{SecretHash, SessionProof};
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
    /// May register, change and remove classes, and declare semaphores.
    ClassAdmin,
}

impl Role {
    /// The role's name in the core and the log (`on-call`, `incident-commander`,
    /// `class-admin`; the server's claim names are `picket-...`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::OnCall => "on-call",
            Role::IncidentCommander => "incident-commander",
            Role::ClassAdmin => "class-admin",
        }
    }

    /// The role named `name` by `as_str`, if any.
    pub fn from_name(name: &str) -> Option<Role> {
        [Role::OnCall, Role::IncidentCommander, Role::ClassAdmin]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

impl Command {
    /// The cluster version that added this command (docs/upgrades.md): a leader proposes it
    /// only once the cluster is there. (`SetClusterVersion`, added with 2 too, is the leader's
    /// own, proposed once every member supports the version it sets.)
    pub fn cluster_version_needed(&self) -> u32 {
        match self {
            Command::RecordSnapshotSave { .. } => 2,
            _ => super::CLUSTER_VERSION_FIRST,
        }
    }

    /// Whether applying it may hand a key to a waiter (a hold or a wait ends, or a semaphore
    /// gains permits), other than `ExpireWaits`, which removes the due waits before it grants.
    /// At cluster version 1 the log carries an `ExpireWaits` before such a command
    /// ([`super::CLUSTER_VERSION_HAND_OFF_EXPIRY`]).
    pub fn may_hand_over(&self) -> bool {
        matches!(
            self,
            Command::Release { .. }
                | Command::CloseSession { .. }
                | Command::ExpireSessions { .. }
                | Command::CancelWait { .. }
                | Command::ApproveForceRelease { .. }
                | Command::SetSemaphore { .. }
        )
    }
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

/// How an `Acquire` wants a key, and how a key is held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockMode {
    /// One holder alone (the only mode before shared locks: a command or snapshot without a
    /// mode means this).
    #[default]
    Exclusive,
    /// Any number of shared holders together, never with an exclusive one.
    Shared,
    /// One permit of a semaphore key (declared with `SetSemaphore`): up to its N holders
    /// together, each in its own slot `0..N`.
    Permit,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
            LockMode::Permit => "permit",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an `Acquire` that cannot be granted at once waits: in the key's FIFO queue, until it is
/// granted, cancelled (`CancelWait`, the session's end) or, with `timeout_ms`, until the log
/// time of queueing plus that passed (the wait is then removed: by the leader's `ExpireWaits`,
/// or by the next hand-off of the key from cluster version 2). On the wire: `wait = true` and
/// `wait_timeout_ms` (0: none) of the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wait {
    pub timeout_ms: Option<u64>,
}

impl Wait {
    /// Waits until granted or cancelled, with no deadline of its own.
    pub const UNBOUNDED: Wait = Wait { timeout_ms: None };

    /// Waits at most `ms` after it was queued.
    pub const fn within_ms(ms: u64) -> Wait {
        Wait {
            timeout_ms: Some(ms),
        }
    }
}

/// A command in the replicated log. Applying it is deterministic: same state, same command, same
/// time -> same new state and same reply, on every replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Opens a session. `ttl_ms: None` takes the cluster default. `secret_hash`: the hash of
    /// the session's secret (`None` only in legacy commands); a live session with the same hash
    /// and identity is the answer to a retry.
    CreateSession {
        ttl_ms: Option<u64>,
        identity: Identity,
        secret_hash: Option<SecretHash>,
    },
    /// Closes a session: releases its holds and removes its waits in this revision.
    CloseSession {
        session: SessionId,
        proof: SessionProof,
    },
    /// Proposed by the leader when sessions' deadlines passed. Unknown ids are skipped.
    ExpireSessions { sessions: Vec<SessionId> },
    /// Takes `key` in `namespace`, or queues for it (`wait`: see [`Wait`]), or, with no wait,
    /// answers `Busy`. `mode`: exclusive, or shared with other shared holders (see
    /// `docs/locks.md`).
    Acquire {
        session: SessionId,
        proof: SessionProof,
        request: RequestId,
        namespace: String,
        key: String,
        mode: LockMode,
        wait: Option<Wait>,
    },
    /// Leaves the queue of `key`. Idempotent: a session that does not wait changes nothing;
    /// one that already holds the key (the cancel raced the grant) is answered the grant.
    CancelWait {
        session: SessionId,
        proof: SessionProof,
        namespace: String,
        key: String,
    },
    /// Proposed by the leader when wait deadlines passed: removes every wait whose deadline is
    /// at or before the log time (the earliest first, at most [`super::EXPIRE_WAITS_BATCH_MAX`]).
    ExpireWaits,
    /// Releases a hold; the next waiter (if any) is granted in this revision.
    Release {
        session: SessionId,
        proof: SessionProof,
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
    /// Declares `namespace/key` a semaphore with `permits` permits, changes its N, or (with
    /// `permits: 0`) removes the declaration (see `docs/locks.md`, "Semaphores").
    SetSemaphore {
        actor: Actor,
        namespace: String,
        key: String,
        permits: u32,
        reason: String,
    },
    /// Records in the audit trail that `actor` asked for a backup of the whole state
    /// (`Admin.SaveSnapshot`, role class-admin); the leader proposes it before it reads the
    /// state, so the backup holds its own record. Changes nothing else.
    RecordSnapshotSave { actor: Actor },
    /// Steps the cluster version up to `version` (docs/upgrades.md, "The cluster version").
    /// Proposed by the leader alone, once every member told it that it supports `version`;
    /// refused if `version` is not above the current one. `reason`: which member runs what.
    SetClusterVersion { version: u32, reason: String },
    /// First step of the two-person rule. `holder`: the session whose hold is meant (`None`:
    /// the one hold with `expected_token`; several shared holders granted together share a
    /// token, and then the session must be named).
    RequestForceRelease {
        actor: Actor,
        namespace: String,
        key: String,
        expected_token: Token,
        holder: Option<SessionId>,
        reason: String,
        revoke_session: bool,
        /// The requester's answers about the holder; binding for an advisory class
        /// ([`super::force_release::Checklist::says_double_run_unsafe`]).
        checklist: super::force_release::Checklist,
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
    /// The session holds the key with this token (also the answer to a retry by the holder);
    /// `slot`: the permit's slot on a semaphore key (`None` for a lock).
    Granted {
        token: Token,
        permit: Option<PermitSlot>,
    },
    /// The session waits; `position` 1 is next in line.
    Queued { position: u32 },
    /// Held by another session and the caller did not want to wait (for a shared key, its
    /// oldest holder).
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
    /// `CancelWait`: `removed` if the session was waiting; `held`: the session holds the key
    /// (granted before the cancel), with this token, so it can release it.
    WaitCancelled {
        removed: bool,
        held: Option<Token>,
    },
    /// `ExpireWaits`: how many waits were removed.
    WaitsExpired {
        removed: usize,
    },
    Released {
        token: Token,
        /// The waiter granted in the same revision, if any.
        next: Option<(SessionId, Token)>,
    },
    ClassPut {
        replaced: bool,
    },
    ClassRemoved,
    /// `SetSemaphore`: the N before (0: the key was not a semaphore).
    SemaphoreSet {
        previous_permits: u32,
    },
    /// `RecordSnapshotSave`: recorded in the audit trail.
    SnapshotSaveRecorded,
    /// `SetClusterVersion`: the cluster version before the step.
    ClusterVersionSet {
        previous: u32,
    },
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

    /// The kind of request this replies to.
    pub fn kind(&self) -> &'static str {
        match self {
            RememberedReply::Acquire(_) => "Acquire",
            RememberedReply::Released { .. } => "Release",
        }
    }
}

/// The key a remembered request was for. With the reply's kind (and, for a release, the
/// reply's token, which is the request's token) it names the request, so that a reused id with
/// another command is told apart from a retry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestTarget {
    pub namespace: String,
    pub key: String,
    /// The mode an `Acquire` asked for (`None` for a release, or an acquire remembered before
    /// modes were bound to request ids: it matches any mode, as it did then).
    pub mode: Option<LockMode>,
}

/// A request a session remembers: its id, its reply and (since request ids are bound to their
/// request) its target. `target: None`: remembered before the binding existed (an old
/// snapshot); such a reply answers any request with its id, as it did then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remembered {
    pub request: RequestId,
    pub reply: RememberedReply,
    pub target: Option<RequestTarget>,
}

impl Remembered {
    /// How the request is named in a `RequestIdReused` error, e.g. `Acquire orders/first` or
    /// `Release orders/first with token 7`.
    pub fn describe(&self) -> String {
        let target = match &self.target {
            Some(t) => format!("{}/{}", t.namespace, t.key),
            None => "(key not recorded)".to_owned(),
        };
        let mode = self.target.as_ref().and_then(|t| t.mode);
        describe_request(self.reply.kind(), &target, self.released_token(), mode)
    }

    fn released_token(&self) -> Option<Token> {
        match self.reply {
            RememberedReply::Released { token, .. } => Some(token),
            RememberedReply::Acquire(_) => None,
        }
    }

    /// Whether a request of `kind` on `namespace/key` (releasing `token`, acquiring in
    /// `mode`) is a retry of this one. An unbound (legacy) remembered reply matches any
    /// request, as before the binding; one without a mode matches any mode.
    pub fn matches(
        &self,
        kind: &str,
        namespace: &str,
        key: &str,
        token: Option<Token>,
        mode: Option<LockMode>,
    ) -> bool {
        let Some(target) = &self.target else {
            return true;
        };
        self.reply.kind() == kind
            && target.namespace == namespace
            && target.key == key
            && self.released_token() == token
            && (target.mode.is_none() || target.mode == mode)
    }
}

/// `Acquire orders/first`, `Acquire orders/first shared`, `Release orders/first with token 7`.
pub(crate) fn describe_request(
    kind: &str,
    target: &str,
    token: Option<Token>,
    mode: Option<LockMode>,
) -> String {
    match (token, mode) {
        (Some(token), _) => format!("{kind} {target} with token {}", token.0),
        (None, Some(mode)) if mode != LockMode::Exclusive => format!("{kind} {target} {mode}"),
        (None, _) => format!("{kind} {target}"),
    }
}

/// What applying one command produced.
pub type Outcome = Result<Reply, LockError>;
