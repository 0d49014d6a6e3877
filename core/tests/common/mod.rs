//! The lock state machine fixture the `locks_*` tests share: one state machine, its log time
//! and the next request id, with the checks every applied command gets.
#![allow(dead_code)] // each test file uses part of it

pub mod script;

use picket_core::locks::{
    Command, Identity, LockConfig, LockError, LockStateMachine, Reply, SessionId,
};
use picket_core::time::Instant;

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
        let before = self.sm.snapshot();
        let outcome = self.sm.apply(Instant::from_millis(self.now), command);
        self.sm.check_invariants();
        if outcome.is_err() {
            let mut after = self.sm.snapshot();
            after.revision = before.revision;
            after.time = before.time;
            assert_eq!(after, before, "the error {outcome:?} changed the state");
        }
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
}
