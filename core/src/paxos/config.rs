//! Static configuration of one replica.

use thiserror::Error;

use super::ballot::NodeId;
use crate::faults::Faults;

/// α unless configured otherwise. It is a rule of the whole cluster: every replica must use the
/// same α (a change's effect is computed from it), so picketd does not make it configurable.
pub const RECONFIG_DELAY_SLOTS_DEFAULT: usize = 64;

/// The clock-rate bound read leases assume unless configured otherwise: 1 %, the margin the
/// client library already takes off session TTLs (docs/client.md).
pub const CLOCK_DRIFT_PPM_DEFAULT: u64 = 10_000;

/// Configuration of one replica.
///
/// `members` is the cluster's first membership (3 or 5 voters, `id` among them), which governs
/// the log until a membership change (`Value::Reconfig`) says otherwise; a replica restarted
/// from a snapshot takes the membership recorded with it. A replica that `joins` a running
/// cluster is not in `members` (its seeds): it votes on nothing until a change names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub id: NodeId,
    /// The first membership's voters, 3 or 5 distinct ids, none of them 0; for a joining
    /// replica, the members it may hear from before it learns the membership.
    pub members: Vec<NodeId>,
    /// `members` is only a contact list (this replica not in it): a new replica joining a
    /// running cluster, or one that lost its disk and rejoins with a short list. Until it has
    /// learned the cluster's first membership from a contact (or restored it from storage) it
    /// neither campaigns nor recovers.
    pub joining: bool,
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub heartbeat_ms: u64,
    /// Slots in flight (proposed, not yet chosen) at most.
    pub window_slots: usize,
    /// Commands per slot (batch) at most.
    pub batch_commands_max: usize,
    /// Commands waiting for a slot at most; also bounds pending reads.
    pub pending_max: usize,
    /// α: a membership change chosen at slot s governs the slots from s + α on; the leader
    /// proposes at slot i only once it has applied every slot up to i - α.
    pub reconfig_delay_slots: usize,
    /// Read leases (`read_index.rs`): 0 turns them off (every read waits for a heartbeat
    /// round: read-index). Otherwise, as leader, the lease this replica asks its heartbeats'
    /// receivers for; as acceptor, the longest it grants (it grants none when 0), and how long
    /// after it starts it promises no other proposer's ballot (a lease its previous run
    /// granted may still run).
    pub read_lease_ms: u64,
    /// The bound on clock rate differences the lease assumes, in parts per million: a leader
    /// trusts a lease of `d` ms for `d - lease_margin_ms(d)` ms of its own clock.
    pub clock_drift_ppm: u64,
    /// Seed of the election-jitter RNG.
    pub seed: u64,
    /// Planted bugs and injected faults ([`Faults`]): none ([`Faults::NONE`]) but in tests.
    /// The node and its lock state machine read theirs from here too.
    pub faults: Faults,
}

/// How much of a lease of `lease_ms` a leader gives up for clock drift: with every clock's rate
/// within `ppm` of true time, `lease_ms` on the granter's clock lasts at least
/// `lease_ms (1 - ρ) / (1 + ρ)` > `lease_ms (1 - 2ρ)` on the leader's, so the margin is
/// `2ρ lease_ms` rounded up, plus 1 ms for the rounding of `Instant` to milliseconds.
pub fn lease_margin_ms(lease_ms: u64, ppm: u64) -> u64 {
    (lease_ms.saturating_mul(2).saturating_mul(ppm)).div_ceil(1_000_000) + 1
}

/// A configuration the replica refuses, naming the rule broken.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("membership must have 3 or 5 replicas, got {0}")]
    MembersCount(usize),
    #[error("membership lists {0} twice or uses the reserved id 0")]
    MemberInvalid(NodeId),
    #[error("own id {0} is not a member (a replica joining a running cluster must say so)")]
    NotMember(NodeId),
    #[error("a joining replica {0} must not be among the members it joins")]
    JoiningMember(NodeId),
    #[error("election timeout min {min} must be > heartbeat {heartbeat} and <= max {max}")]
    Timeouts { min: u64, max: u64, heartbeat: u64 },
    #[error("window_slots, batch_commands_max, pending_max and reconfig_delay_slots must be >= 1")]
    ZeroBound,
    #[error("read lease {lease} ms must be 0 or above heartbeat {heartbeat} ms plus its drift margin, with clock_drift_ppm {ppm} below 100000")]
    Lease {
        lease: u64,
        heartbeat: u64,
        ppm: u64,
    },
}

impl Config {
    /// A configuration with sensible defaults (election 150..300 ms, heartbeat 50 ms).
    pub fn new(id: NodeId, members: Vec<NodeId>, seed: u64) -> Self {
        Config {
            id,
            members,
            joining: false,
            election_timeout_ms_min: 150,
            election_timeout_ms_max: 300,
            heartbeat_ms: 50,
            window_slots: 64,
            batch_commands_max: 256,
            pending_max: 10_000,
            reconfig_delay_slots: RECONFIG_DELAY_SLOTS_DEFAULT,
            read_lease_ms: 0,
            clock_drift_ppm: CLOCK_DRIFT_PPM_DEFAULT,
            seed,
            faults: Faults::NONE,
        }
    }

    /// Checks every rule; `Replica::new` calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let count_ok = if self.joining {
            (1..=super::membership::MEMBERS_MAX).contains(&self.members.len())
        } else {
            self.members.len() == 3 || self.members.len() == 5
        };
        if !count_ok {
            return Err(ConfigError::MembersCount(self.members.len()));
        }
        for (i, m) in self.members.iter().enumerate() {
            if m.0 == 0 || self.members[..i].contains(m) {
                return Err(ConfigError::MemberInvalid(*m));
            }
        }
        if self.joining == self.members.contains(&self.id) {
            return Err(if self.joining {
                ConfigError::JoiningMember(self.id)
            } else {
                ConfigError::NotMember(self.id)
            });
        }
        if self.election_timeout_ms_min <= self.heartbeat_ms
            || self.election_timeout_ms_min > self.election_timeout_ms_max
            || self.heartbeat_ms == 0
        {
            return Err(ConfigError::Timeouts {
                min: self.election_timeout_ms_min,
                max: self.election_timeout_ms_max,
                heartbeat: self.heartbeat_ms,
            });
        }
        if self.window_slots == 0
            || self.batch_commands_max == 0
            || self.pending_max == 0
            || self.reconfig_delay_slots == 0
        {
            return Err(ConfigError::ZeroBound);
        }
        if self.read_lease_ms > 0
            && (self.clock_drift_ppm >= 100_000
                || self.read_lease_ms
                    <= self.heartbeat_ms
                        + lease_margin_ms(self.read_lease_ms, self.clock_drift_ppm))
        {
            return Err(ConfigError::Lease {
                lease: self.read_lease_ms,
                heartbeat: self.heartbeat_ms,
                ppm: self.clock_drift_ppm,
            });
        }
        Ok(())
    }

    /// Votes needed in the first membership: a strict majority of the members.
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    #[test]
    fn validate_names_the_rule_broken() {
        assert_eq!(Config::new(NodeId(1), ids(3), 0).validate(), Ok(()));
        assert_eq!(
            Config::new(NodeId(1), ids(4), 0).validate(),
            Err(ConfigError::MembersCount(4))
        );
        assert_eq!(
            Config::new(NodeId(9), ids(3), 0).validate(),
            Err(ConfigError::NotMember(NodeId(9)))
        );
        let dup = vec![NodeId(1), NodeId(2), NodeId(2)];
        assert_eq!(
            Config::new(NodeId(1), dup, 0).validate(),
            Err(ConfigError::MemberInvalid(NodeId(2)))
        );
        let mut c = Config::new(NodeId(1), ids(5), 0);
        c.heartbeat_ms = 200;
        assert!(matches!(c.validate(), Err(ConfigError::Timeouts { .. })));
        c.heartbeat_ms = 50;
        c.window_slots = 0;
        assert_eq!(c.validate(), Err(ConfigError::ZeroBound));
        c.window_slots = 64;
        c.read_lease_ms = 52;
        assert!(matches!(c.validate(), Err(ConfigError::Lease { .. })));
        c.read_lease_ms = 150;
        assert_eq!(c.validate(), Ok(()));
        c.clock_drift_ppm = 100_000;
        assert!(matches!(c.validate(), Err(ConfigError::Lease { .. })));
        assert_eq!(lease_margin_ms(150, 10_000), 4);
        assert_eq!(lease_margin_ms(300, 0), 1);
        assert_eq!(Config::new(NodeId(1), ids(5), 0).quorum(), 3);
        let mut joiner = Config::new(NodeId(6), ids(3), 0);
        assert_eq!(joiner.validate(), Err(ConfigError::NotMember(NodeId(6))));
        joiner.joining = true;
        assert_eq!(joiner.validate(), Ok(()));
        joiner.id = NodeId(2);
        assert_eq!(
            joiner.validate(),
            Err(ConfigError::JoiningMember(NodeId(2)))
        );
    }
}
