//! A plain, obviously-correct model of the lock state machine's sessions, holds, FIFO queues
//! and request dedup, for model-based tests (`core/tests/locks_model.rs`, proptest) and the
//! `lock_commands` fuzzer: the state machine must give the same answer as the model to every
//! command, and hold the same holders and queues.

use std::collections::BTreeMap;

use crate::locks::{
    AcquireReply, Command, Identity, LockConfig, LockError, LockStateMachine, NameError, Outcome,
    Reply, RequestId, SessionId, Token,
};

pub const NAMESPACES: [&str; 3] = ["a", "b", "Bad"];
pub const KEYS: [&str; 3] = ["k1", "k2", "k/3"];
pub const TTLS: [Option<u64>; 5] = [None, Some(999), Some(1_000), Some(60_000), Some(300_001)];

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
    },
    Close {
        session: usize,
    },
    Expire {
        sessions: Vec<usize>,
    },
    Acquire {
        session: usize,
        ns: usize,
        key: usize,
        wait: bool,
    },
    Release {
        session: usize,
        ns: usize,
        key: usize,
        right_token: bool,
    },
    /// Re-sends a session's earlier request with its request id (`back` requests ago).
    Retry {
        session: usize,
        back: usize,
    },
}

pub type LockKey = (String, String);

#[derive(Clone, Debug, Default)]
struct ModelSession {
    newest: Option<u64>,
    /// The last `dedup_window` (request, reply) answered without error.
    window: Vec<(u64, Reply)>,
}

/// The model: sessions, one holder per key, a FIFO queue per key. Written for clarity only.
#[derive(Debug, Default)]
pub struct Model {
    pub revision: u64,
    sessions: BTreeMap<u64, ModelSession>,
    holders: BTreeMap<LockKey, (u64, u64)>,
    queues: BTreeMap<LockKey, Vec<u64>>,
}

impl Model {
    fn count(&self, session: u64) -> usize {
        self.holders.values().filter(|(s, _)| *s == session).count()
            + self
                .queues
                .values()
                .map(|q| q.iter().filter(|s| **s == session).count())
                .sum::<usize>()
    }

    fn release(&mut self, key: &LockKey) -> Option<(SessionId, Token)> {
        self.holders.remove(key);
        let queue = self.queues.entry(key.clone()).or_default();
        if queue.is_empty() {
            return None;
        }
        let next = queue.remove(0);
        self.holders.insert(key.clone(), (next, self.revision));
        Some((SessionId(next), Token(self.revision)))
    }

    fn end(&mut self, ended: &[u64]) {
        for id in ended {
            self.sessions.remove(id);
        }
        for queue in self.queues.values_mut() {
            queue.retain(|s| !ended.contains(s));
        }
        let held: Vec<LockKey> = self
            .holders
            .iter()
            .filter(|(_, (s, _))| ended.contains(s))
            .map(|(k, _)| k.clone())
            .collect();
        for key in held {
            self.release(&key);
        }
    }

    fn remember(&mut self, session: u64, request: u64, reply: &Reply) {
        let state = self.sessions.get_mut(&session).unwrap();
        state.newest = Some(request);
        state.window.push((request, reply.clone()));
        if state.window.len() > config().dedup_window {
            state.window.remove(0);
        }
    }

    /// `Some(answer)` if the request id is a retry or too old.
    fn dedup(&self, session: u64, request: u64) -> Option<Result<Reply, LockError>> {
        let state = &self.sessions[&session];
        let newest = state.newest?;
        if request > newest {
            return None;
        }
        Some(match state.window.iter().find(|(r, _)| *r == request) {
            Some((_, reply)) => Ok(reply.clone()),
            None => Err(LockError::RequestTooOld {
                session: SessionId(session),
                request: RequestId(request),
                newest: RequestId(newest),
            }),
        })
    }

    pub fn apply(&mut self, command: &Command) -> Outcome {
        self.revision += 1;
        let cfg = config();
        match command {
            Command::CreateSession { ttl_ms, .. } => {
                let ttl = ttl_ms.unwrap_or(cfg.session_ttl_ms_default);
                if ttl < cfg.session_ttl_ms_min || ttl > cfg.session_ttl_ms_max {
                    return Err(LockError::SessionTtlOutOfBounds {
                        ttl_ms: ttl,
                        min: cfg.session_ttl_ms_min,
                        max: cfg.session_ttl_ms_max,
                    });
                }
                if self.sessions.len() >= cfg.sessions_max {
                    return Err(LockError::TooManySessions {
                        max: cfg.sessions_max,
                    });
                }
                self.sessions.insert(self.revision, ModelSession::default());
                Ok(Reply::SessionCreated {
                    session: SessionId(self.revision),
                    ttl_ms: ttl,
                })
            }
            Command::CloseSession { session } => {
                if !self.sessions.contains_key(&session.0) {
                    return Err(LockError::UnknownSession { session: *session });
                }
                let holds = self
                    .holders
                    .values()
                    .filter(|(s, _)| *s == session.0)
                    .count();
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
                request,
                namespace,
                key,
                wait,
            } => self.acquire(session.0, request.0, namespace, key, *wait),
            Command::Release {
                session,
                request,
                namespace,
                key,
                token,
            } => self.release_cmd(session.0, request.0, namespace, key, *token),
            other => panic!("the model does not cover {other:?}"),
        }
    }

    fn acquire(&mut self, s: u64, request: u64, ns: &str, key: &str, wait: bool) -> Outcome {
        if !self.sessions.contains_key(&s) {
            return Err(LockError::UnknownSession {
                session: SessionId(s),
            });
        }
        let k = (ns.to_owned(), key.to_owned());
        let current = |model: &Model| -> Option<AcquireReply> {
            if let Some((holder, token)) = model.holders.get(&k) {
                if *holder == s {
                    return Some(AcquireReply::Granted {
                        token: Token(*token),
                    });
                }
            }
            let queue = model.queues.get(&k)?;
            let index = queue.iter().position(|w| *w == s)?;
            Some(AcquireReply::Queued {
                position: index as u32 + 1,
            })
        };
        if let Some(answer) = self.dedup(s, request) {
            return answer.map(|cached| current(self).map(Reply::Acquire).unwrap_or(cached));
        }
        if let Some(error) = bad_namespace(ns) {
            return Err(error);
        }
        let cfg = config();
        let reply = if let Some(reply) = current(self) {
            reply
        } else if let (Some((holder, token)), false) = (self.holders.get(&k), wait) {
            AcquireReply::Busy {
                holder: SessionId(*holder),
                token: Token(*token),
            }
        } else if self.count(s) >= cfg.holds_per_session_max {
            return Err(LockError::TooManyHolds {
                session: SessionId(s),
                max: cfg.holds_per_session_max,
            });
        } else if !self.holders.contains_key(&k) {
            self.holders.insert(k.clone(), (s, self.revision));
            AcquireReply::Granted {
                token: Token(self.revision),
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
            queue.push(s);
            AcquireReply::Queued {
                position: queue.len() as u32,
            }
        };
        self.remember(s, request, &Reply::Acquire(reply));
        Ok(Reply::Acquire(reply))
    }

    fn release_cmd(&mut self, s: u64, request: u64, ns: &str, key: &str, token: Token) -> Outcome {
        if !self.sessions.contains_key(&s) {
            return Err(LockError::UnknownSession {
                session: SessionId(s),
            });
        }
        if let Some(answer) = self.dedup(s, request) {
            return answer;
        }
        if let Some(error) = bad_namespace(ns) {
            return Err(error);
        }
        let k = (ns.to_owned(), key.to_owned());
        let Some((holder, current)) = self.holders.get(&k).copied().filter(|(h, _)| *h == s) else {
            return Err(LockError::NotHolder {
                namespace: ns.to_owned(),
                key: key.to_owned(),
                session: SessionId(s),
            });
        };
        assert_eq!(holder, s);
        if token.0 != current {
            return Err(LockError::WrongToken {
                namespace: ns.to_owned(),
                key: key.to_owned(),
                given: token,
                current: Token(current),
            });
        }
        let next = self.release(&k);
        let reply = Reply::Released { token, next };
        self.remember(s, request, &reply);
        Ok(reply)
    }
}

/// Turns generated ops into commands, tracking session ids and request ids like a client would.
#[derive(Default)]
pub struct Driver {
    sessions: Vec<u64>,
    next_request: BTreeMap<u64, u64>,
    sent: BTreeMap<u64, Vec<Command>>,
}

impl Driver {
    fn session(&self, index: usize) -> SessionId {
        // One index past the known sessions names a session that never existed.
        SessionId(self.sessions.get(index % 8).copied().unwrap_or(9_999))
    }

    fn request(&mut self, session: SessionId) -> RequestId {
        let next = self.next_request.entry(session.0).or_insert(0);
        *next += 1;
        RequestId(*next)
    }

    pub fn command(&mut self, op: &Op, model: &Model) -> Command {
        match op {
            Op::Create { ttl } => Command::CreateSession {
                ttl_ms: TTLS[*ttl % TTLS.len()],
                identity: Identity {
                    name: "svc".into(),
                    host: "h".into(),
                    pid: 1,
                    principal: "p".into(),
                },
            },
            Op::Close { session } => Command::CloseSession {
                session: self.session(*session),
            },
            Op::Expire { sessions } => Command::ExpireSessions {
                sessions: sessions.iter().take(3).map(|s| self.session(*s)).collect(),
            },
            Op::Acquire {
                session,
                ns,
                key,
                wait,
            } => {
                let session = self.session(*session);
                let command = Command::Acquire {
                    session,
                    request: self.request(session),
                    namespace: NAMESPACES[*ns % NAMESPACES.len()].into(),
                    key: KEYS[*key % KEYS.len()].into(),
                    wait: *wait,
                };
                self.sent
                    .entry(session.0)
                    .or_default()
                    .push(command.clone());
                command
            }
            Op::Release {
                session,
                ns,
                key,
                right_token,
            } => {
                let session = self.session(*session);
                let k = (
                    NAMESPACES[*ns % NAMESPACES.len()].to_owned(),
                    KEYS[*key % KEYS.len()].to_owned(),
                );
                let held = model.holders.get(&k).map_or(1, |(_, token)| *token);
                let token = if *right_token { held } else { held + 1 };
                let command = Command::Release {
                    session,
                    request: self.request(session),
                    namespace: k.0,
                    key: k.1,
                    token: Token(token),
                };
                self.sent
                    .entry(session.0)
                    .or_default()
                    .push(command.clone());
                command
            }
            Op::Retry { session, back } => {
                let session = self.session(*session);
                let sent = self.sent.get(&session.0).map(Vec::as_slice).unwrap_or(&[]);
                match sent.len().checked_sub(*back % 4 + 1) {
                    Some(index) => sent[index].clone(),
                    None => Command::CloseSession {
                        session: SessionId(8_888),
                    },
                }
            }
        }
    }

    pub fn observe(&mut self, outcome: &Outcome) {
        if let Ok(Reply::SessionCreated { session, .. }) = outcome {
            self.sessions.push(session.0);
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
            assert_eq!(holder, model.holders.get(&k).copied(), "holder of {k:?}");
            let waiters: Vec<u64> = info.waiters.iter().map(|w| w.session.0).collect();
            let model_waiters = model.queues.get(&k).cloned().unwrap_or_default();
            assert_eq!(waiters, model_waiters, "waiters of {k:?}");
            assert_eq!(info.queue_depth, waiters.len());
            if let Some(hold) = &info.holder {
                // Every token is at or above its key's floor; tokens rise strictly per key.
                let floor = info.floor.expect("a held key has a floor");
                assert!(
                    hold.token.0 >= floor.0,
                    "token {} below floor {}",
                    hold.token,
                    floor
                );
                assert!(floor.0 <= sm.revision().0);
                let last = last_tokens.entry(k.clone()).or_insert(0);
                assert!(
                    hold.token.0 >= *last,
                    "token of {k:?} went down: {} after {last}",
                    hold.token
                );
                *last = hold.token.0;
                // Waiters belong to live sessions.
                assert!(model.sessions.contains_key(&hold.session.0));
            } else {
                assert!(waiters.is_empty(), "waiters on a free key {k:?}");
            }
            for waiter in &waiters {
                assert!(
                    model.sessions.contains_key(waiter),
                    "waiter {waiter} is not live"
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
