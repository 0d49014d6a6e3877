//! Recovery of a replica whose durable state was lost or damaged (no acceptor amnesia).
//!
//! Rule (see docs/protocol.md, "Amnesia"): the amnesiac replica neither promises, accepts nor
//! acknowledges heartbeats. It asks every other member for its promised ballot, waits for all of
//! them, then runs phase 1 at a ballot above all of them, counting only the others' promises.
//! When that phase 1 succeeds it is an ordinary leader again and clears the durable "lost" flag.

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
            replies: BTreeMap::new(),
        };
        self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
        self.report_role();
        self.broadcast(&Message::RecoverQuery { nonce });
    }

    pub(super) fn on_recover_query(&mut self, from: NodeId, nonce: u64) {
        if self.amnesiac {
            // We do not know what we promised; our answer would be worthless.
            self.counters.dropped_amnesiac += 1;
            return;
        }
        let promised = self.promised;
        self.send(from, Message::RecoverReply { nonce, promised });
    }

    pub(super) fn on_recover_reply(&mut self, from: NodeId, nonce: u64, promised: Ballot) {
        let others = self.cfg.members.len() - 1;
        let Role::Recovering {
            nonce: mine,
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
        replies.insert(from, promised);
        self.round_seen_max = self.round_seen_max.max(promised.round);
        if replies.len() == others {
            self.become_candidate();
        }
    }
}
