//! The lock state machine's snapshot (a durable record) and the decoders from bytes.
//!
//! Decoding checks structure only; whether a snapshot describes a reachable state is checked by
//! `LockStateMachine::restore`, which answers its own typed error.

use std::sync::Arc;

use picket_core::locks::{
    AcquireReply, ClassSpec, Command, Event, HoldSnapshot, LockConfig, LockSnapshot,
    LockSnapshotEntry, PermitSlot, Remembered, RememberedReply, Reply, RequestId, RequestTarget,
    Revision, SemaphoreSnapshot, SessionId, SessionSnapshot, Token, WaiterSnapshot,
};
use picket_core::time::Instant;
use prost::Message;

use super::command::{grant_from_wire, grant_to_wire, hash_from_wire, hash_to_wire};
use super::common::{mode_from_wire, mode_to_wire};
use super::{each, from_usize, nested, required, to_usize};
use crate::error::{ConvertError, DecodeError};
use crate::proto;

impl From<LockConfig> for proto::LockConfig {
    fn from(v: LockConfig) -> Self {
        proto::LockConfig {
            session_ttl_ms_min: v.session_ttl_ms_min,
            session_ttl_ms_max: v.session_ttl_ms_max,
            session_ttl_ms_default: v.session_ttl_ms_default,
            sessions_max: from_usize(v.sessions_max),
            holds_per_session_max: from_usize(v.holds_per_session_max),
            waiters_per_key_max: from_usize(v.waiters_per_key_max),
            dedup_window: from_usize(v.dedup_window),
            classes_per_namespace_max: from_usize(v.classes_per_namespace_max),
            force_releases_pending_max: from_usize(v.force_releases_pending_max),
            force_release_ttl_ms: v.force_release_ttl_ms,
            audit_retention: from_usize(v.audit_retention),
            watch_retention: from_usize(v.watch_retention),
        }
    }
}

impl TryFrom<proto::LockConfig> for LockConfig {
    type Error = ConvertError;
    fn try_from(v: proto::LockConfig) -> Result<Self, ConvertError> {
        Ok(LockConfig {
            session_ttl_ms_min: v.session_ttl_ms_min,
            session_ttl_ms_max: v.session_ttl_ms_max,
            session_ttl_ms_default: v.session_ttl_ms_default,
            sessions_max: to_usize(v.sessions_max, "sessions_max")?,
            holds_per_session_max: to_usize(v.holds_per_session_max, "holds_per_session_max")?,
            waiters_per_key_max: to_usize(v.waiters_per_key_max, "waiters_per_key_max")?,
            dedup_window: to_usize(v.dedup_window, "dedup_window")?,
            classes_per_namespace_max: to_usize(
                v.classes_per_namespace_max,
                "classes_per_namespace_max",
            )?,
            force_releases_pending_max: to_usize(
                v.force_releases_pending_max,
                "force_releases_pending_max",
            )?,
            force_release_ttl_ms: v.force_release_ttl_ms,
            audit_retention: to_usize(v.audit_retention, "audit_retention")?,
            watch_retention: to_usize(v.watch_retention, "watch_retention")?,
        })
    }
}

impl From<SessionSnapshot> for proto::SessionRecord {
    fn from(v: SessionSnapshot) -> Self {
        proto::SessionRecord {
            session_id: v.id.0,
            identity: Some(v.identity.into()),
            ttl_ms: v.ttl_ms,
            created_at_ms: v.created_at.as_millis(),
            request_newest: v.request_newest.map(|r| r.0),
            replies: v.replies.into_iter().map(remembered_to_wire).collect(),
            secret_hash: hash_to_wire(v.secret_hash),
            holds_lost: v.holds_lost.into_iter().map(Into::into).collect(),
        }
    }
}

fn remembered_to_wire(remembered: Remembered) -> proto::RememberedReply {
    use proto::remembered_reply::Kind;
    let Remembered {
        request,
        reply,
        target,
    } = remembered;
    let kind = match reply {
        RememberedReply::Acquire(reply) => Kind::Acquire(reply.into()),
        RememberedReply::Released { token, next } => Kind::Released(proto::reply::Released {
            token: token.0,
            next: grant_to_wire(next),
        }),
    };
    proto::RememberedReply {
        request_id: request.0,
        kind: Some(kind),
        target: target.map(|t| proto::RequestTarget {
            namespace: t.namespace,
            key: t.key,
            mode: t.mode.map(mode_to_wire),
        }),
    }
}

impl TryFrom<proto::RememberedReply> for Remembered {
    type Error = ConvertError;
    fn try_from(v: proto::RememberedReply) -> Result<Self, ConvertError> {
        use proto::remembered_reply::Kind;
        let reply = match required(v.kind, "kind")? {
            Kind::Acquire(reply) => RememberedReply::Acquire(
                AcquireReply::try_from(reply).map_err(|e| e.within("kind.acquire"))?,
            ),
            Kind::Released(released) => RememberedReply::Released {
                token: Token(released.token),
                next: grant_from_wire(released.next),
            },
        };
        let target = match v.target {
            Some(t) => Some(RequestTarget {
                mode: t
                    .mode
                    .map(|m| mode_from_wire(m, "target.mode"))
                    .transpose()?,
                namespace: t.namespace,
                key: t.key,
            }),
            None => None,
        };
        Ok(Remembered {
            request: RequestId(v.request_id),
            reply,
            target,
        })
    }
}

impl TryFrom<proto::SessionRecord> for SessionSnapshot {
    type Error = ConvertError;
    fn try_from(v: proto::SessionRecord) -> Result<Self, ConvertError> {
        Ok(SessionSnapshot {
            id: SessionId(v.session_id),
            identity: nested(v.identity, "identity")?,
            secret_hash: hash_from_wire(&v.secret_hash, "secret_hash")?,
            ttl_ms: v.ttl_ms,
            created_at: Instant::from_millis(v.created_at_ms),
            request_newest: v.request_newest.map(RequestId),
            replies: each(v.replies, "replies")?,
            holds_lost: each(v.holds_lost, "holds_lost")?,
        })
    }
}

impl From<LockSnapshotEntry> for proto::LockRecord {
    fn from(v: LockSnapshotEntry) -> Self {
        // The first (oldest) holder goes where records before shared locks kept the one holder.
        let mut holders = v.holders.into_iter().map(|h| proto::HoldRecord {
            session_id: h.session.0,
            token: h.token.0,
            granted_at_ms: h.granted_at.as_millis(),
            slot: h.permit.map(|p| p.0),
        });
        proto::LockRecord {
            namespace: v.namespace,
            key: v.key,
            holder: holders.next(),
            shared_holders: holders.collect(),
            mode: mode_to_wire(v.mode),
            waiters: v
                .waiters
                .into_iter()
                .map(|w| proto::WaiterRecord {
                    session_id: w.session.0,
                    queued_at_ms: w.queued_at.as_millis(),
                    deadline_ms: w.deadline.map(Instant::as_millis),
                    mode: mode_to_wire(w.mode),
                })
                .collect(),
            floor: v.floor.0,
        }
    }
}

impl TryFrom<proto::HoldRecord> for HoldSnapshot {
    type Error = ConvertError;
    fn try_from(v: proto::HoldRecord) -> Result<Self, ConvertError> {
        Ok(HoldSnapshot {
            session: SessionId(v.session_id),
            token: Token(v.token),
            granted_at: Instant::from_millis(v.granted_at_ms),
            permit: v.slot.map(PermitSlot),
        })
    }
}

impl TryFrom<proto::WaiterRecord> for WaiterSnapshot {
    type Error = ConvertError;
    fn try_from(v: proto::WaiterRecord) -> Result<Self, ConvertError> {
        Ok(WaiterSnapshot {
            mode: mode_from_wire(v.mode, "mode")?,
            session: SessionId(v.session_id),
            queued_at: Instant::from_millis(v.queued_at_ms),
            deadline: v.deadline_ms.map(Instant::from_millis),
        })
    }
}

impl TryFrom<proto::LockRecord> for LockSnapshotEntry {
    type Error = ConvertError;
    fn try_from(v: proto::LockRecord) -> Result<Self, ConvertError> {
        let mut holders: Vec<HoldSnapshot> = vec![nested(v.holder, "holder")?];
        holders.extend(each::<_, HoldSnapshot>(v.shared_holders, "shared_holders")?);
        Ok(LockSnapshotEntry {
            mode: mode_from_wire(v.mode, "mode")?,
            holders,
            waiters: each(v.waiters, "waiters")?,
            floor: Revision(v.floor),
            namespace: v.namespace,
            key: v.key,
        })
    }
}

impl TryFrom<proto::NamespacedClass> for (String, ClassSpec) {
    type Error = ConvertError;
    fn try_from(v: proto::NamespacedClass) -> Result<Self, ConvertError> {
        Ok((v.namespace, nested(v.class, "class")?))
    }
}

impl From<LockSnapshot> for proto::LockSnapshot {
    fn from(v: LockSnapshot) -> Self {
        proto::LockSnapshot {
            config: Some(v.config.into()),
            revision: v.revision.0,
            time_ms: v.time.as_millis(),
            sessions: v.sessions.into_iter().map(Into::into).collect(),
            locks: v.locks.into_iter().map(Into::into).collect(),
            classes: v
                .classes
                .into_iter()
                .map(|(namespace, class)| proto::NamespacedClass {
                    namespace,
                    class: Some(class.into()),
                })
                .collect(),
            force_releases: v.force_releases.into_iter().map(Into::into).collect(),
            audit: v.audit.into_iter().map(Into::into).collect(),
            audit_compacted_through: v.audit_compacted_through.0,
            events: v.events.iter().map(Into::into).collect(),
            events_compacted_through: v.events_compacted_through.0,
            semaphores: v
                .semaphores
                .into_iter()
                .map(|s| proto::SemaphoreRecord {
                    namespace: s.namespace,
                    key: s.key,
                    permits: s.permits,
                    permits_set_at: s.permits_set_at.0,
                    floors: s
                        .floors
                        .into_iter()
                        .map(|(permit, floor)| proto::SlotFloorRecord {
                            slot: permit.0,
                            floor: floor.0,
                        })
                        .collect(),
                })
                .collect(),
            cluster_version: v.cluster_version,
        }
    }
}

impl TryFrom<proto::LockSnapshot> for LockSnapshot {
    type Error = ConvertError;
    fn try_from(v: proto::LockSnapshot) -> Result<Self, ConvertError> {
        Ok(LockSnapshot {
            config: nested(v.config, "config")?,
            revision: Revision(v.revision),
            time: Instant::from_millis(v.time_ms),
            sessions: each(v.sessions, "sessions")?,
            locks: each(v.locks, "locks")?,
            classes: each(v.classes, "classes")?,
            force_releases: each(v.force_releases, "force_releases")?,
            audit: each(v.audit, "audit")?,
            audit_compacted_through: Revision(v.audit_compacted_through),
            events: each::<_, Event>(v.events, "events")?.into(),
            events_compacted_through: Revision(v.events_compacted_through),
            cluster_version: v.cluster_version,
            // Absent in snapshots written before semaphores: none.
            semaphores: v
                .semaphores
                .into_iter()
                .map(|s| SemaphoreSnapshot {
                    namespace: s.namespace,
                    key: s.key,
                    permits: s.permits,
                    permits_set_at: Revision(s.permits_set_at),
                    floors: s
                        .floors
                        .into_iter()
                        .map(|f| (PermitSlot(f.slot), Revision(f.floor)))
                        .collect(),
                })
                .collect(),
        })
    }
}

fn decode<P, C>(bytes: &[u8], message: &'static str) -> Result<C, DecodeError>
where
    P: Message + Default,
    C: TryFrom<P, Error = ConvertError>,
{
    let wire = P::decode(bytes).map_err(|source| DecodeError::Protobuf { message, source })?;
    C::try_from(wire).map_err(|e| DecodeError::Invalid(e.within(message)))
}

/// The node's shared snapshot (`picket_core::node::NodeSnapshot`): converted by whoever sends or
/// saves it, outside the driver's turn; the state is copied only while the replica still keeps
/// its own reference.
impl From<Arc<LockSnapshot>> for proto::LockSnapshot {
    fn from(v: Arc<LockSnapshot>) -> Self {
        Arc::unwrap_or_clone(v).into()
    }
}

impl TryFrom<proto::LockSnapshot> for Arc<LockSnapshot> {
    type Error = ConvertError;
    fn try_from(v: proto::LockSnapshot) -> Result<Self, ConvertError> {
        LockSnapshot::try_from(v).map(Arc::new)
    }
}

/// Reads a `picket.v1.LockSnapshot` (structure only: restore checks consistency).
pub fn decode_lock_snapshot(bytes: &[u8]) -> Result<LockSnapshot, DecodeError> {
    decode::<proto::LockSnapshot, _>(bytes, "lock_snapshot")
}

/// Reads a `picket.v1.Command`.
pub fn decode_command(bytes: &[u8]) -> Result<Command, DecodeError> {
    decode::<proto::Command, _>(bytes, "command")
}

/// Reads a `picket.v1.Reply`.
pub fn decode_reply(bytes: &[u8]) -> Result<Reply, DecodeError> {
    decode::<proto::Reply, _>(bytes, "reply")
}
