//! Read-only queries: inspection of one key, holds of a namespace by age, the longest hold per
//! namespace, sessions, classes, force-release requests, audit and watch.
//!
//! Queries take the caller's `now` to compute how long something has been held (log time of the
//! grant to `now`). The remaining TTL of a session is leader-local knowledge (keepalives are not
//! logged): the state machine answers `session_remaining_ms: None` and the Node fills it in from
//! its deadlines before answering.

use super::audit::{AuditPage, AuditQuery};
use super::class::ClassSpec;
use super::command::{Identity, LockMode};
use super::error::{LockError, WatchError};
use super::force_release::ForceReleaseRequest;
use super::ids::{ForceReleaseId, PermitSlot, Revision, SessionId, Token};
use super::lock::{Hold, LockEntry};
use super::names::{validate_key, validate_namespace};
use super::watch::{WatchFilter, WatchPage};
use super::LockStateMachine;
use crate::time::Instant;

/// A hold, as operators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldInfo {
    pub namespace: String,
    pub key: String,
    pub session: SessionId,
    pub identity: Identity,
    /// How the key is held (shared holds of one key are listed one by one).
    pub mode: LockMode,
    /// The grant revision, which is the token.
    pub token: Token,
    /// A permit's slot on a semaphore key (`None` for a lock).
    pub permit: Option<PermitSlot>,
    /// Log time of the grant.
    pub granted_at: Instant,
    /// `now - granted_at`.
    pub held_for_ms: u64,
    pub session_ttl_ms: u64,
    /// Filled in by the Node (leader-local deadline); `None` from the state machine.
    pub session_remaining_ms: Option<u64>,
    /// The class's alert threshold (0: none).
    pub hold_ms_max_expected: u64,
}

/// A hold in a namespace listing.
pub type NamespaceHold = HoldInfo;

/// A waiter, as operators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterInfo {
    pub session: SessionId,
    pub identity: Identity,
    /// The mode it asked for.
    pub mode: LockMode,
    /// 1 is next in line.
    pub position: u32,
    /// Log time of queueing.
    pub queued_at: Instant,
    pub waiting_for_ms: u64,
}

/// Everything about one key, for the on-call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// The state's revision when inspected.
    pub revision: Revision,
    pub namespace: String,
    pub key: String,
    /// The class covering the key (the longest registered prefix, or the default).
    pub class: ClassSpec,
    /// How the key is held; `None` for a free key.
    pub mode: Option<LockMode>,
    /// The oldest of `holders` (the only one of an exclusive key); `None` for a free key.
    pub holder: Option<HoldInfo>,
    /// Every holder, oldest first (by token, then session).
    pub holders: Vec<HoldInfo>,
    pub queue_depth: usize,
    pub waiters: Vec<WaiterInfo>,
    /// Tokens below the floor are invalid on this key; `None` for a free key (every future token
    /// is above the current revision).
    pub floor: Option<Revision>,
    pub pending_force_releases: Vec<ForceReleaseRequest>,
    /// N if the key is a semaphore (held or free).
    pub permits: Option<u32>,
    /// A semaphore's slot floors (slot, floor), by slot: the revision of each slot's latest
    /// grant or force-release; empty for a lock.
    pub permit_floors: Vec<(PermitSlot, Revision)>,
}

/// A pending force-release request as listed at a moment: what changed since it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingForceRelease {
    pub request: ForceReleaseRequest,
    /// The key's holder or token is no longer the one the request names (approval would fail
    /// with `holder_changed`).
    pub holder_changed: bool,
    /// The class's kind now; when it differs from `request.fenced`, approval fails with
    /// `class_kind_changed`.
    pub fenced_now: bool,
}

/// A live session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: SessionId,
    pub identity: Identity,
    pub ttl_ms: u64,
    /// Log time of creation.
    pub created_at: Instant,
    pub holds: usize,
    pub waits: usize,
}

impl LockStateMachine {
    /// Everything about `namespace/key`.
    pub fn inspect(&self, namespace: &str, key: &str, now: Instant) -> Result<KeyInfo, LockError> {
        validate_namespace(namespace)?;
        validate_key(key)?;
        let class = self.class_of(namespace, key).clone();
        let entry = self.entry(namespace, key);
        let read_at = now.max(self.time);
        let pending_force_releases = self
            .force_releases
            .pending
            .values()
            .filter(|r| r.namespace == namespace && r.key == key && read_at < r.expires_at)
            .cloned()
            .collect();
        let mut info = KeyInfo {
            revision: self.revision,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            mode: None,
            holder: None,
            holders: Vec::new(),
            queue_depth: 0,
            waiters: Vec::new(),
            floor: None,
            pending_force_releases,
            class,
            permits: None,
            permit_floors: Vec::new(),
        };
        let semaphore = self
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.semaphores.get(key));
        if let Some(semaphore) = semaphore {
            info.permits = Some(semaphore.permits);
            info.permit_floors = semaphore.floors.iter().map(|(s, f)| (*s, *f)).collect();
        }
        if let Some(entry) = entry {
            info.mode = Some(entry.mode);
            info.holders = entry
                .holds_oldest_first()
                .iter()
                .map(|hold| self.hold_info(namespace, key, hold, now))
                .collect();
            info.holder = info.holders.first().cloned();
            info.queue_depth = entry.waiters.len();
            info.waiters = self.waiter_infos(entry, now);
            info.floor = Some(entry.floor);
        }
        Ok(info)
    }

    fn hold_info(&self, namespace: &str, key: &str, hold: &Hold, now: Instant) -> HoldInfo {
        let session = self
            .sessions
            .get(&hold.session)
            .expect("a holder's session is live");
        HoldInfo {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            session: hold.session,
            identity: session.identity.clone(),
            mode: self
                .entry(namespace, key)
                .map_or_else(LockMode::default, |e| e.mode),
            token: hold.token,
            permit: hold.permit,
            granted_at: hold.granted_at,
            held_for_ms: now.ms_since(hold.granted_at),
            session_ttl_ms: session.ttl_ms,
            session_remaining_ms: None,
            hold_ms_max_expected: self.class_of(namespace, key).hold_ms_max_expected,
        }
    }

    fn waiter_infos(&self, entry: &LockEntry, now: Instant) -> Vec<WaiterInfo> {
        entry
            .waiters
            .iter()
            .zip(1u32..)
            .map(|(waiter, position)| WaiterInfo {
                session: waiter.session,
                identity: self.sessions[&waiter.session].identity.clone(),
                mode: waiter.mode,
                position,
                queued_at: waiter.queued_at,
                waiting_for_ms: now.ms_since(waiter.queued_at),
            })
            .collect()
    }

    /// The holds of a namespace, oldest first, at most `limit`.
    pub fn list_holds(
        &self,
        namespace: &str,
        now: Instant,
        limit: usize,
    ) -> Result<Vec<HoldInfo>, LockError> {
        validate_namespace(namespace)?;
        let Some(ns) = self.namespaces.get(namespace) else {
            return Ok(Vec::new());
        };
        Ok(ns
            .holds_by_age
            .iter()
            .take(limit)
            .map(|(_, key, session)| {
                self.hold_info(namespace, key, &ns.locks[key].holders[session], now)
            })
            .collect())
    }

    /// The oldest hold of every namespace that has one (for `picket_longest_hold_seconds`).
    pub fn longest_holds(&self, now: Instant) -> Vec<HoldInfo> {
        self.namespaces
            .iter()
            .filter_map(|(namespace, ns)| {
                let (_, key, session) = ns.holds_by_age.first()?;
                let hold = &ns.locks[key].holders[session];
                Some(self.hold_info(namespace, key, hold, now))
            })
            .collect()
    }

    /// Every hold older than its class's max expected hold (`hold_ms_max_expected`; classes
    /// without one never count), furthest over its threshold first (then by namespace, key and
    /// session, so the order is the same on every replica). At most `per_namespace_max` per
    /// namespace and `limit` in all: these are the holds that page (`picket_overdue_hold_seconds`)
    /// and that the console's overview lists, each on its own, whatever else its namespace holds.
    ///
    /// Cost: per namespace, the holds older than its smallest threshold (holds are kept oldest
    /// first, so the scan stops at the first hold younger than every threshold).
    pub fn overdue_holds(
        &self,
        now: Instant,
        per_namespace_max: usize,
        limit: usize,
    ) -> Vec<HoldInfo> {
        let mut overdue = Vec::new();
        for (namespace, ns) in &self.namespaces {
            let threshold_min = std::iter::once(&self.default_class)
                .chain(ns.classes.iter())
                .map(|class| class.hold_ms_max_expected)
                .filter(|ms| *ms > 0)
                .min();
            let Some(threshold_min) = threshold_min else {
                continue; // no class of this namespace has a threshold
            };
            let mut in_namespace = Vec::new();
            for (_, key, session) in &ns.holds_by_age {
                let hold = &ns.locks[key].holders[session];
                let held_for_ms = now.ms_since(hold.granted_at);
                if held_for_ms <= threshold_min {
                    break; // oldest first: no younger hold is over any threshold
                }
                let threshold = self.class_of(namespace, key).hold_ms_max_expected;
                if threshold > 0 && held_for_ms > threshold {
                    in_namespace.push(self.hold_info(namespace, key, hold, now));
                }
            }
            in_namespace.sort_by_key(|h| std::cmp::Reverse(h.held_for_ms - h.hold_ms_max_expected));
            in_namespace.truncate(per_namespace_max);
            overdue.extend(in_namespace);
        }
        overdue.sort_by(|a, b| {
            (b.held_for_ms - b.hold_ms_max_expected)
                .cmp(&(a.held_for_ms - a.hold_ms_max_expected))
                .then_with(|| a.namespace.cmp(&b.namespace))
                .then_with(|| a.key.cmp(&b.key))
                .then_with(|| a.session.cmp(&b.session))
        });
        overdue.truncate(limit);
        overdue
    }

    /// Every live session, by id. A new leader gives each a full TTL from its takeover.
    pub fn sessions(&self) -> impl Iterator<Item = SessionInfo> + '_ {
        self.sessions
            .keys()
            .map(|id| self.session(*id).expect("listing a session that exists"))
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub fn session(&self, id: SessionId) -> Option<SessionInfo> {
        let session = self.sessions.get(&id)?;
        let holds = session.hold_count();
        Some(SessionInfo {
            id,
            identity: session.identity.clone(),
            ttl_ms: session.ttl_ms,
            created_at: session.created_at,
            holds,
            waits: session.holds_and_waits - holds,
        })
    }

    /// The holds `session` lost to force-release without revocation, oldest first (at most
    /// [`super::HOLDS_LOST_PER_SESSION_MAX`], the newest); empty for an unknown session. The
    /// leader's keepalive answers carry them.
    pub fn holds_lost(&self, id: SessionId) -> Vec<super::LostHold> {
        self.sessions
            .get(&id)
            .map(|session| session.holds_lost.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The classes registered in a namespace, by prefix (the built-in default is not listed;
    /// see [`LockStateMachine::class_of`]).
    pub fn classes(&self, namespace: &str) -> Result<Vec<ClassSpec>, LockError> {
        validate_namespace(namespace)?;
        Ok(self
            .namespaces
            .get(namespace)
            .map(|ns| ns.classes.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Pending force-release requests, oldest first (the log's view: requests expire at the
    /// next command applied at or after their deadline).
    pub fn force_release_requests(&self) -> impl Iterator<Item = &ForceReleaseRequest> {
        self.force_releases.pending.values()
    }

    /// The requests still approvable at `now`, oldest first, each marked with what changed since
    /// it was made. Expiry applies at read time: a request whose deadline `now` (or log time) has
    /// reached is not listed, although the log drops it only at its next command.
    pub fn force_releases_at(&self, now: Instant) -> Vec<PendingForceRelease> {
        let now = now.max(self.time);
        self.force_releases
            .pending
            .values()
            .filter(|request| now < request.expires_at)
            .map(|request| {
                let hold = self
                    .entry(&request.namespace, &request.key)
                    .and_then(|entry| entry.holders.get(&request.holder));
                PendingForceRelease {
                    holder_changed: hold.is_none_or(|hold| hold.token != request.token),
                    fenced_now: self.class_of(&request.namespace, &request.key).fenced,
                    request: request.clone(),
                }
            })
            .collect()
    }

    pub fn force_release_request(&self, id: ForceReleaseId) -> Option<&ForceReleaseRequest> {
        self.force_releases.pending.get(&id)
    }

    pub fn audit(&self, query: &AuditQuery) -> AuditPage {
        self.audit.query(query)
    }

    /// Events at revisions `>= from` matching `filter` (about `limit`; pages end at revision
    /// boundaries), or `Compacted` if some of them were dropped.
    pub fn watch(
        &self,
        from: Revision,
        filter: &WatchFilter,
        limit: usize,
    ) -> Result<WatchPage, WatchError> {
        self.watch.read(from, filter, limit, self.revision)
    }
}
