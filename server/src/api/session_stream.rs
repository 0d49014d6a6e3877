//! The `Session` stream (docs/api.md, "The session stream"): one bidirectional stream per client
//! process carries the keepalives, acquires, releases, cancels and closes of all its sessions.
//!
//! Every request goes through the code of the unary call of the same name: keepalives through
//! [`keep_alive_entry`] (as on the `KeepAlive` stream), the others through the `Lock` service's
//! own handler, given a request with the stream's metadata and connection (so the same
//! credentials, roles and validation apply). There is no second implementation of any rule: an
//! error is the unary call's `google.rpc.Status`, carried in the answer
//! ([`status_to_proto`]).
//!
//! Keepalives (and `subscribe`) are answered in order, one at a time, on the stream's task
//! (they are leader-local and quick). Every other request runs as a call of its own inside that
//! same task (a set of futures polled beside the stream's reads, not a task spawned per call),
//! so a waiting Acquire is answered when its wait ends while later requests are answered
//! meanwhile. The stream's metadata and connection certificate are read once and lent to every
//! call, not copied per call. Bounds: at most `session_stream_requests_max` such calls per
//! stream (beyond: that request is answered `busy`, naming the bound), and a bounded outgoing
//! channel (a slow reader holds the answers back instead of growing a buffer).
//!
//! A stream that sends `subscribe` also gets pushes about the sessions it carries
//! ([`crate::api::session_push`]); one that does not gets none.

use std::future::Future;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use picket_proto::error::ConvertError;
use picket_proto::proto::{self, session_request, session_response};
use picket_proto::session_stream::status_to_proto;
use picket_proto::status::busy_status;
use tokio::sync::mpsc;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use crate::api::service::{keep_alive_entry, LockService, StreamSlot};
use crate::api::session_push::Carried;
use crate::api::stream::ChannelStream;
use crate::auth::Caller;
use crate::shutdown::stopped;

/// Answers buffered per `Session` stream.
const SESSION_BUFFER: usize = 256;

type Outgoing = mpsc::Sender<Result<proto::SessionResponse, Status>>;

/// Who is calling on one stream, read once when it opens: every call on it is checked against
/// this, as its unary call checks its own request.
struct Credentials {
    metadata: MetadataMap,
    certificate: Result<Option<Caller>, Status>,
    /// The stream's own principal (the `KeepAlive` stream's check).
    principal: String,
}

/// Opens a `Session` stream for the caller of `request` (authenticated as for `KeepAlive`).
pub(crate) async fn open(
    service: LockService,
    request: Request<Streaming<proto::SessionRequest>>,
) -> Result<Response<ChannelStream<Result<proto::SessionResponse, Status>>>, Status> {
    let api = &service.0;
    let principal = api.auth.lock_caller(&request, None).await?;
    let certificate = api.auth.certificate_caller(&request);
    let slot = StreamSlot::take(
        &api.keepalives,
        api.limits.keepalive_streams_max,
        "keepalive and session",
    )?;
    let (metadata, _, inbound) = request.into_parts();
    let credentials = Credentials {
        metadata,
        certificate,
        principal,
    };
    let (tx, rx) = mpsc::channel(SESSION_BUFFER);
    tokio::spawn(async move {
        let _slot = slot;
        serve(&service, &credentials, inbound, &tx).await;
    });
    Ok(Response::new(ChannelStream::new(rx)))
}

/// Reads the stream's requests and answers them until the stream or the server ends.
async fn serve(
    service: &LockService,
    credentials: &Credentials,
    mut inbound: Streaming<proto::SessionRequest>,
    tx: &Outgoing,
) {
    let api = &service.0;
    let requests_max = api.limits.session_stream_requests_max;
    let mut shutdown = api.shutdown.clone();
    let stop = stopped(&mut shutdown);
    tokio::pin!(stop);
    // A reader gone drops the calls in flight, as it does a unary one.
    let closed = tx.closed();
    tokio::pin!(closed);
    let carried = Arc::new(Carried::default());
    let mut subscribed = false;
    let mut calls = FuturesUnordered::new();
    // Requests are read until the client closes its half; the calls in flight are still
    // answered after that.
    let mut reading = true;
    loop {
        if !reading && calls.is_empty() {
            return; // the answers' channel closes: the client sees the stream end
        }
        // Biased (checked in order): no draw from a random source, same run in the simulator.
        let next = tokio::select! {
            biased;
            () = &mut stop => return,
            () = &mut closed => return,
            Some((seq, acquiring, answer)) = calls.next(), if !calls.is_empty() => {
                if let (Some(session_id), Ok(_)) = (acquiring, &answer) {
                    carried.carry(session_id); // the acquire proved the session's secret
                }
                // Its room is free before the answer leaves (the call left `calls`): a client
                // that saw it may use the room at once.
                let _ = send(tx, seq, answer).await;
                continue;
            }
            next = inbound.message(), if reading => next,
        };
        let next = match next {
            Ok(Some(next)) => next,
            Ok(None) | Err(_) => {
                reading = false;
                continue;
            }
        };
        let seq = next.seq;
        if seq == 0 {
            // An answer could not say what it answers: the stream ends, naming the rule.
            let error = ConvertError::new("session.seq", "must be non-zero");
            let _ = tx.send(Err(Status::from(error))).await;
            return;
        }
        let Some(body) = next.request else {
            let error = ConvertError::new("session.request", "required");
            if send(tx, seq, Err(Status::from(error))).await.is_err() {
                return;
            }
            continue;
        };
        if let (session_request::Request::Subscribe(_), false) = (&body, subscribed) {
            subscribed = true; // a second subscribe is answered, and changes nothing
            (api.log_feed).start_pushes(
                &api.driver,
                &api.shutdown,
                &api.told,
                carried.clone(),
                tx.clone(),
            );
        }
        if let session_request::Request::KeepAlive(_) | session_request::Request::Subscribe(_) =
            &body
        {
            let answer = dispatch(service, credentials, body).await;
            note_carried(&carried, &answer);
            if send(tx, seq, answer).await.is_err() {
                return;
            }
            continue;
        }
        if calls.len() >= requests_max {
            let busy = busy_status(&format!(
                "{requests_max} requests are in flight on this session stream, at most \
                 {requests_max} (limits.session_stream_requests_max)"
            ));
            if send(tx, seq, Err(busy)).await.is_err() {
                return;
            }
            continue;
        }
        let acquiring = match &body {
            session_request::Request::Acquire(m) => Some(m.session_id),
            _ => None,
        };
        calls.push(answered(
            seq,
            acquiring,
            dispatch(service, credentials, body),
        ));
    }
}

/// A call in flight on a stream: its answer, with what it answers.
async fn answered(
    seq: u64,
    acquiring: Option<u64>,
    answer: impl Future<Output = Result<session_response::Response, Status>>,
) -> (u64, Option<u64>, Result<session_response::Response, Status>) {
    (seq, acquiring, answer.await)
}

/// A keepalive answered without error proves the caller has the session's secret: the stream
/// carries the session (for its pushes) from then on, until an answer says it is gone.
fn note_carried(carried: &Carried, answer: &Result<session_response::Response, Status>) {
    let Ok(session_response::Response::KeepAlive(answer)) = answer else {
        return;
    };
    if answer.lost {
        carried.forget(answer.session_id);
    } else if answer.error.is_none() {
        carried.carry(answer.session_id);
    }
}

/// `request` answered by the handler body of its unary call, for the stream's caller (a
/// keepalive as on the `KeepAlive` stream of a caller authenticated as the stream's principal;
/// the others checked as their unary call checks its caller).
async fn dispatch(
    service: &LockService,
    credentials: &Credentials,
    body: session_request::Request,
) -> Result<session_response::Response, Status> {
    use session_request::Request as In;
    use session_response::Response as Out;
    let api = &service.0;
    let auth = &api.auth;
    let (metadata, certificate) = (&credentials.metadata, &credentials.certificate);
    Ok(match body {
        In::KeepAlive(m) => {
            let principal = &credentials.principal;
            Out::KeepAlive(keep_alive_entry(&api.driver, &api.told, m, principal).await?)
        }
        In::Acquire(m) => {
            let principal = auth
                .lock_caller_with(metadata, certificate, Some(&m.namespace))
                .await?;
            Out::Acquire(service.acquire_as(&principal, m).await?)
        }
        In::Release(m) => {
            let principal = auth
                .lock_caller_with(metadata, certificate, Some(&m.namespace))
                .await?;
            Out::Release(service.release_as(&principal, m).await?)
        }
        In::CancelWait(m) => {
            let principal = auth
                .lock_caller_with(metadata, certificate, Some(&m.namespace))
                .await?;
            Out::CancelWait(service.cancel_wait_as(&principal, m).await?)
        }
        In::CloseSession(m) => {
            let principal = auth.lock_caller_with(metadata, certificate, None).await?;
            Out::CloseSession(service.close_session_as(&principal, m).await?)
        }
        // The stream's reading loop started its pushes.
        In::Subscribe(proto::SubscribeRequest {}) => Out::Subscribe(proto::SubscribeResponse {}),
    })
}

/// Sends the answer to `seq`; `Err` when the reader is gone.
async fn send(
    tx: &Outgoing,
    seq: u64,
    answer: Result<session_response::Response, Status>,
) -> Result<(), ()> {
    let response = match answer {
        Ok(response) => response,
        Err(status) => session_response::Response::Error(status_to_proto(&status)),
    };
    let message = proto::SessionResponse {
        seq,
        response: Some(response),
    };
    tx.send(Ok(message)).await.map_err(|_| ())
}
