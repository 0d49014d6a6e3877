//! Paxos messages and acceptor records: core -> proto -> bytes -> core is the identity; a batch
//! drops (and counts) malformed messages without refusing the others.

mod strategies;

use picket_core::locks::LockSnapshot;
use picket_core::node::NodeCommand;
use picket_core::paxos::{NodeId, Slot};
use picket_proto::convert::paxos::{
    batch_to_wire, decode_peer_message, message_to_wire, PeerBatchIn,
};
use picket_proto::convert::records::{
    decode_hard_state, decode_log_entry, decode_snapshot_record, log_entry_to_wire,
    snapshot_to_wire, HardState,
};
use picket_proto::proto;
use proptest::prelude::*;
use prost::Message as _;

use strategies::paxos::{ballot, entry, message, Msg};

proptest! {
    #[test]
    fn peer_messages(msg in message()) {
        let bytes = message_to_wire(msg.clone()).encode_to_vec();
        let decoded: Msg = decode_peer_message(&bytes).unwrap();
        prop_assert_eq!(decoded, msg);
    }

    #[test]
    fn log_entries(entry in entry()) {
        let bytes = log_entry_to_wire(entry.clone()).encode_to_vec();
        let decoded = decode_log_entry::<NodeCommand>(&bytes).unwrap();
        prop_assert_eq!(decoded, entry);
    }

    #[test]
    fn hard_states(
        promised in ballot(),
        lost in any::<bool>(),
        incarnations in proptest::collection::btree_map(any::<u64>(), any::<u64>(), 0..5),
        membership_first in proptest::option::of(strategies::paxos::membership()),
    ) {
        let incarnations = incarnations.into_iter().map(|(n, i)| (NodeId(n), i)).collect();
        let state = HardState { promised, incarnations, lost, membership_first };
        let bytes = proto::HardState::from(state.clone()).encode_to_vec();
        prop_assert_eq!(decode_hard_state(&bytes).unwrap(), state);
    }

    #[test]
    fn snapshot_records(
        slot in any::<u64>(),
        snapshot in strategies::snapshot(),
        schedule in proptest::option::of(strategies::paxos::schedule()),
    ) {
        let bytes = snapshot_to_wire((Slot(slot), snapshot.clone()), schedule.as_ref()).encode_to_vec();
        let decoded = decode_snapshot_record::<LockSnapshot>(&bytes).unwrap();
        prop_assert_eq!(decoded, (Slot(slot), snapshot, schedule));
    }

    #[test]
    fn batches_keep_order(msgs in proptest::collection::vec(message(), 0..5)) {
        let wire = batch_to_wire("c1", NodeId(1), NodeId(2), msgs.clone());
        let bytes = wire.encode_to_vec();
        let batch = proto::PeerBatch::decode(bytes.as_slice()).unwrap();
        let got: PeerBatchIn<NodeCommand, LockSnapshot> =
            PeerBatchIn::from_wire(batch, "c1", NodeId(2)).unwrap();
        prop_assert_eq!(got.from, NodeId(1));
        prop_assert_eq!(got.dropped, 0);
        prop_assert_eq!(got.messages, msgs);
    }
}

#[test]
fn malformed_message_is_dropped_and_counted_not_the_batch() {
    let good: Msg = picket_core::paxos::Message::PreVote { round: 3 };
    let mut wire = batch_to_wire("c1", NodeId(1), NodeId(2), [good.clone(), good.clone()]);
    // An Accept without its ballot, between the two good messages.
    wire.messages.insert(
        1,
        proto::PeerMessage {
            kind: Some(proto::peer_message::Kind::Accept(
                proto::peer_message::Accept::default(),
            )),
        },
    );
    let got: PeerBatchIn<NodeCommand, LockSnapshot> =
        PeerBatchIn::from_wire(wire, "c1", NodeId(2)).unwrap();
    assert_eq!(got.messages, vec![good.clone(), good]);
    assert_eq!(got.dropped, 1);
    let error = got.first_error.unwrap();
    assert_eq!(error.field, "peer_batch.messages[1].accept.ballot");
    assert_eq!(error.rule, "required");
}

#[test]
fn misaddressed_batches_are_refused_whole() {
    let msgs: Vec<Msg> = vec![picket_core::paxos::Message::PreVote { round: 1 }];
    let wire = batch_to_wire("c1", NodeId(1), NodeId(2), msgs.clone());
    let other_cluster =
        PeerBatchIn::<NodeCommand, LockSnapshot>::from_wire(wire.clone(), "c2", NodeId(2));
    assert_eq!(other_cluster.unwrap_err().field, "peer_batch.cluster_id");
    let other_node = PeerBatchIn::<NodeCommand, LockSnapshot>::from_wire(wire, "c1", NodeId(3));
    assert_eq!(other_node.unwrap_err().field, "peer_batch.to_node_id");
    let from_zero = batch_to_wire("c1", NodeId(0), NodeId(2), msgs);
    let refused = PeerBatchIn::<NodeCommand, LockSnapshot>::from_wire(from_zero, "c1", NodeId(2));
    assert_eq!(refused.unwrap_err().field, "peer_batch.from_node_id");
}

#[test]
fn log_entry_at_slot_zero_and_nested_command_errors_are_named() {
    let mut entry = log_entry_to_wire::<NodeCommand>((
        Slot(1),
        picket_core::paxos::Ballot::ZERO,
        picket_core::paxos::Value::Noop,
    ));
    entry.slot = 0;
    let error = decode_log_entry::<NodeCommand>(&entry.encode_to_vec()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "log_entry.slot: must be >= 1 (slot 0 is before the log)"
    );

    let entry = proto::LogEntry {
        slot: 4,
        ballot: Some(proto::Ballot {
            round: 1,
            node_id: 1,
        }),
        value: Some(proto::SlotValue {
            kind: Some(proto::slot_value::Kind::Batch(proto::slot_value::Batch {
                stamp_ms: 5,
                commands: vec![proto::LogCommand {
                    origin_node_id: 1,
                    boot: 1,
                    proposal_id: 1,
                    command: Some(proto::Command::default()),
                }],
            })),
        }),
    };
    let error = decode_log_entry::<NodeCommand>(&entry.encode_to_vec()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "log_entry.value.batch.commands[0].command.kind: required"
    );
}

#[test]
fn hard_state_listing_a_node_twice_is_refused() {
    let wire = proto::HardState {
        promised: Some(proto::Ballot {
            round: 1,
            node_id: 1,
        }),
        lost: false,
        incarnations: vec![
            proto::Incarnation {
                node_id: 2,
                incarnation: 1,
            },
            proto::Incarnation {
                node_id: 2,
                incarnation: 3,
            },
        ],
        membership_first: None,
    };
    let error = decode_hard_state(&wire.encode_to_vec()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "hard_state.incarnations[1].node_id: node 2 is listed twice"
    );
    let mut missing = wire;
    missing.promised = None;
    missing.incarnations.clear();
    let error = decode_hard_state(&missing.encode_to_vec()).unwrap_err();
    assert_eq!(error.to_string(), "hard_state.promised: required");
}

/// A hard state written before the first membership was recorded (fields 1-3 only) reads with
/// none: the config file's members stand in for it.
#[test]
fn a_hard_state_from_before_the_first_membership_reads_without_it() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct OldHardState {
        #[prost(message, optional, tag = "1")]
        promised: Option<proto::Ballot>,
        #[prost(bool, tag = "2")]
        lost: bool,
        #[prost(message, repeated, tag = "3")]
        incarnations: Vec<proto::Incarnation>,
    }
    let old = OldHardState {
        promised: Some(proto::Ballot {
            round: 4,
            node_id: 2,
        }),
        lost: false,
        incarnations: vec![proto::Incarnation {
            node_id: 1,
            incarnation: 2,
        }],
    };
    let state = decode_hard_state(&old.encode_to_vec()).unwrap();
    assert_eq!(state.membership_first, None);
    assert_eq!(state.incarnations[&NodeId(1)], 2);
}
