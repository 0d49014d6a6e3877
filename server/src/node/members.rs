//! Membership changes as operators ask for them (`Admin.AddMember`, `PromoteMember`,
//! `RemoveMember`): the next membership from the newest one the log scheduled, the rules a
//! change must keep, and the refusals, each naming its rule (docs/operations.md, "Changing the
//! membership").

use picket_core::paxos::{MemberAddress, Membership, NodeId, Slot};

use crate::node::refusal::Refusal;

/// A learner more than this many slots behind the leader is not promoted unless forced.
pub const PROMOTE_LAG_SLOTS_MAX: u64 = 64;

/// One change of the membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    /// A new member, as a learner, reached at these addresses.
    Add(MemberAddress),
    /// A learner becomes a voter.
    Promote(NodeId),
    /// A voter or a learner leaves.
    Remove(NodeId),
}

/// A change and who asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRequest {
    pub change: MemberChange,
    pub actor: String,
    /// The actor's roles, by their core names (`Role::as_str`), recorded in the audit trail.
    pub actor_roles: Vec<String>,
    pub reason: String,
    /// Skip the checks an operator may override: the new voters' quorum answered lately, the
    /// learner caught up.
    pub force: bool,
}

/// A change the log chose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChanged {
    pub membership: Membership,
    /// The first slot it governs (α slots after its own).
    pub from_slot: Slot,
}

/// What the leader knows when it applies a change: its newest membership, the last slot it
/// applied and what the member the change is about last said it applied.
pub struct Known<'a> {
    pub latest: &'a Membership,
    pub applied: Slot,
    pub member_applied: Option<Slot>,
}

/// What a change asks of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Propose this membership.
    Propose(Box<Membership>),
    /// The newest membership already is what was asked (an add of the same member at the same
    /// addresses, a promotion of a voter): a retry whose first answer was lost. Nothing is
    /// proposed and the answer is the membership as it is.
    AlreadySo,
}

/// The membership `request` asks for, from `known.latest`; a refusal names the rule broken.
pub fn next_membership(known: &Known<'_>, request: &ChangeRequest) -> Result<Next, Refusal> {
    let current = known.latest;
    let mut next = Membership {
        actor: request.actor.clone(),
        actor_roles: request.actor_roles.clone(),
        reason: request.reason.clone(),
        ..current.clone()
    };
    match &request.change {
        MemberChange::Add(address) => {
            let id = address.id;
            if current.address_of(id) == Some(address) {
                return Ok(Next::AlreadySo);
            }
            if current.is_retired(id) {
                return Err(refused(
                    "member_id_retired",
                    format!(
                        "{id} was a member of this cluster and was removed: ids are never \
                         reused (a removed replica's peers would take the new machine for the \
                         old one); give the new machine an id never used in this cluster"
                    ),
                ));
            }
            if current.is_member(id) {
                return Err(refused(
                    "already_member",
                    format!("{id} is a member already ({current})"),
                ));
            }
            next.learners.push(id);
            next.addresses.push(address.clone());
            next.change = format!("{id} added as a learner");
        }
        MemberChange::Promote(id) => {
            let id = *id;
            if current.is_voter(id) {
                return Ok(Next::AlreadySo);
            }
            if !current.is_learner(id) {
                return Err(refused(
                    "not_a_learner",
                    format!("{id} is not a learner ({current}): add it first"),
                ));
            }
            if !request.force {
                check_caught_up(id, known)?;
            }
            next.learners.retain(|l| *l != id);
            next.voters.push(id);
            next.change = format!("{id} promoted to voter");
        }
        MemberChange::Remove(id) => {
            let id = *id;
            if !current.is_member(id) {
                return Err(refused(
                    "not_a_member",
                    format!("{id} is not a member ({current})"),
                ));
            }
            let was = if current.is_voter(id) {
                "voter"
            } else {
                "learner"
            };
            next.voters.retain(|v| *v != id);
            next.learners.retain(|l| *l != id);
            next.addresses.retain(|a| a.id != id);
            next.retire(id);
            next.change = format!("{id} removed (was a {was}); its id is never reused");
            if next.voters.is_empty() {
                return Err(refused(
                    "last_voter",
                    format!("{id} is the last voter: a cluster needs at least one"),
                ));
            }
        }
    }
    Ok(Next::Propose(Box::new(next.sorted())))
}

fn check_caught_up(id: NodeId, known: &Known<'_>) -> Result<(), Refusal> {
    let Some(applied) = known.member_applied else {
        return Err(refused(
            "learner_not_caught_up",
            format!(
                "{id} has not answered this leader yet, so it cannot be told caught up; \
                 promote it once it follows the log (picketctl cluster status), or force"
            ),
        ));
    };
    let behind = known.applied.0.saturating_sub(applied.0);
    if behind > PROMOTE_LAG_SLOTS_MAX {
        return Err(refused(
            "learner_not_caught_up",
            format!(
                "{id} is {behind} slots behind the leader (applied {} of {}; at most \
                 {PROMOTE_LAG_SLOTS_MAX} to be promoted): promote it once it caught up, or force",
                applied.0, known.applied.0
            ),
        ));
    }
    Ok(())
}

fn refused(rule: &'static str, message: String) -> Refusal {
    Refusal::MemberRule { rule, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> Vec<NodeId> {
        v.iter().copied().map(NodeId).collect()
    }

    fn ask(change: MemberChange, force: bool) -> ChangeRequest {
        ChangeRequest {
            change,
            actor: "alice".into(),
            actor_roles: vec!["class-admin".into()],
            reason: "replace n3".into(),
            force,
        }
    }

    fn proposed(next: Result<Next, Refusal>) -> Membership {
        match next {
            Ok(Next::Propose(membership)) => *membership,
            other => panic!("not a proposal: {other:?}"),
        }
    }

    fn rule_of(refusal: Refusal) -> &'static str {
        refusal.member_rule().expect("a membership rule")
    }

    #[test]
    fn add_promote_remove_from_the_newest_membership() {
        let start = Membership::voters(ids(&[1, 2, 3]));
        let four = MemberAddress {
            id: NodeId(4),
            peer: "10.0.0.4:7000".into(),
            client: "10.0.0.4:7001".into(),
            http: String::new(),
        };
        let known = Known {
            latest: &start,
            applied: Slot(100),
            member_applied: None,
        };
        let added = proposed(next_membership(
            &known,
            &ask(MemberChange::Add(four.clone()), false),
        ));
        assert_eq!(added.voters, ids(&[1, 2, 3]));
        assert_eq!(added.learners, ids(&[4]));
        assert_eq!(added.addresses, vec![four.clone()]);
        assert_eq!(
            (added.actor.as_str(), added.reason.as_str()),
            ("alice", "replace n3")
        );
        let again = Known {
            latest: &added,
            ..known
        };
        // The same add again (a retry whose answer was lost) asks for nothing; the same id at
        // other addresses is refused.
        let twice = next_membership(&again, &ask(MemberChange::Add(four.clone()), false));
        assert_eq!(twice.unwrap(), Next::AlreadySo);
        let elsewhere = MemberAddress {
            peer: "10.0.0.9:7000".into(),
            ..four.clone()
        };
        let other = next_membership(&again, &ask(MemberChange::Add(elsewhere), false));
        assert_eq!(rule_of(other.unwrap_err()), "already_member");
        let original = MemberAddress {
            id: NodeId(2),
            ..four
        };
        let original = next_membership(&again, &ask(MemberChange::Add(original), false));
        assert_eq!(rule_of(original.unwrap_err()), "already_member");

        // Promotion waits for the learner to follow, unless forced.
        let silent = next_membership(&again, &ask(MemberChange::Promote(NodeId(4)), false));
        assert_eq!(rule_of(silent.unwrap_err()), "learner_not_caught_up");
        let behind = Known {
            member_applied: Some(Slot(10)),
            ..again
        };
        let refusal =
            next_membership(&behind, &ask(MemberChange::Promote(NodeId(4)), false)).unwrap_err();
        let Refusal::MemberRule { message, .. } = refusal else {
            panic!("not a rule: {refusal:?}");
        };
        assert!(message.contains("90 slots behind"), "{message}");
        let close = Known {
            member_applied: Some(Slot(100 - PROMOTE_LAG_SLOTS_MAX)),
            ..behind
        };
        let promoted = proposed(next_membership(
            &close,
            &ask(MemberChange::Promote(NodeId(4)), false),
        ));
        assert_eq!(promoted.voters, ids(&[1, 2, 3, 4]));
        assert!(promoted.learners.is_empty());
        let forced = proposed(next_membership(
            &behind,
            &ask(MemberChange::Promote(NodeId(4)), true),
        ));
        assert!(forced.same_members(&promoted));
        let not_learner = next_membership(&close, &ask(MemberChange::Promote(NodeId(9)), false));
        assert_eq!(rule_of(not_learner.unwrap_err()), "not_a_learner");
        let voter = next_membership(&close, &ask(MemberChange::Promote(NodeId(2)), false));
        assert_eq!(voter.unwrap(), Next::AlreadySo);

        // Promoting a voter again asks for nothing; removal drops the member and its address.
        let after = Known {
            latest: &promoted,
            ..close
        };
        let again = next_membership(&after, &ask(MemberChange::Promote(NodeId(4)), false));
        assert_eq!(again.unwrap(), Next::AlreadySo);
        let removed = proposed(next_membership(
            &after,
            &ask(MemberChange::Remove(NodeId(4)), false),
        ));
        assert_eq!(removed.voters, ids(&[1, 2, 3]));
        assert!(removed.addresses.is_empty());
        assert_eq!(removed.retired, ids(&[4]));
        assert_eq!(removed.actor_roles, vec!["class-admin".to_owned()]);
        assert_eq!(
            (added.change.as_str(), promoted.change.as_str()),
            ("n4 added as a learner", "n4 promoted to voter")
        );
        assert_eq!(
            removed.change,
            "n4 removed (was a voter); its id is never reused"
        );
        // Issue 33: a removed id was accepted again, although ids are never reused (a removed
        // replica's peers would take the new machine for the old one).
        let gone = Known {
            latest: &removed,
            ..after
        };
        let back = MemberAddress {
            id: NodeId(4),
            peer: "10.0.0.40:7000".into(),
            client: "10.0.0.40:7001".into(),
            http: String::new(),
        };
        let back = next_membership(&gone, &ask(MemberChange::Add(back), false)).unwrap_err();
        assert_eq!(rule_of(back.clone()), "member_id_retired");
        assert!(back.to_string().contains("never reused"), "{}", back);
        // Retired ids are carried by every later membership.
        let five = MemberAddress {
            id: NodeId(5),
            peer: "10.0.0.5:7000".into(),
            client: "10.0.0.5:7001".into(),
            http: String::new(),
        };
        let later = proposed(next_membership(&gone, &ask(MemberChange::Add(five), false)));
        assert_eq!(later.retired, ids(&[4]));
        let stranger = next_membership(&after, &ask(MemberChange::Remove(NodeId(9)), false));
        assert_eq!(rule_of(stranger.unwrap_err()), "not_a_member");
        let alone = Membership::voters(ids(&[1]));
        let last = Known {
            latest: &alone,
            ..after
        };
        let last = next_membership(&last, &ask(MemberChange::Remove(NodeId(1)), true));
        assert_eq!(rule_of(last.unwrap_err()), "last_voter");
    }
}
