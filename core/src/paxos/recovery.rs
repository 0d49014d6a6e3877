//! Recovery of a replica whose durable state was lost or damaged (no acceptor amnesia).
//!
//! Rule (see docs/protocol.md, "Amnesia"): the amnesiac replica neither promises, accepts nor
//! acknowledges heartbeats for others. Round 1: it asks every other member which incarnation of
//! it they know and takes the next one. Round 2: it asks every other member to fence (durably)
//! its older incarnations and to report its promised ballot. It then runs phase 1 at a ballot
//! above all of those, counting only the others' promises, and as leader proposes again every
//! value up to the highest reported slot. Once those are chosen at its ballot (and its durable
//! snapshot covers the others' snapshot floor) it persists `recovered` and votes again.

use std::collections::BTreeMap;
use std::fmt::Debug;

use rand_chacha::rand_core::RngCore;

use super::ballot::{Ballot, NodeId};
use super::message::Message;
use super::replica::{Replica, Role};

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    pub(super) fn start_recovery(&mut self) {
        assert!(self.amnesiac, "recovery without amnesia");
        let nonce = self.rng.next_u64();
        self.role = Role::Recovering {
            nonce,
            fencing: false,
            replies: BTreeMap::new(),
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
        self.send(from, Message::RecoverReply { nonce, incarnation });
    }

    pub(super) fn on_recover_reply(&mut self, from: NodeId, nonce: u64, incarnation: u64) {
        let others = self.recovery_peers();
        let Role::Recovering {
            nonce: mine,
            fencing: false,
            replies,
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
        if !others.iter().all(|o| replies.contains_key(o)) {
            return;
        }
        let known = replies.values().copied().max().unwrap_or(0);
        let next = known.max(self.incarnation) + 1;
        replies.clear();
        if let Role::Recovering { fencing, .. } = &mut self.role {
            *fencing = true;
        }
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
        let known = self.peer_incarnations.get(&from).copied().unwrap_or(0);
        if incarnation > known {
            self.peer_incarnations.insert(from, incarnation);
            self.persist_incarnation(from, incarnation);
        }
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
