//! A session: kept alive in the background, takes locks, and says when it is lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use picket_core::locks::{LockMode, Token};
use std::collections::BTreeMap;

use tokio::sync::{broadcast, watch, Notify};

use super::cluster::{millis, Cluster};
use super::error::{ClientError, LostReason, REQUEST_TOO_OLD, WAIT_ENDED, WAIT_EXPIRED};
use super::guard::LockGuard;
use super::keepalive::{self, KeepAliveAck, Liveness};
use super::state::{SessionEvent, SessionState};
use super::stream;
use picket_proto::proto::{self, acquire_reply, lock_client::LockClient};
use picket_proto::secret::SessionSecret;

/// What a session's handles share.
pub(crate) struct SessionInner {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) id: u64,
    /// Drawn by this client for the session; sent on every call, never shown.
    pub(crate) secret: SessionSecret,
    pub(crate) liveness: Arc<Liveness>,
    /// The last request id used. Request ids are non-zero and strictly increasing per session.
    request_id_last: AtomicU64,
    /// Background `CancelWait`s not answered yet, per (namespace, key): a new acquire of that
    /// key waits for them (see [`SessionInner::after_cancels`]).
    cancels: std::sync::Mutex<BTreeMap<(String, String), PendingCancels>>,
}

/// The background cancels of one key still in flight, and who waits for them to end.
struct PendingCancels {
    count: usize,
    done: Arc<Notify>,
}

impl SessionInner {
    pub(crate) fn next_request_id(&self) -> u64 {
        let id = self.request_id_last.fetch_add(1, Ordering::Relaxed) + 1;
        assert!(id > 0, "request id counter of session {} wrapped", self.id);
        id
    }

    pub(crate) fn lost_error(&self) -> Option<ClientError> {
        if self.liveness.is_alive() {
            return None;
        }
        let reason = self
            .liveness
            .lost_reason()
            .unwrap_or(LostReason::KeepAliveExpired {
                ttl_ms: millis(self.liveness.ttl),
            });
        Some(ClientError::SessionLost {
            session_id: self.id,
            reason,
        })
    }

    /// Waits until the session is lost; answers why.
    pub(crate) async fn lost(&self) -> LostReason {
        let mut receiver = self.liveness.lost.subscribe();
        let reason = receiver.wait_for(Option::is_some).await;
        match reason {
            Ok(reason) => reason.clone().expect("wait_for answered Some"),
            // The sender lives in `liveness`, which `self` holds: it cannot be dropped here.
            Err(_) => LostReason::Closed,
        }
    }

    /// An error from the server about this session: if it says the session is gone, mark it lost.
    pub(crate) fn note(&self, error: ClientError) -> ClientError {
        if error.is_unknown_session() {
            self.liveness.lose(LostReason::UnknownSession);
            return ClientError::SessionLost {
                session_id: self.id,
                reason: self
                    .liveness
                    .lost_reason()
                    .unwrap_or(LostReason::UnknownSession),
            };
        }
        error
    }

    /// `Release` with a fresh request id, retried with that same id. A `request_too_old`
    /// answer means another request of this session, drawn a later id, reached the server first
    /// (calls of one session run concurrently: the server applies ids in the order they arrive
    /// and refuses an earlier one it does not remember): the release is sent again under a new
    /// id. That is safe because a release names its grant's token: it can only ever end that
    /// one hold.
    pub(crate) async fn release(
        &self,
        namespace: &str,
        key: &str,
        token: Token,
    ) -> Result<proto::ReleaseResponse, ClientError> {
        let mut request = proto::ReleaseRequest {
            session_id: self.id,
            request_id: self.next_request_id(),
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            token: token.0,
            session_secret: self.secret.as_bytes().to_vec(),
        };
        let timeout = self.cluster.config.rpc_timeout;
        let mut overtaken = 0;
        loop {
            let answer =
                self.cluster
                    .lock_call(
                        "release",
                        request.clone(),
                        timeout,
                        stream::RELEASE,
                        |channel, request| async move {
                            LockClient::new(channel).release(request).await
                        },
                    )
                    .await;
            match answer {
                Err(error)
                    if error.rule() == Some(REQUEST_TOO_OLD)
                        && overtaken < RELEASE_OVERTAKEN_MAX =>
                {
                    overtaken += 1;
                    request.request_id = self.next_request_id();
                }
                answer => {
                    return answer
                        .map(|(response, _)| response)
                        .map_err(|e| self.note(e))
                }
            }
        }
    }
}

/// How many times a release is sent again under a new request id because later requests of
/// its session overtook it (`request_too_old`) before the refusal is handed to the caller.
const RELEASE_OVERTAKEN_MAX: u32 = 16;

impl SessionInner {
    /// Waits until no background `CancelWait` of `namespace`/`key` is in flight. `CancelWait`
    /// names the session and the key, not a request: a dropped call's cancel that is applied
    /// after a later call on the key queued would remove *that* call's wait, or answer its grant
    /// (and the dropped call's task would release a lock a live guard holds). So a new acquire
    /// of the key starts only once the earlier cancel is answered (or gave up within its retry
    /// budget). Found by the simulation (seed 119: a `lock_shared` dropped during a leader
    /// change, then the next call on the key).
    async fn after_cancels(&self, namespace: &str, key: &str) {
        let pending = || {
            let cancels = self.cancels.lock().expect("cancels lock");
            cancels
                .get(&(namespace.to_owned(), key.to_owned()))
                .map(|p| p.done.clone())
        };
        while let Some(done) = pending() {
            let notified = done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if pending().is_none() {
                return;
            }
            notified.await;
        }
    }

    fn cancel_started(&self, namespace: &str, key: &str) {
        let mut cancels = self.cancels.lock().expect("cancels lock");
        cancels
            .entry((namespace.to_owned(), key.to_owned()))
            .or_insert_with(|| PendingCancels {
                count: 0,
                done: Arc::new(Notify::new()),
            })
            .count += 1;
    }

    fn cancel_ended(&self, namespace: &str, key: &str) {
        let mut cancels = self.cancels.lock().expect("cancels lock");
        let at = (namespace.to_owned(), key.to_owned());
        let Some(pending) = cancels.get_mut(&at) else {
            return;
        };
        pending.count -= 1;
        if pending.count == 0 {
            let done = cancels.remove(&at).expect("present").done;
            done.notify_waiters();
        }
    }

    /// `CancelWait`, retried within the call's retry budget.
    pub(crate) async fn cancel_wait(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<proto::CancelWaitResponse, ClientError> {
        let request = proto::CancelWaitRequest {
            session_id: self.id,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            session_secret: self.secret.as_bytes().to_vec(),
        };
        let timeout = self.cluster.config.rpc_timeout;
        let answer =
            self.cluster
                .lock_call(
                    "cancel_wait",
                    request,
                    timeout,
                    stream::CANCEL_WAIT,
                    |channel, request| async move {
                        LockClient::new(channel).cancel_wait(request).await
                    },
                )
                .await;
        answer
            .map(|(response, _)| response)
            .map_err(|e| self.note(e))
    }
}

/// Leaves the queue when a waiting `lock` is dropped or fails before it got the key: one
/// background `CancelWait` (retried within the retry budget; the wait's server-side deadline,
/// if any, or the session's end is the backstop), then a release of the grant it raced.
struct CancelOnDrop {
    inner: Arc<SessionInner>,
    namespace: String,
    key: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed || !self.inner.liveness.is_alive() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        let (namespace, key) = (
            std::mem::take(&mut self.namespace),
            std::mem::take(&mut self.key),
        );
        inner.cancel_started(&namespace, &key);
        runtime.spawn(async move {
            if let Ok(answer) = inner.cancel_wait(&namespace, &key).await {
                if let Some(token) = answer.held_token {
                    // Granted before the cancel, to a caller who is gone: give the key back.
                    let _ = inner.release(&namespace, &key, Token(token)).await;
                }
            }
            inner.cancel_ended(&namespace, &key);
        });
    }
}

impl Drop for SessionInner {
    /// The last handle is gone (session and guards): close the session, best effort, so its
    /// locks are freed now rather than at expiry.
    fn drop(&mut self) {
        if !self.liveness.lose(LostReason::Closed) {
            return; // already lost: nothing to close
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cluster = self.cluster.clone();
        let session_id = self.id;
        let secret = self.secret.clone();
        runtime.spawn(async move {
            let _ = close_session(&cluster, session_id, &secret).await;
        });
    }
}

async fn close_session(
    cluster: &Cluster,
    session_id: u64,
    secret: &SessionSecret,
) -> Result<proto::CloseSessionResponse, ClientError> {
    let request = proto::CloseSessionRequest {
        session_id,
        session_secret: secret.as_bytes().to_vec(),
    };
    cluster
        .lock_call(
            "close_session",
            request,
            cluster.config.rpc_timeout,
            stream::CLOSE_SESSION,
            |channel, request| async move { LockClient::new(channel).close_session(request).await },
        )
        .await
        .map(|(response, _)| response)
}

/// A live session. Cloning shares it; the session is closed (best effort) when the last clone
/// and the last [`LockGuard`] are dropped, or explicitly with [`Session::close`].
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<SessionInner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.inner.id)
            .field("ttl", &self.inner.liveness.ttl)
            .field("lost", &self.inner.liveness.lost_reason())
            .finish()
    }
}

/// What closing a session released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    pub holds_released: u64,
    pub waits_removed: u64,
}

impl Session {
    /// Creates a session and starts keeping it alive (a tokio task). The session's secret is
    /// drawn here, so a retried creation (same secret, same identity) gets the same session.
    pub(crate) async fn create(cluster: Arc<Cluster>) -> Result<Session, ClientError> {
        let config = &cluster.config;
        let secret = SessionSecret::generate();
        let request = proto::CreateSessionRequest {
            ttl_ms: config.session_ttl.map(millis),
            identity: Some(proto::ClientIdentity {
                name: config.identity_name.clone(),
                host: config.identity_host.clone(),
                pid: config.identity_pid,
            }),
            session_secret: secret.as_bytes().to_vec(),
        };
        let (response, sent_at) =
            cluster
                .call(
                    "create_session",
                    request,
                    config.rpc_timeout,
                    |channel, request| async move {
                        LockClient::new(channel).create_session(request).await
                    },
                )
                .await?;
        if response.session_id == 0 {
            return Err(ClientError::BadAnswer {
                what: "create_session",
                field: "session_id",
            });
        }
        let ttl = Duration::from_millis(response.ttl_ms);
        let liveness = Arc::new(Liveness::new(KeepAliveAck {
            session_id: response.session_id,
            sent_at,
            acked_at: tokio::time::Instant::now(),
            ttl,
            margin: keepalive::drift_margin(ttl, cluster.config.clock_drift_ppm),
            keepalives: 0,
        }));
        tokio::spawn(keepalive::run(
            cluster.clone(),
            response.session_id,
            secret.clone(),
            liveness.clone(),
        ));
        Ok(Session {
            inner: Arc::new(SessionInner {
                cluster,
                id: response.session_id,
                secret,
                liveness,
                request_id_last: AtomicU64::new(0),
                cancels: Default::default(),
            }),
        })
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The TTL the server granted.
    pub fn ttl(&self) -> Duration {
        self.inner.liveness.ttl
    }

    /// Alive: not lost and its keepalive deadline not passed.
    pub fn is_alive(&self) -> bool {
        self.inner.liveness.is_alive()
    }

    /// Resolves when the session is lost (and with it every lock it holds), with the reason.
    pub async fn lost(&self) -> LostReason {
        self.inner.lost().await
    }

    /// The loss signal as a watch channel (`None` while alive), for `select!` loops.
    pub fn lost_signal(&self) -> watch::Receiver<Option<LostReason>> {
        self.inner.liveness.lost.subscribe()
    }

    /// The session's state (`Healthy`, `Jeopardy`, `Safe`, `Lost`; see [`SessionState`] and
    /// docs/client.md) as a watch: a slow reader sees the newest state, never a backlog (use
    /// [`Session::events`] to see every change).
    pub fn state(&self) -> watch::Receiver<SessionState> {
        self.inner.liveness.state.subscribe()
    }

    /// Every change of the session's state from now on, and every hold it loses to a
    /// force-release without revocation, in order. Ends after `Lost`.
    pub fn events(&self) -> SessionEvents {
        SessionEvents {
            events: self.inner.liveness.events.subscribe(),
            ended: self.inner.liveness.lost_reason().is_some(),
        }
    }

    /// The newest acknowledged renewal of this session (its creation, then each acknowledged
    /// keepalive) with the time its request was sent and the time the answer arrived: for
    /// "last renewed" metrics, or to see how close the session runs to its deadline
    /// (`sent_at + ttl`). A watch: a slow reader sees the newest value, never a backlog.
    pub fn keepalive_acks(&self) -> watch::Receiver<KeepAliveAck> {
        self.inner.liveness.acks.subscribe()
    }

    /// The next request id of this session (non-zero, strictly increasing). Exposed for tools
    /// that send raw requests.
    pub fn next_request_id(&self) -> u64 {
        self.inner.next_request_id()
    }

    /// The session's secret, for tools that send raw requests on its behalf (or hand the
    /// session to `picketctl unlock --secret`). Whoever has it can act on the session: never
    /// log it.
    pub fn secret(&self) -> &SessionSecret {
        &self.inner.secret
    }

    /// Takes `namespace`/`key`, waiting in the queue until it is granted or the session is lost.
    ///
    /// The wait is one `Acquire` with `wait_ms` = the wait slice, re-issued with the **same**
    /// request id (the server answers what is true now) until it answers `Granted`. Dropping
    /// this future before it answers (or its failing) leaves the queue: a best-effort
    /// `CancelWait` is sent in the background (and a grant it raced is released).
    pub async fn lock(&self, namespace: &str, key: &str) -> Result<LockGuard, ClientError> {
        self.lock_waiting(namespace, key, LockMode::Exclusive, None)
            .await
    }

    /// [`Self::lock`] in shared mode: held together with other shared holders, never with an
    /// exclusive one. It waits behind an exclusive request queued before it (FIFO: writers do
    /// not starve). The guard's token fences like any other: a resource that accepted a later
    /// writer's token refuses it. A session cannot change its mode on a key: asking for the
    /// other mode while holding or waiting is refused (rule `mode_change_not_supported`).
    pub async fn lock_shared(&self, namespace: &str, key: &str) -> Result<LockGuard, ClientError> {
        self.lock_waiting(namespace, key, LockMode::Shared, None)
            .await
    }

    /// [`Self::lock_within`] in shared mode (see [`Self::lock_shared`]).
    pub async fn lock_shared_within(
        &self,
        namespace: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<LockGuard, ClientError> {
        let timeout_ms = millis(timeout).max(1);
        self.lock_waiting(namespace, key, LockMode::Shared, Some(timeout_ms))
            .await
    }

    /// [`Self::try_lock`] in shared mode: granted at once if the key is free or held shared
    /// with nobody waiting; [`ClientError::Held`] if not.
    pub async fn try_lock_shared(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<LockGuard, ClientError> {
        self.acquire(namespace, key, LockMode::Shared, 0, None)
            .await
    }

    /// [`Self::lock`] that gives up after `timeout`: the server removes the wait once it has
    /// waited that long (its deadline, in the cluster's log time), so a client that dies or is
    /// cut off meanwhile leaves nothing queued. [`ClientError::WaitTimedOut`] when it passes.
    /// `timeout` is at least 1 ms and at most one day.
    pub async fn lock_within(
        &self,
        namespace: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<LockGuard, ClientError> {
        let timeout_ms = millis(timeout).max(1);
        self.lock_waiting(namespace, key, LockMode::Exclusive, Some(timeout_ms))
            .await
    }

    async fn lock_waiting(
        &self,
        namespace: &str,
        key: &str,
        mode: LockMode,
        timeout_ms: Option<u64>,
    ) -> Result<LockGuard, ClientError> {
        let slice_ms = millis(self.inner.cluster.config.wait_slice).max(1);
        // One held call covers the whole deadline when it fits in a slice.
        let wait_ms = timeout_ms.map_or(slice_ms, |t| t.saturating_add(1).min(slice_ms));
        let mut cancel = CancelOnDrop {
            inner: self.inner.clone(),
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            armed: true,
        };
        let answer = tokio::select! {
            answer = self.acquire(namespace, key, mode, wait_ms, timeout_ms) => answer,
            reason = self.inner.lost() => Err(ClientError::SessionLost { session_id: self.id(), reason }),
        };
        if answer.is_ok() {
            cancel.armed = false;
        }
        match (answer, timeout_ms) {
            // The wait is gone: removed at its deadline, or (a retry arriving after that) no
            // longer there.
            (Err(error), Some(timeout_ms))
                if matches!(error.rule(), Some(WAIT_EXPIRED | WAIT_ENDED)) =>
            {
                cancel.armed = false;
                Err(ClientError::WaitTimedOut {
                    namespace: namespace.to_owned(),
                    key: key.to_owned(),
                    timeout_ms,
                })
            }
            (answer, _) => answer,
        }
    }

    /// Takes a permit of the semaphore `namespace`/`key` (declared by an operator with
    /// `SetSemaphore`), waiting as [`Self::lock`] does while all N are held. The guard's
    /// [`LockGuard::slot`] is the permit's slot and its token fences that slot: a resource
    /// that fences per (key, slot) refuses a superseded holder of the same slot. Refused on a
    /// key that is no semaphore (rule `not_a_semaphore`).
    pub async fn acquire_permit(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<LockGuard, ClientError> {
        self.lock_waiting(namespace, key, LockMode::Permit, None)
            .await
    }

    /// [`Self::acquire_permit`] that gives up after `timeout`, as [`Self::lock_within`].
    pub async fn acquire_permit_within(
        &self,
        namespace: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<LockGuard, ClientError> {
        let timeout_ms = millis(timeout).max(1);
        self.lock_waiting(namespace, key, LockMode::Permit, Some(timeout_ms))
            .await
    }

    /// A permit if one is free and nobody waits; [`ClientError::Held`] if not.
    pub async fn try_acquire_permit(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<LockGuard, ClientError> {
        self.acquire(namespace, key, LockMode::Permit, 0, None)
            .await
    }

    /// Takes `namespace`/`key` if it is free; [`ClientError::Held`] if not.
    pub async fn try_lock(&self, namespace: &str, key: &str) -> Result<LockGuard, ClientError> {
        self.acquire(namespace, key, LockMode::Exclusive, 0, None)
            .await
    }

    /// Leaves the queue of `namespace`/`key` (idempotent). If the session holds the key (the
    /// cancel raced the grant) the answer carries the hold's token: release it, or keep it.
    /// Sent once the background cancel of a dropped call on the key (if any) was answered.
    pub async fn cancel_wait(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<proto::CancelWaitResponse, ClientError> {
        // After a dropped call's background cancel of the key, so that this one's answer is
        // about the wait of the call still running (the earlier one's is gone by then).
        self.inner.after_cancels(namespace, key).await;
        self.inner.cancel_wait(namespace, key).await
    }

    async fn acquire(
        &self,
        namespace: &str,
        key: &str,
        mode: LockMode,
        wait_ms: u64,
        wait_timeout_ms: Option<u64>,
    ) -> Result<LockGuard, ClientError> {
        let inner = &self.inner;
        inner.after_cancels(namespace, key).await;
        let timeout = inner.cluster.config.rpc_timeout + Duration::from_millis(wait_ms);
        let mut request = proto::AcquireRequest {
            session_id: inner.id,
            request_id: inner.next_request_id(),
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            wait_ms,
            session_secret: inner.secret.as_bytes().to_vec(),
            wait_timeout_ms: wait_timeout_ms.unwrap_or(0),
            mode: match mode {
                LockMode::Exclusive => proto::LockMode::Exclusive as i32,
                LockMode::Shared => proto::LockMode::Shared as i32,
                LockMode::Permit => proto::LockMode::Permit as i32,
            },
        };
        loop {
            if let Some(error) = inner.lost_error() {
                return Err(error);
            }
            let answer =
                inner
                    .cluster
                    .lock_call(
                        "acquire",
                        request.clone(),
                        timeout,
                        stream::ACQUIRE,
                        |channel, request| async move {
                            LockClient::new(channel).acquire(request).await
                        },
                    )
                    .await;
            let response = match answer {
                Ok((response, _)) => response,
                // Other requests of this session pushed our id out of the dedup window while
                // we waited: the wait itself stays queued, so ask again under a new id.
                Err(error) if wait_ms > 0 && error.rule() == Some(REQUEST_TOO_OLD) => {
                    request.request_id = inner.next_request_id();
                    continue;
                }
                Err(error) => return Err(inner.note(error)),
            };
            let kind = response
                .reply
                .and_then(|r| r.kind)
                .ok_or(ClientError::BadAnswer {
                    what: "acquire",
                    field: "reply.kind",
                })?;
            match kind {
                acquire_reply::Kind::Granted(granted) => {
                    if let Some(error) = inner.lost_error() {
                        return Err(error);
                    }
                    return Ok(LockGuard::new(
                        self.inner.clone(),
                        namespace,
                        key,
                        Token(granted.token),
                    )
                    .with_slot(granted.slot));
                }
                acquire_reply::Kind::Busy(busy) => {
                    return Err(ClientError::Held {
                        namespace: namespace.to_owned(),
                        key: key.to_owned(),
                        holder_session_id: busy.holder_session_id,
                        token: busy.token,
                    })
                }
                // Still queued: the same request again (same id), the server holds it again.
                acquire_reply::Kind::Queued(_) => {}
            }
        }
    }

    /// Releases a hold of this session by token (for tools; a guard does this itself).
    pub async fn release(
        &self,
        namespace: &str,
        key: &str,
        token: Token,
    ) -> Result<proto::ReleaseResponse, ClientError> {
        self.inner.release(namespace, key, token).await
    }

    /// Closes the session: the server releases its holds and removes its waits at once. Every
    /// guard of the session reports [`LostReason::Closed`].
    pub async fn close(self) -> Result<Closed, ClientError> {
        let answer = close_session(&self.inner.cluster, self.inner.id, &self.inner.secret).await;
        self.inner.liveness.lose(LostReason::Closed);
        let response = answer.map_err(|e| self.inner.note(e))?;
        Ok(Closed {
            holds_released: response.holds_released,
            waits_removed: response.waits_removed,
        })
    }
}

/// The events of one session ([`Session::events`]): state changes and holds lost, in order.
/// Up to 64 events are kept for a reader; one further behind skips the oldest (never the final
/// `Lost`, which is the last event; [`Session::state`] always has the newest state).
pub struct SessionEvents {
    events: broadcast::Receiver<SessionEvent>,
    ended: bool,
}

impl SessionEvents {
    /// The next event; `None` once the session is lost (after its `Lost` event) or gone.
    pub async fn next(&mut self) -> Option<SessionEvent> {
        if self.ended {
            return None;
        }
        loop {
            match self.events.recv().await {
                Ok(event) => {
                    self.ended = matches!(event, SessionEvent::State(SessionState::Lost(_)));
                    return Some(event);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => {
                    self.ended = true;
                    return None;
                }
            }
        }
    }
}
