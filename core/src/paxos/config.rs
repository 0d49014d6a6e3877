//! Static configuration of one replica.

use thiserror::Error;

use super::ballot::NodeId;

/// Configuration of one replica. Membership is static: 3 or 5 replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub id: NodeId,
    /// All replicas including `id`, 3 or 5 distinct ids, none of them 0.
    pub members: Vec<NodeId>,
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub heartbeat_ms: u64,
    /// Slots in flight (proposed, not yet chosen) at most.
    pub window_slots: usize,
    /// Commands per slot (batch) at most.
    pub batch_commands_max: usize,
    /// Commands waiting for a slot at most; also bounds pending reads.
    pub pending_max: usize,
    /// Seed of the election-jitter RNG.
    pub seed: u64,
}

/// A configuration the replica refuses, naming the rule broken.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("membership must have 3 or 5 replicas, got {0}")]
    MembersCount(usize),
    #[error("membership lists {0} twice or uses the reserved id 0")]
    MemberInvalid(NodeId),
    #[error("own id {0} is not a member")]
    NotMember(NodeId),
    #[error("election timeout min {min} must be > heartbeat {heartbeat} and <= max {max}")]
    Timeouts { min: u64, max: u64, heartbeat: u64 },
    #[error("window_slots, batch_commands_max and pending_max must be >= 1")]
    ZeroBound,
}

impl Config {
    /// A configuration with sensible defaults (election 150..300 ms, heartbeat 50 ms).
    pub fn new(id: NodeId, members: Vec<NodeId>, seed: u64) -> Self {
        Config {
            id,
            members,
            election_timeout_ms_min: 150,
            election_timeout_ms_max: 300,
            heartbeat_ms: 50,
            window_slots: 64,
            batch_commands_max: 256,
            pending_max: 10_000,
            seed,
        }
    }

    /// Checks every rule; `Replica::new` calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.members.len() != 3 && self.members.len() != 5 {
            return Err(ConfigError::MembersCount(self.members.len()));
        }
        for (i, m) in self.members.iter().enumerate() {
            if m.0 == 0 || self.members[..i].contains(m) {
                return Err(ConfigError::MemberInvalid(*m));
            }
        }
        if !self.members.contains(&self.id) {
            return Err(ConfigError::NotMember(self.id));
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
        if self.window_slots == 0 || self.batch_commands_max == 0 || self.pending_max == 0 {
            return Err(ConfigError::ZeroBound);
        }
        Ok(())
    }

    /// Votes needed: a strict majority of the members.
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
        assert_eq!(Config::new(NodeId(1), ids(5), 0).quorum(), 3);
    }
}
