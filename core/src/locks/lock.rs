//! The lock table: holds, FIFO waiters and floors, and the acquire / release / hand-off rules.
//!
//! A key has an entry only while it is held (an entry always has a holder; waiters queue behind
//! it). When the last hold ends with nobody waiting, the entry is dropped: every later grant is at
//! a later revision, so its token is above every token ever given on the key anyway.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::class::{ClassRegistry, ClassSpec};
use super::command::{AcquireReply, Identity, Remembered, RememberedReply, Reply, RequestTarget};
use super::config::LockConfig;
use super::error::LockError;
use super::ids::{ForceReleaseId, RequestId, Revision, SessionId, Token};
use super::names::{validate_key, validate_namespace};
use super::owner::SessionProof;
use super::session::{check_request, set_insert, set_remove, Session};
use super::wait::{WaitEnd, WaitEndKind, WAIT_TIMEOUT_MS_MAX};
use super::watch::{EventKind, ReleaseCause, WatchLog};
use super::LockStateMachine;
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
    /// (token, key) of every hold of the namespace, so the oldest hold is the first entry.
    /// (Several keys can share a token: one revision may hand over several keys.)
    pub holds_by_age: BTreeSet<(Token, Arc<str>)>,
}

impl NamespaceState {
    pub fn new(name: Arc<str>) -> NamespaceState {
        NamespaceState {
            name,
            classes: ClassRegistry::default(),
            locks: BTreeMap::new(),
            holds_by_age: BTreeSet::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.classes.is_empty()
    }
}

/// A held key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockEntry {
    pub holder: Hold,
    /// FIFO; each waiter's session is live, distinct, and not the holder.
    pub waiters: VecDeque<Waiter>,
    /// Tokens below the floor are no longer valid on this key; the holder's token is at or above
    /// it (equal when the hold was handed over or granted fresh in the floor's revision).
    pub floor: Revision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hold {
    pub session: SessionId,
    pub token: Token,
    /// Log time of the grant.
    pub granted_at: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub session: SessionId,
    /// Log time of queueing.
    pub queued_at: Instant,
    /// Log time after which `ExpireWaits` removes the wait (`None`: never).
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
        wait: Option<Option<u64>>,
    ) -> Result<Reply, LockError> {
        let state = self
            .sessions
            .get(&session)
            .ok_or(LockError::UnknownSession { session })?;
        state.check_proof(session, proof)?;
        let this = ("Acquire", namespace.as_str(), key.as_str(), None);
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
        };
        let reply = self.acquire_new(session, namespace, key, wait)?;
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
            if entry.holder.session == session {
                return Ok(Reply::Acquire(AcquireReply::Granted {
                    token: entry.holder.token,
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
        wait: Option<Option<u64>>,
    ) -> Result<AcquireReply, LockError> {
        let (revision, time) = (self.revision, self.time);
        let state = self.sessions.get_mut(&session).expect("caller checked");
        let key: Arc<str> = Arc::from(key);
        let Some(ns_state) = self.namespaces.get_mut(namespace.as_str()) else {
            // A namespace without classes or holds: the key is free, the class the default.
            admit(session, state, &self.default_class, &self.config)?;
            let namespace: Arc<str> = Arc::from(namespace);
            let mut ns_state = NamespaceState::new(namespace.clone());
            let (token, entry) = grant(
                session,
                state,
                &mut ns_state.holds_by_age,
                &namespace,
                &key,
                revision,
                time,
                &mut self.watch,
            );
            ns_state.locks.insert(key, entry);
            self.namespaces.insert(namespace, ns_state);
            return Ok(AcquireReply::Granted { token });
        };
        let NamespaceState {
            name: namespace,
            classes,
            locks,
            holds_by_age,
        } = ns_state;
        let namespace = namespace.clone();
        let mut occupied = match locks.entry(key.clone()) {
            Entry::Vacant(vacant) => {
                let class = class_of(Some(classes), &self.default_class, &key);
                admit(session, state, class, &self.config)?;
                let (token, entry) = grant(
                    session,
                    state,
                    holds_by_age,
                    &namespace,
                    &key,
                    revision,
                    time,
                    &mut self.watch,
                );
                vacant.insert(entry);
                return Ok(AcquireReply::Granted { token });
            }
            Entry::Occupied(occupied) => occupied,
        };
        let entry = occupied.get_mut();
        if entry.holder.session == session {
            return Ok(AcquireReply::Granted {
                token: entry.holder.token,
            });
        }
        if let Some(position) = waiter_position(entry, session) {
            return Ok(AcquireReply::Queued { position });
        }
        let Some(timeout_ms) = wait else {
            return Ok(AcquireReply::Busy {
                holder: entry.holder.session,
                token: entry.holder.token,
            });
        };
        let class = class_of(Some(classes), &self.default_class, &key);
        admit(session, state, class, &self.config)?;
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
        let state = self
            .sessions
            .get(&session)
            .ok_or(LockError::UnknownSession { session })?;
        state.check_proof(session, proof)?;
        let this = ("Release", namespace.as_str(), key.as_str(), Some(token));
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
        let next = match self.end_hold(&namespace, &shared_key, end, Some(token), None) {
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
            target: Some(RequestTarget { namespace, key }),
        };
        let window = self.config.dedup_window;
        let state = self.sessions.get_mut(&session).expect("checked above");
        state.remember(remembered, window);
        Ok(reply.to_reply())
    }

    /// Ends the hold on `namespace/key` at this revision and hands the key to the first waiter
    /// (granted at this same revision), or drops the entry. The holder's session may already be
    /// gone from the session table (closing, expiry, revocation): `gone` is then its identity,
    /// for the event. Returns the new holder, or, if `expected` is not the holder's token, that
    /// token (and changes nothing).
    pub(crate) fn end_hold(
        &mut self,
        namespace: &str,
        key: &Arc<str>,
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
        let NamespaceState {
            name: _,
            classes,
            locks,
            holds_by_age,
        } = ns_state;
        let Entry::Occupied(mut occupied) = locks.entry(key.clone()) else {
            panic!("ending a hold of `{namespace}/{key}`, which is not held");
        };
        let key = occupied.key().clone();
        let entry = occupied.get_mut();
        let hold = entry.holder;
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
        let removed = holds_by_age.remove(&(hold.token, key.clone()));
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
        let Some(waiter) = entry.waiters.pop_front() else {
            occupied.remove();
            if locks.is_empty() && classes.is_empty() {
                self.namespaces.remove(&namespace);
            }
            return Ok(None);
        };
        if let Some(deadline) = waiter.deadline {
            let indexed = (deadline, waiter.session, namespace.clone(), key.clone());
            let removed = self.wait_deadlines.remove(&indexed);
            assert!(
                removed,
                "deadline of a waiter of `{namespace}/{key}` not indexed"
            );
        }
        let token = Token::at(revision);
        entry.holder = Hold {
            session: waiter.session,
            token,
            granted_at: time,
        };
        entry.floor = revision;
        let inserted = holds_by_age.insert((token, key.clone()));
        assert!(inserted, "`{namespace}/{key}` granted twice at {token}");
        let state = self.sessions.get_mut(&waiter.session).unwrap_or_else(|| {
            panic!(
                "waiter {} of `{namespace}/{key}` has no session",
                waiter.session
            )
        });
        set_remove(&mut state.waits, &namespace, &key);
        set_insert(&mut state.holds, &namespace, &key);
        let session = waiter.session;
        emit(
            &mut self.watch,
            revision,
            time,
            &namespace,
            &key,
            EventKind::Granted { session, token },
            &state.identity,
        );
        self.wait_ends.0.push(WaitEnd {
            session,
            namespace,
            key,
            kind: WaitEndKind::Granted { token },
        });
        Ok(Some((session, token)))
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
        for (_, state) in &ended {
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
                    let ended = self.end_hold(namespace, key, end, None, Some(&state.identity));
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

/// Grants a free key at `revision` (token = floor = revision); the caller inserts the entry.
#[allow(clippy::too_many_arguments)]
fn grant(
    session: SessionId,
    state: &mut Session,
    holds_by_age: &mut BTreeSet<(Token, Arc<str>)>,
    namespace: &Arc<str>,
    key: &Arc<str>,
    revision: Revision,
    time: Instant,
    watch: &mut WatchLog,
) -> (Token, LockEntry) {
    #[cfg(not(madsim))]
    let token = Token::at(revision);
    // The simulation's deliberately broken build may wrap tokens (`node::fault_injection`).
    #[cfg(madsim)]
    let token = crate::node::fault_injection::grant_token(revision);
    set_insert(&mut state.holds, namespace, key);
    state.holds_and_waits += 1;
    emit(
        watch,
        revision,
        time,
        namespace,
        key,
        EventKind::Granted { session, token },
        &state.identity,
    );
    let inserted = holds_by_age.insert((token, key.clone()));
    assert!(inserted, "`{key}` granted twice at {token}");
    let hold = Hold {
        session,
        token,
        granted_at: time,
    };
    (
        token,
        LockEntry {
            holder: hold,
            waiters: VecDeque::new(),
            // The token's revision: `revision` itself (but for the simulation's token fault).
            floor: Revision(token.0),
        },
    )
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
