//! Waits that end: deadlines (in log time: `ExpireWaits`, proposed by the leader when one
//! passed, and, from cluster version 2 on, every hand-off, which first removes the due waits at
//! the head of its queue) and `CancelWait`; and the record of which waits each command ended, so
//! the node can answer the client that proposed each wait exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::command::Reply;
use super::error::LockError;
use super::ids::{PermitSlot, Revision, SessionId, Token};
use super::lock::Waiter;
use super::names::{validate_key, validate_namespace};
use super::owner::SessionProof;
use super::session::{set_remove, Session};
use super::version::CLUSTER_VERSION_HAND_OFF_EXPIRY;
use super::watch::{EventKind, ReleaseCause, WatchLog};
use super::LockStateMachine;
use crate::time::Instant;

/// (deadline, session, namespace, key) of every wait with a deadline
/// (`LockStateMachine::wait_deadlines`).
pub(crate) type WaitDeadlines = BTreeSet<(Instant, SessionId, Arc<str>, Arc<str>)>;

/// Longest wait deadline an `Acquire` may ask for (one day).
pub const WAIT_TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1_000;
/// Waits one `ExpireWaits` removes at most (the earliest deadlines first; the leader proposes
/// another while deadlines remain passed).
pub const EXPIRE_WAITS_BATCH_MAX: usize = 1_000;

/// A wait that the last applied command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitEnd {
    pub session: SessionId,
    pub namespace: Arc<str>,
    pub key: Arc<str>,
    pub kind: WaitEndKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEndKind {
    /// The waiter was granted the key with this token (and a permit's slot).
    Granted {
        token: Token,
        permit: Option<PermitSlot>,
    },
    /// The waiter left the queue without the key.
    Removed { cause: ReleaseCause },
}

/// The waits the last command ended: a by-product of applying it, not part of the state, so
/// it takes no part in comparing states (a restored state equals the one it was taken from).
#[derive(Clone, Debug, Default)]
pub(crate) struct WaitEnds(pub Vec<WaitEnd>);

impl PartialEq for WaitEnds {
    fn eq(&self, _other: &WaitEnds) -> bool {
        true
    }
}

impl Eq for WaitEnds {}

impl LockStateMachine {
    /// The waits the last applied command ended, in the order it ended them.
    pub fn wait_ends(&self) -> &[WaitEnd] {
        &self.wait_ends.0
    }

    /// The earliest wait deadline (log time), if some wait has one.
    pub fn wait_deadline_next(&self) -> Option<Instant> {
        self.wait_deadlines.first().map(|(at, ..)| *at)
    }

    /// The deadline of `session`'s wait for `namespace/key`, if it waits with one.
    pub fn wait_deadline(&self, session: SessionId, namespace: &str, key: &str) -> Option<Instant> {
        let entry = self.namespaces.get(namespace)?.locks.get(key)?;
        let waiter = entry.waiters.iter().find(|w| w.session == session)?;
        waiter.deadline
    }

    pub(crate) fn apply_cancel_wait(
        &mut self,
        session: SessionId,
        proof: &SessionProof,
        namespace: String,
        key: String,
    ) -> Result<Reply, LockError> {
        let state = self.proven_session(session, proof)?;
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        if state.holds(&namespace, &key) {
            let token =
                self.namespaces[namespace.as_str()].locks[key.as_str()].holders[&session].token;
            return Ok(Reply::WaitCancelled {
                removed: false,
                held: Some(token),
            });
        }
        let waits = state
            .waits
            .get(namespace.as_str())
            .is_some_and(|keys| keys.contains(key.as_str()));
        if !waits {
            return Ok(Reply::WaitCancelled {
                removed: false,
                held: None,
            });
        }
        self.remove_wait(session, &namespace, &key, ReleaseCause::WaitCancelled);
        // Shared waiters behind a cancelled exclusive one may be granted now.
        let shared_key = self.namespaces[namespace.as_str()]
            .locks
            .get_key_value(key.as_str())
            .map(|(k, _)| k.clone())
            .expect("a waited-for key is held");
        self.grant_from_queue(&namespace, &shared_key);
        Ok(Reply::WaitCancelled {
            removed: true,
            held: None,
        })
    }

    /// Removes the waits whose deadline is at or before the log time, earliest first.
    pub(crate) fn apply_expire_waits(&mut self) -> Reply {
        let due: Vec<(SessionId, Arc<str>, Arc<str>)> = self
            .wait_deadlines
            .iter()
            .take_while(|(at, ..)| *at <= self.time)
            .take(EXPIRE_WAITS_BATCH_MAX)
            .map(|(_, session, namespace, key)| (*session, namespace.clone(), key.clone()))
            .collect();
        for (session, namespace, key) in &due {
            self.remove_wait(*session, namespace, key, ReleaseCause::WaitExpired);
        }
        // Shared waiters behind a removed exclusive one may be granted now: once every due
        // wait is gone, so that no expired wait is granted.
        let keys: BTreeSet<(&Arc<str>, &Arc<str>)> = due.iter().map(|(_, ns, k)| (ns, k)).collect();
        for (namespace, key) in keys {
            self.grant_from_queue(namespace, key);
        }
        Reply::WaitsExpired { removed: due.len() }
    }

    /// Removes a live session's wait (it must wait) at this revision, with its event.
    fn remove_wait(&mut self, session: SessionId, namespace: &str, key: &str, cause: ReleaseCause) {
        let (revision, time) = (self.revision, self.time);
        let ns = self
            .namespaces
            .get_mut(namespace)
            .expect("a waited-for key's namespace");
        let (key, _) = ns
            .locks
            .get_key_value(key)
            .expect("a waited-for key is held");
        let key = key.clone();
        let namespace = ns.name.clone();
        let entry = ns.locks.get_mut(&key).expect("found above");
        let index = entry
            .waiters
            .iter()
            .position(|w| w.session == session)
            .unwrap_or_else(|| panic!("{session} does not wait for `{namespace}/{key}`"));
        let waiter = entry.waiters.remove(index).expect("index in range");
        wait_removed(
            &mut self.sessions,
            &mut self.wait_deadlines,
            &mut self.watch,
            &mut self.wait_ends,
            (revision, time),
            (&namespace, &key),
            waiter,
            cause,
        );
    }

    /// Whether a hand-off first removes the waits at the head of its queue whose deadline is at
    /// or before the log time, as `ExpireWaits` would, before it grants anything
    /// ([`LockStateMachine::grant_from_queue`]): a rule of cluster version 2 (docs/locks.md,
    /// "Waits that end"). At cluster version 1 (release 0.1's log) a hand-off grants the head
    /// whatever its deadline, and the leader puts an `ExpireWaits` before every hand-off in the
    /// log instead (`node::waits`), as a 0.1 replica expects. The gate is the applied cluster
    /// version, so applying stays a function of the log (and of a snapshot, which carries it).
    /// Off under the planted bug `Faults::late_wait_expiry`.
    pub(crate) fn hand_off_expires_waits(&self) -> bool {
        if self.faults.late_wait_expiry {
            return false;
        }
        self.at_cluster_version(CLUSTER_VERSION_HAND_OFF_EXPIRY)
    }
}

/// What a wait that left its queue without the key (the caller took `waiter` out of the queue
/// of `namespace/key`; its session is live) leaves behind, at `revision`: its deadline's index
/// entry, its place in the session's waits, its `WaitRemoved` event and its wait end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_removed(
    sessions: &mut BTreeMap<SessionId, Session>,
    wait_deadlines: &mut WaitDeadlines,
    watch: &mut WatchLog,
    wait_ends: &mut WaitEnds,
    (revision, time): (Revision, Instant),
    (namespace, key): (&Arc<str>, &Arc<str>),
    waiter: Waiter,
    cause: ReleaseCause,
) {
    let session = waiter.session;
    if let Some(deadline) = waiter.deadline {
        let indexed = (deadline, session, namespace.clone(), key.clone());
        let removed = wait_deadlines.remove(&indexed);
        assert!(
            removed,
            "deadline of {session} on `{namespace}/{key}` not indexed"
        );
    }
    let state = sessions.get_mut(&session).expect("a waiter is live");
    set_remove(&mut state.waits, namespace, key);
    state.holds_and_waits -= 1;
    let kind = EventKind::WaitRemoved { session, cause };
    let identity = Some(state.identity.clone());
    watch.push(revision, time, namespace, key, kind, identity);
    wait_ends.0.push(WaitEnd {
        session,
        namespace: namespace.clone(),
        key: key.clone(),
        kind: WaitEndKind::Removed { cause },
    });
}

impl LockStateMachine {
    /// The token `session` holds `namespace/key` with, if it holds it.
    pub fn holder_token(&self, session: SessionId, namespace: &str, key: &str) -> Option<Token> {
        let entry = self.namespaces.get(namespace)?.locks.get(key)?;
        entry.holders.get(&session).map(|hold| hold.token)
    }

    /// The token and (on a semaphore) slot with which `session` holds `namespace/key`.
    pub fn holder_grant(
        &self,
        session: SessionId,
        namespace: &str,
        key: &str,
    ) -> Option<(Token, Option<PermitSlot>)> {
        let entry = self.namespaces.get(namespace)?.locks.get(key)?;
        entry
            .holders
            .get(&session)
            .map(|hold| (hold.token, hold.permit))
    }

    /// `session`'s 1-based place in the queue of `namespace/key`, if it waits.
    pub fn wait_position(&self, session: SessionId, namespace: &str, key: &str) -> Option<u32> {
        let entry = self.namespaces.get(namespace)?.locks.get(key)?;
        super::lock::waiter_position(entry, session)
    }
}
