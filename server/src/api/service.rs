//! The public gRPC `Lock` service (docs/api.md) and the [`Api`] it shares with `Admin`
//! ([`crate::api::admin`]), over a [`DriverHandle`].
//!
//! Every request is validated at the edge (`picket_proto::convert`, `INVALID_ARGUMENT` naming the
//! field) before anything is proposed; the driver answers a non-leader's proposals and
//! linearizable reads with `not_leader` and the leader's client endpoint.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use picket_core::locks::{Reply, Revision, Role, WatchError};
use picket_core::node::{Answer, Proposal, Query};
use picket_proto::convert::api::{KeepAlive, WatchStart, WrongReply};
use picket_proto::proto;
use picket_proto::status::{
    busy_status, keepalive_answer, keepalive_refused, lock_error_status, watch_error_status,
};
use tokio::sync::{mpsc, watch};

use crate::shutdown::stopped;
use tonic::{Request, Response, Status, Streaming};

use crate::api::membership;
use crate::api::session_push::LogFeed;
use crate::api::session_stream;
use crate::api::stream::ChannelStream;
use crate::api::told::ToldLog;
use crate::auth::Authenticator;
use crate::node::driver::{Answered, DriverHandle, Request as DriverRequest};
use crate::node::members::ChangeRequest;

/// Keepalive responses buffered per stream.
const KEEPALIVE_BUFFER: usize = 64;
/// Watch pages buffered per stream.
const WATCH_BUFFER: usize = 8;
/// Events per watch page (about: pages end at revision boundaries).
const WATCH_PAGE_EVENTS: usize = 1_000;

/// Bounds of the services.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceLimits {
    /// Open `Watch` streams at most (beyond: `busy`).
    pub watch_streams_max: usize,
    /// Open `KeepAlive` and `Session` streams at most, together (beyond: `busy`).
    pub keepalive_streams_max: usize,
    /// Requests in flight on one `Session` stream at most, keepalives not counted (beyond:
    /// that request is answered `busy`).
    pub session_stream_requests_max: usize,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        ServiceLimits {
            watch_streams_max: 1_024,
            keepalive_streams_max: 10_000,
            session_stream_requests_max: 1_024,
        }
    }
}

/// State shared by both services.
#[derive(Debug, Clone)]
pub struct Api {
    pub driver: DriverHandle,
    pub auth: Authenticator,
    pub limits: ServiceLimits,
    watches: Arc<AtomicUsize>,
    /// Open `KeepAlive` and `Session` streams.
    pub(crate) keepalives: Arc<AtomicUsize>,
    /// Ends open streams at shutdown (a graceful server stop waits for them).
    pub(crate) shutdown: watch::Receiver<bool>,
    /// The lock log as followed for the `Session` streams' pushes.
    pub log_feed: LogFeed,
    /// When this replica told clients of lost holds and ended sessions (the console reads it).
    pub told: ToldLog,
}

impl Api {
    pub fn new(
        driver: DriverHandle,
        auth: Authenticator,
        limits: ServiceLimits,
        shutdown: watch::Receiver<bool>,
    ) -> Api {
        Api {
            shutdown,
            driver,
            auth,
            limits,
            watches: Arc::new(AtomicUsize::new(0)),
            keepalives: Arc::new(AtomicUsize::new(0)),
            log_feed: LogFeed::default(),
            told: ToldLog::default(),
        }
    }

    pub(crate) async fn propose(
        &self,
        proposal: impl Into<Proposal>,
    ) -> Result<(Reply, Revision), Status> {
        let proposal = proposal.into();
        let answered: Answered = self
            .driver
            .ask(|reply| DriverRequest::Propose { proposal, reply })
            .await??;
        match answered.outcome {
            Ok(reply) => Ok((reply, answered.revision)),
            Err(error) => Err(lock_error_status(&error)),
        }
    }

    /// A membership change: role picket-admin in every namespace (`Role::ClassAdmin`
    /// unscoped), answered once the log chose it.
    pub(crate) async fn change_membership<T>(
        &self,
        request: Request<T>,
        make: impl FnOnce(T, String) -> Result<ChangeRequest, Status>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        let actor = self
            .auth
            .admin_actor_for(&request, None, &[Role::ClassAdmin])
            .await?;
        let mut change = make(request.into_inner(), actor.principal)?;
        change.actor_roles = actor.roles.iter().map(|r| r.as_str().to_owned()).collect();
        let changed = self
            .driver
            .ask(|reply| DriverRequest::ChangeMembership {
                request: change,
                reply,
            })
            .await??;
        Ok(Response::new(membership::response(changed)))
    }

    /// The namespace of pending force-release request `id` (linearizable read), so that the
    /// approver's namespace-scoped roles count; `None` when there is no such request (the state
    /// machine then refuses the approval with its own error).
    pub(crate) async fn force_release_namespace(&self, id: u64) -> Result<Option<String>, Status> {
        let (_, answer) = self.read(Query::ForceReleases, false).await?;
        Ok(match answer {
            Answer::ForceReleases(requests) => requests
                .into_iter()
                .find(|r| r.request.id.0 == id)
                .map(|r| r.request.namespace),
            _ => None,
        })
    }

    pub(crate) async fn read(
        &self,
        query: Query,
        stale: bool,
    ) -> Result<(Revision, Answer), Status> {
        self.driver
            .ask(|reply| DriverRequest::Read {
                query,
                stale,
                reply,
            })
            .await?
            .map_err(Status::from)
    }
}

/// A slot among a bounded number of open streams, freed on drop.
pub(crate) struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    pub(crate) fn take(
        count: &Arc<AtomicUsize>,
        max: usize,
        what: &str,
    ) -> Result<StreamSlot, Status> {
        let before = count.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return Err(busy_status(&format!(
                "{before} {what} streams are open, at most {max}"
            )));
        }
        Ok(StreamSlot(count.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The answer to one keepalive of a `KeepAlive` or `Session` stream from a caller authenticated
/// as `principal`: a malformed or refused entry is answered on its own (the stream goes on); an
/// `Err` (not the leader, not ready) ends a `KeepAlive` stream. What the answer tells of a lost
/// hold or an ended session is noted in `told`.
pub(crate) async fn keep_alive_entry(
    driver: &DriverHandle,
    told: &ToldLog,
    next: proto::KeepAliveRequest,
    principal: &str,
) -> Result<proto::KeepAliveResponse, Status> {
    let (session_id, seq) = (next.session_id, next.seq);
    let ka = match KeepAlive::parse(next, principal) {
        Ok(ka) => ka,
        Err(error) => return Ok(keepalive_refused(session_id, seq, error.detail())),
    };
    let result = driver
        .ask(|reply| DriverRequest::KeepAlive {
            session: ka.session,
            proof: ka.proof,
            reply,
        })
        .await?;
    let (result, lost) = match result {
        Ok((ttl, lost)) => (Ok(ttl), lost),
        Err(error) => (Err(error), Vec::new()),
    };
    keepalive_answer(ka.session, ka.seq, result, |n| driver.endpoint_of(n)).map(|mut answer| {
        answer.lost_holds = lost.into_iter().map(Into::into).collect();
        told.record_keepalive(&answer);
        answer
    })
}

pub(crate) fn reply_as<T: TryFrom<Reply, Error = WrongReply>>(reply: Reply) -> Result<T, Status> {
    T::try_from(reply).map_err(Status::from)
}

/// The `Lock` service.
#[derive(Debug, Clone)]
pub struct LockService(pub Api);

/// The bodies of the lock calls the session stream also carries, for a caller already
/// authenticated as `principal` (by [`crate::auth::Authenticator::lock_caller`] or, on the
/// stream, `lock_caller_with`): one implementation for the unary call and the stream.
impl LockService {
    pub(crate) async fn acquire_as(
        &self,
        principal: &str,
        request: proto::AcquireRequest,
    ) -> Result<proto::AcquireResponse, Status> {
        // A try (wait_ms 0) does not wait; a wait's answer waits up to wait_ms for the grant.
        let answer_within_ms = (request.wait_ms > 0).then_some(request.wait_ms);
        let command = request.into_command(principal)?;
        let proposal = Proposal {
            command,
            answer_within_ms,
        };
        let (reply, revision) = self.0.propose(proposal).await?;
        match reply {
            Reply::Acquire(reply) => Ok(proto::AcquireResponse::new(reply, revision)),
            other => Err(Status::from(WrongReply {
                expected: "Acquire",
                got: Box::new(other),
            })),
        }
    }

    pub(crate) async fn release_as(
        &self,
        principal: &str,
        request: proto::ReleaseRequest,
    ) -> Result<proto::ReleaseResponse, Status> {
        let command = request.into_command(principal)?;
        let (reply, _) = self.0.propose(command).await?;
        reply_as(reply)
    }

    pub(crate) async fn cancel_wait_as(
        &self,
        principal: &str,
        request: proto::CancelWaitRequest,
    ) -> Result<proto::CancelWaitResponse, Status> {
        let command = request.into_command(principal)?;
        let (reply, revision) = self.0.propose(command).await?;
        proto::CancelWaitResponse::new(reply, revision).map_err(Status::from)
    }

    pub(crate) async fn close_session_as(
        &self,
        principal: &str,
        request: proto::CloseSessionRequest,
    ) -> Result<proto::CloseSessionResponse, Status> {
        let command = request.into_command(principal)?;
        let (reply, _) = self.0.propose(command).await?;
        reply_as(reply)
    }
}

#[tonic::async_trait]
impl proto::lock_server::Lock for LockService {
    async fn create_session(
        &self,
        request: Request<proto::CreateSessionRequest>,
    ) -> Result<Response<proto::CreateSessionResponse>, Status> {
        let principal = self.0.auth.lock_caller(&request, None).await?;
        let (command, drawn) = request.into_inner().into_command(&principal)?;
        let (reply, _) = self.0.propose(command).await?;
        let mut response: proto::CreateSessionResponse = reply_as(reply)?;
        // A secret drawn here is returned this once; only its hash was logged.
        if let Some(secret) = drawn {
            response.session_secret = secret.as_bytes().to_vec();
        }
        Ok(Response::new(response))
    }

    async fn close_session(
        &self,
        request: Request<proto::CloseSessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        let principal = self.0.auth.lock_caller(&request, None).await?;
        self.close_session_as(&principal, request.into_inner())
            .await
            .map(Response::new)
    }

    type KeepAliveStream = ChannelStream<Result<proto::KeepAliveResponse, Status>>;

    async fn keep_alive(
        &self,
        request: Request<Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let principal = self.0.auth.lock_caller(&request, None).await?;
        let slot = StreamSlot::take(
            &self.0.keepalives,
            self.0.limits.keepalive_streams_max,
            "keepalive",
        )?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(KEEPALIVE_BUFFER);
        let (driver, told) = (self.0.driver.clone(), self.0.told.clone());
        let mut shutdown = self.0.shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            loop {
                let next = tokio::select! {
                    next = inbound.message() => next,
                    () = stopped(&mut shutdown) => return,
                };
                let next = match next {
                    Ok(Some(next)) => next,
                    Ok(None) | Err(_) => return,
                };
                let answer = keep_alive_entry(&driver, &told, next, &principal).await;
                let end = answer.is_err();
                if tx.send(answer).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Response::new(ChannelStream::new(rx)))
    }

    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        let ns = Some(request.get_ref().namespace.as_str());
        let principal = self.0.auth.lock_caller(&request, ns).await?;
        self.acquire_as(&principal, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn release(
        &self,
        request: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        let ns = Some(request.get_ref().namespace.as_str());
        let principal = self.0.auth.lock_caller(&request, ns).await?;
        self.release_as(&principal, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn cancel_wait(
        &self,
        request: Request<proto::CancelWaitRequest>,
    ) -> Result<Response<proto::CancelWaitResponse>, Status> {
        let ns = Some(request.get_ref().namespace.as_str());
        let principal = self.0.auth.lock_caller(&request, ns).await?;
        self.cancel_wait_as(&principal, request.into_inner())
            .await
            .map(Response::new)
    }

    type SessionStream = ChannelStream<Result<proto::SessionResponse, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<proto::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        session_stream::open(self.clone(), request).await
    }

    type WatchStream = ChannelStream<Result<proto::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let start = WatchStart::try_from(request.into_inner())?;
        let slot = StreamSlot::take(&self.0.watches, self.0.limits.watch_streams_max, "watch")?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let driver = self.0.driver.clone();
        let mut shutdown = self.0.shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut applied = driver.applied();
            let mut from = start.from;
            if start.from_now {
                // Only what happens from now on; the empty first page tells the client where
                // it is, so a reconnect resumes there instead of "now" again.
                from = Revision(applied.borrow_and_update().0 + 1);
                let here = proto::WatchResponse {
                    events: Vec::new(),
                    resume_from: from.0,
                };
                if tx.send(Ok(here)).await.is_err() {
                    return;
                }
            }
            loop {
                let filter = start.filter.clone();
                let page = driver
                    .ask(|reply| DriverRequest::Watch {
                        from,
                        filter,
                        limit: WATCH_PAGE_EVENTS,
                        reply,
                    })
                    .await;
                let page = match page {
                    Ok(Ok(page)) => page,
                    // "From the oldest retained": start where history starts.
                    Ok(Err(WatchError::Compacted {
                        oldest_available, ..
                    })) if start.from == Revision(0) && from == Revision(0) => {
                        from = oldest_available;
                        continue;
                    }
                    Ok(Err(error)) => {
                        let _ = tx.send(Err(watch_error_status(&error))).await;
                        return;
                    }
                    Err(refusal) => {
                        let _ = tx.send(Err(refusal.into())).await;
                        return;
                    }
                };
                let empty = page.events.is_empty();
                from = page.resume_from;
                if !empty && tx.send(Ok(page.into())).await.is_err() {
                    return;
                }
                if empty {
                    tokio::select! {
                        changed = applied.changed() => if changed.is_err() { return },
                        () = tx.closed() => return,
                        () = stopped(&mut shutdown) => return,
                    }
                }
            }
        });
        Ok(Response::new(ChannelStream::new(rx)))
    }
}
