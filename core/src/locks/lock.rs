//! The lock table: holds, FIFO waiters and floors, and the acquire / release / hand-off rules.
//!
//! A key has an entry only while it is held (an entry always has a holder; waiters queue behind
//! it). When the last hold ends with nobody waiting, the entry is dropped: every later grant is at
//! a later revision, so its token is above every token ever given on the key anyway.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use super::class::{ClassRegistry, ClassSpec};
use super::command::{AcquireReply, Reply};
use super::error::LockError;
use super::ids::{ForceReleaseId, RequestId, Revision, SessionId, Token};
use super::names::{validate_key, validate_namespace};
use super::session::{set_insert, set_remove, Dedup, Session};
use super::watch::{EventKind, ReleaseCause, WatchLog};
use super::LockStateMachine;
use crate::time::Instant;

/// One namespace: its classes, its held keys and an age index of its holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NamespaceState {
    pub classes: ClassRegistry,
    /// Only held keys have an entry. Key names are shared (`Arc<str>`) with the sessions' hold
    /// and wait sets, the age index and the watch events: one allocation per held key.
    pub locks: BTreeMap<Arc<str>, LockEntry>,
    /// (token, key) of every hold of the namespace, so the oldest hold is the first entry.
    /// (Several keys can share a token: one revision may hand over several keys.)
    pub holds_by_age: BTreeSet<(Token, Arc<str>)>,
}

impl NamespaceState {
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
) {
    watch.push(revision, time, namespace, key, kind);
}

/// The stored (shared) name and the value for `name`, mutably.
pub(crate) fn named_mut<'a, V>(
    map: &'a mut BTreeMap<Arc<str>, V>,
    name: &str,
) -> Option<(&'a Arc<str>, &'a mut V)> {
    map.range_mut::<str, _>((Bound::Included(name), Bound::Included(name)))
        .next()
}

impl LockStateMachine {
    pub(crate) fn apply_acquire(
        &mut self,
        session: SessionId,
        request: RequestId,
        namespace: String,
        key: String,
        wait: bool,
    ) -> Result<Reply, LockError> {
        let state = self
            .sessions
            .get(&session)
            .ok_or(LockError::UnknownSession { session })?;
        match state.dedup(request) {
            Dedup::Retry(reply) => {
                return Ok(self.refresh_acquire(session, &namespace, &key, reply))
            }
            Dedup::TooOld { newest } => {
                return Err(LockError::RequestTooOld {
                    session,
                    request,
                    newest,
                })
            }
            Dedup::New => {}
        }
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        let reply = self.acquire_new(session, namespace, key, wait)?;
        let window = self.config.dedup_window;
        let state = self.sessions.get_mut(&session).expect("checked above");
        state.remember(request, Reply::Acquire(reply), window);
        Ok(Reply::Acquire(reply))
    }

    /// A retried acquire answers what is true now if the session still holds or waits for the
    /// key (a queued request may have been granted since), else the reply it got then.
    fn refresh_acquire(
        &self,
        session: SessionId,
        namespace: &str,
        key: &str,
        cached: Reply,
    ) -> Reply {
        let entry = self
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.locks.get(key));
        if let Some(entry) = entry {
            if entry.holder.session == session {
                return Reply::Acquire(AcquireReply::Granted {
                    token: entry.holder.token,
                });
            }
            if let Some(position) = waiter_position(entry, session) {
                return Reply::Acquire(AcquireReply::Queued { position });
            }
        }
        cached
    }

    fn acquire_new(
        &mut self,
        session: SessionId,
        namespace: String,
        key: String,
        wait: bool,
    ) -> Result<AcquireReply, LockError> {
        let state = &self.sessions[&session];
        let ns_state = self.namespaces.get(namespace.as_str());
        let entry = ns_state.and_then(|ns| ns.locks.get(key.as_str()));
        if let Some(entry) = entry {
            if entry.holder.session == session {
                return Ok(AcquireReply::Granted {
                    token: entry.holder.token,
                });
            }
            if let Some(position) = waiter_position(entry, session) {
                return Ok(AcquireReply::Queued { position });
            }
            if !wait {
                return Ok(AcquireReply::Busy {
                    holder: entry.holder.session,
                    token: entry.holder.token,
                });
            }
        }
        let class = class_of(ns_state.map(|ns| &ns.classes), &self.default_class, &key);
        if state.ttl_ms > class.session_ttl_ms_max {
            return Err(LockError::SessionTtlAboveClassMax {
                ttl_ms: state.ttl_ms,
                class: class.name.clone(),
                max: class.session_ttl_ms_max,
            });
        }
        if state.holds_and_waits >= self.config.holds_per_session_max {
            return Err(LockError::TooManyHolds {
                session,
                max: self.config.holds_per_session_max,
            });
        }
        match entry {
            None => Ok(self.grant_fresh(session, namespace, key)),
            Some(entry) => {
                if entry.waiters.len() >= self.config.waiters_per_key_max {
                    return Err(LockError::TooManyWaiters {
                        namespace,
                        key,
                        max: self.config.waiters_per_key_max,
                    });
                }
                Ok(self.enqueue(session, &namespace, &key))
            }
        }
    }

    fn grant_fresh(&mut self, session: SessionId, namespace: String, key: String) -> AcquireReply {
        let token = Token::at(self.revision);
        let hold = Hold {
            session,
            token,
            granted_at: self.time,
        };
        let namespace: Arc<str> = match self.namespaces.get_key_value(namespace.as_str()) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(namespace),
        };
        let key: Arc<str> = Arc::from(key);
        let state = self.sessions.get_mut(&session).expect("caller checked");
        set_insert(&mut state.holds, &namespace, &key);
        state.holds_and_waits += 1;
        emit(
            &mut self.watch,
            self.revision,
            self.time,
            &namespace,
            &key,
            EventKind::Granted { session, token },
        );
        let ns_state = self.namespaces.entry(namespace).or_default();
        let inserted = ns_state.holds_by_age.insert((token, key.clone()));
        assert!(inserted, "`{key}` granted twice at {token}");
        let entry = LockEntry {
            holder: hold,
            waiters: VecDeque::new(),
            floor: self.revision,
        };
        let previous = ns_state.locks.insert(key, entry);
        assert!(previous.is_none(), "fresh grant of a held key");
        AcquireReply::Granted { token }
    }

    fn enqueue(&mut self, session: SessionId, namespace: &str, key: &str) -> AcquireReply {
        let (namespace, ns_state) =
            named_mut(&mut self.namespaces, namespace).expect("caller saw the namespace");
        let (key, entry) = named_mut(&mut ns_state.locks, key).expect("caller saw the entry");
        let (namespace, key) = (namespace.clone(), key.clone());
        entry.waiters.push_back(Waiter {
            session,
            queued_at: self.time,
        });
        let position = u32::try_from(entry.waiters.len()).expect("waiters are bounded");
        let state = self.sessions.get_mut(&session).expect("caller checked");
        set_insert(&mut state.waits, &namespace, &key);
        state.holds_and_waits += 1;
        emit(
            &mut self.watch,
            self.revision,
            self.time,
            &namespace,
            &key,
            EventKind::Queued { session, position },
        );
        AcquireReply::Queued { position }
    }

    pub(crate) fn apply_release(
        &mut self,
        session: SessionId,
        request: RequestId,
        namespace: String,
        key: String,
        token: Token,
    ) -> Result<Reply, LockError> {
        let state = self
            .sessions
            .get(&session)
            .ok_or(LockError::UnknownSession { session })?;
        match state.dedup(request) {
            Dedup::Retry(reply) => return Ok(reply),
            Dedup::TooOld { newest } => {
                return Err(LockError::RequestTooOld {
                    session,
                    request,
                    newest,
                })
            }
            Dedup::New => {}
        }
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        let entry = self
            .namespaces
            .get(namespace.as_str())
            .and_then(|ns| ns.locks.get(key.as_str()))
            .filter(|entry| entry.holder.session == session);
        let Some(entry) = entry else {
            return Err(LockError::NotHolder {
                namespace,
                key,
                session,
            });
        };
        if entry.holder.token != token {
            return Err(LockError::WrongToken {
                namespace,
                key,
                given: token,
                current: entry.holder.token,
            });
        }
        let next = self.end_hold(&namespace, &key, HoldEnd::Released(ReleaseCause::Released));
        let reply = Reply::Released { token, next };
        let window = self.config.dedup_window;
        let state = self.sessions.get_mut(&session).expect("checked above");
        state.remember(request, reply.clone(), window);
        Ok(reply)
    }

    /// Ends the hold on `namespace/key` at this revision and hands the key to the first waiter
    /// (granted at this same revision), or drops the entry. The holder's session may already be
    /// gone from the session table (closing, expiry, revocation). Returns the new holder.
    pub(crate) fn end_hold(
        &mut self,
        namespace: &str,
        key: &str,
        end: HoldEnd,
    ) -> Option<(SessionId, Token)> {
        let (revision, time) = (self.revision, self.time);
        let (namespace, ns_state) =
            named_mut(&mut self.namespaces, namespace).expect("ending a hold in a known namespace");
        let namespace = namespace.clone();
        let (key, entry) =
            named_mut(&mut ns_state.locks, key).expect("ending a hold of a held key");
        let key = key.clone();
        let hold = entry.holder;
        // A hold never ends in the revision that granted it: so the next token on this key (this
        // revision) is strictly above the ended one, and tokens rise strictly per key.
        assert!(
            hold.token.0 < revision.0,
            "hold of `{namespace}/{key}` with {} ends at {revision}",
            hold.token
        );
        let removed = ns_state.holds_by_age.remove(&(hold.token, key.clone()));
        assert!(removed, "hold {} missing from the age index", hold.token);
        if let Some(state) = self.sessions.get_mut(&hold.session) {
            set_remove(&mut state.holds, &namespace, &key);
            state.holds_and_waits -= 1;
        }
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
        emit(&mut self.watch, revision, time, &namespace, &key, kind);
        let Some(waiter) = entry.waiters.pop_front() else {
            ns_state.locks.remove(&key);
            if ns_state.is_empty() {
                self.namespaces.remove(&namespace);
            }
            return None;
        };
        let token = Token::at(revision);
        entry.holder = Hold {
            session: waiter.session,
            token,
            granted_at: time,
        };
        entry.floor = revision;
        let inserted = ns_state.holds_by_age.insert((token, key.clone()));
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
        );
        Some((session, token))
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
                    let before = entry.waiters.len();
                    entry.waiters.retain(|waiter| waiter.session != *session);
                    assert_eq!(
                        entry.waiters.len() + 1,
                        before,
                        "session waits once per key"
                    );
                    let kind = EventKind::WaitRemoved {
                        session: *session,
                        cause,
                    };
                    emit(&mut self.watch, revision, time, namespace, key, kind);
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
                    self.end_hold(namespace, key, end);
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
