//! The two-person rule of force-release, its floor, session revocation, expiry and audit.

mod common;
use common::World;

use picket_core::locks::{
    AcquireReply, Actor, AuditAction, AuditQuery, ClassSpec, Command, EventKind, ForceReleaseId,
    LockConfig, LockError, LockMode, LockStateMachine, ReleaseCause, Reply, RequestId, Revision,
    Role, SessionId, SessionProof, Token, Wait, WatchFilter,
};
use picket_core::time::Instant;

impl World {
    fn acquire(&mut self, session: SessionId, key: &str, wait: bool) -> AcquireReply {
        self.request += 1;
        let command = Command::Acquire {
            session,
            proof: SessionProof::legacy(),
            request: RequestId(self.request),
            namespace: "orders".into(),
            key: key.into(),
            mode: LockMode::Exclusive,
            wait: wait.then_some(Wait::UNBOUNDED),
        };
        match self.apply(command) {
            Ok(Reply::Acquire(reply)) => reply,
            other => panic!("{other:?}"),
        }
    }

    fn fenced_class(&mut self) {
        let class = ClassSpec {
            name: "payments".into(),
            prefix: "pay/".into(),
            fenced: true,
            session_ttl_ms_default: 10_000,
            session_ttl_ms_max: 60_000,
            hold_ms_max_expected: 30_000,
            owner: "team-payments".into(),
            runbook_url: "https://runbooks.invalid/payments".into(),
            description: "one writer per ledger".into(),
        };
        let admin = Actor::new("owner", &[Role::ClassAdmin]);
        let reply = self.apply(Command::PutClass {
            actor: admin,
            namespace: "orders".into(),
            class,
        });
        assert_eq!(reply, Ok(Reply::ClassPut { replaced: false }));
    }

    fn request(
        &mut self,
        by: &Actor,
        key: &str,
        token: Token,
        revoke: bool,
    ) -> Result<Reply, LockError> {
        self.apply(Command::RequestForceRelease {
            actor: by.clone(),
            namespace: "orders".into(),
            key: key.into(),
            expected_token: token,
            holder: None,
            reason: "holder wedged, queue of 40".into(),
            revoke_session: revoke,
            checklist: Default::default(),
        })
    }

    fn approve(
        &mut self,
        by: &Actor,
        id: ForceReleaseId,
        fenced: bool,
    ) -> Result<Reply, LockError> {
        self.apply(Command::ApproveForceRelease {
            actor: by.clone(),
            id,
            acknowledged_fenced: fenced,
        })
    }
}

fn alice() -> Actor {
    Actor::new("alice", &[Role::OnCall])
}
fn bob() -> Actor {
    Actor::new("bob", &[Role::OnCall])
}
fn commander() -> Actor {
    Actor::new("carol", &[Role::IncidentCommander])
}

fn granted(reply: AcquireReply) -> Token {
    match reply {
        AcquireReply::Granted { token, .. } => token,
        other => panic!("{other:?}"),
    }
}

fn request_id(reply: Result<Reply, LockError>) -> ForceReleaseId {
    match reply {
        Ok(Reply::ForceReleaseRequested { id, .. }) => id,
        other => panic!("{other:?}"),
    }
}

#[test]
fn two_people_release_a_fenced_lock_and_its_revision_is_the_floor() {
    let mut w = World::at_fixed_time();
    w.fenced_class();
    let holder = w.session("stuck");
    let waiter = w.session("next");
    let token = granted(w.acquire(holder, "pay/ledger", false));
    assert_eq!(
        w.acquire(waiter, "pay/ledger", true),
        AcquireReply::Queued { position: 1 }
    );

    let requested = w.request(&alice(), "pay/ledger", token, false);
    let Ok(Reply::ForceReleaseRequested {
        id,
        fenced,
        safety,
        expires_at,
    }) = requested.clone()
    else {
        panic!("{requested:?}")
    };
    assert!(fenced);
    assert!(
        safety.contains("refuse the old holder's writes (its token and any lower)"),
        "{safety}"
    );
    assert_eq!(expires_at, Instant::from_millis(1_000 + 600_000));
    let info =
        w.sm.inspect("orders", "pay/ledger", Instant::from_millis(1_000))
            .unwrap();
    assert_eq!(info.pending_force_releases.len(), 1);
    assert!(info.class.fenced);

    // The requester cannot approve, even holding every role.
    let alice_all = Actor::new("alice", &[Role::OnCall, Role::IncidentCommander]);
    assert_eq!(
        w.approve(&alice_all, id, true),
        Err(LockError::ApproverIsRequester {
            id,
            principal: "alice".into()
        })
    );
    // The approver must acknowledge the fenced flag they were shown.
    assert_eq!(
        w.approve(&bob(), id, false),
        Err(LockError::FencedNotAcknowledged {
            id,
            fenced: true,
            acknowledged: false
        })
    );
    let approved = w.approve(&bob(), id, true).unwrap();
    let floor = w.sm.revision();
    assert_eq!(
        approved,
        Reply::ForceReleaseApproved {
            floor,
            released_token: token,
            next: Some((waiter, Token(floor.0))),
            session_revoked: None,
            fenced: true,
        }
    );
    let info =
        w.sm.inspect("orders", "pay/ledger", Instant::from_millis(1_000))
            .unwrap();
    assert_eq!(info.floor, Some(floor));
    let hold = info.holder.unwrap();
    assert_eq!(hold.session, waiter);
    assert!(hold.token.0 >= floor.0 && hold.token > token);
    assert!(info.pending_force_releases.is_empty());
    // The old holder's session is still live (no revocation) but no longer holds the key.
    assert_eq!(w.sm.session(holder).unwrap().holds, 0);
    // A second approval finds nothing.
    assert_eq!(
        w.approve(&commander(), id, true),
        Err(LockError::UnknownForceRelease { id })
    );

    let events =
        w.sm.watch(floor, &WatchFilter::default(), 10)
            .unwrap()
            .events;
    assert!(
        matches!(events[0].kind, EventKind::ForceReleased { session, token: t, request, session_revoked: false } if session == holder && t == token && request == id)
    );
    assert!(matches!(events[1].kind, EventKind::Granted { session, .. } if session == waiter));

    let audit = w.sm.audit(&AuditQuery {
        key: Some("pay/ledger".into()),
        ..AuditQuery::default()
    });
    let actions: Vec<_> = audit
        .records
        .iter()
        .map(|r| (r.action, r.actor.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            (AuditAction::ForceReleaseRequested, "alice"),
            (AuditAction::ForceReleaseApproved, "bob")
        ]
    );
    assert!(audit
        .records
        .iter()
        .all(|r| r.fenced == Some(true) && r.token == Some(token)));
    assert_eq!(audit.records[1].revision, floor);
    assert_eq!(audit.records[1].reason, "holder wedged, queue of 40");
}

/// Issue 16, finding 2: the class changed from fenced to advisory between request and approval;
/// the approval acknowledged "fenced" and went through, and the audit said fenced.
#[test]
fn the_class_kind_is_checked_when_approved_and_recorded_as_it_was_at_the_release() {
    let mut w = World::at_fixed_time();
    w.fenced_class();
    let holder = w.session("stuck");
    let token = granted(w.acquire(holder, "pay/ledger", false));
    let id = request_id(w.request(&alice(), "pay/ledger", token, false));
    // The class owner makes the prefix advisory while the request is pending.
    let advisory = ClassSpec {
        fenced: false,
        ..w.sm.class_of("orders", "pay/ledger").clone()
    };
    let admin = Actor::new("owner", &[Role::ClassAdmin]);
    let changed = w.apply(Command::PutClass {
        actor: admin,
        namespace: "orders".into(),
        class: advisory,
    });
    assert_eq!(changed, Ok(Reply::ClassPut { replaced: true }));
    let before = w.sm.snapshot();
    for ack in [true, false] {
        let refused = w.approve(&bob(), id, ack);
        assert_eq!(
            refused,
            Err(LockError::ClassKindChanged {
                id,
                namespace: "orders".into(),
                key: "pay/ledger".into(),
                requested_fenced: true,
                fenced: false,
            })
        );
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("advisory now but was fenced"), "{message}");
    }
    // Nothing changed but the revision: the holder still holds, the request still waits.
    let mut after = w.sm.snapshot();
    after.revision = before.revision;
    after.time = before.time;
    assert_eq!(after, before);
    // The listing says the pending one no longer matches its class.
    let listed = w.sm.force_releases_at(Instant::from_millis(w.now));
    assert_eq!(listed.len(), 1);
    assert!(listed[0].request.fenced && !listed[0].fenced_now);
    assert!(!listed[0].holder_changed);
    // A new request (the old one does not block it) shows the new kind.
    let requested = w.request(&alice(), "pay/ledger", token, false);
    let Ok(Reply::ForceReleaseRequested {
        id: second, fenced, ..
    }) = requested
    else {
        panic!("{requested:?}")
    };
    assert!(!fenced);
    let approved = w.approve(&bob(), second, false).unwrap();
    assert!(
        matches!(approved, Reply::ForceReleaseApproved { fenced: false, .. }),
        "{approved:?}"
    );
    let audit = w.sm.audit(&AuditQuery {
        revision_min: w.sm.revision(),
        ..AuditQuery::default()
    });
    assert_eq!(audit.records.len(), 1);
    assert_eq!(audit.records[0].action, AuditAction::ForceReleaseApproved);
    assert_eq!(audit.records[0].fenced, Some(false));
}

/// Issue 16, finding 6: a second request for the same key was accepted silently.
#[test]
fn a_second_request_for_a_pending_hold_is_refused_and_names_the_pending_one() {
    let mut w = World::at_fixed_time();
    let holder = w.session("stuck");
    let token = granted(w.acquire(holder, "a", false));
    let first = request_id(w.request(&alice(), "a", token, false));
    let before = w.sm.snapshot();
    let refused = w.request(&commander(), "a", token, true);
    assert_eq!(
        refused,
        Err(LockError::ForceReleasePending {
            id: first,
            namespace: "orders".into(),
            key: "a".into(),
            requester: "alice".into(),
        })
    );
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains(&format!("request {first} pending (by alice)")),
        "{message}"
    );
    let mut after = w.sm.snapshot();
    after.revision = before.revision;
    after.time = before.time;
    assert_eq!(after, before, "a refused request changes nothing");
    // Once the first is denied, a new one is accepted.
    let denied = w.apply(Command::DenyForceRelease {
        actor: bob(),
        id: first,
        reason: "wrong key".into(),
    });
    assert_eq!(denied, Ok(Reply::ForceReleaseDenied));
    request_id(w.request(&commander(), "a", token, true));
}

/// Issue 16, finding 6: `force-release list` showed requests that had expired minutes ago.
#[test]
fn the_listing_hides_requests_expired_at_read_time_and_marks_changed_holders() {
    let mut w = World::at_fixed_time();
    let holder = w.session("stuck");
    let token = granted(w.acquire(holder, "a", false));
    let token_b = granted(w.acquire(holder, "b", false));
    let a = request_id(w.request(&alice(), "a", token, false));
    let b = request_id(w.request(&alice(), "b", token_b, false));
    // The holder releases b itself: the request for b names a hold that is gone.
    w.request += 1;
    let released = w.apply(Command::Release {
        session: holder,
        proof: SessionProof::legacy(),
        request: RequestId(w.request),
        namespace: "orders".into(),
        key: "b".into(),
        token: token_b,
    });
    assert!(
        matches!(released, Ok(Reply::Released { .. })),
        "{released:?}"
    );
    let now = Instant::from_millis(w.now);
    let listed = w.sm.force_releases_at(now);
    let marks: Vec<_> = listed
        .iter()
        .map(|p| (p.request.id, p.holder_changed))
        .collect();
    assert_eq!(marks, [(a, false), (b, true)]);
    // Past the deadline, with no command applied since: the log still has them, a read does not.
    let late = now.add_ms(LockConfig::default().force_release_ttl_ms);
    assert_eq!(w.sm.force_release_requests().count(), 2);
    assert!(w.sm.force_releases_at(late).is_empty());
    let info = w.sm.inspect("orders", "a", late).unwrap();
    assert!(info.pending_force_releases.is_empty());
    let info = w.sm.inspect("orders", "a", now).unwrap();
    assert_eq!(info.pending_force_releases.len(), 1);
}

/// Issue 16, finding 3: a force-release without revocation never told the holder.
#[test]
fn a_hold_lost_without_revocation_is_kept_for_the_holders_keepalives_and_snapshots() {
    let mut w = World::at_fixed_time();
    let holder = w.session("stuck");
    let token = granted(w.acquire(holder, "a", false));
    assert!(w.sm.holds_lost(holder).is_empty());
    let id = request_id(w.request(&alice(), "a", token, false));
    w.approve(&bob(), id, false).unwrap();
    let floor = w.sm.revision();
    let lost = w.sm.holds_lost(holder);
    assert_eq!(lost.len(), 1);
    assert_eq!(
        (
            &*lost[0].namespace,
            &*lost[0].key,
            lost[0].token,
            lost[0].revision,
            lost[0].request
        ),
        ("orders", "a", token, floor, id)
    );
    let restored = LockStateMachine::restore(w.sm.snapshot()).unwrap();
    assert_eq!(restored.holds_lost(holder), lost);
    // Bounded: the newest are kept.
    for _ in 0..picket_core::locks::HOLDS_LOST_PER_SESSION_MAX + 3 {
        let token = granted(w.acquire(holder, "a", false));
        let id = request_id(w.request(&alice(), "a", token, false));
        w.approve(&bob(), id, false).unwrap();
    }
    let lost = w.sm.holds_lost(holder);
    assert_eq!(lost.len(), picket_core::locks::HOLDS_LOST_PER_SESSION_MAX);
    assert_eq!(lost.last().map(|l| l.revision), Some(w.sm.revision()));
    // A revoked session is gone instead (its keepalive says `lost`): nothing to keep.
    let token = granted(w.acquire(holder, "a", false));
    let id = request_id(w.request(&alice(), "a", token, true));
    w.approve(&bob(), id, false).unwrap();
    assert!(w.sm.holds_lost(holder).is_empty());
}

/// Issue 16, finding 6: the audit had no roles, floor, next holder or revocation.
#[test]
fn the_approval_record_names_both_people_with_roles_floor_next_holder_and_revocation() {
    let mut w = World::at_fixed_time();
    let holder = w.session("stuck");
    let waiter = w.session("next");
    let token = granted(w.acquire(holder, "a", false));
    w.acquire(waiter, "a", true);
    let id = request_id(w.request(&alice(), "a", token, false));
    w.approve(&commander(), id, false).unwrap();
    let floor = w.sm.revision();
    let audit = w.sm.audit(&AuditQuery::default());
    let request = &audit.records[0];
    assert_eq!(request.action, AuditAction::ForceReleaseRequested);
    assert_eq!(request.requester, "alice");
    assert!(request.actor_roles.contains(&Role::OnCall));
    assert_eq!(request.revoke_session, Some(false));
    let approval = &audit.records[1];
    assert_eq!(approval.action, AuditAction::ForceReleaseApproved);
    assert_eq!(approval.actor, "carol");
    assert!(approval.actor_roles.contains(&Role::IncidentCommander));
    assert_eq!(approval.requester, "alice");
    assert!(approval.requester_roles.contains(&Role::OnCall));
    assert_eq!(approval.floor, Some(floor));
    assert_eq!(approval.next, Some((waiter, Token(floor.0))));
    assert_eq!(approval.revoke_session, Some(false));
    assert_eq!(approval.fenced, Some(false));
    // The watch events say who each session is.
    let events =
        w.sm.watch(floor, &WatchFilter::default(), 10)
            .unwrap()
            .events;
    let names: Vec<_> = events
        .iter()
        .map(|e| e.identity.as_ref().map(|i| i.name.as_str()))
        .collect();
    assert_eq!(names, [Some("stuck"), Some("next")]);
}

#[test]
fn an_incident_commander_may_approve_but_not_alone() {
    let mut w = World::at_fixed_time();
    let holder = w.session("stuck");
    let token = granted(w.acquire(holder, "k", false));
    // The commander requests; the commander cannot approve their own request.
    let id = request_id(w.request(&commander(), "k", token, false));
    assert!(matches!(
        w.approve(&commander(), id, false),
        Err(LockError::ApproverIsRequester { .. })
    ));
    // An on-call approves it (advisory: acknowledges "not fenced").
    assert!(matches!(
        w.approve(&alice(), id, false),
        Ok(Reply::ForceReleaseApproved { next: None, .. })
    ));
    // The other way round: on-call requests, commander approves in place of a second on-call.
    let token = granted(w.acquire(holder, "k", false));
    let id = request_id(w.request(&alice(), "k", token, false));
    assert!(matches!(
        w.approve(&commander(), id, false),
        Ok(Reply::ForceReleaseApproved { .. })
    ));
    assert!(w
        .sm
        .inspect("orders", "k", Instant::ZERO)
        .unwrap()
        .holder
        .is_none());
}

#[test]
fn advisory_requests_say_two_writers_may_get_in() {
    let mut w = World::at_fixed_time();
    let holder = w.session("h");
    let token = granted(w.acquire(holder, "plain", false));
    let reply = w.request(&alice(), "plain", token, false).unwrap();
    let Reply::ForceReleaseRequested {
        fenced: false,
        safety,
        ..
    } = reply
    else {
        panic!("{reply:?}")
    };
    assert!(safety.contains("two writers"), "{safety}");
}

#[test]
fn revoking_the_session_releases_everything_in_the_same_revision() {
    let mut w = World::at_fixed_time();
    let holder = w.session("stuck");
    let other = w.session("other");
    let token = granted(w.acquire(holder, "a", false));
    let token_b = granted(w.acquire(holder, "b", false));
    assert_eq!(
        w.acquire(other, "b", true),
        AcquireReply::Queued { position: 1 }
    );
    let third = w.session("third");
    granted(w.acquire(third, "c", false));
    assert_eq!(
        w.acquire(holder, "c", true),
        AcquireReply::Queued { position: 1 }
    );

    let id = request_id(w.request(&alice(), "a", token, true));
    let reply = w.approve(&bob(), id, false).unwrap();
    let revision = w.sm.revision();
    assert_eq!(
        reply,
        Reply::ForceReleaseApproved {
            floor: revision,
            released_token: token,
            next: None,
            session_revoked: Some(holder),
            fenced: false,
        }
    );
    assert!(
        w.sm.session(holder).is_none(),
        "the holder's session is revoked"
    );
    let b = w.sm.inspect("orders", "b", Instant::ZERO).unwrap();
    assert_eq!(
        b.holder.as_ref().map(|h| (h.session, h.token)),
        Some((other, Token(revision.0)))
    );
    assert!(Token(revision.0) > token_b);
    assert_eq!(
        w.sm.inspect("orders", "c", Instant::ZERO)
            .unwrap()
            .queue_depth,
        0
    );

    let kinds: Vec<EventKind> =
        w.sm.watch(revision, &WatchFilter::default(), 100)
            .unwrap()
            .events
            .into_iter()
            .map(|e| e.kind)
            .collect();
    assert!(kinds.contains(&EventKind::WaitRemoved {
        session: holder,
        cause: ReleaseCause::SessionRevoked
    }));
    assert!(kinds.contains(&EventKind::ForceReleased {
        session: holder,
        token,
        request: id,
        session_revoked: true
    }));
    assert!(kinds.contains(&EventKind::Released {
        session: holder,
        token: token_b,
        cause: ReleaseCause::SessionRevoked
    }));
    assert!(kinds.contains(&EventKind::Granted {
        session: other,
        token: Token(revision.0),
        mode: LockMode::Exclusive,
        permit: None,
    }));
    let audit = w.sm.audit(&AuditQuery {
        revision_min: revision,
        ..AuditQuery::default()
    });
    let actions: Vec<_> = audit.records.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        [
            AuditAction::ForceReleaseApproved,
            AuditAction::SessionRevoked
        ]
    );
    assert_eq!(audit.records[1].session, Some(holder));
}

#[test]
fn a_request_fails_if_the_holder_or_token_changed() {
    let mut w = World::at_fixed_time();
    let holder = w.session("h");
    let token = granted(w.acquire(holder, "k", false));
    assert_eq!(
        w.request(&alice(), "k", Token(token.0 + 1), false),
        Err(LockError::TokenMismatch {
            namespace: "orders".into(),
            key: "k".into(),
            expected: Token(token.0 + 1),
            current: token
        })
    );
    let id = request_id(w.request(&alice(), "k", token, false));
    // The holder releases and takes the key again: a new token.
    w.request += 1;
    let release = Command::Release {
        session: holder,
        proof: SessionProof::legacy(),
        request: RequestId(w.request),
        namespace: "orders".into(),
        key: "k".into(),
        token,
    };
    assert!(w.apply(release).is_ok());
    let token2 = granted(w.acquire(holder, "k", false));
    assert!(token2 > token);
    let before = w.sm.snapshot();
    let refused = w.approve(&bob(), id, false);
    assert_eq!(
        refused,
        Err(LockError::HolderChanged {
            id,
            namespace: "orders".into(),
            key: "k".into(),
            session: holder,
            token
        })
    );
    assert_eq!(
        w.sm.snapshot().force_releases,
        before.force_releases,
        "the refusal changed nothing"
    );
    assert_eq!(
        w.sm.inspect("orders", "k", Instant::ZERO)
            .unwrap()
            .holder
            .unwrap()
            .token,
        token2
    );
    // A request on a free key is refused.
    assert!(matches!(
        w.request(&alice(), "free", Token(1), false),
        Err(LockError::NotHeld { .. })
    ));
}

#[test]
fn requests_expire_in_log_time_with_an_audit_record() {
    let mut w = World::at_fixed_time();
    let holder = w.session("h");
    let token = granted(w.acquire(holder, "k", false));
    let id = request_id(w.request(&alice(), "k", token, false));
    w.now += 600_000 - 1;
    assert!(w.sm.force_release_request(id).is_some());
    let _ = w.session("tick");
    assert!(
        w.sm.force_release_request(id).is_some(),
        "not expired one ms early"
    );
    w.now += 1;
    // Log time only comes from stamps: a stamp behind the log time does not move it back.
    let _ = w.sm.apply(
        Instant::from_millis(5),
        Command::ExpireSessions { sessions: vec![] },
    );
    assert!(w.sm.force_release_request(id).is_some());
    assert_eq!(
        w.approve(&bob(), id, false),
        Err(LockError::UnknownForceRelease { id })
    );
    let audit = w.sm.audit(&AuditQuery::default());
    let last = audit.records.last().unwrap();
    assert_eq!(last.action, AuditAction::ForceReleaseExpired);
    assert_eq!(last.request, Some(id));
    assert_eq!(last.time, Instant::from_millis(601_000));
    assert!(w
        .sm
        .inspect("orders", "k", Instant::ZERO)
        .unwrap()
        .holder
        .is_some());
}

#[test]
fn deny_roles_reasons_and_bounds() {
    let mut w = World::at_fixed_time();
    let holder = w.session("h");
    let token = granted(w.acquire(holder, "k", false));
    let nobody = Actor::new("mallory", &[Role::ClassAdmin]);
    assert!(matches!(
        w.request(&nobody, "k", token, false),
        Err(LockError::MissingRole { .. })
    ));
    let empty_reason = Command::RequestForceRelease {
        actor: alice(),
        namespace: "orders".into(),
        key: "k".into(),
        expected_token: token,
        holder: None,
        reason: "  ".into(),
        revoke_session: false,
        checklist: Default::default(),
    };
    assert_eq!(
        w.apply(empty_reason),
        Err(LockError::TextEmpty { field: "reason" })
    );
    let id = request_id(w.request(&alice(), "k", token, false));
    assert!(matches!(
        w.approve(&nobody, id, false),
        Err(LockError::MissingRole { .. })
    ));
    let deny = |actor: Actor, reason: &str| Command::DenyForceRelease {
        actor,
        id,
        reason: reason.into(),
    };
    assert!(matches!(
        w.apply(deny(nobody.clone(), "no")),
        Err(LockError::MissingRole { .. })
    ));
    assert_eq!(
        w.apply(deny(bob(), "")),
        Err(LockError::TextEmpty { field: "reason" })
    );
    assert_eq!(
        w.apply(deny(bob(), "holder is fine, it is a slow batch")),
        Ok(Reply::ForceReleaseDenied)
    );
    assert_eq!(
        w.apply(deny(bob(), "again")),
        Err(LockError::UnknownForceRelease { id })
    );
    let last =
        w.sm.audit(&AuditQuery::default())
            .records
            .last()
            .cloned()
            .unwrap();
    assert_eq!(
        (last.action, last.actor.as_str()),
        (AuditAction::ForceReleaseDenied, "bob")
    );

    // The pending bound.
    let mut w = World::at_fixed_time();
    w.sm = LockStateMachine::new(LockConfig {
        force_releases_pending_max: 1,
        ..LockConfig::default()
    });
    w.now = 1;
    let holder = w.session("h");
    let token = granted(w.acquire(holder, "k", false));
    let token_j = granted(w.acquire(holder, "j", false));
    request_id(w.request(&alice(), "k", token, false));
    assert_eq!(
        w.request(&bob(), "j", token_j, false),
        Err(LockError::TooManyForceReleases { max: 1 })
    );
    assert_eq!(w.sm.revision(), Revision(5));
}

mod random {
    //! Random sequences of holds, releases, expiries, classes and force-release steps by
    //! operators with various roles: the two-person rule and the floor hold after every command,
    //! and a refused command changes nothing but the revision and log time.

    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Acquire {
            session: usize,
            key: usize,
            wait: bool,
        },
        Release {
            session: usize,
            key: usize,
        },
        Expire {
            session: usize,
        },
        Fence {
            key: usize,
            fenced: bool,
        },
        Request {
            actor: usize,
            key: usize,
            stale: bool,
            revoke: bool,
        },
        Approve {
            actor: usize,
            request: usize,
            ack: bool,
        },
        Deny {
            actor: usize,
            request: usize,
        },
        Wait {
            ms: u64,
        },
    }

    const KEYS: [&str; 3] = ["a", "b", "c"];

    fn actors() -> [Actor; 4] {
        [
            alice(),
            bob(),
            commander(),
            Actor::new("mallory", &[Role::ClassAdmin]),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..3usize, 0..3usize, any::<bool>()).prop_map(|(session, key, wait)| Op::Acquire { session, key, wait }),
            2 => (0..3usize, 0..3usize).prop_map(|(session, key)| Op::Release { session, key }),
            1 => (0..3usize).prop_map(|session| Op::Expire { session }),
            1 => (0..3usize, any::<bool>()).prop_map(|(key, fenced)| Op::Fence { key, fenced }),
            4 => (0..4usize, 0..3usize, prop::bool::weighted(0.2), any::<bool>())
                .prop_map(|(actor, key, stale, revoke)| Op::Request { actor, key, stale, revoke }),
            4 => (0..4usize, 0..4usize, any::<bool>()).prop_map(|(actor, request, ack)| Op::Approve { actor, request, ack }),
            1 => (0..4usize, 0..4usize).prop_map(|(actor, request)| Op::Deny { actor, request }),
            1 => (1..400_000u64).prop_map(|ms| Op::Wait { ms }),
        ]
    }

    proptest! {
        #[test]
        fn two_person_rule_and_floors_hold(ops in prop::collection::vec(op(), 1..60)) {
            let mut w = World::at_fixed_time();
            let sessions: Vec<SessionId> = ["s0", "s1", "s2"].iter().map(|n| w.session(n)).collect();
            let mut expired = [false; 3];
            let mut requests: Vec<ForceReleaseId> = Vec::new();
            let actors = actors();
            for op in ops {
                let before = w.sm.snapshot();
                let command = match &op {
                    Op::Acquire { session, key, wait } => {
                        w.request += 1;
                        Command::Acquire { session: sessions[*session], proof: SessionProof::legacy(), request: RequestId(w.request), namespace: "orders".into(), key: KEYS[*key].into(), mode: LockMode::Exclusive, wait: (*wait).then_some(Wait::UNBOUNDED) }
                    }
                    Op::Release { session, key } => {
                        w.request += 1;
                        let token = w.sm.inspect("orders", KEYS[*key], Instant::ZERO).unwrap().holder.map_or(Token(1), |h| h.token);
                        Command::Release { session: sessions[*session], proof: SessionProof::legacy(), request: RequestId(w.request), namespace: "orders".into(), key: KEYS[*key].into(), token }
                    }
                    Op::Expire { session } => Command::ExpireSessions { sessions: vec![sessions[*session]] },
                    Op::Fence { key, fenced } => Command::PutClass {
                        actor: Actor::new("owner", &[Role::ClassAdmin]),
                        namespace: "orders".into(),
                        class: ClassSpec { name: "c".into(), prefix: KEYS[*key].into(), fenced: *fenced, ..ClassSpec::builtin_default(w.sm.config()) },
                    },
                    Op::Request { actor, key, stale, revoke } => {
                        let token = w.sm.inspect("orders", KEYS[*key], Instant::ZERO).unwrap().holder.map_or(Token(1), |h| h.token);
                        Command::RequestForceRelease {
                            actor: actors[*actor].clone(),
                            namespace: "orders".into(),
                            key: KEYS[*key].into(),
                            expected_token: if *stale { Token(token.0 + 1) } else { token },
                            holder: None,
                            reason: "stuck".into(),
                            revoke_session: *revoke,
                            checklist: Default::default(),
                        }
                    }
                    Op::Approve { actor, request, ack } => Command::ApproveForceRelease {
                        actor: actors[*actor].clone(),
                        id: requests.get(*request).copied().unwrap_or(ForceReleaseId(999)),
                        acknowledged_fenced: *ack,
                    },
                    Op::Deny { actor, request } => Command::DenyForceRelease {
                        actor: actors[*actor].clone(),
                        id: requests.get(*request).copied().unwrap_or(ForceReleaseId(999)),
                        reason: "no".into(),
                    },
                    Op::Wait { ms } => {
                        w.now += ms;
                        Command::ExpireSessions { sessions: vec![] }
                    }
                };
                let pending = match &command {
                    Command::ApproveForceRelease { id, .. } => w.sm.force_release_request(*id).cloned(),
                    _ => None,
                };
                let fenced_before = pending.as_ref().map(|r| w.sm.class_of(&r.namespace, &r.key).fenced);
                let approvable_before: Vec<_> = w.sm.force_releases_at(Instant::from_millis(w.now)).into_iter().filter(|p| !p.holder_changed && p.fenced_now == p.request.fenced).map(|p| p.request).collect();
                let outcome = w.apply(command.clone());
                match (&outcome, &command) {
                    (Ok(Reply::ForceReleaseRequested { id, .. }), Command::RequestForceRelease { key, .. }) => {
                        // Never two approvable requests for one hold.
                        prop_assert!(!approvable_before.iter().any(|r| &r.key == key), "{:?} pending", approvable_before);
                        requests.push(*id);
                    }
                    (Ok(Reply::ForceReleaseApproved { floor, released_token, next, session_revoked, fenced }), Command::ApproveForceRelease { actor, acknowledged_fenced, .. }) => {
                        let request = pending.expect("approved a pending request");
                        // Two people, the right roles, the fenced flag acknowledged.
                        prop_assert_ne!(&actor.principal, &request.requester);
                        prop_assert!(actor.has_any(picket_core::locks::FORCE_RELEASE_ROLES));
                        prop_assert_eq!(*acknowledged_fenced, request.fenced);
                        // ... and the class was of that kind at the release, as the audit says.
                        prop_assert_eq!(*fenced, request.fenced);
                        prop_assert_eq!(fenced_before, Some(request.fenced));
                        let record = w.sm.audit(&AuditQuery { revision_min: *floor, ..AuditQuery::default() });
                        prop_assert!(record.records.iter().any(|r| r.action == AuditAction::ForceReleaseApproved && r.fenced == Some(*fenced) && r.floor == Some(*floor)));
                        // A holder that keeps its session is told through its keepalives.
                        if session_revoked.is_none() {
                            let lost = w.sm.holds_lost(request.holder);
                            prop_assert!(lost.last().is_some_and(|l| l.token == *released_token && l.revision == *floor));
                        }
                        // The floor is this revision, above the released token; the next holder's token is the floor.
                        prop_assert_eq!(*floor, w.sm.revision());
                        prop_assert!(released_token.0 < floor.0);
                        if let Some((_, token)) = next {
                            prop_assert_eq!(token.0, floor.0);
                        }
                        prop_assert_eq!(session_revoked.is_some(), request.revoke_session);
                        if let Some(revoked) = session_revoked {
                            prop_assert!(w.sm.session(*revoked).is_none());
                            expired[sessions.iter().position(|s| s == revoked).unwrap()] = true;
                        }
                    }
                    (Ok(Reply::SessionsExpired { expired: ids }), _) => {
                        for id in ids {
                            expired[sessions.iter().position(|s| s == id).unwrap()] = true;
                        }
                    }
                    (Err(_), _) => {
                        let mut after = w.sm.snapshot();
                        after.revision = before.revision;
                        after.time = before.time;
                        // Expired requests are swept (with an audit record) before any command.
                        after.audit.retain(|r| r.action != AuditAction::ForceReleaseExpired);
                        let mut before = before.clone();
                        before.audit.retain(|r| r.action != AuditAction::ForceReleaseExpired);
                        before.force_releases.retain(|r| r.expires_at > after.time.max(w.sm.time()));
                        prop_assert_eq!(after, before, "{:?} changed the state", outcome);
                    }
                    _ => {}
                }
                prop_assert!(expired.iter().zip(&sessions).all(|(gone, s)| !*gone || w.sm.session(*s).is_none()));
            }
        }
    }
}

/// Before cluster version 2 (a cluster with replicas of release 0.1, which drop the checklist)
/// the checklist is ignored, so every replica applies a request alike; from 2 it is binding.
#[test]
fn the_advisory_checklist_binds_from_cluster_version_2_only() {
    use picket_core::locks::{Checklist, ChecklistAnswer};
    let unsafe_list = Checklist {
        holder_stopped: ChecklistAnswer::No,
        double_run_acceptable: ChecklistAnswer::No,
        statement: String::new(),
    };
    let ask = |w: &mut World, token: Token| {
        w.apply(Command::RequestForceRelease {
            actor: alice(),
            namespace: "orders".into(),
            key: "batch/nightly".into(),
            expected_token: token,
            holder: None,
            reason: "holder wedged".into(),
            revoke_session: false,
            checklist: unsafe_list.clone(),
        })
    };
    for (version, binding) in [(1, false), (2, true)] {
        let mut w = World::at_fixed_time();
        w.sm.begin_cluster_version(version);
        assert_eq!(w.sm.cluster_version(), version);
        let holder = w.session("stuck");
        let token = granted(w.acquire(holder, "batch/nightly", false));
        let asked = ask(&mut w, token);
        if binding {
            assert!(
                matches!(asked, Err(LockError::AdvisoryStatementRequired { .. })),
                "{asked:?}"
            );
        } else {
            let id = request_id(asked);
            let pending = w.sm.snapshot().force_releases;
            assert!(pending[0].checklist.is_empty(), "not recorded at 1");
            // Approved by an on-call engineer, as release 0.1 would.
            assert!(w.approve(&bob(), id, false).is_ok());
        }
    }
}
