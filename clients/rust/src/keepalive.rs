//! The background task that keeps one session alive, on the client's `Session` stream or (with
//! `Transport::Unary`) over a `KeepAlive` stream of its own, and decides when the session must
//! be considered lost.
//!
//! The deadline is `send time of the last acknowledged keepalive + ttl - margin` (the server
//! counts the same TTL from its *receipt*, which is later, and the margin, `clock_drift_ppm`
//! of the TTL, covers a leader clock running that much faster), so the client stops claiming
//! its locks before the leader can expire the session. A keepalive is sent every `ttl / 3`; a stream that leaves
//! one unanswered for the keepalive attempt timeout (`min(rpc_timeout, ttl / 4)`), ends, or
//! fails is reopened at the next replica (or at the leader a hint names). Whatever happens to
//! the stream, the deadline watch fires on time, and the jeopardy watch at half the TTL.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

use super::cluster::Cluster;
use super::error::{classify, LostReason, Retry, UNKNOWN_SESSION};
use super::state::{self, SessionEvent, SessionState};
use super::stream::Transport;
use picket_proto::proto::{
    self, lock_client::LockClient, session_request::Request as In,
    session_response::Response as Out,
};
use picket_proto::secret::SessionSecret;
use picket_proto::status::error_detail;

/// Redirects a session's keepalive follows in a row without a backoff (a hint loop).
const REDIRECTS_IN_A_ROW_MAX: u32 = 3;

/// Keepalives in flight on one stream (unanswered); more means the stream is stuck.
pub(crate) const KEEPALIVES_IN_FLIGHT_MAX: usize = 4;

/// Holds reported lost remembered per session to dedupe the server's repeats (it sends its
/// newest 16 in every answer); the oldest are forgotten first.
const HOLDS_LOST_REMEMBERED_MAX: usize = 256;

/// Session events buffered per [`crate::SessionEvents`] reader; a reader further behind
/// skips the oldest.
pub(crate) const SESSION_EVENTS_BUFFERED: usize = 64;

/// A hold of this session: namespace, key, token.
pub(crate) type HoldKey = (String, String, u64);

/// A renewal of a session the server acknowledged: the session's creation, then every
/// acknowledged keepalive (see [`crate::Session::keepalive_acks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepAliveAck {
    pub session_id: u64,
    /// When the request was sent (the client's deadline is `sent_at + ttl - margin`, see
    /// [`KeepAliveAck::deadline`]).
    pub sent_at: Instant,
    /// When its answer arrived.
    pub acked_at: Instant,
    /// The TTL the server counts from its receipt of the request.
    pub ttl: Duration,
    /// The part of the TTL the client gives up early for clock-rate drift
    /// (`ClientConfig::clock_drift_ppm`).
    pub margin: Duration,
    /// Keepalives of the session acknowledged so far, this one included (0: the creation).
    pub keepalives: u64,
}

impl KeepAliveAck {
    /// The session's deadline after this renewal: `sent_at + ttl - margin`.
    pub fn deadline(&self) -> Instant {
        self.sent_at + self.ttl.saturating_sub(self.margin)
    }
}

/// `ppm` parts per million of `ttl`.
pub(crate) fn drift_margin(ttl: Duration, ppm: u32) -> Duration {
    let nanos = ttl.as_nanos() * u128::from(ppm) / 1_000_000;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// What the session shares with its keepalive task.
pub(crate) struct Liveness {
    /// `None` while alive; the first reason to be set wins and is final.
    pub(crate) lost: watch::Sender<Option<LostReason>>,
    /// `last acknowledged send + ttl - margin`: never decreases.
    pub(crate) deadline: Mutex<Instant>,
    pub(crate) ttl: Duration,
    /// Given up early for clock-rate drift.
    pub(crate) margin: Duration,
    /// The newest acknowledged renewal (a store without subscribers: no cost when unused).
    pub(crate) acks: watch::Sender<KeepAliveAck>,
    /// Healthy, Jeopardy, Safe, Lost (see `state.rs`); every change is also sent to `events`.
    pub(crate) state: watch::Sender<SessionState>,
    /// State changes and holds lost, for [`crate::SessionEvents`] readers.
    pub(crate) events: broadcast::Sender<SessionEvent>,
    /// The live guards' holds, each with its own loss signal (set by the session's loss or by
    /// a force-release of that hold), and the holds the server reported lost (by revision of
    /// the release, for dedup).
    holds: Mutex<Holds>,
}

#[derive(Default)]
struct Holds {
    guards: BTreeMap<HoldKey, watch::Sender<Option<LostReason>>>,
    lost: BTreeMap<HoldKey, LostReason>,
}

impl Liveness {
    /// A session created by a request sent at `created.sent_at`.
    pub(crate) fn new(created: KeepAliveAck) -> Liveness {
        Liveness {
            lost: watch::channel(None).0,
            deadline: Mutex::new(created.deadline()),
            ttl: created.ttl,
            margin: created.margin,
            acks: watch::channel(created).0,
            state: watch::channel(SessionState::Healthy).0,
            events: broadcast::channel(SESSION_EVENTS_BUFFERED).0,
            holds: Mutex::new(Holds::default()),
        }
    }

    /// Moves the state as `transition` says (if it says), and tells the event readers.
    fn transition(&self, transition: impl FnOnce(&SessionState) -> Option<SessionState>) {
        let mut changed = None;
        self.state
            .send_if_modified(|current| match transition(current) {
                Some(next) => {
                    *current = next.clone();
                    changed = Some(next);
                    true
                }
                None => false,
            });
        if let Some(next) = changed {
            // No readers is fine: the state watch keeps the newest.
            let _ = self.events.send(SessionEvent::State(next));
        }
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, Holds> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the session lost (first reason wins), and with it every guard. Answers whether this
    /// call set it.
    pub(crate) fn lose(&self, reason: LostReason) -> bool {
        // The state moves first (its watch decides, atomically, who loses the session), then
        // the guards and last the session's loss signal: whoever wakes on `lost()` sees the
        // state `Lost` and every guard lost.
        let mut set = false;
        self.transition(|current| {
            let next = state::on_lost(current, &reason);
            set = next.is_some();
            next
        });
        if set {
            // Under the holds' lock, so a guard registered now either is set here or sees the
            // session lost (`watch_hold`).
            let holds = self.holds();
            for signal in holds.guards.values() {
                set_once(signal, &reason);
            }
            self.lost.send_replace(Some(reason));
        }
        set
    }

    /// Registers a guard's hold; answers its loss signal (already set if the session or the
    /// hold is lost).
    pub(crate) fn watch_hold(&self, hold: HoldKey) -> watch::Receiver<Option<LostReason>> {
        let mut holds = self.holds();
        let already = holds
            .lost
            .get(&hold)
            .cloned()
            .or_else(|| self.lost_reason());
        let signal = holds
            .guards
            .entry(hold)
            .or_insert_with(|| watch::channel(None).0);
        if let Some(reason) = already {
            set_once(signal, &reason);
        }
        signal.subscribe()
    }

    /// The guard of `hold` is gone (released or dropped).
    pub(crate) fn forget_hold(&self, hold: &HoldKey) {
        self.holds().guards.remove(hold);
    }

    /// Notes the holds a keepalive answer says this session lost to force-release and fires the
    /// signal of each matching guard (once: repeats are ignored).
    pub(crate) fn note_holds_lost(&self, lost: &[proto::LostHold]) {
        if lost.is_empty() {
            return;
        }
        let mut holds = self.holds();
        for hold in lost {
            let key = (hold.namespace.clone(), hold.key.clone(), hold.token);
            if holds.lost.contains_key(&key) {
                continue;
            }
            let reason = LostReason::ForceReleased {
                revision: hold.revision,
                force_release_id: hold.force_release_id,
            };
            if let Some(signal) = holds.guards.get(&key) {
                set_once(signal, &reason);
            }
            let _ = self.events.send(SessionEvent::HoldLost {
                namespace: key.0.clone(),
                key: key.1.clone(),
                token: key.2,
                reason: reason.clone(),
            });
            if holds.lost.len() >= HOLDS_LOST_REMEMBERED_MAX {
                holds.lost.pop_first();
            }
            holds.lost.insert(key, reason);
        }
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.lost.borrow().clone()
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Alive: not marked lost and the deadline not passed (checked against the clock, so a
    /// caller never sees a lock as held past its deadline even if the task is late).
    pub(crate) fn is_alive(&self) -> bool {
        self.lost_reason().is_none() && Instant::now() < self.deadline()
    }

    fn extend(&self, session_id: u64, sent_at: Instant, ttl: Duration) {
        let ack = KeepAliveAck {
            session_id,
            sent_at,
            acked_at: Instant::now(),
            ttl,
            margin: self.margin,
            keepalives: self.acks.borrow().keepalives + 1,
        };
        {
            let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
            let candidate = ack.deadline();
            if candidate > *deadline {
                *deadline = candidate;
            }
        }
        self.acks.send_replace(ack);
        if self.lost_reason().is_none() {
            self.transition(state::on_ack);
        }
    }

    fn expired_ttl_ms(&self) -> LostReason {
        LostReason::KeepAliveExpired {
            ttl_ms: super::cluster::millis(self.ttl),
        }
    }
}

fn set_once(signal: &watch::Sender<Option<LostReason>>, reason: &LostReason) {
    signal.send_if_modified(|current| {
        if current.is_some() {
            return false;
        }
        *current = Some(reason.clone());
        true
    });
}

/// Runs until the session is lost (by any cause). Marks it lost when the deadline passes or the
/// server says so.
pub(crate) async fn run(
    cluster: Arc<Cluster>,
    session_id: u64,
    secret: SessionSecret,
    liveness: Arc<Liveness>,
) {
    let mut lost = liveness.lost.subscribe();
    // The session stream's pushes about this session apply to `liveness` while this runs.
    let _carried = cluster.streams.carry(session_id, &liveness);
    // Biased (checked in order): when two are ready at once, the same one wins every run (an
    // unbiased select draws from a per-thread random source, which the simulator's seed does
    // not reach).
    tokio::select! {
        biased;
        () = watch_deadline(&liveness) => {
            liveness.lose(liveness.expired_ttl_ms());
        }
        reason = keep_alive(&cluster, session_id, &secret, &liveness) => {
            liveness.lose(reason);
        }
        _ = lost.wait_for(Option::is_some) => {}
        never = watch_jeopardy(&liveness) => match never {},
    }
}

/// Puts the session in jeopardy when half its TTL passes after the send of the newest
/// acknowledged keepalive without a newer one (see `state.rs`); the way back (`Safe`) is taken
/// by the acknowledgement itself. Runs until the session's task ends.
async fn watch_jeopardy(liveness: &Liveness) -> std::convert::Infallible {
    let mut acks = liveness.acks.subscribe();
    loop {
        let newest = *acks.borrow_and_update();
        tokio::time::sleep_until(state::jeopardy_at(&newest)).await;
        if !acks.has_changed().unwrap_or(false) {
            liveness.transition(|current| state::on_silence(current, &newest, Instant::now()));
            if acks.changed().await.is_err() {
                // The sender lives in `liveness`, which outlives this task.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The timeout of one keepalive attempt (opening a stream, or one keepalive on it unanswered):
/// `rpc_timeout`, but at most a quarter of the TTL. A keepalive sent `ttl / 3` after the newest
/// acknowledged one is given up at `ttl / 3 + ttl / 4` at the latest, which leaves more than
/// another whole attempt (`ttl / 4`, plus a backoff) at the next replica before the deadline
/// (`ttl` less the drift margin): a leader failover shorter than that keeps the session.
pub fn keepalive_attempt_timeout(rpc_timeout: Duration, ttl: Duration) -> Duration {
    rpc_timeout.min(ttl / 4).max(Duration::from_millis(1))
}

/// The longest pause between reopening attempts of the keepalive stream: `backoff_max`, but at
/// most a tenth of the TTL (a 1 s backoff must not eat a 1 s TTL).
fn keepalive_backoff_max(backoff_max: Duration, ttl: Duration) -> Duration {
    backoff_max.min(ttl / 10).max(Duration::from_millis(1))
}

/// Returns once `now >= deadline` (the deadline may move later while it sleeps).
async fn watch_deadline(liveness: &Liveness) {
    loop {
        let deadline = liveness.deadline();
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// How one stream ended.
enum StreamEnd {
    Lost(LostReason),
    Redirect(String),
    Broken,
}

/// Keeps the session alive until the server says it is gone: on the client's `Session` stream
/// ([`Transport::Stream`]), else (or against a server without it) on `KeepAlive` streams.
async fn keep_alive(
    cluster: &Cluster,
    session_id: u64,
    secret: &SessionSecret,
    liveness: &Liveness,
) -> LostReason {
    if cluster.config.transport == Transport::Stream {
        if let Some(reason) =
            keep_alive_on_session_stream(cluster, session_id, secret, liveness).await
        {
            return reason;
        }
    }
    keep_alive_on_keepalive_streams(cluster, session_id, secret, liveness).await
}

/// One keepalive every `ttl / 3` on the client's `Session` stream, each given up after the
/// keepalive attempt timeout (which abandons the stream, as a stuck `KeepAlive` stream is
/// abandoned); a failure moves on as one on a `KeepAlive` stream does (a hint followed, else
/// the next replica after a backoff). Returns the reason when the server says the session is
/// gone, or `None` when the server has no `Session` method.
async fn keep_alive_on_session_stream(
    cluster: &Cluster,
    session_id: u64,
    secret: &SessionSecret,
    liveness: &Liveness,
) -> Option<LostReason> {
    let attempt = keepalive_attempt_timeout(cluster.config.rpc_timeout, liveness.ttl);
    let interval = (liveness.ttl / 3).max(Duration::from_millis(1));
    let backoff_max = keepalive_backoff_max(cluster.config.backoff_max, liveness.ttl);
    let backoff_min = cluster.config.backoff_min.min(backoff_max);
    let mut backoff = backoff_min;
    let mut redirects_in_a_row = 0u32;
    let mut seq = 0u64;
    loop {
        seq += 1;
        let (index, uri, channel) = cluster.current();
        let keepalive = proto::KeepAliveRequest {
            session_id,
            seq,
            session_secret: secret.as_bytes().to_vec(),
        };
        let sent_at = Instant::now();
        let call = cluster
            .streams
            .call(cluster, &uri, channel, In::KeepAlive(keepalive));
        let end = match tokio::time::timeout(attempt, call).await {
            Ok(Ok(Out::KeepAlive(answer))) if answer.session_id == session_id => {
                if answer.lost {
                    return Some(LostReason::Revoked);
                }
                if let Some(error) = answer.error {
                    let (rule, message) = (error.rule, error.message);
                    return Some(LostReason::KeepAliveRefused { rule, message });
                }
                liveness.note_holds_lost(&answer.lost_holds);
                liveness.extend(session_id, sent_at, Duration::from_millis(answer.ttl_ms));
                backoff = backoff_min;
                redirects_in_a_row = 0;
                tokio::time::sleep_until(sent_at + interval).await;
                continue;
            }
            // Not an answer to this keepalive (a server bug): as a broken stream.
            Ok(Ok(_)) => StreamEnd::Broken,
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => return None,
            Ok(Err(status)) => stream_error(&status),
            Err(_) => {
                let why = tonic::Status::deadline_exceeded(format!(
                    "{uri}: a keepalive went unanswered for {} ms",
                    attempt.as_millis()
                ));
                cluster.streams.abandon(&uri, why);
                StreamEnd::Broken
            }
        };
        match end {
            StreamEnd::Lost(reason) => return Some(reason),
            StreamEnd::Redirect(hint) => {
                cluster.follow(index, &hint);
                backoff = backoff_min;
                if redirects_in_a_row < REDIRECTS_IN_A_ROW_MAX {
                    redirects_in_a_row += 1;
                    continue;
                }
            }
            StreamEnd::Broken => cluster.rotate(index),
        }
        redirects_in_a_row = 0;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(backoff_max);
    }
}

/// Keeps `KeepAlive` streams open, one after the other; returns only when the server says the
/// session is gone.
async fn keep_alive_on_keepalive_streams(
    cluster: &Cluster,
    session_id: u64,
    secret: &SessionSecret,
    liveness: &Liveness,
) -> LostReason {
    let mut seq = 0u64;
    let backoff_max = keepalive_backoff_max(cluster.config.backoff_max, liveness.ttl);
    let backoff_min = cluster.config.backoff_min.min(backoff_max);
    let mut backoff = backoff_min;
    loop {
        let (index, _, channel) = cluster.current();
        let session = (session_id, secret);
        let renewed_before = liveness.deadline();
        let end = run_stream(cluster, channel, session, liveness, &mut seq).await;
        if liveness.deadline() > renewed_before {
            // The stream renewed the session: its failure starts a new series of attempts.
            backoff = backoff_min;
        }
        match end {
            StreamEnd::Lost(reason) => return reason,
            StreamEnd::Redirect(hint) => {
                cluster.follow(index, &hint);
                backoff = backoff_min;
            }
            StreamEnd::Broken => {
                cluster.rotate(index);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(backoff_max);
            }
        }
    }
}

async fn run_stream(
    cluster: &Cluster,
    channel: tonic::transport::Channel,
    (session_id, secret): (u64, &SessionSecret),
    liveness: &Liveness,
    seq: &mut u64,
) -> StreamEnd {
    let keepalive = |seq| proto::KeepAliveRequest {
        session_id,
        seq,
        session_secret: secret.as_bytes().to_vec(),
    };
    let attempt = keepalive_attempt_timeout(cluster.config.rpc_timeout, liveness.ttl);
    let (sender, receiver) = mpsc::channel(KEEPALIVES_IN_FLIGHT_MAX);
    let mut in_flight: VecDeque<(u64, Instant)> = VecDeque::new();
    // The first keepalive goes out with the stream's opening.
    *seq += 1;
    in_flight.push_back((*seq, Instant::now()));
    if sender.try_send(keepalive(*seq)).is_err() {
        return StreamEnd::Broken;
    }
    let mut request = cluster.request(ReceiverStream::new(receiver), attempt);
    // A stream lives long: no deadline on it as a whole (each keepalive is checked instead).
    request.metadata_mut().remove("grpc-timeout");
    let opened = tokio::time::timeout(attempt, LockClient::new(channel).keep_alive(request)).await;
    let mut responses = match opened {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => return stream_error(&status),
        Err(_) => return StreamEnd::Broken,
    };
    let interval = (liveness.ttl / 3).max(Duration::from_millis(1));
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        // The oldest unanswered keepalive gives the stream up `attempt` after its send.
        let stuck_at = in_flight.front().map(|(_, sent)| *sent + attempt);
        tokio::select! {
            () = sleep_until_some(stuck_at) => return StreamEnd::Broken,
            _ = ticker.tick() => {
                let now = Instant::now();
                if in_flight.len() >= KEEPALIVES_IN_FLIGHT_MAX {
                    return StreamEnd::Broken;
                }
                *seq += 1;
                in_flight.push_back((*seq, now));
                if sender.try_send(keepalive(*seq)).is_err() {
                    return StreamEnd::Broken;
                }
            }
            message = responses.message() => match message {
                Ok(Some(answer)) => {
                    if answer.session_id != session_id {
                        continue; // not ours (a server bug): dropped
                    }
                    if answer.lost {
                        return StreamEnd::Lost(LostReason::Revoked);
                    }
                    if let Some(error) = answer.error {
                        let (rule, message) = (error.rule, error.message);
                        return StreamEnd::Lost(LostReason::KeepAliveRefused { rule, message });
                    }
                    liveness.note_holds_lost(&answer.lost_holds);
                    // Acknowledges `seq` and everything sent before it.
                    while let Some(&(sent_seq, sent_at)) = in_flight.front() {
                        if sent_seq > answer.seq {
                            break;
                        }
                        in_flight.pop_front();
                        if sent_seq == answer.seq {
                            let ttl = Duration::from_millis(answer.ttl_ms);
                            liveness.extend(session_id, sent_at, ttl);
                        }
                    }
                }
                Ok(None) => return StreamEnd::Broken,
                Err(status) => return stream_error(&status),
            },
        }
    }
}

/// Sleeps until `at`; never returns for `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn stream_error(status: &tonic::Status) -> StreamEnd {
    if error_detail(status).is_some_and(|d| d.rule == UNKNOWN_SESSION) {
        return StreamEnd::Lost(LostReason::UnknownSession);
    }
    match classify(status) {
        Retry::Redirect(hint) => StreamEnd::Redirect(hint),
        _ => StreamEnd::Broken,
    }
}
