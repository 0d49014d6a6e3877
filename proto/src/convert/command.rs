//! Log commands and the state machine's replies (records: decoded structurally, losslessly).

use picket_core::locks::{
    AcquireReply, ClassSpec, Command, ForceReleaseId, PermitSlot, Reply, RequestId, Revision,
    SecretHash, SessionId, SessionProof, Token, Wait, SECRET_HASH_LEN,
};
use picket_core::time::Instant;

use super::common::{mode_from_wire, mode_to_wire};
use super::{from_usize, nested, required, to_usize};
use crate::error::ConvertError;
use crate::proto;
use crate::proto::command as pc;
use crate::proto::reply as pr;

impl From<Command> for proto::Command {
    fn from(v: Command) -> Self {
        let kind = match v {
            Command::CreateSession {
                ttl_ms,
                identity,
                secret_hash,
            } => pc::Kind::CreateSession(pc::CreateSession {
                ttl_ms,
                identity: Some(identity.into()),
                secret_hash: hash_to_wire(secret_hash),
            }),
            Command::CloseSession { session, proof } => pc::Kind::CloseSession(pc::CloseSession {
                session_id: session.0,
                secret_hash: hash_to_wire(proof.secret_hash),
                principal: proof.principal,
            }),
            Command::ExpireSessions { sessions } => pc::Kind::ExpireSessions(pc::ExpireSessions {
                session_ids: sessions.into_iter().map(|s| s.0).collect(),
            }),
            Command::Acquire {
                session,
                proof,
                request,
                namespace,
                key,
                mode,
                wait,
            } => pc::Kind::Acquire(pc::Acquire {
                session_id: session.0,
                request_id: request.0,
                namespace,
                key,
                wait: wait.is_some(),
                secret_hash: hash_to_wire(proof.secret_hash),
                principal: proof.principal,
                wait_timeout_ms: wait.and_then(|w| w.timeout_ms),
                mode: mode_to_wire(mode),
            }),
            Command::CancelWait {
                session,
                proof,
                namespace,
                key,
            } => pc::Kind::CancelWait(pc::CancelWait {
                session_id: session.0,
                namespace,
                key,
                secret_hash: hash_to_wire(proof.secret_hash),
                principal: proof.principal,
            }),
            Command::ExpireWaits => pc::Kind::ExpireWaits(pc::ExpireWaits {}),
            Command::Release {
                session,
                proof,
                request,
                namespace,
                key,
                token,
            } => pc::Kind::Release(pc::Release {
                session_id: session.0,
                request_id: request.0,
                namespace,
                key,
                token: token.0,
                secret_hash: hash_to_wire(proof.secret_hash),
                principal: proof.principal,
            }),
            Command::SetSemaphore {
                actor,
                namespace,
                key,
                permits,
                reason,
            } => pc::Kind::SetSemaphore(pc::SetSemaphore {
                actor: Some(actor.into()),
                namespace,
                key,
                permits,
                reason,
            }),
            Command::SetClusterVersion { version, reason } => {
                pc::Kind::SetClusterVersion(pc::SetClusterVersion { version, reason })
            }
            Command::RecordSnapshotSave { actor } => {
                pc::Kind::RecordSnapshotSave(pc::RecordSnapshotSave {
                    actor: Some(actor.into()),
                })
            }
            Command::PutClass {
                actor,
                namespace,
                class,
            } => pc::Kind::PutClass(pc::PutClass {
                actor: Some(actor.into()),
                namespace,
                class: Some(class.into()),
            }),
            Command::RemoveClass {
                actor,
                namespace,
                prefix,
            } => pc::Kind::RemoveClass(pc::RemoveClass {
                actor: Some(actor.into()),
                namespace,
                prefix,
            }),
            Command::RequestForceRelease {
                actor,
                namespace,
                key,
                expected_token,
                holder,
                reason,
                revoke_session,
                checklist,
            } => pc::Kind::RequestForceRelease(pc::RequestForceRelease {
                actor: Some(actor.into()),
                namespace,
                key,
                expected_token: expected_token.0,
                reason,
                revoke_session,
                holder_session_id: holder.map(|s| s.0),
                checklist: super::common::checklist_to_wire(checklist),
            }),
            Command::ApproveForceRelease {
                actor,
                id,
                acknowledged_fenced,
            } => pc::Kind::ApproveForceRelease(pc::ApproveForceRelease {
                actor: Some(actor.into()),
                force_release_id: id.0,
                acknowledged_fenced,
            }),
            Command::DenyForceRelease { actor, id, reason } => {
                pc::Kind::DenyForceRelease(pc::DenyForceRelease {
                    actor: Some(actor.into()),
                    force_release_id: id.0,
                    reason,
                })
            }
        };
        proto::Command { kind: Some(kind) }
    }
}

impl TryFrom<proto::Command> for Command {
    type Error = ConvertError;
    fn try_from(v: proto::Command) -> Result<Self, ConvertError> {
        let kind = required(v.kind, "kind")?;
        command_from_kind(kind)
    }
}

/// A secret hash on the wire: 32 bytes, or empty for none (a legacy record).
pub(crate) fn hash_to_wire(hash: Option<SecretHash>) -> Vec<u8> {
    hash.map(|h| h.0.to_vec()).unwrap_or_default()
}

pub(crate) fn hash_from_wire(
    bytes: &[u8],
    field: &str,
) -> Result<Option<SecretHash>, ConvertError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let hash: [u8; SECRET_HASH_LEN] = bytes.try_into().map_err(|_| {
        ConvertError::new(
            field,
            format!(
                "{} bytes: a secret hash has {SECRET_HASH_LEN} (or none, in a legacy record)",
                bytes.len()
            ),
        )
    })?;
    Ok(Some(SecretHash(hash)))
}

/// A legacy record has neither hash nor principal; a principal without a hash is malformed.
fn proof_from_wire(
    hash: &[u8],
    principal: String,
    command: &str,
) -> Result<SessionProof, ConvertError> {
    let secret_hash = hash_from_wire(hash, &format!("{command}.secret_hash"))?;
    if secret_hash.is_none() && !principal.is_empty() {
        return Err(ConvertError::new(
            format!("{command}.principal"),
            "set without a secret hash",
        ));
    }
    Ok(SessionProof {
        secret_hash,
        principal,
    })
}

fn command_from_kind(kind: pc::Kind) -> Result<Command, ConvertError> {
    Ok(match kind {
        pc::Kind::CreateSession(c) => Command::CreateSession {
            ttl_ms: c.ttl_ms,
            identity: nested(c.identity, "create_session.identity")?,
            secret_hash: hash_from_wire(&c.secret_hash, "create_session.secret_hash")?,
        },
        pc::Kind::CloseSession(c) => Command::CloseSession {
            session: SessionId(c.session_id),
            proof: proof_from_wire(&c.secret_hash, c.principal, "close_session")?,
        },
        pc::Kind::ExpireSessions(c) => Command::ExpireSessions {
            sessions: c.session_ids.into_iter().map(SessionId).collect(),
        },
        pc::Kind::Acquire(c) => Command::Acquire {
            session: SessionId(c.session_id),
            proof: proof_from_wire(&c.secret_hash, c.principal, "acquire")?,
            request: RequestId(c.request_id),
            namespace: c.namespace,
            key: c.key,
            mode: mode_from_wire(c.mode, "acquire.mode")?,
            // A timeout without `wait` was always ignored (written by no release, but read so).
            wait: c.wait.then_some(Wait {
                timeout_ms: c.wait_timeout_ms,
            }),
        },
        pc::Kind::CancelWait(c) => Command::CancelWait {
            session: SessionId(c.session_id),
            proof: proof_from_wire(&c.secret_hash, c.principal, "cancel_wait")?,
            namespace: c.namespace,
            key: c.key,
        },
        pc::Kind::ExpireWaits(_) => Command::ExpireWaits,
        pc::Kind::Release(c) => Command::Release {
            session: SessionId(c.session_id),
            proof: proof_from_wire(&c.secret_hash, c.principal, "release")?,
            request: RequestId(c.request_id),
            namespace: c.namespace,
            key: c.key,
            token: Token(c.token),
        },
        pc::Kind::SetClusterVersion(c) => Command::SetClusterVersion {
            version: c.version,
            reason: c.reason,
        },
        pc::Kind::RecordSnapshotSave(c) => Command::RecordSnapshotSave {
            actor: nested(c.actor, "record_snapshot_save.actor")?,
        },
        pc::Kind::SetSemaphore(c) => Command::SetSemaphore {
            actor: nested(c.actor, "set_semaphore.actor")?,
            namespace: c.namespace,
            key: c.key,
            permits: c.permits,
            reason: c.reason,
        },
        pc::Kind::PutClass(c) => Command::PutClass {
            actor: nested(c.actor, "put_class.actor")?,
            class: nested::<_, ClassSpec>(c.class, "put_class.class")?,
            namespace: c.namespace,
        },
        pc::Kind::RemoveClass(c) => Command::RemoveClass {
            actor: nested(c.actor, "remove_class.actor")?,
            namespace: c.namespace,
            prefix: c.prefix,
        },
        pc::Kind::RequestForceRelease(c) => Command::RequestForceRelease {
            actor: nested(c.actor, "request_force_release.actor")?,
            namespace: c.namespace,
            key: c.key,
            expected_token: Token(c.expected_token),
            holder: c.holder_session_id.map(SessionId),
            reason: c.reason,
            revoke_session: c.revoke_session,
            checklist: super::common::checklist_from_wire(
                c.checklist,
                "request_force_release.checklist",
            )?,
        },
        pc::Kind::ApproveForceRelease(c) => Command::ApproveForceRelease {
            actor: nested(c.actor, "approve_force_release.actor")?,
            id: ForceReleaseId(c.force_release_id),
            acknowledged_fenced: c.acknowledged_fenced,
        },
        pc::Kind::DenyForceRelease(c) => Command::DenyForceRelease {
            actor: nested(c.actor, "deny_force_release.actor")?,
            id: ForceReleaseId(c.force_release_id),
            reason: c.reason,
        },
    })
}

impl From<AcquireReply> for proto::AcquireReply {
    fn from(v: AcquireReply) -> Self {
        use proto::acquire_reply as pa;
        let kind = match v {
            AcquireReply::Granted { token, permit } => pa::Kind::Granted(pa::Granted {
                token: token.0,
                slot: permit.map(|p| p.0),
            }),
            AcquireReply::Queued { position } => pa::Kind::Queued(pa::Queued { position }),
            AcquireReply::Busy { holder, token } => pa::Kind::Busy(pa::Busy {
                holder_session_id: holder.0,
                token: token.0,
            }),
        };
        proto::AcquireReply { kind: Some(kind) }
    }
}

impl TryFrom<proto::AcquireReply> for AcquireReply {
    type Error = ConvertError;
    fn try_from(v: proto::AcquireReply) -> Result<Self, ConvertError> {
        use proto::acquire_reply as pa;
        Ok(match required(v.kind, "kind")? {
            pa::Kind::Granted(g) => AcquireReply::Granted {
                token: Token(g.token),
                permit: g.slot.map(PermitSlot),
            },
            pa::Kind::Queued(q) => AcquireReply::Queued {
                position: q.position,
            },
            pa::Kind::Busy(b) => AcquireReply::Busy {
                holder: SessionId(b.holder_session_id),
                token: Token(b.token),
            },
        })
    }
}

/// `(session, token)` of a hand-off.
pub(crate) fn grant_to_wire(next: Option<(SessionId, Token)>) -> Option<proto::Grant> {
    next.map(|(session, token)| proto::Grant {
        session_id: session.0,
        token: token.0,
    })
}

pub(crate) fn grant_from_wire(next: Option<proto::Grant>) -> Option<(SessionId, Token)> {
    next.map(|g| (SessionId(g.session_id), Token(g.token)))
}

impl From<Reply> for proto::Reply {
    fn from(v: Reply) -> Self {
        let kind = match v {
            Reply::SessionCreated { session, ttl_ms } => {
                pr::Kind::SessionCreated(pr::SessionCreated {
                    session_id: session.0,
                    ttl_ms,
                })
            }
            Reply::SessionClosed {
                holds_released,
                waits_removed,
            } => pr::Kind::SessionClosed(pr::SessionClosed {
                holds_released: from_usize(holds_released),
                waits_removed: from_usize(waits_removed),
            }),
            Reply::SessionsExpired { expired } => pr::Kind::SessionsExpired(pr::SessionsExpired {
                session_ids: expired.into_iter().map(|s| s.0).collect(),
            }),
            Reply::Acquire(reply) => pr::Kind::Acquire(reply.into()),
            Reply::Released { token, next } => pr::Kind::Released(pr::Released {
                token: token.0,
                next: grant_to_wire(next),
            }),
            Reply::ClassPut { replaced } => pr::Kind::ClassPut(pr::ClassPut { replaced }),
            Reply::ClassRemoved => pr::Kind::ClassRemoved(pr::ClassRemoved {}),
            Reply::SemaphoreSet { previous_permits } => {
                pr::Kind::SemaphoreSet(pr::SemaphoreSet { previous_permits })
            }
            Reply::ClusterVersionSet { previous } => {
                pr::Kind::ClusterVersionSet(pr::ClusterVersionSet { previous })
            }
            Reply::SnapshotSaveRecorded => {
                pr::Kind::SnapshotSaveRecorded(pr::SnapshotSaveRecorded {})
            }
            Reply::ForceReleaseRequested {
                id,
                fenced,
                safety,
                expires_at,
            } => pr::Kind::ForceReleaseRequested(pr::ForceReleaseRequested {
                force_release_id: id.0,
                fenced,
                safety: safety.to_owned(),
                expires_at_ms: expires_at.as_millis(),
            }),
            Reply::ForceReleaseApproved {
                floor,
                released_token,
                next,
                session_revoked,
                fenced,
            } => pr::Kind::ForceReleaseApproved(pr::ForceReleaseApproved {
                floor: floor.0,
                released_token: released_token.0,
                next: grant_to_wire(next),
                session_revoked: session_revoked.map(|s| s.0),
                fenced,
            }),
            Reply::ForceReleaseDenied => pr::Kind::ForceReleaseDenied(pr::ForceReleaseDenied {}),
            Reply::WaitCancelled { removed, held } => pr::Kind::WaitCancelled(pr::WaitCancelled {
                removed,
                held_token: held.map(|t| t.0),
            }),
            Reply::WaitsExpired { removed } => pr::Kind::WaitsExpired(pr::WaitsExpired {
                removed: from_usize(removed),
            }),
        };
        proto::Reply { kind: Some(kind) }
    }
}

impl TryFrom<proto::Reply> for Reply {
    type Error = ConvertError;
    fn try_from(v: proto::Reply) -> Result<Self, ConvertError> {
        Ok(match required(v.kind, "kind")? {
            pr::Kind::SessionCreated(r) => Reply::SessionCreated {
                session: SessionId(r.session_id),
                ttl_ms: r.ttl_ms,
            },
            pr::Kind::SessionClosed(r) => Reply::SessionClosed {
                holds_released: to_usize(r.holds_released, "session_closed.holds_released")?,
                waits_removed: to_usize(r.waits_removed, "session_closed.waits_removed")?,
            },
            pr::Kind::SessionsExpired(r) => Reply::SessionsExpired {
                expired: r.session_ids.into_iter().map(SessionId).collect(),
            },
            pr::Kind::Acquire(r) => {
                Reply::Acquire(AcquireReply::try_from(r).map_err(|e| e.within("acquire"))?)
            }
            pr::Kind::Released(r) => Reply::Released {
                token: Token(r.token),
                next: grant_from_wire(r.next),
            },
            pr::Kind::ClassPut(r) => Reply::ClassPut {
                replaced: r.replaced,
            },
            pr::Kind::ClassRemoved(_) => Reply::ClassRemoved,
            pr::Kind::SemaphoreSet(r) => Reply::SemaphoreSet {
                previous_permits: r.previous_permits,
            },
            pr::Kind::SnapshotSaveRecorded(_) => Reply::SnapshotSaveRecorded,
            pr::Kind::ClusterVersionSet(r) => Reply::ClusterVersionSet {
                previous: r.previous,
            },
            pr::Kind::ForceReleaseRequested(r) => Reply::ForceReleaseRequested {
                id: ForceReleaseId(r.force_release_id),
                fenced: r.fenced,
                // Derived from the flag (see ForceReleaseInfo.safety).
                safety: ClassSpec::safety_statement(r.fenced),
                expires_at: Instant::from_millis(r.expires_at_ms),
            },
            pr::Kind::ForceReleaseApproved(r) => Reply::ForceReleaseApproved {
                floor: Revision(r.floor),
                released_token: Token(r.released_token),
                next: grant_from_wire(r.next),
                session_revoked: r.session_revoked.map(SessionId),
                fenced: r.fenced,
            },
            pr::Kind::ForceReleaseDenied(_) => Reply::ForceReleaseDenied,
            pr::Kind::WaitCancelled(r) => Reply::WaitCancelled {
                removed: r.removed,
                held: r.held_token.map(Token),
            },
            pr::Kind::WaitsExpired(r) => Reply::WaitsExpired {
                removed: to_usize(r.removed, "waits_expired.removed")?,
            },
        })
    }
}
