//! Every refusal of a real server carries the standard-form detail (`google.rpc.Status` in
//! `grpc-status-details-bin`, with `ErrorDetail` and `ErrorInfo`), decoded here the way other
//! languages' standard libraries do (tonic-types' `StatusExt`): the state machine's refusals, a
//! non-leader's (whose scheme-less leader address is a target to follow), and those the gRPC
//! library answers by itself (oversize, malformed protobuf, unknown method or service).
// Real processes, sockets and HTTP/2: not under the simulator.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_proto::proto;
use picket_proto::status::{ERROR_DETAIL_TYPE_URL, ERROR_DOMAIN};
use prost::Message;
use support::*;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status};
use tonic_types::StatusExt;

const NS: &str = "orders";

/// The rule as a standard decoder reads it (ErrorInfo.reason), checked against the Picket detail
/// packed beside it and against the gRPC status itself.
fn standard_rule(status: &Status) -> String {
    let rich = tonic_types::pb::Status::decode(status.details())
        .unwrap_or_else(|e| panic!("details are not a google.rpc.Status ({e}): {status:?}"));
    assert_eq!(rich.code, status.code() as i32);
    assert_eq!(rich.message, status.message());
    assert!(
        rich.details
            .iter()
            .any(|a| a.type_url == ERROR_DETAIL_TYPE_URL),
        "{rich:?}"
    );
    let info = status
        .check_error_details()
        .unwrap()
        .error_info()
        .cloned()
        .expect("an ErrorInfo");
    assert_eq!(info.domain, ERROR_DOMAIN);
    assert_eq!(
        info.reason,
        rule(status),
        "ErrorInfo.reason = ErrorDetail.rule"
    );
    info.reason
}

/// An `AcquireRequest` look-alike whose field 3 (`namespace`, a string) is a varint: not valid
/// protobuf for the method.
#[derive(Clone, PartialEq, prost::Message)]
struct WrongWireType {
    #[prost(uint64, tag = "3")]
    namespace_as_varint: u64,
}

/// A unary call of `path` with `message`, bypassing the generated client.
async fn raw_call<M: prost::Message + Default + 'static>(
    at: &str,
    path: &'static str,
    message: M,
) -> Result<proto::AcquireResponse, Status> {
    let mut grpc = tonic::client::Grpc::new(channel(at).await.unwrap());
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<M, proto::AcquireResponse>::default();
    grpc.unary(
        tonic::Request::new(message),
        PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_carries_the_standard_detail() {
    let (cluster, _, at) = dev_cluster_with_leader().await;
    let session = create_session(&at, "svc", 10_000).await;

    let status = assert_code(
        acquire(&at, session, 1, "Orders", "k", 0).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    assert_eq!(standard_rule(&status), "invalid_argument");
    let status = assert_code(
        acquire(&at, 999_999, 1, NS, "k", 0).await,
        Code::NotFound,
        "unknown_session",
    );
    assert_eq!(standard_rule(&status), "unknown_session");

    let huge = "k".repeat(picket_proto::API_MESSAGE_BYTES_MAX + 1);
    let status = assert_code(
        acquire(&at, session, 2, NS, &huge, 0).await,
        Code::OutOfRange,
        "message_too_large",
    );
    assert_eq!(standard_rule(&status), "message_too_large");

    let wrong = WrongWireType {
        namespace_as_varint: 7,
    };
    let status = raw_call(&at, "/picket.v1.Lock/Acquire", wrong.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(standard_rule(&status), "malformed_request");

    for path in ["/picket.v1.Lock/Steal", "/picket.v9.Nothing/Here"] {
        let status = raw_call(&at, path, wrong.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
        assert_eq!(standard_rule(&status), "unknown_method");
        assert!(status.message().contains(path), "{status:?}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_scheme_less_hint_is_a_target_to_follow() {
    let (cluster, leader, at) = dev_cluster_with_leader().await;
    let session = create_session(&at, "svc", 10_000).await;
    let follower = cluster.client_endpoint((leader + 1) % 3);
    let leader_address = at.trim_start_matches("http://").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = assert_code(
            acquire(&follower, session, 1, NS, "k", 0).await,
            Code::Unavailable,
            "not_leader",
        );
        if status.metadata().get("picket-leader-address").is_some() {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no hint: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(standard_rule(&status), "not_leader");
    let info = status.get_error_details().error_info().cloned().unwrap();
    assert_eq!(info.metadata["leader_address"], leader_address);
    assert_eq!(info.metadata["leader_endpoint"], at);
    assert_eq!(
        status.metadata().get("picket-leader-address").unwrap(),
        leader_address.as_str()
    );
    assert_eq!(status.metadata().get("picket-leader").unwrap(), at.as_str());
    // The address is host:port, usable as a target as it is.
    let target = format!("http://{}", info.metadata["leader_address"]);
    let granted_token = granted(&acquire(&target, session, 1, NS, "k", 0).await.unwrap());
    assert!(granted_token.is_some());
    cluster.shutdown().await;
}
