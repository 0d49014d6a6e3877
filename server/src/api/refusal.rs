//! The one place a node's [`Refusal`] becomes a gRPC status: the code, the rule the standard
//! details name, the leader hint of a `not_leader`, whether a client may retry.

use picket_core::paxos::ReconfigError;
use picket_proto::proto;
use picket_proto::status::{
    busy_status, detail_status, node_propose_error_status, not_leader_status,
};
use tonic::{Code, Status};

use crate::node::refusal::Refusal;

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Status {
        match refusal {
            Refusal::QueueFull => busy_status(&refusal.to_string()),
            Refusal::Stopping | Refusal::StoppedBeforeAnswer | Refusal::ChangeOutcomeUnknown => {
                Status::unavailable(refusal.to_string())
            }
            Refusal::NotLeader(hint) => not_leader_status(&hint),
            Refusal::Propose { error, leader } => {
                node_propose_error_status(&error, |_| leader.endpoint)
            }
            Refusal::Reconfig { error, leader } => reconfig_status(&error, leader),
            Refusal::MemberRule { rule, message } => {
                refused(Code::FailedPrecondition, rule, message)
            }
        }
    }
}

/// The status of a change the replica refused.
fn reconfig_status(error: &ReconfigError, leader: picket_proto::status::LeaderHint) -> Status {
    let message = error.to_string();
    match error {
        ReconfigError::NotLeader { .. } => not_leader_status(&leader),
        ReconfigError::Invalid(_) => refused(Code::InvalidArgument, "bad_membership", message),
        // Not retried by clients: the operator asks again once the change before is in
        // effect (`picketctl cluster members` shows it).
        ReconfigError::NotChosen(_) | ReconfigError::NotInEffect { .. } => refused(
            Code::FailedPrecondition,
            "membership_change_in_progress",
            message,
        ),
        ReconfigError::Unchanged(_) => refused(Code::FailedPrecondition, "unchanged", message),
        ReconfigError::Unreachable { .. } => {
            refused(Code::FailedPrecondition, "quorum_unreachable", message)
        }
    }
}

fn refused(code: Code, rule: &str, message: String) -> Status {
    let detail = proto::ErrorDetail {
        rule: rule.to_owned(),
        message,
        ..proto::ErrorDetail::default()
    };
    detail_status(code, detail, None)
}

#[cfg(test)]
mod tests {
    use picket_core::node::NodeProposeError;
    use picket_core::paxos::{NodeId, ProposeError};
    use picket_proto::status::{error_detail, leader_hint, LeaderHint};

    use super::*;

    fn rule_of(status: &Status) -> String {
        error_detail(status).expect("a detail").rule
    }

    #[test]
    fn every_reconfig_refusal_names_its_rule() {
        let cases = [
            (
                ReconfigError::NotChosen("voters n1".into()),
                "membership_change_in_progress",
            ),
            (
                ReconfigError::Unreachable {
                    reachable: 1,
                    quorum: 2,
                },
                "quorum_unreachable",
            ),
            (ReconfigError::Unchanged("voters n1".into()), "unchanged"),
            (
                ReconfigError::NotLeader {
                    leader_hint: Some(NodeId(2)),
                },
                "not_leader",
            ),
        ];
        for (error, rule) in cases {
            let refusal = Refusal::reconfig(error.clone(), |_| Some("http://10.0.0.2:7001".into()));
            let status = Status::from(refusal);
            assert_eq!(rule_of(&status), rule, "{error}");
        }
    }

    #[test]
    fn a_not_leader_carries_the_leader_it_names() {
        let error = NodeProposeError::Replica(ProposeError::NotLeader {
            leader_hint: Some(NodeId(3)),
        });
        let status = Status::from(Refusal::propose(error, |n| {
            assert_eq!(n, NodeId(3));
            Some("http://10.0.0.3:7001".into())
        }));
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(rule_of(&status), "not_leader");
        assert_eq!(
            leader_hint(&status),
            Some(LeaderHint {
                node_id: Some(3),
                endpoint: Some("http://10.0.0.3:7001".into()),
            })
        );
    }

    #[test]
    fn the_driver_s_own_refusals_are_retryable_or_say_why_not() {
        let busy = Status::from(Refusal::QueueFull);
        assert_eq!(busy.code(), Code::ResourceExhausted);
        assert_eq!(rule_of(&busy), "busy");
        assert_eq!(Status::from(Refusal::Stopping).code(), Code::Unavailable);
        let unknown = Status::from(Refusal::ChangeOutcomeUnknown);
        assert_eq!(unknown.code(), Code::Unavailable);
        assert!(unknown.message().contains("picketctl cluster members"));
        let rule = Status::from(Refusal::MemberRule {
            rule: "last_voter",
            message: "n1 is the last voter".into(),
        });
        assert_eq!(rule.code(), Code::FailedPrecondition);
        assert_eq!(rule_of(&rule), "last_voter");
    }
}
