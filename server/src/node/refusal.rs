//! Why the node did not do what a request asked, in the node's own terms. The driver answers
//! every refused request with a [`Refusal`]; only `api/` turns one into a gRPC status
//! (`api::refusal`), so the node knows nothing of the transport it is reached by.

use picket_core::node::NodeProposeError;
use picket_core::paxos::{NodeId, ProposeError, ReconfigError};
use picket_proto::status::LeaderHint;
use thiserror::Error;

/// A request the node refused, with what the caller needs to act on it. Its text is what a
/// person reads (a log line, a health page); the gRPC status adds the rule and the hint.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Refusal {
    /// The driver's request queue is full: retry with backoff.
    #[error("the node's request queue is full")]
    QueueFull,
    /// The driver is stopping and took no request.
    #[error("the node is stopping")]
    Stopping,
    /// The driver stopped after it took the request and before it answered: the request may
    /// or may not have taken effect.
    #[error("the node stopped before answering")]
    StoppedBeforeAnswer,
    /// This replica does not lead (or stopped leading before the proposal or read was
    /// answered): where the leader is, as far as it knows.
    #[error("not the leader (leader: {})", .0.endpoint.as_deref().unwrap_or("unknown"))]
    NotLeader(LeaderHint),
    /// The node refused a proposal or a read. `leader` is the hint of a `NotLeader` inside.
    #[error("{error}")]
    Propose {
        error: NodeProposeError,
        leader: LeaderHint,
    },
    /// The replica refused a membership change. `leader` is the hint of a `NotLeader` inside.
    #[error("{error}")]
    Reconfig {
        error: ReconfigError,
        leader: LeaderHint,
    },
    /// The membership rules refused a change (`node::members`): the rule broken and why.
    #[error("{message}")]
    MemberRule { rule: &'static str, message: String },
    /// This replica stopped leading before the change it proposed was chosen: a later leader
    /// may still choose it.
    #[error(
        "this replica stopped leading before the change was chosen; a later leader may still \
         choose it: see `picketctl cluster members` before asking again"
    )]
    ChangeOutcomeUnknown,
}

impl Refusal {
    /// A proposal or read the node refused, with the leader of a `NotLeader` looked up by
    /// `endpoint_of`.
    pub fn propose(
        error: NodeProposeError,
        endpoint_of: impl FnOnce(NodeId) -> Option<String>,
    ) -> Refusal {
        let leader = match &error {
            NodeProposeError::Replica(ProposeError::NotLeader { leader_hint }) => {
                LeaderHint::for_node(*leader_hint, endpoint_of)
            }
            _ => LeaderHint::default(),
        };
        Refusal::Propose { error, leader }
    }

    /// A membership change the replica refused, with the leader of a `NotLeader` looked up by
    /// `endpoint_of`.
    pub fn reconfig(
        error: ReconfigError,
        endpoint_of: impl FnOnce(NodeId) -> Option<String>,
    ) -> Refusal {
        let leader = match &error {
            ReconfigError::NotLeader { leader_hint } => {
                LeaderHint::for_node(*leader_hint, endpoint_of)
            }
            _ => LeaderHint::default(),
        };
        Refusal::Reconfig { error, leader }
    }

    /// The rule a membership refusal names (`None` for the others).
    pub fn member_rule(&self) -> Option<&'static str> {
        match self {
            Refusal::MemberRule { rule, .. } => Some(rule),
            _ => None,
        }
    }
}
