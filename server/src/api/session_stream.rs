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
//! Keepalives (and `subscribe`) are answered in order, one at a time, on the stream's reading
//! task (they are leader-local and quick). Every other request runs as a task of its own, so a waiting Acquire
//! is answered when its wait ends while later requests are answered meanwhile. Bounds: at most
//! `session_stream_requests_max` such tasks per stream (beyond: that request is answered `busy`,
//! naming the bound), and a bounded outgoing channel (a slow reader holds the answers back
//! instead of growing a buffer).
//!
//! A stream that sends `subscribe` also gets pushes about the sessions it carries
//! ([`crate::api::session_push`]); one that does not gets none.

use std::sync::Arc;

use picket_net::error::ConvertError;
use picket_net::proto::{self, lock_server::Lock, session_request, session_response};
use picket_net::session_stream::status_to_proto;
use picket_net::status::busy_status;
use tokio::sync::{mpsc, Semaphore};
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Request, Response, Status, Streaming};

use crate::api::service::{keep_alive_entry, LockService, StreamSlot};
use crate::api::session_push::Carried;
use crate::api::stream::ChannelStream;
use crate::shutdown::stopped;

/// Answers buffered per `Session` stream.
const SESSION_BUFFER: usize = 256;

type Outgoing = mpsc::Sender<Result<proto::SessionResponse, Status>>;

/// Opens a `Session` stream for the caller of `request` (authenticated as for `KeepAlive`).
pub(crate) async fn open(
    service: LockService,
    request: Request<Streaming<proto::SessionRequest>>,
) -> Result<Response<ChannelStream<Result<proto::SessionResponse, Status>>>, Status> {
    let api = &service.0;
    let principal = api.auth.lock_caller(&request, None).await?;
    let slot = StreamSlot::take(
        &api.keepalives,
        api.limits.keepalive_streams_max,
        "keepalive and session",
    )?;
    let (metadata, extensions, mut inbound) = request.into_parts();
    let requests_max = api.limits.session_stream_requests_max;
    let in_flight = Arc::new(Semaphore::new(requests_max));
    let (tx, rx) = mpsc::channel(SESSION_BUFFER);
    let mut shutdown = api.shutdown.clone();
    let carried = Arc::new(Carried::default());
    let mut subscribed = false;
    tokio::spawn(async move {
        let _slot = slot;
        loop {
            // Biased (checked in order): no draw from a random source, same run in the simulator.
            let next = tokio::select! {
                biased;
                () = stopped(&mut shutdown) => return,
                next = inbound.message() => next,
            };
            let next = match next {
                Ok(Some(next)) => next,
                Ok(None) | Err(_) => return,
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
                if send(&tx, seq, Err(Status::from(error))).await.is_err() {
                    return;
                }
                continue;
            };
            if let (session_request::Request::Subscribe(_), false) = (&body, subscribed) {
                subscribed = true; // a second subscribe is answered, and changes nothing
                let api = &service.0;
                let carried = carried.clone();
                (api.log_feed).start_pushes(
                    &api.driver,
                    &api.shutdown,
                    &api.told,
                    carried,
                    tx.clone(),
                );
            }
            let request = Request::from_parts(metadata.clone(), extensions.clone(), body);
            if let session_request::Request::KeepAlive(_) | session_request::Request::Subscribe(_) =
                request.get_ref()
            {
                let answer = dispatch(&service, &principal, request).await;
                note_carried(&carried, &answer);
                if send(&tx, seq, answer).await.is_err() {
                    return;
                }
                continue;
            }
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                let busy = busy_status(&format!(
                    "{requests_max} requests are in flight on this session stream, at most \
                     {requests_max} (limits.session_stream_requests_max)"
                ));
                if send(&tx, seq, Err(busy)).await.is_err() {
                    return;
                }
                continue;
            };
            let acquiring = match request.get_ref() {
                session_request::Request::Acquire(m) => Some(m.session_id),
                _ => None,
            };
            let (service, tx, principal) = (service.clone(), tx.clone(), principal.clone());
            let carried = carried.clone();
            let mut shutdown = service.0.shutdown.clone();
            tokio::spawn(async move {
                // A reader gone or a server stopping drops the call, as it does a unary one.
                let answer = tokio::select! {
                    biased;
                    () = stopped(&mut shutdown) => return,
                    () = tx.closed() => return,
                    answer = dispatch(&service, &principal, request) => answer,
                };
                if let (Some(session_id), Ok(_)) = (acquiring, &answer) {
                    carried.carry(session_id); // the acquire proved the session's secret
                }
                // Free before the answer leaves: a client that saw it may use the room at once.
                drop(permit);
                let _ = send(&tx, seq, answer).await;
            });
        }
    });
    Ok(Response::new(ChannelStream::new(rx)))
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

/// `request` answered by the unary handler of its kind (a keepalive as on the `KeepAlive` stream
/// of a caller authenticated as `principal`).
async fn dispatch(
    service: &LockService,
    principal: &str,
    request: Request<session_request::Request>,
) -> Result<session_response::Response, Status> {
    use session_request::Request as In;
    use session_response::Response as Out;
    let (metadata, extensions, body) = request.into_parts();
    let parts = (metadata, extensions);
    Ok(match body {
        In::KeepAlive(m) => Out::KeepAlive(
            keep_alive_entry(&service.0.driver, &service.0.told, m, principal).await?,
        ),
        In::Acquire(m) => Out::Acquire(service.acquire(call(parts, m)).await?.into_inner()),
        In::Release(m) => Out::Release(service.release(call(parts, m)).await?.into_inner()),
        In::CancelWait(m) => {
            Out::CancelWait(service.cancel_wait(call(parts, m)).await?.into_inner())
        }
        In::CloseSession(m) => {
            Out::CloseSession(service.close_session(call(parts, m)).await?.into_inner())
        }
        // The stream's reading task started its pushes.
        In::Subscribe(proto::SubscribeRequest {}) => Out::Subscribe(proto::SubscribeResponse {}),
    })
}

/// A unary request of `message` with the stream's metadata and connection.
fn call<T>((metadata, extensions): (MetadataMap, Extensions), message: T) -> Request<T> {
    Request::from_parts(metadata, extensions, message)
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
