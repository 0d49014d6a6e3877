//! Who may act on a session (its secret, its principal), retried `CreateSession`, request ids
//! bound to their request, and how legacy (pre-secret) sessions, commands and remembered replies
//! behave. Every refusal changes nothing but the revision.

mod common;

use picket_core::locks::{
    AcquireReply, Command, Identity, LockConfig, LockError, LockMode, LockStateMachine, NotYours,
    RememberedReply, Reply, RequestId, SecretHash, SessionId, SessionProof, Token, Wait,
    UNAUTHENTICATED_PRINCIPAL,
};
use picket_core::time::Instant;

const SECRET: SecretHash = SecretHash([0x5a; 32]);
const OTHER_SECRET: SecretHash = SecretHash([0xa5; 32]);

fn identity(principal: &str) -> Identity {
    Identity {
        name: "billing".into(),
        host: "host-1".into(),
        pid: 42,
        principal: principal.into(),
    }
}

fn create_command(principal: &str, secret_hash: Option<SecretHash>) -> Command {
    Command::CreateSession {
        ttl_ms: None,
        identity: identity(principal),
        secret_hash,
    }
}

/// Applies and checks that an error changed nothing but revision and time.
fn apply(sm: &mut LockStateMachine, command: Command) -> Result<Reply, LockError> {
    let at = Instant::from_millis(1_000 + sm.revision().0);
    common::apply_checked(sm, at, command)
}

fn create(sm: &mut LockStateMachine, principal: &str, secret: Option<SecretHash>) -> SessionId {
    match apply(sm, create_command(principal, secret)) {
        Ok(Reply::SessionCreated { session, .. }) => session,
        other => panic!("{other:?}"),
    }
}

fn acquire(session: SessionId, proof: &SessionProof, request: u64, key: &str) -> Command {
    Command::Acquire {
        session,
        proof: proof.clone(),
        request: RequestId(request),
        namespace: "orders".into(),
        key: key.into(),
        mode: LockMode::Exclusive,
        wait: Some(Wait::UNBOUNDED),
    }
}

fn release(
    session: SessionId,
    proof: &SessionProof,
    request: u64,
    key: &str,
    token: Token,
) -> Command {
    Command::Release {
        session,
        proof: proof.clone(),
        request: RequestId(request),
        namespace: "orders".into(),
        key: key.into(),
        token,
    }
}

fn close(session: SessionId, proof: &SessionProof) -> Command {
    Command::CloseSession {
        session,
        proof: proof.clone(),
    }
}

fn not_yours(session: SessionId, why: NotYours) -> Result<Reply, LockError> {
    Err(LockError::SessionNotYours { session, why })
}

/// A session of `alice` holding `orders/first`, and its token.
fn victim(sm: &mut LockStateMachine) -> (SessionId, Token) {
    let session = create(sm, "alice", Some(SECRET));
    let proof = SessionProof::new(SECRET, "alice");
    match apply(sm, acquire(session, &proof, 1, "first")) {
        Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) => (session, token),
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_the_secret_and_the_owning_principal_act_on_a_session() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let (session, token) = victim(&mut sm);
    let mut attempts = common::not_alices(SECRET, OTHER_SECRET).to_vec();
    attempts.push((
        SessionProof::new(SECRET, UNAUTHENTICATED_PRINCIPAL),
        NotYours::OtherPrincipal {
            owner: "alice".into(),
            caller: UNAUTHENTICATED_PRINCIPAL.into(),
        },
    ));
    for (proof, why) in attempts {
        let commands = [
            release(session, &proof, 2, "first", token),
            acquire(session, &proof, 2, "second"),
            // A retry of the victim's own request id: not answered with its reply either.
            acquire(session, &proof, 1, "first"),
            close(session, &proof),
        ];
        for command in commands {
            assert_eq!(apply(&mut sm, command), not_yours(session, why.clone()));
        }
    }
    let refused = apply(
        &mut sm,
        close(session, &SessionProof::new(OTHER_SECRET, "alice")),
    )
    .unwrap_err();
    let message = refused.to_string();
    assert_eq!(
        message,
        format!("session {session} is not yours: the session secret presented is not its secret")
    );
    let owner = SessionProof::new(SECRET, "alice");
    assert_eq!(
        apply(&mut sm, release(session, &owner, 2, "first", token)),
        Ok(Reply::Released { token, next: None })
    );
    assert!(matches!(
        apply(&mut sm, close(session, &owner)),
        Ok(Reply::SessionClosed { .. })
    ));
}

#[test]
fn an_unauthenticated_session_is_bound_by_its_secret_alone() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let session = create(&mut sm, UNAUTHENTICATED_PRINCIPAL, Some(SECRET));
    let anyone = SessionProof::new(SECRET, "bob");
    assert!(apply(&mut sm, acquire(session, &anyone, 1, "k")).is_ok());
    assert_eq!(
        apply(
            &mut sm,
            acquire(session, &SessionProof::new(OTHER_SECRET, "bob"), 2, "k")
        ),
        not_yours(session, NotYours::WrongSecret)
    );
}

#[test]
fn a_retried_create_session_returns_the_same_session() {
    let mut sm = LockStateMachine::new(LockConfig {
        sessions_max: 1,
        ..LockConfig::default()
    });
    let first = sm.apply(
        Instant::from_millis(5),
        create_command("alice", Some(SECRET)),
    );
    let Ok(Reply::SessionCreated { session, ttl_ms }) = first else {
        panic!("{first:?}")
    };
    // Even at the session bound, and with another TTL asked: the first try's session.
    let retry = Command::CreateSession {
        ttl_ms: Some(ttl_ms + 1_000),
        identity: identity("alice"),
        secret_hash: Some(SECRET),
    };
    assert_eq!(
        apply(&mut sm, retry),
        Ok(Reply::SessionCreated { session, ttl_ms })
    );
    assert_eq!(sm.session_count(), 1);
    // The same secret from another principal is refused.
    let stolen = apply(&mut sm, create_command("mallory", Some(SECRET)));
    assert_eq!(stolen, Err(LockError::SessionSecretInUse { session }));
    // Once the session is closed, its secret opens a new session.
    let owner = SessionProof::new(SECRET, "alice");
    assert!(apply(&mut sm, close(session, &owner)).is_ok());
    let again = create(&mut sm, "alice", Some(SECRET));
    assert_ne!(again, session);
}

#[test]
fn a_reused_request_id_with_another_command_is_refused_naming_both() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let (session, token) = victim(&mut sm);
    let owner = SessionProof::new(SECRET, "alice");
    let reused = apply(&mut sm, acquire(session, &owner, 1, "second"));
    let Err(error) = reused else {
        panic!("{reused:?}")
    };
    assert_eq!(
        error.to_string(),
        format!(
            "request {} of session {session} was Acquire orders/first; this is Acquire \
             orders/second: a request id names one request, a new request needs a new id",
            RequestId(1)
        )
    );
    // Nobody holds `second`: the reused id was not granted it.
    assert!(sm
        .inspect("orders", "second", sm.time())
        .unwrap()
        .holder
        .is_none());
    // The same id as a release of the key it acquired is another command too.
    assert!(matches!(
        apply(&mut sm, release(session, &owner, 1, "first", token)),
        Err(LockError::RequestIdReused { .. })
    ));
    // A true retry is still answered.
    assert_eq!(
        apply(&mut sm, acquire(session, &owner, 1, "first")),
        Ok(Reply::Acquire(AcquireReply::Granted {
            token,
            permit: None
        }))
    );
    assert_eq!(
        apply(&mut sm, release(session, &owner, 2, "first", token)),
        Ok(Reply::Released { token, next: None })
    );
    for (command, this) in [
        (
            release(session, &owner, 2, "first", Token(token.0 + 1)),
            format!("Release orders/first with token {}", token.0 + 1),
        ),
        (
            acquire(session, &owner, 2, "first"),
            "Acquire orders/first".to_owned(),
        ),
    ] {
        assert_eq!(
            apply(&mut sm, command),
            Err(LockError::RequestIdReused {
                session,
                request: RequestId(2),
                was: format!("Release orders/first with token {}", token.0),
                this,
            })
        );
    }
    assert_eq!(
        apply(&mut sm, release(session, &owner, 2, "first", token)),
        Ok(Reply::Released { token, next: None })
    );
}

#[test]
fn legacy_sessions_answer_legacy_commands_only() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let session = create(&mut sm, "alice", None);
    let legacy = SessionProof::legacy();
    // An old log replays as it did: no secret, no principal.
    let token = match apply(&mut sm, acquire(session, &legacy, 1, "first")) {
        Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) => token,
        other => panic!("{other:?}"),
    };
    // A new command (it always carries a secret) cannot touch a legacy session.
    let new = SessionProof::new(SECRET, "alice");
    assert_eq!(
        apply(&mut sm, release(session, &new, 2, "first", token)),
        not_yours(session, NotYours::LegacySession)
    );
    // Legacy sessions are never the answer to a retried creation.
    let other = create(&mut sm, "alice", Some(SECRET));
    assert_ne!(other, session);
    assert!(apply(&mut sm, close(session, &legacy)).is_ok());
}

#[test]
fn a_remembered_reply_from_an_old_snapshot_answers_its_id_as_before() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let (session, token) = victim(&mut sm);
    let mut snapshot = sm.snapshot();
    // An old snapshot has no binding on its remembered replies.
    for remembered in &mut snapshot.sessions[0].replies {
        assert!(remembered.target.is_some());
        remembered.target = None;
    }
    assert_eq!(
        snapshot.sessions[0].replies[0].reply,
        RememberedReply::Acquire(AcquireReply::Granted {
            token,
            permit: None
        })
    );
    let mut old = LockStateMachine::restore(snapshot).unwrap();
    let owner = SessionProof::new(SECRET, "alice");
    // Today's behaviour for such a reply: the id is answered with it, whatever the command.
    let outcome = old.apply(
        Instant::from_millis(9_000),
        acquire(session, &owner, 1, "second"),
    );
    assert_eq!(
        outcome,
        Ok(Reply::Acquire(AcquireReply::Granted {
            token,
            permit: None
        }))
    );
    old.check_invariants();
    // Requests remembered after the restore are bound.
    assert!(old
        .apply(
            Instant::from_millis(9_001),
            acquire(session, &owner, 2, "third")
        )
        .is_ok());
    assert!(matches!(
        old.apply(
            Instant::from_millis(9_002),
            acquire(session, &owner, 2, "fourth")
        ),
        Err(LockError::RequestIdReused { .. })
    ));
}

#[test]
fn snapshots_keep_the_secret_index() {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let (session, _) = victim(&mut sm);
    let mut restored = LockStateMachine::restore(sm.snapshot()).unwrap();
    assert_eq!(restored, sm);
    assert_eq!(
        apply(&mut restored, create_command("alice", Some(SECRET))),
        Ok(Reply::SessionCreated {
            session,
            ttl_ms: LockConfig::default().session_ttl_ms_default
        })
    );
    let mut twice = sm.snapshot();
    let mut copy = twice.sessions[0].clone();
    copy.id = SessionId(copy.id.0 + 100);
    copy.replies.clear();
    copy.request_newest = None;
    twice.sessions.push(copy);
    let refused = LockStateMachine::restore(twice).unwrap_err();
    assert!(refused.rule.contains("same secret hash"), "{refused}");
}
