//! Recovery of a replica whose durable state was lost or damaged (no acceptor amnesia).
//!
//! Rule (see docs/protocol.md, "Amnesia"): the amnesiac replica neither promises, accepts nor
//! acknowledges heartbeats for others. Round 1: it asks every other member which incarnation of
//! it they know and what they applied; it catches up to the first such slot above its durable
//! snapshot and holds it under a durable snapshot of its own (so the memberships that govern
//! older slots, whose members may be gone, no longer concern it), and once every other voter of
//! the memberships after that snapshot answered it takes the next incarnation. Round 2: it asks
//! them to fence (durably) its older incarnations and to report its promised ballot. It then runs phase 1 at a ballot
//! above all of those, counting only the others' promises, and as leader proposes again every
//! value up to the highest reported slot. Once those are chosen at its ballot, its durable
//! snapshot covers the others' snapshot floor and the others' promises cover a quorum of every
//! membership up to its applied slot + α, it persists `recovered` and votes again.

use std::collections::BTreeMap;
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
    pub(super) fn start_recovery(&mut self) {
        assert!(self.amnesiac, "recovery without amnesia");
        let nonce = self.rng.next_u64();
        let mut asked = Votes::new();
        for p in &self.peers {
            asked.insert(*p);
        }
        self.role = Role::Recovering {
            nonce,
            fencing: false,
            replies: BTreeMap::new(),
            asked,
        };
        self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
        self.report_role();
        self.broadcast(&Message::RecoverQuery { nonce });
    }

    pub(super) fn on_recover_query(&mut self, from: NodeId, nonce: u64) {
        if self.amnesiac {
            // We know nothing durable; our answer would be worthless.
            self.counters.dropped_amnesiac += 1;
            return;
        }
        let incarnation = self.peer_incarnations.get(&from).copied().unwrap_or(0);
        let slot_applied = self.applied;
        self.send(
            from,
            Message::RecoverReply {
                nonce,
                incarnation,
                slot_applied,
            },
        );
    }

    pub(super) fn on_recover_reply(
        &mut self,
        from: NodeId,
        nonce: u64,
        incarnation: u64,
        slot_applied: Slot,
    ) {
        let Role::Recovering {
            nonce: mine,
            fencing: false,
            replies,
            ..
        } = &mut self.role
        else {
            self.counters.dropped_stale += 1;
            return;
        };
        if *mine != nonce {
            self.counters.dropped_stale += 1;
            return;
        }
        replies.insert(from, incarnation);
        if slot_applied > self.slot_snapshot() && self.recovery_target.is_none() {
            // Chosen up to there: catch up and hold it under a durable snapshot first.
            self.recovery_target = Some((slot_applied, from));
            self.slot_chosen_heard = self.slot_chosen_heard.max(slot_applied);
            if self.applied < slot_applied {
                self.request_catchup(from);
            }
        }
        self.continue_recovery();
    }

    /// Round 1 ends once our durable snapshot reached the target (if any) and every other voter
    /// of the memberships after it answered; then round 2 (fence) starts. Called on each answer
    /// and whenever our snapshot moves.
    pub(super) fn continue_recovery(&mut self) {
        if let Some((target, _)) = self.recovery_target {
            if self.slot_snapshot() < target {
                return;
            }
            self.recovery_target = None;
        }
        let others = self.recovery_peers();
        let Role::Recovering {
            nonce,
            fencing,
            replies,
            asked,
        } = &mut self.role
        else {
            return;
        };
        if *fencing {
            return;
        }
        let nonce = *nonce;
        let missing: Vec<NodeId> = others
            .iter()
            .copied()
            .filter(|o| !replies.contains_key(o))
            .collect();
        if !missing.is_empty() {
            // Members named by the memberships after our (new) snapshot, not asked yet.
            let new: Vec<NodeId> = missing.into_iter().filter(|m| asked.insert(*m)).collect();
            for to in new {
                self.send(to, Message::RecoverQuery { nonce });
            }
            return;
        }
        if self.first_membership_unknown && self.snapshot.is_none() {
            // Without a snapshot this replica may lead and apply from slot 1, whose cluster
            // version is the first membership's: learn it first. A peer that holds the log
            // from slot 1 sends it with the (maybe empty) entries; learning it comes back here.
            // An answer without it leaves the election deadline to start recovery again.
            let ask = replies.keys().copied().next();
            if let Some(peer) = ask {
                self.request_catchup(peer);
            }
            return;
        }
        // Every answer counts, a member's or not: the highest incarnation anyone knows.
        let known = replies.values().copied().max().unwrap_or(0);
        let next = known.max(self.incarnation) + 1;
        replies.clear();
        *fencing = true;
        self.incarnation = next;
        self.persist_incarnation(self.cfg.id, next);
        self.broadcast(&Message::Fence {
            nonce,
            incarnation: next,
        });
    }

    pub(super) fn on_fence(&mut self, from: NodeId, nonce: u64, incarnation: u64) {
        if self.amnesiac {
            self.counters.dropped_amnesiac += 1;
            return;
        }
        self.fence_older(from, incarnation);
        // Our promise now bounds every ballot the fenced incarnations made us promise.
        let promised = self.promised;
        self.send_after_persist(from, Message::FenceAck { nonce, promised });
    }

    pub(super) fn on_fence_ack(&mut self, from: NodeId, nonce: u64, promised: Ballot) {
        let others = self.recovery_peers();
        let Role::Recovering {
            nonce: mine,
            fencing: true,
            replies,
            ..
        } = &mut self.role
        else {
            self.counters.dropped_stale += 1;
            return;
        };
        if *mine != nonce {
            self.counters.dropped_stale += 1;
            return;
        }
        replies.insert(from, promised.round);
        self.round_seen_max = self.round_seen_max.max(promised.round);
        if others.iter().all(|o| replies.contains_key(o)) {
            self.become_candidate();
        }
    }

    /// Whose answers recovery waits for: every other voter of the memberships that govern the
    /// slots after our durable snapshot (as far as we know them).
    fn recovery_peers(&self) -> Vec<NodeId> {
        let mut peers: Vec<NodeId> = self
            .memberships_after(self.slot_snapshot())
            .iter()
            .flat_map(|m| m.voters.iter().copied())
            .filter(|v| *v != self.cfg.id)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}
