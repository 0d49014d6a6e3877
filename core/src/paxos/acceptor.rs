//! The acceptor's handlers: `Prepare`, `Accept`, `Heartbeat`, and the `Nack`s they provoke.
//!
//! Rule: a `Promise` or `Accepted` leaves only after the `Persist` carrying the state it reports
//! is acknowledged (`send_after_persist`). An amnesiac replica answers none of them.

use std::fmt::Debug;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::message::Message;
use super::replica::{Replica, Role};

/// After refusing a proposer because of a lease it granted, an acceptor grants no lease until
/// that proposer was answered, or for at most this many of the longest election timeouts after
/// the lease ends (a proposer that never comes back costs the leader its lease for that long;
/// its reads take a heartbeat round meanwhile).
const LEASE_WITHHELD_TIMEOUTS: u64 = 8;

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    pub(super) fn on_prepare(&mut self, from: NodeId, ballot: Ballot, slot_from: Slot) {
        if ballot.node != from || slot_from == Slot::ZERO {
            self.counters.dropped_malformed += 1;
            return;
        }
        if self.amnesiac {
            self.counters.dropped_amnesiac += 1;
            return;
        }
        if ballot < self.promised {
            self.nack(from, ballot);
            return;
        }
        if ballot > self.promised && self.lease_refuses(from) {
            // A read lease we granted runs: its holder may be serving reads without a round,
            // so no other proposer may take over through us until it ends. No answer: the
            // candidate campaigns again at its next election timeout.
            self.counters.lease_refusals += 1;
            // And grant no more leases until it tried again and was answered: the holder's
            // lease then lapses (it reads by read-index again) and the next prepare is
            // answered. Without this, a live leader renewing its lease would keep out for ever
            // a proposer that does not need to win a pre-vote first: a replica recovering from
            // disk loss. Its next prepare may come late (its candidacy times out, then its
            // recovery rounds run again: about twice the longest election timeout with
            // picketd's defaults), so the withholding lasts until it is answered, bounded by
            // `LEASE_WITHHELD_TIMEOUTS` election timeouts for a proposer that never comes back.
            // (A bound of one election timeout let such a replica be refused on every attempt
            // for ever: the simulation's `--reads lease`, 5 replicas, seed 76.)
            let until = self.lease_granted.map_or(self.now, |(_, u)| u);
            self.lease_withheld_until = until
                .add_ms(LEASE_WITHHELD_TIMEOUTS.saturating_mul(self.cfg.election_timeout_ms_max));
            self.lease_withheld_for = Some(from);
            return;
        }
        if self.lease_withheld_for == Some(from) {
            // The proposer we refused for a lease is answered now: leases may be granted again.
            self.lease_withheld_for = None;
            self.lease_withheld_until = self.now;
        }
        if ballot > self.promised {
            self.raise_promise(ballot);
            self.observe_ballot(ballot);
        }
        // Everything above the snapshot, even slots we know chosen: an amnesiac candidate must
        // re-propose every chosen value it may have forgotten accepting.
        let lo = slot_from.max(self.slot_snapshot().next());
        let accepted = self
            .accepted
            .range(lo..)
            .map(|(s, (b, v))| (*s, *b, v.clone()))
            .collect();
        let msg = Message::Promise {
            ballot,
            slot_applied: self.applied,
            slot_snapshot: self.slot_snapshot(),
            accepted,
        };
        self.send_after_persist(from, msg);
    }

    pub(super) fn on_accept(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        slot: Slot,
        value: Value<C>,
        slot_chosen: Slot,
    ) {
        if ballot.node != from || slot == Slot::ZERO {
            self.counters.dropped_malformed += 1;
            return;
        }
        if self.amnesiac && from != self.cfg.id {
            // Only our own (recovery) leadership's accepts are taken while amnesiac.
            self.counters.dropped_amnesiac += 1;
            self.note_leader(from, ballot);
            self.learn_commit(from, ballot, slot_chosen);
            return;
        }
        if ballot < self.promised {
            self.nack(from, ballot);
            return;
        }
        let promised = if ballot > self.promised {
            self.promised = ballot;
            self.round_seen_max = self.round_seen_max.max(ballot.round);
            self.observe_ballot(ballot);
            Some(ballot)
        } else {
            None
        };
        self.note_leader(from, ballot);
        if slot <= self.slot_snapshot() {
            // Chosen and compacted here already; the leader learns it from our commit point.
            if let Some(b) = promised {
                self.persist(Some(b), Vec::new(), None, false);
            }
            self.counters.dropped_stale += 1;
            // The proposer does not know it is chosen: hand it the snapshot.
            self.on_catchup_request(from, slot);
            self.learn_commit(from, ballot, slot_chosen);
            return;
        }
        let fresh = self
            .accepted
            .get(&slot)
            .is_none_or(|(b, v)| *b != ballot || *v != value);
        if fresh {
            if let Some((b, _)) = self.accepted.get(&slot) {
                assert!(
                    *b <= ballot,
                    "accepted ballot at {slot} would go back: {ballot} < {b}"
                );
            }
            self.accepted.insert(slot, (ballot, value.clone()));
            self.accepted_ballot_max = self.accepted_ballot_max.max(ballot);
            self.persist(promised, vec![(slot, ballot, value)], None, false);
        } else if promised.is_some() {
            self.persist(promised, Vec::new(), None, false);
        }
        self.send_after_persist(from, Message::Accepted { ballot, slot });
        self.learn_commit(from, ballot, slot_chosen);
    }

    pub(super) fn on_heartbeat(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        slot_chosen: Slot,
        seq: u64,
        lease_asked: u64,
    ) {
        if ballot.node != from {
            self.counters.dropped_malformed += 1;
            return;
        }
        if self.amnesiac {
            self.counters.dropped_amnesiac += 1;
            self.note_leader(from, ballot);
            self.learn_commit(from, ballot, slot_chosen);
            return;
        }
        if ballot < self.promised {
            self.nack(from, ballot);
            return;
        }
        self.note_leader(from, ballot);
        // Our promise is <= `ballot` now, so no higher ballot can have used us in a phase 1
        // before this instant: that is what confirms the leader's reads. With a lease granted,
        // that stays true until `now + lease_ms` on our clock (`lease_refuses`).
        let applied = self.applied;
        let lease_ms = if self.now < self.lease_withheld_until {
            0
        } else {
            lease_asked.min(self.cfg.read_lease_ms)
        };
        if lease_ms > 0 {
            let until = self.now.add_ms(lease_ms);
            let until = self
                .lease_granted
                .map_or(until, |(_, earlier)| earlier.max(until));
            self.lease_granted = Some((Some(from), until));
        }
        self.send(
            from,
            Message::HeartbeatAck {
                ballot,
                seq,
                applied,
                lease_ms,
            },
        );
        self.learn_commit(from, ballot, slot_chosen);
    }

    /// Whether a read lease we granted forbids promising a ballot of `proposer` now: until it
    /// ends, only its holder may raise our promise (a holder campaigning again has left the
    /// leadership the lease was for). A lease granted to another holder since replaces it:
    /// that holder led at a ballot above the first, which needed promises of a quorum that
    /// the first lease's grantors could give only once their grants had ended.
    pub(super) fn lease_refuses(&self, proposer: NodeId) -> bool {
        self.lease_granted
            .is_some_and(|(holder, until)| self.now < until && holder != Some(proposer))
    }

    pub(super) fn nack(&mut self, to: NodeId, ballot: Ballot) {
        self.counters.nacks_sent += 1;
        let promised = self.promised;
        self.send(to, Message::Nack { ballot, promised });
    }

    /// A proposer at `ballot` (>= our promise) is active: follow it.
    pub(super) fn note_leader(&mut self, from: NodeId, ballot: Ballot) {
        if ballot < self.promised || from == self.cfg.id {
            return;
        }
        self.leader_seen_at = Some(self.now);
        if self.amnesiac {
            // Keep recovering (a live leader must not postpone it); only remember whom to
            // learn chosen values from. A higher ballot ends our own recovery attempt.
            self.observe_ballot(ballot);
            if matches!(self.role, Role::Leader(_)) {
                return;
            }
            if self.leader != Some(from) {
                self.leader = Some(from);
                self.report_role();
            }
            return;
        }
        self.observe_ballot(ballot);
        match &self.role {
            Role::Leader(_) => {}
            Role::Follower if self.leader == Some(from) => {
                self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
            }
            _ => self.become_follower(Some(from)),
        }
    }

    /// A ballot above our own proposer ballot exists: a candidate or leader steps down.
    pub(super) fn observe_ballot(&mut self, ballot: Ballot) {
        self.round_seen_max = self.round_seen_max.max(ballot.round);
        let mine = match &self.role {
            Role::Candidate { ballot, .. } => Some(*ballot),
            Role::Leader(l) => Some(l.ballot),
            _ => None,
        };
        if mine.is_some_and(|m| m < ballot) {
            self.become_follower(None);
        }
    }
}
