//! Model-based property test of the lock state machine: random command sequences are applied to
//! the state machine and to a plain, obviously-correct model of sessions (owned by a secret and a
//! principal; wrong secrets, other principals, retried creations and reused request ids are
//! generated), exclusive and shared holds, semaphores (declared, changed and removed; permits in
//! slots with slot floors), FIFO queues with modes and waits that end (deadlines, `ExpireWaits`, `CancelWait`)
//! (`picket_core::testkit::lock_model`, shared with the `lock_commands` fuzzer); both must give the same answers, and the invariants must hold after every
//! command. Also, after every command: an error changed nothing but the revision, and the state
//! survives a snapshot round trip.

use std::collections::BTreeMap;

use picket_core::locks::{LockSnapshot, LockStateMachine, Revision};
use picket_core::testkit::lock_model::{
    assert_same_state, config, LockKey, Model, Op, OpClient, KEYS, MODES, NAMESPACES, PERMITS,
    PRINCIPALS, SECRETS, TTLS, WAIT_TIMEOUTS,
};
use picket_core::time::Instant;
use proptest::prelude::*;

/// A session slot: mostly one of the first few sessions (so that several of them meet on a key:
/// shared holders, a writer queued behind them, readers behind the writer), sometimes any slot.
fn session() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0..3usize, 1 => 0..8usize]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..TTLS.len(), 0..SECRETS.len(), 0..PRINCIPALS.len())
            .prop_map(|(ttl, secret, principal)| Op::Create { ttl, secret, principal }),
        1 => (session(), 0..6usize).prop_map(|(session, proof)| Op::Close { session, proof }),
        1 => prop::collection::vec(0..8usize, 0..3).prop_map(|sessions| Op::Expire { sessions }),
        6 => (session(), 0..NAMESPACES.len(), 0..KEYS.len(), any::<bool>(), 0..WAIT_TIMEOUTS.len(), 0..6usize, 0..MODES.len())
            .prop_map(|(session, ns, key, wait, timeout, proof, mode)| Op::Acquire { session, ns, key, wait, timeout, proof, mode }),
        1 => (0..NAMESPACES.len(), 0..KEYS.len(), 0..PERMITS.len(), prop::bool::weighted(0.9))
            .prop_map(|(ns, key, permits, admin)| Op::SetSemaphore { ns, key, permits, admin }),
        1 => (session(), 0..NAMESPACES.len(), 0..KEYS.len(), 0..6usize)
            .prop_map(|(session, ns, key, proof)| Op::Cancel { session, ns, key, proof }),
        1 => Just(Op::ExpireWaits),
        4 => (session(), 0..NAMESPACES.len(), 0..KEYS.len(), prop::bool::weighted(0.85), 0..6usize)
            .prop_map(|(session, ns, key, right_token, proof)| Op::Release { session, ns, key, right_token, proof }),
        2 => (0..8usize, 0..4usize).prop_map(|(session, back)| Op::Retry { session, back }),
        1 => (0..8usize, 0..4usize, 0..3usize)
            .prop_map(|(session, back, key)| Op::Reuse { session, back, key }),
    ]
}

/// Ops among four live sessions on two keys of one namespace, with the right proofs: the
/// sequences where shared holders, writers queued behind them and readers behind the writers
/// meet (the general generator above spends most of its steps on refusals).
fn contended_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..4usize, 0..2usize, any::<bool>(), 0..4usize, 0..2usize)
            .prop_map(|(session, key, wait, timeout, mode)| Op::Acquire { session, ns: 0, key, wait, timeout, proof: 0, mode }),
        5 => (0..4usize, 0..2usize, prop::bool::weighted(0.9))
            .prop_map(|(session, key, right_token)| Op::Release { session, ns: 0, key, right_token, proof: 0 }),
        2 => (0..4usize, 0..2usize).prop_map(|(session, key)| Op::Cancel { session, ns: 0, key, proof: 0 }),
        2 => Just(Op::ExpireWaits),
        1 => (0..4usize).prop_map(|session| Op::Close { session, proof: 0 }),
        1 => (0..4usize).prop_map(|session| Op::Expire { sessions: vec![session] }),
        1 => (0..4usize).prop_map(|secret| Op::Create { ttl: 0, secret, principal: 0 }),
        1 => (0..4usize, 0..4usize).prop_map(|(session, back)| Op::Retry { session, back }),
    ]
}

/// Ops among four live sessions on a semaphore (key 0, declared with 2 permits before these
/// run) and a lock (key 1): permits granted, queued, released and cancelled while N is raised,
/// lowered below the holders and (when nobody holds or waits) removed and declared again.
fn semaphore_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..4usize, 0..2usize, any::<bool>(), 0..4usize, prop::bool::weighted(0.9))
            .prop_map(|(session, key, wait, timeout, permit)| Op::Acquire { session, ns: 0, key, wait, timeout, proof: 0, mode: if permit { 2 } else { 0 } }),
        5 => (0..4usize, 0..2usize, prop::bool::weighted(0.9))
            .prop_map(|(session, key, right_token)| Op::Release { session, ns: 0, key, right_token, proof: 0 }),
        2 => (0..4usize, 0..2usize).prop_map(|(session, key)| Op::Cancel { session, ns: 0, key, proof: 0 }),
        1 => Just(Op::ExpireWaits),
        2 => (0..2usize, 0..4usize).prop_map(|(key, permits)| Op::SetSemaphore { ns: 0, key, permits, admin: true }),
        1 => (0..4usize).prop_map(|session| Op::Close { session, proof: 0 }),
        1 => (0..4usize).prop_map(|secret| Op::Create { ttl: 0, secret, principal: 0 }),
        1 => (0..4usize, 0..4usize).prop_map(|(session, back)| Op::Retry { session, back }),
        1 => (0..4usize, 0..4usize).prop_map(|(session, back)| Op::Reuse { session, back, key: 2 }),
    ]
}

/// Applies `ops` to the state machine and the model and compares them after every command.
fn run_against_model(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut sm = LockStateMachine::new(config());
    let mut model = Model::default();
    let mut client = OpClient::default();
    let mut last_tokens = BTreeMap::new();
    let mut granted_tokens: BTreeMap<LockKey, Vec<u64>> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        let command = client.command(op, &model);
        let before = sm.snapshot();
        let stamp = Instant::from_millis(1_000 + step as u64);
        model.time_ms = stamp.as_millis();
        let outcome = sm.apply(stamp, command.clone());
        let expected = model.apply(&command);
        prop_assert_eq!(&outcome, &expected, "step {} command {:?}", step, command);
        prop_assert_eq!(sm.revision(), Revision(model.revision));
        client.observe(&command, &outcome);
        sm.check_invariants();
        assert_same_state(&sm, &model, &mut last_tokens);
        if outcome.is_err() {
            prop_assert_eq!(
                without_revision(sm.snapshot()),
                without_revision(before),
                "an error changed the state"
            );
        }
        // Fresh grants (not retries) get tokens strictly above every token of the key granted
        // in an earlier revision (shared holders granted in one revision share their token).
        for event in sm
            .watch(sm.revision(), &Default::default(), usize::MAX)
            .unwrap()
            .events
        {
            if let picket_core::locks::EventKind::Granted { token, .. } = event.kind {
                prop_assert_eq!(token.0, event.revision.0, "a token is its grant's revision");
                let tokens = granted_tokens
                    .entry((event.namespace.to_string(), event.key.to_string()))
                    .or_default();
                if let Some(last) = tokens.last() {
                    prop_assert!(
                        token.0 > *last || (token.0 == *last && event.revision.0 == *last),
                        "token {} after {}",
                        token,
                        last
                    );
                }
                tokens.push(token.0);
            }
        }
        let restored = LockStateMachine::restore(sm.snapshot()).expect("own snapshot restores");
        prop_assert_eq!(&restored, &sm);
        prop_assert_eq!(restored.digest(), sm.digest());
    }
    Ok(())
}

/// The snapshot without revision and log time, which every command advances.
fn without_revision(mut snapshot: LockSnapshot) -> LockSnapshot {
    snapshot.revision = Revision(0);
    snapshot.time = Instant::ZERO;
    snapshot
}

proptest! {
    #[test]
    fn state_machine_matches_model(ops in prop::collection::vec(op(), 1..120)) {
        run_against_model(&ops)?;
    }

    #[test]
    fn contended_keys_match_model(ops in prop::collection::vec(contended_op(), 1..100)) {
        // Four sessions first, each with its own secret.
        let mut all: Vec<Op> = (0..4).map(|secret| Op::Create { ttl: 0, secret, principal: 0 }).collect();
        all.extend(ops);
        run_against_model(&all)?;
    }

    #[test]
    fn semaphores_match_model(ops in prop::collection::vec(semaphore_op(), 1..100)) {
        let mut all: Vec<Op> = (0..4).map(|secret| Op::Create { ttl: 0, secret, principal: 0 }).collect();
        all.push(Op::SetSemaphore { ns: 0, key: 0, permits: 2, admin: true });
        all.extend(ops);
        run_against_model(&all)?;
    }
}
