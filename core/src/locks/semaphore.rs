//! Counting semaphores: a key an operator declared with N permits (`SetSemaphore`). Up to N
//! sessions hold it together, each in its own permit slot `0..N` (the lowest free one), with its
//! own token (the grant's revision, as every grant). Each slot has a floor: the revision of its
//! latest grant or force-release, so a resource that fences per (key, slot) refuses a superseded
//! holder of the same slot. Lowering N below the holders takes no permit away: no permit is
//! granted until fewer than N hold, and then only a slot below N.
//!
//! The declaration is durable state of the namespace (in snapshots) and stays while the key is
//! free; `permits: 0` removes it once nobody holds or waits.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::audit::{AuditAction, AuditRecord};
use super::class::require_class_admin;
use super::command::{Actor, Reply};
use super::error::LockError;
use super::force_release::check_reason;
use super::ids::{PermitSlot, Revision};
use super::lock::{LockEntry, NamespaceState};
use super::names::{validate_key, validate_namespace};
use super::watch::EventKind;
use super::LockStateMachine;

/// Most permits a semaphore may have.
pub const PERMITS_MAX: u32 = 1_024;

/// A declared semaphore key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Semaphore {
    /// N, in `1..=PERMITS_MAX`.
    pub permits: u32,
    /// The revision of the `SetSemaphore` that set N. Holders granted before it may be more
    /// than N (N was lowered under them); every grant after it leaves at most N holders.
    pub permits_set_at: Revision,
    /// slot -> the revision of the slot's latest grant or force-release. A slot's tokens below
    /// its floor are superseded; every holder's token is at or above its slot's floor. Never
    /// decreases per slot; kept while the key is free (at most `PERMITS_MAX` entries).
    pub floors: BTreeMap<PermitSlot, Revision>,
}

impl Semaphore {
    /// Whether a permit may be granted now to a key held by `holders` sessions.
    pub fn has_room(&self, holders: usize) -> bool {
        holders < self.permits as usize
    }

    /// Takes the lowest slot below N that no holder of `entry` has, and makes `revision` its
    /// floor. The caller checked [`Self::has_room`], so one is free.
    pub fn take_permit(&mut self, entry: Option<&LockEntry>, revision: Revision) -> PermitSlot {
        let taken: Vec<PermitSlot> = entry
            .map(|e| e.holders.values().filter_map(|h| h.permit).collect())
            .unwrap_or_default();
        let permit = (0..self.permits)
            .map(PermitSlot)
            .find(|permit| !taken.contains(permit))
            .unwrap_or_else(|| {
                panic!(
                    "no free slot below {} with {} holders",
                    self.permits,
                    taken.len()
                )
            });
        self.floors.insert(permit, revision);
        permit
    }
}

impl LockStateMachine {
    pub(crate) fn apply_set_semaphore(
        &mut self,
        actor: Actor,
        namespace: String,
        key: String,
        permits: u32,
        reason: String,
    ) -> Result<Reply, LockError> {
        require_class_admin(&actor, "declare semaphores")?;
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        check_reason(&reason)?;
        if permits > PERMITS_MAX {
            return Err(LockError::PermitsOutOfBounds {
                given: permits,
                max: PERMITS_MAX,
            });
        }
        let ns = self.namespaces.get(namespace.as_str());
        let previous = ns
            .and_then(|ns| ns.semaphores.get(key.as_str()))
            .map_or(0, |s| s.permits);
        let entry = ns.and_then(|ns| ns.locks.get(key.as_str()));
        if previous == permits {
            // Nothing changes (also a retried removal of a key that is no semaphore).
            return Ok(Reply::SemaphoreSet {
                previous_permits: previous,
            });
        }
        if let Some(entry) = entry {
            if previous == 0 {
                return Err(LockError::KeyHeldAsLock { namespace, key });
            }
            if permits == 0 {
                return Err(LockError::SemaphoreInUse {
                    namespace,
                    key,
                    holders: entry.holders.len(),
                    waiters: entry.waiters.len(),
                });
            }
        }
        let name: Arc<str> = match self.namespaces.get_key_value(namespace.as_str()) {
            Some((name, _)) => name.clone(),
            None => Arc::from(namespace.as_str()),
        };
        let ns = self
            .namespaces
            .entry(name.clone())
            .or_insert_with(|| NamespaceState::new(name.clone()));
        let shared_key: Arc<str> = match ns.locks.get_key_value(key.as_str()) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(key.as_str()),
        };
        if permits == 0 {
            ns.semaphores.remove(key.as_str());
            if ns.is_empty() {
                self.namespaces.remove(namespace.as_str());
            }
        } else {
            let revision = self.revision;
            let semaphore = ns
                .semaphores
                .entry(shared_key.clone())
                .or_insert_with(|| Semaphore {
                    permits,
                    permits_set_at: revision,
                    floors: BTreeMap::new(),
                });
            semaphore.permits = permits;
            semaphore.permits_set_at = revision;
        }
        self.audit.push(AuditRecord {
            reason,
            actor_roles: actor.roles.clone(),
            permits: Some((previous, permits)),
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.principal.clone(),
                AuditAction::SemaphoreSet,
                namespace,
                key,
            )
        });
        let kind = EventKind::SemaphoreChanged {
            permits,
            previous_permits: previous,
        };
        self.watch
            .push(self.revision, self.time, &name, &shared_key, kind, None);
        // A raised N grants the head waiters now, in this revision.
        if permits > previous {
            self.grant_from_queue(&name, &shared_key);
        }
        Ok(Reply::SemaphoreSet {
            previous_permits: previous,
        })
    }

    /// N of `namespace/key` if it is a semaphore.
    pub fn semaphore_permits(&self, namespace: &str, key: &str) -> Option<u32> {
        let ns = self.namespaces.get(namespace)?;
        ns.semaphores.get(key).map(|s| s.permits)
    }
}
