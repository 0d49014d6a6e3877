//! The status details are a standard `google.rpc.Status`: decoded here the way the standard
//! libraries of other languages decode them (tonic-types' `StatusExt`, like grpc-go's
//! `status.FromError` and Python's `grpc_status.rpc_status.from_call`: the code and message must
//! match the gRPC status, the details are `Any`s), after a trip through the HTTP headers that
//! carry them. The bare `ErrorDetail` of older servers still reads.

use picket_core::locks::{LockError, Revision, SessionId, WatchError};
use picket_proto::proto;
use picket_proto::status::{
    busy_status, detail_status, error_detail, leader_hint, lock_error_status, not_leader_status,
    watch_error_status, with_standard_detail, LeaderHint, ERROR_DETAIL_TYPE_URL, ERROR_DOMAIN,
    ERROR_INFO_TYPE_URL,
};
use picket_proto::ConvertError;
use proptest::prelude::*;
use prost::Message;
use tonic::{Code, Status};
use tonic_types::{pb, StatusExt};

/// `status` as a receiver sees it: encoded into gRPC headers (trailers) and parsed back.
fn over_the_wire(status: Status) -> Status {
    let response: tonic::codegen::http::Response<()> = status.into_http();
    Status::from_header_map(response.headers()).expect("a grpc-status header")
}

/// Decodes the details as grpc-go does: a `google.rpc.Status` whose code and message are the
/// gRPC status's own.
fn standard_form(status: &Status) -> pb::Status {
    let rich = pb::Status::decode(status.details()).expect("details are a google.rpc.Status");
    assert_eq!(rich.code, status.code() as i32, "google.rpc.Status.code");
    assert_eq!(rich.message, status.message(), "google.rpc.Status.message");
    rich
}

fn every_kind_of_status() -> Vec<(Status, &'static str)> {
    vec![
        (
            lock_error_status(&LockError::UnknownSession {
                session: SessionId(4),
            }),
            "unknown_session",
        ),
        (
            Status::from(ConvertError::new("acquire.namespace", "bad namespace")),
            "invalid_argument",
        ),
        (
            not_leader_status(&LeaderHint {
                node_id: Some(2),
                endpoint: Some("http://127.0.0.1:7402".into()),
            }),
            "not_leader",
        ),
        (not_leader_status(&LeaderHint::default()), "not_leader"),
        (busy_status("8 waits open, at most 8"), "busy"),
        (
            watch_error_status(&WatchError::Compacted {
                requested: Revision(3),
                oldest_available: Revision(40),
            }),
            "compacted",
        ),
    ]
}

#[test]
fn every_status_decodes_with_the_standard_library() {
    for (status, rule) in every_kind_of_status() {
        let status = over_the_wire(status);
        let rich = standard_form(&status);
        let type_urls: Vec<&str> = rich.details.iter().map(|a| a.type_url.as_str()).collect();
        assert_eq!(type_urls, [ERROR_DETAIL_TYPE_URL, ERROR_INFO_TYPE_URL]);

        let standard = status
            .check_error_details()
            .expect("tonic-types reads the details");
        let info = standard.error_info().expect("an ErrorInfo");
        assert_eq!(info.reason, rule);
        assert_eq!(info.domain, ERROR_DOMAIN);

        let detail = proto::ErrorDetail::decode(rich.details[0].value.as_slice()).unwrap();
        assert_eq!(detail.rule, rule);
        assert_eq!(detail.message, status.message());
        assert_eq!(error_detail(&status), Some(detail.clone()));
        assert_eq!(
            info.metadata.get("retryable").map(String::as_str),
            Some(if detail.retryable { "true" } else { "false" })
        );
    }
}

#[test]
fn error_info_metadata_carries_the_rule_specific_fields() {
    let status = over_the_wire(not_leader_status(&LeaderHint {
        node_id: Some(2),
        endpoint: Some("https://10.0.0.2:7100/".into()),
    }));
    let info = status.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.metadata["leader_endpoint"], "https://10.0.0.2:7100/");
    assert_eq!(info.metadata["leader_address"], "10.0.0.2:7100");
    assert_eq!(info.metadata["leader_node_id"], "2");
    assert_eq!(info.metadata["retryable"], "true");
    assert_eq!(
        status.metadata().get("picket-leader-address").unwrap(),
        "10.0.0.2:7100"
    );

    let status = over_the_wire(Status::from(ConvertError::new("acquire.key", "too long")));
    let info = status.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.metadata["field"], "acquire.key");
    assert!(!info.metadata.contains_key("leader_address"));

    let status = over_the_wire(watch_error_status(&WatchError::Compacted {
        requested: Revision(3),
        oldest_available: Revision(40),
    }));
    let info = status.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.metadata["oldest_available_revision"], "40");
}

#[test]
fn the_bare_detail_of_an_older_server_still_reads() {
    let detail = proto::ErrorDetail {
        rule: "not_leader".into(),
        message: "not the leader: retry at http://10.0.0.3:7100".into(),
        leader_endpoint: "http://10.0.0.3:7100".into(),
        leader_node_id: Some(3),
        retryable: true,
        ..proto::ErrorDetail::default()
    };
    let old = over_the_wire(Status::with_details(
        Code::Unavailable,
        detail.message.clone(),
        detail.encode_to_vec().into(),
    ));
    assert_eq!(error_detail(&old), Some(detail));
    let hint = leader_hint(&old).unwrap();
    assert_eq!(hint.node_id, Some(3));
    assert_eq!(
        hint.address(),
        Some("10.0.0.3:7100"),
        "derived from the endpoint"
    );
}

#[test]
fn details_from_elsewhere_are_no_picket_detail() {
    // A standard status without an ErrorDetail (a proxy's, another service's).
    let other = Status::with_error_details(
        Code::Unavailable,
        "upstream connect error",
        tonic_types::ErrorDetails::with_error_info(
            "UPSTREAM",
            "proxy.example",
            std::collections::HashMap::new(),
        ),
    );
    assert_eq!(error_detail(&other), None);
    assert_eq!(leader_hint(&other), None);
    let garbage = Status::with_details(Code::Internal, "x", vec![0xff, 0xff].into());
    assert_eq!(error_detail(&garbage), None);
}

#[test]
fn the_grpc_library_refusals_get_a_rule() {
    let method = "/picket.v1.Lock/Acquire";
    let cases = [
        (
            Status::out_of_range(
                "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes",
            ),
            "message_too_large",
            false,
        ),
        (
            Status::internal("failed to decode Protobuf message: invalid wire type value: 7"),
            "malformed_request",
            false,
        ),
        (Status::unimplemented(""), "unknown_method", false),
        (Status::unavailable("shutting down"), "unavailable", true),
        (Status::deadline_exceeded("timeout"), "deadline_exceeded", true),
    ];
    for (status, rule, retryable) in cases {
        let code = status.code();
        let detailed = over_the_wire(with_standard_detail(status.clone(), method));
        assert_eq!(detailed.code(), code);
        if !status.message().is_empty() {
            assert_eq!(detailed.message(), status.message(), "the message stays");
        }
        standard_form(&detailed);
        let detail = error_detail(&detailed).unwrap();
        assert_eq!((detail.rule.as_str(), detail.retryable), (rule, retryable));
        let info = detailed.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, rule);
    }
    let unknown = with_standard_detail(Status::unimplemented(""), method);
    assert!(unknown.message().contains(method), "{unknown:?}");

    // A status that has details keeps them, byte for byte; OK stays OK.
    let busy = busy_status("waits");
    let kept = with_standard_detail(busy.clone(), method);
    assert_eq!(kept.details(), busy.details());
    assert!(with_standard_detail(Status::ok(""), method)
        .details()
        .is_empty());
}

proptest! {
    #[test]
    fn any_detail_survives_the_standard_form(
        rule in "[a-z_]{1,30}",
        message in "\\PC{0,60}",
        field in "[a-z._\\[\\]0-9]{0,20}",
        leader_node_id in proptest::option::of(any::<u64>()),
        oldest in proptest::option::of(any::<u64>()),
        retryable in any::<bool>(),
        code in 1i32..=16,
    ) {
        let detail = proto::ErrorDetail {
            rule,
            message,
            field,
            leader_node_id,
            oldest_available_revision: oldest,
            retryable,
            ..proto::ErrorDetail::default()
        };
        let code = Code::from_i32(code);
        let status = over_the_wire(detail_status(code, detail.clone(), None));
        prop_assert_eq!(status.code(), code);
        prop_assert_eq!(status.message(), detail.message.as_str());
        let rich = standard_form(&status);
        prop_assert_eq!(rich.details.len(), 2);
        prop_assert_eq!(error_detail(&status), Some(detail.clone()));
        let standard = status.get_error_details();
        prop_assert_eq!(standard.error_info().map(|i| i.reason.as_str()), Some(detail.rule.as_str()));
    }
}
