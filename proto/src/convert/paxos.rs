//! Paxos peer messages, and the slot values and ballots they share with the durable records
//! of an acceptor (`super::records`).
//!
//! The conversions are generic over the command type `C` and the snapshot type `S` of
//! `picket_core::paxos`, for any `C` that converts to and from `picket.v1.LogCommand` and any `S`
//! that converts to and from `picket.v1.LockSnapshot`: the node's `NodeCommand` and the lock
//! state machine's `LockSnapshot` do (`picket_core::node::NodeReplica`).
//!
//! Peer input is untrusted: [`PeerBatchIn::from_wire`] drops a malformed message (and counts it)
//! instead of failing the batch, and refuses a whole batch that is addressed wrongly.

use picket_core::node::{NodeCommand, ProposalId};
use picket_core::paxos::{Ballot, Message, NodeId, Slot, Value};
use picket_core::time::Instant;

use super::records::{
    log_entry_from_wire, log_entry_to_wire, schedule_from_wire, schedule_to_wire,
    snapshot_from_wire, snapshot_to_wire,
};
use super::{each, nested, required};
use crate::error::{ConvertError, DecodeError};
use crate::proto;
use crate::proto::peer_message as pm;

/// Command types that travel in slot values (the node's [`NodeCommand`]).
pub trait WireCommand:
    Sized + Into<proto::LogCommand> + TryFrom<proto::LogCommand, Error = ConvertError>
{
}
impl<T> WireCommand for T where
    T: Sized + Into<proto::LogCommand> + TryFrom<proto::LogCommand, Error = ConvertError>
{
}

impl From<NodeCommand> for proto::LogCommand {
    fn from(v: NodeCommand) -> Self {
        proto::LogCommand {
            origin_node_id: v.origin.0,
            boot: v.boot,
            proposal_id: v.proposal.0,
            command: Some(v.command.into()),
        }
    }
}

impl TryFrom<proto::LogCommand> for NodeCommand {
    type Error = ConvertError;
    fn try_from(v: proto::LogCommand) -> Result<Self, ConvertError> {
        Ok(NodeCommand {
            origin: NodeId(v.origin_node_id),
            boot: v.boot,
            proposal: ProposalId(v.proposal_id),
            command: nested(v.command, "command")?,
        })
    }
}

/// Snapshot types that travel in catch-up replies and snapshot records.
pub trait WireSnapshot:
    Sized + Into<proto::LockSnapshot> + TryFrom<proto::LockSnapshot, Error = ConvertError>
{
}
impl<T> WireSnapshot for T where
    T: Sized + Into<proto::LockSnapshot> + TryFrom<proto::LockSnapshot, Error = ConvertError>
{
}

impl From<Ballot> for proto::Ballot {
    fn from(v: Ballot) -> Self {
        proto::Ballot {
            round: v.round,
            node_id: v.node.0,
        }
    }
}

impl TryFrom<proto::Ballot> for Ballot {
    type Error = ConvertError;
    fn try_from(v: proto::Ballot) -> Result<Self, ConvertError> {
        Ok(Ballot::new(v.round, NodeId(v.node_id)))
    }
}

pub(super) fn ballot(value: Option<proto::Ballot>, field: &str) -> Result<Ballot, ConvertError> {
    nested(value, field)
}

/// Encodes a slot value.
pub fn value_to_wire<C: WireCommand>(value: Value<C>) -> proto::SlotValue {
    use proto::slot_value as sv;
    let kind = match value {
        Value::Noop => sv::Kind::Noop(sv::Noop {}),
        Value::Batch { stamp, commands } => sv::Kind::Batch(sv::Batch {
            stamp_ms: stamp.as_millis(),
            commands: commands.into_iter().map(Into::into).collect(),
        }),
        Value::Reconfig(m) => sv::Kind::Reconfig(super::records::membership_to_wire(&m)),
    };
    proto::SlotValue { kind: Some(kind) }
}

/// Decodes a slot value; `field` names it in errors.
pub fn value_from_wire<C: WireCommand>(
    value: Option<proto::SlotValue>,
    field: &str,
) -> Result<Value<C>, ConvertError> {
    use proto::slot_value as sv;
    let value = required(value, field)?;
    match required(value.kind, "kind").map_err(|e| e.within(field))? {
        sv::Kind::Noop(_) => Ok(Value::Noop),
        sv::Kind::Batch(batch) => Ok(Value::Batch {
            stamp: Instant::from_millis(batch.stamp_ms),
            commands: each(batch.commands, "batch.commands").map_err(|e| e.within(field))?,
        }),
        sv::Kind::Reconfig(m) => Ok(Value::Reconfig(
            super::records::membership_from_wire(m)
                .map_err(|e| e.within("reconfig").within(field))?,
        )),
    }
}

/// Encodes a peer message.
pub fn message_to_wire<C: WireCommand, S: WireSnapshot>(msg: Message<C, S>) -> proto::PeerMessage {
    let kind = match msg {
        Message::PreVote { round } => pm::Kind::PreVote(pm::PreVote { round }),
        Message::PreVoteReply { round, granted } => {
            pm::Kind::PreVoteReply(pm::PreVoteReply { round, granted })
        }
        Message::Prepare {
            ballot,
            slot_from,
            incarnation,
        } => pm::Kind::Prepare(pm::Prepare {
            ballot: Some(ballot.into()),
            slot_from: slot_from.0,
            incarnation,
        }),
        Message::Promise {
            ballot,
            slot_applied,
            slot_snapshot,
            accepted,
        } => pm::Kind::Promise(pm::Promise {
            ballot: Some(ballot.into()),
            slot_applied: slot_applied.0,
            slot_snapshot: slot_snapshot.0,
            accepted: accepted.into_iter().map(log_entry_to_wire).collect(),
        }),
        Message::Accept {
            ballot,
            slot,
            value,
            slot_chosen,
            incarnation,
        } => pm::Kind::Accept(pm::Accept {
            ballot: Some(ballot.into()),
            slot: slot.0,
            value: Some(value_to_wire(value)),
            slot_chosen: slot_chosen.0,
            incarnation,
        }),
        Message::Accepted { ballot, slot } => pm::Kind::Accepted(pm::Accepted {
            ballot: Some(ballot.into()),
            slot: slot.0,
        }),
        Message::Nack { ballot, promised } => pm::Kind::Nack(pm::Nack {
            ballot: Some(ballot.into()),
            promised: Some(promised.into()),
        }),
        Message::Heartbeat {
            ballot,
            slot_chosen,
            seq,
            incarnation,
            lease_ms,
        } => pm::Kind::Heartbeat(pm::Heartbeat {
            ballot: Some(ballot.into()),
            slot_chosen: slot_chosen.0,
            seq,
            incarnation,
            lease_ms,
        }),
        Message::HeartbeatAck {
            ballot,
            seq,
            applied,
            lease_ms,
        } => pm::Kind::HeartbeatAck(pm::HeartbeatAck {
            ballot: Some(ballot.into()),
            seq,
            applied: applied.0,
            lease_ms,
        }),
        Message::CatchupRequest { slot_from } => pm::Kind::CatchupRequest(pm::CatchupRequest {
            slot_from: slot_from.0,
        }),
        Message::CatchupReply {
            snapshot,
            schedule,
            entries,
        } => pm::Kind::CatchupReply(pm::CatchupReply {
            // With a snapshot the schedule travels inside it, as on disk; without, beside.
            schedule: match &snapshot {
                None => schedule.as_ref().map(schedule_to_wire),
                Some(_) => None,
            },
            snapshot: snapshot.map(|snap| snapshot_to_wire(snap, schedule.as_ref())),
            entries: entries
                .into_iter()
                .map(|(slot, value)| pm::ChosenEntry {
                    slot: slot.0,
                    value: Some(value_to_wire(value)),
                })
                .collect(),
        }),
        Message::RecoverQuery { nonce } => pm::Kind::RecoverQuery(pm::RecoverQuery { nonce }),
        Message::RecoverReply {
            nonce,
            incarnation,
            slot_applied,
        } => pm::Kind::RecoverReply(pm::RecoverReply {
            nonce,
            incarnation,
            slot_applied: slot_applied.0,
        }),
        Message::Fence { nonce, incarnation } => pm::Kind::Fence(pm::Fence { nonce, incarnation }),
        Message::FenceAck { nonce, promised } => pm::Kind::FenceAck(pm::FenceAck {
            nonce,
            promised: Some(promised.into()),
        }),
    };
    proto::PeerMessage { kind: Some(kind) }
}

/// Decodes a peer message. Errors name the field from the message kind, e.g.
/// `accept.value.batch.commands[2].kind`.
pub fn message_from_wire<C: WireCommand, S: WireSnapshot>(
    msg: proto::PeerMessage,
) -> Result<Message<C, S>, ConvertError> {
    let in_ = |name: &'static str| move |e: ConvertError| e.within(name);
    Ok(match required(msg.kind, "kind")? {
        pm::Kind::PreVote(m) => Message::PreVote { round: m.round },
        pm::Kind::PreVoteReply(m) => Message::PreVoteReply {
            round: m.round,
            granted: m.granted,
        },
        pm::Kind::Prepare(m) => Message::Prepare {
            ballot: ballot(m.ballot, "prepare.ballot")?,
            slot_from: Slot(m.slot_from),
            incarnation: m.incarnation,
        },
        pm::Kind::Promise(m) => Message::Promise {
            ballot: ballot(m.ballot, "promise.ballot")?,
            slot_applied: Slot(m.slot_applied),
            slot_snapshot: Slot(m.slot_snapshot),
            accepted: m
                .accepted
                .into_iter()
                .enumerate()
                .map(|(i, e)| log_entry_from_wire(e).map_err(|e| e.at("promise.accepted", i)))
                .collect::<Result<_, _>>()?,
        },
        pm::Kind::Accept(m) => Message::Accept {
            ballot: ballot(m.ballot, "accept.ballot")?,
            slot: Slot(m.slot),
            value: value_from_wire(m.value, "value").map_err(in_("accept"))?,
            slot_chosen: Slot(m.slot_chosen),
            incarnation: m.incarnation,
        },
        pm::Kind::Accepted(m) => Message::Accepted {
            ballot: ballot(m.ballot, "accepted.ballot")?,
            slot: Slot(m.slot),
        },
        pm::Kind::Nack(m) => Message::Nack {
            ballot: ballot(m.ballot, "nack.ballot")?,
            promised: ballot(m.promised, "nack.promised")?,
        },
        pm::Kind::Heartbeat(m) => Message::Heartbeat {
            ballot: ballot(m.ballot, "heartbeat.ballot")?,
            slot_chosen: Slot(m.slot_chosen),
            seq: m.seq,
            incarnation: m.incarnation,
            lease_ms: m.lease_ms,
        },
        pm::Kind::HeartbeatAck(m) => Message::HeartbeatAck {
            ballot: ballot(m.ballot, "heartbeat_ack.ballot")?,
            seq: m.seq,
            applied: Slot(m.applied),
            lease_ms: m.lease_ms,
        },
        pm::Kind::CatchupRequest(m) => Message::CatchupRequest {
            slot_from: Slot(m.slot_from),
        },
        pm::Kind::CatchupReply(m) => {
            let snapshot = m
                .snapshot
                .map(snapshot_from_wire)
                .transpose()
                .map_err(in_("catchup_reply.snapshot"))?;
            let beside = m
                .schedule
                .map(schedule_from_wire)
                .transpose()
                .map_err(in_("catchup_reply.schedule"))?;
            let (snapshot, schedule) = match snapshot {
                Some((slot, state, schedule)) => (Some((slot, state)), schedule),
                None => (None, beside),
            };
            Message::CatchupReply {
                snapshot,
                schedule,
                entries: m
                    .entries
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| {
                        value_from_wire(e.value, "value")
                            .map(|value| (Slot(e.slot), value))
                            .map_err(|e| e.at("catchup_reply.entries", i))
                    })
                    .collect::<Result<_, _>>()?,
            }
        }
        pm::Kind::RecoverQuery(m) => Message::RecoverQuery { nonce: m.nonce },
        pm::Kind::RecoverReply(m) => Message::RecoverReply {
            nonce: m.nonce,
            incarnation: m.incarnation,
            slot_applied: Slot(m.slot_applied),
        },
        pm::Kind::Fence(m) => Message::Fence {
            nonce: m.nonce,
            incarnation: m.incarnation,
        },
        pm::Kind::FenceAck(m) => Message::FenceAck {
            nonce: m.nonce,
            promised: ballot(m.promised, "fence_ack.promised")?,
        },
    })
}

/// Builds a batch of messages from `from` to `to`.
pub fn batch_to_wire<C: WireCommand, S: WireSnapshot>(
    cluster_id: &str,
    from: NodeId,
    to: NodeId,
    messages: impl IntoIterator<Item = Message<C, S>>,
) -> proto::PeerBatch {
    proto::PeerBatch {
        cluster_id: cluster_id.to_owned(),
        from_node_id: from.0,
        to_node_id: to.0,
        messages: messages.into_iter().map(message_to_wire).collect(),
    }
}

/// A received batch: the messages that decoded, and how many did not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerBatchIn<C, S> {
    pub from: NodeId,
    pub messages: Vec<Message<C, S>>,
    /// Messages dropped as malformed (to be counted by the receiver's metrics).
    pub dropped: usize,
    /// The first malformed message's error, for a trace.
    pub first_error: Option<ConvertError>,
}

impl<C: WireCommand, S: WireSnapshot> PeerBatchIn<C, S> {
    /// Accepts a batch addressed to `(cluster_id, me)`, decoding each message on its own: a
    /// malformed message is dropped and counted, never a reason to refuse the others. A batch for
    /// another cluster or node, or from node 0, is refused whole.
    pub fn from_wire(
        batch: proto::PeerBatch,
        cluster_id: &str,
        me: NodeId,
    ) -> Result<PeerBatchIn<C, S>, ConvertError> {
        if batch.cluster_id != cluster_id {
            return Err(ConvertError::new(
                "peer_batch.cluster_id",
                format!(
                    "`{}` is not this cluster (`{cluster_id}`)",
                    batch.cluster_id
                ),
            ));
        }
        if batch.to_node_id != me.0 {
            return Err(ConvertError::new(
                "peer_batch.to_node_id",
                format!("{} is not this node ({})", batch.to_node_id, me.0),
            ));
        }
        if batch.from_node_id == 0 {
            return Err(ConvertError::new(
                "peer_batch.from_node_id",
                "required (node id 0 is reserved)",
            ));
        }
        let mut out = PeerBatchIn {
            from: NodeId(batch.from_node_id),
            messages: Vec::with_capacity(batch.messages.len()),
            dropped: 0,
            first_error: None,
        };
        for (index, msg) in batch.messages.into_iter().enumerate() {
            match message_from_wire(msg) {
                Ok(msg) => out.messages.push(msg),
                Err(error) => {
                    out.dropped += 1;
                    out.first_error
                        .get_or_insert_with(|| error.at("peer_batch.messages", index));
                }
            }
        }
        Ok(out)
    }
}

pub(super) fn protobuf<P: prost::Message + Default>(
    bytes: &[u8],
    message: &'static str,
) -> Result<P, DecodeError> {
    P::decode(bytes).map_err(|source| DecodeError::Protobuf { message, source })
}

/// Reads one peer message (`picket.v1.PeerMessage`).
pub fn decode_peer_message<C: WireCommand, S: WireSnapshot>(
    bytes: &[u8],
) -> Result<Message<C, S>, DecodeError> {
    let wire = protobuf::<proto::PeerMessage>(bytes, "peer_message")?;
    Ok(message_from_wire(wire)?)
}
