//! Snapshot round trips, restore of inconsistent snapshots, watch resume and compaction, audit
//! retention and queries.

use picket_core::locks::{
    AcquireReply, Actor, AuditAction, AuditQuery, ClassSpec, Command, EventKind, Identity,
    LockConfig, LockMode, LockSnapshot, LockStateMachine, Reply, RequestId, Revision, Role,
    SessionId, SessionProof, Token, Wait, WatchError, WatchFilter,
};
use picket_core::time::Instant;

fn create(sm: &mut LockStateMachine) -> SessionId {
    let identity = Identity {
        name: "svc".into(),
        host: "h".into(),
        pid: 3,
        principal: "p".into(),
    };
    match sm.apply(
        Instant::from_millis(5),
        Command::CreateSession {
            secret_hash: None,
            ttl_ms: None,
            identity,
        },
    ) {
        Ok(Reply::SessionCreated { session, .. }) => session,
        other => panic!("{other:?}"),
    }
}

fn acquire(ns: &str, session: SessionId, request: u64, key: &str) -> Command {
    Command::Acquire {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(request),
        namespace: ns.into(),
        key: key.into(),
        mode: LockMode::Exclusive,
        wait: Some(Wait::UNBOUNDED),
    }
}

/// A state with something of everything in it.
fn busy_state() -> LockStateMachine {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let a = create(&mut sm);
    let b = create(&mut sm);
    let admin = Actor::new("owner", &[Role::ClassAdmin]);
    let class = ClassSpec {
        name: "fenced".into(),
        prefix: "f/".into(),
        fenced: true,
        ..ClassSpec::builtin_default(sm.config())
    };
    sm.apply(
        Instant::from_millis(6),
        Command::PutClass {
            actor: admin,
            namespace: "ns".into(),
            class,
        },
    )
    .unwrap();
    sm.apply(Instant::from_millis(7), acquire("ns", a, 1, "f/1"))
        .unwrap();
    sm.apply(Instant::from_millis(8), acquire("ns", b, 1, "f/1"))
        .unwrap();
    sm.apply(Instant::from_millis(9), acquire("ns2", b, 2, "k"))
        .unwrap();
    let request = Command::RequestForceRelease {
        actor: Actor::new("alice", &[Role::OnCall]),
        namespace: "ns".into(),
        key: "f/1".into(),
        expected_token: Token(4),
        holder: None,
        reason: "stuck".into(),
        revoke_session: true,
        checklist: Default::default(),
    };
    sm.apply(Instant::from_millis(10), request).unwrap();
    sm.check_invariants();
    sm
}

#[test]
fn snapshot_round_trip_is_exact_and_the_restored_state_behaves_the_same() {
    let mut sm = busy_state();
    let snapshot = sm.snapshot();
    assert_eq!(snapshot.sessions.len(), 2);
    assert_eq!(snapshot.locks.len(), 2);
    assert_eq!(snapshot.classes.len(), 1);
    assert_eq!(snapshot.force_releases.len(), 1);
    assert!(!snapshot.audit.is_empty() && !snapshot.events.is_empty());
    assert_eq!(
        snapshot.sessions[0].replies.len(),
        1,
        "retry replies are part of the state"
    );
    let mut restored = LockStateMachine::restore(snapshot.clone()).unwrap();
    assert_eq!(restored, sm);
    assert_eq!(restored.snapshot(), snapshot);
    // Same commands, same outcomes, same states afterwards.
    let approve = Command::ApproveForceRelease {
        actor: Actor::new("bob", &[Role::OnCall]),
        id: snapshot.force_releases[0].id,
        acknowledged_fenced: true,
    };
    let commands = vec![
        approve,
        acquire("ns", SessionId(2), 3, "f/1"),
        Command::ExpireSessions {
            sessions: vec![SessionId(2)],
        },
    ];
    let a = sm.apply_batch(Instant::from_millis(50), commands.clone());
    let b = restored.apply_batch(Instant::from_millis(50), commands);
    assert_eq!(a, b);
    assert!(
        matches!(a[0], Ok(Reply::ForceReleaseApproved { .. })),
        "{a:?}"
    );
    assert_eq!(
        a[1],
        Ok(Reply::Acquire(AcquireReply::Granted {
            token: Token(8),
            permit: None
        }))
    );
    assert_eq!(restored.snapshot(), sm.snapshot());
}

#[test]
fn inconsistent_snapshots_are_refused_with_the_rule() {
    let good = busy_state().snapshot();
    let refuse = |snapshot, needle: &str| {
        let error = LockStateMachine::restore(snapshot).unwrap_err();
        assert!(error.to_string().contains(needle), "{error} lacks {needle}");
    };
    // `good` changed by `change`.
    let changed = |change: fn(&mut LockSnapshot)| {
        let mut s = good.clone();
        change(&mut s);
        s
    };
    let unlisted = changed(|s| {
        s.sessions.remove(0);
    });
    refuse(unlisted, "is not listed");
    refuse(
        changed(|s| s.sessions.push(s.sessions[0].clone())),
        "listed twice",
    );
    let holder_waits = changed(|s| {
        let holder = s.locks[0].holders[0].session;
        s.locks[0].waiters.push(picket_core::locks::WaiterSnapshot {
            session: holder,
            mode: LockMode::Exclusive,
            queued_at: Instant::ZERO,
            deadline: None,
        });
    });
    refuse(holder_waits, "holds or waits twice");
    refuse(
        changed(|s| s.locks.push(s.locks[0].clone())),
        "listed twice",
    );
    refuse(
        changed(|s| s.locks[0].namespace = "Bad".into()),
        "namespace",
    );
    refuse(
        changed(|s| s.locks[0].holders[0].token = Token(1_000)),
        "beyond revision",
    );
    refuse(
        changed(|s| s.locks[0].floor = Revision(s.locks[0].holders[0].token.0 + 1)),
        "below floor",
    );
    refuse(changed(|s| s.locks[0].holders.clear()), "without a holder");
    let mut s = changed(|s| {
        let second = s.locks[0].holders[0];
        s.locks[0].holders.push(second);
    });
    refuse(s.clone(), "exclusive with 2 holders");
    s.locks[0].mode = LockMode::Shared;
    refuse(s, "holds or waits twice");
    refuse(changed(|s| s.config.watch_retention = 1), "retention");
    refuse(changed(|s| s.config.dedup_window = 0), "dedup_window is 0");
    refuse(
        changed(|s| s.force_releases[0].expires_at = Instant::ZERO),
        "still pending",
    );
    let reversed = changed(|s| {
        let mut reversed: Vec<_> = s.events.iter().cloned().collect();
        reversed.reverse();
        s.events = reversed.into();
    });
    refuse(reversed, "out of revision order");
    // Found by the record_decode fuzzer: a snapshot over a bound was restored and the next
    // command tripped the per-command bound check (a panic instead of a refusal).
    refuse(
        changed(|s| s.config.force_releases_pending_max = 0),
        "1 pending force-releases, bound 0",
    );
    refuse(
        changed(|s| s.config.sessions_max = 1),
        "2 sessions, bound 1",
    );
    let future = changed(|s| {
        let mut future = s.events.back().unwrap().clone();
        future.revision = Revision(s.revision.0 + 1);
        s.events.push_back(future);
    });
    refuse(future, "beyond revision r7");
}

#[test]
fn watch_pages_resume_and_filter() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let a = create(&mut sm);
    let b = create(&mut sm);
    for (i, key) in ["x/1", "x/2", "y/1"].iter().enumerate() {
        sm.apply(
            Instant::from_millis(10),
            acquire("ns", a, i as u64 + 1, key),
        )
        .unwrap();
    }
    sm.apply(Instant::from_millis(10), acquire("ns", b, 1, "x/1"))
        .unwrap();
    sm.apply(Instant::from_millis(10), acquire("ns2", b, 2, "x/1"))
        .unwrap();
    // Closing a: three releases and a hand-off in one revision.
    sm.apply(
        Instant::from_millis(20),
        Command::CloseSession {
            session: a,
            proof: SessionProof::legacy(),
        },
    )
    .unwrap();
    let close = sm.revision();

    let all = sm
        .watch(Revision(0), &WatchFilter::default(), usize::MAX)
        .unwrap();
    assert_eq!(all.events.len(), 3 + 1 + 1 + 3 + 1);
    assert_eq!(all.resume_from, Revision(close.0 + 1));
    // Pages of 2 never split a revision and resume without repeats or gaps.
    let mut from = Revision(0);
    let mut seen = Vec::new();
    loop {
        let page = sm.watch(from, &WatchFilter::default(), 2).unwrap();
        if page.events.is_empty() {
            break;
        }
        seen.extend(page.events);
        from = page.resume_from;
    }
    assert_eq!(seen, all.events);
    let last_page = sm.watch(close, &WatchFilter::default(), 1).unwrap();
    assert_eq!(
        last_page.events.len(),
        4,
        "the whole close revision, beyond the limit"
    );

    let filter = WatchFilter {
        namespace: Some("ns".into()),
        key_prefix: "x/".into(),
    };
    let kinds: Vec<(String, EventKind)> = sm
        .watch(close, &filter, 100)
        .unwrap()
        .events
        .into_iter()
        .map(|e| (e.key.to_string(), e.kind))
        .collect();
    assert_eq!(kinds.len(), 3);
    assert!(kinds.contains(&(
        "x/1".into(),
        EventKind::Granted {
            session: b,
            token: Token(close.0),
            mode: LockMode::Exclusive,
            permit: None,
        }
    )));
    assert!(kinds.iter().all(|(key, _)| key.starts_with("x/")));
    let other_ns = WatchFilter {
        namespace: Some("ns2".into()),
        key_prefix: String::new(),
    };
    assert_eq!(
        sm.watch(Revision(0), &other_ns, 100).unwrap().events.len(),
        1
    );
    // Watching from the future waits there.
    let future = sm
        .watch(Revision(close.0 + 5), &WatchFilter::default(), 100)
        .unwrap();
    assert!(future.events.is_empty());
    assert_eq!(future.resume_from, Revision(close.0 + 5));
}

#[test]
fn watch_history_is_bounded_and_compaction_is_an_error() {
    let mut sm = LockStateMachine::new(LockConfig {
        watch_retention: 3,
        ..LockConfig::default()
    });
    let a = create(&mut sm);
    for i in 1..=5u64 {
        sm.apply(
            Instant::from_millis(10),
            acquire("ns", a, i, &format!("k{i}")),
        )
        .unwrap();
    }
    // Events at revisions 2..=6; only 4, 5, 6 are retained.
    assert_eq!(
        sm.watch(Revision(3), &WatchFilter::default(), 10),
        Err(WatchError::Compacted {
            requested: Revision(3),
            oldest_available: Revision(4)
        })
    );
    let page = sm.watch(Revision(4), &WatchFilter::default(), 10).unwrap();
    let revisions: Vec<u64> = page.events.iter().map(|e| e.revision.0).collect();
    assert_eq!(revisions, [4, 5, 6]);
    let message = sm
        .watch(Revision(1), &WatchFilter::default(), 10)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("compacted") && message.contains("r4"),
        "{message}"
    );
}

#[test]
fn audit_is_bounded_and_queryable_by_key_and_revision() {
    let mut sm = LockStateMachine::new(LockConfig {
        audit_retention: 3,
        ..LockConfig::default()
    });
    let admin = Actor::new("owner", &[Role::ClassAdmin]);
    for (i, ns) in ["n1", "n2", "n1", "n2", "n1"].iter().enumerate() {
        let class = ClassSpec {
            name: format!("c{i}"),
            prefix: format!("p{i}/"),
            ..ClassSpec::builtin_default(sm.config())
        };
        sm.apply(
            Instant::from_millis(i as u64),
            Command::PutClass {
                actor: admin.clone(),
                namespace: (*ns).into(),
                class,
            },
        )
        .unwrap();
    }
    let page = sm.audit(&AuditQuery::default());
    let revisions: Vec<u64> = page.records.iter().map(|r| r.revision.0).collect();
    assert_eq!(revisions, [3, 4, 5]);
    assert_eq!(page.compacted_through, Revision(2));
    let n1 = sm.audit(&AuditQuery {
        namespace: Some("n1".into()),
        ..AuditQuery::default()
    });
    assert_eq!(
        n1.records.iter().map(|r| r.revision.0).collect::<Vec<_>>(),
        [3, 5]
    );
    let range = sm.audit(&AuditQuery {
        revision_min: Revision(4),
        revision_max: Revision(4),
        ..AuditQuery::default()
    });
    assert_eq!(range.records.len(), 1);
    assert_eq!(range.records[0].action, AuditAction::ClassPut);
    assert_eq!(range.records[0].actor, "owner");
    let by_key = sm.audit(&AuditQuery {
        key: Some("p4/".into()),
        limit: 5,
        ..AuditQuery::default()
    });
    assert_eq!(by_key.records.len(), 1);
    let limited = sm.audit(&AuditQuery {
        limit: 2,
        ..AuditQuery::default()
    });
    assert_eq!(limited.records.len(), 2);
}

/// Issue 33: the three membership changes of a `dev-join` walk were recorded with one revision
/// and the log time of the command before them (from before the new replica started), and
/// without the roles they were asked with. A stamped change takes a revision of its own at its
/// stamp; an unstamped one (an older release's log) replays as it was acknowledged.
#[test]
fn a_stamped_membership_change_takes_its_own_revision_and_time() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    create(&mut sm);
    let before = sm.revision();
    let roles: std::collections::BTreeSet<Role> = [Role::ClassAdmin].into();
    sm.record_membership_change(None, "old", roles.clone(), "r0", "voters n1".into());
    assert_eq!(
        sm.revision(),
        before,
        "an unstamped change takes no revision"
    );
    for (i, stamp) in [5_000u64, 5_000, 7_000].into_iter().enumerate() {
        sm.record_membership_change(
            Some(Instant::from_millis(stamp)),
            "alice",
            roles.clone(),
            &format!("r{}", i + 1),
            format!("voters n1 learners n{}", i + 2),
        );
    }
    assert_eq!(sm.revision(), Revision(before.0 + 3));
    assert_eq!(sm.time(), Instant::from_millis(7_000));
    let page = sm.audit(&AuditQuery::default());
    let changes: Vec<(u64, u64, &str)> = page
        .records
        .iter()
        .filter(|r| r.action == AuditAction::MembershipChanged)
        .map(|r| (r.revision.0, r.time.as_millis(), r.reason.as_str()))
        .collect();
    let b = before.0;
    assert_eq!(
        changes,
        [
            (b, 5, "r0"),
            (b + 1, 5_000, "r1"),
            (b + 2, 5_000, "r2"),
            (b + 3, 7_000, "r3"),
        ]
    );
    assert!(page
        .records
        .iter()
        .all(|r| r.action != AuditAction::MembershipChanged || r.actor_roles == roles));
    // A command after them goes on from their revision.
    create(&mut sm);
    assert_eq!(sm.revision(), Revision(b + 4));
}

/// Issue 37: a backup is on the replicated record (who took the sessions' secret hashes), and
/// only a class admin may ask for one.
#[test]
fn a_snapshot_save_is_recorded_for_a_class_admin_only() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let before = sm.revision();
    let stranger = Actor::new("mallory", &[Role::OnCall]);
    assert!(matches!(
        sm.apply(
            Instant::from_millis(9),
            Command::RecordSnapshotSave { actor: stranger }
        ),
        Err(picket_core::locks::LockError::MissingRole { .. })
    ));
    let admin = Actor::new("alice", &[Role::ClassAdmin]);
    assert_eq!(
        sm.apply(
            Instant::from_millis(10),
            Command::RecordSnapshotSave { actor: admin }
        ),
        Ok(Reply::SnapshotSaveRecorded)
    );
    let page = sm.audit(&AuditQuery::default());
    let saves: Vec<_> = page
        .records
        .iter()
        .filter(|r| r.action == AuditAction::SnapshotSaved)
        .collect();
    assert_eq!(saves.len(), 1, "the refused one is not recorded");
    assert_eq!(saves[0].actor, "alice");
    assert_eq!(saves[0].revision, Revision(before.0 + 2));
    assert!(saves[0].actor_roles.contains(&Role::ClassAdmin));
}
