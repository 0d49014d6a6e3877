//! Force-release under the two-person rule.
//!
//! One operator requests (naming the token they saw, a reason, and whether to revoke the holder's
//! session); the request records the class's fenced flag and a plain safety statement. A
//! *different* principal approves, acknowledging the fenced flag they were shown. The approval's
//! revision becomes the key's floor; with `revoke_session`, the holder's session is revoked in the
//! same revision. A request expires (in log time) if nobody approves it. Nobody can do both steps,
//! whatever their roles: an incident commander approves in place of a second on-call, never alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::audit::{AuditAction, AuditRecord};
use super::class::{check_len, ClassSpec};
use super::command::{Actor, Reply, Role};
use super::error::LockError;
use super::ids::{ForceReleaseId, PermitSlot, Revision, SessionId, Token};
use super::lock::{Hold, HoldEnd, LockEntry};
use super::names::{validate_key, validate_namespace};
use super::session::LostHold;
use super::watch::ReleaseCause;
use super::LockStateMachine;
use crate::time::Instant;

/// Longest reason, in bytes.
pub const REASON_LEN_MAX: usize = 1_024;

/// Roles allowed to request, approve and deny force-releases.
pub const FORCE_RELEASE_ROLES: &[Role] = &[Role::OnCall, Role::IncidentCommander];
const FORCE_RELEASE_ROLES_TEXT: &str = "on-call, incident-commander";

/// Longest checklist statement, in bytes.
pub const STATEMENT_LEN_MAX: usize = 1_024;

/// One answer of a force-release checklist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChecklistAnswer {
    /// Not answered (every request made before checklists were kept, and clients that send
    /// none).
    #[default]
    Unanswered,
    Yes,
    No,
    Unknown,
}

impl ChecklistAnswer {
    pub fn word(self) -> &'static str {
        match self {
            ChecklistAnswer::Unanswered => "not answered",
            ChecklistAnswer::Yes => "yes",
            ChecklistAnswer::No => "no",
            ChecklistAnswer::Unknown => "unknown",
        }
    }
}

/// What the requester says about the holder before an advisory lock is taken away: has its
/// process stopped, and would a second run (the old holder and the next one writing together)
/// be acceptable? Nothing refuses an advisory lock's old holder, so these answers decide the
/// rule (docs/locks.md, "The advisory rule"): when they say a double run is unsafe, the
/// request needs a typed `statement` of why the release is still right, and only an incident
/// commander may approve it. Recorded in the request and in both audit records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checklist {
    pub holder_stopped: ChecklistAnswer,
    pub double_run_acceptable: ChecklistAnswer,
    /// Why the release is still right although the answers say a double run is unsafe
    /// (`""`: none given).
    pub statement: String,
}

impl Checklist {
    /// The answers say the old holder may still run (stopped: not `yes`) and a double run is
    /// not known to be acceptable (not `yes`). A checklist with neither question answered (an
    /// API client that sends none, a request made before checklists) says nothing: it is
    /// recorded and shown as not answered.
    pub fn says_double_run_unsafe(&self) -> bool {
        let answered = self.holder_stopped != ChecklistAnswer::Unanswered
            || self.double_run_acceptable != ChecklistAnswer::Unanswered;
        answered
            && self.double_run_acceptable != ChecklistAnswer::Yes
            && self.holder_stopped != ChecklistAnswer::Yes
    }

    /// Whether anything was answered or said.
    pub fn is_empty(&self) -> bool {
        *self == Checklist::default()
    }
}

/// A pending force-release request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForceReleaseRequest {
    pub id: ForceReleaseId,
    pub namespace: String,
    pub key: String,
    /// The holder and token the requester saw; approval fails if either changed.
    pub holder: SessionId,
    pub token: Token,
    pub requester: String,
    /// The requester's roles when they asked (empty in records written before roles were kept).
    pub requester_roles: BTreeSet<Role>,
    pub reason: String,
    pub revoke_session: bool,
    /// The requester's answers (empty in requests made before checklists were kept).
    pub checklist: Checklist,
    /// Who the holder said it was when the request was made (name, host, pid, principal).
    pub holder_identity: super::command::Identity,
    /// The class's fenced flag when the request was made. The approval is refused if the class's
    /// kind is different when approved; the approver must acknowledge it.
    pub fenced: bool,
    pub safety: &'static str,
    /// Log time.
    pub requested_at: Instant,
    /// Log time from which the request can no longer be approved.
    pub expires_at: Instant,
}

/// Pending requests, bounded by `force_releases_pending_max`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ForceReleases {
    pub pending: BTreeMap<ForceReleaseId, ForceReleaseRequest>,
    /// (expires_at, id) of every pending request: the next to expire first.
    pub by_deadline: BTreeSet<(Instant, ForceReleaseId)>,
}

impl ForceReleases {
    fn remove(&mut self, id: ForceReleaseId) -> ForceReleaseRequest {
        let request = self
            .pending
            .remove(&id)
            .expect("removing a pending request");
        assert!(
            self.by_deadline.remove(&(request.expires_at, id)),
            "request {id} missing from the deadline index"
        );
        request
    }
}

fn require_role(actor: &Actor, action: &'static str) -> Result<(), LockError> {
    if actor.has_any(FORCE_RELEASE_ROLES) {
        Ok(())
    } else {
        Err(LockError::MissingRole {
            principal: actor.principal.clone(),
            action,
            needed: FORCE_RELEASE_ROLES_TEXT,
        })
    }
}

pub(crate) fn check_reason(reason: &str) -> Result<(), LockError> {
    if reason.trim().is_empty() {
        return Err(LockError::TextEmpty { field: "reason" });
    }
    check_len("reason", reason, REASON_LEN_MAX)
}

/// The hold a force-release request names: `holder`'s if given (it must hold the key with
/// `expected`), else the one hold with token `expected` (shared holders granted together share
/// a token: then the session must be named).
fn named_hold(
    entry: &LockEntry,
    namespace: &str,
    key: &str,
    expected: Token,
    holder: Option<SessionId>,
) -> Result<Hold, LockError> {
    let mismatch = |current: Token| LockError::TokenMismatch {
        namespace: namespace.to_owned(),
        key: key.to_owned(),
        expected,
        current,
    };
    if let Some(session) = holder {
        let Some(hold) = entry.holders.get(&session) else {
            return Err(LockError::NotHolder {
                namespace: namespace.to_owned(),
                key: key.to_owned(),
                session,
            });
        };
        if hold.token != expected {
            return Err(mismatch(hold.token));
        }
        return Ok(*hold);
    }
    let with_token: Vec<&Hold> = entry
        .holders
        .values()
        .filter(|hold| hold.token == expected)
        .collect();
    match with_token.as_slice() {
        [] => Err(mismatch(entry.oldest().token)),
        [hold] => Ok(**hold),
        several => Err(LockError::HolderAmbiguous {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            token: expected,
            count: several.len(),
        }),
    }
}

impl LockStateMachine {
    pub(crate) fn apply_request_force_release(
        &mut self,
        actor: Actor,
        namespace: String,
        (key, expected_token, holder): (String, Token, Option<SessionId>),
        reason: String,
        (revoke_session, checklist): (bool, Checklist),
    ) -> Result<Reply, LockError> {
        require_role(&actor, "request a force-release")?;
        // Before cluster version 2 the checklist is not part of the log (release 0.1 drops it):
        // ignored, so that every replica of a mixed cluster applies the request alike.
        let checklist = if self.at_cluster_version(2) {
            checklist
        } else {
            Checklist::default()
        };
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        check_reason(&reason)?;
        check_len(
            "checklist.statement",
            &checklist.statement,
            STATEMENT_LEN_MAX,
        )?;
        let entry = self
            .namespaces
            .get(namespace.as_str())
            .and_then(|ns| ns.locks.get(key.as_str()));
        let Some(entry) = entry else {
            return Err(LockError::NotHeld { namespace, key });
        };
        let hold = named_hold(entry, &namespace, &key, expected_token, holder)?;
        let fenced = self.class_of(&namespace, &key).fenced;
        // The advisory rule: nothing refuses an advisory lock's old holder, so when the
        // requester's own answers say a double run is unsafe, the request must say why the
        // release is still right (and only an incident commander approves it, below).
        if !fenced && checklist.says_double_run_unsafe() && checklist.statement.trim().is_empty() {
            return Err(LockError::AdvisoryStatementRequired {
                namespace,
                key,
                holder_stopped: checklist.holder_stopped.word(),
                double_run_acceptable: checklist.double_run_acceptable.word(),
            });
        }
        // One approvable request per hold: a second one would let two approvers act on two
        // different statements. A pending request whose holder, token or class kind changed can
        // no longer be approved and does not block a new one.
        let approvable = self.force_releases.pending.values().find(|r| {
            r.namespace == namespace
                && r.key == key
                && r.holder == hold.session
                && r.token == hold.token
                && r.fenced == fenced
        });
        if let Some(pending) = approvable {
            return Err(LockError::ForceReleasePending {
                id: pending.id,
                namespace,
                key,
                requester: pending.requester.clone(),
            });
        }
        let max = self.config.force_releases_pending_max;
        if self.force_releases.pending.len() >= max {
            return Err(LockError::TooManyForceReleases { max });
        }
        let safety = ClassSpec::safety_statement(fenced);
        let id = ForceReleaseId(self.revision.0);
        let expires_at = self.time.add_ms(self.config.force_release_ttl_ms);
        let holder_identity = self
            .sessions
            .get(&hold.session)
            .expect("a holder's session is live")
            .identity
            .clone();
        self.audit.push(AuditRecord {
            checklist: Some(checklist.clone()),
            holder: Some(holder_identity.clone()),
            actor_roles: actor.roles.clone(),
            requester: actor.principal.clone(),
            requester_roles: actor.roles.clone(),
            revoke_session: Some(revoke_session),
            permit: hold.permit,
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.principal.clone(),
                AuditAction::ForceReleaseRequested,
                namespace.clone(),
                key.clone(),
            )
            .about(hold.token, fenced, hold.session, id, reason.clone())
        });
        let request = ForceReleaseRequest {
            id,
            namespace,
            key,
            holder: hold.session,
            token: hold.token,
            requester: actor.principal,
            requester_roles: actor.roles,
            reason,
            revoke_session,
            checklist,
            holder_identity,
            fenced,
            safety,
            requested_at: self.time,
            expires_at,
        };
        self.force_releases.pending.insert(id, request);
        self.force_releases.by_deadline.insert((expires_at, id));
        Ok(Reply::ForceReleaseRequested {
            id,
            fenced,
            safety,
            expires_at,
        })
    }

    pub(crate) fn apply_approve_force_release(
        &mut self,
        actor: Actor,
        id: ForceReleaseId,
        acknowledged_fenced: bool,
    ) -> Result<Reply, LockError> {
        require_role(&actor, "approve a force-release")?;
        let request = self
            .force_releases
            .pending
            .get(&id)
            .ok_or(LockError::UnknownForceRelease { id })?;
        // Expired requests are swept before every command (see `sweep_force_releases`).
        assert!(
            self.time < request.expires_at,
            "request {id} expired at {} but is pending at {}",
            request.expires_at,
            self.time
        );
        if actor.principal == request.requester {
            return Err(LockError::ApproverIsRequester {
                id,
                principal: actor.principal,
            });
        }
        let current = self
            .namespaces
            .get(request.namespace.as_str())
            .and_then(|ns| ns.locks.get(request.key.as_str()))
            .and_then(|entry| entry.holders.get(&request.holder).copied());
        let Some(current) = current.filter(|hold| hold.token == request.token) else {
            return Err(LockError::HolderChanged {
                id,
                namespace: request.namespace.clone(),
                key: request.key.clone(),
                session: request.holder,
                token: request.token,
            });
        };
        // The kind that counts is the class's as it is now, at the moment of the release: a
        // request made for a fenced lock says nothing true about an advisory one.
        let fenced = self.class_of(&request.namespace, &request.key).fenced;
        if fenced != request.fenced {
            return Err(LockError::ClassKindChanged {
                id,
                namespace: request.namespace.clone(),
                key: request.key.clone(),
                requested_fenced: request.fenced,
                fenced,
            });
        }
        if acknowledged_fenced != fenced {
            return Err(LockError::FencedNotAcknowledged {
                id,
                fenced,
                acknowledged: acknowledged_fenced,
            });
        }
        if !fenced
            && request.checklist.says_double_run_unsafe()
            && !actor.roles.contains(&Role::IncidentCommander)
        {
            return Err(LockError::IncidentCommanderRequired {
                id,
                principal: actor.principal,
            });
        }
        let request = self.force_releases.remove(id);
        let (namespace, key) = (request.namespace.as_str(), request.key.as_str());
        let next = if request.revoke_session {
            let forced = Some((id, namespace, key));
            self.end_sessions(&[request.holder], ReleaseCause::SessionRevoked, forced);
            self.holder_granted_now(namespace, key)
        } else {
            let end = HoldEnd::Forced {
                request: id,
                session_revoked: false,
            };
            let shared_key = self.sessions[&request.holder]
                .held_key(namespace, key)
                .expect("the holder was checked above");
            let next = self
                .end_hold(namespace, &shared_key, request.holder, end, None, None)
                .expect("no token expected");
            // The session lives on: its client learns of the loss from its keepalive answers.
            let lost = LostHold {
                namespace: Arc::from(namespace),
                key: shared_key,
                token: request.token,
                revision: self.revision,
                request: id,
            };
            self.sessions
                .get_mut(&request.holder)
                .expect("the holder was checked above")
                .note_hold_lost(lost);
            next
        };
        // The key's floor now: this revision, unless other shared holders hold on (the floor
        // stays, so their tokens stay valid; the next exclusive grant raises it above all). A
        // semaphore permit's floor is its slot's, which is now this revision.
        let floor = match current.permit {
            Some(_) => self.revision,
            None => self
                .namespaces
                .get(namespace)
                .and_then(|ns| ns.locks.get(key))
                .map_or(self.revision, |entry| entry.floor),
        };
        self.audit_approval(&actor, &request, fenced, next, (floor, current.permit));
        Ok(Reply::ForceReleaseApproved {
            floor,
            released_token: request.token,
            next,
            session_revoked: request.revoke_session.then_some(request.holder),
            fenced,
        })
    }

    fn audit_approval(
        &mut self,
        actor: &Actor,
        request: &ForceReleaseRequest,
        fenced: bool,
        next: Option<(SessionId, Token)>,
        (floor, permit): (Revision, Option<PermitSlot>),
    ) {
        let mut record = AuditRecord {
            actor_roles: actor.roles.clone(),
            requester: request.requester.clone(),
            requester_roles: request.requester_roles.clone(),
            checklist: Some(request.checklist.clone()),
            holder: Some(request.holder_identity.clone()),
            floor: Some(floor),
            next,
            revoke_session: Some(request.revoke_session),
            permit,
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.principal.clone(),
                AuditAction::ForceReleaseApproved,
                request.namespace.clone(),
                request.key.clone(),
            )
            .about(
                request.token,
                fenced,
                request.holder,
                request.id,
                request.reason.clone(),
            )
        };
        self.audit.push(record.clone());
        if request.revoke_session {
            record.action = AuditAction::SessionRevoked;
            self.audit.push(record);
        }
    }

    /// The first holder of `namespace/key` granted in this revision, if any.
    fn holder_granted_now(&self, namespace: &str, key: &str) -> Option<(SessionId, Token)> {
        let entry = self.namespaces.get(namespace)?.locks.get(key)?;
        let now = Token::at(self.revision);
        entry
            .holders
            .values()
            .find(|hold| hold.token == now)
            .map(|hold| (hold.session, hold.token))
    }

    pub(crate) fn apply_deny_force_release(
        &mut self,
        actor: Actor,
        id: ForceReleaseId,
        reason: String,
    ) -> Result<Reply, LockError> {
        require_role(&actor, "deny a force-release")?;
        if !self.force_releases.pending.contains_key(&id) {
            return Err(LockError::UnknownForceRelease { id });
        }
        check_reason(&reason)?;
        let request = self.force_releases.remove(id);
        self.audit.push(AuditRecord {
            actor_roles: actor.roles,
            requester: request.requester,
            requester_roles: request.requester_roles,
            revoke_session: Some(request.revoke_session),
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.principal,
                AuditAction::ForceReleaseDenied,
                request.namespace,
                request.key,
            )
            .about(request.token, request.fenced, request.holder, id, reason)
        });
        Ok(Reply::ForceReleaseDenied)
    }

    /// Drops every request whose deadline is at or before the current log time, with an audit
    /// record each (at the revision of the command being applied).
    pub(crate) fn sweep_force_releases(&mut self) {
        while let Some(&(expires_at, id)) = self.force_releases.by_deadline.first() {
            if expires_at > self.time {
                break;
            }
            let request = self.force_releases.remove(id);
            let reason = format!("not approved by {expires_at}: {}", request.reason);
            self.audit.push(AuditRecord {
                requester: request.requester,
                requester_roles: request.requester_roles,
                revoke_session: Some(request.revoke_session),
                ..AuditRecord::new(
                    self.revision,
                    self.time,
                    String::new(),
                    AuditAction::ForceReleaseExpired,
                    request.namespace,
                    request.key,
                )
                .about(request.token, request.fenced, request.holder, id, reason)
            });
        }
    }
}
