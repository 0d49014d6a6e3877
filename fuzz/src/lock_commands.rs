//! `lock_commands`: arbitrary command sequences into `picket_core::locks::LockStateMachine`.
//!
//! The first byte chooses one of two modes:
//! - **Model** (sessions, acquire in every mode, release, close, expire, retries, waits and
//!   cancels, semaphores declared, changed and removed): every answer must equal the
//!   plain model's (`picket_core::testkit::lock_model`, shared with `core/tests/locks_model.rs`), and so must
//!   the holders and queues of every key.
//! - **Wide** (every command kind, classes, semaphores and force releases included, with small vocabularies
//!   of names, tokens, ids and roles): no model; the general rules only.
//!
//! Checked after every command in both modes: `check_invariants()`; the revision advanced by
//! exactly one; an error changed nothing else; fresh grants give tokens strictly above every
//! earlier token of the key. Every 8th revision the state survives a snapshot round trip, and
//! now and then the run continues from the restored machine.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Result, Unstructured};
use picket_core::locks::{
    Actor, AuditAction, ClassSpec, Command, EventKind, ForceReleaseId, Identity, LockConfig,
    LockMode, LockSnapshot, LockStateMachine, Revision, Role, SecretHash, SessionId, SessionProof,
    Token, Wait, PERMITS_MAX,
};
use picket_core::time::Instant;

use picket_core::testkit::lock_model::{self, assert_same_state, Driver, Model, Op};

/// Commands per input.
const STEPS_MAX: usize = 128;

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(model_mode) = u.arbitrary::<bool>() else {
        return;
    };
    if model_mode {
        let _ = run_model(&mut u);
    } else {
        let _ = run_wide(&mut u);
    }
}

fn run_model(u: &mut Unstructured) -> Result<()> {
    let mut sm = LockStateMachine::new(lock_model::config());
    let mut model = Model::default();
    let mut driver = Driver::default();
    let mut last_tokens = BTreeMap::new();
    let mut checks = Checks::default();
    for step in 0..STEPS_MAX {
        let op = model_op(u)?;
        let command = driver.command(&op, &model);
        let stamp = Instant::from_millis(1_000 + step as u64);
        let outcome = checks.apply(&mut sm, stamp, command.clone());
        // The model's log time, as the state machine's (stamps rise here): wait deadlines
        // count from it.
        model.time_ms = stamp.as_millis();
        let expected = model.apply(&command);
        assert_eq!(outcome, expected, "step {step} command {command:?}");
        assert_eq!(sm.revision(), Revision(model.revision));
        driver.observe(&command, &outcome);
        assert_same_state(&sm, &model, &mut last_tokens);
        if u.ratio(1, 16)? {
            sm = LockStateMachine::restore(sm.snapshot()).expect("own snapshot restores");
        }
    }
    Ok(())
}

/// One step of the model mode (indexes are taken modulo their vocabulary by the model's driver).
fn model_op(u: &mut Unstructured) -> Result<Op> {
    let small = |u: &mut Unstructured| u.arbitrary::<u8>().map(usize::from);
    Ok(match u.int_in_range(0..=9u8)? {
        0 => Op::Create {
            ttl: small(u)?,
            secret: small(u)?,
            principal: small(u)?,
        },
        1 => Op::Close {
            session: small(u)?,
            proof: small(u)?,
        },
        2 => Op::Expire {
            sessions: (0..u.int_in_range(0..=3u8)?)
                .map(|_| small(u))
                .collect::<Result<_>>()?,
        },
        3 => Op::Acquire {
            session: small(u)?,
            ns: small(u)?,
            key: small(u)?,
            wait: u.arbitrary()?,
            timeout: small(u)?,
            proof: small(u)?,
            mode: small(u)?,
        },
        4 => Op::Release {
            session: small(u)?,
            ns: small(u)?,
            key: small(u)?,
            right_token: u.arbitrary()?,
            proof: small(u)?,
        },
        5 => Op::Retry {
            session: small(u)?,
            back: small(u)?,
        },
        7 => Op::Cancel {
            session: small(u)?,
            ns: small(u)?,
            key: small(u)?,
            proof: small(u)?,
        },
        8 => Op::ExpireWaits,
        9 => Op::SetSemaphore {
            ns: small(u)?,
            key: small(u)?,
            permits: small(u)?,
            admin: u.ratio(7, 8)?,
        },
        _ => Op::Reuse {
            session: small(u)?,
            back: small(u)?,
            key: small(u)?,
        },
    })
}

/// A command of any kind, over small vocabularies so that names, sessions and ids collide.
#[derive(Arbitrary, Debug, Clone)]
enum WideOp {
    Create {
        ttl: u8,
    },
    Close {
        session: u8,
    },
    Expire {
        sessions: Vec<u8>,
    },
    Acquire {
        session: u8,
        request: u8,
        ns: u8,
        key: u8,
        wait: bool,
        /// Exclusive, shared or permit (modulo 3).
        mode: u8,
    },
    SetSemaphore {
        actor: u8,
        ns: u8,
        key: u8,
        permits: u8,
    },
    Release {
        session: u8,
        request: u8,
        ns: u8,
        key: u8,
        token: u8,
    },
    PutClass {
        actor: u8,
        ns: u8,
        prefix: u8,
        fenced: bool,
        ttl: u8,
        ttl_max: u8,
    },
    RemoveClass {
        actor: u8,
        ns: u8,
        prefix: u8,
    },
    RequestForce {
        actor: u8,
        ns: u8,
        key: u8,
        token: u8,
        revoke: bool,
    },
    Approve {
        actor: u8,
        id: u8,
        ack: bool,
    },
    Deny {
        actor: u8,
        id: u8,
    },
    /// Log time jumps ahead (force releases expire).
    Wait {
        seconds: u16,
    },
    Restore,
}

const NAMESPACES: [&str; 3] = ["a", "b", "Bad"];
const KEYS: [&str; 4] = ["k1", "k2", "k2/x", ""];
const PREFIXES: [&str; 3] = ["", "k2", "k"];
const TTLS: [u64; 6] = [0, 999, 1_000, 10_000, 300_000, 300_001];

fn pick<'a>(items: &[&'a str], i: u8) -> &'a str {
    items[usize::from(i) % items.len()]
}

fn actor(i: u8) -> Actor {
    let roles: &[Role] = match i % 4 {
        0 => &[],
        1 => &[Role::OnCall],
        2 => &[Role::IncidentCommander],
        _ => &[Role::ClassAdmin],
    };
    // Two principals, so a requester sometimes approves their own request.
    Actor::new(if i % 8 < 4 { "alice" } else { "bob" }, roles)
}

/// A proof from a small vocabulary: one of the three secrets of `WideOp::Create`, or legacy.
fn proof(i: u8) -> SessionProof {
    match i % 4 {
        3 => SessionProof::legacy(),
        n => SessionProof::new(SecretHash([n; 32]), "p"),
    }
}

fn wide_config() -> LockConfig {
    LockConfig {
        sessions_max: 4,
        holds_per_session_max: 3,
        waiters_per_key_max: 2,
        dedup_window: 2,
        classes_per_namespace_max: 2,
        force_releases_pending_max: 2,
        ..LockConfig::default()
    }
}

fn wide_command(op: &WideOp, sessions: &[SessionId], now: &mut Instant) -> Option<Command> {
    let session = |i: u8| {
        sessions
            .get(usize::from(i % 6))
            .copied()
            .unwrap_or(SessionId(u64::from(i)))
    };
    let ttl = |i: u8| TTLS[usize::from(i) % TTLS.len()];
    Some(match op {
        WideOp::Create { ttl: t } => Command::CreateSession {
            // Three secrets: retried creations and secrets reused by another session happen.
            secret_hash: Some(SecretHash([*t % 3; 32])),
            ttl_ms: (*t % 7 != 0).then(|| ttl(*t)),
            identity: Identity {
                name: "svc".into(),
                host: "h".into(),
                pid: 1,
                principal: "p".into(),
            },
        },
        WideOp::Close { session: s } => Command::CloseSession {
            session: session(*s),
            proof: proof(*s),
        },
        WideOp::Expire { sessions: s } => Command::ExpireSessions {
            sessions: s.iter().take(4).map(|i| session(*i)).collect(),
        },
        WideOp::Acquire {
            session: s,
            request,
            ns,
            key,
            wait,
            mode,
        } => Command::Acquire {
            session: session(*s),
            proof: proof(*request),
            request: picket_core::locks::RequestId(u64::from(*request % 16)),
            namespace: pick(&NAMESPACES, *ns).into(),
            key: pick(&KEYS, *key).into(),
            mode: [LockMode::Exclusive, LockMode::Shared, LockMode::Permit][usize::from(*mode % 3)],
            wait: (*wait).then_some(Wait::UNBOUNDED),
        },
        WideOp::Release {
            session: s,
            request,
            ns,
            key,
            token,
        } => Command::Release {
            session: session(*s),
            proof: proof(*request),
            request: picket_core::locks::RequestId(u64::from(*request % 16)),
            namespace: pick(&NAMESPACES, *ns).into(),
            key: pick(&KEYS, *key).into(),
            token: Token(u64::from(*token)),
        },
        WideOp::PutClass {
            actor: a,
            ns,
            prefix,
            fenced,
            ttl: t,
            ttl_max,
        } => Command::PutClass {
            actor: actor(*a),
            namespace: pick(&NAMESPACES, *ns).into(),
            class: ClassSpec {
                name: format!("c{}", prefix % 3),
                prefix: pick(&PREFIXES, *prefix).into(),
                fenced: *fenced,
                session_ttl_ms_default: ttl(*t),
                session_ttl_ms_max: ttl(*ttl_max),
                hold_ms_max_expected: 0,
                owner: String::new(),
                runbook_url: String::new(),
                description: String::new(),
            },
        },
        WideOp::RemoveClass {
            actor: a,
            ns,
            prefix,
        } => Command::RemoveClass {
            actor: actor(*a),
            namespace: pick(&NAMESPACES, *ns).into(),
            prefix: pick(&PREFIXES, *prefix).into(),
        },
        WideOp::RequestForce {
            actor: a,
            ns,
            key,
            token,
            revoke,
        } => Command::RequestForceRelease {
            actor: actor(*a),
            namespace: pick(&NAMESPACES, *ns).into(),
            key: pick(&KEYS, *key).into(),
            expected_token: Token(u64::from(*token)),
            holder: None,
            reason: if *token % 5 == 0 { " " } else { "stuck" }.into(),
            revoke_session: *revoke,
            checklist: Default::default(),
        },
        WideOp::SetSemaphore {
            actor: a,
            ns,
            key,
            permits,
        } => Command::SetSemaphore {
            actor: actor(*a),
            namespace: pick(&NAMESPACES, *ns).into(),
            key: pick(&KEYS, *key).into(),
            permits: [0, 1, 2, 3, PERMITS_MAX, PERMITS_MAX + 1][usize::from(*permits % 6)],
            reason: if *permits % 7 == 0 { "" } else { "pool" }.into(),
        },
        WideOp::Approve { actor: a, id, ack } => Command::ApproveForceRelease {
            actor: actor(*a),
            id: ForceReleaseId(u64::from(*id)),
            acknowledged_fenced: *ack,
        },
        WideOp::Deny { actor: a, id } => Command::DenyForceRelease {
            actor: actor(*a),
            id: ForceReleaseId(u64::from(*id)),
            reason: "no".into(),
        },
        WideOp::Wait { seconds } => {
            *now = now.add_ms(u64::from(*seconds) * 1_000);
            return None;
        }
        WideOp::Restore => return None,
    })
}

fn run_wide(u: &mut Unstructured) -> Result<()> {
    let mut sm = LockStateMachine::new(wide_config());
    let mut checks = Checks::default();
    let mut sessions = Vec::new();
    let mut now = Instant::from_millis(1_000);
    for _ in 0..STEPS_MAX {
        let op: WideOp = u.arbitrary()?;
        if let WideOp::Restore = op {
            sm = LockStateMachine::restore(sm.snapshot()).expect("own snapshot restores");
            continue;
        }
        let Some(command) = wide_command(&op, &sessions, &mut now) else {
            continue;
        };
        now = now.add_ms(1);
        let outcome = checks.apply(&mut sm, now, command);
        if let Ok(picket_core::locks::Reply::SessionCreated { session, .. }) = outcome {
            sessions.push(session);
        }
    }
    Ok(())
}

/// The rules every command obeys, whatever it is.
#[derive(Default)]
struct Checks {
    /// Per key, the token of its last grant and whether that revision granted it exclusively.
    granted: BTreeMap<(String, String), LastGrant>,
}

/// The newest grant of one key, for the rule that tokens rise per key (docs/locks.md): several
/// holders granted in one revision (a run of shared waiters, semaphore permits) share its token;
/// an exclusive grant is the only grant of its key in its revision; any later grant's token is
/// higher.
struct LastGrant {
    token: u64,
    exclusive: bool,
}

impl Checks {
    fn apply(
        &mut self,
        sm: &mut LockStateMachine,
        stamp: Instant,
        command: Command,
    ) -> picket_core::locks::Outcome {
        let before = sm.snapshot();
        let outcome = sm.apply(stamp, command.clone());
        sm.check_invariants();
        assert_eq!(
            sm.revision().0,
            before.revision.0 + 1,
            "a command advances the revision by exactly one"
        );
        if outcome.is_err() {
            let (now, revision) = (sm.time(), sm.revision());
            assert_eq!(
                without_expiry(without_revision(sm.snapshot()), now, revision),
                without_expiry(without_revision(before), now, revision),
                "the error {outcome:?} of {command:?} changed the state"
            );
        }
        let page = sm
            .watch(sm.revision(), &Default::default(), usize::MAX)
            .expect("the newest revision is readable");
        for event in page.events {
            if let EventKind::Granted { token, mode, .. } = event.kind {
                let key = (event.namespace.to_string(), event.key.to_string());
                let exclusive = mode == LockMode::Exclusive;
                if let Some(last) = self.granted.get(&key) {
                    let shares_revision = token.0 == last.token && !exclusive && !last.exclusive;
                    assert!(
                        token.0 > last.token || shares_revision,
                        "token {token} ({mode:?}) of {key:?} after {} (exclusive: {})",
                        last.token,
                        last.exclusive
                    );
                }
                self.granted.insert(
                    key,
                    LastGrant {
                        token: token.0,
                        exclusive,
                    },
                );
            }
        }
        // The round trip costs a copy of the whole history: every 8th command is plenty.
        if sm.revision().0.is_multiple_of(8) {
            let restored = LockStateMachine::restore(sm.snapshot()).expect("own snapshot restores");
            assert_eq!(&restored, sm, "snapshot round trip");
        }
        outcome
    }
}

/// The snapshot without revision and log time, which every command advances.
/// Pending force-release requests whose deadline log time has reached are expired before every
/// command, with an audit record at that command's revision (docs/locks.md): housekeeping of log
/// time, not an effect of the command. Take it out before comparing an error's state.
fn without_expiry(mut snapshot: LockSnapshot, now: Instant, revision: Revision) -> LockSnapshot {
    snapshot.force_releases.retain(|r| now < r.expires_at);
    snapshot
        .audit
        .retain(|a| !(a.action == AuditAction::ForceReleaseExpired && a.revision == revision));
    snapshot
}

fn without_revision(mut snapshot: LockSnapshot) -> LockSnapshot {
    snapshot.revision = Revision(0);
    snapshot.time = Instant::ZERO;
    snapshot
}
