//! Sessions: created, closed, expired (proposed by the leader) or revoked (by a force-release).
//!
//! Keepalives are leader-local and never reach the log; the state machine only knows each
//! session's TTL. The leader proposes `ExpireSessions` when a deadline passes, and a new leader
//! gives every session a full TTL from its takeover ([`LockStateMachine::sessions`] lists them).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::class::check_len;
use super::command::{describe_request, Identity, LockMode, Remembered, RememberedReply, Reply};
use super::error::LockError;
use super::ids::{ForceReleaseId, RequestId, Revision, SessionId, Token};
use super::owner::{check_proof, SecretHash, SessionProof};
use super::watch::ReleaseCause;
use super::LockStateMachine;
use crate::time::Instant;

/// Longest identity field (name, host, principal), in bytes.
pub const IDENTITY_FIELD_LEN_MAX: usize = 256;

/// Holds lost to force-release remembered per session (the newest; older ones are dropped).
/// Two-person releases are rare: a client keeping alive every `ttl / 3` sees each of them many
/// times over before this many more could happen.
pub const HOLDS_LOST_PER_SESSION_MAX: usize = 16;

/// A hold a live session lost to a force-release without revocation. The session's keepalive
/// answers carry its newest [`HOLDS_LOST_PER_SESSION_MAX`], so its client can end the guard of
/// that token (it dedupes by namespace, key and token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostHold {
    pub namespace: Arc<str>,
    pub key: Arc<str>,
    /// The token of the hold that was released.
    pub token: Token,
    /// The revision of the release: the key's new floor, unless other shared holders of the key
    /// hold on (the floor then stays, so their tokens stay valid; the next exclusive grant is
    /// above this revision all the same).
    pub revision: Revision,
    pub request: ForceReleaseId,
}

/// One live session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    pub identity: Identity,
    /// The hash of the session's secret; `None` for a legacy session (opened by a command
    /// written before secrets). Never changes.
    pub secret_hash: Option<SecretHash>,
    pub ttl_ms: u64,
    /// Log time of creation.
    pub created_at: Instant,
    /// namespace -> keys this session holds. Mirrors the lock table exactly.
    pub holds: KeySets,
    /// namespace -> keys this session waits for. Mirrors the waiter queues exactly.
    pub waits: KeySets,
    /// Number of keys in `holds` plus `waits`; at most `holds_per_session_max`.
    pub holds_and_waits: usize,
    /// The newest request id applied without error, if any. Never decreases.
    pub request_newest: Option<RequestId>,
    /// Replies to the last `dedup_window` requests applied without error, oldest first, ids
    /// strictly increasing.
    pub replies: VecDeque<Remembered>,
    /// Holds this session lost to force-release, oldest first (revisions strictly increasing),
    /// at most [`HOLDS_LOST_PER_SESSION_MAX`].
    pub holds_lost: VecDeque<LostHold>,
}

/// What a request id means for a session.
pub(crate) enum Dedup {
    /// Newer than every request seen: apply it.
    New,
    /// A retry of a request answered before: answer the same.
    Retry(RememberedReply),
    /// The id of a request answered before, with another command: refuse it.
    Reused { was: String },
    /// Older than the window: cannot be answered safely.
    TooOld { newest: RequestId },
}

impl Session {
    pub fn new(
        identity: Identity,
        secret_hash: Option<SecretHash>,
        ttl_ms: u64,
        created_at: Instant,
    ) -> Session {
        Session {
            identity,
            secret_hash,
            ttl_ms,
            created_at,
            holds: BTreeMap::new(),
            waits: BTreeMap::new(),
            holds_and_waits: 0,
            request_newest: None,
            replies: VecDeque::new(),
            holds_lost: VecDeque::new(),
        }
    }

    /// Remembers a hold lost to force-release (the oldest is dropped at the bound).
    pub fn note_hold_lost(&mut self, lost: LostHold) {
        if let Some(last) = self.holds_lost.back() {
            assert!(
                lost.revision > last.revision,
                "hold lost at {} after {}",
                lost.revision,
                last.revision
            );
        }
        if self.holds_lost.len() == HOLDS_LOST_PER_SESSION_MAX {
            self.holds_lost.pop_front();
        }
        self.holds_lost.push_back(lost);
    }

    /// What `request`, a command of `kind` on `namespace/key` (releasing `token`, acquiring in
    /// `mode`), is.
    pub fn dedup(
        &self,
        request: RequestId,
        (kind, namespace, key, token, mode): RequestName<'_>,
    ) -> Dedup {
        match self.request_newest {
            Some(newest) if request <= newest => {
                match self.replies.iter().find(|r| r.request == request) {
                    Some(r) if r.matches(kind, namespace, key, token, mode) => {
                        Dedup::Retry(r.reply)
                    }
                    Some(r) => Dedup::Reused { was: r.describe() },
                    None => Dedup::TooOld { newest },
                }
            }
            _ => Dedup::New,
        }
    }

    /// Checks that `proof` may act on this session (`id`).
    pub fn check_proof(&self, id: SessionId, proof: &SessionProof) -> Result<(), LockError> {
        check_proof(id, self.secret_hash, &self.identity.principal, proof)
    }

    /// Remembers the reply to a request that was applied without error.
    pub fn remember(&mut self, remembered: Remembered, window: usize) {
        let request = remembered.request;
        if let Some(newest) = self.request_newest {
            assert!(
                request > newest,
                "request ids must rise: {request} after {newest}"
            );
        }
        self.request_newest = Some(request);
        if self.replies.len() == window {
            self.replies.pop_front();
        }
        self.replies.push_back(remembered);
    }

    /// The shared name of `key` if this session holds it.
    pub fn held_key(&self, namespace: &str, key: &str) -> Option<Arc<str>> {
        self.holds.get(namespace)?.get(key).cloned()
    }

    pub fn holds(&self, namespace: &str, key: &str) -> bool {
        self.holds
            .get(namespace)
            .is_some_and(|keys| keys.contains(key))
    }

    pub fn waits_for(&self, namespace: &str, key: &str) -> bool {
        self.waits
            .get(namespace)
            .is_some_and(|keys| keys.contains(key))
    }

    pub fn hold_count(&self) -> usize {
        self.holds.values().map(BTreeSet::len).sum()
    }
}

/// The error or early answer of a request id that is not new, for a command of `kind` on
/// `namespace/key` (releasing `token`). `Ok(None)`: a new request, to apply.
/// A request as its id is bound to it: (kind, namespace, key, released token, acquired mode).
pub(crate) type RequestName<'a> = (&'a str, &'a str, &'a str, Option<Token>, Option<LockMode>);

pub(crate) fn check_request(
    state: &Session,
    session: SessionId,
    request: RequestId,
    this: RequestName<'_>,
) -> Result<Option<RememberedReply>, LockError> {
    let (kind, namespace, key, token, mode) = this;
    match state.dedup(request, this) {
        Dedup::New => Ok(None),
        Dedup::Retry(reply) => Ok(Some(reply)),
        Dedup::Reused { was } => Err(LockError::RequestIdReused {
            session,
            request,
            was,
            this: describe_request(kind, &format!("{namespace}/{key}"), token, mode),
        }),
        Dedup::TooOld { newest } => Err(LockError::RequestTooOld {
            session,
            request,
            newest,
        }),
    }
}

/// namespace -> keys; the names are shared with the lock table (`Arc<str>`), not copied.
pub(crate) type KeySets = BTreeMap<Arc<str>, BTreeSet<Arc<str>>>;

/// Inserts `key` under `namespace` in a session's holds or waits.
pub(crate) fn set_insert(set: &mut KeySets, namespace: &Arc<str>, key: &Arc<str>) {
    let inserted = match set.get_mut(&**namespace) {
        Some(keys) => keys.insert(key.clone()),
        None => set
            .entry(namespace.clone())
            .or_default()
            .insert(key.clone()),
    };
    assert!(inserted, "`{namespace}/{key}` recorded twice for a session");
}

/// Removes `key` under `namespace` from a session's holds or waits.
pub(crate) fn set_remove(set: &mut KeySets, namespace: &str, key: &str) {
    let keys = set
        .get_mut(namespace)
        .unwrap_or_else(|| panic!("session has nothing in namespace `{namespace}`"));
    assert!(
        keys.remove(key),
        "session does not have `{namespace}/{key}`"
    );
    if keys.is_empty() {
        set.remove(namespace);
    }
}

pub(crate) fn validate_identity(identity: &Identity) -> Result<(), LockError> {
    check_len("identity name", &identity.name, IDENTITY_FIELD_LEN_MAX)?;
    check_len("identity host", &identity.host, IDENTITY_FIELD_LEN_MAX)?;
    check_len(
        "identity principal",
        &identity.principal,
        IDENTITY_FIELD_LEN_MAX,
    )?;
    Ok(())
}

impl LockStateMachine {
    /// Checks that `proof` may act on live session `session` (the keepalive path: the Node asks
    /// before extending a deadline).
    pub fn check_session_proof(
        &self,
        session: SessionId,
        proof: &SessionProof,
    ) -> Result<(), LockError> {
        self.proven_session(session, proof).map(|_| ())
    }

    /// Live session `session`, if `proof` may act on it.
    pub(crate) fn proven_session(
        &self,
        session: SessionId,
        proof: &SessionProof,
    ) -> Result<&Session, LockError> {
        let state = self
            .sessions
            .get(&session)
            .ok_or(LockError::UnknownSession { session })?;
        state.check_proof(session, proof)?;
        Ok(state)
    }

    pub(crate) fn apply_create_session(
        &mut self,
        ttl_ms: Option<u64>,
        identity: Identity,
        secret_hash: Option<SecretHash>,
    ) -> Result<Reply, LockError> {
        let ttl_ms = ttl_ms.unwrap_or(self.config.session_ttl_ms_default);
        let (min, max) = (
            self.config.session_ttl_ms_min,
            self.config.session_ttl_ms_max,
        );
        if ttl_ms < min || ttl_ms > max {
            return Err(LockError::SessionTtlOutOfBounds { ttl_ms, min, max });
        }
        validate_identity(&identity)?;
        if let Some(existing) = secret_hash.and_then(|h| self.sessions_by_secret.get(&h)) {
            // A retry (same secret, same identity) gets the session its first try opened.
            let state = &self.sessions[existing];
            if state.identity != identity {
                return Err(LockError::SessionSecretInUse { session: *existing });
            }
            return Ok(Reply::SessionCreated {
                session: *existing,
                ttl_ms: state.ttl_ms,
            });
        }
        if self.sessions.len() >= self.config.sessions_max {
            return Err(LockError::TooManySessions {
                max: self.config.sessions_max,
            });
        }
        let session = SessionId(self.revision.0);
        let state = Session::new(identity, secret_hash, ttl_ms, self.time);
        let previous = self.sessions.insert(session, state);
        assert!(previous.is_none(), "session id {session} reused");
        if let Some(hash) = secret_hash {
            let previous = self.sessions_by_secret.insert(hash, session);
            assert!(
                previous.is_none(),
                "secret of session {session} indexed twice"
            );
        }
        Ok(Reply::SessionCreated { session, ttl_ms })
    }

    pub(crate) fn apply_close_session(
        &mut self,
        session: SessionId,
        proof: &SessionProof,
    ) -> Result<Reply, LockError> {
        let Some(state) = self.sessions.get(&session) else {
            return Err(LockError::UnknownSession { session });
        };
        state.check_proof(session, proof)?;
        let holds_released = state.hold_count();
        let waits_removed = state.holds_and_waits - holds_released;
        self.end_sessions(&[session], ReleaseCause::SessionClosed, None);
        Ok(Reply::SessionClosed {
            holds_released,
            waits_removed,
        })
    }

    pub(crate) fn apply_expire_sessions(
        &mut self,
        sessions: &[SessionId],
    ) -> Result<Reply, LockError> {
        let mut expired: Vec<SessionId> = sessions
            .iter()
            .copied()
            .filter(|id| self.sessions.contains_key(id))
            .collect();
        expired.sort_unstable();
        expired.dedup();
        self.end_sessions(&expired, ReleaseCause::SessionExpired, None);
        Ok(Reply::SessionsExpired { expired })
    }
}
