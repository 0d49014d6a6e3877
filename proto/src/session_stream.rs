//! The `Session` stream's error form: a refused request is answered with the very
//! `google.rpc.Status` that the unary call of the same name carries in `grpc-status-details-bin`
//! ([`status_to_proto`]), and the client turns it back into the same [`Status`]
//! ([`status_from_proto`]), so every rule reads the same on both paths. See "The session stream"
//! in `docs/api.md`.

use prost::Message;
use tonic::{Code, Status};
use tonic_types::pb;

use crate::status::with_standard_detail;

/// The request path of the `Session` method (named by a refusal without a rule of its own).
pub const SESSION_METHOD: &str = "/picket.v1.Lock/Session";

/// The `google.rpc.Status` of `status`: its details as they are when a Picket server built it
/// (every status from [`crate::status`]), else the standard-form detail it would get in a
/// unary call's trailer ([`with_standard_detail`]).
pub fn status_to_proto(status: &Status) -> pb::Status {
    if let Ok(rich) = pb::Status::decode(status.details()) {
        if !status.details().is_empty() && rich.code == status.code() as i32 {
            return rich;
        }
    }
    let bare = Status::new(status.code(), status.message());
    let detailed = with_standard_detail(bare, SESSION_METHOD);
    pb::Status::decode(detailed.details()).unwrap_or_else(|_| pb::Status {
        code: status.code() as i32,
        message: status.message().to_owned(),
        details: Vec::new(),
    })
}

/// The [`Status`] a unary call would have answered, from a `Session` stream's error: the same
/// code and message, and the `google.rpc.Status` as its details (so
/// [`crate::status::error_detail`] and [`crate::status::leader_hint`] read it alike). A code
/// that is not a gRPC code reads as `UNKNOWN`.
pub fn status_from_proto(error: &pb::Status) -> Status {
    let code = Code::from_i32(error.code);
    Status::with_details(code, error.message.clone(), error.encode_to_vec().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{busy_status, error_detail, leader_hint, not_leader_status, LeaderHint};

    #[test]
    fn a_picket_status_travels_byte_for_byte() {
        let hint = LeaderHint {
            node_id: Some(2),
            endpoint: Some("http://127.0.0.1:7402".into()),
        };
        let status = not_leader_status(&hint);
        let carried = status_to_proto(&status);
        assert_eq!(carried.encode_to_vec(), status.details().to_vec());
        let back = status_from_proto(&carried);
        assert_eq!(back.code(), Code::Unavailable);
        assert_eq!(back.message(), status.message());
        assert_eq!(error_detail(&back), error_detail(&status));
        assert_eq!(leader_hint(&back), Some(hint));
    }

    #[test]
    fn a_bare_status_gets_the_standard_rule() {
        let carried = status_to_proto(&Status::deadline_exceeded("too slow"));
        let back = status_from_proto(&carried);
        assert_eq!(back.code(), Code::DeadlineExceeded);
        let detail = error_detail(&back).unwrap();
        assert_eq!(detail.rule, "deadline_exceeded");
        assert!(detail.retryable);
        let busy = busy_status("3 requests in flight");
        assert_eq!(
            error_detail(&status_from_proto(&status_to_proto(&busy)))
                .unwrap()
                .rule,
            "busy"
        );
    }
}
