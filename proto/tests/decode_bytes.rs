//! Arbitrary bytes never panic a decoder: they decode or answer a typed error. (These become
//! fuzz targets.)

use picket_core::locks::{Command, LockMode, LockSnapshot, Wait};
use picket_core::node::{NodeCommand, ProposalId};
use picket_core::paxos::NodeId;
use picket_proto::convert::paxos::{decode_peer_message, PeerBatchIn};
use picket_proto::convert::records::{decode_hard_state, decode_log_entry, decode_snapshot_record};
use picket_proto::convert::{decode_command, decode_lock_snapshot, decode_reply};
use picket_proto::proto;
use proptest::collection::vec;
use proptest::prelude::*;
use prost::Message as _;

fn all_decoders(bytes: &[u8]) {
    let _ = decode_command(bytes);
    let _ = decode_reply(bytes);
    let _ = decode_lock_snapshot(bytes);
    let _ = decode_log_entry::<NodeCommand>(bytes);
    let _ = decode_hard_state(bytes);
    let _ = decode_snapshot_record::<LockSnapshot>(bytes);
    let _ = decode_peer_message::<NodeCommand, LockSnapshot>(bytes);
    if let Ok(batch) = proto::PeerBatch::decode(bytes) {
        let _ = PeerBatchIn::<NodeCommand, LockSnapshot>::from_wire(batch, "", NodeId(0));
    }
    let _ = proto::AcquireRequest::decode(bytes).map(|r| r.into_command("p"));
    let _ = proto::ReleaseRequest::decode(bytes).map(|r| r.into_command("p"));
    let _ = proto::CloseSessionRequest::decode(bytes).map(|r| r.into_command("p"));
    let _ = proto::CreateSessionRequest::decode(bytes).map(|r| r.into_command("p"));
    let _ = proto::KeyInfo::decode(bytes).map(picket_core::locks::KeyInfo::try_from);
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        all_decoders(&bytes);
    }

    /// Valid encodings with bytes flipped reach deeper into the converters.
    #[test]
    fn mutated_valid_records_never_panic(
        session in any::<u64>(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let command = Command::Acquire {
            session: picket_core::locks::SessionId(session),
            proof: picket_core::locks::SessionProof::new(picket_core::locks::SecretHash([3; 32]), "p"),
            request: picket_core::locks::RequestId(1),
            namespace: "orders".into(),
            key: "k".into(),
            mode: LockMode::Exclusive,
            wait: Some(Wait::UNBOUNDED),
        };
        let mut entry = proto::LogEntry {
            slot: 1,
            ballot: Some(proto::Ballot { round: 2, node_id: 1 }),
            value: Some(proto::SlotValue {
                kind: Some(proto::slot_value::Kind::Batch(proto::slot_value::Batch {
                    stamp_ms: 9,
                    commands: vec![proto::LogCommand::from(NodeCommand {
                        origin: NodeId(1),
                        boot: 2,
                        proposal: ProposalId(3),
                        command,
                    })],
                })),
            }),
        }
        .encode_to_vec();
        for (index, byte) in flips {
            let i = index.index(entry.len());
            entry[i] ^= byte;
        }
        all_decoders(&entry);
        prop_assert!(!entry.is_empty());
    }
}
