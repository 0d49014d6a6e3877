//! The client's end of the `Session` stream (docs/api.md, "The session stream"): one stream per
//! [`super::Client`] (per cluster connection) carries the keepalives, acquires, releases, cancels
//! and closes of all its sessions, each tagged with a `seq` of the stream and answered by the
//! response with that `seq`.
//!
//! The stream is a transport under the retry loop of [`Cluster::call`], not a second one: a
//! request goes to the stream of the replica the loop chose (opened on first use, with the
//! client's credentials as its metadata), and its answer, or its refusal turned back into the
//! very [`Status`] the unary call would have answered ([`status_from_proto`]), goes back to the
//! loop, which follows hints, rotates and retries with the same request id exactly as for a
//! unary call. When the stream ends or fails, every request in flight on it fails with that
//! status and is retried by its own loop (on a new stream); a keepalive left unanswered for its
//! attempt timeout abandons the stream ([`SessionStreams::abandon`]), as it abandons a stuck
//! `KeepAlive` stream.
//!
//! Each stream asks for the server's pushes (`subscribe`, its first request): a hold of a
//! session it carries lost to a force-release without revocation, or the session's end, is
//! applied as soon as it arrives, by the very code that applies the same facts from a
//! keepalive answer ([`Liveness::note_holds_lost`], [`Liveness::lose`]), to the sessions whose
//! keepalive tasks registered with [`SessionStreams::carry`]. A server from before pushes
//! answers the `subscribe` with an error that nobody waits for, and sends none.
//!
//! [`Transport::Unary`] keeps the unary calls (and one `KeepAlive` stream per session), for
//! A/B measurements and for servers without the `Session` method; a server that answers the
//! stream `UNIMPLEMENTED` is served by the unary calls anyway.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, Streaming};

use super::cluster::Cluster;
use super::error::{ClientError, LostReason, SessionEnd};
use super::keepalive::Liveness;
use picket_proto::proto::{
    self, lock_client::LockClient, session_event, session_request::Request as In,
    session_response::Response as Out,
};
use picket_proto::session_stream::status_from_proto;

/// Requests queued for a stream's sending side at most (a caller waits for room beyond).
const REQUESTS_QUEUED_MAX: usize = 256;

/// How a [`super::Client`] sends keepalives, acquires, releases, cancels and closes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// One `Session` stream per client for all of them (the default).
    #[default]
    Stream,
    /// The unary calls, and one `KeepAlive` stream per session.
    Unary,
}

/// The client's `Session` stream: at most one open, to the replica last used.
#[derive(Default)]
pub(crate) struct SessionStreams {
    open: Mutex<Option<Arc<Conn>>>,
    /// Held while a stream is being opened, so that callers arriving meanwhile use it rather
    /// than open their own (never held by [`SessionStreams::abandon`], which must not wait).
    opening: tokio::sync::Mutex<()>,
    /// The sessions kept alive on this client's streams, for the server's pushes about them.
    carried: Arc<Carried>,
}

/// session id -> what its pushes apply to.
type Carried = Mutex<BTreeMap<u64, Weak<Liveness>>>;

/// A session registered for pushes, unregistered on drop.
pub(crate) struct CarryGuard {
    carried: Arc<Carried>,
    session_id: u64,
}

impl Drop for CarryGuard {
    fn drop(&mut self) {
        carried(&self.carried).remove(&self.session_id);
    }
}

fn carried(carried: &Carried) -> std::sync::MutexGuard<'_, BTreeMap<u64, Weak<Liveness>>> {
    carried.lock().unwrap_or_else(|e| e.into_inner())
}

/// One open `Session` stream.
struct Conn {
    uri: String,
    requests: mpsc::Sender<proto::SessionRequest>,
    shared: Arc<Shared>,
    reader: tokio::task::JoinHandle<()>,
}

/// What a stream's callers share with its reading task.
#[derive(Default)]
struct Shared {
    /// seq -> the caller waiting for its answer.
    waiting: Mutex<BTreeMap<u64, oneshot::Sender<Out>>>,
    /// The last seq used on this stream (seqs are non-zero and rise).
    seq_last: AtomicU64,
    /// Why the stream ended, once it did: every caller in flight and later gets it.
    ended: Mutex<Option<Status>>,
}

impl Shared {
    fn waiting(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, oneshot::Sender<Out>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ended(&self) -> Option<Status> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends the stream for its callers (the first reason wins): those waiting get `why`.
    fn end(&self, why: Status) {
        self.ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
        // Dropping the senders wakes every waiting caller, who then reads `ended`.
        std::mem::take(&mut *self.waiting());
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Forgets a caller's seq when its call ends, answered or not (a call dropped by its timeout).
struct Forget<'a>(&'a Shared, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.waiting().remove(&self.1);
    }
}

impl SessionStreams {
    /// Sends `request` on the stream to `uri` (opening one on `channel` if there is none, or
    /// the open one goes elsewhere or ended) and answers its answer, or its refusal as the
    /// unary call's status.
    pub(crate) async fn call(
        &self,
        cluster: &Cluster,
        uri: &str,
        channel: Channel,
        request: In,
    ) -> Result<Out, Status> {
        let conn = self.conn_to(cluster, uri, channel).await?;
        let shared = &conn.shared;
        let seq = shared.seq_last.fetch_add(1, Ordering::Relaxed) + 1;
        let (answer_tx, answer_rx) = oneshot::channel();
        {
            let mut waiting = shared.waiting();
            if let Some(why) = shared.ended() {
                return Err(why);
            }
            waiting.insert(seq, answer_tx);
        }
        let _forget = Forget(shared, seq);
        let message = proto::SessionRequest {
            seq,
            request: Some(request),
        };
        if conn.requests.send(message).await.is_err() {
            return Err(shared.ended().unwrap_or_else(stream_gone));
        }
        match answer_rx.await {
            Ok(Out::Error(error)) => Err(status_from_proto(&error)),
            Ok(answer) => Ok(answer),
            Err(_) => Err(shared.ended().unwrap_or_else(stream_gone)),
        }
    }

    /// Gives up the stream to `uri`, if it is the open one: its callers in flight fail (and
    /// retry on a new stream). For a stream that left a keepalive unanswered too long.
    pub(crate) fn abandon(&self, uri: &str, why: Status) {
        let abandoned = {
            let mut open = self.open();
            match open.as_ref() {
                Some(conn) if conn.uri == uri => open.take(),
                _ => None,
            }
        };
        if let Some(conn) = abandoned {
            conn.shared.end(why);
        }
    }

    /// Registers `session_id` for the pushes of this client's streams, while the guard lives.
    pub(crate) fn carry(&self, session_id: u64, liveness: &Arc<Liveness>) -> CarryGuard {
        carried(&self.carried).insert(session_id, Arc::downgrade(liveness));
        CarryGuard {
            carried: self.carried.clone(),
            session_id,
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Option<Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open stream to `uri`, if it has not ended.
    fn live_to(&self, uri: &str) -> Option<Arc<Conn>> {
        self.open()
            .as_ref()
            .filter(|conn| conn.uri == uri && conn.shared.ended().is_none())
            .cloned()
    }

    async fn conn_to(
        &self,
        cluster: &Cluster,
        uri: &str,
        channel: Channel,
    ) -> Result<Arc<Conn>, Status> {
        if let Some(conn) = self.live_to(uri) {
            return Ok(conn);
        }
        let _opening = self.opening.lock().await;
        if let Some(conn) = self.live_to(uri) {
            return Ok(conn); // opened by the caller before us
        }
        let old = self.open().take();
        if let Some(old) = old {
            // Moved to another replica: what is still in flight there is retried here.
            old.shared
                .end(Status::unavailable(format!("{}: left for {uri}", old.uri)));
        }
        let (requests, queued) = mpsc::channel(REQUESTS_QUEUED_MAX);
        let shared = Arc::new(Shared::default());
        // The first request asks for pushes; its answer is waited for by nobody.
        let subscribe = proto::SessionRequest {
            seq: shared.seq_last.fetch_add(1, Ordering::Relaxed) + 1,
            request: Some(In::Subscribe(proto::SubscribeRequest {})),
        };
        let queued_first = requests.try_send(subscribe);
        assert!(
            queued_first.is_ok(),
            "a new channel has room: {queued_first:?}"
        );
        let mut request = cluster.request(ReceiverStream::new(queued), cluster.config.rpc_timeout);
        // A stream lives long: no deadline on it as a whole (each request has its own).
        request.metadata_mut().remove("grpc-timeout");
        let responses = LockClient::new(channel)
            .session(request)
            .await?
            .into_inner();
        let carried = self.carried.clone();
        let reader = tokio::spawn(read(responses, shared.clone(), carried, uri.to_owned()));
        let conn = Arc::new(Conn {
            uri: uri.to_owned(),
            requests,
            shared,
            reader,
        });
        *self.open() = Some(conn.clone());
        Ok(conn)
    }
}

fn stream_gone() -> Status {
    Status::unavailable("the session stream ended")
}

/// Hands each answer to the caller waiting for its seq, and applies each push, until the
/// stream ends.
async fn read(
    mut responses: Streaming<proto::SessionResponse>,
    shared: Arc<Shared>,
    carried: Arc<Carried>,
    uri: String,
) {
    let why = loop {
        match responses.message().await {
            Ok(Some(answer)) => {
                let Some(response) = answer.response else {
                    continue; // an answer without a body (a newer server's kind): not for us
                };
                if let (0, Out::Event(event)) = (answer.seq, &response) {
                    apply_push(&carried, event);
                    continue;
                }
                // A caller that gave up (its timeout) is no longer waiting: dropped.
                if let Some(waiting) = shared.waiting().remove(&answer.seq) {
                    let _ = waiting.send(response);
                }
            }
            Ok(None) => break Status::unavailable(format!("{uri}: the session stream ended")),
            Err(status) => break status,
        }
    };
    shared.end(why);
}

/// Applies a push about a session of this client as the same fact from a keepalive answer is
/// applied: a hold lost ends that guard; the session's end loses the session.
fn apply_push(carried_sessions: &Carried, event: &proto::SessionEvent) {
    let liveness = carried(carried_sessions)
        .get(&event.session_id)
        .and_then(Weak::upgrade);
    let Some(liveness) = liveness else {
        return; // no longer kept alive here
    };
    match &event.kind {
        Some(session_event::Kind::HoldLost(hold)) => {
            liveness.note_holds_lost(std::slice::from_ref(hold));
        }
        Some(session_event::Kind::Ended(ended)) => {
            liveness.lose(lost_reason(ended, event.revision));
        }
        None => {} // a newer server's kind: its keepalive answers say what matters
    }
}

/// The reason a pushed session end gives.
fn lost_reason(ended: &session_event::SessionEnded, revision: u64) -> LostReason {
    let cause = match proto::ReleaseCause::try_from(ended.cause) {
        Ok(proto::ReleaseCause::SessionClosed) => SessionEnd::Closed,
        Ok(proto::ReleaseCause::SessionExpired) => SessionEnd::Expired,
        Ok(proto::ReleaseCause::SessionRevoked) => SessionEnd::Revoked {
            force_release_id: ended.force_release_id,
        },
        // A cause this client does not know: gone, as a keepalive answer would say.
        _ => return LostReason::Revoked,
    };
    LostReason::Ended { cause, revision }
}

impl Cluster {
    /// One lock call (`what`) through the retry loop of [`Cluster::call`], on the `Session`
    /// stream or, with [`Transport::Unary`] (or a server without the stream), by the unary call
    /// `unary`. `kind` makes the stream request of a message and reads the stream answer.
    pub(crate) async fn lock_call<Req, Resp, U, Fut>(
        &self,
        what: &'static str,
        message: Req,
        timeout: Duration,
        (wrap, unwrap): Kind<Req, Resp>,
        unary: U,
    ) -> Result<(Resp, Instant), ClientError>
    where
        Req: Clone,
        U: Fn(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        if self.config.transport == Transport::Unary {
            return self.call(what, message, timeout, unary).await;
        }
        let unary = &unary;
        self.call_at(what, message, timeout, |uri, channel, request| async move {
            let message = request.get_ref().clone();
            match self
                .streams
                .call(self, &uri, channel.clone(), wrap(message))
                .await
            {
                Ok(out) => unwrap(out).map(Response::new).ok_or_else(|| {
                    Status::internal(format!("{uri}: {what} answered with another kind"))
                }),
                // A server from before the stream: this attempt goes unary.
                Err(status) if status.code() == Code::Unimplemented => {
                    unary(channel, request).await
                }
                Err(status) => Err(status),
            }
        })
        .await
    }
}

/// How each lock call goes on the stream: its request, and its answer read back.
pub(crate) type Kind<Req, Resp> = (fn(Req) -> In, fn(Out) -> Option<Resp>);

pub(crate) const ACQUIRE: Kind<proto::AcquireRequest, proto::AcquireResponse> =
    (In::Acquire, |out| match out {
        Out::Acquire(response) => Some(response),
        _ => None,
    });
pub(crate) const RELEASE: Kind<proto::ReleaseRequest, proto::ReleaseResponse> =
    (In::Release, |out| match out {
        Out::Release(response) => Some(response),
        _ => None,
    });
pub(crate) const CANCEL_WAIT: Kind<proto::CancelWaitRequest, proto::CancelWaitResponse> =
    (In::CancelWait, |out| match out {
        Out::CancelWait(response) => Some(response),
        _ => None,
    });
pub(crate) const CLOSE_SESSION: Kind<proto::CloseSessionRequest, proto::CloseSessionResponse> =
    (In::CloseSession, |out| match out {
        Out::CloseSession(response) => Some(response),
        _ => None,
    });
