//! API requests -> core commands and queries, validated at the edge; core replies -> API
//! responses.
//!
//! A request that breaks a rule is answered before anything is proposed, with a
//! [`ConvertError`] naming the field from the RPC's name (`acquire.namespace`, ...). The state
//! machine re-checks names and sizes when it applies a command (the log is the authority); this
//! edge check only makes the common mistakes cheap and precise.
//!
//! Fields the server derives from authentication are never read from the request: the
//! principal of a new session's identity, the caller's principal in a [`SessionProof`], and the
//! [`Actor`] (principal and roles) of an admin command. The server passes them in. A session's
//! secret is hashed here ([`SessionSecret::hash`]): commands carry only the hash.

use picket_core::locks::LockError;
use picket_core::locks::{
    validate_class_name, validate_key, validate_namespace, validate_prefix, AcquireReply, Actor,
    AuditPage, AuditQuery, ClassSpec, Command, ForceReleaseId, Identity, Reply, RequestId,
    Revision, SessionId, SessionProof, Token, Wait, WatchFilter, WatchPage, DESCRIPTION_LEN_MAX,
    IDENTITY_FIELD_LEN_MAX, KEY_LEN_MAX, OWNER_LEN_MAX, REASON_LEN_MAX, RUNBOOK_URL_LEN_MAX,
};
use picket_core::node::{Answer, Query};
use thiserror::Error;

use super::command::grant_to_wire;
use super::common::mode_from_wire;
use super::{from_usize, required};
use crate::error::ConvertError;
use crate::proto;
use crate::secret::SessionSecret;
use crate::status::lock_error_status;

/// Longest time an `Acquire` call may be held open waiting for a grant.
pub const ACQUIRE_WAIT_MS_MAX: u64 = 10 * 60 * 1_000;
/// Page size of listings when the request says 0.
pub const LIST_LIMIT_DEFAULT: usize = 1_000;
/// Largest page a listing may ask for.
pub const LIST_LIMIT_MAX: usize = 10_000;

fn namespace(value: &str, field: &str) -> Result<(), ConvertError> {
    validate_namespace(value).map_err(|e| ConvertError::new(field, e.to_string()))
}

fn key(value: &str, field: &str) -> Result<(), ConvertError> {
    validate_key(value).map_err(|e| ConvertError::new(field, e.to_string()))
}

fn nonzero(value: u64, field: &str) -> Result<u64, ConvertError> {
    if value == 0 {
        return Err(ConvertError::new(field, "required (must be non-zero)"));
    }
    Ok(value)
}

fn text(value: &str, field: &str, max: usize) -> Result<(), ConvertError> {
    if value.len() > max {
        return Err(ConvertError::new(
            field,
            format!("{} bytes long: at most {max} allowed", value.len()),
        ));
    }
    Ok(())
}

fn reason(value: &str, field: &str) -> Result<(), ConvertError> {
    if value.trim().is_empty() {
        return Err(ConvertError::new(
            field,
            "required (a reason for the audit trail)",
        ));
    }
    text(value, field, REASON_LEN_MAX)
}

fn limit(value: u32, field: &str) -> Result<usize, ConvertError> {
    let value = usize::try_from(value).unwrap_or(usize::MAX);
    match value {
        0 => Ok(LIST_LIMIT_DEFAULT),
        v if v > LIST_LIMIT_MAX => Err(ConvertError::new(
            field,
            format!("{v} is above the largest page, {LIST_LIMIT_MAX}"),
        )),
        v => Ok(v),
    }
}

/// Checks a class's names and text sizes (its TTLs are checked against the cluster's bounds by
/// the state machine, which knows them).
fn class(value: proto::ClassSpec, field: &str) -> Result<ClassSpec, ConvertError> {
    let at = |sub: &str| format!("{field}.{sub}");
    validate_class_name(&value.name).map_err(|e| ConvertError::new(at("name"), e.to_string()))?;
    validate_prefix(&value.prefix).map_err(|e| ConvertError::new(at("prefix"), e.to_string()))?;
    text(&value.owner, &at("owner"), OWNER_LEN_MAX)?;
    text(&value.runbook_url, &at("runbook_url"), RUNBOOK_URL_LEN_MAX)?;
    text(&value.description, &at("description"), DESCRIPTION_LEN_MAX)?;
    ClassSpec::try_from(value).map_err(|e| e.within(field))
}

/// The proof of a caller who sent `secret` in `field` (required), as `principal`.
fn proof(secret: &[u8], field: &str, principal: &str) -> Result<SessionProof, ConvertError> {
    let secret = SessionSecret::from_request(secret, field)?;
    Ok(SessionProof::new(secret.hash(), principal))
}

impl proto::CreateSessionRequest {
    /// The `CreateSession` command for an authenticated `principal`, and the secret drawn here
    /// when the request brought none (returned once to the caller, in the response).
    pub fn into_command(
        self,
        principal: &str,
    ) -> Result<(Command, Option<SessionSecret>), ConvertError> {
        let chosen =
            SessionSecret::optional(&self.session_secret, "create_session.session_secret")?;
        let identity = required(self.identity, "create_session.identity")?;
        if identity.name.is_empty() {
            return Err(ConvertError::new(
                "create_session.identity.name",
                "required (the service's name, shown to operators)",
            ));
        }
        for (value, field) in [
            (&identity.name, "create_session.identity.name"),
            (&identity.host, "create_session.identity.host"),
        ] {
            text(value, field, IDENTITY_FIELD_LEN_MAX)?;
        }
        if self.ttl_ms == Some(0) {
            return Err(ConvertError::new(
                "create_session.ttl_ms",
                "must be non-zero (leave it out for the cluster default)",
            ));
        }
        let (secret, drawn) = match chosen {
            Some(secret) => (secret, None),
            None => {
                let secret = SessionSecret::generate();
                (secret.clone(), Some(secret))
            }
        };
        let command = Command::CreateSession {
            ttl_ms: self.ttl_ms,
            identity: Identity {
                name: identity.name,
                host: identity.host,
                pid: identity.pid,
                principal: principal.to_owned(),
            },
            secret_hash: Some(secret.hash()),
        };
        Ok((command, drawn))
    }
}

impl proto::CloseSessionRequest {
    /// The `CloseSession` command of a caller authenticated as `principal`.
    pub fn into_command(self, principal: &str) -> Result<Command, ConvertError> {
        Ok(Command::CloseSession {
            session: SessionId(nonzero(self.session_id, "close_session.session_id")?),
            proof: proof(
                &self.session_secret,
                "close_session.session_secret",
                principal,
            )?,
        })
    }
}

/// A validated keepalive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepAlive {
    pub session: SessionId,
    pub seq: u64,
    pub proof: SessionProof,
}

impl KeepAlive {
    /// The keepalive of a caller authenticated as `principal`.
    pub fn parse(v: proto::KeepAliveRequest, principal: &str) -> Result<KeepAlive, ConvertError> {
        Ok(KeepAlive {
            session: SessionId(nonzero(v.session_id, "keep_alive.session_id")?),
            seq: v.seq,
            proof: proof(&v.session_secret, "keep_alive.session_secret", principal)?,
        })
    }
}

/// `Acquire` with `wait = wait_ms > 0`; the server reads `wait_ms` (checked here to be at most
/// [`ACQUIRE_WAIT_MS_MAX`]) to bound how long it holds the call.
impl proto::AcquireRequest {
    /// The `Acquire` command of a caller authenticated as `principal`.
    pub fn into_command(self, principal: &str) -> Result<Command, ConvertError> {
        let v = self;
        let session = SessionId(nonzero(v.session_id, "acquire.session_id")?);
        let proof = proof(&v.session_secret, "acquire.session_secret", principal)?;
        let request = RequestId(nonzero(v.request_id, "acquire.request_id")?);
        namespace(&v.namespace, "acquire.namespace")?;
        key(&v.key, "acquire.key")?;
        if v.wait_ms > ACQUIRE_WAIT_MS_MAX {
            return Err(ConvertError::new(
                "acquire.wait_ms",
                format!("{} ms: at most {ACQUIRE_WAIT_MS_MAX} ms", v.wait_ms),
            ));
        }
        if v.wait_timeout_ms > 0 && v.wait_ms == 0 {
            return Err(ConvertError::new(
                "acquire.wait_timeout_ms",
                "set without wait_ms: a try (wait_ms = 0) does not wait",
            ));
        }
        // Refused here, at the edge, so a malformed request changes nothing (the state machine
        // refuses it too, as a command in the log, for commands that did not come through here).
        if v.wait_timeout_ms > picket_core::locks::WAIT_TIMEOUT_MS_MAX {
            return Err(ConvertError::new(
                "acquire.wait_timeout_ms",
                format!(
                    "{} ms: at most {} ms (24 hours)",
                    v.wait_timeout_ms,
                    picket_core::locks::WAIT_TIMEOUT_MS_MAX
                ),
            ));
        }
        Ok(Command::Acquire {
            session,
            proof,
            request,
            namespace: v.namespace,
            key: v.key,
            mode: mode_from_wire(v.mode, "acquire.mode")?,
            wait: (v.wait_ms > 0).then_some(Wait {
                timeout_ms: (v.wait_timeout_ms > 0).then_some(v.wait_timeout_ms),
            }),
        })
    }
}

impl proto::CancelWaitRequest {
    /// The `CancelWait` command of a caller authenticated as `principal`.
    pub fn into_command(self, principal: &str) -> Result<Command, ConvertError> {
        let v = self;
        let session = SessionId(nonzero(v.session_id, "cancel_wait.session_id")?);
        let proof = proof(&v.session_secret, "cancel_wait.session_secret", principal)?;
        namespace(&v.namespace, "cancel_wait.namespace")?;
        key(&v.key, "cancel_wait.key")?;
        Ok(Command::CancelWait {
            session,
            proof,
            namespace: v.namespace,
            key: v.key,
        })
    }
}

impl proto::ReleaseRequest {
    /// The `Release` command of a caller authenticated as `principal`.
    pub fn into_command(self, principal: &str) -> Result<Command, ConvertError> {
        let v = self;
        let session = SessionId(nonzero(v.session_id, "release.session_id")?);
        let proof = proof(&v.session_secret, "release.session_secret", principal)?;
        let request = RequestId(nonzero(v.request_id, "release.request_id")?);
        namespace(&v.namespace, "release.namespace")?;
        key(&v.key, "release.key")?;
        Ok(Command::Release {
            session,
            proof,
            request,
            namespace: v.namespace,
            key: v.key,
            token: Token(nonzero(v.token, "release.token")?),
        })
    }
}

/// A validated watch: read events from `from` on, matching `filter`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchStart {
    pub from: Revision,
    pub filter: WatchFilter,
    /// Start after the revision applied when the stream opens (`from` ignored).
    pub from_now: bool,
}

impl TryFrom<proto::WatchRequest> for WatchStart {
    type Error = ConvertError;
    fn try_from(v: proto::WatchRequest) -> Result<Self, ConvertError> {
        if let Some(ns) = &v.namespace {
            namespace(ns, "watch.namespace")?;
        }
        validate_prefix(&v.key_prefix)
            .map_err(|e| ConvertError::new("watch.key_prefix", e.to_string()))?;
        Ok(WatchStart {
            from_now: v.from_now,
            from: Revision(v.from_revision),
            filter: WatchFilter {
                namespace: v.namespace,
                key_prefix: v.key_prefix,
            },
        })
    }
}

/// A validated read of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectQuery {
    pub namespace: String,
    pub key: String,
    pub allow_stale: bool,
}

impl TryFrom<proto::InspectRequest> for InspectQuery {
    type Error = ConvertError;
    fn try_from(v: proto::InspectRequest) -> Result<Self, ConvertError> {
        namespace(&v.namespace, "inspect.namespace")?;
        key(&v.key, "inspect.key")?;
        Ok(InspectQuery {
            namespace: v.namespace,
            key: v.key,
            allow_stale: v.allow_stale,
        })
    }
}

/// A validated listing of a namespace's holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListHoldsQuery {
    pub namespace: String,
    /// 1..=[`LIST_LIMIT_MAX`].
    pub limit: usize,
    pub allow_stale: bool,
}

impl TryFrom<proto::ListHoldsRequest> for ListHoldsQuery {
    type Error = ConvertError;
    fn try_from(v: proto::ListHoldsRequest) -> Result<Self, ConvertError> {
        namespace(&v.namespace, "list_holds.namespace")?;
        Ok(ListHoldsQuery {
            limit: limit(v.limit, "list_holds.limit")?,
            namespace: v.namespace,
            allow_stale: v.allow_stale,
        })
    }
}

/// A validated listing of a namespace's classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListClassesQuery {
    pub namespace: String,
    pub allow_stale: bool,
}

impl TryFrom<proto::ListClassesRequest> for ListClassesQuery {
    type Error = ConvertError;
    fn try_from(v: proto::ListClassesRequest) -> Result<Self, ConvertError> {
        namespace(&v.namespace, "list_classes.namespace")?;
        Ok(ListClassesQuery {
            namespace: v.namespace,
            allow_stale: v.allow_stale,
        })
    }
}

/// A validated audit query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRead {
    pub query: AuditQuery,
    pub allow_stale: bool,
}

impl TryFrom<proto::QueryAuditRequest> for AuditRead {
    type Error = ConvertError;
    fn try_from(v: proto::QueryAuditRequest) -> Result<Self, ConvertError> {
        if let Some(ns) = &v.namespace {
            namespace(ns, "query_audit.namespace")?;
        }
        if let Some(k) = &v.key {
            text(k, "query_audit.key", KEY_LEN_MAX)?;
        }
        let revision_max = v.revision_max.unwrap_or(u64::MAX);
        if revision_max < v.revision_min {
            return Err(ConvertError::new(
                "query_audit.revision_max",
                format!("{revision_max} is below revision_min {}", v.revision_min),
            ));
        }
        Ok(AuditRead {
            query: AuditQuery {
                namespace: v.namespace,
                key: v.key,
                revision_min: Revision(v.revision_min),
                revision_max: Revision(revision_max),
                limit: limit(v.limit, "query_audit.limit")?,
            },
            allow_stale: v.allow_stale,
        })
    }
}

impl proto::PutClassRequest {
    pub fn into_command(self, actor: Actor) -> Result<Command, ConvertError> {
        namespace(&self.namespace, "put_class.namespace")?;
        let spec = required(self.class, "put_class.class")?;
        Ok(Command::PutClass {
            actor,
            namespace: self.namespace,
            class: class(spec, "put_class.class")?,
        })
    }
}

impl proto::SetSemaphoreRequest {
    /// The command. A missing or too long reason is refused here, like every other reason
    /// (bad input never reaches the log, where a refusal would still take a revision); N's
    /// bounds are the state machine's rule (`permits_out_of_bounds`).
    pub fn into_command(self, actor: Actor) -> Result<Command, ConvertError> {
        namespace(&self.namespace, "set_semaphore.namespace")?;
        key(&self.key, "set_semaphore.key")?;
        reason(&self.reason, "set_semaphore.reason")?;
        Ok(Command::SetSemaphore {
            actor,
            namespace: self.namespace,
            key: self.key,
            permits: self.permits,
            reason: self.reason,
        })
    }
}

impl proto::SetSemaphoreResponse {
    /// The answer to `SetSemaphore`, applied at `revision`.
    pub fn from_reply(reply: Reply, revision: Revision) -> Result<Self, WrongReply> {
        match reply {
            Reply::SemaphoreSet { previous_permits } => Ok(proto::SetSemaphoreResponse {
                revision: revision.0,
                previous_permits,
            }),
            other => Err(wrong("SemaphoreSet", other)),
        }
    }
}

impl proto::RemoveClassRequest {
    pub fn into_command(self, actor: Actor) -> Result<Command, ConvertError> {
        namespace(&self.namespace, "remove_class.namespace")?;
        validate_prefix(&self.prefix)
            .map_err(|e| ConvertError::new("remove_class.prefix", e.to_string()))?;
        Ok(Command::RemoveClass {
            actor,
            namespace: self.namespace,
            prefix: self.prefix,
        })
    }
}

impl proto::RequestForceReleaseRequest {
    pub fn into_command(self, actor: Actor) -> Result<Command, ConvertError> {
        namespace(&self.namespace, "request_force_release.namespace")?;
        key(&self.key, "request_force_release.key")?;
        let token = nonzero(self.expected_token, "request_force_release.expected_token")?;
        reason(&self.reason, "request_force_release.reason")?;
        if let Some(checklist) = &self.checklist {
            let max = picket_core::locks::STATEMENT_LEN_MAX;
            if checklist.statement.len() > max {
                return Err(ConvertError::new(
                    "request_force_release.checklist.statement",
                    format!("{} bytes: at most {max}", checklist.statement.len()),
                ));
            }
        }
        Ok(Command::RequestForceRelease {
            actor,
            namespace: self.namespace,
            key: self.key,
            expected_token: Token(token),
            holder: (self.holder_session_id > 0).then_some(SessionId(self.holder_session_id)),
            reason: self.reason,
            revoke_session: self.revoke_session,
            checklist: super::common::checklist_from_wire(
                self.checklist,
                "request_force_release.checklist",
            )?,
        })
    }
}

impl proto::ApproveForceReleaseRequest {
    pub fn into_command(self, actor: Actor) -> Result<Command, ConvertError> {
        let id = nonzero(
            self.force_release_id,
            "approve_force_release.force_release_id",
        )?;
        Ok(Command::ApproveForceRelease {
            actor,
            id: ForceReleaseId(id),
            acknowledged_fenced: self.acknowledged_fenced,
        })
    }
}

impl proto::DenyForceReleaseRequest {
    pub fn into_command(self, actor: Actor) -> Result<Command, ConvertError> {
        let id = nonzero(self.force_release_id, "deny_force_release.force_release_id")?;
        reason(&self.reason, "deny_force_release.reason")?;
        Ok(Command::DenyForceRelease {
            actor,
            id: ForceReleaseId(id),
            reason: self.reason,
        })
    }
}

/// The server got a reply of another kind than the command it proposed: a bug, answered as
/// `INTERNAL`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("internal error: expected a {expected} reply, got {got:?}")]
pub struct WrongReply {
    pub expected: &'static str,
    pub got: Box<Reply>,
}

impl From<WrongReply> for tonic::Status {
    fn from(error: WrongReply) -> tonic::Status {
        tonic::Status::internal(error.to_string())
    }
}

fn wrong(expected: &'static str, got: Reply) -> WrongReply {
    WrongReply {
        expected,
        got: Box::new(got),
    }
}

impl TryFrom<Reply> for proto::CreateSessionResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            // The server sets `session_secret` when it drew the secret.
            Reply::SessionCreated { session, ttl_ms } => Ok(proto::CreateSessionResponse {
                session_id: session.0,
                ttl_ms,
                session_secret: Vec::new(),
            }),
            other => Err(wrong("SessionCreated", other)),
        }
    }
}

impl TryFrom<Reply> for proto::CloseSessionResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::SessionClosed {
                holds_released,
                waits_removed,
            } => Ok(proto::CloseSessionResponse {
                holds_released: from_usize(holds_released),
                waits_removed: from_usize(waits_removed),
            }),
            other => Err(wrong("SessionClosed", other)),
        }
    }
}

impl proto::AcquireResponse {
    pub fn new(reply: AcquireReply, revision: Revision) -> proto::AcquireResponse {
        proto::AcquireResponse {
            reply: Some(reply.into()),
            revision: revision.0,
        }
    }
}

impl TryFrom<Reply> for proto::ReleaseResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::Released { token, next } => Ok(proto::ReleaseResponse {
                token: token.0,
                next: grant_to_wire(next),
            }),
            other => Err(wrong("Released", other)),
        }
    }
}

impl proto::CancelWaitResponse {
    /// The answer to `CancelWait` from the state machine's reply and the revision that gave it.
    pub fn new(reply: Reply, revision: Revision) -> Result<proto::CancelWaitResponse, WrongReply> {
        match reply {
            Reply::WaitCancelled { removed, held } => Ok(proto::CancelWaitResponse {
                removed,
                held_token: held.map(|t| t.0),
                revision: revision.0,
            }),
            other => Err(wrong("WaitCancelled", other)),
        }
    }
}

impl TryFrom<Reply> for proto::PutClassResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::ClassPut { replaced } => Ok(proto::PutClassResponse { replaced }),
            other => Err(wrong("ClassPut", other)),
        }
    }
}

impl TryFrom<Reply> for proto::RemoveClassResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::ClassRemoved => Ok(proto::RemoveClassResponse {}),
            other => Err(wrong("ClassRemoved", other)),
        }
    }
}

impl TryFrom<Reply> for proto::DenyForceReleaseResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::ForceReleaseDenied => Ok(proto::DenyForceReleaseResponse {}),
            other => Err(wrong("ForceReleaseDenied", other)),
        }
    }
}

impl TryFrom<Reply> for proto::RequestForceReleaseResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::ForceReleaseRequested {
                id,
                fenced,
                safety,
                expires_at,
            } => Ok(proto::RequestForceReleaseResponse {
                force_release_id: id.0,
                fenced,
                safety: safety.to_owned(),
                expires_at_ms: expires_at.as_millis(),
            }),
            other => Err(wrong("ForceReleaseRequested", other)),
        }
    }
}

impl TryFrom<Reply> for proto::ApproveForceReleaseResponse {
    type Error = WrongReply;
    fn try_from(v: Reply) -> Result<Self, WrongReply> {
        match v {
            Reply::ForceReleaseApproved {
                floor,
                released_token,
                next,
                session_revoked,
                fenced,
            } => Ok(proto::ApproveForceReleaseResponse {
                floor: floor.0,
                released_token: released_token.0,
                next: grant_to_wire(next),
                session_revoked: session_revoked.map(|s| s.0),
                fenced,
            }),
            other => Err(wrong("ForceReleaseApproved", other)),
        }
    }
}

impl From<WatchPage> for proto::WatchResponse {
    fn from(v: WatchPage) -> Self {
        proto::WatchResponse {
            events: v.events.into_iter().map(Into::into).collect(),
            resume_from: v.resume_from.0,
        }
    }
}

impl From<AuditPage> for proto::QueryAuditResponse {
    fn from(v: AuditPage) -> Self {
        proto::QueryAuditResponse {
            records: v.records.into_iter().map(Into::into).collect(),
            compacted_through: v.compacted_through.0,
        }
    }
}

impl InspectQuery {
    /// The node query this request asks (`allow_stale` chooses `Node::read_local` over
    /// `Node::read`).
    pub fn query(&self) -> Query {
        Query::Inspect {
            namespace: self.namespace.clone(),
            key: self.key.clone(),
        }
    }
}

impl ListHoldsQuery {
    pub fn query(&self) -> Query {
        Query::ListHolds {
            namespace: self.namespace.clone(),
            limit: self.limit,
        }
    }
}

impl ListClassesQuery {
    pub fn query(&self) -> Query {
        Query::Classes {
            namespace: self.namespace.clone(),
        }
    }
}

impl AuditRead {
    pub fn query(&self) -> Query {
        Query::Audit(self.query.clone())
    }
}

/// The server got an answer of another kind than the query it asked: a bug, answered as
/// `INTERNAL`.
fn wrong_answer(expected: &str, got: &Answer) -> tonic::Status {
    tonic::Status::internal(format!(
        "internal error: expected a {expected} answer, got {got:?}"
    ))
}

fn refused(error: &LockError) -> tonic::Status {
    lock_error_status(error)
}

impl proto::KeyInfo {
    /// The response to `Inspect` from the node's answer.
    pub fn from_answer(answer: Answer) -> Result<proto::KeyInfo, tonic::Status> {
        match answer {
            Answer::Key(result) => match *result {
                Ok(info) => Ok(info.into()),
                Err(error) => Err(refused(&error)),
            },
            other => Err(wrong_answer("Key", &other)),
        }
    }
}

impl proto::ListHoldsResponse {
    pub fn from_answer(
        answer: Answer,
        revision: Revision,
    ) -> Result<proto::ListHoldsResponse, tonic::Status> {
        match answer {
            Answer::Holds(Ok(holds)) => Ok(proto::ListHoldsResponse {
                revision: revision.0,
                holds: holds.into_iter().map(Into::into).collect(),
            }),
            Answer::Holds(Err(error)) => Err(refused(&error)),
            other => Err(wrong_answer("Holds", &other)),
        }
    }
}

impl proto::LongestHoldsResponse {
    pub fn from_answer(
        answer: Answer,
        revision: Revision,
    ) -> Result<proto::LongestHoldsResponse, tonic::Status> {
        match answer {
            Answer::LongestHolds { longest, overdue } => Ok(proto::LongestHoldsResponse {
                revision: revision.0,
                holds: longest.into_iter().map(Into::into).collect(),
                overdue: overdue.into_iter().map(Into::into).collect(),
            }),
            other => Err(wrong_answer("LongestHolds", &other)),
        }
    }
}

impl proto::ListClassesResponse {
    pub fn from_answer(answer: Answer) -> Result<proto::ListClassesResponse, tonic::Status> {
        match answer {
            Answer::Classes(Ok(classes)) => Ok(proto::ListClassesResponse {
                classes: classes.into_iter().map(Into::into).collect(),
            }),
            Answer::Classes(Err(error)) => Err(refused(&error)),
            other => Err(wrong_answer("Classes", &other)),
        }
    }
}

impl proto::QueryAuditResponse {
    pub fn from_answer(answer: Answer) -> Result<proto::QueryAuditResponse, tonic::Status> {
        match answer {
            Answer::Audit(page) => Ok(page.into()),
            other => Err(wrong_answer("Audit", &other)),
        }
    }
}

impl proto::ListForceReleasesResponse {
    pub fn from_answer(answer: Answer) -> Result<proto::ListForceReleasesResponse, tonic::Status> {
        match answer {
            Answer::ForceReleases(requests) => Ok(proto::ListForceReleasesResponse {
                requests: requests.into_iter().map(Into::into).collect(),
            }),
            other => Err(wrong_answer("ForceReleases", &other)),
        }
    }
}
