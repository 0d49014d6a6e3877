//! The state machine's invariants. The O(1) ones are asserted after every command (also in
//! release builds); the O(n) ones are checked by [`LockStateMachine::check_invariants`], which
//! tests call after every command, and by snapshot restore (as an error, not a panic, since a
//! snapshot comes from outside).

use std::collections::BTreeSet;

use super::command::LockMode;
use super::ids::{PermitSlot, SessionId, Token};
use super::lock::LockEntry;
use super::semaphore::{Semaphore, PERMITS_MAX};
use super::LockStateMachine;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

impl LockStateMachine {
    /// O(1) checks after every command.
    pub(crate) fn check_invariants_cheap(&self) {
        if let Err(violation) = self.cheap_violation() {
            panic!("lock state machine invariant broken: {violation}");
        }
    }

    /// The first broken O(1) invariant, if any (also part of [`Self::invariant_violation`], so
    /// a snapshot that breaks one is refused at restore instead of panicking at the next command).
    fn cheap_violation(&self) -> Result<(), String> {
        ensure!(
            self.sessions.len() <= self.config.sessions_max,
            "{} sessions, bound {}",
            self.sessions.len(),
            self.config.sessions_max
        );
        ensure!(
            self.force_releases.pending.len() <= self.config.force_releases_pending_max,
            "{} pending force-releases, bound {}",
            self.force_releases.pending.len(),
            self.config.force_releases_pending_max
        );
        if let Some(event) = self.watch.events.back() {
            ensure!(
                event.revision <= self.revision,
                "event at {} beyond revision {}",
                event.revision,
                self.revision
            );
        }
        if let Some(record) = self.audit.records.back() {
            ensure!(
                record.revision <= self.revision,
                "audit record at {} beyond revision {}",
                record.revision,
                self.revision
            );
        }
        Ok(())
    }

    /// Checks every invariant, O(n). Panics with the values if one is broken.
    pub fn check_invariants(&self) {
        if let Err(violation) = self.invariant_violation() {
            panic!("lock state machine invariant broken: {violation}");
        }
    }

    /// The first broken invariant, if any.
    pub(crate) fn invariant_violation(&self) -> Result<(), String> {
        self.cheap_violation()?;
        self.check_locks()?;
        self.check_sessions()?;
        self.check_force_releases()?;
        self.check_histories()
    }

    fn check_locks(&self) -> Result<(), String> {
        let mut deadlines = 0;
        for (namespace, ns) in &self.namespaces {
            ensure!(!ns.is_empty(), "empty namespace `{namespace}` kept");
            ensure!(
                ns.name == *namespace,
                "namespace `{namespace}` stored as `{}`",
                ns.name
            );
            ns.classes.check_invariants();
            let holds: usize = ns.locks.values().map(|e| e.holders.len()).sum();
            ensure!(
                ns.holds_by_age.len() == holds,
                "`{namespace}`: {} holds in the age index, {holds} holds",
                ns.holds_by_age.len(),
            );
            for (key, entry) in &ns.locks {
                for (session, hold) in &entry.holders {
                    ensure!(
                        ns.holds_by_age
                            .contains(&(hold.token, key.clone(), *session)),
                        "`{namespace}/{key}`: hold {} of {session} missing from the age index",
                        hold.token
                    );
                }
                self.check_entry(namespace, key, entry)?;
                check_permits(namespace, key, entry, ns.semaphores.get(key))?;
                for waiter in &entry.waiters {
                    let Some(deadline) = waiter.deadline else {
                        continue;
                    };
                    deadlines += 1;
                    let indexed = (deadline, waiter.session, namespace.clone(), key.clone());
                    ensure!(
                        self.wait_deadlines.contains(&indexed),
                        "`{namespace}/{key}`: deadline {deadline} of waiter {} not indexed",
                        waiter.session
                    );
                }
            }
        }
        for (namespace, ns) in &self.namespaces {
            for (key, semaphore) in &ns.semaphores {
                ensure!(
                    (1..=PERMITS_MAX).contains(&semaphore.permits),
                    "semaphore `{namespace}/{key}` with {} permits",
                    semaphore.permits
                );
                ensure!(
                    semaphore.permits_set_at.0 <= self.revision.0,
                    "semaphore `{namespace}/{key}` set at {} beyond revision {}",
                    semaphore.permits_set_at,
                    self.revision
                );
                for (permit, floor) in &semaphore.floors {
                    ensure!(
                        permit.0 < PERMITS_MAX && floor.0 <= self.revision.0,
                        "semaphore `{namespace}/{key}`: slot {permit} floor {floor} (revision {})",
                        self.revision
                    );
                }
            }
        }
        ensure!(
            self.wait_deadlines.len() == deadlines,
            "{} wait deadlines indexed, {deadlines} waiters with a deadline",
            self.wait_deadlines.len()
        );
        Ok(())
    }

    fn check_entry(&self, namespace: &str, key: &str, entry: &LockEntry) -> Result<(), String> {
        ensure!(
            !entry.holders.is_empty(),
            "`{namespace}/{key}`: an entry without a holder"
        );
        if entry.mode == LockMode::Exclusive {
            ensure!(
                entry.holders.len() == 1,
                "`{namespace}/{key}`: exclusive with {} holders",
                entry.holders.len()
            );
        }
        if entry.mode == LockMode::Shared {
            // Shared waiters at the head of a shared key's queue would have been granted.
            let head = entry.waiters.front();
            ensure!(
                head.is_none_or(|w| w.mode == LockMode::Exclusive),
                "`{namespace}/{key}`: shared, with a shared waiter at the head of its queue"
            );
        }
        for (session, hold) in &entry.holders {
            ensure!(
                hold.session == *session,
                "`{namespace}/{key}`: hold of {} filed under {session}",
                hold.session
            );
            ensure!(
                hold.token.0 <= self.revision.0,
                "`{namespace}/{key}`: token {} beyond revision {}",
                hold.token,
                self.revision
            );
            ensure!(
                hold.token.0 >= entry.floor.0,
                "`{namespace}/{key}`: token {} below floor {}",
                hold.token,
                entry.floor
            );
            let holder = self.sessions.get(&hold.session);
            ensure!(
                holder.is_some_and(|s| s.holds(namespace, key)),
                "`{namespace}/{key}`: holder {} is not live or does not record the hold",
                hold.session
            );
        }
        ensure!(
            entry.waiters.len() <= self.config.waiters_per_key_max,
            "`{namespace}/{key}`: {} waiters, bound {}",
            entry.waiters.len(),
            self.config.waiters_per_key_max
        );
        let mut seen: BTreeSet<SessionId> = BTreeSet::new();
        for waiter in &entry.waiters {
            ensure!(
                !entry.holders.contains_key(&waiter.session),
                "`{namespace}/{key}`: holder {} also waits",
                waiter.session
            );
            ensure!(
                seen.insert(waiter.session),
                "`{namespace}/{key}`: {} waits twice",
                waiter.session
            );
            let state = self.sessions.get(&waiter.session);
            ensure!(
                state.is_some_and(|s| s.waits_for(namespace, key)),
                "`{namespace}/{key}`: waiter {} is not live or does not record the wait",
                waiter.session
            );
        }
        Ok(())
    }

    fn check_sessions(&self) -> Result<(), String> {
        ensure!(
            self.sessions_by_secret.len()
                == self
                    .sessions
                    .values()
                    .filter(|s| s.secret_hash.is_some())
                    .count(),
            "{} secret hashes indexed for the sessions",
            self.sessions_by_secret.len()
        );
        for (id, session) in &self.sessions {
            ensure!(
                id.0 <= self.revision.0,
                "session {id} beyond revision {}",
                self.revision
            );
            let mut count = 0;
            for (namespace, keys) in &session.holds {
                ensure!(!keys.is_empty(), "session {id}: empty hold set kept");
                for key in keys {
                    count += 1;
                    let entry = self.entry(namespace, key);
                    ensure!(
                        entry.is_some_and(|e| e.holders.contains_key(id)),
                        "session {id} records a hold of `{namespace}/{key}` it does not have"
                    );
                }
            }
            for (namespace, keys) in &session.waits {
                ensure!(!keys.is_empty(), "session {id}: empty wait set kept");
                for key in keys {
                    count += 1;
                    let entry = self.entry(namespace, key);
                    ensure!(
                        entry.is_some_and(|e| e.waiters.iter().any(|w| w.session == *id)),
                        "session {id} records a wait for `{namespace}/{key}` it does not have"
                    );
                }
            }
            ensure!(
                count == session.holds_and_waits,
                "session {id}: {count} holds and waits, counted {}",
                session.holds_and_waits
            );
            ensure!(
                count <= self.config.holds_per_session_max,
                "session {id}: {count} holds and waits, bound {}",
                self.config.holds_per_session_max
            );
            ensure!(
                session.replies.len() <= self.config.dedup_window,
                "session {id}: {} remembered replies, window {}",
                session.replies.len(),
                self.config.dedup_window
            );
            if let Some(hash) = &session.secret_hash {
                ensure!(
                    self.sessions_by_secret.get(hash) == Some(id),
                    "session {id}: its secret hash is not indexed to it"
                );
            }
            let ids: Vec<_> = session.replies.iter().map(|r| r.request).collect();
            ensure!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "session {id}: remembered request ids not rising: {ids:?}"
            );
            ensure!(
                ids.last().copied() == session.request_newest,
                "session {id}: newest request {:?} but last remembered {:?}",
                session.request_newest,
                ids.last()
            );
            ensure!(
                session.holds_lost.len() <= super::session::HOLDS_LOST_PER_SESSION_MAX,
                "session {id}: {} holds lost remembered, bound {}",
                session.holds_lost.len(),
                super::session::HOLDS_LOST_PER_SESSION_MAX
            );
            let lost: Vec<_> = session.holds_lost.iter().map(|l| l.revision).collect();
            ensure!(
                lost.windows(2).all(|w| w[0] < w[1]),
                "session {id}: holds lost not in revision order: {lost:?}"
            );
            ensure!(
                lost.last().is_none_or(|r| *r <= self.revision),
                "session {id}: a hold lost after the current revision {}",
                self.revision
            );
        }
        Ok(())
    }

    fn check_force_releases(&self) -> Result<(), String> {
        let pending = &self.force_releases.pending;
        ensure!(
            pending.len() == self.force_releases.by_deadline.len(),
            "{} pending force-releases, {} deadlines",
            pending.len(),
            self.force_releases.by_deadline.len()
        );
        for (id, request) in pending {
            ensure!(request.id == *id, "request {} stored as {id}", request.id);
            ensure!(
                self.force_releases
                    .by_deadline
                    .contains(&(request.expires_at, *id)),
                "request {id} missing from the deadline index"
            );
            ensure!(
                request.expires_at > self.time,
                "request {id} expired at {} still pending at {}",
                request.expires_at,
                self.time
            );
            ensure!(
                request.token <= Token(self.revision.0),
                "request {id}: token {} beyond revision {}",
                request.token,
                self.revision
            );
        }
        Ok(())
    }

    fn check_histories(&self) -> Result<(), String> {
        let events = &self.watch.events;
        ensure!(
            events.len() <= self.config.watch_retention,
            "{} watch events, retention {}",
            events.len(),
            self.config.watch_retention
        );
        ensure!(
            events
                .iter()
                .zip(events.iter().skip(1))
                .all(|(a, b)| a.revision <= b.revision),
            "watch events out of revision order"
        );
        if let Some(first) = events.front() {
            ensure!(
                first.revision >= self.watch.compacted_through,
                "watch event at {} below compaction point {}",
                first.revision,
                self.watch.compacted_through
            );
        }
        let records = &self.audit.records;
        ensure!(
            records.len() <= self.config.audit_retention,
            "{} audit records, retention {}",
            records.len(),
            self.config.audit_retention
        );
        ensure!(
            records
                .iter()
                .zip(records.iter().skip(1))
                .all(|(a, b)| a.revision <= b.revision),
            "audit records out of revision order"
        );
        let newest_event = events.back().map(|e| e.revision);
        let newest_record = records.back().map(|r| r.revision);
        ensure!(
            newest_event.max(newest_record) <= Some(self.revision),
            "history beyond revision {}: event {newest_event:?}, audit {newest_record:?}",
            self.revision
        );
        ensure!(
            self.watch.compacted_through <= self.revision
                && self.audit.compacted_through <= self.revision,
            "compaction point beyond revision {}",
            self.revision
        );
        Ok(())
    }

    pub(crate) fn entry(&self, namespace: &str, key: &str) -> Option<&LockEntry> {
        self.namespaces.get(namespace)?.locks.get(key)
    }
}

/// A held key is in permit mode exactly when it is a semaphore; its holders have distinct
/// slots, each token at or above its slot's floor; fewer than N hold only while nobody waits
/// (a waiter would have been granted); more than N hold only as holders granted before N was
/// lowered under them (grants after a change leave at most N), and then only holders of those
/// may hold slots at or above N.
fn check_permits(
    namespace: &str,
    key: &str,
    entry: &LockEntry,
    semaphore: Option<&Semaphore>,
) -> Result<(), String> {
    let Some(semaphore) = semaphore else {
        ensure!(
            entry.mode != LockMode::Permit,
            "`{namespace}/{key}`: held in permit mode but not a semaphore"
        );
        for hold in entry.holders.values() {
            ensure!(
                hold.permit.is_none(),
                "`{namespace}/{key}`: lock holder {} has slot {:?}",
                hold.session,
                hold.permit
            );
        }
        return Ok(());
    };
    ensure!(
        entry.mode == LockMode::Permit,
        "`{namespace}/{key}`: a semaphore held {}",
        entry.mode
    );
    let permits = semaphore.permits as usize;
    let mut taken_permits: BTreeSet<PermitSlot> = BTreeSet::new();
    let mut before_change = 0;
    for hold in entry.holders.values() {
        let Some(permit) = hold.permit else {
            return Err(format!(
                "`{namespace}/{key}`: permit holder {} has no slot",
                hold.session
            ));
        };
        ensure!(
            taken_permits.insert(permit),
            "`{namespace}/{key}`: slot {permit} held twice"
        );
        let floor = semaphore.floors.get(&permit).copied();
        ensure!(
            floor.is_some_and(|floor| hold.token.0 >= floor.0),
            "`{namespace}/{key}`: slot {permit} token {} below its floor {floor:?}",
            hold.token
        );
        let old = hold.token.0 < semaphore.permits_set_at.0;
        if old {
            before_change += 1;
        }
        if permit.0 >= semaphore.permits {
            ensure!(
                old,
                "`{namespace}/{key}`: slot {permit} (N {permits}) granted at {} after N was set at {}",
                hold.token,
                semaphore.permits_set_at
            );
        }
    }
    ensure!(
        entry.holders.len() <= permits.max(before_change),
        "`{namespace}/{key}`: {} holders, N {permits}, {before_change} granted before N was set",
        entry.holders.len()
    );
    if !entry.waiters.is_empty() {
        ensure!(
            entry.holders.len() >= permits,
            "`{namespace}/{key}`: {} holders of {permits} permits and a waiter",
            entry.holders.len()
        );
    }
    for waiter in &entry.waiters {
        ensure!(
            waiter.mode == LockMode::Permit,
            "`{namespace}/{key}`: a semaphore with a {} waiter",
            waiter.mode
        );
    }
    Ok(())
}
