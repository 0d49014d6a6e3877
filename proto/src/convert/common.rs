//! Shared types: identities, actors, classes, holds, waiters, force-release requests, audit
//! records and watch events.

use picket_core::locks::{
    Actor, AuditAction, AuditRecord, Checklist, ChecklistAnswer, ClassSpec, Event, EventKind,
    ForceReleaseId, ForceReleaseRequest, HoldInfo, Identity, KeyInfo, LockMode, LostHold,
    PendingForceRelease, PermitSlot, ReleaseCause, Revision, Role, SessionId, Token, WaiterInfo,
};
use picket_core::time::Instant;
use std::collections::BTreeSet;
use std::sync::Arc;

use super::{each, from_usize, known_enum, nested, to_usize};
use crate::error::ConvertError;
use crate::proto;

impl From<Identity> for proto::Identity {
    fn from(v: Identity) -> Self {
        proto::Identity {
            name: v.name,
            host: v.host,
            pid: v.pid,
            principal: v.principal,
        }
    }
}

impl TryFrom<proto::Identity> for Identity {
    type Error = ConvertError;
    fn try_from(v: proto::Identity) -> Result<Self, ConvertError> {
        Ok(Identity {
            name: v.name,
            host: v.host,
            pid: v.pid,
            principal: v.principal,
        })
    }
}

impl From<Role> for proto::Role {
    fn from(v: Role) -> Self {
        match v {
            Role::OnCall => proto::Role::OnCall,
            Role::IncidentCommander => proto::Role::IncidentCommander,
            Role::ClassAdmin => proto::Role::ClassAdmin,
        }
    }
}

pub(crate) fn mode_to_wire(mode: LockMode) -> i32 {
    match mode {
        LockMode::Exclusive => proto::LockMode::Exclusive as i32,
        LockMode::Shared => proto::LockMode::Shared as i32,
        LockMode::Permit => proto::LockMode::Permit as i32,
    }
}

/// A lock mode; 0 (also an absent field: every message written before shared locks) is
/// exclusive.
pub(crate) fn mode_from_wire(value: i32, field: &str) -> Result<LockMode, ConvertError> {
    match proto::LockMode::try_from(value) {
        Ok(proto::LockMode::Exclusive) => Ok(LockMode::Exclusive),
        Ok(proto::LockMode::Shared) => Ok(LockMode::Shared),
        Ok(proto::LockMode::Permit) => Ok(LockMode::Permit),
        Err(_) => Err(ConvertError::new(
            field,
            format!("unknown lock mode {value} (0 exclusive, 1 shared, 2 permit)"),
        )),
    }
}

pub(crate) fn role_from_wire(value: i32, field: &str) -> Result<Role, ConvertError> {
    Ok(match known_enum::<proto::Role>(value, field)? {
        proto::Role::OnCall => Role::OnCall,
        proto::Role::IncidentCommander => Role::IncidentCommander,
        proto::Role::ClassAdmin => Role::ClassAdmin,
        proto::Role::Unspecified => unreachable!("known_enum refuses 0"),
    })
}

impl From<Actor> for proto::Actor {
    fn from(v: Actor) -> Self {
        proto::Actor {
            principal: v.principal,
            // A BTreeSet iterates in order: the encoding is canonical.
            roles: v
                .roles
                .into_iter()
                .map(|r| proto::Role::from(r) as i32)
                .collect(),
        }
    }
}

impl TryFrom<proto::Actor> for Actor {
    type Error = ConvertError;
    fn try_from(v: proto::Actor) -> Result<Self, ConvertError> {
        Ok(Actor {
            principal: v.principal,
            roles: roles_from_wire(v.roles, "roles")?,
        })
    }
}

/// A BTreeSet iterates in order: the encoding is canonical.
pub(crate) fn roles_to_wire(roles: BTreeSet<Role>) -> Vec<i32> {
    roles
        .into_iter()
        .map(|r| proto::Role::from(r) as i32)
        .collect()
}

pub(crate) fn roles_from_wire(
    roles: Vec<i32>,
    field: &str,
) -> Result<BTreeSet<Role>, ConvertError> {
    roles
        .into_iter()
        .enumerate()
        .map(|(i, r)| role_from_wire(r, &format!("{field}[{i}]")))
        .collect()
}

impl From<LostHold> for proto::LostHold {
    fn from(v: LostHold) -> Self {
        proto::LostHold {
            namespace: v.namespace.to_string(),
            key: v.key.to_string(),
            token: v.token.0,
            revision: v.revision.0,
            force_release_id: v.request.0,
        }
    }
}

impl TryFrom<proto::LostHold> for LostHold {
    type Error = ConvertError;
    fn try_from(v: proto::LostHold) -> Result<Self, ConvertError> {
        Ok(LostHold {
            namespace: v.namespace.into(),
            key: v.key.into(),
            token: Token(v.token),
            revision: Revision(v.revision),
            request: ForceReleaseId(v.force_release_id),
        })
    }
}

impl From<PendingForceRelease> for proto::ForceReleaseInfo {
    fn from(v: PendingForceRelease) -> Self {
        proto::ForceReleaseInfo {
            holder_changed: v.holder_changed,
            fenced_now: Some(v.fenced_now),
            ..v.request.into()
        }
    }
}

impl From<ClassSpec> for proto::ClassSpec {
    fn from(v: ClassSpec) -> Self {
        proto::ClassSpec {
            name: v.name,
            prefix: v.prefix,
            fenced: v.fenced,
            session_ttl_ms_default: v.session_ttl_ms_default,
            session_ttl_ms_max: v.session_ttl_ms_max,
            hold_ms_max_expected: v.hold_ms_max_expected,
            owner: v.owner,
            runbook_url: v.runbook_url,
            description: v.description,
        }
    }
}

impl TryFrom<proto::ClassSpec> for ClassSpec {
    type Error = ConvertError;
    fn try_from(v: proto::ClassSpec) -> Result<Self, ConvertError> {
        Ok(ClassSpec {
            name: v.name,
            prefix: v.prefix,
            fenced: v.fenced,
            session_ttl_ms_default: v.session_ttl_ms_default,
            session_ttl_ms_max: v.session_ttl_ms_max,
            hold_ms_max_expected: v.hold_ms_max_expected,
            owner: v.owner,
            runbook_url: v.runbook_url,
            description: v.description,
        })
    }
}

impl From<HoldInfo> for proto::HoldInfo {
    fn from(v: HoldInfo) -> Self {
        proto::HoldInfo {
            namespace: v.namespace,
            key: v.key,
            session_id: v.session.0,
            identity: Some(v.identity.into()),
            token: v.token.0,
            granted_at_ms: v.granted_at.as_millis(),
            held_for_ms: v.held_for_ms,
            session_ttl_ms: v.session_ttl_ms,
            session_remaining_ms: v.session_remaining_ms,
            hold_ms_max_expected: v.hold_ms_max_expected,
            mode: mode_to_wire(v.mode),
            slot: v.permit.map(|p| p.0),
        }
    }
}

impl TryFrom<proto::HoldInfo> for HoldInfo {
    type Error = ConvertError;
    fn try_from(v: proto::HoldInfo) -> Result<Self, ConvertError> {
        Ok(HoldInfo {
            mode: mode_from_wire(v.mode, "mode")?,
            identity: nested(v.identity, "identity")?,
            namespace: v.namespace,
            key: v.key,
            session: SessionId(v.session_id),
            token: Token(v.token),
            permit: v.slot.map(PermitSlot),
            granted_at: Instant::from_millis(v.granted_at_ms),
            held_for_ms: v.held_for_ms,
            session_ttl_ms: v.session_ttl_ms,
            session_remaining_ms: v.session_remaining_ms,
            hold_ms_max_expected: v.hold_ms_max_expected,
        })
    }
}

impl From<WaiterInfo> for proto::WaiterInfo {
    fn from(v: WaiterInfo) -> Self {
        proto::WaiterInfo {
            session_id: v.session.0,
            identity: Some(v.identity.into()),
            position: v.position,
            queued_at_ms: v.queued_at.as_millis(),
            waiting_for_ms: v.waiting_for_ms,
            mode: mode_to_wire(v.mode),
        }
    }
}

impl TryFrom<proto::WaiterInfo> for WaiterInfo {
    type Error = ConvertError;
    fn try_from(v: proto::WaiterInfo) -> Result<Self, ConvertError> {
        Ok(WaiterInfo {
            mode: mode_from_wire(v.mode, "mode")?,
            session: SessionId(v.session_id),
            identity: nested(v.identity, "identity")?,
            position: v.position,
            queued_at: Instant::from_millis(v.queued_at_ms),
            waiting_for_ms: v.waiting_for_ms,
        })
    }
}

/// The checklist on the wire; `None` for one with nothing answered or said (so records without
/// one stay as they were).
pub(crate) fn checklist_to_wire(v: Checklist) -> Option<proto::ForceReleaseChecklist> {
    (!v.is_empty()).then(|| checklist_message(v))
}

/// The checklist as its message, whatever it holds.
fn checklist_message(v: Checklist) -> proto::ForceReleaseChecklist {
    let answer = |a: ChecklistAnswer| -> i32 {
        (match a {
            ChecklistAnswer::Unanswered => proto::ChecklistAnswer::Unspecified,
            ChecklistAnswer::Yes => proto::ChecklistAnswer::Yes,
            ChecklistAnswer::No => proto::ChecklistAnswer::No,
            ChecklistAnswer::Unknown => proto::ChecklistAnswer::Unknown,
        }) as i32
    };
    proto::ForceReleaseChecklist {
        holder_stopped: answer(v.holder_stopped),
        double_run_acceptable: answer(v.double_run_acceptable),
        statement: v.statement,
    }
}

/// The checklist from the wire (absent: nothing answered), naming a bad answer's field.
pub(crate) fn checklist_from_wire(
    v: Option<proto::ForceReleaseChecklist>,
    field: &str,
) -> Result<Checklist, ConvertError> {
    let Some(v) = v else {
        return Ok(Checklist::default());
    };
    let answer = |value: i32, name: &str| -> Result<ChecklistAnswer, ConvertError> {
        Ok(match proto::ChecklistAnswer::try_from(value) {
            Ok(proto::ChecklistAnswer::Unspecified) => ChecklistAnswer::Unanswered,
            Ok(proto::ChecklistAnswer::Yes) => ChecklistAnswer::Yes,
            Ok(proto::ChecklistAnswer::No) => ChecklistAnswer::No,
            Ok(proto::ChecklistAnswer::Unknown) => ChecklistAnswer::Unknown,
            Err(_) => {
                return Err(ConvertError::new(
                    format!("{field}.{name}"),
                    format!("unknown answer {value} (yes 1, no 2, unknown 3)"),
                ))
            }
        })
    };
    Ok(Checklist {
        holder_stopped: answer(v.holder_stopped, "holder_stopped")?,
        double_run_acceptable: answer(v.double_run_acceptable, "double_run_acceptable")?,
        statement: v.statement,
    })
}

impl From<ForceReleaseRequest> for proto::ForceReleaseInfo {
    fn from(v: ForceReleaseRequest) -> Self {
        proto::ForceReleaseInfo {
            id: v.id.0,
            namespace: v.namespace,
            key: v.key,
            holder_session_id: v.holder.0,
            token: v.token.0,
            requester: v.requester,
            reason: v.reason,
            revoke_session: v.revoke_session,
            fenced: v.fenced,
            safety: v.safety.to_owned(),
            requested_at_ms: v.requested_at.as_millis(),
            expires_at_ms: v.expires_at.as_millis(),
            requester_roles: roles_to_wire(v.requester_roles),
            holder_changed: false,
            fenced_now: None,
            checklist: checklist_to_wire(v.checklist),
            holder_identity: (v.holder_identity != Identity::default())
                .then(|| v.holder_identity.into()),
        }
    }
}

impl TryFrom<proto::ForceReleaseInfo> for ForceReleaseRequest {
    type Error = ConvertError;
    fn try_from(v: proto::ForceReleaseInfo) -> Result<Self, ConvertError> {
        Ok(ForceReleaseRequest {
            id: ForceReleaseId(v.id),
            namespace: v.namespace,
            key: v.key,
            holder: SessionId(v.holder_session_id),
            token: Token(v.token),
            requester: v.requester,
            requester_roles: roles_from_wire(v.requester_roles, "requester_roles")?,
            reason: v.reason,
            revoke_session: v.revoke_session,
            checklist: checklist_from_wire(v.checklist, "checklist")?,
            holder_identity: v
                .holder_identity
                .map(Identity::try_from)
                .transpose()?
                .unwrap_or_default(),
            // The statement is a function of the flag: derived, so it is always the current text.
            safety: ClassSpec::safety_statement(v.fenced),
            fenced: v.fenced,
            requested_at: Instant::from_millis(v.requested_at_ms),
            expires_at: Instant::from_millis(v.expires_at_ms),
        })
    }
}

impl From<KeyInfo> for proto::KeyInfo {
    fn from(v: KeyInfo) -> Self {
        proto::KeyInfo {
            revision: v.revision.0,
            namespace: v.namespace,
            key: v.key,
            class: Some(v.class.into()),
            holder: v.holder.map(Into::into),
            mode: mode_to_wire(v.mode.unwrap_or_default()),
            holders: v.holders.into_iter().map(Into::into).collect(),
            queue_depth: from_usize(v.queue_depth),
            waiters: v.waiters.into_iter().map(Into::into).collect(),
            floor: v.floor.map(|f| f.0),
            pending_force_releases: v
                .pending_force_releases
                .into_iter()
                .map(Into::into)
                .collect(),
            permits: v.permits,
            slot_floors: v
                .permit_floors
                .into_iter()
                .map(|(permit, floor)| proto::SlotFloor {
                    slot: permit.0,
                    floor: floor.0,
                })
                .collect(),
        }
    }
}

impl TryFrom<proto::KeyInfo> for KeyInfo {
    type Error = ConvertError;
    fn try_from(v: proto::KeyInfo) -> Result<Self, ConvertError> {
        let holder = v
            .holder
            .map(HoldInfo::try_from)
            .transpose()
            .map_err(|e| e.within("holder"))?;
        // A free key has no mode; an answer from before shared locks lists no `holders`: its
        // one holder is `holder`.
        let mode = match holder {
            Some(_) => Some(mode_from_wire(v.mode, "mode")?),
            None => None,
        };
        let holders = if v.holders.is_empty() {
            holder.iter().cloned().collect()
        } else {
            each(v.holders, "holders")?
        };
        Ok(KeyInfo {
            revision: Revision(v.revision),
            class: nested(v.class, "class")?,
            mode,
            holder,
            holders,
            queue_depth: to_usize(v.queue_depth, "queue_depth")?,
            waiters: each(v.waiters, "waiters")?,
            floor: v.floor.map(Revision),
            pending_force_releases: each(v.pending_force_releases, "pending_force_releases")?,
            namespace: v.namespace,
            key: v.key,
            permits: v.permits,
            permit_floors: v
                .slot_floors
                .into_iter()
                .map(|f| (PermitSlot(f.slot), Revision(f.floor)))
                .collect(),
        })
    }
}

impl From<AuditAction> for proto::AuditAction {
    fn from(v: AuditAction) -> Self {
        use proto::AuditAction as P;
        match v {
            AuditAction::ForceReleaseRequested => P::ForceReleaseRequested,
            AuditAction::ForceReleaseApproved => P::ForceReleaseApproved,
            AuditAction::ForceReleaseDenied => P::ForceReleaseDenied,
            AuditAction::ForceReleaseExpired => P::ForceReleaseExpired,
            AuditAction::SessionRevoked => P::SessionRevoked,
            AuditAction::ClassPut => P::ClassPut,
            AuditAction::ClassRemoved => P::ClassRemoved,
            AuditAction::SemaphoreSet => P::SemaphoreSet,
            AuditAction::MembershipChanged => P::MembershipChanged,
            AuditAction::SnapshotSaved => P::SnapshotSaved,
            AuditAction::ClusterVersionSet => P::ClusterVersionSet,
        }
    }
}

fn audit_action_from_wire(value: i32, field: &str) -> Result<AuditAction, ConvertError> {
    use proto::AuditAction as P;
    Ok(match known_enum::<P>(value, field)? {
        P::ForceReleaseRequested => AuditAction::ForceReleaseRequested,
        P::ForceReleaseApproved => AuditAction::ForceReleaseApproved,
        P::ForceReleaseDenied => AuditAction::ForceReleaseDenied,
        P::ForceReleaseExpired => AuditAction::ForceReleaseExpired,
        P::SessionRevoked => AuditAction::SessionRevoked,
        P::ClassPut => AuditAction::ClassPut,
        P::ClassRemoved => AuditAction::ClassRemoved,
        P::SemaphoreSet => AuditAction::SemaphoreSet,
        P::MembershipChanged => AuditAction::MembershipChanged,
        P::SnapshotSaved => AuditAction::SnapshotSaved,
        P::ClusterVersionSet => AuditAction::ClusterVersionSet,
        P::Unspecified => unreachable!("known_enum refuses 0"),
    })
}

impl From<AuditRecord> for proto::AuditRecord {
    fn from(v: AuditRecord) -> Self {
        proto::AuditRecord {
            revision: v.revision.0,
            time_ms: v.time.as_millis(),
            actor: v.actor,
            action: proto::AuditAction::from(v.action) as i32,
            namespace: v.namespace,
            key: v.key,
            token: v.token.map(|t| t.0),
            fenced: v.fenced,
            session_id: v.session.map(|s| s.0),
            force_release_id: v.request.map(|r| r.0),
            reason: v.reason,
            actor_roles: roles_to_wire(v.actor_roles),
            requester: v.requester,
            requester_roles: roles_to_wire(v.requester_roles),
            floor: v.floor.map(|f| f.0),
            next: super::command::grant_to_wire(v.next),
            revoke_session: v.revoke_session,
            previous_permits: v.permits.map(|(previous, _)| previous),
            permits: v.permits.map(|(_, permits)| permits),
            slot: v.permit.map(|p| p.0),
            membership: v.membership,
            checklist: v.checklist.map(checklist_message),
            holder: v.holder.map(Into::into),
        }
    }
}

impl TryFrom<proto::AuditRecord> for AuditRecord {
    type Error = ConvertError;
    fn try_from(v: proto::AuditRecord) -> Result<Self, ConvertError> {
        Ok(AuditRecord {
            revision: Revision(v.revision),
            time: Instant::from_millis(v.time_ms),
            actor: v.actor,
            action: audit_action_from_wire(v.action, "action")?,
            namespace: v.namespace,
            key: v.key,
            token: v.token.map(Token),
            fenced: v.fenced,
            session: v.session_id.map(SessionId),
            request: v.force_release_id.map(ForceReleaseId),
            reason: v.reason,
            actor_roles: roles_from_wire(v.actor_roles, "actor_roles")?,
            requester: v.requester,
            requester_roles: roles_from_wire(v.requester_roles, "requester_roles")?,
            floor: v.floor.map(Revision),
            next: super::command::grant_from_wire(v.next),
            revoke_session: v.revoke_session,
            permits: v.previous_permits.zip(v.permits),
            permit: v.slot.map(PermitSlot),
            membership: v.membership,
            checklist: v
                .checklist
                .map(|c| checklist_from_wire(Some(c), "checklist"))
                .transpose()?,
            holder: v.holder.map(Identity::try_from).transpose()?,
        })
    }
}

impl From<ReleaseCause> for proto::ReleaseCause {
    fn from(v: ReleaseCause) -> Self {
        match v {
            ReleaseCause::Released => proto::ReleaseCause::Released,
            ReleaseCause::SessionClosed => proto::ReleaseCause::SessionClosed,
            ReleaseCause::SessionExpired => proto::ReleaseCause::SessionExpired,
            ReleaseCause::SessionRevoked => proto::ReleaseCause::SessionRevoked,
            ReleaseCause::WaitExpired => proto::ReleaseCause::WaitExpired,
            ReleaseCause::WaitCancelled => proto::ReleaseCause::WaitCancelled,
        }
    }
}

fn cause_from_wire(value: i32, field: &str) -> Result<ReleaseCause, ConvertError> {
    use proto::ReleaseCause as P;
    Ok(match known_enum::<P>(value, field)? {
        P::Released => ReleaseCause::Released,
        P::SessionClosed => ReleaseCause::SessionClosed,
        P::SessionExpired => ReleaseCause::SessionExpired,
        P::SessionRevoked => ReleaseCause::SessionRevoked,
        P::WaitExpired => ReleaseCause::WaitExpired,
        P::WaitCancelled => ReleaseCause::WaitCancelled,
        P::Unspecified => unreachable!("known_enum refuses 0"),
    })
}

impl From<EventKind> for proto::event::Kind {
    fn from(v: EventKind) -> Self {
        use proto::event as P;
        match v {
            EventKind::Granted {
                session,
                token,
                mode,
                permit,
            } => P::Kind::Granted(P::Granted {
                session_id: session.0,
                token: token.0,
                mode: mode_to_wire(mode),
                slot: permit.map(|p| p.0),
            }),
            EventKind::Queued { session, position } => P::Kind::Queued(P::Queued {
                session_id: session.0,
                position,
            }),
            EventKind::Released {
                session,
                token,
                cause,
            } => P::Kind::Released(P::Released {
                session_id: session.0,
                token: token.0,
                cause: proto::ReleaseCause::from(cause) as i32,
            }),
            EventKind::WaitRemoved { session, cause } => P::Kind::WaitRemoved(P::WaitRemoved {
                session_id: session.0,
                cause: proto::ReleaseCause::from(cause) as i32,
            }),
            EventKind::ForceReleased {
                session,
                token,
                request,
                session_revoked,
            } => P::Kind::ForceReleased(P::ForceReleased {
                session_id: session.0,
                token: token.0,
                force_release_id: request.0,
                session_revoked,
            }),
            EventKind::ClassChanged { class, removed } => {
                P::Kind::ClassChanged(P::ClassChanged { class, removed })
            }
            EventKind::SemaphoreChanged {
                permits,
                previous_permits,
            } => P::Kind::SemaphoreChanged(P::SemaphoreChanged {
                permits,
                previous_permits,
            }),
        }
    }
}

impl TryFrom<proto::event::Kind> for EventKind {
    type Error = ConvertError;
    fn try_from(v: proto::event::Kind) -> Result<Self, ConvertError> {
        use proto::event::Kind as P;
        Ok(match v {
            P::Granted(g) => EventKind::Granted {
                session: SessionId(g.session_id),
                token: Token(g.token),
                mode: mode_from_wire(g.mode, "granted.mode")?,
                permit: g.slot.map(PermitSlot),
            },
            P::Queued(q) => EventKind::Queued {
                session: SessionId(q.session_id),
                position: q.position,
            },
            P::Released(r) => EventKind::Released {
                session: SessionId(r.session_id),
                token: Token(r.token),
                cause: cause_from_wire(r.cause, "released.cause")?,
            },
            P::WaitRemoved(w) => EventKind::WaitRemoved {
                session: SessionId(w.session_id),
                cause: cause_from_wire(w.cause, "wait_removed.cause")?,
            },
            P::ForceReleased(f) => EventKind::ForceReleased {
                session: SessionId(f.session_id),
                token: Token(f.token),
                request: ForceReleaseId(f.force_release_id),
                session_revoked: f.session_revoked,
            },
            P::ClassChanged(c) => EventKind::ClassChanged {
                class: c.class,
                removed: c.removed,
            },
            P::SemaphoreChanged(c) => EventKind::SemaphoreChanged {
                permits: c.permits,
                previous_permits: c.previous_permits,
            },
        })
    }
}

impl From<Event> for proto::Event {
    fn from(v: Event) -> Self {
        proto::Event::from(&v)
    }
}

/// By reference: a snapshot's history is shared with the live state, so a save converts each
/// event without copying it first.
impl From<&Event> for proto::Event {
    fn from(v: &Event) -> Self {
        proto::Event {
            revision: v.revision.0,
            time_ms: v.time.as_millis(),
            namespace: v.namespace.to_string(),
            key: v.key.to_string(),
            kind: Some(v.kind.clone().into()),
            identity: v.identity.as_deref().cloned().map(Into::into),
        }
    }
}

impl TryFrom<proto::Event> for Event {
    type Error = ConvertError;
    fn try_from(v: proto::Event) -> Result<Self, ConvertError> {
        Ok(Event {
            revision: Revision(v.revision),
            time: Instant::from_millis(v.time_ms),
            kind: nested(v.kind, "kind")?,
            namespace: v.namespace.into(),
            key: v.key.into(),
            identity: v
                .identity
                .map(Identity::try_from)
                .transpose()?
                .map(Arc::new),
        })
    }
}
