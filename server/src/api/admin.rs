//! The `Admin` gRPC service (docs/api.md, docs/operations.md): inspection, classes, semaphores,
//! two-person force-release, audit, membership and snapshots, over the same [`Api`] as `Lock`.

use picket_core::locks::{Actor, Command, Reply, Role, FORCE_RELEASE_ROLES};
use picket_core::node::Query;
use picket_proto::convert::api::{
    AuditRead, InspectQuery, ListClassesQuery, ListHoldsQuery, WrongReply,
};
use picket_proto::proto;
use tonic::{Request, Response, Status};

use crate::api::membership;
use crate::api::service::{reply_as, Api};
use crate::api::stream::ChannelStream;
use crate::node::driver::Request as DriverRequest;

/// The `Admin` service.
#[derive(Debug, Clone)]
pub struct AdminService(pub Api);

impl AdminService {
    async fn mutate<T: TryFrom<Reply, Error = WrongReply>>(
        &self,
        command: Command,
    ) -> Result<Response<T>, Status> {
        let (reply, _) = self.0.propose(command).await?;
        Ok(Response::new(reply_as(reply)?))
    }

    /// The actor of a mutation on namespace `ns` that needs one of `roles`.
    async fn actor_on<T>(
        &self,
        request: &Request<T>,
        ns: &str,
        roles: &[Role],
    ) -> Result<Actor, Status> {
        self.0.auth.admin_actor_for(request, Some(ns), roles).await
    }

    /// The actor approving or denying force-release request `id`, checked against the
    /// request's namespace. An unknown request (no namespace) is left to the state machine,
    /// which answers that it is unknown.
    async fn force_release_actor<T>(&self, request: &Request<T>, id: u64) -> Result<Actor, Status> {
        match self.0.force_release_namespace(id).await? {
            Some(ns) => {
                self.0
                    .auth
                    .admin_actor_for(request, Some(&ns), FORCE_RELEASE_ROLES)
                    .await
            }
            None => self.0.auth.admin_actor_for(request, None, &[]).await,
        }
    }
}

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminService {
    async fn inspect(
        &self,
        request: Request<proto::InspectRequest>,
    ) -> Result<Response<proto::KeyInfo>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let q = InspectQuery::try_from(request.into_inner())?;
        let (_, answer) = self.0.read(q.query(), q.allow_stale).await?;
        Ok(Response::new(proto::KeyInfo::from_answer(answer)?))
    }

    async fn list_holds(
        &self,
        request: Request<proto::ListHoldsRequest>,
    ) -> Result<Response<proto::ListHoldsResponse>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let q = ListHoldsQuery::try_from(request.into_inner())?;
        let (revision, answer) = self.0.read(q.query(), q.allow_stale).await?;
        Ok(Response::new(proto::ListHoldsResponse::from_answer(
            answer, revision,
        )?))
    }

    async fn longest_holds(
        &self,
        request: Request<proto::LongestHoldsRequest>,
    ) -> Result<Response<proto::LongestHoldsResponse>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let stale = request.into_inner().allow_stale;
        let (revision, answer) = self.0.read(Query::LongestHolds, stale).await?;
        Ok(Response::new(proto::LongestHoldsResponse::from_answer(
            answer, revision,
        )?))
    }

    async fn put_class(
        &self,
        request: Request<proto::PutClassRequest>,
    ) -> Result<Response<proto::PutClassResponse>, Status> {
        let ns = &request.get_ref().namespace;
        let actor = self.actor_on(&request, ns, &[Role::ClassAdmin]).await?;
        self.mutate(request.into_inner().into_command(actor)?).await
    }

    async fn remove_class(
        &self,
        request: Request<proto::RemoveClassRequest>,
    ) -> Result<Response<proto::RemoveClassResponse>, Status> {
        let ns = &request.get_ref().namespace;
        let actor = self.actor_on(&request, ns, &[Role::ClassAdmin]).await?;
        self.mutate(request.into_inner().into_command(actor)?).await
    }

    async fn set_semaphore(
        &self,
        request: Request<proto::SetSemaphoreRequest>,
    ) -> Result<Response<proto::SetSemaphoreResponse>, Status> {
        let ns = &request.get_ref().namespace;
        let actor = self.actor_on(&request, ns, &[Role::ClassAdmin]).await?;
        let command = request.into_inner().into_command(actor)?;
        let (reply, revision) = self.0.propose(command).await?;
        let response = proto::SetSemaphoreResponse::from_reply(reply, revision)?;
        Ok(Response::new(response))
    }

    async fn list_classes(
        &self,
        request: Request<proto::ListClassesRequest>,
    ) -> Result<Response<proto::ListClassesResponse>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let q = ListClassesQuery::try_from(request.into_inner())?;
        let (_, answer) = self.0.read(q.query(), q.allow_stale).await?;
        Ok(Response::new(proto::ListClassesResponse::from_answer(
            answer,
        )?))
    }

    async fn request_force_release(
        &self,
        request: Request<proto::RequestForceReleaseRequest>,
    ) -> Result<Response<proto::RequestForceReleaseResponse>, Status> {
        let ns = &request.get_ref().namespace;
        let actor = self.actor_on(&request, ns, FORCE_RELEASE_ROLES).await?;
        self.mutate(request.into_inner().into_command(actor)?).await
    }

    async fn approve_force_release(
        &self,
        request: Request<proto::ApproveForceReleaseRequest>,
    ) -> Result<Response<proto::ApproveForceReleaseResponse>, Status> {
        let id = request.get_ref().force_release_id;
        let actor = self.force_release_actor(&request, id).await?;
        self.mutate(request.into_inner().into_command(actor)?).await
    }

    async fn deny_force_release(
        &self,
        request: Request<proto::DenyForceReleaseRequest>,
    ) -> Result<Response<proto::DenyForceReleaseResponse>, Status> {
        let id = request.get_ref().force_release_id;
        let actor = self.force_release_actor(&request, id).await?;
        self.mutate(request.into_inner().into_command(actor)?).await
    }

    async fn list_force_releases(
        &self,
        request: Request<proto::ListForceReleasesRequest>,
    ) -> Result<Response<proto::ListForceReleasesResponse>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let stale = request.into_inner().allow_stale;
        let (_, answer) = self.0.read(Query::ForceReleases, stale).await?;
        Ok(Response::new(
            proto::ListForceReleasesResponse::from_answer(answer)?,
        ))
    }

    async fn query_audit(
        &self,
        request: Request<proto::QueryAuditRequest>,
    ) -> Result<Response<proto::QueryAuditResponse>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let q = AuditRead::try_from(request.into_inner())?;
        let (_, answer) = self.0.read(q.query(), q.allow_stale).await?;
        Ok(Response::new(proto::QueryAuditResponse::from_answer(
            answer,
        )?))
    }

    async fn add_member(
        &self,
        request: Request<proto::AddMemberRequest>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        self.0
            .change_membership(request, membership::add_request)
            .await
    }

    async fn promote_member(
        &self,
        request: Request<proto::PromoteMemberRequest>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        self.0
            .change_membership(request, membership::promote_request)
            .await
    }

    async fn remove_member(
        &self,
        request: Request<proto::RemoveMemberRequest>,
    ) -> Result<Response<proto::MembershipChangeResponse>, Status> {
        self.0
            .change_membership(request, membership::remove_request)
            .await
    }

    type SaveSnapshotStream = ChannelStream<Result<proto::SnapshotChunk, Status>>;

    async fn save_snapshot(
        &self,
        request: Request<proto::SaveSnapshotRequest>,
    ) -> Result<Response<Self::SaveSnapshotStream>, Status> {
        crate::api::backup::save_snapshot(&self.0, request).await
    }

    async fn get_replica_status(
        &self,
        request: Request<proto::GetReplicaStatusRequest>,
    ) -> Result<Response<proto::ReplicaStatus>, Status> {
        self.0.auth.admit_reader(&request).await?;
        let driver = &self.0.driver;
        let status = driver.ask(|reply| DriverRequest::Status { reply }).await?;
        let storage = &status.storage;
        Ok(Response::new(proto::ReplicaStatus {
            cluster_id: driver.cluster_id.to_string(),
            node_id: status.id.0,
            role: crate::metrics::role_name(status.role).to_owned(),
            leader_node_id: status.leader.map(|l| l.0),
            ready: status.not_serving_because().is_none(),
            detail: status.not_serving_because().unwrap_or_default().to_owned(),
            revision: status.revision.0,
            slot_applied: status.slot_applied,
            boot: status.boot,
            storage: Some(proto::ReplicaStorage {
                recovery: storage.recovery.clone(),
                durable_state_lost: storage.durable_state_lost,
                lost_reason: storage.lost_reason.clone(),
                generation_dir: storage.generation_dir.clone(),
                damaged_dir: storage.damaged_dir.clone(),
            }),
            members: status
                .members(|n| driver.endpoint_of(n))
                .into_iter()
                .map(|m| proto::Member {
                    node_id: m.id.0,
                    client_endpoint: m.client_endpoint,
                    voter: m.voter,
                    slot_applied: m.slot_applied,
                })
                .collect(),
            membership_from_slot: status.membership_from,
            release: crate::version::VERSION.to_owned(),
            cluster_version: status.cluster_version,
            cluster_version_max: crate::version::CLUSTER_VERSION,
            peer_protocol_version_min: crate::version::PEER_PROTOCOL_VERSION_MIN,
            peer_protocol_version_max: crate::version::PEER_PROTOCOL_VERSION,
        }))
    }
}
