//! The background task that keeps one session alive over a `KeepAlive` stream, and decides
//! when the session must be considered lost.
//!
//! The deadline is `send time of the last acknowledged keepalive + ttl - margin` (the server
//! counts the same TTL from its *receipt*, which is later, and the margin, `clock_drift_ppm`
//! of the TTL, covers a leader clock running that much faster), so the client stops claiming
//! its locks before the leader can expire the session. A keepalive is sent every `ttl / 3`; a stream that leaves
//! one unanswered for `rpc_timeout`, ends, or fails is reopened at the next replica (or at the
//! leader a hint names). Whatever happens to the stream, the deadline watch fires on time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

use super::cluster::Cluster;
use super::error::{classify, LostReason, Retry, UNKNOWN_SESSION};
use crate::proto::{self, lock_client::LockClient};
use crate::secret::SessionSecret;
use crate::status::error_detail;

/// Keepalives in flight on one stream (unanswered); more means the stream is stuck.
pub(crate) const KEEPALIVES_IN_FLIGHT_MAX: usize = 4;

/// A renewal of a session the server acknowledged: the session's creation, then every
/// acknowledged keepalive (see [`crate::client::Session::keepalive_acks`]).
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
        }
    }

    /// Marks the session lost (first reason wins). Answers whether this call set it.
    pub(crate) fn lose(&self, reason: LostReason) -> bool {
        self.lost.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        })
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
        };
        {
            let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
            let candidate = ack.deadline();
            if candidate > *deadline {
                *deadline = candidate;
            }
        }
        self.acks.send_replace(ack);
    }

    fn expired_ttl_ms(&self) -> LostReason {
        LostReason::KeepAliveExpired {
            ttl_ms: super::cluster::millis(self.ttl),
        }
    }
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
    tokio::select! {
        () = watch_deadline(&liveness) => {
            liveness.lose(liveness.expired_ttl_ms());
        }
        reason = keep_alive(&cluster, session_id, &secret, &liveness) => {
            liveness.lose(reason);
        }
        _ = lost.wait_for(Option::is_some) => {}
    }
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

/// Keeps streams open, one after the other; returns only when the server says the session is
/// gone.
async fn keep_alive(
    cluster: &Cluster,
    session_id: u64,
    secret: &SessionSecret,
    liveness: &Liveness,
) -> LostReason {
    let mut seq = 0u64;
    let mut backoff = cluster.config.backoff_min;
    loop {
        let (index, _, channel) = cluster.current();
        let session = (session_id, secret);
        match run_stream(cluster, channel, session, liveness, &mut seq).await {
            StreamEnd::Lost(reason) => return reason,
            StreamEnd::Redirect(hint) => {
                cluster.follow(index, &hint);
                backoff = cluster.config.backoff_min;
            }
            StreamEnd::Broken => {
                cluster.rotate(index);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(cluster.config.backoff_max.max(backoff));
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
    let rpc_timeout = cluster.config.rpc_timeout;
    let (sender, receiver) = mpsc::channel(KEEPALIVES_IN_FLIGHT_MAX);
    let mut in_flight: VecDeque<(u64, Instant)> = VecDeque::new();
    // The first keepalive goes out with the stream's opening.
    *seq += 1;
    in_flight.push_back((*seq, Instant::now()));
    if sender.try_send(keepalive(*seq)).is_err() {
        return StreamEnd::Broken;
    }
    let mut request = cluster.request(ReceiverStream::new(receiver), rpc_timeout);
    // A stream lives long: no deadline on it as a whole (each keepalive is checked instead).
    request.metadata_mut().remove("grpc-timeout");
    let opened =
        tokio::time::timeout(rpc_timeout, LockClient::new(channel).keep_alive(request)).await;
    let mut responses = match opened {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => return stream_error(&status),
        Err(_) => return StreamEnd::Broken,
    };
    let interval = (liveness.ttl / 3).max(Duration::from_millis(1));
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                let now = Instant::now();
                let stuck = in_flight.front().is_some_and(|(_, sent)| now - *sent >= rpc_timeout);
                if stuck || in_flight.len() >= KEEPALIVES_IN_FLIGHT_MAX {
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

fn stream_error(status: &tonic::Status) -> StreamEnd {
    if error_detail(status).is_some_and(|d| d.rule == UNKNOWN_SESSION) {
        return StreamEnd::Lost(LostReason::UnknownSession);
    }
    match classify(status) {
        Retry::Redirect(hint) => StreamEnd::Redirect(hint),
        _ => StreamEnd::Broken,
    }
}
