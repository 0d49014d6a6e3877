//! The lock state machine: a deterministic function from (state, log time, command) to (state,
//! reply). Every replica applies the same chosen commands in the same order and reaches the same
//! state, bit for bit. Nothing here reads a clock: log time is the leader's stamp on each batch,
//! taken as `max(previous, stamp)`.
//!
//! The full semantics (every command, its errors, its events) are in `docs/locks.md`.
//!
//! ```
//! use picket_core::locks::{
//!     AcquireReply, Command, Identity, LockConfig, LockMode, LockStateMachine, Reply, RequestId, SecretHash,
//!     SessionProof,
//! };
//! use picket_core::time::Instant;
//!
//! let mut sm = LockStateMachine::new(LockConfig::default());
//! let identity = Identity { name: "billing".into(), host: "h1".into(), pid: 7, principal: "svc-billing".into() };
//! // The edge hashes the session's secret (SHA-256); only the hash reaches the log.
//! let secret_hash = SecretHash([7; 32]);
//! let create = Command::CreateSession { ttl_ms: None, identity, secret_hash: Some(secret_hash) };
//! let created = sm.apply(Instant::from_millis(1_000), create);
//! let Ok(Reply::SessionCreated { session, .. }) = created else { panic!("{created:?}") };
//! let acquire = Command::Acquire {
//!     session, proof: SessionProof::new(secret_hash, "svc-billing"), request: RequestId(1),
//!     namespace: "orders".into(), key: "invoice/42".into(), mode: LockMode::Exclusive, wait: None,
//! };
//! let reply = sm.apply(Instant::from_millis(1_005), acquire);
//! // The token is the revision of the grant: the second command applied.
//! assert_eq!(reply, Ok(Reply::Acquire(AcquireReply::Granted { token: picket_core::locks::Token(2), permit: None })));
//! sm.check_invariants();
//! ```

mod audit;
mod class;
mod command;
mod config;
mod digest;
mod error;
mod force_release;
mod history;
mod ids;
mod invariants;
mod lock;
mod names;
mod owner;
mod query;
mod restore;
mod semaphore;
mod session;
mod snapshot;
mod version;
mod wait;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use audit::{AuditAction, AuditPage, AuditQuery, AuditRecord};
pub use class::{ClassSpec, DESCRIPTION_LEN_MAX, OWNER_LEN_MAX, RUNBOOK_URL_LEN_MAX};
pub use command::{
    AcquireReply, Actor, Command, Identity, LockMode, Outcome, Remembered, RememberedReply, Reply,
    RequestTarget, Role, Wait,
};
pub use config::LockConfig;
pub use error::{LockError, WatchError};
pub use force_release::{
    Checklist, ChecklistAnswer, ForceReleaseRequest, FORCE_RELEASE_ROLES, REASON_LEN_MAX,
    STATEMENT_LEN_MAX,
};
pub use history::EventHistory;
pub use ids::{ForceReleaseId, PermitSlot, RequestId, Revision, SessionId, Token};
pub use names::{
    validate_class_name, validate_key, validate_namespace, validate_prefix, NameError, KEY_LEN_MAX,
    NAME_LEN_MAX,
};
pub use owner::{
    is_authenticated, NotYours, SecretHash, SessionProof, SECRET_HASH_LEN,
    UNAUTHENTICATED_PRINCIPAL,
};
pub use query::{HoldInfo, KeyInfo, NamespaceHold, PendingForceRelease, SessionInfo, WaiterInfo};
pub use restore::{RestoreError, RESTORED_REVISION_MAX, RESTORE_DROPPED_REQUEST};
pub use semaphore::PERMITS_MAX;
pub use session::{LostHold, HOLDS_LOST_PER_SESSION_MAX, IDENTITY_FIELD_LEN_MAX};
pub use snapshot::{
    HoldSnapshot, LockSnapshot, LockSnapshotEntry, SemaphoreSnapshot, SessionSnapshot,
    SnapshotError, WaiterSnapshot,
};
pub use version::{
    CLUSTER_VERSION, CLUSTER_VERSION_ACTOR, CLUSTER_VERSION_FIRST, CLUSTER_VERSION_HAND_OFF_EXPIRY,
    CLUSTER_VERSION_REASON_MAX,
};
pub use wait::{WaitEnd, WaitEndKind, EXPIRE_WAITS_BATCH_MAX, WAIT_TIMEOUT_MS_MAX};
pub use watch::{Event, EventKind, ReleaseCause, WatchFilter, WatchPage};

use audit::AuditLog;
use force_release::ForceReleases;
use lock::NamespaceState;
use session::Session;
use watch::WatchLog;

use crate::faults::Faults;
use crate::time::Instant;

/// The replicated lock state. See the module docs and `docs/locks.md`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockStateMachine {
    config: LockConfig,
    /// Derived from `config`; the class of keys no registered class covers.
    default_class: ClassSpec,
    /// Commands applied so far. Never decreases; +1 per command.
    revision: Revision,
    /// Log time: the max of every stamp seen. Never decreases.
    time: Instant,
    sessions: BTreeMap<SessionId, Session>,
    /// secret hash -> the live session opened with it (legacy sessions have none). Mirrors
    /// `sessions` exactly; answers a retried `CreateSession` without a scan.
    sessions_by_secret: BTreeMap<SecretHash, SessionId>,
    /// Only non-empty namespaces (some class or some hold) have an entry.
    namespaces: BTreeMap<Arc<str>, NamespaceState>,
    force_releases: ForceReleases,
    audit: AuditLog,
    watch: WatchLog,
    /// (deadline, session, namespace, key) of every wait with a deadline. Mirrors the waiter
    /// queues exactly; derived (rebuilt at restore, not in the snapshot or the digest).
    wait_deadlines: wait::WaitDeadlines,
    /// The waits the last applied command ended (granted or removed), for the node to answer
    /// its waiting proposals; cleared at the start of every apply, so it is bounded by one
    /// command's effects.
    wait_ends: wait::WaitEnds,
    /// The cluster version the applied log is at (`version`; docs/upgrades.md).
    cluster_version: u32,
    /// The planted bugs this replica runs with (`crate::faults`; none unless a test set them).
    /// Not replicated: not in the snapshot or the digest.
    faults: Faults,
}

impl LockStateMachine {
    /// An empty state at revision 0.
    pub fn new(config: LockConfig) -> LockStateMachine {
        config.assert_valid();
        LockStateMachine {
            default_class: ClassSpec::builtin_default(&config),
            revision: Revision(0),
            time: Instant::ZERO,
            sessions: BTreeMap::new(),
            sessions_by_secret: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            force_releases: ForceReleases::default(),
            audit: AuditLog::new(config.audit_retention),
            watch: WatchLog::new(config.watch_retention),
            wait_deadlines: BTreeSet::new(),
            wait_ends: wait::WaitEnds::default(),
            cluster_version: CLUSTER_VERSION,
            faults: Faults::NONE,
            config,
        }
    }

    /// Sets the planted bugs this state runs with (the node passes its replica's; a restored
    /// state starts with none).
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    pub fn config(&self) -> &LockConfig {
        &self.config
    }

    /// The revision of the last applied command.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Log time (the largest stamp applied so far).
    pub fn time(&self) -> Instant {
        self.time
    }

    /// Records, in the audit log, a membership change the log chose: who asked for it (and
    /// their roles), why, and what the membership became (with what the change did).
    ///
    /// A change the leader stamped (`stamp`: every change since 0.2.0) takes a revision of its
    /// own, like a command, at log time `max(previous, stamp)`: its record has its own revision
    /// and time, and the housekeeping every command does (expired force-release requests) runs
    /// first. A change without a stamp (written by an older release) takes none, as it did then
    /// (its record carries the revision and log time of the command before it), so an old log
    /// replays to the revisions it was acknowledged with.
    pub fn record_membership_change(
        &mut self,
        stamp: Option<Instant>,
        actor: &str,
        actor_roles: BTreeSet<Role>,
        reason: &str,
        membership: String,
    ) {
        if let Some(stamp) = stamp {
            self.advance(stamp);
        }
        self.audit.push(AuditRecord {
            reason: reason.to_owned(),
            membership,
            actor_roles,
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.to_owned(),
                AuditAction::MembershipChanged,
                String::new(),
                String::new(),
            )
        });
        self.check_invariants_cheap();
    }

    /// Applies one batch of the log: every command at log time `max(previous, stamp)`.
    pub fn apply_batch(
        &mut self,
        stamp: Instant,
        commands: impl IntoIterator<Item = Command>,
    ) -> Vec<Outcome> {
        commands
            .into_iter()
            .map(|command| self.apply(stamp, command))
            .collect()
    }

    /// Applies one command at log time `max(previous, stamp)`. The revision advances by one
    /// whatever the outcome; an error changes nothing else.
    pub fn apply(&mut self, stamp: Instant, command: Command) -> Outcome {
        self.advance(stamp);
        let outcome = self.dispatch(command);
        self.check_invariants_cheap();
        outcome
    }

    /// What every change of the log does first: log time moves to `max(previous, stamp)`, the
    /// revision advances by one, the last change's wait ends are forgotten and expired
    /// force-release requests are swept.
    fn advance(&mut self, stamp: Instant) {
        self.time = self.time.max(stamp);
        self.revision = Revision(
            self.revision
                .0
                .checked_add(1)
                .expect("revision overflow after 2^64 commands"),
        );
        self.wait_ends.0.clear();
        self.sweep_force_releases();
    }

    fn dispatch(&mut self, command: Command) -> Outcome {
        match command {
            Command::CreateSession {
                ttl_ms,
                identity,
                secret_hash,
            } => self.apply_create_session(ttl_ms, identity, secret_hash),
            Command::CloseSession { session, proof } => self.apply_close_session(session, &proof),
            Command::ExpireSessions { sessions } => self.apply_expire_sessions(&sessions),
            Command::Acquire {
                session,
                proof,
                request,
                namespace,
                key,
                mode,
                wait,
            } => {
                let wait = wait.map(|w| w.timeout_ms);
                self.apply_acquire(session, &proof, request, namespace, key, mode, wait)
            }
            Command::CancelWait {
                session,
                proof,
                namespace,
                key,
            } => self.apply_cancel_wait(session, &proof, namespace, key),
            Command::ExpireWaits => Ok(self.apply_expire_waits()),
            Command::Release {
                session,
                proof,
                request,
                namespace,
                key,
                token,
            } => self.apply_release(session, &proof, request, namespace, key, token),
            Command::PutClass {
                actor,
                namespace,
                class,
            } => self.apply_put_class(actor, namespace, class),
            Command::RemoveClass {
                actor,
                namespace,
                prefix,
            } => self.apply_remove_class(actor, namespace, prefix),
            Command::SetSemaphore {
                actor,
                namespace,
                key,
                permits,
                reason,
            } => self.apply_set_semaphore(actor, namespace, key, permits, reason),
            Command::RecordSnapshotSave { actor } => self.apply_record_snapshot_save(actor),
            Command::SetClusterVersion { version, reason } => {
                self.apply_set_cluster_version(version, reason)
            }
            Command::RequestForceRelease {
                actor,
                namespace,
                key,
                expected_token,
                holder,
                reason,
                revoke_session,
                checklist,
            } => self.apply_request_force_release(
                actor,
                namespace,
                (key, expected_token, holder),
                reason,
                (revoke_session, checklist),
            ),
            Command::ApproveForceRelease {
                actor,
                id,
                acknowledged_fenced,
            } => self.apply_approve_force_release(actor, id, acknowledged_fenced),
            Command::DenyForceRelease { actor, id, reason } => {
                self.apply_deny_force_release(actor, id, reason)
            }
        }
    }
}
