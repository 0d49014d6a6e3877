//! The seed corpus, generated here so that it is reviewable and reproducible:
//! `UPDATE_CORPUS=1 cargo test --test corpus` (in `fuzz/`) rewrites `corpus/<target>/seed-*`,
//! and `cargo test` checks the committed seeds are the ones generated here.
//!
//! Decoder targets get valid encodings of every message kind (mutating a valid message reaches
//! far deeper than random bytes); the schedule targets, which read their input through
//! `arbitrary`, get a few pseudo-random inputs of several lengths.

use picket_core::locks::{
    Actor, ClassSpec, Command, Identity, LockConfig, LockMode, LockStateMachine, RequestId, Role,
    SessionId, SessionProof, Token, Wait,
};
use picket_core::node::{NodeCommand, ProposalId};
use picket_core::paxos::{
    Ballot, MemberAddress, Membership, Message, NodeId, Schedule, Slot, Value,
};
use picket_core::time::Instant;
use picket_proto::convert::paxos::{batch_to_wire, message_to_wire};
use picket_proto::convert::records::{log_entry_to_wire, snapshot_to_wire, HardState};
use picket_proto::proto;
use picket_storage::format::{
    encode_blob, encode_record, encode_segment_header, HARD_STATE_MAGIC, SNAPSHOT_MAGIC,
};
use prost::Message as _;

/// `(file name, bytes)` seeds of `target`.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let list = match target {
        "record_decode" => record_decode(),
        "peer_message_decode" => peer_message_decode(),
        "api_request_decode" => api_request_decode(),
        "log_recovery" => [random_inputs(target), log_recovery_v2()].concat(),
        "core_steps" | "lock_commands" => random_inputs(target),
        other => panic!("no seeds for unknown target {other}"),
    };
    list.into_iter()
        .enumerate()
        .map(|(i, bytes)| (format!("seed-{i:02}"), bytes))
        .collect()
}

fn with_selector(selector: u8, mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.insert(0, selector);
    bytes
}

/// Deterministic bytes (xorshift64*), so seeds do not change between runs.
fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Inputs that reach segment format version 2: the first pseudo-random inputs (a fixed search,
/// so the seeds are reproducible) that build a raw version 2 segment, and that flip one byte of
/// the synced records of a real log's last segment.
fn log_recovery_v2() -> Vec<Vec<u8>> {
    use crate::log_recovery::reaches;
    let mut raw_v2 = Vec::new();
    let mut flips = Vec::new();
    for k in 0..20_000u64 {
        if raw_v2.len() >= 2 && flips.len() >= 2 {
            break;
        }
        // Bytes reduced modulo a small bound give small offsets, counts and choices.
        let modulus = [256u16, 64, 16][(k % 3) as usize];
        let input: Vec<u8> = pseudo_random(7_000 + k, 64 + (k % 4) as usize * 256)
            .into_iter()
            .map(|b| (u16::from(b) % modulus) as u8)
            .collect();
        let reached = reaches(&input);
        if reached.raw_v2 && raw_v2.len() < 2 {
            raw_v2.push(input);
        } else if reached.flip_in_synced && flips.len() < 2 {
            flips.push(input);
        }
    }
    assert!(
        raw_v2.len() == 2 && flips.len() == 2,
        "the seed search found {} raw version 2 and {} synced-flip inputs",
        raw_v2.len(),
        flips.len()
    );
    [raw_v2, flips].concat()
}

fn random_inputs(target: &str) -> Vec<Vec<u8>> {
    let salt = target.len() as u64;
    [8usize, 64, 256, 1024, 4096]
        .iter()
        .enumerate()
        .flat_map(|(i, len)| {
            [
                pseudo_random(salt * 100 + i as u64, *len),
                // Small bytes: short lengths, small indexes, low choices.
                pseudo_random(salt * 100 + 50 + i as u64, *len)
                    .into_iter()
                    .map(|b| b % 8)
                    .collect(),
            ]
        })
        .collect()
}

fn identity() -> Identity {
    Identity {
        name: "svc".into(),
        host: "host-1".into(),
        pid: 42,
        principal: "alice".into(),
    }
}

/// A lock state machine with sessions, holds, waiters, a class, a force release and history.
pub fn busy_machine() -> LockStateMachine {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let t = |ms| Instant::from_millis(ms);
    let admin = Actor::new("root", &[Role::ClassAdmin, Role::OnCall]);
    let commands = vec![
        Command::CreateSession {
            secret_hash: None,
            ttl_ms: None,
            identity: identity(),
        },
        Command::CreateSession {
            secret_hash: None,
            ttl_ms: Some(30_000),
            identity: identity(),
        },
        Command::PutClass {
            actor: admin.clone(),
            namespace: "orders".into(),
            class: ClassSpec {
                name: "billing".into(),
                prefix: "invoice/".into(),
                fenced: true,
                session_ttl_ms_default: 10_000,
                session_ttl_ms_max: 60_000,
                hold_ms_max_expected: 5_000,
                owner: "team".into(),
                runbook_url: "https://runbook".into(),
                description: "invoices".into(),
            },
        },
        Command::Acquire {
            session: SessionId(1),
            proof: SessionProof::legacy(),
            request: RequestId(1),
            namespace: "orders".into(),
            key: "invoice/1".into(),
            mode: LockMode::Exclusive,
            wait: None,
        },
        Command::Acquire {
            session: SessionId(2),
            proof: SessionProof::legacy(),
            request: RequestId(1),
            namespace: "orders".into(),
            key: "invoice/1".into(),
            mode: LockMode::Exclusive,
            wait: Some(Wait::UNBOUNDED),
        },
        Command::Acquire {
            session: SessionId(2),
            proof: SessionProof::legacy(),
            request: RequestId(2),
            namespace: "jobs".into(),
            key: "nightly".into(),
            mode: LockMode::Exclusive,
            wait: None,
        },
        Command::RequestForceRelease {
            actor: Actor::new("bob", &[Role::OnCall]),
            namespace: "jobs".into(),
            key: "nightly".into(),
            expected_token: Token(6),
            holder: None,
            reason: "stuck job".into(),
            revoke_session: false,
            checklist: Default::default(),
        },
    ];
    for (i, c) in commands.into_iter().enumerate() {
        let _ = sm.apply(t(1_000 + i as u64), c);
    }
    sm
}

fn node_command(command: Command) -> NodeCommand {
    NodeCommand {
        origin: NodeId(2),
        boot: 3,
        proposal: ProposalId(4),
        command,
    }
}

fn sample_commands() -> Vec<Command> {
    vec![
        Command::CreateSession {
            secret_hash: None,
            ttl_ms: Some(5_000),
            identity: identity(),
        },
        Command::Acquire {
            session: SessionId(1),
            proof: SessionProof::legacy(),
            request: RequestId(1),
            namespace: "orders".into(),
            key: "invoice/1".into(),
            mode: LockMode::Exclusive,
            wait: Some(Wait::UNBOUNDED),
        },
        Command::Release {
            session: SessionId(1),
            proof: SessionProof::legacy(),
            request: RequestId(2),
            namespace: "orders".into(),
            key: "invoice/1".into(),
            token: Token(3),
        },
        Command::ExpireSessions {
            sessions: vec![SessionId(1), SessionId(2)],
        },
        Command::ApproveForceRelease {
            actor: Actor::new("carol", &[Role::IncidentCommander]),
            id: picket_core::locks::ForceReleaseId(7),
            acknowledged_fenced: true,
        },
    ]
}

fn batch_value() -> Value<NodeCommand> {
    Value::Batch {
        stamp: Instant::from_millis(1_234),
        commands: sample_commands().into_iter().map(node_command).collect(),
    }
}

fn record_decode() -> Vec<Vec<u8>> {
    let ballot = Ballot {
        round: 3,
        node: NodeId(2),
    };
    let sm = busy_machine();
    let mut out = vec![
        with_selector(
            0,
            log_entry_to_wire((Slot(5), ballot, batch_value())).encode_to_vec(),
        ),
        with_selector(
            0,
            log_entry_to_wire::<NodeCommand>((Slot(1), ballot, Value::Noop)).encode_to_vec(),
        ),
        with_selector(
            1,
            proto::HardState::from(HardState {
                promised: ballot,
                incarnations: [(NodeId(1), 2), (NodeId(3), 1)].into_iter().collect(),
                lost: true,
                membership_first: None,
            })
            .encode_to_vec(),
        ),
        with_selector(
            2,
            snapshot_to_wire((Slot(9), sm.snapshot()), None).encode_to_vec(),
        ),
        with_selector(
            4,
            proto::Reply::from(picket_core::locks::Reply::Released {
                token: Token(4),
                next: Some((SessionId(2), Token(9))),
            })
            .encode_to_vec(),
        ),
        with_selector(5, proto::LockSnapshot::from(sm.snapshot()).encode_to_vec()),
        with_selector(6, encode_blob(HARD_STATE_MAGIC, 0, b"hard state")),
        with_selector(6, encode_blob(SNAPSHOT_MAGIC, 12, b"snapshot payload")),
        with_selector(7, encode_segment_header(17).to_vec()),
    ];
    for c in sample_commands() {
        out.push(with_selector(3, proto::Command::from(c).encode_to_vec()));
    }
    let mut frames = vec![64u8];
    for payload in [&b""[..], b"a", b"record two", &[0u8; 40]] {
        encode_record(&mut frames, payload);
    }
    out.push(with_selector(8, frames.clone()));
    frames.extend_from_slice(&[0; 24]);
    frames[10] ^= 0x40;
    out.push(with_selector(9, frames));
    out
}

type Msg = Message<NodeCommand, picket_core::locks::LockSnapshot>;

fn peer_messages() -> Vec<Msg> {
    let b = Ballot {
        round: 7,
        node: NodeId(2),
    };
    vec![
        Message::PreVote { round: 8 },
        Message::Prepare {
            ballot: b,
            slot_from: Slot(3),
            incarnation: 1,
        },
        Message::Promise {
            ballot: b,
            slot_applied: Slot(2),
            slot_snapshot: Slot(1),
            accepted: vec![(Slot(3), b, batch_value()), (Slot(4), b, Value::Noop)],
        },
        Message::Accept {
            ballot: b,
            slot: Slot(5),
            value: batch_value(),
            slot_chosen: Slot(4),
            incarnation: 0,
        },
        Message::Accepted {
            ballot: b,
            slot: Slot(5),
        },
        Message::Nack {
            ballot: b,
            promised: Ballot {
                round: 9,
                node: NodeId(3),
            },
        },
        Message::Heartbeat {
            ballot: b,
            slot_chosen: Slot(5),
            seq: 11,
            incarnation: 0,
            lease_ms: 300,
        },
        Message::CatchupReply {
            snapshot: Some((Slot(2), busy_machine().snapshot())),
            schedule: Some(Schedule::new(Membership {
                voters: vec![NodeId(1), NodeId(2), NodeId(3)],
                learners: vec![NodeId(4)],
                addresses: vec![MemberAddress {
                    id: NodeId(4),
                    peer: "10.0.0.4:7000".into(),
                    client: "10.0.0.4:7001".into(),
                    http: String::new(),
                }],
                actor: "alice".into(),
                reason: "replace n3's machine".into(),
                ..Membership::default()
            })),
            entries: vec![(Slot(3), batch_value())],
        },
        Message::FenceAck {
            nonce: 5,
            promised: b,
        },
    ]
}

fn peer_message_decode() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = peer_messages()
        .into_iter()
        .map(|m| with_selector(0, message_to_wire(m).encode_to_vec()))
        .collect();
    let batch = batch_to_wire(
        crate::peer_message_decode::CLUSTER_ID,
        NodeId(2),
        crate::peer_message_decode::ME,
        peer_messages().into_iter().take(5),
    );
    out.push(with_selector(1, batch.encode_to_vec()));
    out
}

fn api_request_decode() -> Vec<Vec<u8>> {
    let identity = proto::ClientIdentity {
        name: "svc".into(),
        host: "host-1".into(),
        pid: 42,
    };
    let class = proto::ClassSpec {
        name: "billing".into(),
        prefix: "invoice/".into(),
        fenced: true,
        session_ttl_ms_default: 10_000,
        session_ttl_ms_max: 60_000,
        hold_ms_max_expected: 0,
        owner: "team".into(),
        runbook_url: String::new(),
        description: "d".into(),
    };
    vec![
        with_selector(
            0,
            proto::CreateSessionRequest {
                identity: Some(identity),
                ttl_ms: Some(10_000),
                session_secret: crate::api_request_decode::SESSION_SECRET.to_vec(),
            }
            .encode_to_vec(),
        ),
        with_selector(
            1,
            proto::CloseSessionRequest {
                session_id: 1,
                session_secret: crate::api_request_decode::SESSION_SECRET.to_vec(),
            }
            .encode_to_vec(),
        ),
        with_selector(
            2,
            proto::AcquireRequest {
                session_id: 1,
                request_id: 1,
                namespace: "orders".into(),
                key: "invoice/42".into(),
                wait_ms: 1_000,
                session_secret: crate::api_request_decode::SESSION_SECRET.to_vec(),
                wait_timeout_ms: 5_000,
                mode: 0,
            }
            .encode_to_vec(),
        ),
        with_selector(
            3,
            proto::ReleaseRequest {
                session_id: 1,
                request_id: 2,
                namespace: "orders".into(),
                key: "invoice/42".into(),
                token: 2,
                session_secret: crate::api_request_decode::SESSION_SECRET.to_vec(),
            }
            .encode_to_vec(),
        ),
        with_selector(
            4,
            proto::PutClassRequest {
                namespace: "orders".into(),
                class: Some(class),
            }
            .encode_to_vec(),
        ),
        with_selector(
            5,
            proto::RemoveClassRequest {
                namespace: "orders".into(),
                prefix: "invoice/".into(),
            }
            .encode_to_vec(),
        ),
        with_selector(
            6,
            proto::RequestForceReleaseRequest {
                namespace: "orders".into(),
                key: "invoice/42".into(),
                expected_token: 2,
                reason: "stuck".into(),
                revoke_session: true,
                holder_session_id: 0,
                checklist: None,
            }
            .encode_to_vec(),
        ),
        with_selector(
            7,
            proto::ApproveForceReleaseRequest {
                force_release_id: 3,
                acknowledged_fenced: true,
            }
            .encode_to_vec(),
        ),
        with_selector(
            8,
            proto::DenyForceReleaseRequest {
                force_release_id: 3,
                reason: "no".into(),
            }
            .encode_to_vec(),
        ),
        with_selector(
            9,
            proto::KeepAliveRequest {
                session_id: 1,
                seq: 5,
                session_secret: crate::api_request_decode::SESSION_SECRET.to_vec(),
            }
            .encode_to_vec(),
        ),
        with_selector(
            10,
            proto::WatchRequest {
                namespace: Some("orders".into()),
                key_prefix: "invoice/".into(),
                from_revision: 1,
                from_now: false,
            }
            .encode_to_vec(),
        ),
        with_selector(
            11,
            proto::InspectRequest {
                namespace: "orders".into(),
                key: "invoice/42".into(),
                allow_stale: false,
            }
            .encode_to_vec(),
        ),
        with_selector(
            12,
            proto::ListHoldsRequest {
                namespace: "orders".into(),
                limit: 10,
                allow_stale: true,
            }
            .encode_to_vec(),
        ),
        with_selector(
            13,
            proto::ListClassesRequest {
                namespace: "orders".into(),
                allow_stale: false,
            }
            .encode_to_vec(),
        ),
        with_selector(
            14,
            proto::QueryAuditRequest {
                namespace: Some("orders".into()),
                key: None,
                revision_min: 1,
                revision_max: None,
                limit: 10,
                allow_stale: false,
            }
            .encode_to_vec(),
        ),
    ]
}
