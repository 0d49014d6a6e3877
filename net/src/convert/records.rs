//! The durable records of an acceptor: log entries, hard state and snapshots, as the server's
//! store writes them (`picket.v1.LogEntry`, `picket.v1.HardState`, `picket.v1.SnapshotRecord`).
//!
//! Generic like [`super::paxos`] over the command type `C` and the snapshot type `S`. Records
//! are read from the replica's own disk: a record that does not decode is damage, reported with
//! the field that is wrong ([`DecodeError`]); nothing here guesses.

use std::collections::BTreeMap;

use picket_core::paxos::{AcceptedEntry, Ballot, NodeId, Slot};

use super::nested;
use super::paxos::{ballot, protobuf, value_from_wire, value_to_wire, WireCommand, WireSnapshot};
use crate::error::{ConvertError, DecodeError};
use crate::proto;

/// Encodes an accepted `(slot, ballot, value)`: a log record.
pub fn log_entry_to_wire<C: WireCommand>(entry: AcceptedEntry<C>) -> proto::LogEntry {
    let (slot, ballot, value) = entry;
    proto::LogEntry {
        slot: slot.0,
        ballot: Some(ballot.into()),
        value: Some(value_to_wire(value)),
    }
}

/// Decodes a log record.
pub fn log_entry_from_wire<C: WireCommand>(
    entry: proto::LogEntry,
) -> Result<AcceptedEntry<C>, ConvertError> {
    if entry.slot == 0 {
        return Err(ConvertError::new(
            "slot",
            "must be >= 1 (slot 0 is before the log)",
        ));
    }
    Ok((
        Slot(entry.slot),
        ballot(entry.ballot, "ballot")?,
        value_from_wire(entry.value, "value")?,
    ))
}

/// An acceptor's hard state: the durable part that is not the log or the snapshot (the
/// `promised`, `incarnations` and `lost` fields of `picket_core::paxos::Durable`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    /// The highest ballot promised. Never decreases.
    pub promised: Ballot,
    /// Incarnation per replica (own and peers'); absent = 0. Never decreases.
    pub incarnations: BTreeMap<NodeId, u64>,
    /// Acknowledged state was lost and not yet re-learned from a quorum.
    pub lost: bool,
}

impl From<HardState> for proto::HardState {
    fn from(v: HardState) -> Self {
        proto::HardState {
            promised: Some(v.promised.into()),
            lost: v.lost,
            // A BTreeMap iterates by node id: the encoding is canonical.
            incarnations: v
                .incarnations
                .into_iter()
                .map(|(node, incarnation)| proto::Incarnation {
                    node_id: node.0,
                    incarnation,
                })
                .collect(),
        }
    }
}

impl TryFrom<proto::HardState> for HardState {
    type Error = ConvertError;
    fn try_from(v: proto::HardState) -> Result<Self, ConvertError> {
        let mut incarnations = BTreeMap::new();
        for (index, entry) in v.incarnations.into_iter().enumerate() {
            if incarnations
                .insert(NodeId(entry.node_id), entry.incarnation)
                .is_some()
            {
                return Err(ConvertError::new(
                    format!("incarnations[{index}].node_id"),
                    format!("node {} is listed twice", entry.node_id),
                ));
            }
        }
        Ok(HardState {
            promised: ballot(v.promised, "promised")?,
            incarnations,
            lost: v.lost,
        })
    }
}

/// Encodes a snapshot as of `slot`.
pub fn snapshot_to_wire<S: WireSnapshot>(snapshot: (Slot, S)) -> proto::SnapshotRecord {
    proto::SnapshotRecord {
        slot: snapshot.0 .0,
        state: Some(snapshot.1.into()),
    }
}

/// Decodes a snapshot record.
pub fn snapshot_from_wire<S: WireSnapshot>(
    record: proto::SnapshotRecord,
) -> Result<(Slot, S), ConvertError> {
    Ok((Slot(record.slot), nested(record.state, "state")?))
}

/// Reads a log record (`picket.v1.LogEntry`).
pub fn decode_log_entry<C: WireCommand>(bytes: &[u8]) -> Result<AcceptedEntry<C>, DecodeError> {
    let wire = protobuf::<proto::LogEntry>(bytes, "log_entry")?;
    Ok(log_entry_from_wire(wire).map_err(|e| e.within("log_entry"))?)
}

/// Reads a hard-state record (`picket.v1.HardState`).
pub fn decode_hard_state(bytes: &[u8]) -> Result<HardState, DecodeError> {
    let wire = protobuf::<proto::HardState>(bytes, "hard_state")?;
    Ok(HardState::try_from(wire).map_err(|e| e.within("hard_state"))?)
}

/// Reads a snapshot record (`picket.v1.SnapshotRecord`).
pub fn decode_snapshot_record<S: WireSnapshot>(bytes: &[u8]) -> Result<(Slot, S), DecodeError> {
    let wire = protobuf::<proto::SnapshotRecord>(bytes, "snapshot_record")?;
    Ok(snapshot_from_wire(wire).map_err(|e| e.within("snapshot_record"))?)
}
