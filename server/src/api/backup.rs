//! `Admin.SaveSnapshot`: a backup file of the whole replicated state at one revision, read
//! linearizably by the leader and streamed in chunks (docs/storage.md, "Backup files").

use std::sync::Arc;

use picket_core::locks::{Command, LockSnapshot, Role};
use picket_core::node::{Answer, Query};
use picket_proto::backup::encode_backup;
use picket_proto::proto;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::api::service::Api;
use crate::api::stream::ChannelStream;
use crate::node::driver::{DriverHandle, Request as DriverRequest};

/// Bytes per streamed chunk (well under the API's message limit).
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Chunks buffered ahead of a slow reader.
const SNAPSHOT_CHUNKS_BUFFERED: usize = 4;

/// A backup file's bytes and what to say about it.
#[derive(Clone, Debug)]
pub struct BackupBytes {
    pub bytes: Vec<u8>,
    pub revision: u64,
}

/// The state as one read answered it, made into a backup file with a header naming the cluster,
/// this replica and its members. `stale`: this replica's applied state (any serving replica);
/// otherwise a linearizable read (leader only).
pub async fn take_backup(api: &Api, stale: bool) -> Result<BackupBytes, Status> {
    let (_, answer) = api.read(Query::Snapshot, stale).await?;
    let Answer::Snapshot(state) = answer else {
        return Err(Status::internal("a snapshot read answered something else"));
    };
    let header = header(&api.driver).await?;
    let revision = state.revision.0;
    let encode = move || encode_backup(&header, Arc::<LockSnapshot>::unwrap_or_clone(state));
    // Encoding is O(state): off the async workers (inline under the simulator, which has no
    // blocking pool).
    #[cfg(not(madsim))]
    let bytes = tokio::task::spawn_blocking(encode)
        .await
        .map_err(|e| Status::internal(format!("encoding the backup failed: {e}")))?;
    #[cfg(madsim)]
    let bytes = encode();
    Ok(BackupBytes { bytes, revision })
}

async fn header(driver: &DriverHandle) -> Result<proto::BackupHeader, Status> {
    let status = driver.ask(|reply| DriverRequest::Status { reply }).await?;
    let members = status
        .members(|n| driver.endpoint_of(n))
        .into_iter()
        .map(|m| proto::BackupMember {
            node_id: m.id.0,
            voter: m.voter,
            client_endpoint: m.client_endpoint,
        })
        .collect();
    Ok(proto::BackupHeader {
        cluster_id: driver.cluster_id.to_string(),
        taken_at_unix_ms: unix_ms_now(),
        taken_by_node_id: status.id.0,
        slot_applied: status.slot_applied,
        members,
        ..proto::BackupHeader::default()
    })
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The handler: role picket-admin in every namespace, a linearizable read, the file's bytes in
/// order; each save is logged with the caller's principal.
pub async fn save_snapshot(
    api: &Api,
    request: Request<proto::SaveSnapshotRequest>,
) -> Result<Response<ChannelStream<Result<proto::SnapshotChunk, Status>>>, Status> {
    let actor = api
        .auth
        .admin_actor_for(&request, None, &[Role::ClassAdmin])
        .await?;
    // On the record first (the replicated audit trail; the backup, read after it, holds its
    // own record): nobody takes the sessions' secret hashes unseen. The record is a command of
    // cluster version 2: while a cluster runs release 0.1 beside this one (an upgrade under
    // way), the save is in this replica's log only (docs/upgrades.md).
    let recorded = api
        .propose(Command::RecordSnapshotSave {
            actor: actor.clone(),
        })
        .await;
    let recorded_at = match recorded {
        Ok((_, at)) => at.0,
        Err(status)
            if picket_proto::status::error_detail(&status)
                .is_some_and(|d| d.rule == picket_proto::status::rule::CLUSTER_VERSION_TOO_LOW) =>
        {
            tracing::warn!(target: "picket_server::audit", principal = %actor.principal,
                "Admin.SaveSnapshot: not in the replicated audit trail, the cluster version is \
                 below 2 (an upgrade under way): recorded in this log only");
            0
        }
        Err(status) => return Err(status),
    };
    let backup = take_backup(api, false).await?;
    tracing::info!(target: "picket_server::audit", principal = %actor.principal,
        recorded_at, revision = backup.revision, bytes = backup.bytes.len(),
        "Admin.SaveSnapshot: a backup of the replicated state was taken");
    let (tx, rx) = mpsc::channel(SNAPSHOT_CHUNKS_BUFFERED);
    tokio::spawn(async move {
        let total_bytes = backup.bytes.len() as u64;
        for (index, data) in backup.bytes.chunks(SNAPSHOT_CHUNK_BYTES).enumerate() {
            let chunk = proto::SnapshotChunk {
                data: data.to_vec(),
                offset: (index * SNAPSHOT_CHUNK_BYTES) as u64,
                total_bytes,
            };
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
    });
    Ok(Response::new(ChannelStream::new(rx)))
}
