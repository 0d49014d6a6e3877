//! How errors travel: gRPC status codes, the machine-readable [`proto::ErrorDetail`], and the
//! leader hint of a non-leader's answer. The rules are written out in `docs/api.md`.
//!
//! Every status built here carries, in its details (the `grpc-status-details-bin` trailer), a
//! standard `google.rpc.Status` ([`rich_status`]): the same code and message, and as details an
//! `ErrorDetail` packed in a `google.protobuf.Any` plus a standard `google.rpc.ErrorInfo` whose
//! `reason` is the same rule, so the standard status libraries of other languages (grpc-go's
//! `status.FromError`, Python's `grpc_status.rpc_status.from_call`) decode it. The rule is a
//! stable snake_case name; clients branch on the rule, never on the message. A non-leader's
//! answer is `UNAVAILABLE`, rule `not_leader`, and also carries the ASCII metadata
//! `picket-leader: <endpoint>`, `picket-leader-address: <host:port>` and
//! `picket-leader-id: <node id>` so that any gRPC client can follow it without decoding details.

use picket_core::locks::{LockError, SessionId, WatchError};
use picket_core::node::{KeepAliveError, NodeProposeError};
use picket_core::paxos::{NodeId, ProposeError};
use prost::Message;
use tonic::{metadata::MetadataMap, Code, Status};
use tonic_types::pb;

use crate::proto;

/// Metadata key of the leader's endpoint (a URL with its scheme) in a non-leader's answer.
pub const LEADER_METADATA: &str = "picket-leader";
/// Metadata key of the leader's address without a scheme (`host:port`) in a non-leader's
/// answer: a target for gRPC libraries that refuse URLs (grpcio).
pub const LEADER_ADDRESS_METADATA: &str = "picket-leader-address";
/// Metadata key of the leader's node id in a non-leader's answer.
pub const LEADER_ID_METADATA: &str = "picket-leader-id";

/// The `google.protobuf.Any` type URL of an [`proto::ErrorDetail`] in `google.rpc.Status.details`.
pub const ERROR_DETAIL_TYPE_URL: &str = "type.googleapis.com/picket.v1.ErrorDetail";
/// The `google.protobuf.Any` type URL of the standard `google.rpc.ErrorInfo`.
pub const ERROR_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// `google.rpc.ErrorInfo.domain` of every Picket error.
pub const ERROR_DOMAIN: &str = "picket.v1";

/// The stable names of the rules an error can report (`ErrorDetail.rule`).
pub mod rule {
    pub const INVALID_ARGUMENT: &str = "invalid_argument";
    pub const NOT_LEADER: &str = "not_leader";
    pub const BUSY: &str = "busy";
    pub const COMPACTED: &str = "compacted";
    pub const NOT_READY: &str = "not_ready";
    pub const LEADER_ONLY_COMMAND: &str = "leader_only_command";
    /// A command a later cluster version added, proposed before the cluster stepped up.
    pub const CLUSTER_VERSION_TOO_LOW: &str = "cluster_version_too_low";
    pub const SESSION_NOT_YOURS: &str = "session_not_yours";
    /// A request message above the server's size limit (refused by the gRPC codec).
    pub const MESSAGE_TOO_LARGE: &str = "message_too_large";
    /// A request that is not valid protobuf for its method (refused by the gRPC codec).
    pub const MALFORMED_REQUEST: &str = "malformed_request";
    /// A method or service the server does not have.
    pub const UNKNOWN_METHOD: &str = "unknown_method";
}

/// The rule name and status code of each lock-state-machine error.
pub fn lock_error_code(error: &LockError) -> (Code, &'static str) {
    use LockError as E;
    match error {
        E::BadName(_) => (Code::InvalidArgument, "bad_name"),
        E::TextTooLong { .. } => (Code::InvalidArgument, "text_too_long"),
        E::TextEmpty { .. } => (Code::InvalidArgument, "text_empty"),
        E::BadClass { .. } => (Code::InvalidArgument, "bad_class"),
        E::SessionTtlOutOfBounds { .. } => (Code::InvalidArgument, "session_ttl_out_of_bounds"),
        E::UnknownSession { .. } => (Code::NotFound, "unknown_session"),
        E::SessionNotYours { .. } => (Code::PermissionDenied, rule::SESSION_NOT_YOURS),
        E::SessionSecretInUse { .. } => (Code::AlreadyExists, "session_secret_in_use"),
        E::RequestIdReused { .. } => (Code::FailedPrecondition, "request_id_reused"),
        E::UnknownClass { .. } => (Code::NotFound, "unknown_class"),
        E::UnknownForceRelease { .. } => (Code::NotFound, "unknown_force_release"),
        E::TooManySessions { .. } => (Code::ResourceExhausted, "too_many_sessions"),
        E::TooManyHolds { .. } => (Code::ResourceExhausted, "too_many_holds"),
        E::TooManyWaiters { .. } => (Code::ResourceExhausted, "too_many_waiters"),
        E::TooManyClasses { .. } => (Code::ResourceExhausted, "too_many_classes"),
        E::TooManyForceReleases { .. } => (Code::ResourceExhausted, "too_many_force_releases"),
        E::MissingRole { .. } => (Code::PermissionDenied, "missing_role"),
        E::ApproverIsRequester { .. } => (Code::PermissionDenied, "approver_is_requester"),
        E::AdvisoryStatementRequired { .. } => {
            (Code::FailedPrecondition, "advisory_statement_required")
        }
        E::ClusterVersionNotAbove { .. } => (Code::FailedPrecondition, "cluster_version_not_above"),
        E::IncidentCommanderRequired { .. } => {
            (Code::PermissionDenied, "incident_commander_required")
        }
        E::SessionTtlAboveClassMax { .. } => {
            (Code::FailedPrecondition, "session_ttl_above_class_max")
        }
        E::RequestTooOld { .. } => (Code::FailedPrecondition, "request_too_old"),
        E::NotHolder { .. } => (Code::FailedPrecondition, "not_holder"),
        E::ModeChangeNotSupported { .. } => (Code::FailedPrecondition, "mode_change_not_supported"),
        E::HolderAmbiguous { .. } => (Code::FailedPrecondition, "holder_ambiguous"),
        E::NotASemaphore { .. } => (Code::FailedPrecondition, "not_a_semaphore"),
        E::KeyIsSemaphore { .. } => (Code::FailedPrecondition, "key_is_semaphore"),
        E::PermitsOutOfBounds { .. } => (Code::InvalidArgument, "permits_out_of_bounds"),
        E::KeyHeldAsLock { .. } => (Code::FailedPrecondition, "key_held_as_lock"),
        E::SemaphoreInUse { .. } => (Code::FailedPrecondition, "semaphore_in_use"),
        E::WaitTimeoutOutOfBounds { .. } => (Code::InvalidArgument, "wait_timeout_out_of_bounds"),
        E::WaitExpired { .. } => (Code::DeadlineExceeded, "wait_expired"),
        E::WaitCancelled { .. } => (Code::Aborted, "wait_cancelled"),
        E::WaitEnded { .. } => (Code::FailedPrecondition, "wait_ended"),
        E::WrongToken { .. } => (Code::FailedPrecondition, "wrong_token"),
        E::NotHeld { .. } => (Code::FailedPrecondition, "not_held"),
        E::FencedNotAcknowledged { .. } => (Code::FailedPrecondition, "fenced_not_acknowledged"),
        E::TokenMismatch { .. } => (Code::Aborted, "token_mismatch"),
        E::HolderChanged { .. } => (Code::Aborted, "holder_changed"),
        E::ClassKindChanged { .. } => (Code::Aborted, "class_kind_changed"),
        E::ForceReleasePending { .. } => (Code::AlreadyExists, "force_release_pending"),
    }
}

impl From<&LockError> for proto::ErrorDetail {
    fn from(error: &LockError) -> proto::ErrorDetail {
        let (_, rule) = lock_error_code(error);
        let force_release_id = match error {
            LockError::ForceReleasePending { id, .. } | LockError::ClassKindChanged { id, .. } => {
                Some(id.0)
            }
            _ => None,
        };
        // A class rule is about one field of `PutClass`'s class: named, as for a malformed
        // request, so that a form shows the rule next to that field.
        let field = match error {
            LockError::BadClass { field, .. } => format!("put_class.class.{field}"),
            _ => String::new(),
        };
        proto::ErrorDetail {
            rule: rule.to_owned(),
            message: error.to_string(),
            field,
            force_release_id,
            ..proto::ErrorDetail::default()
        }
    }
}

/// The status answering a command the state machine refused.
pub fn lock_error_status(error: &LockError) -> Status {
    let (code, _) = lock_error_code(error);
    detail_status(code, error.into(), None)
}

/// The status answering a watch that cannot resume: `OUT_OF_RANGE`, rule `compacted`.
pub fn watch_error_status(error: &WatchError) -> Status {
    let WatchError::Compacted {
        oldest_available, ..
    } = error;
    let detail = proto::ErrorDetail {
        rule: rule::COMPACTED.to_owned(),
        message: error.to_string(),
        oldest_available_revision: Some(oldest_available.0),
        ..proto::ErrorDetail::default()
    };
    detail_status(Code::OutOfRange, detail, None)
}

/// Where the leader is, as far as the answering replica knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderHint {
    pub node_id: Option<u64>,
    /// The leader's client endpoint, e.g. `https://10.0.0.2:7100`.
    pub endpoint: Option<String>,
}

impl LeaderHint {
    /// The leader's `host:port` without the scheme, e.g. `10.0.0.2:7100` (a grpcio target).
    pub fn address(&self) -> Option<&str> {
        self.endpoint.as_deref().map(address_of)
    }

    /// The hint for the leader the node reported (`None`: unknown), with its client endpoint
    /// looked up in the cluster's membership by `endpoint_of`.
    pub fn for_node(
        leader: Option<NodeId>,
        endpoint_of: impl FnOnce(NodeId) -> Option<String>,
    ) -> LeaderHint {
        match leader {
            Some(node) => LeaderHint {
                node_id: Some(node.0),
                endpoint: endpoint_of(node),
            },
            None => LeaderHint::default(),
        }
    }
}

/// The answer to a proposal or read the node refused: `NotLeader` -> [`not_leader_status`],
/// `Busy` -> [`busy_status`].
pub fn propose_error_status(
    error: &ProposeError,
    endpoint_of: impl FnOnce(NodeId) -> Option<String>,
) -> Status {
    match error {
        ProposeError::NotLeader { leader_hint } => {
            not_leader_status(&LeaderHint::for_node(*leader_hint, endpoint_of))
        }
        ProposeError::Busy { pending, max } => {
            busy_status(&format!("{pending} proposals pending, at most {max}"))
        }
    }
}

/// The answer to a proposal the node refused: the replica's refusals as in
/// [`propose_error_status`]; `LeaderOnlyCommand` (a client cannot propose `ExpireSessions`,
/// which no API request converts to) is `INVALID_ARGUMENT`, rule `leader_only_command`.
pub fn node_propose_error_status(
    error: &NodeProposeError,
    endpoint_of: impl FnOnce(NodeId) -> Option<String>,
) -> Status {
    match error {
        NodeProposeError::Replica(error) => propose_error_status(error, endpoint_of),
        NodeProposeError::LeaderOnlyCommand => {
            let detail = proto::ErrorDetail {
                rule: rule::LEADER_ONLY_COMMAND.to_owned(),
                message: error.to_string(),
                ..proto::ErrorDetail::default()
            };
            detail_status(Code::InvalidArgument, detail, None)
        }
        NodeProposeError::TooManyWaits { .. } => busy_status(&error.to_string()),
        NodeProposeError::ClusterVersionTooLow { .. } => {
            let detail = proto::ErrorDetail {
                rule: rule::CLUSTER_VERSION_TOO_LOW.to_owned(),
                message: error.to_string(),
                ..proto::ErrorDetail::default()
            };
            detail_status(Code::FailedPrecondition, detail, None)
        }
        NodeProposeError::NotYours { session, why } => {
            lock_error_status(&LockError::SessionNotYours {
                session: *session,
                why: why.clone(),
            })
        }
    }
}

/// The answer to one keepalive on the `KeepAlive` stream.
///
/// A lost session (unknown, or expiring because it missed its deadline) is an ordinary answer
/// with `lost = true`, so the stream goes on serving the process's other sessions; so is a
/// keepalive that does not prove it owns the session (`error` with rule `session_not_yours`,
/// see also [`keepalive_refused`]). A node that is not the leader ends the stream with
/// [`not_leader_status`]; a new leader still catching up ends it with `UNAVAILABLE`, rule
/// `not_ready`, retryable (the client reconnects and resends).
pub fn keepalive_answer(
    session: SessionId,
    seq: u64,
    result: Result<u64, KeepAliveError>,
    endpoint_of: impl FnOnce(NodeId) -> Option<String>,
) -> Result<proto::KeepAliveResponse, Status> {
    let answer = |ttl_ms, lost| proto::KeepAliveResponse {
        session_id: session.0,
        seq,
        ttl_ms,
        lost,
        error: None,
        lost_holds: Vec::new(),
    };
    match result {
        Ok(ttl_ms) => Ok(answer(ttl_ms, false)),
        Err(KeepAliveError::UnknownSession { .. } | KeepAliveError::Expiring { .. }) => {
            Ok(answer(0, true))
        }
        Err(error @ KeepAliveError::NotYours { .. }) => {
            let detail = proto::ErrorDetail {
                rule: rule::SESSION_NOT_YOURS.to_owned(),
                message: error.to_string(),
                ..proto::ErrorDetail::default()
            };
            Ok(keepalive_refused(session.0, seq, detail))
        }
        Err(KeepAliveError::NotLeader { leader_hint }) => Err(not_leader_status(
            &LeaderHint::for_node(leader_hint, endpoint_of),
        )),
        Err(error @ KeepAliveError::NotReady) => {
            let detail = proto::ErrorDetail {
                rule: rule::NOT_READY.to_owned(),
                message: error.to_string(),
                retryable: true,
                ..proto::ErrorDetail::default()
            };
            Err(detail_status(Code::Unavailable, detail, None))
        }
    }
}

/// The answer to one keepalive entry refused on its own (malformed, or not the session's
/// owner): `error` says why; the stream and its other sessions go on.
pub fn keepalive_refused(
    session_id: u64,
    seq: u64,
    error: proto::ErrorDetail,
) -> proto::KeepAliveResponse {
    proto::KeepAliveResponse {
        session_id,
        seq,
        ttl_ms: 0,
        lost: false,
        error: Some(error),
        lost_holds: Vec::new(),
    }
}

/// The answer of a replica that is not the leader: `UNAVAILABLE`, rule `not_leader`, retryable,
/// with the hint in the details and in the `picket-leader` / `picket-leader-id` metadata.
pub fn not_leader_status(hint: &LeaderHint) -> Status {
    let message = match (&hint.endpoint, hint.node_id) {
        (Some(endpoint), _) => format!("not the leader: retry at {endpoint}"),
        (None, Some(node)) => format!("not the leader: the leader is node {node}"),
        (None, None) => "not the leader, and no leader is known: retry later".to_owned(),
    };
    let detail = proto::ErrorDetail {
        rule: rule::NOT_LEADER.to_owned(),
        message,
        leader_endpoint: hint.endpoint.clone().unwrap_or_default(),
        leader_address: hint.address().unwrap_or_default().to_owned(),
        leader_node_id: hint.node_id,
        retryable: true,
        ..proto::ErrorDetail::default()
    };
    detail_status(Code::Unavailable, detail, Some(hint))
}

/// The answer to a request refused because a bound was hit (pending proposals, waiters of a
/// long-poll, ...): `RESOURCE_EXHAUSTED`, rule `busy`, retryable.
pub fn busy_status(what: &str) -> Status {
    let detail = proto::ErrorDetail {
        rule: rule::BUSY.to_owned(),
        message: format!("busy: {what}; retry later with the same request id"),
        retryable: true,
        ..proto::ErrorDetail::default()
    };
    detail_status(Code::ResourceExhausted, detail, None)
}

/// `status` with the standard-form detail if it has no details, else `status` unchanged: for
/// the statuses the gRPC library answers by itself (a message above the size limit, bytes that
/// are not the method's protobuf, an unknown service or method), so that every refusal carries a
/// rule. The code, message (if any) and metadata stay; `method` (the request path) names the
/// method an `UNIMPLEMENTED` without a message did not find.
///
/// Rules: `message_too_large`, `malformed_request`, `unknown_method`, else the code's name in
/// snake_case (`deadline_exceeded`, `unavailable`, ...). Retryable: `UNAVAILABLE`,
/// `DEADLINE_EXCEEDED`, `CANCELLED`, `UNKNOWN` (trouble on the way, not a verdict on the request).
pub fn with_standard_detail(status: Status, method: &str) -> Status {
    if status.code() == Code::Ok || !status.details().is_empty() {
        return status;
    }
    let code = status.code();
    let message = status.message();
    let rule = match code {
        Code::OutOfRange | Code::ResourceExhausted
            if message.contains("message length too large") =>
        {
            rule::MESSAGE_TOO_LARGE
        }
        Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message.starts_with("protocol error") =>
        {
            rule::MALFORMED_REQUEST
        }
        Code::Unimplemented => rule::UNKNOWN_METHOD,
        code => code_name(code),
    };
    let message = if message.is_empty() && code == Code::Unimplemented {
        format!("unknown method `{method}`: this server has no such service or method")
    } else if message.is_empty() {
        format!("{} ({method})", code.description())
    } else {
        message.to_owned()
    };
    let detail = proto::ErrorDetail {
        rule: rule.to_owned(),
        message,
        retryable: matches!(
            code,
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
        ),
        ..proto::ErrorDetail::default()
    };
    let mut detailed = detail_status(code, detail, None);
    *detailed.metadata_mut() = status.metadata().clone();
    detailed
}

/// The snake_case name of a gRPC code, as the rule of a status that has no more specific one.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The `host:port` of an endpoint URL: `http://10.0.0.2:7100/` -> `10.0.0.2:7100`. An endpoint
/// without a scheme is its own address.
fn address_of(endpoint: &str) -> &str {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    rest.trim_end_matches('/')
}

/// A status with `detail` in its details in the standard form ([`rich_status`]), and the leader
/// hint in metadata, if any. The status message is `detail.message`.
pub fn detail_status(code: Code, detail: proto::ErrorDetail, hint: Option<&LeaderHint>) -> Status {
    let mut metadata = MetadataMap::new();
    if let Some(hint) = hint {
        // A hint that is not valid ASCII metadata is still in the details.
        if let Some(value) = hint.endpoint.as_deref().and_then(|e| e.parse().ok()) {
            metadata.insert(LEADER_METADATA, value);
        }
        if let Some(value) = hint.address().and_then(|a| a.parse().ok()) {
            metadata.insert(LEADER_ADDRESS_METADATA, value);
        }
        if let Some(node) = hint.node_id {
            if let Ok(value) = node.to_string().parse() {
                metadata.insert(LEADER_ID_METADATA, value);
            }
        }
    }
    let rich = rich_status(code, &detail);
    Status::with_details_and_metadata(code, detail.message, rich.encode_to_vec().into(), metadata)
}

/// The standard `google.rpc.Status` of an error: `code`, the detail's message (which must be the
/// gRPC status message: standard decoders check both), and as details the `ErrorDetail` packed
/// in an `Any` and the [`error_info`] of the same rule.
pub fn rich_status(code: Code, detail: &proto::ErrorDetail) -> pb::Status {
    let info = error_info(detail);
    pb::Status {
        code: code as i32,
        message: detail.message.clone(),
        details: vec![
            prost_types::Any {
                type_url: ERROR_DETAIL_TYPE_URL.to_owned(),
                value: detail.encode_to_vec(),
            },
            prost_types::Any {
                type_url: ERROR_INFO_TYPE_URL.to_owned(),
                value: info.encode_to_vec(),
            },
        ],
    }
}

/// The standard `google.rpc.ErrorInfo` of an error: `reason` is the rule exactly as in
/// `ErrorDetail.rule` (snake_case, one spelling everywhere, rather than ErrorInfo's usual
/// UPPER_SNAKE_CASE), `domain` is [`ERROR_DOMAIN`], and `metadata` holds the detail's fields that
/// are set, under their `ErrorDetail` names (`retryable` always, as `true`/`false`).
pub fn error_info(detail: &proto::ErrorDetail) -> pb::ErrorInfo {
    let mut metadata = std::collections::HashMap::new();
    let mut put = |key: &str, value: String| {
        if !value.is_empty() {
            metadata.insert(key.to_owned(), value);
        }
    };
    put("field", detail.field.clone());
    put("leader_endpoint", detail.leader_endpoint.clone());
    put("leader_address", detail.leader_address.clone());
    put(
        "leader_node_id",
        detail
            .leader_node_id
            .map(|n| n.to_string())
            .unwrap_or_default(),
    );
    put(
        "oldest_available_revision",
        detail
            .oldest_available_revision
            .map(|r| r.to_string())
            .unwrap_or_default(),
    );
    put("retryable", detail.retryable.to_string());
    pb::ErrorInfo {
        reason: detail.rule.clone(),
        domain: ERROR_DOMAIN.to_owned(),
        metadata,
    }
}

/// The `ErrorDetail` of a status built by a Picket server (`None` for any other status): from
/// the standard form, or from the bare `ErrorDetail` that servers before it sent (so a client
/// keeps working against a mixed-version cluster during an upgrade). The two cannot be mistaken
/// for each other: field 1 is a varint (`code`) in one and a string (`rule`) in the other, and
/// protobuf decoding checks wire types.
pub fn error_detail(status: &Status) -> Option<proto::ErrorDetail> {
    let details = status.details();
    if details.is_empty() {
        return None;
    }
    if let Ok(rich) = pb::Status::decode(details) {
        if let Some(any) = rich
            .details
            .iter()
            .find(|any| any.type_url == ERROR_DETAIL_TYPE_URL)
        {
            return proto::ErrorDetail::decode(any.value.as_slice()).ok();
        }
    }
    proto::ErrorDetail::decode(details).ok()
}
/// The leader hint of a `not_leader` answer, from its details or else its metadata.
pub fn leader_hint(status: &Status) -> Option<LeaderHint> {
    if let Some(detail) = error_detail(status) {
        if detail.rule == rule::NOT_LEADER {
            let endpoint = Some(detail.leader_endpoint).filter(|e| !e.is_empty());
            return Some(LeaderHint {
                node_id: detail.leader_node_id,
                endpoint,
            });
        }
        return None;
    }
    let metadata = status.metadata();
    let endpoint = metadata
        .get(LEADER_METADATA)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let node_id = metadata
        .get(LEADER_ID_METADATA)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (endpoint.is_some() || node_id.is_some()).then_some(LeaderHint { node_id, endpoint })
}
