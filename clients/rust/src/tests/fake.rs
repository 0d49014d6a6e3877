//! A fake `Lock` service: a few replicas on loopback sharing one toy lock table, one of them
//! the leader. Enough of the real rules (leader hints, dedup by request id, FIFO waits with
//! held calls, keepalive acks, the session's secret on every call) to test the client, and
//! knobs to misbehave.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use picket_proto::proto::lock_server::{Lock, LockServer};
use picket_proto::proto::{self, acquire_reply};
use picket_proto::status::{detail_status, not_leader_status, LeaderHint};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// How the leader answers keepalives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAliveMode {
    Answer,
    /// Reads them and never answers (an outage the client cannot tell from a slow leader).
    Silent,
}

/// One received acquire: (replica, session, request id, key).
pub type AcquireSeen = (usize, u64, u64, String);

#[derive(Default)]
pub struct State {
    pub endpoints: Vec<String>,
    pub leader: usize,
    pub revision: u64,
    pub sessions: BTreeMap<u64, bool>, // id -> alive
    /// id -> the secret the session was created with (every call must present it).
    pub secrets: BTreeMap<u64, Vec<u8>>,
    pub session_next: u64,
    /// key -> (session, token)
    pub holders: BTreeMap<String, (u64, u64)>,
    pub queues: BTreeMap<String, VecDeque<u64>>,
    /// (session, request id) -> the reply given (only Granted/Busy are final).
    pub replies: BTreeMap<(u64, u64), acquire_reply::Kind>,
    pub acquires: Vec<AcquireSeen>,
    pub creates: Vec<usize>,
    pub releases: Vec<(u64, u64, u64)>, // session, request id, token
    pub cancels: Vec<(u64, String)>,    // session, key
    /// How long the leader holds a `CancelWait` before it applies it (a slow cancel).
    pub cancel_wait_delay: Duration,
    /// For every acquire received, how many cancels had been applied by then.
    pub cancels_before_acquire: Vec<usize>,
    pub keepalive_mode: Option<KeepAliveMode>,
    /// How long the leader takes to answer a keepalive after receiving it.
    pub keepalive_answer_delay: Duration,
    /// (seq, receipt time) of every keepalive the leader answered.
    pub keepalives_answered: Vec<(u64, Instant)>,
    /// The next N acquires are applied, then leadership moves to `switch_to` and the answer is a
    /// not_leader hint (the client never learns the outcome from the first leader).
    pub acquires_lost_in_leader_change: u32,
    pub switch_to: usize,
    /// Answer errors as servers before the standard form did: a bare `ErrorDetail` as the whole
    /// status details, and no `picket-leader-address` (a mixed-version cluster).
    pub old_form_errors: bool,
    /// session -> the holds it lost to force-release, carried in every keepalive answer.
    pub holds_lost: BTreeMap<u64, Vec<proto::LostHold>>,
    /// Keepalive streams opened so far, `Session` streams included (each stream's number is its
    /// rank).
    pub keepalive_streams_opened: u64,
    /// `Session` streams opened so far.
    pub session_streams_opened: u64,
    /// Streams numbered below this never answer again (a stuck connection to a leader that is
    /// gone); streams opened later answer as `keepalive_mode` says.
    pub keepalive_streams_stalled_below: u64,
    /// The next N releases are refused with `request_too_old` (a later request of the session
    /// overtook them), without being applied.
    pub releases_overtaken: u32,
}

impl State {
    fn keepalive_mode(&self) -> KeepAliveMode {
        self.keepalive_mode.unwrap_or(KeepAliveMode::Answer)
    }

    fn next_revision(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    /// Applies an acquire; answers the reply (and whether it is final).
    fn apply_acquire(&mut self, request: &proto::AcquireRequest) -> acquire_reply::Kind {
        let id = (request.session_id, request.request_id);
        if let Some(reply @ (acquire_reply::Kind::Granted(_) | acquire_reply::Kind::Busy(_))) =
            self.replies.get(&id)
        {
            return *reply;
        }
        let key = request.key.clone();
        let session = request.session_id;
        let reply = match self.holders.get(&key) {
            Some(&(holder, token)) if holder == session => {
                acquire_reply::Kind::Granted(acquire_reply::Granted { token, slot: None })
            }
            None if self.queues.get(&key).is_none_or(VecDeque::is_empty) => {
                let token = self.next_revision();
                self.holders.insert(key.clone(), (session, token));
                acquire_reply::Kind::Granted(acquire_reply::Granted { token, slot: None })
            }
            Some(&(holder, token)) if request.wait_ms == 0 => {
                acquire_reply::Kind::Busy(acquire_reply::Busy {
                    holder_session_id: holder,
                    token,
                })
            }
            _ => {
                let queue = self.queues.entry(key).or_default();
                if !queue.contains(&session) {
                    queue.push_back(session);
                }
                let position = queue.iter().position(|s| *s == session).unwrap() + 1;
                acquire_reply::Kind::Queued(acquire_reply::Queued {
                    position: position as u32,
                })
            }
        };
        self.replies.insert(id, reply);
        reply
    }

    /// Force-releases `key` without revoking its holder's session: the holder's keepalive
    /// answers report it from now on.
    pub fn force_release(&mut self, key: &str, force_release_id: u64) {
        let (session, token) = self
            .holders
            .remove(key)
            .expect("force-releasing a held key");
        let revision = self.next_revision();
        self.holds_lost
            .entry(session)
            .or_default()
            .push(proto::LostHold {
                namespace: "orders".into(),
                key: key.into(),
                token,
                revision,
                force_release_id,
            });
    }

    fn release(
        &mut self,
        key: &str,
        session: u64,
        token: u64,
    ) -> Result<Option<proto::Grant>, Status> {
        match self.holders.get(key) {
            Some(&(holder, held)) if holder == session && held == token => {}
            _ => return Err(refusal(tonic::Code::FailedPrecondition, "not_holder")),
        }
        self.holders.remove(key);
        let next = self.queues.get_mut(key).and_then(VecDeque::pop_front);
        Ok(next.map(|next| {
            let token = self.next_revision();
            self.holders.insert(key.to_owned(), (next, token));
            proto::Grant {
                session_id: next,
                token,
            }
        }))
    }

    /// Revokes a session: its holds go, its keepalives answer lost.
    pub fn revoke(&mut self, session: u64) {
        self.sessions.insert(session, false);
        self.holders.retain(|_, (holder, _)| *holder != session);
    }
}

impl State {
    /// `status` as this fake's server version sends it (see `old_form_errors`).
    fn in_form(&self, status: Status) -> Status {
        if !self.old_form_errors {
            return status;
        }
        let detail = picket_proto::status::error_detail(&status).expect("a status the fake built");
        let mut metadata = status.metadata().clone();
        metadata.remove(picket_proto::status::LEADER_ADDRESS_METADATA);
        Status::with_details_and_metadata(
            status.code(),
            status.message(),
            prost::Message::encode_to_vec(&proto::ErrorDetail {
                leader_address: String::new(),
                ..detail
            })
            .into(),
            metadata,
        )
    }
}

pub fn refusal(code: tonic::Code, rule: &str) -> Status {
    let detail = proto::ErrorDetail {
        rule: rule.to_owned(),
        message: format!("fake: {rule}"),
        ..Default::default()
    };
    detail_status(code, detail, None)
}

#[derive(Clone)]
pub struct Replica {
    index: usize,
    state: Arc<Mutex<State>>,
}

impl Replica {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn check_leader(&self) -> Result<(), Status> {
        let state = self.state();
        if state.leader == self.index {
            return Ok(());
        }
        let status = not_leader_status(&LeaderHint {
            node_id: Some(state.leader as u64 + 1),
            endpoint: Some(state.endpoints[state.leader].clone()),
        });
        Err(state.in_form(status))
    }

    /// The leader's answer to one keepalive on stream `stream_number` (`None`: it stays silent).
    fn keepalive_entry(
        &self,
        keepalive: &proto::KeepAliveRequest,
        stream_number: u64,
    ) -> Option<proto::KeepAliveResponse> {
        let mut state = self.state();
        let alive = state.sessions.get(&keepalive.session_id) == Some(&true);
        let ours = state.secrets.get(&keepalive.session_id) == Some(&keepalive.session_secret);
        let error = (!ours).then(|| proto::ErrorDetail {
            rule: "session_not_yours".into(),
            message: "fake: session_not_yours".into(),
            ..Default::default()
        });
        let stalled = stream_number < state.keepalive_streams_stalled_below;
        match state.keepalive_mode() {
            KeepAliveMode::Silent => None,
            KeepAliveMode::Answer if stalled => None,
            KeepAliveMode::Answer => {
                state
                    .keepalives_answered
                    .push((keepalive.seq, Instant::now()));
                Some(proto::KeepAliveResponse {
                    session_id: keepalive.session_id,
                    seq: keepalive.seq,
                    ttl_ms: 3_000,
                    lost: !alive,
                    error,
                    lost_holds: state
                        .holds_lost
                        .get(&keepalive.session_id)
                        .cloned()
                        .unwrap_or_default(),
                })
            }
        }
    }

    fn check_session(&self, session: u64, secret: &[u8]) -> Result<(), Status> {
        let state = self.state();
        match state.sessions.get(&session) {
            Some(true) if state.secrets.get(&session).map(Vec::as_slice) == Some(secret) => Ok(()),
            Some(true) => {
                Err(state.in_form(refusal(tonic::Code::PermissionDenied, "session_not_yours")))
            }
            _ => Err(state.in_form(refusal(tonic::Code::NotFound, "unknown_session"))),
        }
    }
}

#[tonic::async_trait]
impl Lock for Replica {
    async fn create_session(
        &self,
        request: Request<proto::CreateSessionRequest>,
    ) -> Result<Response<proto::CreateSessionResponse>, Status> {
        self.check_leader()?;
        let request = request.into_inner();
        let ttl_ms = request.ttl_ms.unwrap_or(10_000);
        assert_eq!(
            request.session_secret.len(),
            32,
            "the client draws 32 bytes"
        );
        let mut state = self.state();
        state.creates.push(self.index);
        state.session_next += 1;
        let session_id = state.session_next;
        state.sessions.insert(session_id, true);
        state.secrets.insert(session_id, request.session_secret);
        Ok(Response::new(proto::CreateSessionResponse {
            session_id,
            ttl_ms,
            session_secret: Vec::new(),
        }))
    }

    async fn close_session(
        &self,
        request: Request<proto::CloseSessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        self.check_leader()?;
        let request = request.into_inner();
        let session = request.session_id;
        self.check_session(session, &request.session_secret)?;
        self.state().revoke(session);
        Ok(Response::new(proto::CloseSessionResponse::default()))
    }

    type KeepAliveStream = BoxStream<proto::KeepAliveResponse>;

    async fn keep_alive(
        &self,
        request: Request<Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        self.check_leader()?;
        let mut inbound = request.into_inner();
        let (sender, receiver) = mpsc::channel(16);
        let replica = self.clone();
        let stream_number = {
            let mut state = self.state();
            state.keepalive_streams_opened += 1;
            state.keepalive_streams_opened - 1
        };
        tokio::spawn(async move {
            while let Some(Ok(keepalive)) = inbound.next().await {
                let answer = replica.keepalive_entry(&keepalive, stream_number);
                let delay = replica.state().keepalive_answer_delay;
                tokio::time::sleep(delay).await;
                if let Some(answer) = answer {
                    if sender.send(Ok(answer)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    type SessionStream = BoxStream<proto::SessionResponse>;

    /// Keepalives as on `KeepAlive` (the same knobs; a stream's rank counts among keepalive
    /// streams), the other requests by this fake's unary handlers, each as a task of its own.
    async fn session(
        &self,
        request: Request<Streaming<proto::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        use proto::session_request::Request as In;
        use proto::session_response::Response as Out;
        if self.state().old_form_errors {
            // A server from before the standard error form has no Session method either.
            return Err(Status::unimplemented(""));
        }
        self.check_leader()?;
        let mut inbound = request.into_inner();
        let (sender, receiver) = mpsc::channel(16);
        let replica = self.clone();
        let stream_number = {
            let mut state = self.state();
            state.keepalive_streams_opened += 1;
            state.session_streams_opened += 1;
            state.keepalive_streams_opened - 1
        };
        tokio::spawn(async move {
            while let Some(Ok(next)) = inbound.next().await {
                let seq = next.seq;
                let answer = match next.request.expect("the client sends a request") {
                    In::KeepAlive(keepalive) => {
                        let answer = replica.keepalive_entry(&keepalive, stream_number);
                        let delay = replica.state().keepalive_answer_delay;
                        tokio::time::sleep(delay).await;
                        match answer {
                            Some(answer) => answer,
                            None => continue,
                        }
                    }
                    other => {
                        let (replica, sender) = (replica.clone(), sender.clone());
                        tokio::spawn(async move {
                            let answer = match other {
                                In::KeepAlive(_) => unreachable!("answered above"),
                                In::Acquire(m) => replica
                                    .acquire(Request::new(m))
                                    .await
                                    .map(|r| Out::Acquire(r.into_inner())),
                                In::Release(m) => replica
                                    .release(Request::new(m))
                                    .await
                                    .map(|r| Out::Release(r.into_inner())),
                                In::CancelWait(m) => replica
                                    .cancel_wait(Request::new(m))
                                    .await
                                    .map(|r| Out::CancelWait(r.into_inner())),
                                In::CloseSession(m) => replica
                                    .close_session(Request::new(m))
                                    .await
                                    .map(|r| Out::CloseSession(r.into_inner())),
                                // Answered; this fake pushes nothing.
                                In::Subscribe(_) => Ok(Out::Subscribe(proto::SubscribeResponse {})),
                            };
                            let response = answer.unwrap_or_else(|status| {
                                Out::Error(picket_proto::session_stream::status_to_proto(&status))
                            });
                            let message = proto::SessionResponse {
                                seq,
                                response: Some(response),
                            };
                            let _ = sender.send(Ok(message)).await;
                        });
                        continue;
                    }
                };
                let message = proto::SessionResponse {
                    seq,
                    response: Some(Out::KeepAlive(answer)),
                };
                if sender.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        self.check_leader()?;
        let request = request.into_inner();
        self.check_session(request.session_id, &request.session_secret)?;
        {
            let mut state = self.state();
            let applied = state.cancels.len();
            state.cancels_before_acquire.push(applied);
        }
        self.state().acquires.push((
            self.index,
            request.session_id,
            request.request_id,
            request.key.clone(),
        ));
        let started = Instant::now();
        let mut first = true;
        loop {
            let (reply, revision, lost_in_change) = {
                let mut state = self.state();
                // A held wait that left the queue meanwhile (cancelled) ends, as on the server.
                let queued = state
                    .queues
                    .get(&request.key)
                    .is_some_and(|queue| queue.contains(&request.session_id));
                let holds =
                    state.holders.get(&request.key).map(|(s, _)| *s) == Some(request.session_id);
                if !first && !queued && !holds {
                    return Err(refusal(tonic::Code::Aborted, "wait_cancelled"));
                }
                first = false;
                let reply = state.apply_acquire(&request);
                let lost = state.acquires_lost_in_leader_change > 0;
                if lost {
                    state.acquires_lost_in_leader_change -= 1;
                    state.leader = state.switch_to;
                }
                (reply, state.revision, lost)
            };
            if lost_in_change {
                self.check_leader()?;
            }
            // A queued wait is held (re-checked) up to wait_ms, capped to keep tests quick.
            let queued = matches!(reply, acquire_reply::Kind::Queued(_));
            let hold = Duration::from_millis(request.wait_ms.min(100));
            if queued && Instant::now() - started < hold {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            return Ok(Response::new(proto::AcquireResponse {
                reply: Some(proto::AcquireReply { kind: Some(reply) }),
                revision,
            }));
        }
    }

    async fn release(
        &self,
        request: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        self.check_leader()?;
        let request = request.into_inner();
        self.check_session(request.session_id, &request.session_secret)?;
        let mut state = self.state();
        state
            .releases
            .push((request.session_id, request.request_id, request.token));
        if state.releases_overtaken > 0 {
            state.releases_overtaken -= 1;
            return Err(refusal(tonic::Code::FailedPrecondition, "request_too_old"));
        }
        let next = state.release(&request.key, request.session_id, request.token)?;
        Ok(Response::new(proto::ReleaseResponse {
            token: request.token,
            next,
        }))
    }

    async fn cancel_wait(
        &self,
        request: Request<proto::CancelWaitRequest>,
    ) -> Result<Response<proto::CancelWaitResponse>, Status> {
        self.check_leader()?;
        let request = request.into_inner();
        self.check_session(request.session_id, &request.session_secret)?;
        let delay = self.state().cancel_wait_delay;
        tokio::time::sleep(delay).await;
        let mut state = self.state();
        let session = request.session_id;
        state.cancels.push((session, request.key.clone()));
        let held_token = state
            .holders
            .get(&request.key)
            .filter(|(holder, _)| *holder == session)
            .map(|(_, token)| *token);
        let queue = state.queues.entry(request.key).or_default();
        let removed = queue.contains(&session);
        queue.retain(|s| *s != session);
        let revision = state.next_revision();
        Ok(Response::new(proto::CancelWaitResponse {
            removed,
            held_token,
            revision,
        }))
    }

    type WatchStream = BoxStream<proto::WatchResponse>;

    async fn watch(
        &self,
        _request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("fake: no watch"))
    }
}

/// `replicas` fake replicas over in-memory pipes (`http://fake-N`), replica `leader` leading,
/// and the channel factory a client reaches them with. No sockets: with paused time the
/// runtime is never idle while a message is in flight, so timers fire only when due.
pub fn start_in_memory(
    leader: usize,
) -> (
    Arc<Mutex<State>>,
    Vec<String>,
    crate::cluster::ChannelFactory,
) {
    let state = Arc::new(Mutex::new(State {
        leader,
        ..State::default()
    }));
    let endpoints = vec!["http://fake-0".to_owned()];
    let (pipes, incoming) = mpsc::unbounded_channel::<tokio::io::DuplexStream>();
    let replica = Replica {
        index: 0,
        state: state.clone(),
    };
    let incoming = tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream::new(incoming)
        .map(Ok::<_, std::io::Error>);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LockServer::new(replica))
            .serve_with_incoming(incoming),
    );
    state.lock().unwrap().endpoints = endpoints.clone();
    let factory = Box::new(move |uri: &str| {
        let pipes = pipes.clone();
        tonic::transport::Endpoint::from_shared(uri.to_owned())
            .unwrap()
            .connect_with_connector_lazy(tower::service_fn(move |_| {
                let (client, server) = tokio::io::duplex(64 * 1024);
                let sent = pipes.send(server);
                async move {
                    sent.map_err(|_| std::io::Error::other("fake replica gone"))?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(client))
                }
            }))
    });
    (state, endpoints, factory)
}

/// `replicas` fake replicas on loopback ephemeral ports, replica `leader` leading.
pub async fn start(replicas: usize, leader: usize) -> (Arc<Mutex<State>>, Vec<String>) {
    let state = Arc::new(Mutex::new(State {
        leader,
        ..State::default()
    }));
    let mut endpoints = Vec::new();
    for index in 0..replicas {
        // TCP_NODELAY as picketd's own listener sets it (`serve_with_incoming` ignores the
        // builder's `tcp_nodelay`).
        let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
            .expect("bind loopback")
            .with_nodelay(Some(true));
        let addr = incoming.local_addr().unwrap();
        endpoints.push(format!("http://{addr}"));
        let replica = Replica {
            index,
            state: state.clone(),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(LockServer::new(replica))
                .serve_with_incoming(incoming),
        );
    }
    state.lock().unwrap().endpoints = endpoints.clone();
    (state, endpoints)
}
