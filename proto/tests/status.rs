//! The error mapping: every LockError has a code and a rule; a non-leader's answer carries the
//! leader hint in details and metadata; a compacted watch says where to resume.

use picket_core::locks::{
    ForceReleaseId, LockError, NameError, Revision, SessionId, Token, WatchError,
};
use picket_proto::status::{
    busy_status, error_detail, leader_hint, lock_error_code, lock_error_status, not_leader_status,
    watch_error_status, LeaderHint, LEADER_ADDRESS_METADATA, LEADER_ID_METADATA, LEADER_METADATA,
};
use tonic::Code;

#[test]
fn lock_errors_map_to_codes_and_rules() {
    let cases = [
        (
            LockError::BadName(NameError::KeyEmpty),
            Code::InvalidArgument,
            "bad_name",
        ),
        (
            LockError::UnknownSession {
                session: SessionId(4),
            },
            Code::NotFound,
            "unknown_session",
        ),
        (
            LockError::TooManyWaiters {
                namespace: "orders".into(),
                key: "k".into(),
                max: 3,
            },
            Code::ResourceExhausted,
            "too_many_waiters",
        ),
        (
            LockError::MissingRole {
                principal: "bob".into(),
                action: "approve",
                needed: "on-call",
            },
            Code::PermissionDenied,
            "missing_role",
        ),
        (
            LockError::ApproverIsRequester {
                id: ForceReleaseId(9),
                principal: "alice".into(),
            },
            Code::PermissionDenied,
            "approver_is_requester",
        ),
        (
            LockError::WrongToken {
                namespace: "orders".into(),
                key: "k".into(),
                given: Token(3),
                current: Token(5),
            },
            Code::FailedPrecondition,
            "wrong_token",
        ),
        (
            LockError::TokenMismatch {
                namespace: "orders".into(),
                key: "k".into(),
                expected: Token(3),
                current: Token(5),
            },
            Code::Aborted,
            "token_mismatch",
        ),
    ];
    for (error, code, rule) in cases {
        assert_eq!(lock_error_code(&error), (code, rule));
        let status = lock_error_status(&error);
        assert_eq!(status.code(), code);
        assert_eq!(status.message(), error.to_string());
        let detail = error_detail(&status).unwrap();
        assert_eq!(detail.rule, rule);
        assert!(!detail.retryable);
        assert_eq!(leader_hint(&status), None, "only not_leader carries a hint");
    }
}

#[test]
fn a_class_rule_names_the_class_field_it_is_about() {
    let error = LockError::BadClass {
        class: "ledger".into(),
        field: "session_ttl_ms_max",
        rule: "max session TTL 900000 ms is outside the cluster's bounds [1000, 300000] ms".into(),
    };
    let detail = error_detail(&lock_error_status(&error)).unwrap();
    assert_eq!(detail.rule, "bad_class");
    assert_eq!(detail.field, "put_class.class.session_ttl_ms_max");
    assert_eq!(detail.message, error.to_string());
}

#[test]
fn not_leader_carries_the_hint_in_details_and_metadata() {
    let hint = LeaderHint {
        node_id: Some(2),
        endpoint: Some("https://10.0.0.2:7100".into()),
    };
    let status = not_leader_status(&hint);
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.metadata().get(LEADER_METADATA).unwrap(),
        "https://10.0.0.2:7100"
    );
    assert_eq!(
        status.metadata().get(LEADER_ADDRESS_METADATA).unwrap(),
        "10.0.0.2:7100",
        "the scheme-less address is a grpcio target"
    );
    assert_eq!(status.metadata().get(LEADER_ID_METADATA).unwrap(), "2");
    let detail = error_detail(&status).unwrap();
    assert_eq!(detail.rule, "not_leader");
    assert_eq!(detail.leader_endpoint, "https://10.0.0.2:7100");
    assert_eq!(detail.leader_address, "10.0.0.2:7100");
    assert!(detail.retryable);
    assert_eq!(leader_hint(&status), Some(hint.clone()));
    assert_eq!(hint.address(), Some("10.0.0.2:7100"));

    // A client that reads only metadata (no details) still finds the leader.
    let bare = tonic::Status::with_metadata(
        Code::Unavailable,
        "not the leader",
        status.metadata().clone(),
    );
    assert_eq!(
        leader_hint(&bare).unwrap().endpoint.as_deref(),
        Some("https://10.0.0.2:7100")
    );

    let unknown = not_leader_status(&LeaderHint::default());
    assert!(unknown.metadata().get(LEADER_METADATA).is_none());
    assert!(unknown.metadata().get(LEADER_ADDRESS_METADATA).is_none());
    assert_eq!(error_detail(&unknown).unwrap().leader_address, "");
    assert_eq!(leader_hint(&unknown), Some(LeaderHint::default()));
    assert!(unknown.message().contains("no leader is known"));
}

#[test]
fn compacted_watch_says_where_to_resume() {
    let status = watch_error_status(&WatchError::Compacted {
        requested: Revision(3),
        oldest_available: Revision(40),
    });
    assert_eq!(status.code(), Code::OutOfRange);
    let detail = error_detail(&status).unwrap();
    assert_eq!(detail.rule, "compacted");
    assert_eq!(detail.oldest_available_revision, Some(40));
}

#[test]
fn busy_is_retryable_resource_exhausted() {
    let status = busy_status("10000 proposals pending");
    assert_eq!(status.code(), Code::ResourceExhausted);
    let detail = error_detail(&status).unwrap();
    assert_eq!(detail.rule, "busy");
    assert!(detail.retryable);
    assert!(status.message().contains("same request id"));
}

#[test]
fn node_refusals_map_to_statuses() {
    use picket_core::node::{KeepAliveError, NodeProposeError};
    use picket_core::paxos::{NodeId, ProposeError};
    use picket_proto::status::{keepalive_answer, node_propose_error_status, propose_error_status};

    let endpoint_of = |node: NodeId| Some(format!("http://10.0.0.{}:7100", node.0));
    let status = propose_error_status(
        &ProposeError::NotLeader {
            leader_hint: Some(NodeId(2)),
        },
        endpoint_of,
    );
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.metadata().get(LEADER_METADATA).unwrap(),
        "http://10.0.0.2:7100"
    );
    let status = propose_error_status(&ProposeError::NotLeader { leader_hint: None }, endpoint_of);
    assert_eq!(leader_hint(&status), Some(LeaderHint::default()));
    let status = propose_error_status(&ProposeError::Busy { pending: 9, max: 9 }, endpoint_of);
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(error_detail(&status).unwrap().rule, "busy");

    let status = node_propose_error_status(&NodeProposeError::LeaderOnlyCommand, endpoint_of);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(error_detail(&status).unwrap().rule, "leader_only_command");
    let status = node_propose_error_status(
        &NodeProposeError::Replica(ProposeError::NotLeader {
            leader_hint: Some(NodeId(1)),
        }),
        endpoint_of,
    );
    assert_eq!(leader_hint(&status).unwrap().node_id, Some(1));

    let session = SessionId(5);
    let ok = keepalive_answer(session, 7, Ok(10_000), endpoint_of).unwrap();
    assert_eq!(
        (ok.session_id, ok.seq, ok.ttl_ms, ok.lost),
        (5, 7, 10_000, false)
    );
    for lost in [
        KeepAliveError::UnknownSession { session },
        KeepAliveError::Expiring { session },
    ] {
        let answer = keepalive_answer(session, 8, Err(lost), endpoint_of).unwrap();
        assert!(
            answer.lost,
            "a lost session is an answer, not the end of the stream"
        );
        assert_eq!(answer.seq, 8);
    }
    let status = keepalive_answer(
        session,
        9,
        Err(KeepAliveError::NotLeader {
            leader_hint: Some(NodeId(3)),
        }),
        endpoint_of,
    )
    .unwrap_err();
    assert_eq!(leader_hint(&status).unwrap().node_id, Some(3));
    let status =
        keepalive_answer(session, 9, Err(KeepAliveError::NotReady), endpoint_of).unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    let detail = error_detail(&status).unwrap();
    assert_eq!(detail.rule, "not_ready");
    assert!(detail.retryable);
}
