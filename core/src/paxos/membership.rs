//! Who votes on which slots: the membership and its schedule.
//!
//! The rule (docs/protocol.md, "Membership changes"): a `Value::Reconfig` chosen at slot `s`
//! governs the slots from `s + α` on (α = `Config::reconfig_delay_slots`), and a leader proposes
//! at slot `i` only once it has applied every slot up to `i - α`. So whoever proposes or counts
//! votes at a slot knows, from chosen values alone, which membership governs it; at most one
//! change is in flight at a time.

use std::fmt;

use thiserror::Error;

use super::ballot::{NodeId, Slot};
use crate::time::Instant;

/// Voters and learners at most, together.
pub const MEMBERS_MAX: usize = 9;

/// Longest address (`host:port`) a membership carries, in bytes.
pub const ADDRESS_MAX: usize = 255;

/// Longest actor name a membership carries, in bytes.
pub const ACTOR_MAX: usize = 255;

/// Longest reason a membership carries, in bytes.
pub const REASON_MAX: usize = 1024;

/// Longest description of a change a membership carries, in bytes.
pub const CHANGE_MAX: usize = 1024;

/// At most this many role names of the actor are carried.
pub const ACTOR_ROLES_MAX: usize = 8;

/// Retired ids kept: the highest this many (a cluster that removed more members than this in
/// its life could reuse the lowest of them).
pub const RETIRED_MAX: usize = 1024;

/// How replicas and clients reach one member, as the operator who added it gave it. The
/// replica carries it through the log and snapshots and never reads it: the transport does.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberAddress {
    pub id: NodeId,
    /// Replica-to-replica `host:port`.
    pub peer: String,
    /// gRPC `host:port` for clients.
    pub client: String,
    /// HTTP `host:port` (metrics, health, console); `""`: none.
    pub http: String,
}

/// One membership: the voters (whose majority chooses) and the learners (who receive the log
/// and vote on nothing). Both sorted, disjoint, without the reserved id 0.
///
/// It also carries what the layers above need and the replica never reads: the members'
/// addresses (a member without one is reached at the address its replicas' config files give,
/// as in a cluster's first membership) and who asked for the change and why (the audit log's
/// record of it).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Membership {
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// Ascending by id, members only.
    pub addresses: Vec<MemberAddress>,
    /// The principal who asked for this membership (`""`: the cluster's first one).
    pub actor: String,
    pub reason: String,
    /// The actor's roles when they asked, by their core names (`Role::as_str`; empty: none,
    /// or a membership written before roles were kept).
    pub actor_roles: Vec<String>,
    /// What the change did, in words (`"n4 added as a learner"`; `""`: the first membership, or
    /// written before changes were described).
    pub change: String,
    /// When the leader proposed the change, on its clock (`None`: the first membership, or a
    /// change written before changes were stamped). A stamped change takes a revision of its
    /// own when it is applied (docs/locks.md, "The audit trail").
    pub stamp: Option<Instant>,
    /// Every id that was a member and was removed, ascending: never a member again (the highest
    /// `RETIRED_MAX`; empty in memberships written before ids were retired).
    pub retired: Vec<NodeId>,
    /// In the cluster's first membership only: the cluster version the log starts at (written
    /// by `picketd run --init`: the release's own; 0, unstated: 1, release 0.1's log).
    /// Ignored in a change.
    pub cluster_version: u32,
}

/// A membership the replica refuses, naming the rule broken.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MembershipError {
    #[error("a membership needs at least one voter")]
    NoVoter,
    #[error(
        "a membership has at most {MEMBERS_MAX} members, voters and learners together; got {0}"
    )]
    TooMany(usize),
    #[error(
        "{0} is listed twice (a member is either a voter or a learner) or is the reserved id 0"
    )]
    Invalid(NodeId),
    #[error("the address of {0} is given twice, or {0} is not a member")]
    Address(NodeId),
    #[error("{0} was removed from this cluster and is a member again: ids are never reused")]
    Retired(NodeId),
    #[error("{field} is {len} bytes, longer than {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
}

impl Membership {
    /// Voters only, no learners (a static cluster's membership).
    pub fn voters(voters: Vec<NodeId>) -> Self {
        Membership {
            voters,
            ..Membership::default()
        }
        .sorted()
    }

    /// Voters and learners, nothing else.
    pub fn of(voters: Vec<NodeId>, learners: Vec<NodeId>) -> Self {
        Membership {
            voters,
            learners,
            ..Membership::default()
        }
        .sorted()
    }

    /// The same membership with its lists sorted.
    #[must_use]
    pub fn sorted(mut self) -> Self {
        self.voters.sort_unstable();
        self.learners.sort_unstable();
        self.addresses.sort_by_key(|a| a.id);
        self.retired.sort_unstable();
        self.retired.dedup();
        self
    }

    /// The same voters, learners and addresses (who asked and why aside).
    pub fn same_members(&self, other: &Membership) -> bool {
        self.voters == other.voters
            && self.learners == other.learners
            && self.addresses == other.addresses
    }

    /// The address carried for `id`, if any.
    pub fn address_of(&self, id: NodeId) -> Option<&MemberAddress> {
        self.addresses.iter().find(|a| a.id == id)
    }

    /// Checks every rule of a membership (sorted or not).
    pub fn validate(&self) -> Result<(), MembershipError> {
        if self.voters.is_empty() {
            return Err(MembershipError::NoVoter);
        }
        let n = self.voters.len() + self.learners.len();
        if n > MEMBERS_MAX {
            return Err(MembershipError::TooMany(n));
        }
        let all: Vec<NodeId> = self.members().collect();
        for (i, m) in all.iter().enumerate() {
            if m.0 == 0 || all[..i].contains(m) {
                return Err(MembershipError::Invalid(*m));
            }
        }
        for (i, a) in self.addresses.iter().enumerate() {
            if !self.is_member(a.id) || self.addresses[..i].iter().any(|b| b.id == a.id) {
                return Err(MembershipError::Address(a.id));
            }
            for (field, value) in [("peer", &a.peer), ("client", &a.client), ("http", &a.http)] {
                check_len(field, value, ADDRESS_MAX)?;
            }
        }
        check_len("actor", &self.actor, ACTOR_MAX)?;
        check_len("reason", &self.reason, REASON_MAX)?;
        check_len("change", &self.change, CHANGE_MAX)?;
        if self.actor_roles.len() > ACTOR_ROLES_MAX {
            return Err(MembershipError::TooLong {
                field: "actor_roles",
                len: self.actor_roles.len(),
                max: ACTOR_ROLES_MAX,
            });
        }
        for role in &self.actor_roles {
            check_len("actor_roles", role, ACTOR_MAX)?;
        }
        if self.retired.len() > RETIRED_MAX {
            return Err(MembershipError::TooLong {
                field: "retired",
                len: self.retired.len(),
                max: RETIRED_MAX,
            });
        }
        if let Some(id) = self.retired.iter().find(|id| self.is_member(**id)) {
            return Err(MembershipError::Retired(*id));
        }
        Ok(())
    }

    /// Whether `id` was a member once and was removed (it is never a member again).
    pub fn is_retired(&self, id: NodeId) -> bool {
        self.retired.contains(&id)
    }

    /// Records that `id` left: it is never a member again (the lowest retired ids beyond
    /// `RETIRED_MAX` are forgotten).
    pub fn retire(&mut self, id: NodeId) {
        if !self.retired.contains(&id) {
            self.retired.push(id);
            self.retired.sort_unstable();
        }
        while self.retired.len() > RETIRED_MAX {
            self.retired.remove(0);
        }
    }

    /// Votes needed: a strict majority of the voters.
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// Whether the voters for which `counted` holds reach the quorum.
    pub fn quorum_among(&self, counted: impl Fn(NodeId) -> bool) -> bool {
        self.voters.iter().filter(|v| counted(**v)).count() >= self.quorum()
    }

    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id)
    }

    pub fn is_learner(&self, id: NodeId) -> bool {
        self.learners.contains(&id)
    }

    pub fn is_member(&self, id: NodeId) -> bool {
        self.is_voter(id) || self.is_learner(id)
    }

    /// Voters, then learners.
    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.voters.iter().chain(self.learners.iter()).copied()
    }
}

fn check_len(field: &'static str, value: &str, max: usize) -> Result<(), MembershipError> {
    if value.len() > max {
        return Err(MembershipError::TooLong {
            field,
            len: value.len(),
            max,
        });
    }
    Ok(())
}

impl fmt::Display for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |ids: &[NodeId]| {
            ids.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(f, "voters {}", list(&self.voters))?;
        if !self.learners.is_empty() {
            write!(f, " learners {}", list(&self.learners))?;
        }
        Ok(())
    }
}

/// Which membership governs which slots: (first slot, membership), ascending by slot. The
/// first entry governs every slot below the second. Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    entries: Vec<(Slot, Membership)>,
}

impl Schedule {
    /// One membership for every slot.
    pub fn new(membership: Membership) -> Self {
        Schedule {
            entries: vec![(Slot(1), membership)],
        }
    }

    /// A schedule read back from storage or the wire; `None` unless its slots rise and every
    /// membership is valid.
    pub fn from_entries(entries: Vec<(Slot, Membership)>) -> Option<Self> {
        let rising = entries.windows(2).all(|w| w[0].0 < w[1].0);
        let valid = entries.iter().all(|(_, m)| m.validate().is_ok());
        (!entries.is_empty() && rising && valid).then_some(Schedule { entries })
    }

    pub fn entries(&self) -> &[(Slot, Membership)] {
        &self.entries
    }

    /// The membership that governs `slot`.
    pub fn at(&self, slot: Slot) -> &Membership {
        let i = self.entries.partition_point(|(from, _)| *from <= slot);
        &self.entries[i.saturating_sub(1)].1
    }

    /// The last membership scheduled (in effect or not yet).
    pub fn last(&self) -> &Membership {
        &self.entries.last().expect("never empty").1
    }

    /// The first slot of the last entry.
    pub fn last_from(&self) -> Slot {
        self.entries.last().expect("never empty").0
    }

    /// The first slot the newest *change* governs: `None` when the newest entry is the first
    /// membership (it governs from slot 1; nothing has to be brought into effect).
    pub fn last_change_from(&self) -> Option<Slot> {
        Some(self.last_from()).filter(|from| *from > Slot(1))
    }

    /// Schedules `membership` from slot `from`. A repeat of an entry already scheduled (the
    /// same change learned twice, e.g. from a snapshot and then from the log) changes nothing.
    pub fn schedule(&mut self, from: Slot, membership: Membership) {
        if let Some((_, m)) = self.entries.iter().find(|(s, _)| *s == from) {
            assert_eq!(*m, membership, "two memberships scheduled from slot {from}");
            return;
        }
        assert!(
            from > self.last_from(),
            "membership scheduled from {from}, not after the last one ({})",
            self.last_from()
        );
        self.entries.push((from, membership));
    }

    /// Replaces the first membership (a guess) with the one learned; the first entry must
    /// govern from slot 1.
    pub fn replace_first(&mut self, membership: Membership) {
        assert_eq!(
            self.entries[0].0,
            Slot(1),
            "the first membership replaced on a schedule that starts at {}",
            self.entries[0].0
        );
        self.entries[0].1 = membership;
    }

    /// Forgets the entries that govern no slot at or above `slot`.
    pub fn forget_below(&mut self, slot: Slot) {
        let keep_from = self.entries.partition_point(|(from, _)| *from <= slot);
        let cut = keep_from.saturating_sub(1);
        if cut > 0 {
            self.entries.drain(..cut);
        }
    }

    /// The distinct memberships that govern the slots `lo..=hi`.
    pub fn over(&self, lo: Slot, hi: Slot) -> impl Iterator<Item = &Membership> + '_ {
        let first = self
            .entries
            .partition_point(|(from, _)| *from <= lo)
            .saturating_sub(1);
        self.entries[first..]
            .iter()
            .take_while(move |(from, _)| *from <= hi)
            .map(|(_, m)| m)
    }

    /// Everybody in any entry.
    pub fn knows(&self, id: NodeId) -> bool {
        self.entries.iter().any(|(_, m)| m.is_member(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> Vec<NodeId> {
        v.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn validate_names_the_rule_broken() {
        assert_eq!(Membership::voters(ids(&[1, 2, 3])).validate(), Ok(()));
        assert_eq!(
            Membership::voters(Vec::new()).validate(),
            Err(MembershipError::NoVoter)
        );
        let twice = Membership::of(ids(&[1, 2]), ids(&[2]));
        assert_eq!(twice.validate(), Err(MembershipError::Invalid(NodeId(2))));
        let zero = Membership::voters(ids(&[0, 1]));
        assert_eq!(zero.validate(), Err(MembershipError::Invalid(NodeId(0))));
        let many = Membership::voters(ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]));
        assert_eq!(many.validate(), Err(MembershipError::TooMany(10)));
        assert_eq!(Membership::voters(ids(&[1, 2, 3, 4])).quorum(), 3);
        assert_eq!(twice.to_string(), "voters n1,n2 learners n2");
        let mut addressed = Membership::of(ids(&[1, 2, 3]), ids(&[4]));
        addressed.addresses = vec![MemberAddress {
            id: NodeId(4),
            peer: "10.0.0.4:7000".into(),
            ..MemberAddress::default()
        }];
        assert_eq!(addressed.validate(), Ok(()));
        addressed.addresses[0].id = NodeId(5);
        assert_eq!(
            addressed.validate(),
            Err(MembershipError::Address(NodeId(5)))
        );
        addressed.addresses.clear();
        addressed.reason = "x".repeat(REASON_MAX + 1);
        assert_eq!(
            addressed.validate(),
            Err(MembershipError::TooLong {
                field: "reason",
                len: REASON_MAX + 1,
                max: REASON_MAX
            })
        );
        let mut asked = Membership::of(ids(&[1, 2, 3]), ids(&[4]));
        asked.actor = "alice".into();
        assert!(asked.same_members(&Membership::of(ids(&[1, 2, 3]), ids(&[4]))));
        assert!(!asked.same_members(&Membership::voters(ids(&[1, 2, 3]))));
    }

    #[test]
    fn a_schedule_answers_by_slot_and_forgets_what_governs_nothing() {
        let (a, b, c) = (
            Membership::voters(ids(&[1, 2, 3])),
            Membership::voters(ids(&[1, 2, 3, 4])),
            Membership::voters(ids(&[2, 3, 4])),
        );
        let mut s = Schedule::new(a.clone());
        s.schedule(Slot(10), b.clone());
        s.schedule(Slot(10), b.clone());
        s.schedule(Slot(20), c.clone());
        assert_eq!(s.at(Slot(1)), &a);
        assert_eq!(s.at(Slot(9)), &a);
        assert_eq!(s.at(Slot(10)), &b);
        assert_eq!(s.at(Slot(25)), &c);
        assert_eq!(s.over(Slot(5), Slot(12)).count(), 2);
        assert_eq!(s.over(Slot(10), Slot(19)).count(), 1);
        assert_eq!(s.over(Slot(9), Slot(30)).count(), 3);
        assert!(s.knows(NodeId(4)) && !s.knows(NodeId(5)));
        s.forget_below(Slot(15));
        assert_eq!(s.entries().len(), 2);
        assert_eq!(s.at(Slot(15)), &b);
        s.forget_below(Slot(9));
        assert_eq!(
            s.entries().len(),
            2,
            "the entry governing slot 9 is gone already"
        );
        assert_eq!(
            Schedule::from_entries(s.entries().to_vec()),
            Some(s.clone())
        );
        assert_eq!(
            Schedule::from_entries(vec![(Slot(5), c.clone()), (Slot(5), a)]),
            None
        );
        assert_eq!(Schedule::from_entries(Vec::new()), None);
    }
}
