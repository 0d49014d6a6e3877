//! Operator calls (`Admin` service) and the lock log (`Watch`), through the same leader
//! following and retries as the lock calls.

use tonic::Streaming;

use super::cluster::Cluster;
use super::error::ClientError;
use super::Client;
use picket_proto::proto::{self, admin_client::AdminClient, lock_client::LockClient};
use picket_proto::status::rule;

macro_rules! admin_call {
    ($name:ident, $what:literal, $request:ty, $response:ty) => {
        #[doc = concat!("`Admin.", $what, "`, with leader following and retries.")]
        pub async fn $name(&self, request: $request) -> Result<$response, ClientError> {
            let timeout = self.cluster.config.rpc_timeout;
            self.cluster
                .call($what, request, timeout, |channel, request| async move {
                    AdminClient::new(channel).$name(request).await
                })
                .await
                .map(|(response, _)| response)
        }
    };
}

impl Client {
    admin_call!(inspect, "inspect", proto::InspectRequest, proto::KeyInfo);
    admin_call!(
        list_holds,
        "list_holds",
        proto::ListHoldsRequest,
        proto::ListHoldsResponse
    );
    admin_call!(
        longest_holds,
        "longest_holds",
        proto::LongestHoldsRequest,
        proto::LongestHoldsResponse
    );
    admin_call!(
        put_class,
        "put_class",
        proto::PutClassRequest,
        proto::PutClassResponse
    );
    admin_call!(
        remove_class,
        "remove_class",
        proto::RemoveClassRequest,
        proto::RemoveClassResponse
    );
    admin_call!(
        set_semaphore,
        "set_semaphore",
        proto::SetSemaphoreRequest,
        proto::SetSemaphoreResponse
    );
    admin_call!(
        list_classes,
        "list_classes",
        proto::ListClassesRequest,
        proto::ListClassesResponse
    );
    admin_call!(
        request_force_release,
        "request_force_release",
        proto::RequestForceReleaseRequest,
        proto::RequestForceReleaseResponse
    );
    admin_call!(
        approve_force_release,
        "approve_force_release",
        proto::ApproveForceReleaseRequest,
        proto::ApproveForceReleaseResponse
    );
    admin_call!(
        deny_force_release,
        "deny_force_release",
        proto::DenyForceReleaseRequest,
        proto::DenyForceReleaseResponse
    );
    admin_call!(
        list_force_releases,
        "list_force_releases",
        proto::ListForceReleasesRequest,
        proto::ListForceReleasesResponse
    );
    admin_call!(
        query_audit,
        "query_audit",
        proto::QueryAuditRequest,
        proto::QueryAuditResponse
    );
    admin_call!(
        add_member,
        "add_member",
        proto::AddMemberRequest,
        proto::MembershipChangeResponse
    );
    admin_call!(
        promote_member,
        "promote_member",
        proto::PromoteMemberRequest,
        proto::MembershipChangeResponse
    );
    admin_call!(
        remove_member,
        "remove_member",
        proto::RemoveMemberRequest,
        proto::MembershipChangeResponse
    );
    admin_call!(
        get_replica_status,
        "get_replica_status",
        proto::GetReplicaStatusRequest,
        proto::ReplicaStatus
    );

    /// `Admin.SaveSnapshot` (leader following and retries until the stream opens): the chunks of
    /// a backup file, in order. The stream itself has no deadline (a large state takes a while);
    /// read it to its end.
    pub async fn save_snapshot(&self) -> Result<Streaming<proto::SnapshotChunk>, ClientError> {
        let timeout = self.cluster.config.rpc_timeout;
        self.cluster
            .call(
                "save_snapshot",
                proto::SaveSnapshotRequest {},
                timeout,
                |channel, mut request| async move {
                    request.metadata_mut().remove("grpc-timeout");
                    AdminClient::new(channel)
                        .max_decoding_message_size(picket_proto::API_MESSAGE_BYTES_MAX)
                        .save_snapshot(request)
                        .await
                },
            )
            .await
            .map(|(stream, _)| stream)
    }

    /// `Lock.Release` as given (any session, the caller's request id), with leader following
    /// and retries keeping the request id. For tools releasing a hold whose owner is gone; a
    /// [`super::LockGuard`] releases its own lock.
    pub async fn release_raw(
        &self,
        request: proto::ReleaseRequest,
    ) -> Result<proto::ReleaseResponse, ClientError> {
        let timeout = self.cluster.config.rpc_timeout;
        self.cluster
            .call("release", request, timeout, |channel, request| async move {
                LockClient::new(channel).release(request).await
            })
            .await
            .map(|(response, _)| response)
    }

    /// Follows the lock log of `namespace` (`None`: all) under `key_prefix` from `from_revision`
    /// (0: the oldest retained). The watcher resumes a broken stream by itself.
    pub fn watch(&self, namespace: Option<&str>, key_prefix: &str, from_revision: u64) -> Watcher {
        Watcher {
            cluster: self.cluster.clone(),
            namespace: namespace.map(str::to_owned),
            key_prefix: key_prefix.to_owned(),
            resume_from: from_revision,
            from_now: false,
            stream: None,
        }
    }

    /// Follows the lock log from the revision applied when the stream opens: only what happens
    /// from now on (after a reconnect, from where the stream broke).
    pub fn watch_from_now(&self, namespace: Option<&str>, key_prefix: &str) -> Watcher {
        Watcher {
            from_now: true,
            ..self.watch(namespace, key_prefix, 0)
        }
    }
}

/// A resumable lock-log stream: pages end at revision boundaries, so no event is seen twice.
pub struct Watcher {
    cluster: std::sync::Arc<Cluster>,
    namespace: Option<String>,
    key_prefix: String,
    resume_from: u64,
    /// Start "now" while no page has said where the stream is.
    from_now: bool,
    stream: Option<Streaming<proto::WatchResponse>>,
}

impl Watcher {
    /// The revision the next page starts at.
    pub fn resume_from(&self) -> u64 {
        self.resume_from
    }

    /// The next page of events. Reconnects (to the leader or any replica) when the stream
    /// breaks; fails with [`ClientError::Compacted`] when history is gone, or when no replica
    /// answers within the retry budget.
    pub async fn next_page(&mut self) -> Result<Vec<proto::Event>, ClientError> {
        loop {
            let stream = match &mut self.stream {
                Some(stream) => stream,
                None => {
                    let opened = self.open().await?;
                    self.stream.insert(opened)
                }
            };
            match stream.message().await {
                Ok(Some(page)) => {
                    if page.resume_from > self.resume_from {
                        self.resume_from = page.resume_from;
                    }
                    return Ok(page.events);
                }
                Ok(None) | Err(_) => self.stream = None,
            }
        }
    }

    async fn open(&self) -> Result<Streaming<proto::WatchResponse>, ClientError> {
        let request = proto::WatchRequest {
            namespace: self.namespace.clone(),
            key_prefix: self.key_prefix.clone(),
            from_revision: self.resume_from,
            from_now: self.from_now && self.resume_from == 0,
        };
        let timeout = self.cluster.config.rpc_timeout;
        let opened = self
            .cluster
            .call(
                "watch",
                request,
                timeout,
                |channel, mut request| async move {
                    // The stream lives long: only its opening has a deadline.
                    request.metadata_mut().remove("grpc-timeout");
                    LockClient::new(channel).watch(request).await
                },
            )
            .await;
        match opened {
            Ok((stream, _)) => Ok(stream),
            Err(ClientError::Refused { refusal, .. }) if refusal.rule == rule::COMPACTED => {
                Err(ClientError::Compacted {
                    from_revision: self.resume_from,
                    oldest_available_revision: refusal.oldest_available_revision.unwrap_or(0),
                })
            }
            Err(error) => Err(error),
        }
    }
}
