//! The durable records of an acceptor: log entries, hard state and snapshots, as the server's
//! store writes them (`picket.v1.LogEntry`, `picket.v1.HardState`, `picket.v1.SnapshotRecord`).
//!
//! Generic like [`super::paxos`] over the command type `C` and the snapshot type `S`. Records
//! are read from the replica's own disk: a record that does not decode is damage, reported with
//! the field that is wrong ([`DecodeError`]); nothing here guesses.

use std::collections::BTreeMap;

use picket_core::paxos::{
    AcceptedEntry, Ballot, MemberAddress, Membership, MembershipError, NodeId, Schedule, Slot,
};
use picket_core::time::Instant;

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
    /// The cluster's first membership, with its members' addresses: written by
    /// `picketd run --init`, or learned by a replica that joined or lost its state. `None` in
    /// records written before it (the config file's members stand in for it).
    pub membership_first: Option<Membership>,
}

impl From<HardState> for proto::HardState {
    fn from(v: HardState) -> Self {
        proto::HardState {
            promised: Some(v.promised.into()),
            lost: v.lost,
            membership_first: v.membership_first.as_ref().map(membership_to_wire),
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
        let membership_first = v
            .membership_first
            .map(membership_from_wire)
            .transpose()
            .map_err(|e| e.within("membership_first"))?;
        Ok(HardState {
            promised: ballot(v.promised, "promised")?,
            incarnations,
            lost: v.lost,
            membership_first,
        })
    }
}

/// Encodes a snapshot as of `slot`.
pub fn snapshot_to_wire<S: WireSnapshot>(
    snapshot: (Slot, S),
    schedule: Option<&Schedule>,
) -> proto::SnapshotRecord {
    proto::SnapshotRecord {
        slot: snapshot.0 .0,
        state: Some(snapshot.1.into()),
        schedule: schedule.map(schedule_to_wire),
    }
}

/// Encodes a membership.
pub fn membership_to_wire(m: &Membership) -> proto::Membership {
    proto::Membership {
        voters: m.voters.iter().map(|n| n.0).collect(),
        learners: m.learners.iter().map(|n| n.0).collect(),
        addresses: m
            .addresses
            .iter()
            .map(|a| proto::MemberAddress {
                node_id: a.id.0,
                peer_address: a.peer.clone(),
                client_address: a.client.clone(),
                http_address: a.http.clone(),
            })
            .collect(),
        actor: m.actor.clone(),
        reason: m.reason.clone(),
        actor_roles: m.actor_roles.clone(),
        change: m.change.clone(),
        stamp_ms: m.stamp.map(|t| t.as_millis()),
        retired: m.retired.iter().map(|n| n.0).collect(),
        cluster_version: m.cluster_version,
    }
}

/// Decodes a membership; it must be valid (`Membership::validate`).
pub fn membership_from_wire(m: proto::Membership) -> Result<Membership, ConvertError> {
    let m = Membership {
        voters: m.voters.into_iter().map(NodeId).collect(),
        learners: m.learners.into_iter().map(NodeId).collect(),
        addresses: m
            .addresses
            .into_iter()
            .map(|a| MemberAddress {
                id: NodeId(a.node_id),
                peer: a.peer_address,
                client: a.client_address,
                http: a.http_address,
            })
            .collect(),
        actor: m.actor,
        reason: m.reason,
        actor_roles: m.actor_roles,
        change: m.change,
        stamp: m.stamp_ms.map(Instant::from_millis),
        retired: m.retired.into_iter().map(NodeId).collect(),
        cluster_version: m.cluster_version,
    };
    m.validate().map_err(|e| {
        let field = match e {
            MembershipError::Address(_) => "addresses",
            MembershipError::Retired(_) => "retired",
            MembershipError::TooLong { field, .. } => field,
            _ => "voters",
        };
        ConvertError::new(field, format!("not a valid membership: {e}"))
    })?;
    Ok(m.sorted())
}

/// Encodes a membership schedule.
pub fn schedule_to_wire(schedule: &Schedule) -> proto::MembershipSchedule {
    proto::MembershipSchedule {
        entries: schedule
            .entries()
            .iter()
            .map(|(from, m)| proto::membership_schedule::Entry {
                from_slot: from.0,
                membership: Some(membership_to_wire(m)),
            })
            .collect(),
    }
}

/// Decodes a membership schedule: entries ascending by slot, never empty.
pub fn schedule_from_wire(schedule: proto::MembershipSchedule) -> Result<Schedule, ConvertError> {
    let mut entries = Vec::with_capacity(schedule.entries.len());
    for (i, e) in schedule.entries.into_iter().enumerate() {
        let m = super::required(e.membership, "membership")
            .and_then(membership_from_wire)
            .map_err(|err| err.within(&format!("entries[{i}]")))?;
        entries.push((Slot(e.from_slot), m));
    }
    Schedule::from_entries(entries)
        .ok_or_else(|| ConvertError::new("entries", "must be non-empty and ascending by from_slot"))
}

/// Decodes a snapshot record.
/// The schedule is `None` in a record written before membership changes existed.
pub fn snapshot_from_wire<S: WireSnapshot>(
    record: proto::SnapshotRecord,
) -> Result<SnapshotWithSchedule<S>, ConvertError> {
    let schedule = record
        .schedule
        .map(schedule_from_wire)
        .transpose()
        .map_err(|e| e.within("schedule"))?;
    Ok((Slot(record.slot), nested(record.state, "state")?, schedule))
}

/// A snapshot as of a slot, with the membership schedule recorded with it (if any).
pub type SnapshotWithSchedule<S> = (Slot, S, Option<Schedule>);

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
pub fn decode_snapshot_record<S: WireSnapshot>(
    bytes: &[u8],
) -> Result<SnapshotWithSchedule<S>, DecodeError> {
    let wire = protobuf::<proto::SnapshotRecord>(bytes, "snapshot_record")?;
    Ok(snapshot_from_wire(wire).map_err(|e| e.within("snapshot_record"))?)
}
