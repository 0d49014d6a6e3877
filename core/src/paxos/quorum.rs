//! Vote counting: sets of voters.

use super::ballot::NodeId;

/// A set of voters drawn from the membership (at most 5 members: a small sorted vector).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Votes {
    voters: Vec<NodeId>,
}

impl Votes {
    pub fn new() -> Self {
        Votes { voters: Vec::new() }
    }

    /// Adds `voter`; returns false if it had voted already (a duplicate message).
    pub fn insert(&mut self, voter: NodeId) -> bool {
        match self.voters.binary_search(&voter) {
            Ok(_) => false,
            Err(i) => {
                self.voters.insert(i, voter);
                true
            }
        }
    }

    pub fn len(&self) -> usize {
        self.voters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.voters.is_empty()
    }

    pub fn contains(&self, voter: NodeId) -> bool {
        self.voters.binary_search(&voter).is_ok()
    }

    /// Takes `voter` out again; returns whether it was in.
    pub fn remove(&mut self, voter: NodeId) -> bool {
        match self.voters.binary_search(&voter) {
            Ok(i) => {
                self.voters.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.voters.iter().copied()
    }

    /// True once `quorum` distinct voters are in.
    pub fn reached(&self, quorum: usize) -> bool {
        self.voters.len() >= quorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_do_not_count() {
        let mut v = Votes::new();
        assert!(v.insert(NodeId(2)));
        assert!(!v.insert(NodeId(2)));
        assert!(!v.reached(2));
        assert!(v.insert(NodeId(1)));
        assert!(v.reached(2));
        assert!(v.contains(NodeId(1)));
        assert!(!v.contains(NodeId(3)));
        assert_eq!(v.len(), 2);
    }
}
