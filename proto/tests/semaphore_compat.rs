//! Semaphores on the wire: records written before semaphores (no slot, no declarations, no
//! mode bound to a request id, Granted events without a mode) still decode as they meant then;
//! a state with semaphores round-trips through the snapshot encoding.

use picket_core::locks::{
    AcquireReply, Actor, Command, EventKind, Identity, LockConfig, LockMode, LockStateMachine,
    PermitSlot, Remembered, Reply, RequestId, Role, SessionProof,
};
use picket_core::time::Instant;
use picket_proto::convert::decode_lock_snapshot;
use picket_proto::proto;
use prost::Message as _;

#[test]
fn a_state_with_a_semaphore_round_trips_through_the_snapshot_encoding() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let at = Instant::from_millis(1_000);
    let set = Command::SetSemaphore {
        actor: Actor::new("carol", &[Role::ClassAdmin]),
        namespace: "ns".into(),
        key: "pool".into(),
        permits: 2,
        reason: "two workers".into(),
    };
    assert_eq!(
        sm.apply(at, set),
        Ok(Reply::SemaphoreSet {
            previous_permits: 0
        })
    );
    let create = Command::CreateSession {
        ttl_ms: None,
        identity: Identity::default(),
        secret_hash: None,
    };
    let Ok(Reply::SessionCreated { session, .. }) = sm.apply(at, create) else {
        panic!("no session");
    };
    let acquire = Command::Acquire {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(1),
        namespace: "ns".into(),
        key: "pool".into(),
        mode: LockMode::Permit,
        wait: None,
    };
    assert!(matches!(
        sm.apply(at, acquire),
        Ok(Reply::Acquire(AcquireReply::Granted {
            permit: Some(PermitSlot(0)),
            ..
        }))
    ));
    let bytes = proto::LockSnapshot::from(sm.snapshot()).encode_to_vec();
    let decoded = decode_lock_snapshot(&bytes).unwrap();
    assert_eq!(decoded, sm.snapshot());
    let restored = LockStateMachine::restore(decoded).unwrap();
    assert_eq!(restored.semaphore_permits("ns", "pool"), Some(2));
    // A snapshot written before semaphores (no declarations, holds without slots) has none.
    let mut old = proto::LockSnapshot::from(sm.snapshot());
    old.semaphores.clear();
    old.locks.clear();
    let decoded = decode_lock_snapshot(&old.encode_to_vec()).unwrap();
    assert!(decoded.semaphores.is_empty());
    let restored = LockStateMachine::restore(decoded).unwrap();
    assert_eq!(restored.semaphore_permits("ns", "pool"), None);
}

#[test]
fn old_records_read_as_before_semaphores() {
    // A hold record without a slot: a lock's hold.
    let hold = proto::HoldRecord {
        session_id: 2,
        token: 5,
        granted_at_ms: 10,
        slot: None,
    };
    let decoded = picket_core::locks::HoldSnapshot::try_from(hold).unwrap();
    assert_eq!(decoded.permit, None);
    // A remembered reply bound to its key but not its mode matches a retry in any mode.
    let remembered = proto::RememberedReply {
        request_id: 4,
        kind: Some(proto::remembered_reply::Kind::Acquire(
            proto::AcquireReply {
                kind: Some(proto::acquire_reply::Kind::Granted(
                    proto::acquire_reply::Granted {
                        token: 9,
                        slot: None,
                    },
                )),
            },
        )),
        target: Some(proto::RequestTarget {
            namespace: "ns".into(),
            key: "k".into(),
            mode: None,
        }),
    };
    let decoded = Remembered::try_from(remembered).unwrap();
    let target = decoded.target.as_ref().unwrap();
    assert_eq!(target.mode, None);
    for mode in [LockMode::Exclusive, LockMode::Shared, LockMode::Permit] {
        assert!(decoded.matches("Acquire", "ns", "k", None, Some(mode)));
    }
    // A Granted event recorded before the mode was kept reads as exclusive, without a slot.
    let granted = proto::event::Kind::Granted(proto::event::Granted {
        session_id: 3,
        token: 9,
        mode: 0,
        slot: None,
    });
    assert!(matches!(
        EventKind::try_from(granted),
        Ok(EventKind::Granted {
            mode: LockMode::Exclusive,
            permit: None,
            ..
        })
    ));
}
