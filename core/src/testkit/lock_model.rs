//! A plain, obviously-correct model of the lock state machine's sessions (and who owns them:
//! secret and principal), holds, FIFO queues, semaphores (permits, slots and slot floors) and
//! request dedup (ids bound to their request),
//! for model-based tests (`core/tests/locks_model.rs`, proptest) and the
//! `lock_commands` fuzzer: the state machine must give the same answer as the model to every
//! command, and hold the same holders and queues.

use std::collections::BTreeMap;

use crate::locks::{
    AcquireReply, Actor, Command, Identity, LockConfig, LockError, LockMode, LockStateMachine,
    NameError, NotYours, Outcome, PermitSlot, Reply, RequestId, Role, SecretHash, SessionId,
    SessionProof, Token, Wait, PERMITS_MAX, UNAUTHENTICATED_PRINCIPAL, WAIT_TIMEOUT_MS_MAX,
};

pub const NAMESPACES: [&str; 3] = ["a", "b", "Bad"];
pub const KEYS: [&str; 3] = ["k1", "k2", "k/3"];
pub const TTLS: [Option<u64>; 5] = [None, Some(999), Some(1_000), Some(60_000), Some(300_001)];
/// Wait deadlines an `Acquire` asks for: none, out of bounds (0 and above the maximum), and
/// a few steps of log time (the tests advance log time 1 ms per command).
pub const WAIT_TIMEOUTS: [Option<u64>; 5] = [
    None,
    Some(0),
    Some(3),
    Some(12),
    Some(WAIT_TIMEOUT_MS_MAX + 1),
];
/// Secret hashes sessions are created with: few, so that retried creations and secrets reused
/// by another identity happen; `None` makes a legacy session.
pub const SECRETS: [Option<SecretHash>; 5] = [
    Some(SecretHash([1; 32])),
    Some(SecretHash([2; 32])),
    Some(SecretHash([3; 32])),
    Some(SecretHash([4; 32])),
    None,
];
/// The modes an `Acquire` asks for, chosen by `Op::Acquire::mode`.
pub const MODES: [LockMode; 3] = [LockMode::Exclusive, LockMode::Shared, LockMode::Permit];
/// The N a `SetSemaphore` sets: removal, a few small ones, and one out of bounds.
pub const PERMITS: [u32; 5] = [0, 1, 2, 3, PERMITS_MAX + 1];
/// Principals sessions are created by (the last one binds the session to its secret only).
pub const PRINCIPALS: [&str; 3] = ["p", "q", UNAUTHENTICATED_PRINCIPAL];
/// A secret no session has.
const WRONG_SECRET: SecretHash = SecretHash([0xee; 32]);
/// What a command presents for its session, chosen by `Op::*::proof` modulo 6.
const PROOF_RIGHT: [usize; 3] = [0, 1, 2];
const PROOF_WRONG_SECRET: usize = 3;
const PROOF_OTHER_PRINCIPAL: usize = 4;

/// The small bounds the model is written for.
pub fn config() -> LockConfig {
    LockConfig {
        sessions_max: 4,
        holds_per_session_max: 3,
        waiters_per_key_max: 2,
        dedup_window: 2,
        ..LockConfig::default()
    }
}

/// One generated step; every index is taken modulo its vocabulary (sessions: 8 slots, one
/// past the known sessions naming a session that never existed).
#[derive(Clone, Debug)]
pub enum Op {
    Create {
        ttl: usize,
        secret: usize,
        principal: usize,
    },
    Close {
        session: usize,
        proof: usize,
    },
    Expire {
        sessions: Vec<usize>,
    },
    Acquire {
        session: usize,
        ns: usize,
        key: usize,
        wait: bool,
        /// Index into [`WAIT_TIMEOUTS`].
        timeout: usize,
        proof: usize,
        /// Index into [`MODES`].
        mode: usize,
    },
    /// An operator's `SetSemaphore` (`admin`: with the class-admin role, else refused).
    SetSemaphore {
        ns: usize,
        key: usize,
        /// Index into [`PERMITS`].
        permits: usize,
        admin: bool,
    },
    /// `CancelWait` of a session's wait (or of one it does not have).
    Cancel {
        session: usize,
        ns: usize,
        key: usize,
        proof: usize,
    },
    /// The leader's `ExpireWaits`.
    ExpireWaits,
    Release {
        session: usize,
        ns: usize,
        key: usize,
        right_token: bool,
        proof: usize,
    },
    /// Re-sends a session's earlier request with its request id (`back` requests ago).
    Retry {
        session: usize,
        back: usize,
    },
    /// Sends a session's earlier request (`back` requests ago) with its request id but for
    /// another key: a reused id, never a retry.
    Reuse {
        session: usize,
        back: usize,
        key: usize,
    },
}

pub type LockKey = (String, String);

#[derive(Clone, Debug)]
struct ModelSession {
    secret: Option<SecretHash>,
    principal: String,
    ttl_ms: u64,
    newest: Option<u64>,
    /// The last `dedup_window` requests answered without error, with their reply.
    window: Vec<(Sent, Reply)>,
}

/// A request as the model binds its id: id, kind, namespace, key, token (releases), mode
/// (acquires).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sent {
    request: u64,
    kind: &'static str,
    namespace: String,
    key: String,
    token: Option<Token>,
    mode: Option<LockMode>,
}

impl Sent {
    fn describe(&self) -> String {
        let (kind, ns, key) = (self.kind, &self.namespace, &self.key);
        match (self.token, self.mode) {
            (Some(token), _) => format!("{kind} {ns}/{key} with token {}", token.0),
            (None, Some(mode)) if mode != LockMode::Exclusive => {
                format!("{kind} {ns}/{key} {mode}")
            }
            (None, _) => format!("{kind} {ns}/{key}"),
        }
    }
}

/// A declared semaphore in the model.
#[derive(Clone, Debug)]
struct Sem {
    permits: u32,
    /// slot -> revision of its latest grant.
    floors: BTreeMap<u32, u64>,
}

/// A held key in the model.
#[derive(Clone, Debug)]
struct Held {
    mode: LockMode,
    /// session -> token.
    holds: BTreeMap<u64, u64>,
    /// session -> permit slot (semaphore keys only).
    permit_slots: BTreeMap<u64, u32>,
    floor: u64,
}

impl Held {
    /// (session, token) of the oldest hold: lowest token, then lowest session.
    fn oldest(&self) -> (u64, u64) {
        let (s, t) = self
            .holds
            .iter()
            .min_by_key(|(s, t)| (**t, **s))
            .expect("a held key has a holder");
        (*s, *t)
    }
}

/// The model: sessions, one exclusive holder or several shared holders per key, a FIFO queue
/// per key. Written for clarity only.
#[derive(Debug, Default)]
pub struct Model {
    pub revision: u64,
    /// Log time (ms) of the next command: the caller sets it to the stamp it applies with.
    pub time_ms: u64,
    sessions: BTreeMap<u64, ModelSession>,
    holders: BTreeMap<LockKey, Held>,
    /// (session, mode) in queue order.
    queues: BTreeMap<LockKey, Vec<(u64, LockMode)>>,
    /// (key, waiting session) -> the wait's deadline (log time, ms), for waits that have one.
    deadlines: BTreeMap<(LockKey, u64), u64>,
    semaphores: BTreeMap<LockKey, Sem>,
}

impl Model {
    fn hold_count(&self, session: u64) -> usize {
        self.holders
            .values()
            .filter(|held| held.holds.contains_key(&session))
            .count()
    }

    fn count(&self, session: u64) -> usize {
        self.hold_count(session)
            + self
                .queues
                .values()
                .map(|q| q.iter().filter(|(s, _)| *s == session).count())
                .sum::<usize>()
    }

    /// `session`'s token on `key`, if it holds it.
    fn token_of(&self, key: &LockKey, session: u64) -> Option<u64> {
        self.holders.get(key)?.holds.get(&session).copied()
    }

    /// Grants what the head of the queue may have: the first waiter of a free key (with the
    /// shared run behind a shared one), or the shared run at the head of a shared key. A head
    /// waiter whose deadline is at or before the log time is removed first, never granted
    /// (cluster version 2, the state machine's version).
    fn grant_queue(&mut self, key: &LockKey) -> Option<(SessionId, Token)> {
        let mut first = None;
        loop {
            let queue = self.queues.entry(key.clone()).or_default();
            let Some(&(next, mode)) = queue.first() else {
                break;
            };
            let wait = (key.clone(), next);
            if self
                .deadlines
                .get(&wait)
                .is_some_and(|at| *at <= self.time_ms)
            {
                queue.remove(0);
                self.deadlines.remove(&wait);
                continue;
            }
            if let Some(sem) = self.semaphores.get_mut(key) {
                let revision = self.revision;
                let held = self.holders.entry(key.clone()).or_insert_with(|| Held {
                    mode,
                    holds: BTreeMap::new(),
                    permit_slots: BTreeMap::new(),
                    floor: revision,
                });
                if held.holds.len() >= sem.permits as usize {
                    break;
                }
                let permit = (0..sem.permits)
                    .find(|permit| !held.permit_slots.values().any(|s| s == permit))
                    .expect("fewer holders than permits");
                held.holds.insert(next, revision);
                held.permit_slots.insert(next, permit);
                sem.floors.insert(permit, revision);
            } else {
                match self.holders.get_mut(key) {
                    None => {
                        let holds = BTreeMap::from([(next, self.revision)]);
                        let floor = self.revision;
                        let permit_slots = BTreeMap::new();
                        let held = Held {
                            mode,
                            holds,
                            permit_slots,
                            floor,
                        };
                        self.holders.insert(key.clone(), held);
                    }
                    Some(held) if held.mode == LockMode::Shared && mode == LockMode::Shared => {
                        held.holds.insert(next, self.revision);
                    }
                    Some(_) => break,
                }
            }
            queue.remove(0);
            self.deadlines.remove(&(key.clone(), next));
            first.get_or_insert((SessionId(next), Token(self.revision)));
        }
        first
    }

    fn grant_all_queues(&mut self) {
        let keys: Vec<LockKey> = self.queues.keys().cloned().collect();
        for key in keys {
            self.grant_queue(&key);
        }
    }

    fn release(&mut self, key: &LockKey, session: u64) -> Option<(SessionId, Token)> {
        let held = self.holders.get_mut(key).expect("releasing a held key");
        held.holds.remove(&session);
        held.permit_slots.remove(&session);
        if held.holds.is_empty() {
            self.holders.remove(key);
        }
        self.grant_queue(key)
    }

    fn end(&mut self, ended: &[u64]) {
        for id in ended {
            self.sessions.remove(id);
        }
        // Only the keys whose queue lost a waiter are handed on (a hand-off may remove a due
        // wait at the head of its queue: a key nobody touched keeps its waits as they are).
        let mut lost_waiter = Vec::new();
        for (key, queue) in self.queues.iter_mut() {
            let before = queue.len();
            queue.retain(|(s, _)| !ended.contains(s));
            if queue.len() < before {
                lost_waiter.push(key.clone());
            }
        }
        self.deadlines.retain(|(_, s), _| !ended.contains(s));
        for key in &lost_waiter {
            self.grant_queue(key);
        }
        let held: Vec<(LockKey, u64)> = self
            .holders
            .iter()
            .flat_map(|(k, held)| held.holds.keys().map(move |s| (k.clone(), *s)))
            .filter(|(_, s)| ended.contains(s))
            .collect();
        for (key, session) in held {
            self.release(&key, session);
        }
    }

    fn remember(&mut self, session: u64, sent: Sent, reply: &Reply) {
        let state = self.sessions.get_mut(&session).unwrap();
        state.newest = Some(sent.request);
        state.window.push((sent, reply.clone()));
        if state.window.len() > config().dedup_window {
            state.window.remove(0);
        }
    }

    /// `Some(answer)` if the request id is a retry, reused by another request, or too old.
    fn dedup(&self, session: u64, sent: &Sent) -> Option<Result<Reply, LockError>> {
        let state = &self.sessions[&session];
        let newest = state.newest?;
        if sent.request > newest {
            return None;
        }
        Some(
            match state.window.iter().find(|(r, _)| r.request == sent.request) {
                Some((first, reply)) if first == sent => Ok(reply.clone()),
                Some((first, _)) => Err(LockError::RequestIdReused {
                    session: SessionId(session),
                    request: RequestId(sent.request),
                    was: first.describe(),
                    this: sent.describe(),
                }),
                None => Err(LockError::RequestTooOld {
                    session: SessionId(session),
                    request: RequestId(sent.request),
                    newest: RequestId(newest),
                }),
            },
        )
    }

    /// The session must exist and the proof must be its owner's.
    fn check(&self, session: u64, proof: &SessionProof) -> Result<(), LockError> {
        let Some(state) = self.sessions.get(&session) else {
            return Err(LockError::UnknownSession {
                session: SessionId(session),
            });
        };
        let why = match (state.secret, proof.secret_hash) {
            (None, None) => return Ok(()),
            (None, Some(_)) => NotYours::LegacySession,
            (Some(_), None) => NotYours::SecretMissing,
            (Some(ours), Some(theirs)) if ours != theirs => NotYours::WrongSecret,
            _ if state.principal != UNAUTHENTICATED_PRINCIPAL
                && proof.principal != state.principal =>
            {
                NotYours::OtherPrincipal {
                    owner: state.principal.clone(),
                    caller: proof.principal.clone(),
                }
            }
            _ => return Ok(()),
        };
        Err(LockError::SessionNotYours {
            session: SessionId(session),
            why,
        })
    }

    pub fn apply(&mut self, command: &Command) -> Outcome {
        self.revision += 1;
        let cfg = config();
        match command {
            Command::CreateSession {
                ttl_ms,
                identity,
                secret_hash,
            } => {
                let ttl = ttl_ms.unwrap_or(cfg.session_ttl_ms_default);
                if ttl < cfg.session_ttl_ms_min || ttl > cfg.session_ttl_ms_max {
                    return Err(LockError::SessionTtlOutOfBounds {
                        ttl_ms: ttl,
                        min: cfg.session_ttl_ms_min,
                        max: cfg.session_ttl_ms_max,
                    });
                }
                let same_secret = self
                    .sessions
                    .iter()
                    .find(|(_, s)| s.secret.is_some() && s.secret == *secret_hash);
                if let Some((id, existing)) = same_secret {
                    if existing.principal != identity.principal {
                        return Err(LockError::SessionSecretInUse {
                            session: SessionId(*id),
                        });
                    }
                    return Ok(Reply::SessionCreated {
                        session: SessionId(*id),
                        ttl_ms: existing.ttl_ms,
                    });
                }
                if self.sessions.len() >= cfg.sessions_max {
                    return Err(LockError::TooManySessions {
                        max: cfg.sessions_max,
                    });
                }
                let session = ModelSession {
                    secret: *secret_hash,
                    principal: identity.principal.clone(),
                    ttl_ms: ttl,
                    newest: None,
                    window: Vec::new(),
                };
                self.sessions.insert(self.revision, session);
                Ok(Reply::SessionCreated {
                    session: SessionId(self.revision),
                    ttl_ms: ttl,
                })
            }
            Command::CloseSession { session, proof } => {
                self.check(session.0, proof)?;
                let holds = self.hold_count(session.0);
                let waits = self.count(session.0) - holds;
                self.end(&[session.0]);
                Ok(Reply::SessionClosed {
                    holds_released: holds,
                    waits_removed: waits,
                })
            }
            Command::ExpireSessions { sessions } => {
                let mut ids: Vec<u64> = sessions
                    .iter()
                    .map(|s| s.0)
                    .filter(|s| self.sessions.contains_key(s))
                    .collect();
                ids.sort();
                ids.dedup();
                self.end(&ids);
                Ok(Reply::SessionsExpired {
                    expired: ids.into_iter().map(SessionId).collect(),
                })
            }
            Command::Acquire {
                session,
                proof,
                request,
                namespace,
                key,
                mode,
                wait,
            } => {
                self.check(session.0, proof)?;
                let sent = Sent {
                    request: request.0,
                    kind: "Acquire",
                    namespace: namespace.clone(),
                    key: key.clone(),
                    token: None,
                    mode: Some(*mode),
                };
                self.acquire(session.0, sent, *mode, wait.map(|w| w.timeout_ms))
            }
            Command::CancelWait {
                session,
                proof,
                namespace,
                key,
            } => {
                self.check(session.0, proof)?;
                if let Some(error) = bad_namespace(namespace) {
                    return Err(error);
                }
                let k = (namespace.clone(), key.clone());
                if let Some(token) = self.token_of(&k, session.0) {
                    return Ok(Reply::WaitCancelled {
                        removed: false,
                        held: Some(Token(token)),
                    });
                }
                let queue = self.queues.entry(k.clone()).or_default();
                let removed = queue.iter().any(|(s, _)| *s == session.0);
                queue.retain(|(s, _)| *s != session.0);
                self.deadlines.remove(&(k.clone(), session.0));
                // A cancel that removed nothing hands nothing on.
                if removed {
                    self.grant_queue(&k);
                }
                Ok(Reply::WaitCancelled {
                    removed,
                    held: None,
                })
            }
            Command::ExpireWaits => {
                let due: Vec<(LockKey, u64)> = self
                    .deadlines
                    .iter()
                    .filter(|(_, at)| **at <= self.time_ms)
                    .map(|(wait, _)| wait.clone())
                    .collect();
                for (k, s) in &due {
                    self.deadlines.remove(&(k.clone(), *s));
                    self.queues.get_mut(k).unwrap().retain(|(w, _)| w != s);
                }
                self.grant_all_queues();
                Ok(Reply::WaitsExpired { removed: due.len() })
            }
            Command::Release {
                session,
                proof,
                request,
                namespace,
                key,
                token,
            } => {
                self.check(session.0, proof)?;
                let sent = Sent {
                    request: request.0,
                    kind: "Release",
                    namespace: namespace.clone(),
                    key: key.clone(),
                    token: Some(*token),
                    mode: None,
                };
                self.release_cmd(session.0, sent)
            }
            Command::SetSemaphore {
                actor,
                namespace,
                key,
                permits,
                ..
            } => self.set_semaphore(actor, namespace, key, *permits),
            other => panic!("the model does not cover {other:?}"),
        }
    }

    /// `wait`: `Some(deadline)` to queue if held.
    fn acquire(
        &mut self,
        s: u64,
        sent: Sent,
        mode: LockMode,
        wait: Option<Option<u64>>,
    ) -> Outcome {
        let (ns, key) = (sent.namespace.as_str(), sent.key.as_str());
        let k = (ns.to_owned(), key.to_owned());
        // What the session has of the key: (holds it, mode, reply).
        let current = |model: &Model| -> Option<(bool, LockMode, AcquireReply)> {
            if let Some(held) = model.holders.get(&k) {
                if let Some(token) = held.holds.get(&s) {
                    let reply = AcquireReply::Granted {
                        token: Token(*token),
                        permit: held.permit_slots.get(&s).copied().map(PermitSlot),
                    };
                    return Some((true, held.mode, reply));
                }
            }
            let queue = model.queues.get(&k)?;
            let index = queue.iter().position(|(w, _)| *w == s)?;
            let reply = AcquireReply::Queued {
                position: index as u32 + 1,
            };
            Some((false, queue[index].1, reply))
        };
        if let Some(answer) = self.dedup(s, &sent) {
            let cached = answer?;
            return match (current(self), cached) {
                (Some((_, _, now)), _) => Ok(Reply::Acquire(now)),
                // The wait this request queued is gone.
                (None, Reply::Acquire(AcquireReply::Queued { .. })) => Err(LockError::WaitEnded {
                    session: SessionId(s),
                    namespace: ns.to_owned(),
                    key: key.to_owned(),
                }),
                (None, cached) => Ok(cached),
            };
        }
        if let Some(error) = bad_namespace(ns) {
            return Err(error);
        }
        if let Some(Some(given)) = wait {
            if given == 0 || given > WAIT_TIMEOUT_MS_MAX {
                return Err(LockError::WaitTimeoutOutOfBounds {
                    given,
                    max: WAIT_TIMEOUT_MS_MAX,
                });
            }
        }
        match (mode, self.semaphores.get(&k)) {
            (LockMode::Permit, None) => {
                return Err(LockError::NotASemaphore {
                    namespace: ns.to_owned(),
                    key: key.to_owned(),
                })
            }
            (LockMode::Exclusive | LockMode::Shared, Some(sem)) => {
                return Err(LockError::KeyIsSemaphore {
                    namespace: ns.to_owned(),
                    key: key.to_owned(),
                    permits: sem.permits,
                })
            }
            _ => {}
        }
        let cfg = config();
        let queue_len = self.queues.get(&k).map_or(0, Vec::len);
        let permits = self.semaphores.get(&k).map(|sem| sem.permits as usize);
        let joins = |held: &Held| match permits {
            Some(permits) => held.holds.len() < permits && queue_len == 0,
            None => mode == LockMode::Shared && held.mode == LockMode::Shared && queue_len == 0,
        };
        let reply = if let Some((holds, has, reply)) = current(self) {
            if has != mode {
                return Err(LockError::ModeChangeNotSupported {
                    session: SessionId(s),
                    namespace: ns.to_owned(),
                    key: key.to_owned(),
                    has,
                    asked: mode,
                    holds,
                });
            }
            reply
        } else if let (Some(held), None) = (self.holders.get(&k).filter(|h| !joins(h)), wait) {
            let (holder, token) = held.oldest();
            AcquireReply::Busy {
                holder: SessionId(holder),
                token: Token(token),
            }
        } else if self.count(s) >= cfg.holds_per_session_max {
            return Err(LockError::TooManyHolds {
                session: SessionId(s),
                max: cfg.holds_per_session_max,
            });
        } else if !self.holders.contains_key(&k) || joins(&self.holders[&k]) {
            let revision = self.revision;
            let held = self.holders.entry(k.clone()).or_insert_with(|| Held {
                mode,
                holds: BTreeMap::new(),
                permit_slots: BTreeMap::new(),
                floor: revision,
            });
            held.holds.insert(s, revision);
            let permit = self.semaphores.get_mut(&k).map(|sem| {
                let permit = (0..sem.permits)
                    .find(|permit| !held.permit_slots.values().any(|t| t == permit))
                    .expect("a permit is free");
                sem.floors.insert(permit, revision);
                permit
            });
            if let Some(permit) = permit {
                held.permit_slots.insert(s, permit);
            }
            AcquireReply::Granted {
                token: Token(revision),
                permit: permit.map(PermitSlot),
            }
        } else {
            let queue = self.queues.entry(k.clone()).or_default();
            if queue.len() >= cfg.waiters_per_key_max {
                return Err(LockError::TooManyWaiters {
                    namespace: ns.to_owned(),
                    key: key.to_owned(),
                    max: cfg.waiters_per_key_max,
                });
            }
            queue.push((s, mode));
            if let Some(Some(timeout)) = wait {
                self.deadlines
                    .insert((k.clone(), s), self.time_ms + timeout);
            }
            AcquireReply::Queued {
                position: queue.len() as u32,
            }
        };
        self.remember(s, sent, &Reply::Acquire(reply));
        Ok(Reply::Acquire(reply))
    }

    fn set_semaphore(&mut self, actor: &Actor, ns: &str, key: &str, permits: u32) -> Outcome {
        if !actor.roles.contains(&Role::ClassAdmin) {
            return Err(LockError::MissingRole {
                principal: actor.principal.clone(),
                action: "declare semaphores",
                needed: "class-admin",
            });
        }
        if let Some(error) = bad_namespace(ns) {
            return Err(error);
        }
        if permits > PERMITS_MAX {
            return Err(LockError::PermitsOutOfBounds {
                given: permits,
                max: PERMITS_MAX,
            });
        }
        let k = (ns.to_owned(), key.to_owned());
        let previous = self.semaphores.get(&k).map_or(0, |sem| sem.permits);
        let reply = Ok(Reply::SemaphoreSet {
            previous_permits: previous,
        });
        if previous == permits {
            return reply;
        }
        let holders = self.holders.get(&k).map_or(0, |held| held.holds.len());
        let waiters = self.queues.get(&k).map_or(0, Vec::len);
        if holders + waiters > 0 && previous == 0 {
            return Err(LockError::KeyHeldAsLock {
                namespace: ns.to_owned(),
                key: key.to_owned(),
            });
        }
        if holders + waiters > 0 && permits == 0 {
            return Err(LockError::SemaphoreInUse {
                namespace: ns.to_owned(),
                key: key.to_owned(),
                holders,
                waiters,
            });
        }
        if permits == 0 {
            self.semaphores.remove(&k);
        } else {
            let sem = self.semaphores.entry(k.clone()).or_insert(Sem {
                permits,
                floors: BTreeMap::new(),
            });
            sem.permits = permits;
            // Only a raised N hands permits on (a lowered one touches no queue).
            if permits > previous {
                self.grant_queue(&k);
            }
            if self
                .holders
                .get(&k)
                .is_some_and(|held| held.holds.is_empty())
            {
                self.holders.remove(&k);
            }
        }
        reply
    }

    fn release_cmd(&mut self, s: u64, sent: Sent) -> Outcome {
        if let Some(answer) = self.dedup(s, &sent) {
            return answer;
        }
        let (ns, key) = (sent.namespace.as_str(), sent.key.as_str());
        let token = sent.token.expect("a release has a token");
        if let Some(error) = bad_namespace(ns) {
            return Err(error);
        }
        let k = (ns.to_owned(), key.to_owned());
        let Some(current) = self.token_of(&k, s) else {
            return Err(LockError::NotHolder {
                namespace: ns.to_owned(),
                key: key.to_owned(),
                session: SessionId(s),
            });
        };
        if token.0 != current {
            return Err(LockError::WrongToken {
                namespace: ns.to_owned(),
                key: key.to_owned(),
                given: token,
                current: Token(current),
            });
        }
        let next = self.release(&k, s);
        let reply = Reply::Released { token, next };
        self.remember(s, sent, &reply);
        Ok(reply)
    }
}

/// Turns generated ops into commands, tracking session ids, their secrets and request ids like
/// a client would.
#[derive(Default)]
pub struct OpClient {
    sessions: Vec<u64>,
    /// session -> (secret hash, principal) it was created with.
    owners: BTreeMap<u64, (Option<SecretHash>, String)>,
    next_request: BTreeMap<u64, u64>,
    sent: BTreeMap<u64, Vec<Command>>,
}

impl OpClient {
    fn session(&self, index: usize) -> SessionId {
        // One index past the known sessions names a session that never existed.
        SessionId(self.sessions.get(index % 8).copied().unwrap_or(9_999))
    }

    fn request(&mut self, session: SessionId) -> RequestId {
        let next = self.next_request.entry(session.0).or_insert(0);
        *next += 1;
        RequestId(*next)
    }

    /// The proof a command for `session` presents: its owner's (most often), a wrong secret,
    /// another principal, or none.
    fn proof(&self, session: SessionId, choice: usize) -> SessionProof {
        let (secret, principal) = self
            .owners
            .get(&session.0)
            .cloned()
            .unwrap_or((Some(WRONG_SECRET), "p".to_owned()));
        let choice = choice % 6;
        let secret_hash = match choice {
            PROOF_WRONG_SECRET => Some(WRONG_SECRET),
            c if PROOF_RIGHT.contains(&c) || c == PROOF_OTHER_PRINCIPAL => secret,
            _ => None,
        };
        let principal = match (secret_hash, choice) {
            (None, _) => String::new(),
            (Some(_), PROOF_OTHER_PRINCIPAL) => "mallory".to_owned(),
            (Some(_), _) => principal,
        };
        SessionProof {
            secret_hash,
            principal,
        }
    }

    fn record(&mut self, session: SessionId, command: &Command) {
        self.sent
            .entry(session.0)
            .or_default()
            .push(command.clone());
    }

    pub fn command(&mut self, op: &Op, model: &Model) -> Command {
        match op {
            Op::Create {
                ttl,
                secret,
                principal,
            } => Command::CreateSession {
                ttl_ms: TTLS[*ttl % TTLS.len()],
                identity: Identity {
                    name: "svc".into(),
                    host: "h".into(),
                    pid: 1,
                    principal: PRINCIPALS[*principal % PRINCIPALS.len()].into(),
                },
                secret_hash: SECRETS[*secret % SECRETS.len()],
            },
            Op::Close { session, proof } => {
                let session = self.session(*session);
                Command::CloseSession {
                    session,
                    proof: self.proof(session, *proof),
                }
            }
            Op::Expire { sessions } => Command::ExpireSessions {
                sessions: sessions.iter().take(3).map(|s| self.session(*s)).collect(),
            },
            Op::Acquire {
                session,
                ns,
                key,
                wait,
                timeout,
                proof,
                mode,
            } => {
                let session = self.session(*session);
                let mode = MODES[*mode % MODES.len()];
                let command = Command::Acquire {
                    session,
                    proof: self.proof(session, *proof),
                    request: self.request(session),
                    namespace: NAMESPACES[*ns % NAMESPACES.len()].into(),
                    key: KEYS[*key % KEYS.len()].into(),
                    mode,
                    wait: (*wait).then_some(Wait {
                        timeout_ms: WAIT_TIMEOUTS[*timeout % WAIT_TIMEOUTS.len()],
                    }),
                };
                self.record(session, &command);
                command
            }
            Op::Cancel {
                session,
                ns,
                key,
                proof,
            } => {
                let session = self.session(*session);
                Command::CancelWait {
                    session,
                    proof: self.proof(session, *proof),
                    namespace: NAMESPACES[*ns % NAMESPACES.len()].into(),
                    key: KEYS[*key % KEYS.len()].into(),
                }
            }
            Op::ExpireWaits => Command::ExpireWaits,
            Op::SetSemaphore {
                ns,
                key,
                permits,
                admin,
            } => {
                let roles: &[Role] = if *admin { &[Role::ClassAdmin] } else { &[] };
                Command::SetSemaphore {
                    actor: Actor::new("ops", roles),
                    namespace: NAMESPACES[*ns % NAMESPACES.len()].into(),
                    key: KEYS[*key % KEYS.len()].into(),
                    permits: PERMITS[*permits % PERMITS.len()],
                    reason: "capacity".into(),
                }
            }
            Op::Release {
                session,
                ns,
                key,
                right_token,
                proof,
            } => {
                let session = self.session(*session);
                let k = (
                    NAMESPACES[*ns % NAMESPACES.len()].to_owned(),
                    KEYS[*key % KEYS.len()].to_owned(),
                );
                let held = model.holders.get(&k).map_or(1, |held| {
                    held.holds
                        .get(&session.0)
                        .copied()
                        .unwrap_or(held.oldest().1)
                });
                let token = if *right_token { held } else { held + 1 };
                let command = Command::Release {
                    session,
                    proof: self.proof(session, *proof),
                    request: self.request(session),
                    namespace: k.0,
                    key: k.1,
                    token: Token(token),
                };
                self.record(session, &command);
                command
            }
            Op::Retry { session, back } => self.earlier(*session, *back),
            Op::Reuse { session, back, key } => {
                let mut command = self.earlier(*session, *back);
                // Another mode for the same key (an acquire), else another key.
                if let (Command::Acquire { mode, .. }, 2) = (&mut command, key % 3) {
                    let index = MODES.iter().position(|m| m == mode).unwrap_or(0);
                    *mode = MODES[(index + 1) % MODES.len()];
                } else if let Command::Acquire { key: k, .. } | Command::Release { key: k, .. } =
                    &mut command
                {
                    let index = KEYS.iter().position(|name| name == k).unwrap_or(0);
                    *k = KEYS[(index + 1 + key % 2) % KEYS.len()].into();
                }
                command
            }
        }
    }

    /// A session's request `back` requests ago, unchanged (or a close of a session that never
    /// existed, when there is none).
    fn earlier(&self, session: usize, back: usize) -> Command {
        let session = self.session(session);
        let sent = self.sent.get(&session.0).map(Vec::as_slice).unwrap_or(&[]);
        match sent.len().checked_sub(back % 4 + 1) {
            Some(index) => sent[index].clone(),
            None => Command::CloseSession {
                session: SessionId(8_888),
                proof: SessionProof::legacy(),
            },
        }
    }

    pub fn observe(&mut self, command: &Command, outcome: &Outcome) {
        if let (
            Ok(Reply::SessionCreated { session, .. }),
            Command::CreateSession {
                identity,
                secret_hash,
                ..
            },
        ) = (outcome, command)
        {
            if !self.sessions.contains(&session.0) {
                self.sessions.push(session.0);
            }
            let owner = (*secret_hash, identity.principal.clone());
            self.owners.insert(session.0, owner);
        }
    }
}

/// The model's holders and queues must be exactly the state machine's.
pub fn assert_same_state(
    sm: &LockStateMachine,
    model: &Model,
    last_tokens: &mut BTreeMap<LockKey, u64>,
) {
    let live: Vec<u64> = sm.sessions().map(|s| s.id.0).collect();
    let model_live: Vec<u64> = model.sessions.keys().copied().collect();
    assert_eq!(live, model_live, "live sessions");
    for ns in &NAMESPACES[..2] {
        for key in KEYS {
            let info = sm.inspect(ns, key, sm.time()).unwrap();
            let k = (ns.to_string(), key.to_owned());
            let holder = info.holder.as_ref().map(|h| (h.session.0, h.token.0));
            let held = model.holders.get(&k);
            assert_eq!(holder, held.map(Held::oldest), "oldest holder of {k:?}");
            let mut holders: Vec<(u64, u64, Option<u32>)> = info
                .holders
                .iter()
                .map(|h| (h.session.0, h.token.0, h.permit.map(|p| p.0)))
                .collect();
            holders.sort();
            let model_holders: Vec<(u64, u64, Option<u32>)> = held
                .map(|h| {
                    h.holds
                        .iter()
                        .map(|(s, t)| (*s, *t, h.permit_slots.get(s).copied()))
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(
                holders, model_holders,
                "holders (session, token, slot) of {k:?}"
            );
            let sem = model.semaphores.get(&k);
            assert_eq!(info.permits, sem.map(|s| s.permits), "permits of {k:?}");
            let floors: Vec<(u32, u64)> =
                info.permit_floors.iter().map(|(s, f)| (s.0, f.0)).collect();
            let model_floors: Vec<(u32, u64)> = sem
                .map(|s| s.floors.iter().map(|(permit, f)| (*permit, *f)).collect())
                .unwrap_or_default();
            assert_eq!(floors, model_floors, "slot floors of {k:?}");
            assert_eq!(info.mode, held.map(|h| h.mode), "mode of {k:?}");
            assert_eq!(
                info.floor.map(|f| f.0),
                held.map(|h| h.floor),
                "floor of {k:?}"
            );
            let waiters: Vec<u64> = info.waiters.iter().map(|w| w.session.0).collect();
            let modes: Vec<LockMode> = info.waiters.iter().map(|w| w.mode).collect();
            let model_queue = model.queues.get(&k).cloned().unwrap_or_default();
            let model_waiters: Vec<u64> = model_queue.iter().map(|(s, _)| *s).collect();
            let model_modes: Vec<LockMode> = model_queue.iter().map(|(_, m)| *m).collect();
            assert_eq!(waiters, model_waiters, "waiters of {k:?}");
            assert_eq!(modes, model_modes, "waiter modes of {k:?}");
            assert_eq!(info.queue_depth, waiters.len());
            for hold in &info.holders {
                // Every token is at or above its key's floor, and at most the revision.
                let floor = info.floor.expect("a held key has a floor");
                assert!(
                    hold.token.0 >= floor.0,
                    "token {} below floor {}",
                    hold.token,
                    floor
                );
                assert!(hold.token.0 <= sm.revision().0);
                assert_eq!(hold.mode, info.mode.unwrap(), "hold mode of {k:?}");
                // Holders belong to live sessions.
                assert!(model.sessions.contains_key(&hold.session.0));
            }
            if let Some(hold) = &info.holder {
                // The floor never goes down while a key is held, and so never passes a token
                // of a later run of holds: tokens of a key never go down.
                let floor = info.floor.expect("a held key has a floor");
                let last = last_tokens.entry(k.clone()).or_insert(0);
                assert!(
                    floor.0 >= *last || hold.token.0 >= *last,
                    "floor of {k:?} went down: {floor} after {last}"
                );
                *last = (*last).max(floor.0);
            } else {
                assert!(waiters.is_empty(), "waiters on a free key {k:?}");
            }
            for waiter in &waiters {
                assert!(
                    model.sessions.contains_key(waiter),
                    "waiter {waiter} is not live"
                );
                let deadline = sm.wait_deadline(SessionId(*waiter), ns, key);
                let model_deadline = model.deadlines.get(&(k.clone(), *waiter)).copied();
                assert_eq!(
                    deadline.map(|at| at.as_millis()),
                    model_deadline,
                    "deadline of waiter {waiter} of {k:?}"
                );
            }
        }
    }
}

/// The model's one name rule: the namespace `Bad` is refused (as its first character).
fn bad_namespace(ns: &str) -> Option<LockError> {
    (ns == "Bad").then(|| {
        LockError::BadName(NameError::NameBadChar {
            what: "namespace",
            name: ns.to_owned(),
            ch: 'B',
            index: 0,
        })
    })
}
