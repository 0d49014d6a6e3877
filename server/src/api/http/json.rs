//! The JSON shapes of the HTTP inspection API (documented in docs/http.md). Core types have no
//! serde; these mirror them field by field, times in milliseconds.

use picket_core::locks::{ClassSpec, ForceReleaseRequest, HoldInfo, Identity, KeyInfo, WaiterInfo};
use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct IdentityJson {
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub principal: String,
}

impl From<&Identity> for IdentityJson {
    fn from(i: &Identity) -> IdentityJson {
        IdentityJson {
            name: i.name.clone(),
            host: i.host.clone(),
            pid: i.pid,
            principal: i.principal.clone(),
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ClassJson {
    pub name: String,
    pub prefix: String,
    pub fenced: bool,
    pub session_ttl_ms_default: u64,
    pub session_ttl_ms_max: u64,
    pub hold_ms_max_expected: u64,
    pub owner: String,
    pub runbook_url: String,
    pub description: String,
}

impl From<&ClassSpec> for ClassJson {
    fn from(c: &ClassSpec) -> ClassJson {
        ClassJson {
            name: c.name.clone(),
            prefix: c.prefix.clone(),
            fenced: c.fenced,
            session_ttl_ms_default: c.session_ttl_ms_default,
            session_ttl_ms_max: c.session_ttl_ms_max,
            hold_ms_max_expected: c.hold_ms_max_expected,
            owner: c.owner.clone(),
            runbook_url: c.runbook_url.clone(),
            description: c.description.clone(),
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HoldJson {
    pub namespace: String,
    pub key: String,
    pub session_id: u64,
    pub identity: IdentityJson,
    /// The grant revision, which is the fencing token.
    pub token: u64,
    pub granted_at_ms: u64,
    pub held_for_ms: u64,
    pub session_ttl_ms: u64,
    /// Known on the leader only (`null` on a stale read from a follower).
    pub session_remaining_ms: Option<u64>,
    pub hold_ms_max_expected: u64,
    /// `exclusive`, `shared` or `permit`.
    pub mode: &'static str,
    /// A semaphore permit's slot (`null` for a lock).
    pub slot: Option<u32>,
}

impl From<&HoldInfo> for HoldJson {
    fn from(h: &HoldInfo) -> HoldJson {
        HoldJson {
            namespace: h.namespace.clone(),
            key: h.key.clone(),
            session_id: h.session.0,
            identity: (&h.identity).into(),
            token: h.token.0,
            granted_at_ms: h.granted_at.as_millis(),
            held_for_ms: h.held_for_ms,
            session_ttl_ms: h.session_ttl_ms,
            session_remaining_ms: h.session_remaining_ms,
            hold_ms_max_expected: h.hold_ms_max_expected,
            mode: h.mode.as_str(),
            slot: h.permit.map(|p| p.0),
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WaiterJson {
    pub session_id: u64,
    pub identity: IdentityJson,
    pub position: u32,
    pub queued_at_ms: u64,
    pub waiting_for_ms: u64,
    /// The mode it asked for: `exclusive`, `shared` or `permit`.
    pub mode: &'static str,
}

impl From<&WaiterInfo> for WaiterJson {
    fn from(w: &WaiterInfo) -> WaiterJson {
        WaiterJson {
            session_id: w.session.0,
            identity: (&w.identity).into(),
            position: w.position,
            queued_at_ms: w.queued_at.as_millis(),
            waiting_for_ms: w.waiting_for_ms,
            mode: w.mode.as_str(),
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ForceReleaseJson {
    pub id: u64,
    pub holder_session_id: u64,
    pub token: u64,
    pub requester: String,
    pub reason: String,
    pub revoke_session: bool,
    pub fenced: bool,
    pub safety: String,
    pub requested_at_ms: u64,
    pub expires_at_ms: u64,
}

impl From<&ForceReleaseRequest> for ForceReleaseJson {
    fn from(r: &ForceReleaseRequest) -> ForceReleaseJson {
        ForceReleaseJson {
            id: r.id.0,
            holder_session_id: r.holder.0,
            token: r.token.0,
            requester: r.requester.clone(),
            reason: r.reason.clone(),
            revoke_session: r.revoke_session,
            fenced: r.fenced,
            safety: r.safety.to_owned(),
            requested_at_ms: r.requested_at.as_millis(),
            expires_at_ms: r.expires_at.as_millis(),
        }
    }
}

/// `GET /v1/namespaces/{ns}/locks/{key}`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KeyInfoJson {
    pub revision: u64,
    pub namespace: String,
    pub key: String,
    pub class: ClassJson,
    /// The oldest holder (the only one of an exclusive key).
    pub holder: Option<HoldJson>,
    /// `exclusive`, `shared` or `permit`; `null` for a free key.
    pub mode: Option<&'static str>,
    /// Every holder, oldest first.
    pub holders: Vec<HoldJson>,
    pub queue_depth: usize,
    pub waiters: Vec<WaiterJson>,
    pub floor: Option<u64>,
    pub pending_force_releases: Vec<ForceReleaseJson>,
    /// N if the key is a semaphore (held or free); `null` for a lock.
    pub permits: Option<u32>,
    /// A semaphore's slot floors, by slot (empty for a lock).
    pub slot_floors: Vec<SlotFloorJson>,
    /// Whether this answer is a replica's own applied state, possibly behind the leader
    /// (asked for with `?stale=true`, or no leader to forward to).
    pub stale: bool,
    /// Why the answer is stale, in words (`null` when it is not).
    pub stale_reason: Option<String>,
}

impl KeyInfoJson {
    pub fn new(k: &KeyInfo, stale: bool) -> KeyInfoJson {
        KeyInfoJson {
            revision: k.revision.0,
            namespace: k.namespace.clone(),
            key: k.key.clone(),
            class: (&k.class).into(),
            holder: k.holder.as_ref().map(HoldJson::from),
            mode: k.mode.map(|m| m.as_str()),
            holders: k.holders.iter().map(HoldJson::from).collect(),
            queue_depth: k.queue_depth,
            waiters: k.waiters.iter().map(WaiterJson::from).collect(),
            floor: k.floor.map(|f| f.0),
            pending_force_releases: k
                .pending_force_releases
                .iter()
                .map(ForceReleaseJson::from)
                .collect(),
            permits: k.permits,
            slot_floors: k
                .permit_floors
                .iter()
                .map(|(permit, floor)| SlotFloorJson {
                    slot: permit.0,
                    floor: floor.0,
                })
                .collect(),
            stale,
            stale_reason: None,
        }
    }
}

/// One slot's floor: the revision of its latest grant or force-release.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SlotFloorJson {
    pub slot: u32,
    pub floor: u64,
}

/// `GET /v1/namespaces/{ns}/holds`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HoldsJson {
    pub namespace: String,
    /// Oldest first.
    pub holds: Vec<HoldJson>,
    pub stale: bool,
    pub stale_reason: Option<String>,
}

/// The body of every error answer.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorJson {
    pub error: ErrorBody,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// The gRPC code name, snake_case (`not_found`, `unavailable`, ...).
    pub code: String,
    /// The stable rule (`ErrorDetail.rule`), when the node gave one.
    pub rule: Option<String>,
    /// For `invalid_argument`: the parameter at fault (`limit`, `stale`, `path`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
    /// For `not_leader`: the leader's HTTP base URL, when known.
    pub leader_endpoint: Option<String>,
    /// For `not_leader`: the leader's node id, when known.
    pub leader_node_id: Option<u64>,
    pub retryable: bool,
}
