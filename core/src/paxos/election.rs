//! Elections: randomized, seeded timeouts; a pre-vote with leader stickiness before any ballot
//! is raised, so a replica rejoining from a partition cannot depose a healthy leader.

use std::fmt::Debug;

use super::ballot::NodeId;
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
        if self.amnesiac {
            self.start_recovery();
        } else {
            self.start_pre_vote();
        }
    }

    /// Asks everyone whether they would vote for us at the next round. Changes no durable state.
    fn start_pre_vote(&mut self) {
        let round = self.promised.round.max(self.round_seen_max) + 1;
        let mut granted = Votes::new();
        granted.insert(self.cfg.id);
        self.role = Role::PreCandidate { round, granted };
        self.leader = None;
        self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
        self.report_role();
        self.broadcast(&Message::PreVote { round });
    }

    pub(super) fn on_pre_vote(&mut self, from: NodeId, round: u64) {
        // Leader stickiness: while we hear from a live leader we vote for nobody else.
        // An amnesiac replica cannot vote, so it does not pre-vote either.
        let granted = !self.amnesiac && !self.leader_is_live() && round > self.promised.round;
        self.send(from, Message::PreVoteReply { round, granted });
    }

    pub(super) fn on_pre_vote_reply(&mut self, from: NodeId, round: u64, granted: bool) {
        let quorum = self.quorum();
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
        if granted {
            votes.insert(from);
            if votes.reached(quorum) {
                self.become_candidate();
            }
        }
    }
}
