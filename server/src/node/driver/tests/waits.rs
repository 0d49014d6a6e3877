//! Held acquires through the driver: answered by the grant or at their hold deadline, a wait
//! deadline enforced by the cluster, cancels, and a wait that ends with its session.

use super::*;

pub(super) fn a_held_acquire_is_answered_by_the_grant_or_at_its_deadline(mode: PersistMode) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    let a = h.session(leader);
    let b = h.session(leader);
    let c = h.session(leader);
    let mut rx = h.propose(leader, acquire(a, 1, false), 0);
    let Ok(Reply::Acquire(AcquireReply::Granted { token: first, .. })) =
        h.answer(&mut rx).unwrap().outcome
    else {
        panic!("a should hold the key");
    };
    // b waits (up to 60 s); c waits only 200 ms.
    let mut b_rx = h.propose(leader, acquire(b, 1, true), 60_000);
    let mut c_rx = h.propose(leader, acquire(c, 1, true), 200);
    h.settle(100);
    assert!(
        b_rx.try_recv().is_err(),
        "b's call is held while a holds the key"
    );
    h.settle(200);
    let c_answer = c_rx
        .try_recv()
        .expect("c answered at its deadline")
        .unwrap();
    assert_eq!(
        c_answer.outcome,
        Ok(Reply::Acquire(AcquireReply::Queued { position: 2 }))
    );
    let mut release = h.propose(
        leader,
        Command::Release {
            session: a,
            proof: SessionProof::legacy(),
            request: RequestId(2),
            namespace: "orders".into(),
            key: "k".into(),
            token: first,
        },
        0,
    );
    assert!(h.answer(&mut release).unwrap().outcome.is_ok());
    let b_answer = h.answer(&mut b_rx).unwrap();
    let Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) = b_answer.outcome else {
        panic!("b should be granted, got {b_answer:?}");
    };
    assert!(token > first, "tokens rise: {token:?} after {first:?}");
    assert_eq!(b_answer.revision.0, token.0);
    // The node answered both held calls (the driver keeps no waiter index).
    let counters = h.drivers[leader].node().counters();
    assert_eq!(counters.waits_granted, 1);
    assert_eq!(counters.waits_answered_queued, 1);
    assert_eq!(h.drivers[leader].node().waits_pending(), 0);
}

pub(super) fn a_wait_deadline_is_enforced_by_the_cluster_and_answers_the_held_call(
    mode: PersistMode,
) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    let a = h.session(leader);
    let b = h.session(leader);
    let c = h.session(leader);
    let mut rx = h.propose(leader, acquire(a, 1, false), 0);
    let Ok(Reply::Acquire(AcquireReply::Granted { token: first, .. })) =
        h.answer(&mut rx).unwrap().outcome
    else {
        panic!("a should hold the key");
    };
    // b waits at most 300 ms (server-side deadline), its call held up to 60 s; c waits on.
    let mut within = acquire(b, 1, true);
    if let Command::Acquire { wait, .. } = &mut within {
        *wait = Some(Wait::within_ms(300));
    }
    let mut b_rx = h.propose(leader, within, 60_000);
    let mut c_rx = h.propose(leader, acquire(c, 1, true), 60_000);
    h.settle(100);
    assert!(b_rx.try_recv().is_err(), "b waits");
    let b_answer = h.answer(&mut b_rx).unwrap();
    assert_eq!(
        b_answer.outcome,
        Err(picket_core::locks::LockError::WaitExpired {
            session: b,
            namespace: "orders".into(),
            key: "k".into(),
            timeout_ms: 300,
        })
    );
    h.settle(200); // followers learn the expiry was chosen
    for driver in &h.drivers {
        let info = driver
            .node()
            .state()
            .inspect("orders", "k", driver.node().state().time())
            .unwrap();
        let waiters: Vec<SessionId> = info.waiters.iter().map(|w| w.session).collect();
        assert_eq!(waiters, vec![c], "the expired wait is gone everywhere");
    }
    assert!(h.drivers[leader].node().counters().wait_expiry_proposals >= 1);
    // The next waiter gets the key at the release; the expired one never.
    let mut release = h.propose(
        leader,
        Command::Release {
            session: a,
            proof: SessionProof::legacy(),
            request: RequestId(2),
            namespace: "orders".into(),
            key: "k".into(),
            token: first,
        },
        0,
    );
    let released = h.answer(&mut release).unwrap().outcome;
    assert!(
        matches!(released, Ok(Reply::Released { next: Some((s, _)), .. }) if s == c),
        "{released:?}"
    );
    assert!(matches!(
        h.answer(&mut c_rx).unwrap().outcome,
        Ok(Reply::Acquire(AcquireReply::Granted { .. }))
    ));
}

pub(super) fn a_cancel_answers_the_held_call_and_is_idempotent(mode: PersistMode) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    let a = h.session(leader);
    let b = h.session(leader);
    let mut rx = h.propose(leader, acquire(a, 1, false), 0);
    assert!(h.answer(&mut rx).unwrap().outcome.is_ok());
    let mut b_rx = h.propose(leader, acquire(b, 1, true), 60_000);
    h.settle(100);
    assert!(b_rx.try_recv().is_err(), "b waits");
    let cancel = Command::CancelWait {
        session: b,
        proof: SessionProof::legacy(),
        namespace: "orders".into(),
        key: "k".into(),
    };
    for removed in [true, false] {
        let mut cancel_rx = h.propose(leader, cancel.clone(), 0);
        assert_eq!(
            h.answer(&mut cancel_rx).unwrap().outcome,
            Ok(Reply::WaitCancelled {
                removed,
                held: None
            })
        );
    }
    assert_eq!(
        h.answer(&mut b_rx).unwrap().outcome,
        Err(picket_core::locks::LockError::WaitCancelled {
            session: b,
            namespace: "orders".into(),
            key: "k".into(),
        })
    );
}

pub(super) fn a_held_acquire_ends_when_its_session_is_closed(mode: PersistMode) {
    let mut h = harness(64, mode);
    let leader = h.leader();
    h.settle(100);
    let a = h.session(leader);
    let b = h.session(leader);
    let mut rx = h.propose(leader, acquire(a, 1, false), 0);
    assert!(h.answer(&mut rx).unwrap().outcome.is_ok());
    let mut b_rx = h.propose(leader, acquire(b, 1, true), 60_000);
    h.settle(100);
    assert!(b_rx.try_recv().is_err(), "b waits");
    let mut close = h.propose(
        leader,
        Command::CloseSession {
            session: b,
            proof: SessionProof::legacy(),
        },
        0,
    );
    assert!(h.answer(&mut close).unwrap().outcome.is_ok());
    let answer = h.answer(&mut b_rx).unwrap();
    assert_eq!(
        answer.outcome,
        Err(picket_core::locks::LockError::UnknownSession { session: b })
    );
    assert_eq!(h.drivers[leader].node().counters().waits_answered_queued, 0);
}
