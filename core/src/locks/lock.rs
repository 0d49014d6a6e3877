//! The lock table: holds, FIFO waiters and floors, and the acquire / release / hand-off rules.
//!
//! A key has an entry only while it is held (an entry always has a holder; waiters queue behind
//! it). When the last hold ends with nobody waiting, the entry is dropped: every later grant is at
//! a later revision, so its token is above every token ever given on the key anyway.
//!
//! A key is held in one mode: by one exclusive holder, or by one or more shared holders. A shared
//! request joins shared holders at once only while nobody waits (so a queued exclusive request is
//! never overtaken); whenever a hold or a wait ends, the head of the queue is granted as far as
//! the mode allows: one exclusive waiter, or the whole run of shared waiters at the head, all in
//! the same revision (see [`LockStateMachine::grant_from_queue`]).
//!
//! A semaphore key (declared with `SetSemaphore`, see [`super::semaphore`]) is held only in
//! permit mode, by up to N holders, each in its own slot; its FIFO waiters are granted as
//! permits free.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::class::{ClassRegistry, ClassSpec};
use super::command::{
    AcquireReply, Identity, LockMode, Remembered, RememberedReply, Reply, RequestTarget,
};
use super::config::LockConfig;
use super::error::LockError;
use super::ids::{ForceReleaseId, PermitSlot, RequestId, Revision, SessionId, Token};
use super::names::{validate_key, validate_namespace};
use super::owner::SessionProof;
use super::semaphore::Semaphore;
use super::session::{check_request, set_insert, set_remove, Session};
use super::wait::{WaitEnd, WaitEndKind, WAIT_TIMEOUT_MS_MAX};
use super::watch::{EventKind, ReleaseCause, WatchLog};
use super::LockStateMachine;
use crate::faults::Faults;
use crate::time::Instant;

/// One namespace: its classes, its held keys and an age index of its holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NamespaceState {
    /// The namespace's name, shared with the map key, the sessions' sets and the events.
    pub name: Arc<str>,
    pub classes: ClassRegistry,
    /// Only held keys have an entry. Key names are shared (`Arc<str>`) with the sessions' hold
    /// and wait sets, the age index and the watch events: one allocation per held key.
    pub locks: BTreeMap<Arc<str>, LockEntry>,
    /// (token, key, session) of every hold of the namespace, so the oldest hold is the first
    /// entry. (Several keys can share a token: one revision may hand over several keys; and
    /// several shared holders of one key can share it: a run of readers granted together.)
    pub holds_by_age: BTreeSet<(Token, Arc<str>, SessionId)>,
    /// The keys declared semaphores, held or free (durable: the declaration outlives holds).
    pub semaphores: BTreeMap<Arc<str>, Semaphore>,
}

impl NamespaceState {
    pub fn new(name: Arc<str>) -> NamespaceState {
        NamespaceState {
            name,
            classes: ClassRegistry::default(),
            locks: BTreeMap::new(),
            holds_by_age: BTreeSet::new(),
            semaphores: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.classes.is_empty() && self.semaphores.is_empty()
    }
}

/// A held key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockEntry {
    /// How the holders hold the key (permit exactly when the key is a declared semaphore).
    pub mode: LockMode,
    /// By session; never empty; exactly one when `mode` is exclusive; each in its own slot
    /// when `mode` is permit.
    pub holders: BTreeMap<SessionId, Hold>,
    /// FIFO; each waiter's session is live, distinct, and not a holder. While the key is shared
    /// the first waiter (if any) is exclusive: shared waiters at the head are granted at once.
    pub waiters: VecDeque<Waiter>,
    /// Tokens below the floor are no longer valid on this key; every holder's token is at or
    /// above it. It is the revision that began the current run of holds: the exclusive grant,
    /// or the first shared grant after the key was free or exclusive (shared requests that join
    /// leave it where it is, so the readers before them stay valid).
    pub floor: Revision,
}

impl LockEntry {
    /// The oldest hold (lowest token, then lowest session): the one `Busy` and single-holder
    /// views name.
    pub fn oldest(&self) -> Hold {
        *self
            .holders
            .values()
            .min_by_key(|hold| (hold.token, hold.session))
            .expect("a held key has a holder")
    }

    /// The holds, oldest first.
    pub fn holds_oldest_first(&self) -> Vec<Hold> {
        let mut holds: Vec<Hold> = self.holders.values().copied().collect();
        holds.sort_by_key(|hold| (hold.token, hold.session));
        holds
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hold {
    pub session: SessionId,
    pub token: Token,
    /// Log time of the grant.
    pub granted_at: Instant,
    /// A permit's slot (`Some` exactly when the key is held in permit mode).
    pub permit: Option<PermitSlot>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub session: SessionId,
    /// The mode it asked for.
    pub mode: LockMode,
    /// Log time of queueing.
    pub queued_at: Instant,
    /// Log time from which `ExpireWaits` (and, from cluster version 2 on, a hand-off reaching
    /// it at the head of the queue) removes the wait (`None`: never).
    pub deadline: Option<Instant>,
}

/// How a hold ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldEnd {
    Released(ReleaseCause),
    Forced {
        request: ForceReleaseId,
        session_revoked: bool,
    },
}

pub(crate) fn emit(
    watch: &mut WatchLog,
    revision: Revision,
    time: Instant,
    namespace: &Arc<str>,
    key: &Arc<str>,
    kind: EventKind,
    identity: &Identity,
) {
    watch.push(revision, time, namespace, key, kind, Some(identity.clone()));
}

impl LockStateMachine {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_acquire(
        &mut self,
        session: SessionId,
        proof: &SessionProof,
        request: RequestId,
        namespace: String,
        key: String,
        mode: LockMode,
        wait: Option<Option<u64>>,
    ) -> Result<Reply, LockError> {
        let state = self.proven_session(session, proof)?;
        let this = (
            "Acquire",
            namespace.as_str(),
            key.as_str(),
            None,
            Some(mode),
        );
        if let Some(reply) = check_request(state, session, request, this)? {
            return self.refresh_acquire(session, &namespace, &key, reply);
        }
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        if let Some(Some(given)) = wait {
            if !(1..=WAIT_TIMEOUT_MS_MAX).contains(&given) {
                return Err(LockError::WaitTimeoutOutOfBounds {
                    given,
                    max: WAIT_TIMEOUT_MS_MAX,
                });
            }
        }
        let target = RequestTarget {
            namespace: namespace.clone(),
            key: key.clone(),
            mode: Some(mode),
        };
        let reply = self.acquire_new(session, namespace, key, mode, wait)?;
        let remembered = Remembered {
            request,
            reply: RememberedReply::Acquire(reply),
            target: Some(target),
        };
        let window = self.config.dedup_window;
        let state = self.sessions.get_mut(&session).expect("checked above");
        state.remember(remembered, window);
        Ok(Reply::Acquire(reply))
    }

    /// A retried acquire answers what is true now if the session still holds or waits for the
    /// key (a queued request may have been granted since), else the reply it got then; but a
    /// `Queued` reply whose wait is gone (timed out, cancelled, or granted and released since)
    /// is `WaitEnded`, never a `Queued` that is no longer true.
    fn refresh_acquire(
        &self,
        session: SessionId,
        namespace: &str,
        key: &str,
        cached: RememberedReply,
    ) -> Result<Reply, LockError> {
        let entry = self
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.locks.get(key));
        if let Some(entry) = entry {
            if let Some(hold) = entry.holders.get(&session) {
                return Ok(Reply::Acquire(AcquireReply::Granted {
                    token: hold.token,
                    permit: hold.permit,
                }));
            }
            if let Some(position) = waiter_position(entry, session) {
                return Ok(Reply::Acquire(AcquireReply::Queued { position }));
            }
        }
        if let RememberedReply::Acquire(AcquireReply::Queued { .. }) = cached {
            return Err(LockError::WaitEnded {
                session,
                namespace: namespace.to_owned(),
                key: key.to_owned(),
            });
        }
        Ok(cached.to_reply())
    }

    /// Acquire after the request id and names were checked. One search of the key table: the
    /// entry API answers a held key and inserts a free one.
    fn acquire_new(
        &mut self,
        session: SessionId,
        namespace: String,
        key: String,
        mode: LockMode,
        wait: Option<Option<u64>>,
    ) -> Result<AcquireReply, LockError> {
        let (revision, time) = (self.revision, self.time);
        let state = self.sessions.get_mut(&session).expect("caller checked");
        let key: Arc<str> = Arc::from(key);
        let Some(ns_state) = self.namespaces.get_mut(namespace.as_str()) else {
            // A namespace without classes, semaphores or holds: the key is free, the class the
            // default.
            check_semaphore_mode(&namespace, &key, mode, None)?;
            admit(session, state, &self.default_class, &self.config)?;
            let namespace: Arc<str> = Arc::from(namespace);
            let mut ns_state = NamespaceState::new(namespace.clone());
            let (token, entry) = grant(
                session,
                state,
                &mut ns_state.holds_by_age,
                (&namespace, &key),
                (mode, None),
                (revision, time, self.faults),
                &mut self.watch,
            );
            ns_state.locks.insert(key, entry);
            self.namespaces.insert(namespace, ns_state);
            return Ok(AcquireReply::Granted {
                token,
                permit: None,
            });
        };
        let NamespaceState {
            name: namespace,
            classes,
            locks,
            holds_by_age,
            semaphores,
        } = ns_state;
        let namespace = namespace.clone();
        let mut semaphore = semaphores.get_mut(&*key);
        check_semaphore_mode(&namespace, &key, mode, semaphore.as_deref())?;
        let mut occupied = match locks.entry(key.clone()) {
            Entry::Vacant(vacant) => {
                let class = class_of(Some(classes), &self.default_class, &key);
                admit(session, state, class, &self.config)?;
                let permit = semaphore.as_mut().map(|s| s.take_permit(None, revision));
                let (token, entry) = grant(
                    session,
                    state,
                    holds_by_age,
                    (&namespace, &key),
                    (mode, permit),
                    (revision, time, self.faults),
                    &mut self.watch,
                );
                if let (Some(semaphore), Some(permit)) = (semaphore, permit) {
                    // The token's revision: `revision` itself (but for the planted bug
                    // `Faults::token_wrap`), as the key's floor in `grant`.
                    semaphore.floors.insert(permit, Revision(token.0));
                }
                vacant.insert(entry);
                return Ok(AcquireReply::Granted { token, permit });
            }
            Entry::Occupied(occupied) => occupied,
        };
        let entry = occupied.get_mut();
        if let Some(hold) = entry.holders.get(&session) {
            check_same_mode(session, &namespace, &key, entry.mode, mode, true)?;
            return Ok(AcquireReply::Granted {
                token: hold.token,
                permit: hold.permit,
            });
        }
        if let Some(index) = entry.waiters.iter().position(|w| w.session == session) {
            let waits_as = entry.waiters[index].mode;
            check_same_mode(session, &namespace, &key, waits_as, mode, false)?;
            let position = u32::try_from(index + 1).expect("waiters are bounded");
            return Ok(AcquireReply::Queued { position });
        }
        // A shared request joins shared holders only while nobody waits: a queued exclusive
        // request is never overtaken. A permit is granted while one is free and nobody waits.
        let joins = match semaphore.as_deref() {
            Some(semaphore) => semaphore.has_room(entry.holders.len()) && entry.waiters.is_empty(),
            None => {
                mode == LockMode::Shared
                    && entry.mode == LockMode::Shared
                    && entry.waiters.is_empty()
            }
        };
        if !joins && wait.is_none() {
            let oldest = entry.oldest();
            return Ok(AcquireReply::Busy {
                holder: oldest.session,
                token: oldest.token,
            });
        }
        let class = class_of(Some(classes), &self.default_class, &key);
        admit(session, state, class, &self.config)?;
        if joins {
            let token = Token::at(revision);
            let permit = semaphore
                .as_mut()
                .map(|s| s.take_permit(Some(entry), revision));
            add_hold(
                entry,
                holds_by_age,
                state,
                (&namespace, &key),
                Hold {
                    session,
                    token,
                    granted_at: time,
                    permit,
                },
                &mut self.watch,
                revision,
            );
            return Ok(AcquireReply::Granted { token, permit });
        }
        let timeout_ms = wait.expect("checked above");
        if entry.waiters.len() >= self.config.waiters_per_key_max {
            return Err(LockError::TooManyWaiters {
                namespace: namespace.to_string(),
                key: key.to_string(),
                max: self.config.waiters_per_key_max,
            });
        }
        let deadline = timeout_ms.map(|ms| time.add_ms(ms));
        entry.waiters.push_back(Waiter {
            session,
            mode,
            queued_at: time,
            deadline,
        });
        if let Some(deadline) = deadline {
            let indexed = (deadline, session, namespace.clone(), key.clone());
            self.wait_deadlines.insert(indexed);
        }
        let position = u32::try_from(entry.waiters.len()).expect("waiters are bounded");
        set_insert(&mut state.waits, &namespace, &key);
        state.holds_and_waits += 1;
        let kind = EventKind::Queued { session, position };
        let identity = &state.identity;
        emit(
            &mut self.watch,
            revision,
            time,
            &namespace,
            &key,
            kind,
            identity,
        );
        Ok(AcquireReply::Queued { position })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_release(
        &mut self,
        session: SessionId,
        proof: &SessionProof,
        request: RequestId,
        namespace: String,
        key: String,
        token: Token,
    ) -> Result<Reply, LockError> {
        let state = self.proven_session(session, proof)?;
        let this = (
            "Release",
            namespace.as_str(),
            key.as_str(),
            Some(token),
            None,
        );
        if let Some(reply) = check_request(state, session, request, this)? {
            return Ok(reply.to_reply());
        }
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        // The session's own hold set mirrors the lock table and is small: it answers NotHolder
        // and gives the shared key name without searching the namespace's key table.
        let Some(shared_key) = state.held_key(&namespace, &key) else {
            return Err(LockError::NotHolder {
                namespace,
                key,
                session,
            });
        };
        let end = HoldEnd::Released(ReleaseCause::Released);
        let next = match self.end_hold(&namespace, &shared_key, session, end, Some(token), None) {
            Ok(next) => next,
            Err(current) => {
                return Err(LockError::WrongToken {
                    namespace,
                    key,
                    given: token,
                    current,
                })
            }
        };
        let reply = RememberedReply::Released { token, next };
        let remembered = Remembered {
            request,
            reply,
            target: Some(RequestTarget {
                namespace,
                key,
                mode: None,
            }),
        };
        let window = self.config.dedup_window;
        let state = self.sessions.get_mut(&session).expect("checked above");
        state.remember(remembered, window);
        Ok(reply.to_reply())
    }

    /// Ends `session`'s hold on `namespace/key` at this revision and grants the head of the
    /// queue what the mode allows (in this same revision), or drops the entry. The holder's
    /// session may already be gone from the session table (closing, expiry, revocation): `gone`
    /// is then its identity, for the event. Returns the first session granted now, or, if
    /// `expected` is not the holder's token, that token (and changes nothing).
    pub(crate) fn end_hold(
        &mut self,
        namespace: &str,
        key: &Arc<str>,
        session: SessionId,
        end: HoldEnd,
        expected: Option<Token>,
        gone: Option<&Identity>,
    ) -> Result<Option<(SessionId, Token)>, Token> {
        let (revision, time) = (self.revision, self.time);
        let ns_state = self
            .namespaces
            .get_mut(namespace)
            .expect("ending a hold in a known namespace");
        let namespace = ns_state.name.clone();
        let Some((key, entry)) = ns_state.locks.get_key_value(&**key) else {
            panic!("ending a hold of `{namespace}/{key}`, which is not held");
        };
        let key = key.clone();
        let Some(hold) = entry.holders.get(&session).copied() else {
            panic!("ending {session}'s hold of `{namespace}/{key}`, which it does not hold");
        };
        if expected.is_some_and(|token| token != hold.token) {
            return Err(hold.token);
        }
        // A hold never ends in the revision that granted it: so the next token on this key (this
        // revision) is strictly above the ended one, and tokens rise strictly per key.
        assert!(
            hold.token.0 < revision.0,
            "hold of `{namespace}/{key}` with {} ends at {revision}",
            hold.token
        );
        if let (HoldEnd::Forced { .. }, Some(permit)) = (end, hold.permit) {
            // A force-released permit's slot: its tokens so far are superseded.
            let semaphore = ns_state
                .semaphores
                .get_mut(&key)
                .expect("a permit is held on a semaphore");
            semaphore.floors.insert(permit, revision);
        }
        let entry = ns_state.locks.get_mut(&key).expect("found above");
        entry.holders.remove(&session);
        let removed = ns_state
            .holds_by_age
            .remove(&(hold.token, key.clone(), session));
        assert!(removed, "hold {} missing from the age index", hold.token);
        let holder = match self.sessions.get_mut(&hold.session) {
            Some(state) => {
                set_remove(&mut state.holds, &namespace, &key);
                state.holds_and_waits -= 1;
                Some(state.identity.clone())
            }
            None => gone.cloned(),
        };
        let kind = match end {
            HoldEnd::Released(cause) => EventKind::Released {
                session: hold.session,
                token: hold.token,
                cause,
            },
            HoldEnd::Forced {
                request,
                session_revoked,
            } => EventKind::ForceReleased {
                session: hold.session,
                token: hold.token,
                request,
                session_revoked,
            },
        };
        self.watch
            .push(revision, time, &namespace, &key, kind, holder);
        let granted = self.grant_from_queue(&namespace, &key);
        Ok(granted.first().copied())
    }

    /// Grants, at this revision, what the head of `namespace/key`'s queue may have now: if
    /// nobody holds the key, its first waiter (an exclusive one alone, a shared one with the
    /// run of shared waiters right behind it); if it is held shared, the run of shared waiters
    /// at the head (there is one only after an exclusive waiter ahead of them left); on a
    /// semaphore, head waiters while fewer than N hold, each in the lowest free slot. Drops the
    /// entry if nobody holds it any more. Returns the sessions granted, in queue order.
    ///
    /// From cluster version 2 on, a head waiter whose deadline is at or before the log time is
    /// removed first (`WaitRemoved { cause: WaitExpired }`, at this revision, as `ExpireWaits`
    /// would): no hand-off grants an expired wait, whatever was or was not proposed before it
    /// ([`LockStateMachine::hand_off_expires_waits`]). Every hand-off comes here, and a wait
    /// that is not at the head is not granted, so that is the one place that needs the rule.
    /// The removal takes no revision of its own: it grants nothing (the grants that follow are
    /// the command's own, as before), so no hold can be granted and ended in one revision and
    /// tokens still rise strictly per key; and revisions stay one per command.
    pub(crate) fn grant_from_queue(
        &mut self,
        namespace: &str,
        key: &Arc<str>,
    ) -> Vec<(SessionId, Token)> {
        let (revision, time) = (self.revision, self.time);
        let expires_due = self.hand_off_expires_waits();
        let Some(ns_state) = self.namespaces.get_mut(namespace) else {
            return Vec::new();
        };
        let namespace = ns_state.name.clone();
        let NamespaceState {
            name: _,
            classes,
            locks,
            holds_by_age,
            semaphores,
        } = ns_state;
        let Entry::Occupied(mut occupied) = locks.entry(key.clone()) else {
            return Vec::new();
        };
        let key = occupied.key().clone();
        let entry = occupied.get_mut();
        let mut semaphore = semaphores.get_mut(&key);
        let mut granted = Vec::new();
        while let Some(head) = entry.waiters.front().copied() {
            if expires_due && head.deadline.is_some_and(|at| at <= time) {
                entry.waiters.pop_front();
                super::wait::wait_removed(
                    &mut self.sessions,
                    &mut self.wait_deadlines,
                    &mut self.watch,
                    &mut self.wait_ends,
                    (revision, time),
                    (&namespace, &key),
                    head,
                    ReleaseCause::WaitExpired,
                );
                continue;
            }
            let free = entry.holders.is_empty();
            let shared_run = entry.mode == LockMode::Shared && head.mode == LockMode::Shared;
            let grants = match semaphore.as_deref() {
                Some(semaphore) => semaphore.has_room(entry.holders.len()),
                None => free || shared_run,
            };
            if !grants {
                break;
            }
            entry.waiters.pop_front();
            if free {
                entry.mode = head.mode;
                entry.floor = revision;
            }
            if let Some(deadline) = head.deadline {
                let indexed = (deadline, head.session, namespace.clone(), key.clone());
                let removed = self.wait_deadlines.remove(&indexed);
                assert!(
                    removed,
                    "deadline of a waiter of `{namespace}/{key}` not indexed"
                );
            }
            let state = self.sessions.get_mut(&head.session).unwrap_or_else(|| {
                panic!(
                    "waiter {} of `{namespace}/{key}` has no session",
                    head.session
                )
            });
            // The wait becomes a hold: the session's count of holds and waits stays.
            set_remove(&mut state.waits, &namespace, &key);
            state.holds_and_waits -= 1;
            let token = Token::at(revision);
            let permit = semaphore
                .as_mut()
                .map(|s| s.take_permit(Some(entry), revision));
            let hold = Hold {
                session: head.session,
                token,
                granted_at: time,
                permit,
            };
            let ns_key = (&namespace, &key);
            add_hold(
                entry,
                holds_by_age,
                state,
                ns_key,
                hold,
                &mut self.watch,
                revision,
            );
            self.wait_ends.0.push(WaitEnd {
                session: head.session,
                namespace: namespace.clone(),
                key: key.clone(),
                kind: WaitEndKind::Granted { token, permit },
            });
            granted.push((head.session, token));
        }
        if entry.holders.is_empty() {
            assert!(
                entry.waiters.is_empty(),
                "`{namespace}/{key}` has waiters and no holder"
            );
            occupied.remove();
            if locks.is_empty() && classes.is_empty() && semaphores.is_empty() {
                self.namespaces.remove(&namespace);
            }
        }
        granted
    }

    /// Ends sessions in this one revision: first every wait of every listed session is removed,
    /// then every hold ends (handing keys to the remaining waiters, who are all live), so no key
    /// is granted to a session that ends in the same revision.
    ///
    /// `forced`: the key whose hold is force-released by the request (its event says so).
    pub(crate) fn end_sessions(
        &mut self,
        sessions: &[SessionId],
        cause: ReleaseCause,
        forced: Option<(ForceReleaseId, &str, &str)>,
    ) {
        let mut ended: Vec<(SessionId, Session)> = Vec::with_capacity(sessions.len());
        for id in sessions {
            if let Some(state) = self.sessions.remove(id) {
                if let Some(hash) = state.secret_hash {
                    let indexed = self.sessions_by_secret.remove(&hash);
                    assert_eq!(indexed, Some(*id), "secret index of session {id}");
                }
                ended.push((*id, state));
            }
        }
        let (revision, time) = (self.revision, self.time);
        // Keys whose queue lost a waiter: shared waiters behind a removed exclusive one may be
        // granted now (after every listed session's waits are gone).
        let mut waits_ended: BTreeSet<(Arc<str>, Arc<str>)> = BTreeSet::new();
        for (session, state) in &ended {
            for (namespace, keys) in &state.waits {
                for key in keys {
                    let entry = self
                        .namespaces
                        .get_mut(&**namespace)
                        .and_then(|ns| ns.locks.get_mut(&**key))
                        .expect("a waited-for key is held");
                    let index = entry
                        .waiters
                        .iter()
                        .position(|waiter| waiter.session == *session)
                        .expect("a recorded wait is queued");
                    let waiter = entry.waiters.remove(index).expect("index in range");
                    if let Some(deadline) = waiter.deadline {
                        let indexed = (deadline, *session, namespace.clone(), key.clone());
                        let removed = self.wait_deadlines.remove(&indexed);
                        assert!(
                            removed,
                            "deadline of a waiter of `{namespace}/{key}` not indexed"
                        );
                    }
                    waits_ended.insert((namespace.clone(), key.clone()));
                    self.wait_ends.0.push(WaitEnd {
                        session: *session,
                        namespace: namespace.clone(),
                        key: key.clone(),
                        kind: WaitEndKind::Removed { cause },
                    });
                    let kind = EventKind::WaitRemoved {
                        session: *session,
                        cause,
                    };
                    let identity = &state.identity;
                    emit(
                        &mut self.watch,
                        revision,
                        time,
                        namespace,
                        key,
                        kind,
                        identity,
                    );
                }
            }
        }
        for (namespace, key) in &waits_ended {
            self.grant_from_queue(namespace, key);
        }
        for (session, state) in &ended {
            for (namespace, keys) in &state.holds {
                for key in keys {
                    let end = match forced {
                        Some((request, ns, k)) if ns == &**namespace && k == &**key => {
                            HoldEnd::Forced {
                                request,
                                session_revoked: true,
                            }
                        }
                        _ => HoldEnd::Released(cause),
                    };
                    let identity = Some(&state.identity);
                    let ended = self.end_hold(namespace, key, *session, end, None, identity);
                    assert!(ended.is_ok(), "no token expected");
                }
            }
        }
    }
    /// The class of `namespace/key`.
    pub fn class_of(&self, namespace: &str, key: &str) -> &ClassSpec {
        let classes = self.namespaces.get(namespace).map(|ns| &ns.classes);
        class_of(classes, &self.default_class, key)
    }
}

/// The checks before a session may hold or wait for a key of `class`.
fn admit(
    session: SessionId,
    state: &Session,
    class: &ClassSpec,
    config: &LockConfig,
) -> Result<(), LockError> {
    if state.ttl_ms > class.session_ttl_ms_max {
        return Err(LockError::SessionTtlAboveClassMax {
            ttl_ms: state.ttl_ms,
            class: class.name.clone(),
            max: class.session_ttl_ms_max,
        });
    }
    if state.holds_and_waits >= config.holds_per_session_max {
        return Err(LockError::TooManyHolds {
            session,
            max: config.holds_per_session_max,
        });
    }
    Ok(())
}

/// A session asks again for a key it holds or waits for: in the same mode it is answered what
/// it has; in the other mode it is refused (no upgrade or downgrade: an upgrade that waited for
/// the other readers would deadlock with a second reader upgrading, Curator's known bug).
fn check_same_mode(
    session: SessionId,
    namespace: &str,
    key: &str,
    has: LockMode,
    asked: LockMode,
    holds: bool,
) -> Result<(), LockError> {
    if has == asked {
        return Ok(());
    }
    Err(LockError::ModeChangeNotSupported {
        session,
        namespace: namespace.to_owned(),
        key: key.to_owned(),
        has,
        asked,
        holds,
    })
}

/// Refuses a permit on a key that is no semaphore, and a lock on one that is (so a correctness
/// lock is never silently shared).
fn check_semaphore_mode(
    namespace: &str,
    key: &str,
    mode: LockMode,
    semaphore: Option<&Semaphore>,
) -> Result<(), LockError> {
    match (mode, semaphore) {
        (LockMode::Permit, None) => Err(LockError::NotASemaphore {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
        }),
        (LockMode::Exclusive | LockMode::Shared, Some(semaphore)) => {
            Err(LockError::KeyIsSemaphore {
                namespace: namespace.to_owned(),
                key: key.to_owned(),
                permits: semaphore.permits,
            })
        }
        _ => Ok(()),
    }
}

/// Adds a hold to a held (or just emptied) entry at `revision`, with its event.
#[allow(clippy::too_many_arguments)]
fn add_hold(
    entry: &mut LockEntry,
    holds_by_age: &mut BTreeSet<(Token, Arc<str>, SessionId)>,
    state: &mut Session,
    (namespace, key): (&Arc<str>, &Arc<str>),
    hold: Hold,
    watch: &mut WatchLog,
    revision: Revision,
) {
    let Hold {
        session,
        token,
        permit,
        ..
    } = hold;
    let inserted = holds_by_age.insert((token, key.clone(), session));
    assert!(
        inserted,
        "`{namespace}/{key}` granted twice to {session} at {token}"
    );
    let previous = entry.holders.insert(session, hold);
    assert!(
        previous.is_none(),
        "{session} holds `{namespace}/{key}` twice"
    );
    set_insert(&mut state.holds, namespace, key);
    state.holds_and_waits += 1;
    emit(
        watch,
        revision,
        hold.granted_at,
        namespace,
        key,
        EventKind::Granted {
            session,
            token,
            mode: entry.mode,
            permit,
        },
        &state.identity,
    );
}

/// Grants a free key at `revision` (token = floor = revision); the caller inserts the entry.
fn grant(
    session: SessionId,
    state: &mut Session,
    holds_by_age: &mut BTreeSet<(Token, Arc<str>, SessionId)>,
    ns_key: (&Arc<str>, &Arc<str>),
    (mode, permit): (LockMode, Option<PermitSlot>),
    (revision, time, faults): (Revision, Instant, Faults),
    watch: &mut WatchLog,
) -> (Token, LockEntry) {
    // `Token::at(revision)`, but for the planted bug `Faults::token_wrap`.
    let token = faults.grant_token(revision);
    let mut entry = LockEntry {
        mode,
        holders: BTreeMap::new(),
        waiters: VecDeque::new(),
        // The token's revision: `revision` itself (but for the planted bug `Faults::token_wrap`).
        floor: Revision(token.0),
    };
    let hold = Hold {
        session,
        token,
        granted_at: time,
        permit,
    };
    add_hold(
        &mut entry,
        holds_by_age,
        state,
        ns_key,
        hold,
        watch,
        revision,
    );
    (token, entry)
}

pub(crate) fn class_of<'a>(
    classes: Option<&'a ClassRegistry>,
    default_class: &'a ClassSpec,
    key: &str,
) -> &'a ClassSpec {
    classes
        .and_then(|classes| classes.lookup(key))
        .unwrap_or(default_class)
}

/// 1-based position of `session` among the waiters of `entry`.
pub(crate) fn waiter_position(entry: &LockEntry, session: SessionId) -> Option<u32> {
    entry
        .waiters
        .iter()
        .position(|waiter| waiter.session == session)
        .map(|index| u32::try_from(index + 1).expect("waiters are bounded"))
}
