//! Snapshot and restore of the whole state as a plain Rust value (no byte encoding here: `proto`
//! encodes it). `restore(sm.snapshot()) == sm`, and snapshotting a restored state gives the same
//! snapshot. A snapshot comes from outside (disk, a peer), so restore checks it and answers a
//! typed error instead of panicking on an inconsistent one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use thiserror::Error;

use super::audit::{AuditLog, AuditRecord};
use super::class::ClassSpec;
use super::command::{Identity, LockMode, Remembered};
use super::config::LockConfig;
use super::force_release::ForceReleaseRequest;
use super::history::EventHistory;
use super::ids::{PermitSlot, RequestId, Revision, SessionId, Token};
use super::lock::{Hold, LockEntry, NamespaceState, Waiter};
use super::names::{validate_key, validate_namespace};
use super::owner::SecretHash;
use super::semaphore::{Semaphore, PERMITS_MAX};
use super::session::{set_insert, validate_identity, LostHold, Session};
use super::watch::WatchLog;
use super::LockStateMachine;
use crate::time::Instant;

/// The whole replicated state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockSnapshot {
    pub config: LockConfig,
    pub revision: Revision,
    pub time: Instant,
    /// By id.
    pub sessions: Vec<SessionSnapshot>,
    /// By (namespace, key): held keys only.
    pub locks: Vec<LockSnapshotEntry>,
    /// (namespace, class), by namespace then prefix.
    pub classes: Vec<(String, ClassSpec)>,
    /// By id.
    pub force_releases: Vec<ForceReleaseRequest>,
    pub audit: Vec<AuditRecord>,
    pub audit_compacted_through: Revision,
    /// Shared in chunks with the state it was taken from (no copy per event).
    pub events: EventHistory,
    pub events_compacted_through: Revision,
    /// By (namespace, key): every declared semaphore, held or free (empty in snapshots
    /// written before semaphores).
    pub semaphores: Vec<SemaphoreSnapshot>,
    /// The cluster version (docs/upgrades.md); 0 in snapshots written before it was kept: 1.
    pub cluster_version: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemaphoreSnapshot {
    pub namespace: String,
    pub key: String,
    /// N, in `1..=PERMITS_MAX`.
    pub permits: u32,
    /// The revision of the `SetSemaphore` that set N.
    pub permits_set_at: Revision,
    /// (slot, floor) by slot.
    pub floors: Vec<(PermitSlot, Revision)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSnapshot {
    pub id: SessionId,
    pub identity: Identity,
    /// `None`: a legacy session (opened before session secrets).
    pub secret_hash: Option<SecretHash>,
    pub ttl_ms: u64,
    pub created_at: Instant,
    pub request_newest: Option<RequestId>,
    pub replies: Vec<Remembered>,
    /// Oldest first (empty in snapshots written before holds lost were kept).
    pub holds_lost: Vec<LostHold>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockSnapshotEntry {
    pub namespace: String,
    pub key: String,
    /// Exclusive in snapshots written before shared locks.
    pub mode: LockMode,
    /// Oldest first (by token, then session); exactly one when exclusive.
    pub holders: Vec<HoldSnapshot>,
    pub waiters: Vec<WaiterSnapshot>,
    pub floor: Revision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldSnapshot {
    pub session: SessionId,
    pub token: Token,
    pub granted_at: Instant,
    /// A permit's slot (`None` for a lock, and in snapshots written before semaphores).
    pub permit: Option<PermitSlot>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaiterSnapshot {
    pub session: SessionId,
    /// Exclusive in snapshots written before shared locks.
    pub mode: LockMode,
    pub queued_at: Instant,
    /// Log time after which the wait is removed; `None`: no deadline (always so in snapshots
    /// written before wait deadlines existed).
    pub deadline: Option<Instant>,
}

/// A snapshot that cannot be a state this machine reached.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("inconsistent lock snapshot: {rule}")]
pub struct SnapshotError {
    pub rule: String,
}

fn bad(rule: String) -> SnapshotError {
    SnapshotError { rule }
}

impl LockStateMachine {
    /// The whole state as a plain value.
    pub fn snapshot(&self) -> LockSnapshot {
        let sessions = self
            .sessions
            .iter()
            .map(|(id, s)| SessionSnapshot {
                id: *id,
                identity: s.identity.clone(),
                secret_hash: s.secret_hash,
                ttl_ms: s.ttl_ms,
                created_at: s.created_at,
                request_newest: s.request_newest,
                replies: s.replies.iter().cloned().collect(),
                holds_lost: s.holds_lost.iter().cloned().collect(),
            })
            .collect();
        let mut locks = Vec::new();
        let mut classes = Vec::new();
        let mut semaphores = Vec::new();
        for (namespace, ns) in &self.namespaces {
            for (key, entry) in &ns.locks {
                locks.push(LockSnapshotEntry {
                    namespace: namespace.to_string(),
                    key: key.to_string(),
                    mode: entry.mode,
                    holders: entry
                        .holds_oldest_first()
                        .into_iter()
                        .map(|hold| HoldSnapshot {
                            session: hold.session,
                            token: hold.token,
                            granted_at: hold.granted_at,
                            permit: hold.permit,
                        })
                        .collect(),
                    waiters: entry
                        .waiters
                        .iter()
                        .map(|w| WaiterSnapshot {
                            session: w.session,
                            mode: w.mode,
                            queued_at: w.queued_at,
                            deadline: w.deadline,
                        })
                        .collect(),
                    floor: entry.floor,
                });
            }
            classes.extend(
                ns.classes
                    .iter()
                    .map(|c| (namespace.to_string(), c.clone())),
            );
            semaphores.extend(ns.semaphores.iter().map(|(key, s)| SemaphoreSnapshot {
                namespace: namespace.to_string(),
                key: key.to_string(),
                permits: s.permits,
                permits_set_at: s.permits_set_at,
                floors: s.floors.iter().map(|(permit, f)| (*permit, *f)).collect(),
            }));
        }
        LockSnapshot {
            config: self.config.clone(),
            revision: self.revision,
            time: self.time,
            sessions,
            locks,
            classes,
            force_releases: self.force_releases.pending.values().cloned().collect(),
            audit: self.audit.records.iter().cloned().collect(),
            audit_compacted_through: self.audit.compacted_through,
            events: self.watch.events.clone(),
            events_compacted_through: self.watch.compacted_through,
            semaphores,
            cluster_version: self.cluster_version,
        }
    }

    /// Rebuilds the state a snapshot describes, checking every invariant.
    pub fn restore(snapshot: LockSnapshot) -> Result<LockStateMachine, SnapshotError> {
        snapshot.config.validate().map_err(bad)?;
        let mut sm = LockStateMachine::new(snapshot.config);
        sm.revision = snapshot.revision;
        sm.time = snapshot.time;
        sm.cluster_version = snapshot.cluster_version.max(super::CLUSTER_VERSION_FIRST);
        for s in snapshot.sessions {
            validate_identity(&s.identity).map_err(|e| bad(e.to_string()))?;
            let mut session = Session::new(s.identity, s.secret_hash, s.ttl_ms, s.created_at);
            session.request_newest = s.request_newest;
            session.replies = VecDeque::from(s.replies);
            session.holds_lost = VecDeque::from(s.holds_lost);
            if sm.sessions.insert(s.id, session).is_some() {
                return Err(bad(format!("session {} listed twice", s.id)));
            }
            if let Some(hash) = s.secret_hash {
                if let Some(other) = sm.sessions_by_secret.insert(hash, s.id) {
                    return Err(bad(format!(
                        "sessions {other} and {} have the same secret hash",
                        s.id
                    )));
                }
            }
        }
        for (namespace, class) in snapshot.classes {
            validate_namespace(&namespace).map_err(|e| bad(e.to_string()))?;
            class.validate(&sm.config).map_err(|e| bad(e.to_string()))?;
            let prefix = class.prefix.clone();
            let name: Arc<str> = Arc::from(namespace.as_str());
            let ns = sm
                .namespaces
                .entry(name.clone())
                .or_insert_with(|| NamespaceState::new(name));
            if ns.classes.put(class).is_some() {
                return Err(bad(format!(
                    "class at `{namespace}` prefix `{prefix}` listed twice"
                )));
            }
        }
        for semaphore in snapshot.semaphores {
            sm.restore_semaphore(semaphore)?;
        }
        for entry in snapshot.locks {
            sm.restore_entry(entry)?;
        }
        for request in snapshot.force_releases {
            let id = request.id;
            sm.force_releases
                .by_deadline
                .insert((request.expires_at, id));
            if sm.force_releases.pending.insert(id, request).is_some() {
                return Err(bad(format!("force-release request {id} listed twice")));
            }
        }
        check_history(
            snapshot.audit.len(),
            snapshot.audit.iter().map(|r| r.revision),
            sm.config.audit_retention,
            "audit records",
        )?;
        sm.audit = AuditLog {
            records: VecDeque::from(snapshot.audit),
            compacted_through: snapshot.audit_compacted_through,
            retention: sm.config.audit_retention,
        };
        check_history(
            snapshot.events.len(),
            snapshot.events.iter().map(|e| e.revision),
            sm.config.watch_retention,
            "watch events",
        )?;
        sm.watch = WatchLog {
            events: snapshot.events,
            compacted_through: snapshot.events_compacted_through,
            retention: sm.config.watch_retention,
        };
        sm.invariant_violation().map_err(bad)?;
        Ok(sm)
    }

    fn restore_semaphore(&mut self, semaphore: SemaphoreSnapshot) -> Result<(), SnapshotError> {
        let SemaphoreSnapshot {
            namespace,
            key,
            permits,
            permits_set_at,
            floors,
        } = semaphore;
        validate_namespace(&namespace).map_err(|e| bad(e.to_string()))?;
        validate_key(&key).map_err(|e| bad(e.to_string()))?;
        if !(1..=PERMITS_MAX).contains(&permits) {
            return Err(bad(format!(
                "semaphore `{namespace}/{key}` has {permits} permits"
            )));
        }
        let mut by_permit = BTreeMap::new();
        for (permit, floor) in floors {
            if permit.0 >= PERMITS_MAX || by_permit.insert(permit, floor).is_some() {
                return Err(bad(format!(
                    "semaphore `{namespace}/{key}`: slot {permit} listed twice or beyond {PERMITS_MAX}"
                )));
            }
        }
        let name: Arc<str> = Arc::from(namespace.as_str());
        let ns = self
            .namespaces
            .entry(name.clone())
            .or_insert_with(|| NamespaceState::new(name));
        let restored = Semaphore {
            permits,
            permits_set_at,
            floors: by_permit,
        };
        if ns
            .semaphores
            .insert(Arc::from(key.as_str()), restored)
            .is_some()
        {
            return Err(bad(format!("semaphore `{namespace}/{key}` listed twice")));
        }
        Ok(())
    }

    fn restore_entry(&mut self, entry: LockSnapshotEntry) -> Result<(), SnapshotError> {
        let LockSnapshotEntry {
            namespace,
            key,
            mode,
            holders,
            waiters,
            floor,
        } = entry;
        validate_namespace(&namespace).map_err(|e| bad(e.to_string()))?;
        validate_key(&key).map_err(|e| bad(e.to_string()))?;
        if self.entry(&namespace, &key).is_some() {
            return Err(bad(format!("`{namespace}/{key}` listed twice")));
        }
        match (mode, holders.len()) {
            (_, 0) => {
                return Err(bad(format!(
                    "`{namespace}/{key}` is listed without a holder"
                )))
            }
            (LockMode::Exclusive, n) if n > 1 => {
                return Err(bad(format!(
                    "`{namespace}/{key}` is exclusive with {n} holders"
                )))
            }
            _ => {}
        }
        let namespace: Arc<str> = match self.namespaces.get_key_value(namespace.as_str()) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(namespace),
        };
        let key: Arc<str> = Arc::from(key);
        let mut sessions: Vec<SessionId> = holders.iter().map(|h| h.session).collect();
        for waiter in &waiters {
            sessions.push(waiter.session);
        }
        for (index, id) in sessions.iter().enumerate() {
            if sessions[..index].contains(id) {
                return Err(bad(format!(
                    "`{namespace}/{key}`: {id} holds or waits twice"
                )));
            }
            let Some(session) = self.sessions.get_mut(id) else {
                return Err(bad(format!(
                    "`{namespace}/{key}`: session {id} is not listed"
                )));
            };
            if index < holders.len() {
                set_insert(&mut session.holds, &namespace, &key);
            } else {
                set_insert(&mut session.waits, &namespace, &key);
            }
            session.holds_and_waits += 1;
        }
        for waiter in &waiters {
            if let Some(deadline) = waiter.deadline {
                let indexed = (deadline, waiter.session, namespace.clone(), key.clone());
                self.wait_deadlines.insert(indexed);
            }
        }
        let ns = self
            .namespaces
            .entry(namespace.clone())
            .or_insert_with(|| NamespaceState::new(namespace.clone()));
        for holder in &holders {
            if !ns
                .holds_by_age
                .insert((holder.token, key.clone(), holder.session))
            {
                return Err(bad(format!("`{namespace}/{key}` listed twice")));
            }
        }
        let lock = LockEntry {
            mode,
            holders: holders
                .iter()
                .map(|h| {
                    let hold = Hold {
                        session: h.session,
                        token: h.token,
                        granted_at: h.granted_at,
                        permit: h.permit,
                    };
                    (h.session, hold)
                })
                .collect(),
            waiters: waiters
                .iter()
                .map(|w| Waiter {
                    session: w.session,
                    mode: w.mode,
                    queued_at: w.queued_at,
                    deadline: w.deadline,
                })
                .collect(),
            floor,
        };
        if ns.locks.insert(key.clone(), lock).is_some() {
            return Err(bad(format!("`{namespace}/{key}` listed twice")));
        }
        Ok(())
    }
}

/// A restored history fits its retention and its revisions never decrease.
fn check_history(
    len: usize,
    revisions: impl Iterator<Item = Revision>,
    retention: usize,
    what: &str,
) -> Result<(), SnapshotError> {
    if len > retention {
        return Err(bad(format!("{len} {what}, retention {retention}")));
    }
    let mut previous = Revision(0);
    for revision in revisions {
        if revision < previous {
            return Err(bad(format!("{what} out of revision order")));
        }
        previous = revision;
    }
    Ok(())
}
