//! The generated services over a real loopback HTTP/2 connection: a unary call, the keepalive
//! and session bidirectional streams, the watch server stream, and error statuses whose
//! ErrorDetail and leader-hint metadata survive the transport. (Outside the simulator only: madsim passes
//! messages as Rust values and has no `serve_with_incoming`.)
#![cfg(not(madsim))]

use std::pin::Pin;

use picket_core::locks::{AcquireReply, Revision, Token};
use picket_proto::proto::lock_client::LockClient;
use picket_proto::proto::lock_server::{Lock, LockServer};
use picket_proto::proto::{self, acquire_reply};
use picket_proto::status::{error_detail, leader_hint, not_leader_status, LeaderHint};
use tonic::codegen::tokio_stream::{self, Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// A toy leader: grants every valid acquire with token 7, except in namespace `elsewhere`,
/// where it answers like a follower.
struct Toy;

#[tonic::async_trait]
impl Lock for Toy {
    async fn create_session(
        &self,
        request: Request<proto::CreateSessionRequest>,
    ) -> Result<Response<proto::CreateSessionResponse>, Status> {
        let _command = request.into_inner().into_command("svc")?;
        Ok(Response::new(proto::CreateSessionResponse {
            session_id: 1,
            ttl_ms: 10_000,
            session_secret: Vec::new(),
        }))
    }

    async fn close_session(
        &self,
        request: Request<proto::CloseSessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        request.into_inner().into_command("svc")?;
        Ok(Response::new(proto::CloseSessionResponse::default()))
    }

    type KeepAliveStream = BoxStream<proto::KeepAliveResponse>;

    async fn keep_alive(
        &self,
        request: Request<Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let answers = request.into_inner().map(|item| {
            let keepalive = picket_proto::convert::api::KeepAlive::parse(item?, "svc")?;
            Ok(proto::KeepAliveResponse {
                session_id: keepalive.session.0,
                seq: keepalive.seq,
                ttl_ms: 10_000,
                lost: false,
                error: None,
                ..proto::KeepAliveResponse::default()
            })
        });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        let request = request.into_inner();
        if request.namespace == "elsewhere" {
            return Err(not_leader_status(&LeaderHint {
                node_id: Some(3),
                endpoint: Some("http://10.0.0.3:7100".into()),
            }));
        }
        request.into_command("svc")?;
        Ok(Response::new(proto::AcquireResponse::new(
            AcquireReply::Granted {
                token: Token(7),
                permit: None,
            },
            Revision(7),
        )))
    }

    async fn release(
        &self,
        request: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        request.into_inner().into_command("svc")?;
        Ok(Response::new(proto::ReleaseResponse::default()))
    }

    async fn cancel_wait(
        &self,
        request: Request<proto::CancelWaitRequest>,
    ) -> Result<Response<proto::CancelWaitResponse>, Status> {
        request.into_inner().into_command("svc")?;
        Ok(Response::new(proto::CancelWaitResponse::default()))
    }

    type SessionStream = BoxStream<proto::SessionResponse>;

    /// Acquires answered as by `acquire`, in order; anything else refused `UNIMPLEMENTED`.
    async fn session(
        &self,
        request: Request<Streaming<proto::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        use picket_proto::session_stream::status_to_proto;
        use proto::session_request::Request as In;
        use proto::session_response::Response as Out;
        let answers = request.into_inner().then(|item| async move {
            let item = item?;
            let answer = match item.request {
                Some(In::Acquire(m)) => Toy
                    .acquire(Request::new(m))
                    .await
                    .map(|r| Out::Acquire(r.into_inner())),
                _ => Err(Status::unimplemented("toy: acquires only")),
            };
            Ok(proto::SessionResponse {
                seq: item.seq,
                response: Some(
                    answer.unwrap_or_else(|status| Out::Error(status_to_proto(&status))),
                ),
            })
        });
        Ok(Response::new(Box::pin(answers)))
    }

    type WatchStream = BoxStream<proto::WatchResponse>;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let start = picket_proto::convert::api::WatchStart::try_from(request.into_inner())?;
        let pages = (0..3u64).map(move |i| {
            Ok(proto::WatchResponse {
                events: vec![],
                resume_from: start.from.0 + i,
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(pages))))
    }
}

#[tokio::test]
async fn services_statuses_and_hints_cross_a_real_connection() {
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
        .expect("bind loopback");
    let addr = incoming.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LockServer::new(Toy))
            .serve_with_incoming(incoming),
    );
    let mut client = LockClient::connect(format!("http://{addr}")).await.unwrap();

    let good = proto::AcquireRequest {
        session_id: 1,
        request_id: 1,
        namespace: "orders".into(),
        key: "k".into(),
        wait_ms: 0,
        session_secret: vec![7; 32],
        wait_timeout_ms: 0,
        mode: 0,
    };
    let reply = client.acquire(good.clone()).await.unwrap().into_inner();
    assert_eq!(
        reply.reply.unwrap().kind,
        Some(acquire_reply::Kind::Granted(acquire_reply::Granted {
            token: 7,
            slot: None
        }))
    );

    let bad = proto::AcquireRequest {
        key: "x".repeat(513),
        ..good.clone()
    };
    let status = client.acquire(bad).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("acquire.key: "), "{status:?}");
    assert_eq!(error_detail(&status).unwrap().field, "acquire.key");

    let redirected = proto::AcquireRequest {
        namespace: "elsewhere".into(),
        ..good
    };
    let redirected_again = redirected.clone();
    let status = client.acquire(redirected).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.metadata().get("picket-leader").unwrap(),
        "http://10.0.0.3:7100"
    );
    let hint = leader_hint(&status).unwrap();
    assert_eq!(hint.node_id, Some(3));

    let keepalives = tokio_stream::iter((1..=3u64).map(|seq| proto::KeepAliveRequest {
        session_id: 1,
        seq,
        session_secret: vec![7; 32],
    }));
    let mut answers = client.keep_alive(keepalives).await.unwrap().into_inner();
    let mut seqs = Vec::new();
    while let Some(answer) = answers.next().await {
        seqs.push(answer.unwrap().seq);
    }
    assert_eq!(seqs, vec![1, 2, 3]);

    // The same refusal on the Session stream: its google.rpc.Status keeps the rule and the hint.
    let on_stream = tokio_stream::iter([proto::SessionRequest {
        seq: 5,
        request: Some(proto::session_request::Request::Acquire(redirected_again)),
    }]);
    let mut answers = client.session(on_stream).await.unwrap().into_inner();
    let answer = answers.next().await.unwrap().unwrap();
    assert_eq!(answer.seq, 5);
    let Some(proto::session_response::Response::Error(error)) = answer.response else {
        panic!("a refusal: {answer:?}");
    };
    let status = picket_proto::session_stream::status_from_proto(&error);
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(error_detail(&status).unwrap().rule, "not_leader");
    assert_eq!(leader_hint(&status).unwrap().node_id, Some(3));

    let mut pages = client
        .watch(proto::WatchRequest {
            namespace: Some("orders".into()),
            key_prefix: String::new(),
            from_revision: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut resumes = Vec::new();
    while let Some(page) = pages.next().await {
        resumes.push(page.unwrap().resume_from);
    }
    assert_eq!(resumes, vec![10, 11, 12]);
    server.abort();
}
