//! A restore: the state of a snapshot made the first state of a **new** cluster whose every token
//! is above every token the old cluster could have granted (docs/storage.md, "Restoring a
//! backup").
//!
//! Tokens are revisions, and the revision rises by one per applied command. A restored state
//! starts at a revision `floor` the caller chose above everything the old cluster may have
//! reached (the snapshot's revision plus a bump); the first command the new cluster applies has
//! revision `floor + 1`, so its first grant's token is above `floor`.
//!
//! What the restore keeps and drops, and why each is safe:
//! - **sessions end, holds end, waiters are dropped.** A holder in the snapshot may have released,
//!   lost its lock or been force-released after the snapshot was taken; handing its hold back would
//!   give a lock to someone who no longer believes it holds it (advisory) or revive a token the
//!   resource may have seen superseded (fenced). The clients' sessions are gone with the old
//!   cluster anyway: their keepalives find no session and their guards report the lock lost.
//! - **classes and semaphore declarations come back**, with every permit free; the per-key and
//!   per-permit floors are kept (they are below `floor`, which every new token exceeds).
//! - **pending force-release requests are dropped**, each with a `ForceReleaseExpired` audit
//!   record: the holds they name ended in the restore.
//! - **the audit trail comes back** as it was at the snapshot, plus those records.
//! - **the watch history is dropped**: reads from revisions at or below `floor` answer
//!   `Compacted` (an old cluster's revision means nothing to the new one).

use thiserror::Error;

use super::audit::{AuditAction, AuditRecord};
use super::ids::Revision;
use super::snapshot::{LockSnapshot, SnapshotError};
use super::watch::WatchLog;
use super::LockStateMachine;

/// The largest revision a restore may start at: room for 2^62 more commands.
pub const RESTORED_REVISION_MAX: u64 = 1 << 62;

/// Why a snapshot cannot become a new cluster's first state. Nothing is written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RestoreError {
    #[error("restore_revision_not_above: the restored revision {floor} must be above the snapshot's revision {snapshot}")]
    NotAbove { floor: Revision, snapshot: Revision },
    #[error("restore_revision_too_large: the restored revision {floor} is above {RESTORED_REVISION_MAX}")]
    TooLarge { floor: Revision },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// Why a pending force-release request was dropped by a restore (its audit record's reason).
pub const RESTORE_DROPPED_REQUEST: &str =
    "dropped by a restore from a backup: every hold ended in the restore";

impl LockSnapshot {
    /// The first state of a new cluster made from this snapshot, at revision `floor` (see the
    /// module docs for what is kept). A pure function of its inputs: every replica restored
    /// from the same snapshot with the same floor starts from the same state, bit for bit.
    pub fn into_new_cluster(self, floor: Revision) -> Result<LockSnapshot, RestoreError> {
        if floor <= self.revision {
            return Err(RestoreError::NotAbove {
                floor,
                snapshot: self.revision,
            });
        }
        if floor.0 > RESTORED_REVISION_MAX {
            return Err(RestoreError::TooLarge { floor });
        }
        let mut sm = LockStateMachine::restore(self)?;
        sm.end_everything_at(floor);
        sm.invariant_violation()
            .map_err(|rule| SnapshotError { rule })?;
        Ok(sm.snapshot())
    }
}

impl LockStateMachine {
    fn end_everything_at(&mut self, floor: Revision) {
        assert!(
            floor > self.revision,
            "restore floor {floor} at or below {}",
            self.revision
        );
        self.revision = floor;
        self.sessions.clear();
        self.sessions_by_secret.clear();
        self.wait_deadlines.clear();
        self.wait_ends.0.clear();
        for ns in self.namespaces.values_mut() {
            ns.locks.clear();
            ns.holds_by_age.clear();
        }
        self.namespaces.retain(|_, ns| !ns.is_empty());
        let pending = std::mem::take(&mut self.force_releases.pending);
        self.force_releases.by_deadline.clear();
        for (id, request) in pending {
            self.audit.push(AuditRecord {
                requester: request.requester,
                requester_roles: request.requester_roles,
                revoke_session: Some(request.revoke_session),
                permit: None,
                ..AuditRecord::new(
                    floor,
                    self.time,
                    String::new(),
                    AuditAction::ForceReleaseExpired,
                    request.namespace,
                    request.key,
                )
                .about(
                    request.token,
                    request.fenced,
                    request.holder,
                    id,
                    RESTORE_DROPPED_REQUEST.to_owned(),
                )
            });
        }
        self.watch = WatchLog {
            compacted_through: floor,
            ..WatchLog::new(self.config.watch_retention)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::{
        AcquireReply, Command, Identity, LockConfig, LockMode, Reply, RequestId, SecretHash,
        SessionId, SessionProof, Token, WatchError, WatchFilter,
    };
    use crate::time::Instant;

    fn identity() -> Identity {
        Identity {
            name: "svc".into(),
            host: "h".into(),
            pid: 1,
            principal: "svc".into(),
        }
    }

    fn session(sm: &mut LockStateMachine, secret: u8) -> SessionId {
        let create = Command::CreateSession {
            ttl_ms: None,
            identity: identity(),
            secret_hash: Some(SecretHash([secret; 32])),
        };
        match sm.apply(Instant::from_millis(1), create) {
            Ok(Reply::SessionCreated { session, .. }) => session,
            other => panic!("{other:?}"),
        }
    }

    fn acquire(
        sm: &mut LockStateMachine,
        s: SessionId,
        secret: u8,
        key: &str,
        wait: bool,
    ) -> Reply {
        let command = Command::Acquire {
            session: s,
            proof: SessionProof::new(SecretHash([secret; 32]), "svc"),
            request: RequestId(sm.revision().0 + 1),
            namespace: "orders".into(),
            key: key.into(),
            mode: LockMode::Exclusive,
            wait: wait.then_some(crate::locks::Wait::UNBOUNDED),
        };
        sm.apply(Instant::from_millis(2), command)
            .expect("acquire applies")
    }

    /// Two sessions, a hold with a waiter, a free key: a state with something to end.
    fn busy_state() -> LockStateMachine {
        let mut sm = LockStateMachine::new(LockConfig::default());
        let a = session(&mut sm, 1);
        let b = session(&mut sm, 2);
        acquire(&mut sm, a, 1, "k1", false);
        acquire(&mut sm, b, 2, "k1", true);
        acquire(&mut sm, b, 2, "k2", false);
        sm
    }

    #[test]
    fn a_restore_ends_every_session_hold_and_wait_at_the_floor() {
        let sm = busy_state();
        let snapshot = sm.snapshot();
        assert_eq!(snapshot.locks.len(), 2);
        let restored = snapshot.into_new_cluster(Revision(1_000)).unwrap();
        assert_eq!(restored.revision, Revision(1_000));
        assert!(restored.sessions.is_empty());
        assert!(restored.locks.is_empty());
        assert!(restored.events.is_empty());
        assert_eq!(restored.events_compacted_through, Revision(1_000));
        let mut new = LockStateMachine::restore(restored).unwrap();
        new.check_invariants();
        // The watch of an old revision is told that history is gone.
        assert!(matches!(
            new.watch(Revision(3), &WatchFilter::default(), 10),
            Err(WatchError::Compacted { .. })
        ));
        // The first grant of the new cluster: above the floor.
        let c = session(&mut new, 3);
        let reply = acquire(&mut new, c, 3, "k1", false);
        assert_eq!(
            reply,
            Reply::Acquire(AcquireReply::Granted {
                token: Token(1_002),
                permit: None
            })
        );
    }

    #[test]
    fn a_floor_at_or_below_the_snapshot_is_refused() {
        let snapshot = busy_state().snapshot();
        let at = snapshot.revision;
        assert_eq!(
            snapshot.clone().into_new_cluster(at),
            Err(RestoreError::NotAbove {
                floor: at,
                snapshot: at
            })
        );
        assert!(matches!(
            snapshot.into_new_cluster(Revision(RESTORED_REVISION_MAX + 1)),
            Err(RestoreError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_same_snapshot_and_floor_restore_the_same_state() {
        let a = busy_state()
            .snapshot()
            .into_new_cluster(Revision(77))
            .unwrap();
        let b = busy_state()
            .snapshot()
            .into_new_cluster(Revision(77))
            .unwrap();
        assert_eq!(a, b);
    }
}
