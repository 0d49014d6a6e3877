//! picketctl's force-release approval against a fake Admin service on loopback: the fenced
//! acknowledgement, the class kind that changed, and output that never contradicts itself.

use std::sync::{Arc, Mutex};

use clap::Parser;
use picket_client::Client;
use picket_proto::proto::admin_server::{Admin, AdminServer};
use picket_proto::proto::{self};
use tonic::{Request, Response, Status};

use super::commands::approve;
use super::Ack;
use super::{Cli, CtlError};

/// A fake Admin service with one pending force-release request; counts approvals.
#[derive(Clone)]
struct FakeAdmin {
    fenced: bool,
    /// The class's kind now (in Inspect and the listing's `fenced_now`).
    fenced_now: bool,
    approvals: Arc<Mutex<Vec<proto::ApproveForceReleaseRequest>>>,
}

/// The fake's response stream: a channel's receiving end.
struct ChannelStream<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> futures_core::Stream for ChannelStream<T> {
    type Item = T;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

fn nope<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("fake admin"))
}

#[tonic::async_trait]
impl Admin for FakeAdmin {
    async fn inspect(
        &self,
        request: Request<proto::InspectRequest>,
    ) -> Result<Response<proto::KeyInfo>, Status> {
        let request = request.into_inner();
        Ok(Response::new(proto::KeyInfo {
            namespace: request.namespace,
            key: request.key,
            holder: Some(proto::HoldInfo {
                session_id: 9,
                token: 31,
                ..Default::default()
            }),
            queue_depth: 2,
            class: Some(proto::ClassSpec {
                name: "ledger".into(),
                fenced: self.fenced_now,
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
    async fn list_holds(
        &self,
        _: Request<proto::ListHoldsRequest>,
    ) -> Result<Response<proto::ListHoldsResponse>, Status> {
        nope()
    }
    async fn longest_holds(
        &self,
        _: Request<proto::LongestHoldsRequest>,
    ) -> Result<Response<proto::LongestHoldsResponse>, Status> {
        nope()
    }
    async fn put_class(
        &self,
        _: Request<proto::PutClassRequest>,
    ) -> Result<Response<proto::PutClassResponse>, Status> {
        nope()
    }
    async fn remove_class(
        &self,
        _: Request<proto::RemoveClassRequest>,
    ) -> Result<Response<proto::RemoveClassResponse>, Status> {
        nope()
    }
    async fn set_semaphore(
        &self,
        _: Request<proto::SetSemaphoreRequest>,
    ) -> Result<Response<proto::SetSemaphoreResponse>, Status> {
        nope()
    }
    async fn list_classes(
        &self,
        _: Request<proto::ListClassesRequest>,
    ) -> Result<Response<proto::ListClassesResponse>, Status> {
        nope()
    }
    async fn request_force_release(
        &self,
        _: Request<proto::RequestForceReleaseRequest>,
    ) -> Result<Response<proto::RequestForceReleaseResponse>, Status> {
        nope()
    }
    async fn approve_force_release(
        &self,
        request: Request<proto::ApproveForceReleaseRequest>,
    ) -> Result<Response<proto::ApproveForceReleaseResponse>, Status> {
        let request = request.into_inner();
        self.approvals.lock().unwrap().push(request);
        Ok(Response::new(proto::ApproveForceReleaseResponse {
            floor: 50,
            released_token: 31,
            next: None,
            session_revoked: Some(9),
            fenced: self.fenced,
        }))
    }
    async fn deny_force_release(
        &self,
        _: Request<proto::DenyForceReleaseRequest>,
    ) -> Result<Response<proto::DenyForceReleaseResponse>, Status> {
        nope()
    }
    async fn list_force_releases(
        &self,
        _: Request<proto::ListForceReleasesRequest>,
    ) -> Result<Response<proto::ListForceReleasesResponse>, Status> {
        Ok(Response::new(proto::ListForceReleasesResponse {
            requests: vec![proto::ForceReleaseInfo {
                id: 5,
                namespace: "orders".into(),
                key: "invoice/42".into(),
                holder_session_id: 9,
                token: 31,
                requester: "alice".into(),
                reason: "hung".into(),
                revoke_session: true,
                fenced: self.fenced,
                fenced_now: Some(self.fenced_now),
                ..Default::default()
            }],
        }))
    }
    type SaveSnapshotStream = ChannelStream<Result<proto::SnapshotChunk, Status>>;
    /// A good backup in 10-byte chunks, one of them left out (a broken stream).
    async fn save_snapshot(
        &self,
        _: Request<proto::SaveSnapshotRequest>,
    ) -> Result<Response<Self::SaveSnapshotStream>, Status> {
        let state =
            picket_core::locks::LockStateMachine::new(picket_core::locks::LockConfig::default())
                .snapshot();
        let bytes = picket_proto::backup::encode_backup(&proto::BackupHeader::default(), state);
        let (tx, rx) = tokio::sync::mpsc::channel(bytes.len() / 10 + 1);
        for (i, data) in bytes.chunks(10).enumerate() {
            if i == 2 {
                continue;
            }
            let chunk = proto::SnapshotChunk {
                data: data.to_vec(),
                offset: (i * 10) as u64,
                total_bytes: bytes.len() as u64,
            };
            tx.try_send(Ok(chunk)).unwrap();
        }
        Ok(Response::new(ChannelStream(rx)))
    }
    async fn get_replica_status(
        &self,
        _: Request<proto::GetReplicaStatusRequest>,
    ) -> Result<Response<proto::ReplicaStatus>, Status> {
        nope()
    }
    async fn add_member(
        &self,
        _: Request<proto::AddMemberRequest>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        nope()
    }
    async fn promote_member(
        &self,
        _: Request<proto::PromoteMemberRequest>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        nope()
    }
    async fn remove_member(
        &self,
        _: Request<proto::RemoveMemberRequest>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        nope()
    }
    async fn query_audit(
        &self,
        _: Request<proto::QueryAuditRequest>,
    ) -> Result<Response<proto::QueryAuditResponse>, Status> {
        nope()
    }
}

/// Serves `service` on every connection `listener` accepts (HTTP/2, as gRPC needs), with hyper
/// itself: tonic's router would bring axum into picketctl's dependencies.
async fn serve(listener: tokio::net::TcpListener, service: AdminServer<FakeAdmin>) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    while let Ok((stream, _)) = listener.accept().await {
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

pub(super) async fn fake_admin(
    fenced: bool,
) -> (Client, Arc<Mutex<Vec<proto::ApproveForceReleaseRequest>>>) {
    fake_admin_now(fenced, fenced).await
}

/// A request made for a `fenced` class whose kind is `fenced_now` at approval.
async fn fake_admin_now(
    fenced: bool,
    fenced_now: bool,
) -> (Client, Arc<Mutex<Vec<proto::ApproveForceReleaseRequest>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().unwrap();
    let approvals = Arc::new(Mutex::new(Vec::new()));
    let service = AdminServer::new(FakeAdmin {
        fenced,
        fenced_now,
        approvals: approvals.clone(),
    });
    tokio::spawn(serve(listener, service));
    let cli = Cli::try_parse_from([
        "picketctl",
        "--endpoints",
        &addr.to_string(),
        "force-release",
        "list",
    ])
    .unwrap();
    (
        Client::new(cli.global.client_config(None)).unwrap(),
        approvals,
    )
}

#[tokio::test]
async fn approving_a_fenced_release_without_acknowledging_is_refused_and_sends_nothing() {
    let (client, approvals) = fake_admin(true).await;
    let error = approve(&client, 5, None).await.unwrap_err();
    let CtlError::Refused(message) = &error else {
        panic!("not refused by picketctl: {error}");
    };
    assert!(message.contains("class is FENCED"), "{message}");
    assert!(
        !message.contains("--ack fenced"),
        "no flag to paste: {message}"
    );
    // Acknowledging the wrong flag is refused the same way.
    let mismatch = approve(&client, 5, Some(Ack::Advisory)).await.unwrap_err();
    let CtlError::Refused(message) = &mismatch else {
        panic!("not refused by picketctl: {mismatch}");
    };
    assert!(message.contains("does not match"), "{message}");
    assert_eq!(error.exit(), super::EXIT_REFUSED);
    assert!(
        approvals.lock().unwrap().is_empty(),
        "nothing sent to the server"
    );

    let report = approve(&client, 5, Some(Ack::Fenced)).await.unwrap();
    assert_eq!(report.json["fenced"], true);
    // The key as it was before the approval is shown with it.
    assert_eq!(report.json["key_before"]["holder"]["token"], 31);
    assert!(
        report.human.contains("queue:    2 waiting"),
        "{}",
        report.human
    );
    assert_eq!(report.json["floor"], 50);
    assert_eq!(report.json["session_revoked"], 9);
    let sent = approvals.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].acknowledged_fenced,
        "the acknowledgement is passed on"
    );
}

#[tokio::test]
async fn an_advisory_release_is_approved_without_the_flag_and_an_unknown_id_is_refused() {
    let (client, approvals) = fake_admin(false).await;
    let report = approve(&client, 5, Some(Ack::Advisory)).await.unwrap();
    assert_eq!(report.json["fenced"], false);
    assert!(report.human.contains("ADVISORY"), "{}", report.human);
    assert!(!approvals.lock().unwrap()[0].acknowledged_fenced);
    let unknown = approve(&client, 6, Some(Ack::Fenced)).await.unwrap_err();
    assert!(
        matches!(unknown, CtlError::Refused(ref m) if m.contains("#6")),
        "{unknown}"
    );
}

/// Issue 16, finding 2: the class went from fenced to advisory between request and approval;
/// `approve --ack fenced` went through and its output said ADVISORY in one block and FENCED in
/// the next.
#[tokio::test]
async fn approving_a_request_whose_class_kind_changed_is_refused_and_names_both_kinds() {
    let (client, approvals) = fake_admin_now(true, false).await;
    for ack in [Some(Ack::Fenced), Some(Ack::Advisory), None] {
        let error = approve(&client, 5, ack).await.unwrap_err();
        let CtlError::Refused(message) = &error else {
            panic!("not refused by picketctl: {error}");
        };
        assert!(
            message.contains("requested when its class was fenced; the class is advisory now"),
            "{message}"
        );
        assert!(message.contains("make a new request"), "{message}");
        // One kind only is asserted as true: the current one.
        assert!(!message.contains("FENCED:"), "{message}");
        assert_eq!(error.exit(), super::EXIT_REFUSED);
    }
    assert!(approvals.lock().unwrap().is_empty(), "nothing sent");
}

/// The approval's output says the kind once, as the server applied it, and what the holder
/// learns when its session is not revoked.
#[tokio::test]
async fn the_approval_output_never_contradicts_itself() {
    let (client, _) = fake_admin(false).await;
    let report = approve(&client, 5, Some(Ack::Advisory)).await.unwrap();
    assert!(report.human.contains("ADVISORY"), "{}", report.human);
    assert!(!report.human.contains("FENCED"), "{}", report.human);
    assert_eq!(report.json["fenced"], false);
    assert!(report.json["holder_learns"]
        .as_str()
        .unwrap()
        .contains("revoked"));
}
