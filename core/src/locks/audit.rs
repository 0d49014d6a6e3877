//! The audit trail: a replicated record of every force-release request, approval, denial and
//! expiry, every session revocation and every class change. Bounded: the oldest records are
//! dropped first, and a query says how far the trail was compacted.

use std::collections::{BTreeSet, VecDeque};

use super::command::Role;
use super::ids::{ForceReleaseId, PermitSlot, Revision, SessionId, Token};
use crate::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditAction {
    ForceReleaseRequested,
    ForceReleaseApproved,
    ForceReleaseDenied,
    ForceReleaseExpired,
    SessionRevoked,
    ClassPut,
    ClassRemoved,
    /// A semaphore declared, its N changed, or its declaration removed (`permits` 0).
    SemaphoreSet,
    /// A membership change the log chose (`membership`: the members it asked for).
    MembershipChanged,
    /// A backup of the whole state was asked for (`Admin.SaveSnapshot`): the file holds every
    /// session's secret hash and the audit trail, so who took one is on the record. The backup
    /// is taken at this revision or later.
    SnapshotSaved,
    /// The cluster version stepped up (docs/upgrades.md): the log's commands and the replicas'
    /// messages may use what the new version added. Proposed by the leader once every member
    /// said it supports the version (`actor` "picketd"; `reason` names the members' releases).
    ClusterVersionSet,
}

/// One audit record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    pub revision: Revision,
    /// Log time.
    pub time: Instant,
    /// The principal who acted (`""` for an expiry, which nobody did).
    pub actor: String,
    pub action: AuditAction,
    pub namespace: String,
    /// The key (for class changes: the class prefix).
    pub key: String,
    pub token: Option<Token>,
    /// The class's fenced flag: as shown to the operators for a request, a denial or an expiry;
    /// the class's kind at the moment of the release for an approval (an approval is refused
    /// when the kind changed since the request, so the two agree).
    pub fenced: Option<bool>,
    pub session: Option<SessionId>,
    pub request: Option<ForceReleaseId>,
    pub reason: String,
    /// The actor's roles when they acted (empty: none, or a record written before roles were
    /// kept).
    pub actor_roles: BTreeSet<Role>,
    /// Force-release records: who made the request and their roles then (`""`: other records,
    /// or written before requesters were kept).
    pub requester: String,
    pub requester_roles: BTreeSet<Role>,
    /// Approvals: the key's new floor (the approval's revision).
    pub floor: Option<Revision>,
    /// Approvals: the waiter granted in the same revision, if any.
    pub next: Option<(SessionId, Token)>,
    /// Force-release records: whether the holder's session is (to be) revoked.
    pub revoke_session: Option<bool>,
    /// Semaphore records: the N before and after (0: not a semaphore).
    pub permits: Option<(u32, u32)>,
    /// Force-release records of a semaphore holder: the permit's slot.
    pub permit: Option<PermitSlot>,
    /// Membership records: the members the change asked for, as `voters n1,n2,n3 learners n4`.
    pub membership: String,
    /// Force-release requests and approvals: the requester's checklist answers and statement,
    /// as the approver was shown them (`None`: other records, or written before they were kept).
    pub checklist: Option<super::force_release::Checklist>,
    /// Force-release requests and approvals: who the released holder said it was (name, host,
    /// pid, principal) when the request was made (`None`: other records, or written before).
    pub holder: Option<super::command::Identity>,
}

impl AuditRecord {
    /// A record with the required fields; the rest empty.
    pub fn new(
        revision: Revision,
        time: Instant,
        actor: String,
        action: AuditAction,
        namespace: String,
        key: String,
    ) -> AuditRecord {
        AuditRecord {
            revision,
            time,
            actor,
            action,
            namespace,
            key,
            token: None,
            fenced: None,
            session: None,
            request: None,
            reason: String::new(),
            actor_roles: BTreeSet::new(),
            requester: String::new(),
            requester_roles: BTreeSet::new(),
            floor: None,
            next: None,
            revoke_session: None,
            permits: None,
            permit: None,
            membership: String::new(),
            checklist: None,
            holder: None,
        }
    }

    /// The hold and request a force-release record is about.
    pub(crate) fn about(
        mut self,
        token: Token,
        fenced: bool,
        session: SessionId,
        request: ForceReleaseId,
        reason: String,
    ) -> AuditRecord {
        self.token = Some(token);
        self.fenced = Some(fenced);
        self.session = Some(session);
        self.request = Some(request);
        self.reason = reason;
        self
    }
}

/// Which records to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditQuery {
    pub namespace: Option<String>,
    pub key: Option<String>,
    /// Inclusive.
    pub revision_min: Revision,
    /// Inclusive.
    pub revision_max: Revision,
    pub limit: usize,
}

impl Default for AuditQuery {
    fn default() -> Self {
        AuditQuery {
            namespace: None,
            key: None,
            revision_min: Revision(0),
            revision_max: Revision(u64::MAX),
            limit: 1_000,
        }
    }
}

/// Records matching a query, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    /// Records at revisions up to this one may have been dropped (0: none dropped). If the
    /// query's `revision_min` is at or below it, the page may be missing records.
    pub compacted_through: Revision,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AuditLog {
    /// Revisions never decrease along the deque.
    pub records: VecDeque<AuditRecord>,
    pub compacted_through: Revision,
    pub retention: usize,
}

impl AuditLog {
    pub fn new(retention: usize) -> AuditLog {
        AuditLog {
            records: VecDeque::new(),
            compacted_through: Revision(0),
            retention,
        }
    }

    pub fn push(&mut self, record: AuditRecord) {
        if let Some(last) = self.records.back() {
            assert!(
                last.revision <= record.revision,
                "audit record at {} after {}",
                record.revision,
                last.revision
            );
        }
        if self.records.len() == self.retention {
            let dropped = self.records.pop_front().expect("retention > 0");
            self.compacted_through = dropped.revision;
        }
        self.records.push_back(record);
    }

    pub fn query(&self, query: &AuditQuery) -> AuditPage {
        let start = self
            .records
            .partition_point(|record| record.revision < query.revision_min);
        let records = self
            .records
            .range(start..)
            .take_while(|record| record.revision <= query.revision_max)
            .filter(|record| {
                query
                    .namespace
                    .as_deref()
                    .is_none_or(|namespace| namespace == record.namespace)
                    && query.key.as_deref().is_none_or(|key| key == record.key)
            })
            .take(query.limit)
            .cloned()
            .collect();
        AuditPage {
            records,
            compacted_through: self.compacted_through,
        }
    }
}
