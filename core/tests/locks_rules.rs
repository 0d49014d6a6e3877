//! Sessions, locks, retries, classes, bounds and queries: each rule and each error.

mod common;
use common::{apply_checked, release_of};

use picket_core::locks::{
    AcquireReply, Actor, AuditAction, AuditQuery, ClassSpec, Command, Identity, LockConfig,
    LockError, LockMode, LockStateMachine, NameError, ReleaseCause, Reply, RequestId, Revision,
    Role, SessionId, SessionProof, Token, Wait, WaitEnd, WaitEndKind,
};
use picket_core::time::Instant;

fn identity(name: &str) -> Identity {
    Identity {
        name: name.into(),
        host: "host-1".into(),
        pid: 42,
        principal: format!("svc-{name}"),
    }
}

fn create(sm: &mut LockStateMachine, ttl_ms: Option<u64>) -> SessionId {
    match sm.apply(
        Instant::from_millis(10),
        Command::CreateSession {
            secret_hash: None,
            ttl_ms,
            identity: identity("svc"),
        },
    ) {
        Ok(Reply::SessionCreated { session, .. }) => session,
        other => panic!("{other:?}"),
    }
}

fn acquire(session: SessionId, request: u64, key: &str, wait: bool) -> Command {
    let wait = wait.then_some(Wait::UNBOUNDED);
    common::acquire_of(session, request, key, LockMode::Exclusive, wait)
}

/// Applies, checks that the command advanced the revision and that an error changed nothing
/// but revision and time.
fn apply(sm: &mut LockStateMachine, at: u64, command: Command) -> Result<Reply, LockError> {
    let before = sm.revision();
    let outcome = apply_checked(sm, Instant::from_millis(at), command);
    assert_eq!(
        sm.revision().0,
        before.0 + 1,
        "every command advances the revision"
    );
    outcome
}

fn granted(outcome: Result<Reply, LockError>) -> Token {
    match outcome {
        Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) => token,
        other => panic!("{other:?}"),
    }
}

#[test]
fn tokens_are_grant_revisions_and_waiters_are_fifo() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let a = create(&mut sm, None);
    let b = create(&mut sm, None);
    let c = create(&mut sm, None);
    let token = granted(apply(&mut sm, 20, acquire(a, 1, "k", false)));
    assert_eq!(token, Token(sm.revision().0));
    assert_eq!(
        apply(&mut sm, 21, acquire(b, 1, "k", false)),
        Ok(Reply::Acquire(AcquireReply::Busy { holder: a, token }))
    );
    assert_eq!(
        apply(&mut sm, 22, acquire(b, 2, "k", true)),
        Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
    );
    assert_eq!(
        apply(&mut sm, 23, acquire(c, 1, "k", true)),
        Ok(Reply::Acquire(AcquireReply::Queued { position: 2 }))
    );
    let released = apply(&mut sm, 30, release_of(a, 2, "k", token));
    let handoff = Token(sm.revision().0);
    assert_eq!(
        released,
        Ok(Reply::Released {
            token,
            next: Some((b, handoff))
        })
    );
    let info = sm.inspect("ns", "k", Instant::from_millis(100)).unwrap();
    let hold = info.holder.unwrap();
    assert_eq!(
        (hold.session, hold.token, hold.held_for_ms),
        (b, handoff, 70)
    );
    assert_eq!(hold.identity, identity("svc"));
    assert_eq!(hold.session_ttl_ms, 10_000);
    assert_eq!(
        hold.session_remaining_ms, None,
        "the Node fills the remaining TTL"
    );
    assert_eq!(info.floor, Some(sm.revision()));
    assert_eq!(info.queue_depth, 1);
    assert_eq!(info.waiters[0].session, c);
    assert_eq!(info.waiters[0].position, 1);
    assert_eq!(info.waiters[0].waiting_for_ms, 77);
    assert!(!info.class.fenced);
    assert_eq!(info.class.name, "default");
}

#[test]
fn from_cluster_version_2_a_hand_off_removes_the_expired_wait_at_the_head_of_its_queue() {
    for version in [1, 2] {
        let mut sm = LockStateMachine::new(LockConfig::default());
        sm.begin_cluster_version(version);
        let (holder, quick, patient) = (
            create(&mut sm, None),
            create(&mut sm, None),
            create(&mut sm, None),
        );
        let token = granted(apply(&mut sm, 20, acquire(holder, 1, "k", false)));
        let mut timed = acquire(quick, 1, "k", true);
        if let Command::Acquire { wait, .. } = &mut timed {
            *wait = Some(Wait::within_ms(100));
        }
        let queued = |position| Ok(Reply::Acquire(AcquireReply::Queued { position }));
        assert_eq!(apply(&mut sm, 30, timed), queued(1));
        assert_eq!(
            apply(&mut sm, 40, acquire(patient, 1, "k", true)),
            queued(2)
        );
        // A snapshot taken now restores the same rule (it carries the cluster version).
        let mut restored = LockStateMachine::restore(sm.snapshot()).expect("restores");
        // The release at quick's deadline (queued at 30 with 100 ms: due at 130), with no
        // `ExpireWaits` before it in the log.
        let release = release_of(holder, 2, "k", token);
        let outcome = apply(&mut sm, 130, release.clone());
        assert_eq!(
            apply(&mut restored, 130, release),
            outcome,
            "version {version}"
        );
        assert_eq!(restored.digest(), sm.digest(), "version {version}");
        let at = Token(sm.revision().0);
        let granted_wait = |session| WaitEnd {
            session,
            namespace: "ns".into(),
            key: "k".into(),
            kind: WaitEndKind::Granted {
                token: at,
                permit: None,
            },
        };
        if version == 1 {
            // Release 0.1's rule: the head is granted whatever its deadline (the log must carry
            // an `ExpireWaits` before the release: the leader writes one at this version).
            assert_eq!(
                outcome,
                Ok(Reply::Released {
                    token,
                    next: Some((quick, at))
                })
            );
            assert_eq!(sm.wait_ends(), [granted_wait(quick)]);
            continue;
        }
        // The release removes the expired wait in its own revision, then hands the key on.
        assert_eq!(
            outcome,
            Ok(Reply::Released {
                token,
                next: Some((patient, at))
            })
        );
        let expired = WaitEnd {
            session: quick,
            namespace: "ns".into(),
            key: "k".into(),
            kind: WaitEndKind::Removed {
                cause: ReleaseCause::WaitExpired,
            },
        };
        assert_eq!(sm.wait_ends(), [expired, granted_wait(patient)]);
        assert_eq!(sm.wait_deadline_next(), None);
    }
}

#[test]
fn retries_are_idempotent() {
    let mut sm = LockStateMachine::new(LockConfig {
        dedup_window: 2,
        ..LockConfig::default()
    });
    let a = create(&mut sm, None);
    let b = create(&mut sm, None);
    let token = granted(apply(&mut sm, 1, acquire(a, 1, "k", false)));
    // Same request id: same grant, no new token.
    assert_eq!(granted(apply(&mut sm, 2, acquire(a, 1, "k", false))), token);
    // A new request for a key already held: the same grant.
    assert_eq!(granted(apply(&mut sm, 2, acquire(a, 2, "k", true))), token);
    // A queued acquire retried after the grant answers the grant.
    assert_eq!(
        apply(&mut sm, 3, acquire(b, 1, "k", true)),
        Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
    );
    let released = apply(&mut sm, 4, release_of(a, 3, "k", token)).unwrap();
    let Reply::Released {
        next: Some((_, token_b)),
        ..
    } = released.clone()
    else {
        panic!("{released:?}")
    };
    assert_eq!(
        granted(apply(&mut sm, 5, acquire(b, 1, "k", true))),
        token_b
    );
    // A retried release answers the same, though the session no longer holds the key.
    assert_eq!(
        apply(&mut sm, 6, release_of(a, 3, "k", token)),
        Ok(released)
    );
    // Once out of the window (2 requests), a retry is refused, not re-applied.
    apply(&mut sm, 7, acquire(a, 4, "x", false)).unwrap();
    apply(&mut sm, 7, acquire(a, 5, "y", false)).unwrap();
    assert_eq!(
        apply(&mut sm, 8, release_of(a, 3, "k", token)),
        Err(LockError::RequestTooOld {
            session: a,
            request: RequestId(3),
            newest: RequestId(5)
        })
    );
    // An errored request is not remembered: its retry is evaluated again.
    let bad = Command::Acquire {
        session: a,
        proof: SessionProof::legacy(),
        request: RequestId(9),
        namespace: "BAD".into(),
        key: "k".into(),
        mode: LockMode::Exclusive,
        wait: None,
    };
    assert!(matches!(apply(&mut sm, 9, bad), Err(LockError::BadName(_))));
    assert!(matches!(
        apply(&mut sm, 9, acquire(a, 9, "z", false)),
        Ok(Reply::Acquire(AcquireReply::Granted { .. }))
    ));
}

#[test]
fn session_ttl_bounds_are_cluster_wide_and_per_class() {
    let config = LockConfig::default();
    let mut sm = LockStateMachine::new(config.clone());
    let bounds = |ttl_ms| LockError::SessionTtlOutOfBounds {
        ttl_ms,
        min: config.session_ttl_ms_min,
        max: config.session_ttl_ms_max,
    };
    let command = |ttl_ms| Command::CreateSession {
        secret_hash: None,
        ttl_ms: Some(ttl_ms),
        identity: identity("x"),
    };
    assert_eq!(apply(&mut sm, 1, command(999)), Err(bounds(999)));
    assert_eq!(apply(&mut sm, 1, command(300_001)), Err(bounds(300_001)));
    let long = create(&mut sm, Some(300_000));
    let short = create(&mut sm, Some(5_000));
    let class = ClassSpec {
        name: "quick".into(),
        prefix: "q/".into(),
        fenced: true,
        session_ttl_ms_default: 5_000,
        session_ttl_ms_max: 10_000,
        hold_ms_max_expected: 1_000,
        owner: "team".into(),
        runbook_url: "https://r.invalid".into(),
        description: "".into(),
    };
    let admin = Actor::new("owner", &[Role::ClassAdmin]);
    apply(
        &mut sm,
        2,
        Command::PutClass {
            actor: admin,
            namespace: "ns".into(),
            class,
        },
    )
    .unwrap();
    assert_eq!(
        apply(&mut sm, 3, acquire(long, 1, "q/1", false)),
        Err(LockError::SessionTtlAboveClassMax {
            ttl_ms: 300_000,
            class: "quick".into(),
            max: 10_000
        })
    );
    granted(apply(&mut sm, 3, acquire(long, 2, "other", false)));
    granted(apply(&mut sm, 3, acquire(short, 1, "q/1", false)));
    let info = sm.inspect("ns", "q/1", Instant::ZERO).unwrap();
    assert!(info.class.fenced);
    assert_eq!(info.holder.unwrap().hold_ms_max_expected, 1_000);
}

#[test]
fn closing_and_expiring_release_holds_and_waits_in_one_revision() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let a = create(&mut sm, None);
    let b = create(&mut sm, None);
    let c = create(&mut sm, None);
    granted(apply(&mut sm, 1, acquire(a, 1, "k1", false)));
    granted(apply(&mut sm, 1, acquire(a, 2, "k2", false)));
    apply(&mut sm, 1, acquire(b, 1, "k1", true)).unwrap();
    apply(&mut sm, 1, acquire(c, 1, "k1", true)).unwrap();
    apply(&mut sm, 1, acquire(c, 2, "k2", true)).unwrap();
    // b and a expire together: k1 skips b (its wait is removed first) and goes to c.
    let expired = apply(
        &mut sm,
        2,
        Command::ExpireSessions {
            sessions: vec![b, SessionId(77), a, a],
        },
    );
    assert_eq!(
        expired,
        Ok(Reply::SessionsExpired {
            expired: vec![a, b]
        })
    );
    let now = Token(sm.revision().0);
    assert_eq!(
        sm.inspect("ns", "k1", Instant::ZERO)
            .unwrap()
            .holder
            .map(|h| (h.session, h.token)),
        Some((c, now))
    );
    assert_eq!(
        sm.inspect("ns", "k2", Instant::ZERO)
            .unwrap()
            .holder
            .map(|h| (h.session, h.token)),
        Some((c, now))
    );
    let summary = sm.session(c).unwrap();
    assert_eq!((summary.holds, summary.waits), (2, 0));
    assert_eq!(
        apply(
            &mut sm,
            3,
            Command::CloseSession {
                session: c,
                proof: SessionProof::legacy()
            }
        ),
        Ok(Reply::SessionClosed {
            holds_released: 2,
            waits_removed: 0
        })
    );
    assert_eq!(
        apply(
            &mut sm,
            3,
            Command::CloseSession {
                session: c,
                proof: SessionProof::legacy()
            }
        ),
        Err(LockError::UnknownSession { session: c })
    );
    assert!(sm.list_holds("ns", Instant::ZERO, 10).unwrap().is_empty());
    assert_eq!(sm.session_count(), 0);
}

#[test]
fn every_lock_error_names_its_rule() {
    let mut sm = LockStateMachine::new(LockConfig {
        holds_per_session_max: 2,
        waiters_per_key_max: 1,
        sessions_max: 3,
        ..LockConfig::default()
    });
    let a = create(&mut sm, None);
    let b = create(&mut sm, None);
    let c = create(&mut sm, None);
    let ghost = SessionId(999);
    assert_eq!(
        apply(&mut sm, 1, acquire(ghost, 1, "k", false)),
        Err(LockError::UnknownSession { session: ghost })
    );
    assert_eq!(
        apply(&mut sm, 1, release_of(ghost, 1, "k", Token(1))),
        Err(LockError::UnknownSession { session: ghost })
    );
    assert_eq!(
        apply(
            &mut sm,
            1,
            Command::CreateSession {
                secret_hash: None,
                ttl_ms: None,
                identity: identity("d")
            }
        ),
        Err(LockError::TooManySessions { max: 3 })
    );
    let long_name = Identity {
        name: "n".repeat(257),
        ..identity("x")
    };
    assert!(matches!(
        apply(
            &mut sm,
            1,
            Command::CreateSession {
                secret_hash: None,
                ttl_ms: None,
                identity: long_name
            }
        ),
        Err(LockError::TextTooLong {
            field: "identity name",
            len: 257,
            max: 256
        })
    ));
    let empty_key = Command::Acquire {
        session: a,
        proof: SessionProof::legacy(),
        request: RequestId(1),
        namespace: "ns".into(),
        key: "".into(),
        mode: LockMode::Exclusive,
        wait: None,
    };
    assert_eq!(
        apply(&mut sm, 1, empty_key),
        Err(LockError::BadName(NameError::KeyEmpty))
    );
    let token = granted(apply(&mut sm, 1, acquire(a, 2, "k", false)));
    assert_eq!(
        apply(&mut sm, 1, release_of(b, 1, "k", token)),
        Err(LockError::NotHolder {
            namespace: "ns".into(),
            key: "k".into(),
            session: b
        })
    );
    assert_eq!(
        apply(&mut sm, 1, release_of(a, 3, "k", Token(token.0 + 1))),
        Err(LockError::WrongToken {
            namespace: "ns".into(),
            key: "k".into(),
            given: Token(token.0 + 1),
            current: token
        })
    );
    assert!(matches!(
        apply(&mut sm, 1, acquire(b, 2, "k", true)),
        Ok(Reply::Acquire(AcquireReply::Queued { position: 1 }))
    ));
    assert_eq!(
        apply(&mut sm, 1, acquire(c, 1, "k", true)),
        Err(LockError::TooManyWaiters {
            namespace: "ns".into(),
            key: "k".into(),
            max: 1
        })
    );
    granted(apply(&mut sm, 1, acquire(a, 4, "k2", false)));
    assert_eq!(
        apply(&mut sm, 1, acquire(a, 5, "k3", false)),
        Err(LockError::TooManyHolds { session: a, max: 2 })
    );
    // Busy is an answer, not an error, and is checked before the bound.
    assert!(matches!(
        apply(&mut sm, 1, acquire(a, 6, "k", false)),
        Ok(Reply::Acquire(AcquireReply::Granted { .. }))
    ));
    let message = LockError::TooManyHolds { session: a, max: 2 }.to_string();
    assert!(message.contains("at most 2 per session"), "{message}");
}

#[test]
fn classes_register_change_list_and_audit() {
    let mut sm = LockStateMachine::new(LockConfig {
        classes_per_namespace_max: 2,
        ..LockConfig::default()
    });
    let admin = Actor::new("owner", &[Role::ClassAdmin]);
    let class = |name: &str, prefix: &str, fenced: bool| ClassSpec {
        name: name.into(),
        prefix: prefix.into(),
        fenced,
        ..ClassSpec::builtin_default(&LockConfig::default())
    };
    let put = |class: ClassSpec| Command::PutClass {
        actor: admin.clone(),
        namespace: "ns".into(),
        class,
    };
    assert!(matches!(
        apply(
            &mut sm,
            1,
            Command::PutClass {
                actor: Actor::new("x", &[Role::OnCall]),
                namespace: "ns".into(),
                class: class("a", "", true)
            }
        ),
        Err(LockError::MissingRole { .. })
    ));
    assert_eq!(
        apply(&mut sm, 1, put(class("base", "", false))),
        Ok(Reply::ClassPut { replaced: false })
    );
    assert_eq!(
        apply(&mut sm, 2, put(class("ledger", "ledger/", true))),
        Ok(Reply::ClassPut { replaced: false })
    );
    assert_eq!(
        apply(&mut sm, 3, put(class("more", "m/", true))),
        Err(LockError::TooManyClasses {
            namespace: "ns".into(),
            max: 2
        })
    );
    assert_eq!(
        apply(&mut sm, 3, put(class("base2", "", true))),
        Ok(Reply::ClassPut { replaced: true })
    );
    assert_eq!(sm.class_of("ns", "ledger/7").name, "ledger");
    assert_eq!(sm.class_of("ns", "other").name, "base2");
    assert_eq!(sm.class_of("elsewhere", "other").name, "default");
    let names: Vec<String> = sm
        .classes("ns")
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["base2", "ledger"]);
    let remove = |prefix: &str| Command::RemoveClass {
        actor: admin.clone(),
        namespace: "ns".into(),
        prefix: prefix.into(),
    };
    assert_eq!(
        apply(&mut sm, 4, remove("ledger/")),
        Ok(Reply::ClassRemoved)
    );
    assert_eq!(
        apply(&mut sm, 4, remove("ledger/")),
        Err(LockError::UnknownClass {
            namespace: "ns".into(),
            prefix: "ledger/".into()
        })
    );
    assert_eq!(sm.class_of("ns", "ledger/7").name, "base2");
    let audit = sm.audit(&AuditQuery {
        namespace: Some("ns".into()),
        ..AuditQuery::default()
    });
    let actions: Vec<_> = audit.records.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        [
            AuditAction::ClassPut,
            AuditAction::ClassPut,
            AuditAction::ClassPut,
            AuditAction::ClassRemoved
        ]
    );
    assert!(audit.records[2].reason.contains("replaced"));
    assert!(matches!(sm.classes("NS"), Err(LockError::BadName(_))));
}

#[test]
fn holds_are_listed_by_age_and_the_longest_per_namespace() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let a = create(&mut sm, None);
    let b = create(&mut sm, None);
    apply(&mut sm, 100, acquire(a, 1, "zz", false)).unwrap();
    apply(&mut sm, 200, acquire(b, 1, "aa", false)).unwrap();
    let other = Command::Acquire {
        session: b,
        proof: SessionProof::legacy(),
        request: RequestId(2),
        namespace: "other".into(),
        key: "x".into(),
        mode: LockMode::Exclusive,
        wait: None,
    };
    apply(&mut sm, 300, other).unwrap();
    let holds = sm
        .list_holds("ns", Instant::from_millis(1_000), 10)
        .unwrap();
    let keys: Vec<(&str, u64)> = holds
        .iter()
        .map(|h| (h.key.as_str(), h.held_for_ms))
        .collect();
    assert_eq!(keys, [("zz", 900), ("aa", 800)]);
    assert_eq!(sm.list_holds("ns", Instant::ZERO, 1).unwrap().len(), 1);
    let longest: Vec<(String, String)> = sm
        .longest_holds(Instant::ZERO)
        .into_iter()
        .map(|h| (h.namespace, h.key))
        .collect();
    assert_eq!(
        longest,
        [
            ("ns".to_owned(), "zz".to_owned()),
            ("other".to_owned(), "x".to_owned())
        ]
    );
    assert!(sm
        .list_holds("empty", Instant::ZERO, 10)
        .unwrap()
        .is_empty());
    let sessions: Vec<(SessionId, u64)> = sm.sessions().map(|s| (s.id, s.ttl_ms)).collect();
    assert_eq!(sessions, [(a, 10_000), (b, 10_000)]);
    assert_eq!(sm.revision(), Revision(5));
}
