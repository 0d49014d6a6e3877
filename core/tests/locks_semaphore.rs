//! Counting semaphores: an operator declares a key with N permits; permits are granted in the
//! lowest free slot with their own token; FIFO waiters take permits as they free, in the same
//! revision; lowering N takes nothing away; each slot has a floor (its latest grant or
//! force-release); the declaration is audited, watched, durable and refused where it would
//! change a lock; locks and permits never mix on one key; request ids are bound to the mode.

mod common;
use common::World;

use picket_core::locks::{
    AcquireReply, Actor, AuditAction, AuditQuery, Command, EventKind, LockError, LockMode,
    LockStateMachine, PermitSlot, Reply, Revision, Role, SessionId, SessionProof, Token, Wait,
    WatchFilter, PERMITS_MAX,
};
use picket_core::time::Instant;

use LockMode::{Exclusive, Permit, Shared};

fn admin() -> Actor {
    Actor::new("carol", &[Role::ClassAdmin])
}

impl World {
    fn set(&mut self, permits: u32) -> Result<Reply, LockError> {
        self.apply(Command::SetSemaphore {
            actor: admin(),
            namespace: "ns".into(),
            key: "k".into(),
            permits,
            reason: "pool of two".into(),
        })
    }

    fn try_acquire(
        &mut self,
        session: SessionId,
        mode: LockMode,
        wait: bool,
    ) -> Result<Reply, LockError> {
        let command = self.acquire_command(session, mode, wait.then_some(Wait::UNBOUNDED));
        self.apply(command)
    }

    fn acquire(&mut self, session: SessionId, wait: bool) -> AcquireReply {
        match self.try_acquire(session, Permit, wait) {
            Ok(Reply::Acquire(reply)) => reply,
            other => panic!("{other:?}"),
        }
    }

    /// A permit granted now: (token, permit slot).
    fn granted(&mut self, session: SessionId) -> (Token, u32) {
        match self.acquire(session, true) {
            AcquireReply::Granted {
                token,
                permit: Some(permit),
            } => (token, permit.0),
            other => panic!("{session}: {other:?}"),
        }
    }

    /// (session, token, permit slot) of every holder, oldest first.
    fn holders(&self) -> Vec<(SessionId, Token, Option<u32>)> {
        let info = self.inspect_k();
        info.holders
            .iter()
            .map(|h| (h.session, h.token, h.permit.map(|p| p.0)))
            .collect()
    }

    fn waiters(&self) -> Vec<SessionId> {
        let info = self.inspect_k();
        info.waiters.iter().map(|w| w.session).collect()
    }

    fn permit_floors(&self) -> Vec<(u32, Revision)> {
        let floors = self.inspect_k().permit_floors;
        floors.into_iter().map(|(p, f)| (p.0, f)).collect()
    }
}

#[test]
fn permits_take_the_lowest_free_slot_and_waiters_get_them_as_they_free() {
    let mut w = World::new();
    let [a, b, c, d] = w.sessions(["a", "b", "c", "d"]);
    assert_eq!(
        w.set(2),
        Ok(Reply::SemaphoreSet {
            previous_permits: 0
        })
    );
    let info = w.sm.inspect("ns", "k", Instant::ZERO).unwrap();
    assert_eq!(info.permits, Some(2), "a free semaphore shows its N");
    assert_eq!(info.mode, None);

    let (ta, sa) = w.granted(a);
    let (tb, sb) = w.granted(b);
    assert_eq!((sa, sb), (0, 1), "distinct slots, lowest first");
    assert!(tb > ta, "each permit has its own token");
    assert_eq!(
        w.sm.inspect("ns", "k", Instant::ZERO).unwrap().mode,
        Some(Permit)
    );
    // Full: busy without a wait (naming the oldest holder), queued with one.
    assert_eq!(
        w.acquire(c, false),
        AcquireReply::Busy {
            holder: a,
            token: ta
        }
    );
    assert_eq!(w.acquire(c, true), AcquireReply::Queued { position: 1 });
    assert_eq!(w.acquire(d, true), AcquireReply::Queued { position: 2 });

    // a's permit frees: the head waiter gets slot 0 in the same revision.
    let next = w.release(a, ta);
    let tc = Token(w.sm.revision().0);
    assert_eq!(next, Some((c, tc)));
    assert_eq!(w.granted_permits(), vec![(c, tc, Some(0))]);
    assert_eq!(w.holders(), vec![(b, tb, Some(1)), (c, tc, Some(0))]);
    assert_eq!(w.waiters(), vec![d]);
    // Slot 0's floor is c's grant: a's token on slot 0 is superseded.
    assert_eq!(
        w.permit_floors(),
        vec![(0, Revision(tc.0)), (1, Revision(tb.0))]
    );
    // A retry by the holder is answered with its token and slot.
    assert_eq!(
        w.acquire(c, true),
        AcquireReply::Granted {
            token: tc,
            permit: Some(PermitSlot(0))
        }
    );
    // The watch's Granted event carries the mode and the slot.
    let page =
        w.sm.watch(Revision(tc.0), &WatchFilter::default(), 100)
            .unwrap();
    assert!(page.events.iter().any(|e| e.kind
        == EventKind::Granted {
            session: c,
            token: tc,
            mode: Permit,
            permit: Some(PermitSlot(0))
        }));
}

#[test]
fn locks_and_permits_never_mix_on_a_key() {
    let mut w = World::new();
    let a = w.session("a");
    // A permit on a key that is no semaphore.
    assert_eq!(
        w.try_acquire(a, Permit, true),
        Err(LockError::NotASemaphore {
            namespace: "ns".into(),
            key: "k".into()
        })
    );
    // A key held (or queued for) as a lock cannot be declared.
    let Ok(Reply::Acquire(AcquireReply::Granted {
        token,
        permit: None,
    })) = w.try_acquire(a, Exclusive, false)
    else {
        panic!("lock refused");
    };
    assert_eq!(
        w.set(2),
        Err(LockError::KeyHeldAsLock {
            namespace: "ns".into(),
            key: "k".into()
        })
    );
    w.release(a, token);
    assert_eq!(
        w.set(2),
        Ok(Reply::SemaphoreSet {
            previous_permits: 0
        })
    );
    // Exclusive and shared acquires of a semaphore are refused: a correctness lock is never
    // silently shared.
    for mode in [Exclusive, Shared] {
        assert_eq!(
            w.try_acquire(a, mode, true),
            Err(LockError::KeyIsSemaphore {
                namespace: "ns".into(),
                key: "k".into(),
                permits: 2
            })
        );
    }
}

/// (old and new N, actor, reason) of a `SemaphoreSet` audit record.
type AuditedChange<'a> = (Option<(u32, u32)>, &'a str, &'a str);

#[test]
fn set_semaphore_rules_audit_and_watch() {
    let mut w = World::new();
    let a = w.session("a");
    assert_eq!(
        w.set(PERMITS_MAX + 1),
        Err(LockError::PermitsOutOfBounds {
            given: PERMITS_MAX + 1,
            max: PERMITS_MAX
        })
    );
    let plain = Command::SetSemaphore {
        actor: Actor::new("dave", &[Role::OnCall]),
        namespace: "ns".into(),
        key: "k".into(),
        permits: 2,
        reason: "r".into(),
    };
    assert!(matches!(
        w.apply(plain),
        Err(LockError::MissingRole {
            needed: "class-admin",
            ..
        })
    ));
    let no_reason = Command::SetSemaphore {
        actor: admin(),
        namespace: "ns".into(),
        key: "k".into(),
        permits: 2,
        reason: " ".into(),
    };
    assert_eq!(
        w.apply(no_reason),
        Err(LockError::TextEmpty { field: "reason" })
    );
    // Removing what is not declared changes nothing.
    assert_eq!(
        w.set(0),
        Ok(Reply::SemaphoreSet {
            previous_permits: 0
        })
    );
    assert_eq!(
        w.set(2),
        Ok(Reply::SemaphoreSet {
            previous_permits: 0
        })
    );
    let set_at = w.sm.revision();
    assert_eq!(
        w.set(3),
        Ok(Reply::SemaphoreSet {
            previous_permits: 2
        })
    );
    let (t, _) = w.granted(a);
    // Not removable while held (or waited for).
    assert_eq!(
        w.set(0),
        Err(LockError::SemaphoreInUse {
            namespace: "ns".into(),
            key: "k".into(),
            holders: 1,
            waiters: 0
        })
    );
    w.release(a, t);
    // Free, the declaration stays (and its slot floors with it).
    assert_eq!(w.sm.semaphore_permits("ns", "k"), Some(3));
    assert_eq!(w.permit_floors(), vec![(0, Revision(t.0))]);
    assert_eq!(
        w.set(0),
        Ok(Reply::SemaphoreSet {
            previous_permits: 3
        })
    );
    assert_eq!(w.sm.semaphore_permits("ns", "k"), None);
    assert_eq!(w.sm.snapshot().semaphores, vec![], "nothing left behind");

    let audit = w.sm.audit(&AuditQuery {
        revision_min: set_at,
        ..AuditQuery::default()
    });
    let records: Vec<AuditedChange> = audit
        .records
        .iter()
        .filter(|r| r.action == AuditAction::SemaphoreSet)
        .map(|r| (r.permits, r.actor.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        records,
        vec![
            (Some((0, 2)), "carol", "pool of two"),
            (Some((2, 3)), "carol", "pool of two"),
            (Some((3, 0)), "carol", "pool of two"),
        ]
    );
    let events =
        w.sm.watch(set_at, &WatchFilter::default(), 100)
            .unwrap()
            .events;
    assert!(events.iter().any(|e| e.kind
        == EventKind::SemaphoreChanged {
            permits: 3,
            previous_permits: 2
        }));
}

#[test]
fn lowering_n_keeps_the_holders_and_grants_only_slots_below_n() {
    let mut w = World::new();
    let [a, b, c, d] = w.sessions(["a", "b", "c", "d"]);
    w.set(3).unwrap();
    let (ta, _) = w.granted(a);
    let (tb, _) = w.granted(b);
    let (tc, sc) = w.granted(c);
    assert_eq!(sc, 2);
    assert_eq!(w.acquire(d, true), AcquireReply::Queued { position: 1 });
    assert_eq!(
        w.set(1),
        Ok(Reply::SemaphoreSet {
            previous_permits: 3
        })
    );
    assert_eq!(w.holders().len(), 3, "lowering N takes no permit away");
    // Two holders of N 1: releases grant nothing until fewer than N hold.
    assert_eq!(w.release(a, ta), None);
    assert_eq!(w.release(c, tc), None);
    assert_eq!(w.waiters(), vec![d]);
    assert_eq!(w.release(b, tb), Some((d, Token(w.sm.revision().0))));
    assert_eq!(
        w.holders(),
        vec![(d, Token(w.sm.revision().0), Some(0))],
        "only a slot below N"
    );
    // Raising N grants the waiters at once, in the same revision.
    let e = w.session("e");
    assert_eq!(w.acquire(e, true), AcquireReply::Queued { position: 1 });
    assert_eq!(
        w.set(2),
        Ok(Reply::SemaphoreSet {
            previous_permits: 1
        })
    );
    assert_eq!(
        w.granted_permits(),
        vec![(e, Token(w.sm.revision().0), Some(1))]
    );
}

#[test]
fn a_request_id_is_bound_to_its_mode() {
    let mut w = World::new();
    let a = w.session("a");
    w.set(2).unwrap();
    let first = w.acquire_command(a, Permit, Some(Wait::UNBOUNDED));
    let Ok(Reply::Acquire(granted)) = w.apply(first.clone()) else {
        panic!("refused");
    };
    // The same request again is a retry.
    assert_eq!(w.apply(first.clone()), Ok(Reply::Acquire(granted)));
    // The same id with another mode is another request, refused by name.
    let Command::Acquire { request, .. } = first else {
        unreachable!()
    };
    let other = Command::Acquire {
        session: a,
        proof: SessionProof::legacy(),
        request,
        namespace: "ns".into(),
        key: "k".into(),
        mode: Shared,
        wait: Some(Wait::UNBOUNDED),
    };
    assert!(matches!(
        w.apply(other),
        Err(LockError::RequestIdReused { was, this, .. })
            if was == "Acquire ns/k permit" && this == "Acquire ns/k shared"
    ));
}

#[test]
fn force_release_of_a_permit_raises_its_slot_floor_and_hands_the_slot_on() {
    let mut w = World::new();
    let [a, b, c] = w.sessions(["a", "b", "c"]);
    w.set(2).unwrap();
    let (ta, sa) = w.granted(a);
    let (tb, _) = w.granted(b);
    assert_eq!(w.acquire(c, true), AcquireReply::Queued { position: 1 });
    let request = Command::RequestForceRelease {
        actor: Actor::new("alice", &[Role::OnCall]),
        namespace: "ns".into(),
        key: "k".into(),
        expected_token: ta,
        holder: Some(a),
        reason: "worker wedged".into(),
        revoke_session: false,
        checklist: Default::default(),
    };
    let Ok(Reply::ForceReleaseRequested { id, .. }) = w.apply(request) else {
        panic!("request refused");
    };
    let (floor, released_token, next) = w.approve_advisory(Actor::new("bob", &[Role::OnCall]), id);
    let revision = w.sm.revision();
    assert_eq!(released_token, ta);
    assert_eq!(floor, revision, "the slot's floor is the release");
    assert_eq!(next, Some((c, Token(revision.0))));
    assert_eq!(
        w.holders(),
        vec![(b, tb, Some(1)), (c, Token(revision.0), Some(sa))],
        "the waiter takes the freed slot"
    );
    assert_eq!(w.permit_floors()[0], (sa, revision));
    let approval =
        w.sm.audit(&AuditQuery {
            revision_min: revision,
            ..AuditQuery::default()
        })
        .records
        .into_iter()
        .find(|r| r.action == AuditAction::ForceReleaseApproved)
        .expect("audited");
    assert_eq!(approval.permit, Some(PermitSlot(sa)));
    assert_eq!(w.sm.holds_lost(a).len(), 1, "a is told it lost the permit");
}

#[test]
fn ending_sessions_and_cancelled_waits_free_permits_for_the_queue() {
    let mut w = World::new();
    let [a, b, c] = w.sessions(["a", "b", "c"]);
    w.set(1).unwrap();
    w.granted(a);
    assert_eq!(w.acquire(b, true), AcquireReply::Queued { position: 1 });
    assert_eq!(w.acquire(c, true), AcquireReply::Queued { position: 2 });
    let cancel = Command::CancelWait {
        session: b,
        proof: SessionProof::legacy(),
        namespace: "ns".into(),
        key: "k".into(),
    };
    assert_eq!(
        w.apply(cancel),
        Ok(Reply::WaitCancelled {
            removed: true,
            held: None
        })
    );
    assert_eq!(w.waiters(), vec![c]);
    w.apply(Command::CloseSession {
        session: a,
        proof: SessionProof::legacy(),
    })
    .unwrap();
    assert_eq!(
        w.granted_permits(),
        vec![(c, Token(w.sm.revision().0), Some(0))]
    );
}

#[test]
fn a_snapshot_breaking_a_semaphore_invariant_is_refused() {
    let mut w = World::new();
    let [a, b, c] = w.sessions(["a", "b", "c"]);
    w.set(2).unwrap();
    w.granted(a);
    w.granted(b);
    assert_eq!(w.acquire(c, true), AcquireReply::Queued { position: 1 });
    let good = w.sm.snapshot();
    assert!(LockStateMachine::restore(good.clone()).is_ok());
    let refused = |snapshot, what: &str| {
        let error = LockStateMachine::restore(snapshot).expect_err(what);
        assert!(error.rule.contains(what), "{what}: {}", error.rule);
    };
    // Two permits in one slot.
    let mut same_slot = good.clone();
    same_slot.locks[0].holders[1].permit = Some(PermitSlot(0));
    refused(same_slot, "slot 0 held twice");
    // A holder's token below its slot's floor.
    let mut below = good.clone();
    below.semaphores[0].floors[1].1 = Revision(below.revision.0);
    refused(below, "below its floor");
    // Permits held on a key that is no semaphore.
    let mut undeclared = good.clone();
    undeclared.semaphores.clear();
    refused(undeclared, "not a semaphore");
    // A waiter while fewer than N hold (it would have been granted).
    let mut room = good.clone();
    room.semaphores[0].permits = 3;
    refused(room, "and a waiter");
    // More holders than N without N having been lowered under them.
    let mut over = good;
    over.semaphores[0].permits = 1;
    over.semaphores[0].permits_set_at = Revision(1);
    refused(over, "granted at");
}
