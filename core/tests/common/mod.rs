//! The lock state machine fixture the `locks_*` tests share: one state machine, its log time
//! and the next request id, with the checks every applied command gets.
#![allow(dead_code)] // each test file uses part of it

pub mod script;

use picket_core::locks::{
    Actor, Command, ForceReleaseId, Identity, KeyInfo, LockConfig, LockError, LockMode,
    LockStateMachine, NotYours, Reply, RequestId, Revision, SecretHash, SessionId, SessionProof,
    Token, Wait, WaitEndKind,
};
use picket_core::time::Instant;

/// An acquire of the key `ns`/`key` in `mode` by `session` (a legacy proof) as its request
/// `request`, waiting as `wait` says (not at all: `None`).
pub fn acquire_of(
    session: SessionId,
    request: u64,
    key: &str,
    mode: LockMode,
    wait: Option<Wait>,
) -> Command {
    Command::Acquire {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(request),
        namespace: "ns".into(),
        key: key.into(),
        mode,
        wait,
    }
}

/// A release of `session`'s hold of the key `ns`/`key` (`token`) as its request `request`.
pub fn release_of(session: SessionId, request: u64, key: &str, token: Token) -> Command {
    Command::Release {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(request),
        namespace: "ns".into(),
        key: key.into(),
        token,
    }
}

/// The proofs that do not act on alice's session made with `secret`, and why: another secret
/// (`other`), none at all, and mallory with the right secret.
pub fn not_alices(secret: SecretHash, other: SecretHash) -> [(SessionProof, NotYours); 3] {
    [
        (SessionProof::new(other, "alice"), NotYours::WrongSecret),
        (SessionProof::legacy(), NotYours::SecretMissing),
        (
            SessionProof::new(secret, "mallory"),
            NotYours::OtherPrincipal {
                owner: "alice".into(),
                caller: "mallory".into(),
            },
        ),
    ]
}

/// Applies `command` to `sm` at `at` and checks the invariants, and that an error changed
/// nothing but the revision and the time.
pub fn apply_checked(
    sm: &mut LockStateMachine,
    at: Instant,
    command: Command,
) -> Result<Reply, LockError> {
    let before = sm.snapshot();
    let outcome = sm.apply(at, command);
    sm.check_invariants();
    if outcome.is_err() {
        let mut after = sm.snapshot();
        after.revision = before.revision;
        after.time = before.time;
        assert_eq!(after, before, "the error {outcome:?} changed the state");
    }
    outcome
}

pub struct World {
    pub sm: LockStateMachine,
    /// Log time (ms) of the next command.
    pub now: u64,
    /// The last request id handed out.
    pub request: u64,
    /// Whether every command moves log time 1 ms on and is checked hard (an error changed
    /// nothing but the revision; the snapshot round-trips); else log time stays where the test
    /// puts it and only the invariants are checked.
    strict: bool,
}

impl World {
    /// A fresh state at log time 1 s; each command 1 ms later, checked hard.
    pub fn new() -> World {
        World {
            sm: LockStateMachine::new(LockConfig::default()),
            now: 1_000,
            request: 0,
            strict: true,
        }
    }

    /// A fresh state whose log time stays at 1 s until the test moves `now` (deadlines then
    /// read as round numbers).
    pub fn at_fixed_time() -> World {
        World {
            strict: false,
            ..World::new()
        }
    }

    /// Applies one command and checks the invariants (and, when strict, that an error changed
    /// nothing but the revision, and the snapshot round trip).
    pub fn apply(&mut self, command: Command) -> Result<Reply, LockError> {
        if !self.strict {
            let outcome = self.sm.apply(Instant::from_millis(self.now), command);
            self.sm.check_invariants();
            return outcome;
        }
        self.now += 1;
        let outcome = apply_checked(&mut self.sm, Instant::from_millis(self.now), command);
        let restored = LockStateMachine::restore(self.sm.snapshot()).expect("restores");
        assert_eq!(restored, self.sm, "snapshot round trip");
        outcome
    }

    /// A session whose principal and name are `name`.
    pub fn session(&mut self, name: &str) -> SessionId {
        let identity = Identity {
            name: name.into(),
            host: "host".into(),
            pid: 1,
            principal: name.into(),
        };
        match self.apply(Command::CreateSession {
            secret_hash: None,
            ttl_ms: None,
            identity,
        }) {
            Ok(Reply::SessionCreated { session, .. }) => session,
            other => panic!("{other:?}"),
        }
    }

    /// An acquire of the key `ns`/`k` in `mode` by `session`, as its next request, waiting as
    /// `wait` says (not at all: `None`).
    pub fn acquire_command(
        &mut self,
        session: SessionId,
        mode: LockMode,
        wait: Option<Wait>,
    ) -> Command {
        self.request += 1;
        acquire_of(session, self.request, "k", mode, wait)
    }

    /// Releases `session`'s hold of `ns`/`k` (`token`): the waiter granted it next, if any.
    pub fn release(&mut self, session: SessionId, token: Token) -> Option<(SessionId, Token)> {
        self.request += 1;
        match self.apply(release_of(session, self.request, "k", token)) {
            Ok(Reply::Released { next, .. }) => next,
            other => panic!("{other:?}"),
        }
    }

    /// The inspection of `ns`/`k` (at time zero).
    pub fn inspect_k(&self) -> KeyInfo {
        self.sm.inspect("ns", "k", Instant::ZERO).unwrap()
    }

    /// (session, token, permit slot) of every waiter the last command granted the key to.
    pub fn granted_permits(&self) -> Vec<(SessionId, Token, Option<u32>)> {
        self.sm
            .wait_ends()
            .iter()
            .filter_map(|end| match end.kind {
                WaitEndKind::Granted { token, permit } => {
                    Some((end.session, token, permit.map(|p| p.0)))
                }
                WaitEndKind::Removed { .. } => None,
            })
            .collect()
    }

    /// Sessions named (and owned by) `names`, in order.
    pub fn sessions<const N: usize>(&mut self, names: [&str; N]) -> [SessionId; N] {
        names.map(|name| self.session(name))
    }

    /// `actor` approves the advisory force-release `id`: the key's new floor, the released token
    /// and the waiter granted it next, if any.
    pub fn approve_advisory(
        &mut self,
        actor: Actor,
        id: ForceReleaseId,
    ) -> (Revision, Token, Option<(SessionId, Token)>) {
        let approve = Command::ApproveForceRelease {
            actor,
            id,
            acknowledged_fenced: false,
        };
        match self.apply(approve) {
            Ok(Reply::ForceReleaseApproved {
                floor,
                released_token,
                next,
                ..
            }) => (floor, released_token, next),
            other => panic!("approval refused: {other:?}"),
        }
    }
}
