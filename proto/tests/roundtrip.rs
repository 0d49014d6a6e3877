//! core -> proto -> core is the identity, directly and through bytes.

mod strategies;

use std::collections::BTreeMap;

use picket_core::locks::{
    AuditRecord, Command, Event, HoldInfo, Identity, KeyInfo, LockConfig, LockMode, LockSnapshot,
    LockStateMachine, Reply, RequestId, SecretHash, SessionId, SessionProof, Wait,
};
use picket_core::time::Instant;
use picket_proto::convert::{decode_command, decode_lock_snapshot, decode_reply};
use picket_proto::proto;
use proptest::prelude::*;
use prost::Message;

use strategies::*;

fn round_trip<C, P>(value: C) -> C
where
    C: Clone + Into<P> + TryFrom<P, Error = picket_proto::ConvertError>,
    P: Message + Default,
{
    let wire: P = value.into();
    let bytes = wire.encode_to_vec();
    let decoded = P::decode(bytes.as_slice()).expect("what we encoded decodes");
    C::try_from(decoded).expect("what we encoded converts back")
}

proptest! {
    #[test]
    fn commands(command in command()) {
        prop_assert_eq!(round_trip::<_, proto::Command>(command.clone()), command.clone());
        let bytes = proto::Command::from(command.clone()).encode_to_vec();
        prop_assert_eq!(decode_command(&bytes).unwrap(), command);
    }

    #[test]
    fn replies(reply in reply()) {
        prop_assert_eq!(round_trip::<_, proto::Reply>(reply.clone()), reply.clone());
        let bytes = proto::Reply::from(reply.clone()).encode_to_vec();
        prop_assert_eq!(decode_reply(&bytes).unwrap(), reply);
    }

    #[test]
    fn events(event in event()) {
        prop_assert_eq!(round_trip::<Event, proto::Event>(event.clone()), event);
    }

    #[test]
    fn audit_records(record in audit_record()) {
        prop_assert_eq!(round_trip::<AuditRecord, proto::AuditRecord>(record.clone()), record);
    }

    #[test]
    fn holds_and_key_infos(hold in hold_info(), info in key_info()) {
        prop_assert_eq!(round_trip::<HoldInfo, proto::HoldInfo>(hold.clone()), hold);
        prop_assert_eq!(round_trip::<KeyInfo, proto::KeyInfo>(info.clone()), info);
    }

    #[test]
    fn snapshots(snapshot in snapshot()) {
        prop_assert_eq!(
            round_trip::<LockSnapshot, proto::LockSnapshot>(snapshot.clone()),
            snapshot.clone()
        );
        let bytes = proto::LockSnapshot::from(snapshot.clone()).encode_to_vec();
        prop_assert_eq!(decode_lock_snapshot(&bytes).unwrap(), snapshot);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create,
    Acquire {
        session: usize,
        key: usize,
        wait: bool,
    },
    Release {
        session: usize,
        key: usize,
    },
    Close {
        session: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Create),
        (0..4usize, 0..3usize, any::<bool>()).prop_map(|(session, key, wait)| Op::Acquire {
            session,
            key,
            wait
        }),
        (0..4usize, 0..3usize).prop_map(|(session, key)| Op::Release { session, key }),
        (0..4usize).prop_map(|session| Op::Close { session }),
    ]
}

/// Drives a real state machine, then checks its snapshot survives bytes and restores equal.
fn run(ops: &[Op]) -> LockStateMachine {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let mut sessions: Vec<SessionId> = Vec::new();
    let mut secrets: BTreeMap<SessionId, SecretHash> = BTreeMap::new();
    let mut request = 0u64;
    for (step, op) in ops.iter().enumerate() {
        let now = Instant::from_millis(1_000 + 10 * step as u64);
        let pick = |i: usize| sessions.get(i % sessions.len().max(1)).copied();
        let proof = |session: SessionId| SessionProof::new(secrets[&session], "p");
        let mut step_hash = [0; 32];
        step_hash[..8].copy_from_slice(&(step as u64).to_le_bytes());
        let command = match *op {
            Op::Create => Command::CreateSession {
                ttl_ms: None,
                identity: Identity {
                    name: "svc".into(),
                    host: "h".into(),
                    pid: 1,
                    principal: "p".into(),
                },
                secret_hash: Some(SecretHash(step_hash)),
            },
            Op::Acquire { session, key, wait } => {
                let Some(session) = pick(session) else {
                    continue;
                };
                request += 1;
                Command::Acquire {
                    session,
                    proof: proof(session),
                    request: RequestId(request),
                    namespace: "orders".into(),
                    key: format!("k{key}"),
                    mode: LockMode::Exclusive,
                    wait: wait.then_some(Wait::UNBOUNDED),
                }
            }
            Op::Release { session, key } => {
                let Some(session) = pick(session) else {
                    continue;
                };
                let info = sm.inspect("orders", &format!("k{key}"), now).unwrap();
                let Some(holder) = info.holder.filter(|h| h.session == session) else {
                    continue;
                };
                request += 1;
                Command::Release {
                    session,
                    proof: proof(session),
                    request: RequestId(request),
                    namespace: "orders".into(),
                    key: format!("k{key}"),
                    token: holder.token,
                }
            }
            Op::Close { session } => {
                let Some(session) = pick(session) else {
                    continue;
                };
                Command::CloseSession {
                    session,
                    proof: proof(session),
                }
            }
        };
        if let Ok(Reply::SessionCreated { session, .. }) = sm.apply(now, command) {
            sessions.push(session);
            secrets.insert(session, SecretHash(step_hash));
        }
    }
    sm
}

proptest! {
    #[test]
    fn real_snapshots_restore_equal(ops in proptest::collection::vec(op(), 0..40)) {
        let sm = run(&ops);
        let bytes = proto::LockSnapshot::from(sm.snapshot()).encode_to_vec();
        let decoded = decode_lock_snapshot(&bytes).unwrap();
        prop_assert_eq!(&decoded, &sm.snapshot());
        let restored = LockStateMachine::restore(decoded).unwrap();
        prop_assert_eq!(restored, sm);
    }
}
