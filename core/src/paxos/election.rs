//! Elections: randomized, seeded timeouts; a pre-vote with leader stickiness before any ballot
//! is raised, so a replica rejoining from a partition cannot depose a healthy leader.

use std::fmt::Debug;

use rand_chacha::rand_core::RngCore;

use super::ballot::{Ballot, NodeId, Slot};
use super::message::Message;
use super::quorum::Votes;
use super::replica::{Replica, Role};

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    pub(super) fn on_timeout(&mut self) {
        self.retry_catchup_if_due();
        if let Role::Leader(_) = self.role {
            self.on_leader_timeout();
            return;
        }
        if self.now < self.deadline_election {
            return;
        }
        if self.membership_guessed || self.removed.is_some() {
            // Not to act on a guessed membership (it may name too few voters, or none of
            // ours); and a removed replica is nobody's voter. Neither campaigns nor recovers;
            // the guesser asks a contact to catch it up, which brings the membership.
            self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
            if matches!(
                self.role,
                Role::PreCandidate { .. } | Role::Candidate { .. }
            ) {
                self.become_follower(self.leader);
            }
            if self.membership_guessed && !self.peers.is_empty() {
                let i = (self.rng.next_u64() % self.peers.len() as u64) as usize;
                let from = self.peers[i];
                self.request_catchup(from);
            }
            return;
        }
        if !self.amnesiac && !self.is_voter() {
            // A learner, a replica removed from the membership, or one joining: it never
            // campaigns (it follows whoever leads).
            self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
            if matches!(
                self.role,
                Role::PreCandidate { .. } | Role::Candidate { .. }
            ) {
                self.become_follower(self.leader);
            }
            // No leader heard for an election timeout: perhaps the membership moved on
            // without us hearing the commit point (a leader that removed itself steps down
            // right after), so ask a peer for what it has chosen.
            if !self.leader_is_live() && !self.peers.is_empty() {
                let i = (self.rng.next_u64() % self.peers.len() as u64) as usize;
                let from = self.peers[i];
                self.request_catchup(from);
            }
            return;
        }
        if self.lease_refuses(self.cfg.id) {
            // A read lease we granted runs: we may not promise our own ballot either.
            self.put_off_campaign();
            return;
        }
        if self.amnesiac {
            self.start_recovery();
        } else {
            self.start_pre_vote();
        }
    }

    /// Not now: a read lease we granted runs (`lease_refuses`). Listens again for an election
    /// timeout, or until the lease ends if that is later.
    pub(super) fn put_off_campaign(&mut self) {
        self.counters.lease_refusals += 1;
        let until = self.lease_granted.map_or(self.now, |(_, u)| u);
        if !matches!(self.role, Role::Follower) {
            self.become_follower(self.leader);
        }
        self.deadline_election = self
            .now
            .add_ms(self.election_timeout_ms_random())
            .max(until);
    }

    /// A member said a membership from `from_slot` on leaves us out (`Input::Removed`).
    pub(super) fn on_removed(&mut self, from_slot: Slot, leader: Option<NodeId>) {
        let newer = from_slot > self.schedule.last_from();
        // The same membership as our newest, which leaves us out: the teller has it in effect
        // (it refuses us), so the slots before it are chosen and we vote on none after it.
        // Only the commit point of the last of them has not reached us (nobody sends to us
        // once the change is in effect), and we would campaign meanwhile.
        let same_without_us =
            from_slot == self.schedule.last_from() && !self.schedule.last().is_member(self.cfg.id);
        if self.membership_guessed || !(newer || same_without_us) {
            // Ours is newer (it decides) or we cannot tell yet: a member that has not applied
            // our addition does not name us either.
            self.counters.dropped_stale += 1;
            return;
        }
        self.removed = Some(self.removed.map_or(from_slot, |r| r.max(from_slot)));
        let leader = leader.filter(|l| *l != self.cfg.id);
        if matches!(self.role, Role::Follower) {
            self.leader = leader;
            self.report_role();
        } else {
            // A deposed leader, a candidate: step down.
            self.become_follower(leader);
        }
    }

    /// Asks everyone whether they would vote for us at the next round. Changes no durable state.
    fn start_pre_vote(&mut self) {
        let round = self.promised.round.max(self.round_seen_max) + 1;
        let mut granted = Votes::new();
        granted.insert(self.cfg.id);
        let alone = granted.reached(self.quorum());
        self.role = Role::PreCandidate { round, granted };
        self.leader = None;
        self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
        self.report_role();
        if alone {
            // The only voter (a membership changed down to one).
            self.become_candidate();
            return;
        }
        self.broadcast(&Message::PreVote { round });
    }

    pub(super) fn on_pre_vote(&mut self, from: NodeId, round: u64) {
        // Leader stickiness: while we hear from a live leader we vote for nobody else.
        // An amnesiac replica cannot vote, so it does not pre-vote either.
        // Only for a voter of a membership we know governs a slot after what we applied.
        let voter = self
            .schedule
            .over(self.applied.next(), self.slot_known_max())
            .any(|m| m.is_voter(from));
        let granted = voter
            && !self.amnesiac
            && !self.leader_is_live()
            && !self.lease_refuses(from)
            && round > self.promised.round;
        self.send(from, Message::PreVoteReply { round, granted });
        if !voter {
            // A pre-vote from a replica we do not count as a voter: either it was removed and
            // does not know, or we missed the change that made it one. Ask it what it has.
            self.request_catchup(from);
        }
        if !granted && round <= self.promised.round {
            // Tell it the round to beat (a replica that heard no ballot for long, e.g. one
            // that became a voter by a membership change, would ask at a stale round forever).
            // (A pre-vote holds no ballot: the nack names the round's lowest one.)
            self.nack(from, Ballot::new(round, NodeId(0)));
        }
    }

    pub(super) fn on_pre_vote_reply(&mut self, from: NodeId, round: u64, granted: bool) {
        let quorum = self.quorum();
        let voter = self.membership().is_voter(from);
        let Role::PreCandidate {
            round: mine,
            granted: votes,
        } = &mut self.role
        else {
            self.counters.dropped_stale += 1;
            return;
        };
        if *mine != round {
            self.counters.dropped_stale += 1;
            return;
        }
        if !granted && self.schedule.entries().len() > 1 {
            // Refused while memberships change: the refuser may have applied a change we have
            // not (one that makes us no voter, or that names the voters we need). Ask it.
            self.request_catchup(from);
            return;
        }
        if granted && voter {
            votes.insert(from);
            if votes.reached(quorum) {
                self.become_candidate();
            }
        }
    }
}
