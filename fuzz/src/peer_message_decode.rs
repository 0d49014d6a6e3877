//! `peer_message_decode`: arbitrary bytes as a peer's `PeerMessage` or whole `PeerBatch` (the
//! first byte chooses), decoded into `picket_core::paxos::Message<NodeCommand, LockSnapshot>`.
//!
//! Checked: never a panic; a refusal names a field; a batch addressed to this node keeps every
//! message that decodes on its own and counts the others (`dropped`, `first_error`); a decoded
//! message encodes and decodes back to itself.

use picket_core::locks::LockSnapshot;
use picket_core::node::NodeCommand;
use picket_core::paxos::{Message, NodeId};
use picket_proto::convert::paxos::{
    decode_peer_message, message_from_wire, message_to_wire, PeerBatchIn,
};
use picket_proto::proto;
use prost::Message as _;

use crate::record_decode::check_error;

type Msg = Message<NodeCommand, LockSnapshot>;

/// The cluster id and node the fuzzed batches are checked against (seeds use them).
pub const CLUSTER_ID: &str = "picket";
pub const ME: NodeId = NodeId(1);

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        match decode_peer_message::<NodeCommand, LockSnapshot>(bytes) {
            Ok(msg) => round_trip(msg),
            Err(e) => check_error(&e),
        }
        return;
    }
    let Ok(batch) = proto::PeerBatch::decode(bytes) else {
        return;
    };
    let wire_messages = batch.messages.clone();
    let addressed = batch.cluster_id == CLUSTER_ID && batch.to_node_id == ME.0;
    match PeerBatchIn::<NodeCommand, LockSnapshot>::from_wire(batch, CLUSTER_ID, ME) {
        Ok(batch_in) => {
            assert!(
                addressed,
                "a batch for another cluster or node was accepted"
            );
            assert_ne!(batch_in.from, NodeId(0), "node 0 accepted as a sender");
            assert_eq!(
                batch_in.messages.len() + batch_in.dropped,
                wire_messages.len(),
                "every message is kept or counted"
            );
            assert_eq!(batch_in.first_error.is_some(), batch_in.dropped > 0);
            let kept: Vec<Msg> = wire_messages
                .into_iter()
                .filter_map(|m| message_from_wire(m).ok())
                .collect();
            assert_eq!(
                kept, batch_in.messages,
                "messages decode alone as in the batch"
            );
            for msg in batch_in.messages {
                round_trip(msg);
            }
        }
        Err(e) => assert!(!e.field.is_empty(), "refusal without a field: {e:?}"),
    }
}

fn round_trip(msg: Msg) {
    let bytes = message_to_wire(msg.clone()).encode_to_vec();
    let again: Msg = decode_peer_message(&bytes).expect("an encoded message decodes");
    assert_eq!(again, msg, "peer message round trip");
}
