//! A digest of the applied lock state: two replicas at the same revision must have the same
//! digest (their applied prefixes are identical), so comparing digests per revision finds a
//! divergence the moment it happens rather than when a client trips over it.
//!
//! FNV-1a (64 bits) over the `Debug` form of the replicated state: the revision, the log time,
//! the sessions (with their remembered replies), the lock table (holds, waiters, floors,
//! classes) and the pending force-releases, all kept in ordered maps, so the text (and the
//! digest) is a function of the state alone. The retained histories (watch events, audit
//! records) are left out: they are derived from the same commands and would make every digest
//! cost as much as the history is long. `restore(sm.snapshot())` has the same digest.
//!
//! Cost: O(state) per call, no allocation. It is an on-demand check (tests, the simulation's
//! applied-prefix checker, the driver's optional digest feed), not something to run on every
//! apply of a large production state.

use std::fmt::{self, Write};

use super::LockStateMachine;

/// FNV-1a, 64 bits, fed through `fmt::Write` (stable across Rust releases, unlike std's hasher).
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
}

impl Write for Fnv {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for byte in s.bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(Fnv::PRIME);
        }
        Ok(())
    }
}

impl LockStateMachine {
    /// The state digest at the current revision (see the module docs of `digest`).
    pub fn digest(&self) -> u64 {
        let mut fnv = Fnv(Fnv::OFFSET);
        // Writing into `Fnv` cannot fail, and `Debug` of these types does not either.
        let written = write!(
            fnv,
            "{:?}|{:?}|{:?}|{:?}|{:?}|{}",
            self.revision,
            self.time,
            self.sessions,
            self.namespaces,
            self.force_releases,
            self.cluster_version
        );
        assert!(written.is_ok(), "digest of revision {}", self.revision);
        fnv.0
    }
}

#[cfg(test)]
mod tests {
    use crate::locks::{
        Command, Identity, LockConfig, LockMode, LockStateMachine, RequestId, SessionId,
        SessionProof,
    };
    use crate::time::Instant;

    fn identity() -> Identity {
        Identity {
            name: "svc".into(),
            host: "h".into(),
            pid: 1,
            principal: "p".into(),
        }
    }

    fn acquire(key: &str, request: u64) -> Command {
        Command::Acquire {
            session: SessionId(1),
            proof: SessionProof::legacy(),
            request: RequestId(request),
            namespace: "ns".into(),
            key: key.into(),
            mode: LockMode::Exclusive,
            wait: None,
        }
    }

    fn run(commands: &[(u64, Command)]) -> LockStateMachine {
        let mut sm = LockStateMachine::new(LockConfig::default());
        for (ms, command) in commands {
            let _ = sm.apply(Instant::from_millis(*ms), command.clone());
        }
        sm
    }

    fn script() -> Vec<(u64, Command)> {
        vec![
            (
                10,
                Command::CreateSession {
                    secret_hash: None,
                    ttl_ms: None,
                    identity: identity(),
                },
            ),
            (11, acquire("a", 1)),
            (12, acquire("b", 2)),
        ]
    }

    #[test]
    fn same_commands_same_digest_and_a_restored_snapshot_keeps_it() {
        let a = run(&script());
        let b = run(&script());
        assert_eq!(a.digest(), b.digest());
        let restored = LockStateMachine::restore(a.snapshot()).expect("own snapshot restores");
        assert_eq!(restored.digest(), a.digest());
    }

    #[test]
    fn a_different_key_time_or_revision_changes_the_digest() {
        let base = run(&script());
        let mut other_key = script();
        other_key[2].1 = acquire("c", 2);
        assert_ne!(run(&other_key).digest(), base.digest());
        let mut other_time = script();
        other_time[2].0 = 13;
        assert_ne!(run(&other_time).digest(), base.digest());
        let mut one_more = script();
        one_more.push((13, acquire("a", 3)));
        let longer = run(&one_more);
        assert_eq!(longer.revision().0, base.revision().0 + 1);
        assert_ne!(longer.digest(), base.digest());
    }
}
