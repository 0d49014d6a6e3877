//! Force-release under the two-person rule.
//!
//! One operator requests (naming the token they saw, a reason, and whether to revoke the holder's
//! session); the request records the class's fenced flag and a plain safety statement. A
//! *different* principal approves, acknowledging the fenced flag they were shown. The approval's
//! revision becomes the key's floor; with `revoke_session`, the holder's session is revoked in the
//! same revision. A request expires (in log time) if nobody approves it. Nobody can do both steps,
//! whatever their roles: an incident commander approves in place of a second on-call, never alone.

use std::collections::{BTreeMap, BTreeSet};

use super::audit::{AuditAction, AuditRecord};
use super::class::{check_len, ClassSpec};
use super::command::{Actor, Reply, Role};
use super::error::LockError;
use super::ids::{ForceReleaseId, SessionId, Token};
use super::lock::HoldEnd;
use super::names::{validate_key, validate_namespace};
use super::watch::ReleaseCause;
use super::LockStateMachine;
use crate::time::Instant;

/// Longest reason, in bytes.
pub const REASON_LEN_MAX: usize = 1_024;

/// Roles allowed to request, approve and deny force-releases.
pub const FORCE_RELEASE_ROLES: &[Role] = &[Role::OnCall, Role::IncidentCommander];
const FORCE_RELEASE_ROLES_TEXT: &str = "on-call, incident-commander";

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
    pub reason: String,
    pub revoke_session: bool,
    /// The class's fenced flag when the request was made; the approver must acknowledge it.
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

fn check_reason(reason: &str) -> Result<(), LockError> {
    if reason.trim().is_empty() {
        return Err(LockError::TextEmpty { field: "reason" });
    }
    check_len("reason", reason, REASON_LEN_MAX)
}

impl LockStateMachine {
    pub(crate) fn apply_request_force_release(
        &mut self,
        actor: Actor,
        namespace: String,
        key: String,
        expected_token: Token,
        reason: String,
        revoke_session: bool,
    ) -> Result<Reply, LockError> {
        require_role(&actor, "request a force-release")?;
        validate_namespace(&namespace)?;
        validate_key(&key)?;
        check_reason(&reason)?;
        let entry = self
            .namespaces
            .get(namespace.as_str())
            .and_then(|ns| ns.locks.get(key.as_str()));
        let Some(entry) = entry else {
            return Err(LockError::NotHeld { namespace, key });
        };
        let hold = entry.holder;
        if hold.token != expected_token {
            return Err(LockError::TokenMismatch {
                namespace,
                key,
                expected: expected_token,
                current: hold.token,
            });
        }
        let max = self.config.force_releases_pending_max;
        if self.force_releases.pending.len() >= max {
            return Err(LockError::TooManyForceReleases { max });
        }
        let fenced = self.class_of(&namespace, &key).fenced;
        let safety = ClassSpec::safety_statement(fenced);
        let id = ForceReleaseId(self.revision.0);
        let expires_at = self.time.add_ms(self.config.force_release_ttl_ms);
        self.audit.push(AuditRecord {
            revision: self.revision,
            time: self.time,
            actor: actor.principal.clone(),
            action: AuditAction::ForceReleaseRequested,
            namespace: namespace.clone(),
            key: key.clone(),
            token: Some(hold.token),
            fenced: Some(fenced),
            session: Some(hold.session),
            request: Some(id),
            reason: reason.clone(),
        });
        let request = ForceReleaseRequest {
            id,
            namespace,
            key,
            holder: hold.session,
            token: hold.token,
            requester: actor.principal,
            reason,
            revoke_session,
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
        if acknowledged_fenced != request.fenced {
            return Err(LockError::FencedNotAcknowledged {
                id,
                fenced: request.fenced,
                acknowledged: acknowledged_fenced,
            });
        }
        let current = self
            .namespaces
            .get(request.namespace.as_str())
            .and_then(|ns| ns.locks.get(request.key.as_str()))
            .map(|entry| entry.holder);
        if current.is_none_or(|hold| hold.session != request.holder || hold.token != request.token)
        {
            return Err(LockError::HolderChanged {
                id,
                namespace: request.namespace.clone(),
                key: request.key.clone(),
                session: request.holder,
                token: request.token,
            });
        }
        let request = self.force_releases.remove(id);
        self.audit_approval(&actor, &request);
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
            self.end_hold(namespace, &shared_key, end, None)
                .expect("no token expected")
        };
        Ok(Reply::ForceReleaseApproved {
            floor: self.revision,
            released_token: request.token,
            next,
            session_revoked: request.revoke_session.then_some(request.holder),
        })
    }

    fn audit_approval(&mut self, actor: &Actor, request: &ForceReleaseRequest) {
        let mut record = AuditRecord {
            revision: self.revision,
            time: self.time,
            actor: actor.principal.clone(),
            action: AuditAction::ForceReleaseApproved,
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            token: Some(request.token),
            fenced: Some(request.fenced),
            session: Some(request.holder),
            request: Some(request.id),
            reason: request.reason.clone(),
        };
        self.audit.push(record.clone());
        if request.revoke_session {
            record.action = AuditAction::SessionRevoked;
            self.audit.push(record);
        }
    }

    /// The holder of `namespace/key` if it was granted in this revision.
    fn holder_granted_now(&self, namespace: &str, key: &str) -> Option<(SessionId, Token)> {
        let entry = self.namespaces.get(namespace)?.locks.get(key)?;
        (entry.holder.token == Token::at(self.revision))
            .then_some((entry.holder.session, entry.holder.token))
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
            revision: self.revision,
            time: self.time,
            actor: actor.principal,
            action: AuditAction::ForceReleaseDenied,
            namespace: request.namespace,
            key: request.key,
            token: Some(request.token),
            fenced: Some(request.fenced),
            session: Some(request.holder),
            request: Some(id),
            reason,
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
            self.audit.push(AuditRecord {
                revision: self.revision,
                time: self.time,
                actor: String::new(),
                action: AuditAction::ForceReleaseExpired,
                namespace: request.namespace,
                key: request.key,
                token: Some(request.token),
                fenced: Some(request.fenced),
                session: Some(request.holder),
                request: Some(id),
                reason: format!("not approved by {expires_at}: {}", request.reason),
            });
        }
    }
}
