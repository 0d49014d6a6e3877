//! Names of things in the log: replicas, ballots, slots and slot values.

use std::fmt;

use super::membership::Membership;
use crate::time::Instant;

/// A replica's identity, fixed by the static membership.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A ballot: totally ordered by `round`, then by `node` (the proposer that owns it).
///
/// Two proposers never share a ballot because the node id is part of it, and a proposer never
/// reuses a round because it durably promises its own ballot before sending any `Prepare`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

impl Ballot {
    /// The ballot below every real ballot (nothing promised yet).
    pub const ZERO: Ballot = Ballot {
        round: 0,
        node: NodeId(0),
    };

    pub const fn new(round: u64, node: NodeId) -> Self {
        Ballot { round, node }
    }
}

impl fmt::Display for Ballot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.round, self.node.0)
    }
}

/// A position in the replicated log. Slot 0 is "before the log"; the first real slot is 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub u64);

impl Slot {
    pub const ZERO: Slot = Slot(0);

    #[must_use]
    pub const fn next(self) -> Slot {
        Slot(self.0 + 1)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The value of one slot: a no-op (filling a gap left by an earlier leader), a batch of
/// commands stamped with the leader's clock when it formed the batch, or a membership change
/// (it governs the slots from its own plus `Config::reconfig_delay_slots` on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<C> {
    Noop,
    Batch { stamp: Instant, commands: Vec<C> },
    Reconfig(Membership),
}

impl<C> Value<C> {
    /// Number of commands carried (0 for a no-op).
    pub fn len(&self) -> usize {
        match self {
            Value::Noop | Value::Reconfig(_) => 0,
            Value::Batch { commands, .. } => commands.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: fmt::Debug> fmt::Display for Value<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Noop => write!(f, "noop"),
            Value::Batch { stamp, commands } => write!(f, "{commands:?}@{}", stamp.as_millis()),
            Value::Reconfig(m) => write!(f, "reconfig({m})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ballots_order_by_round_then_node() {
        let a = Ballot::new(1, NodeId(3));
        let b = Ballot::new(2, NodeId(1));
        let c = Ballot::new(2, NodeId(2));
        assert!(Ballot::ZERO < a);
        assert!(a < b);
        assert!(b < c);
        assert_eq!(c.to_string(), "2.2");
    }

    proptest::proptest! {
        /// The order is lexicographic on (round, node): total, and rounds dominate.
        #[test]
        fn ballot_order_is_round_then_node(r1 in 0u64..4, n1 in 0u64..4, r2 in 0u64..4, n2 in 0u64..4) {
            let (a, b) = (Ballot::new(r1, NodeId(n1)), Ballot::new(r2, NodeId(n2)));
            proptest::prop_assert_eq!(a.cmp(&b), (r1, n1).cmp(&(r2, n2)));
            if r1 < r2 {
                proptest::prop_assert!(a < b);
            }
        }
    }

    #[test]
    fn value_len_counts_commands() {
        let v: Value<u8> = Value::Batch {
            stamp: Instant::from_millis(5),
            commands: vec![1, 2],
        };
        assert_eq!(v.len(), 2);
        assert!(Value::<u8>::Noop.is_empty());
        assert_eq!(v.to_string(), "[1, 2]@5");
    }
}
