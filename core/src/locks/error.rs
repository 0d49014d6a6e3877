//! Every way a command can be refused. A refused command changes nothing but the revision.

use thiserror::Error;

use super::command::LockMode;
use super::ids::{ForceReleaseId, RequestId, SessionId, Token};
use super::names::NameError;
use super::owner::NotYours;

/// A caller's mistake or a bound that was hit; each variant names the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LockError {
    #[error(transparent)]
    BadName(#[from] NameError),
    #[error("{field} is {len} bytes long: at most {max} allowed")]
    TextTooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} is empty: it is required")]
    TextEmpty { field: &'static str },

    // Sessions.
    #[error("session {session} is unknown (never created, closed, expired or revoked)")]
    UnknownSession { session: SessionId },
    #[error("session TTL {ttl_ms} ms is outside the cluster's bounds [{min}, {max}] ms")]
    SessionTtlOutOfBounds { ttl_ms: u64, min: u64, max: u64 },
    #[error(
        "session TTL {ttl_ms} ms is above the {max} ms allowed by class `{class}` for this key"
    )]
    SessionTtlAboveClassMax {
        ttl_ms: u64,
        class: String,
        max: u64,
    },
    #[error("too many sessions: at most {max} live sessions")]
    TooManySessions { max: usize },
    #[error("session {session} is not yours: {why}")]
    SessionNotYours { session: SessionId, why: NotYours },
    #[error("the session secret is already the secret of session {session}, opened with another identity: a retry must send the same identity, a new session a new secret")]
    SessionSecretInUse { session: SessionId },
    #[error("request {request} of session {session} was {was}; this is {this}: a request id names one request, a new request needs a new id")]
    RequestIdReused {
        session: SessionId,
        request: RequestId,
        was: String,
        this: String,
    },
    #[error("request {request} of session {session} is older than its retry window (newest {newest}): a retry this late cannot be answered safely")]
    RequestTooOld {
        session: SessionId,
        request: RequestId,
        newest: RequestId,
    },

    // Locks.
    #[error("session {session} already holds or waits for {max} keys: at most {max} per session")]
    TooManyHolds { session: SessionId, max: usize },
    #[error("`{namespace}/{key}` already has {max} waiters: at most {max} per key")]
    TooManyWaiters {
        namespace: String,
        key: String,
        max: usize,
    },
    #[error("wait timeout {given} ms is outside [1, {max}] ms (omit it to wait until granted or the session ends)")]
    WaitTimeoutOutOfBounds { given: u64, max: u64 },
    #[error("session {session} no longer waits for `{namespace}/{key}`: its wait timed out after {timeout_ms} ms (log time) and was removed")]
    WaitExpired {
        session: SessionId,
        namespace: String,
        key: String,
        timeout_ms: u64,
    },
    #[error("session {session} no longer waits for `{namespace}/{key}`: the wait was cancelled")]
    WaitCancelled {
        session: SessionId,
        namespace: String,
        key: String,
    },
    #[error("session {session} neither holds nor waits for `{namespace}/{key}` any more: the wait of this request ended (timed out, cancelled, or granted and released since)")]
    WaitEnded {
        session: SessionId,
        namespace: String,
        key: String,
    },
    #[error("session {session} {} `{namespace}/{key}` {has} and asked for it {asked}: a session cannot change its mode on a key (no upgrade or downgrade); release it (or cancel the wait) and acquire it again in the other mode", if *.holds { "holds" } else { "waits for" })]
    ModeChangeNotSupported {
        session: SessionId,
        namespace: String,
        key: String,
        has: LockMode,
        asked: LockMode,
        /// It holds the key (else it waits for it).
        holds: bool,
    },
    #[error("`{namespace}/{key}` is not a semaphore: acquire it exclusive or shared, or declare it a semaphore first (picketctl semaphore set)")]
    NotASemaphore { namespace: String, key: String },
    #[error("`{namespace}/{key}` is a semaphore with {permits} permits: acquire a permit (mode permit); exclusive and shared acquires are refused so that a correctness lock is never silently shared")]
    KeyIsSemaphore {
        namespace: String,
        key: String,
        permits: u32,
    },
    #[error("session {session} does not hold `{namespace}/{key}`")]
    NotHolder {
        namespace: String,
        key: String,
        session: SessionId,
    },
    #[error("wrong token {given} for `{namespace}/{key}`: the session holds it with {current}")]
    WrongToken {
        namespace: String,
        key: String,
        given: Token,
        current: Token,
    },

    // Classes.
    /// `field`: the class's field the rule is about (`session_ttl_ms_default`,
    /// `session_ttl_ms_max`), so that a form can show the rule next to it.
    #[error("class `{class}`: {rule}")]
    BadClass {
        class: String,
        field: &'static str,
        rule: String,
    },
    #[error("namespace `{namespace}` already has {max} classes: at most {max}")]
    TooManyClasses { namespace: String, max: usize },
    #[error("namespace `{namespace}` has no class registered at prefix `{prefix}`")]
    UnknownClass { namespace: String, prefix: String },

    // Semaphores.
    #[error("permits {given} is outside [1, {max}] (0 removes the declaration)")]
    PermitsOutOfBounds { given: u32, max: u32 },
    #[error("`{namespace}/{key}` is held or queued for as a lock: declare it a semaphore once nobody holds or waits for it")]
    KeyHeldAsLock { namespace: String, key: String },
    #[error("semaphore `{namespace}/{key}` has {holders} holders and {waiters} waiters: it can be removed only when nobody holds or waits")]
    SemaphoreInUse {
        namespace: String,
        key: String,
        holders: usize,
        waiters: usize,
    },

    // Operators.
    #[error("{principal} lacks the role to {action}: one of {needed} is required")]
    MissingRole {
        principal: String,
        action: &'static str,
        needed: &'static str,
    },

    // Force-release.
    #[error("`{namespace}/{key}` is not held: nothing to force-release")]
    NotHeld { namespace: String, key: String },
    #[error("`{namespace}/{key}` is held with token {current}, not the expected {expected}")]
    TokenMismatch {
        namespace: String,
        key: String,
        expected: Token,
        current: Token,
    },
    #[error("`{namespace}/{key}` has {count} shared holders with token {token}: name the session whose hold to force-release")]
    HolderAmbiguous {
        namespace: String,
        key: String,
        token: Token,
        count: usize,
    },
    #[error("too many pending force-release requests: at most {max}")]
    TooManyForceReleases { max: usize },
    #[error("force-release request {id} is unknown: never made, or already approved, denied or expired (requests expire 10 min after they are made, in log time)")]
    UnknownForceRelease { id: ForceReleaseId },
    #[error(
        "{principal} made force-release request {id} and cannot approve it: a second person must"
    )]
    ApproverIsRequester {
        id: ForceReleaseId,
        principal: String,
    },
    #[error("{namespace}/{key} is an advisory lock and the checklist says a double run is unsafe (holder stopped: {holder_stopped}; double run acceptable: {double_run_acceptable}): nothing will refuse the old holder, so the request needs a statement of why the release is still right, and an incident commander's approval")]
    AdvisoryStatementRequired {
        namespace: String,
        key: String,
        holder_stopped: &'static str,
        double_run_acceptable: &'static str,
    },
    #[error("the cluster version is {current}; a step to {asked} is not above it (the cluster version only rises)")]
    ClusterVersionNotAbove { current: u32, asked: u32 },
    #[error("force-release request {id} is for an advisory lock whose checklist says a double run is unsafe: only an incident commander (role picket-incident-commander) may approve it; {principal} is not one")]
    IncidentCommanderRequired {
        id: ForceReleaseId,
        principal: String,
    },
    #[error("force-release request {id} is for a {} lock; the approval acknowledged {}: approve again after reading the safety statement", if *.fenced { "fenced" } else { "advisory" }, if *.acknowledged { "fenced" } else { "advisory" })]
    FencedNotAcknowledged {
        id: ForceReleaseId,
        fenced: bool,
        acknowledged: bool,
    },
    #[error("the class of `{namespace}/{key}` is {} now but was {} when request {id} was made: nobody approved what the release means now; deny it and make a new request, which shows the new kind", kind_word(*.fenced), kind_word(*.requested_fenced))]
    ClassKindChanged {
        id: ForceReleaseId,
        namespace: String,
        key: String,
        requested_fenced: bool,
        fenced: bool,
    },
    #[error("`{namespace}/{key}` already has force-release request {id} pending (by {requester}) for the same holder and token: approve or deny that one (picketctl force-release approve {})", .id.0)]
    ForceReleasePending {
        id: ForceReleaseId,
        namespace: String,
        key: String,
        requester: String,
    },
    #[error("the holder of `{namespace}/{key}` changed since request {id} (expected session {session} with {token}): make a new request")]
    HolderChanged {
        id: ForceReleaseId,
        namespace: String,
        key: String,
        session: SessionId,
        token: Token,
    },
}

fn kind_word(fenced: bool) -> &'static str {
    if fenced {
        "fenced"
    } else {
        "advisory"
    }
}

/// Why a watch cannot resume from the revision asked for.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WatchError {
    #[error("watch history from {requested} was compacted: the oldest revision still available is {oldest_available}; re-read the state and watch from there")]
    Compacted {
        requested: super::ids::Revision,
        oldest_available: super::ids::Revision,
    },
}
