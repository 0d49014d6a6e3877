//! Shared locks on the wire: records written before shared locks (no mode, one holder) still
//! decode, as exclusive; shared records round-trip; an unknown mode is a typed error.

use picket_core::locks::{Command, LockMode, RequestId, SessionId, SessionProof};
use picket_proto::convert::{decode_command, decode_lock_snapshot};
use picket_proto::proto;
use prost::Message as _;

/// An `Acquire` log record as written before shared locks: it has no `mode` field.
fn old_acquire() -> proto::Command {
    proto::Command {
        kind: Some(proto::command::Kind::Acquire(proto::command::Acquire {
            session_id: 3,
            request_id: 1,
            namespace: "orders".into(),
            key: "k".into(),
            wait: true,
            secret_hash: Vec::new(),
            principal: String::new(),
            wait_timeout_ms: None,
            mode: 0,
        })),
    }
}

#[test]
fn an_acquire_without_a_mode_is_exclusive_and_a_shared_one_round_trips() {
    let bytes = old_acquire().encode_to_vec();
    let Command::Acquire { mode, .. } = decode_command(&bytes).unwrap() else {
        panic!("not an acquire");
    };
    assert_eq!(mode, LockMode::Exclusive);
    let shared = Command::Acquire {
        session: SessionId(3),
        proof: SessionProof::legacy(),
        request: RequestId(1),
        namespace: "orders".into(),
        key: "k".into(),
        mode: LockMode::Shared,
        wait: None,
    };
    let bytes = proto::Command::from(shared.clone()).encode_to_vec();
    assert_eq!(decode_command(&bytes).unwrap(), shared);
    let mut unknown = old_acquire();
    if let Some(proto::command::Kind::Acquire(acquire)) = &mut unknown.kind {
        acquire.mode = 7;
    }
    let error = decode_command(&unknown.encode_to_vec()).unwrap_err();
    assert!(error.to_string().contains("unknown lock mode 7"), "{error}");
}

#[test]
fn a_lock_record_without_a_mode_is_one_exclusive_holder() {
    let record = proto::LockRecord {
        namespace: "orders".into(),
        key: "k".into(),
        holder: Some(proto::HoldRecord {
            session_id: 2,
            token: 5,
            granted_at_ms: 10,
            slot: None,
        }),
        waiters: vec![proto::WaiterRecord {
            session_id: 4,
            queued_at_ms: 11,
            deadline_ms: None,
            mode: 0,
        }],
        floor: 5,
        mode: 0,
        shared_holders: Vec::new(),
    };
    let snapshot = proto::LockSnapshot {
        config: Some(picket_core::locks::LockConfig::default().into()),
        locks: vec![record],
        ..proto::LockSnapshot::default()
    };
    let decoded = decode_lock_snapshot(&snapshot.encode_to_vec()).unwrap();
    let entry = &decoded.locks[0];
    assert_eq!(entry.mode, LockMode::Exclusive);
    assert_eq!(entry.holders.len(), 1);
    assert_eq!(entry.holders[0].session, SessionId(2));
    assert_eq!(entry.waiters[0].mode, LockMode::Exclusive);
    // A shared entry keeps its first holder where old readers look for the one holder.
    let mut shared = decoded.clone();
    shared.locks[0].mode = LockMode::Shared;
    let mut second = shared.locks[0].holders[0];
    second.session = SessionId(9);
    shared.locks[0].holders.push(second);
    let wire = proto::LockSnapshot::from(shared.clone());
    assert_eq!(wire.locks[0].holder.as_ref().unwrap().session_id, 2);
    assert_eq!(wire.locks[0].shared_holders.len(), 1);
    assert_eq!(decode_lock_snapshot(&wire.encode_to_vec()).unwrap(), shared);
}
