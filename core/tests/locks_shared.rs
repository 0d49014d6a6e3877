//! Shared (read) locks: shared holders coexist, an exclusive request waits for them and is never
//! overtaken by a later shared one, a run of shared waiters is granted in one revision, the floor
//! rules fence readers behind a writer, mode changes are refused, and force-release names one
//! holder.

mod common;
use common::World;

use picket_core::locks::{
    AcquireReply, Actor, Command, EventKind, LockError, LockMode, Reply, Revision, Role, SessionId,
    SessionProof, Token, Wait,
};
use picket_core::time::Instant;

use LockMode::{Exclusive, Shared};

impl World {
    fn try_acquire(
        &mut self,
        session: SessionId,
        mode: LockMode,
        wait: bool,
        wait_timeout_ms: Option<u64>,
    ) -> Result<Reply, LockError> {
        let wait = wait.then_some(Wait {
            timeout_ms: wait_timeout_ms,
        });
        let command = self.acquire_command(session, mode, wait);
        self.apply(command)
    }

    fn acquire(&mut self, session: SessionId, mode: LockMode, wait: bool) -> AcquireReply {
        match self.try_acquire(session, mode, wait, None) {
            Ok(Reply::Acquire(reply)) => reply,
            other => panic!("{other:?}"),
        }
    }

    fn granted(&mut self, session: SessionId, mode: LockMode) -> Token {
        match self.acquire(session, mode, true) {
            AcquireReply::Granted { token, .. } => token,
            other => panic!("{session} {mode}: {other:?}"),
        }
    }

    fn cancel(&mut self, session: SessionId) {
        let reply = self.apply(Command::CancelWait {
            session,
            proof: SessionProof::legacy(),
            namespace: "ns".into(),
            key: "k".into(),
        });
        assert_eq!(
            reply,
            Ok(Reply::WaitCancelled {
                removed: true,
                held: None
            })
        );
    }

    /// (session, token) of every holder, oldest first.
    fn holders(&self) -> Vec<(SessionId, Token)> {
        let info = self.inspect_k();
        info.holders.iter().map(|h| (h.session, h.token)).collect()
    }

    fn waiters(&self) -> Vec<(SessionId, LockMode)> {
        let info = self.inspect_k();
        info.waiters.iter().map(|w| (w.session, w.mode)).collect()
    }

    fn floor(&self) -> Option<Revision> {
        self.inspect_k().floor
    }

    /// The sessions the last command granted the key to (its wait ends).
    fn granted_now(&self) -> Vec<(SessionId, Token)> {
        let granted = self.granted_permits();
        granted.into_iter().map(|(s, t, _)| (s, t)).collect()
    }
}

#[test]
fn shared_holders_coexist_and_a_queued_writer_is_never_overtaken() {
    let mut w = World::new();
    let [r1, r2, writer, r3] = w.sessions(["r1", "r2", "writer", "r3"]);
    let t1 = w.granted(r1, Shared);
    let t2 = w.granted(r2, Shared);
    assert!(t2 > t1);
    assert_eq!(w.holders(), vec![(r1, t1), (r2, t2)]);
    let info = w.sm.inspect("ns", "k", Instant::ZERO).unwrap();
    assert_eq!(info.mode, Some(Shared));
    assert_eq!(
        info.holder.map(|h| h.session),
        Some(r1),
        "the oldest holder"
    );
    assert!(info.holders.iter().all(|h| h.mode == Shared));
    // Readers joining keep the floor at the first reader's grant: r1's token stays valid.
    assert_eq!(w.floor(), Some(Revision(t1.0)));

    assert_eq!(w.acquire(writer, Exclusive, false), busy(r1, t1));
    assert_eq!(
        w.acquire(writer, Exclusive, true),
        AcquireReply::Queued { position: 1 }
    );
    // A shared request behind the queued writer waits (or is busy): it does not join.
    assert_eq!(w.acquire(r3, Shared, false), busy(r1, t1));
    assert_eq!(
        w.acquire(r3, Shared, true),
        AcquireReply::Queued { position: 2 }
    );
    assert_eq!(w.waiters(), vec![(writer, Exclusive), (r3, Shared)]);

    assert_eq!(w.release(r1, t1), None, "r2 still reads");
    let next = w.release(r2, t2);
    let tw = Token(w.sm.revision().0);
    assert_eq!(next, Some((writer, tw)));
    assert!(
        tw > t1 && tw > t2,
        "the writer's token is above every reader's"
    );
    assert_eq!(w.holders(), vec![(writer, tw)]);
    assert_eq!(w.waiters(), vec![(r3, Shared)], "r3 still waits");
    // The writer's grant raised the floor above every reader token.
    assert_eq!(w.floor(), Some(Revision(tw.0)));
    assert!(!t1.is_above(w.floor().unwrap()) && !t2.is_above(w.floor().unwrap()));

    let next = w.release(writer, tw);
    let t3 = Token(w.sm.revision().0);
    assert_eq!(next, Some((r3, t3)));
    assert_eq!(w.holders(), vec![(r3, t3)]);
    assert_eq!(w.floor(), Some(Revision(t3.0)));
}

fn busy(holder: SessionId, token: Token) -> AcquireReply {
    AcquireReply::Busy { holder, token }
}

#[test]
fn a_run_of_shared_waiters_is_granted_in_one_revision() {
    let mut w = World::new();
    let [writer, a, b, writer2, c] = w.sessions(["writer", "a", "b", "writer2", "c"]);
    let tw = w.granted(writer, Exclusive);
    assert_eq!(
        w.acquire(a, Shared, true),
        AcquireReply::Queued { position: 1 }
    );
    assert_eq!(
        w.acquire(b, Shared, true),
        AcquireReply::Queued { position: 2 }
    );
    assert_eq!(
        w.acquire(writer2, Exclusive, true),
        AcquireReply::Queued { position: 3 }
    );
    assert_eq!(
        w.acquire(c, Shared, true),
        AcquireReply::Queued { position: 4 }
    );

    let next = w.release(writer, tw);
    let r = Token(w.sm.revision().0);
    assert_eq!(next, Some((a, r)), "the reply names the first of the run");
    assert_eq!(w.granted_now(), vec![(a, r), (b, r)], "a and b together");
    assert_eq!(w.holders(), vec![(a, r), (b, r)]);
    assert_eq!(w.waiters(), vec![(writer2, Exclusive), (c, Shared)]);
    let events =
        w.sm.watch(w.sm.revision(), &Default::default(), usize::MAX)
            .unwrap()
            .events;
    let grants: Vec<SessionId> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Granted { session, token, .. } if token == r => Some(session),
            _ => None,
        })
        .collect();
    assert_eq!(grants, vec![a, b], "one Granted event per reader");

    // A retry of a's queued acquire answers the grant.
    let again = w.sm.holder_token(a, "ns", "k");
    assert_eq!(again, Some(r));
    // Both readers must leave before writer2 writes; then c reads alone.
    assert_eq!(w.release(b, r), None);
    let t2 = Token(w.sm.revision().0 + 1);
    assert_eq!(w.release(a, r), Some((writer2, t2)));
    let t3 = Token(w.sm.revision().0 + 1);
    assert_eq!(w.release(writer2, t2), Some((c, t3)));
}

#[test]
fn a_removed_writer_lets_the_readers_behind_it_join() {
    let mut w = World::new();
    let [r1, writer, r2, r3] = w.sessions(["r1", "writer", "r2", "r3"]);
    let t1 = w.granted(r1, Shared);
    assert_eq!(
        w.acquire(writer, Exclusive, true),
        AcquireReply::Queued { position: 1 }
    );
    assert_eq!(
        w.acquire(r2, Shared, true),
        AcquireReply::Queued { position: 2 }
    );
    w.cancel(writer);
    let r = Token(w.sm.revision().0);
    assert_eq!(w.granted_now(), vec![(r2, r)], "the cancel grants r2");
    assert_eq!(w.holders(), vec![(r1, t1), (r2, r)]);
    assert_eq!(
        w.floor(),
        Some(Revision(t1.0)),
        "r2 joined: the floor stays"
    );

    // A writer whose wait expires: the readers behind it join, but an expired reader does not.
    assert_eq!(
        w.try_acquire(writer, Exclusive, true, Some(5)),
        Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
    );
    assert_eq!(
        w.try_acquire(r3, Shared, true, Some(5)),
        Ok(Reply::Acquire(AcquireReply::Queued { position: 2 }))
    );
    w.now += 10;
    assert_eq!(
        w.apply(Command::ExpireWaits),
        Ok(Reply::WaitsExpired { removed: 2 })
    );
    assert_eq!(w.granted_now(), vec![], "no grant to an expired wait");
    assert_eq!(w.holders(), vec![(r1, t1), (r2, r)]);
    assert_eq!(w.waiters(), vec![]);
}

#[test]
fn a_session_cannot_change_its_mode_on_a_key() {
    let mut w = World::new();
    let [r1, r2, writer] = w.sessions(["r1", "r2", "writer"]);
    let t1 = w.granted(r1, Shared);
    // Same mode again: the hold it has (idempotent).
    assert_eq!(
        w.acquire(r1, Shared, false),
        AcquireReply::Granted {
            token: t1,
            permit: None
        }
    );
    // Upgrade: refused at once, even for the only reader (two readers upgrading would wait for
    // each other forever).
    let upgrade = w.try_acquire(r1, Exclusive, true, None);
    assert_eq!(
        upgrade,
        Err(LockError::ModeChangeNotSupported {
            session: r1,
            namespace: "ns".into(),
            key: "k".into(),
            has: Shared,
            asked: Exclusive,
            holds: true,
        })
    );
    let t2 = w.granted(r2, Shared);
    for (session, token) in [(r1, t1), (r2, t2)] {
        let refused = w.try_acquire(session, Exclusive, true, None);
        assert!(
            matches!(refused, Err(LockError::ModeChangeNotSupported { .. })),
            "{token}: {refused:?}"
        );
    }
    // A waiter asking in the other mode is refused too.
    assert_eq!(
        w.acquire(writer, Exclusive, true),
        AcquireReply::Queued { position: 1 }
    );
    let refused = w.try_acquire(writer, Shared, true, None);
    assert!(matches!(
        refused,
        Err(LockError::ModeChangeNotSupported { holds: false, .. })
    ));
    // Downgrade: refused.
    w.release(r1, t1);
    let tw = Token(w.sm.revision().0 + 1);
    assert_eq!(w.release(r2, t2), Some((writer, tw)));
    let downgrade = w.try_acquire(writer, Shared, false, None);
    assert!(matches!(
        downgrade,
        Err(LockError::ModeChangeNotSupported {
            has: Exclusive,
            asked: Shared,
            holds: true,
            ..
        })
    ));
    assert_eq!(w.holders(), vec![(writer, tw)]);
}

#[test]
fn force_release_names_one_shared_holder() {
    let mut w = World::new();
    let [writer, a, b, writer2] = w.sessions(["writer", "a", "b", "writer2"]);
    let tw = w.granted(writer, Exclusive);
    w.acquire(a, Shared, true);
    w.acquire(b, Shared, true);
    w.release(writer, tw);
    let r = Token(w.sm.revision().0);
    assert_eq!(w.holders(), vec![(a, r), (b, r)]);
    assert_eq!(
        w.acquire(writer2, Exclusive, true),
        AcquireReply::Queued { position: 1 }
    );
    let alice = Actor::new("alice", &[Role::OnCall]);
    let bob = Actor::new("bob", &[Role::OnCall]);
    let request = |holder: Option<SessionId>, token: Token| Command::RequestForceRelease {
        actor: alice.clone(),
        namespace: "ns".into(),
        key: "k".into(),
        expected_token: token,
        holder,
        reason: "reader wedged".into(),
        revoke_session: false,
        checklist: Default::default(),
    };
    // a and b share the token: the token alone does not say whose hold.
    assert_eq!(
        w.apply(request(None, r)),
        Err(LockError::HolderAmbiguous {
            namespace: "ns".into(),
            key: "k".into(),
            token: r,
            count: 2,
        })
    );
    assert!(matches!(
        w.apply(request(Some(a), Token(r.0 + 1))),
        Err(LockError::TokenMismatch { current, .. }) if current == r
    ));
    assert!(matches!(
        w.apply(request(Some(writer2), r)),
        Err(LockError::NotHolder { session, .. }) if session == writer2
    ));
    let Ok(Reply::ForceReleaseRequested { id, .. }) = w.apply(request(Some(a), r)) else {
        panic!("request refused");
    };
    let (floor, released_token, next) = w.approve_advisory(bob, id);
    assert_eq!(released_token, r);
    assert_eq!(next, None, "b still reads: the writer waits");
    assert_eq!(floor, Revision(r.0), "the floor stays while b holds");
    assert_eq!(w.holders(), vec![(b, r)]);
    let lost = w.sm.holds_lost(a);
    assert_eq!(lost.len(), 1, "a is told it lost the hold");
    // Issue 33: LostHold.revision is the approval's revision; while b holds on, the floor stays
    // below it (as LostHold's docs now say).
    assert_eq!(lost[0].revision, w.sm.revision());
    assert!(floor < lost[0].revision);
    let t2 = Token(w.sm.revision().0 + 1);
    assert_eq!(w.release(b, r), Some((writer2, t2)));
    assert!(t2.is_above(Revision(r.0)), "the writer fences both readers");
}

#[test]
fn closing_one_reader_keeps_the_others_and_every_hold_is_listed() {
    let mut w = World::new();
    let [a, b, writer] = w.sessions(["a", "b", "writer"]);
    let ta = w.granted(a, Shared);
    let tb = w.granted(b, Shared);
    let holds =
        w.sm.list_holds("ns", Instant::from_millis(5_000), 10)
            .unwrap();
    let listed: Vec<(SessionId, Token, LockMode)> =
        holds.iter().map(|h| (h.session, h.token, h.mode)).collect();
    assert_eq!(listed, vec![(a, ta, Shared), (b, tb, Shared)]);
    let longest = w.sm.longest_holds(Instant::from_millis(5_000));
    assert_eq!(longest.len(), 1);
    assert_eq!(longest[0].session, a, "the oldest hold of every holder");
    w.acquire(writer, Exclusive, true);
    let closed = w.apply(Command::CloseSession {
        session: a,
        proof: SessionProof::legacy(),
    });
    assert_eq!(
        closed,
        Ok(Reply::SessionClosed {
            holds_released: 1,
            waits_removed: 0
        })
    );
    assert_eq!(w.holders(), vec![(b, tb)]);
    let expired = w.apply(Command::ExpireSessions { sessions: vec![b] });
    assert_eq!(expired, Ok(Reply::SessionsExpired { expired: vec![b] }));
    let tw = Token(w.sm.revision().0);
    assert_eq!(w.holders(), vec![(writer, tw)]);
    assert_eq!(w.floor(), Some(Revision(tw.0)));
}
