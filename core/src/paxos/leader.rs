//! The proposer: phase 1 once per leadership (a range prepare), then pipelined, batched phase 2.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::io::RoleKind;
use super::message::{AcceptedEntry, Message};
use super::quorum::Votes;
use super::read_index::PendingRead;
use super::replica::{Replica, Role};
use crate::time::Instant;

/// One slot in flight.
#[derive(Debug)]
pub(super) struct Proposal<C> {
    pub(super) value: Value<C>,
    pub(super) votes: Votes,
    /// When its `Accept` last went out (re-sent at most once per heartbeat interval).
    pub(super) sent_at: Instant,
}

/// State held only while leading at `ballot`.
#[derive(Debug)]
pub(super) struct LeaderState<C> {
    pub(super) ballot: Ballot,
    /// The next slot to propose in; every slot below it is proposed, chosen or compacted.
    pub(super) slot_next: Slot,
    /// Slots proposed at `ballot` and not yet chosen (at most the window, or the re-proposals
    /// made at takeover if there were more).
    pub(super) proposals: BTreeMap<Slot, Proposal<C>>,
    pub(super) reproposed: usize,
    /// Commands waiting for a slot; bounded by `pending_max`.
    pub(super) queue: VecDeque<C>,
    pub(super) deadline_heartbeat: Instant,
    /// Last time each peer answered at `ballot` (for stepping down without a quorum).
    pub(super) heard_at: BTreeMap<NodeId, Instant>,
    /// Heartbeat round counter (read-index confirmations).
    pub(super) hb_seq: u64,
    /// Highest heartbeat round each peer acknowledged at `ballot`.
    pub(super) hb_acked: BTreeMap<NodeId, u64>,
    pub(super) reads: VecDeque<PendingRead>,
    /// While amnesiac: (every slot up to here chosen again at our ballot, our durable snapshot
    /// at least here) ends recovery.
    /// The third element is whom to fetch that snapshot from.
    pub(super) recovery_goal: Option<(Slot, Slot, NodeId)>,
}

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    /// Starts phase 1 at a fresh ballot above every round seen. The ballot is durably promised
    /// before any `Prepare` leaves, so a restarted replica never reuses it.
    pub(super) fn become_candidate(&mut self) {
        let round = self.promised.round.max(self.round_seen_max) + 1;
        let ballot = Ballot::new(round, self.cfg.id);
        self.fail_leader_work();
        self.raise_promise(ballot);
        self.counters.elections_started += 1;
        self.role = Role::Candidate {
            ballot,
            promises: BTreeMap::new(),
        };
        self.leader = None;
        self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
        self.report_role();
        // An amnesiac candidate asks for everything above its (durable) snapshot: it must
        // accept again every value it may have accepted before the loss.
        let slot_from = if self.amnesiac {
            self.slot_snapshot().next()
        } else {
            self.applied.next()
        };
        for i in 0..self.cfg.members.len() {
            let to = self.cfg.members[i];
            // An amnesiac candidate's own promise does not count: it cannot report what it
            // accepted before the loss.
            if to == self.cfg.id && self.amnesiac {
                continue;
            }
            let incarnation = self.incarnation;
            let msg = Message::Prepare {
                ballot,
                slot_from,
                incarnation,
            };
            self.send_after_persist(to, msg);
        }
    }

    pub(super) fn on_promise(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        floors: (Slot, Slot),
        accepted: Vec<AcceptedEntry<C>>,
    ) {
        let (slot_applied, slot_snapshot) = floors;
        let well_formed = slot_snapshot <= slot_applied
            && accepted.windows(2).all(|w| w[0].0 < w[1].0)
            && accepted
                .iter()
                .all(|(s, b, _)| *b <= ballot && *s > slot_snapshot);
        if !well_formed {
            self.counters.dropped_malformed += 1;
            return;
        }
        let quorum = self.quorum();
        let Role::Candidate {
            ballot: mine,
            promises,
        } = &mut self.role
        else {
            self.counters.dropped_stale += 1;
            return;
        };
        if *mine != ballot {
            self.counters.dropped_stale += 1;
            return;
        }
        promises.insert(from, (floors, accepted));
        if promises.len() >= quorum {
            self.become_leader();
        }
    }

    /// Phase 1 is done: re-propose the highest-ballot accepted value of every open slot, fill
    /// gaps with no-ops, and catch up on slots the promisers already know chosen.
    fn become_leader(&mut self) {
        let Role::Candidate { ballot, promises } =
            std::mem::replace(&mut self.role, Role::Follower)
        else {
            unreachable!("become_leader outside candidacy")
        };
        // Slots at or below the floor are not proposed again: slots under a promiser's durable
        // snapshot (we fetch the snapshot from it: it can always serve it) and, unless amnesiac,
        // slots we applied ourselves. Every other slot up to the highest reported is proposed
        // again with its highest-ballot value, or a no-op.
        let amnesiac = self.amnesiac;
        let base = if amnesiac {
            self.slot_snapshot()
        } else {
            self.applied
        };
        let mut highest: BTreeMap<Slot, (Ballot, Value<C>)> = BTreeMap::new();
        let mut floor = (base, self.cfg.id);
        for (node, ((_, slot_snapshot), entries)) in promises {
            if slot_snapshot > floor.0 {
                floor = (slot_snapshot, node);
            }
            for (s, b, v) in entries {
                if highest.get(&s).is_none_or(|(hb, _)| *hb < b) {
                    highest.insert(s, (b, v));
                }
            }
        }
        let slot_top = highest.keys().next_back().copied().unwrap_or(Slot::ZERO);
        let slot_next = slot_top.max(floor.0).max(self.applied).next();
        let first = floor.0.next();
        let heartbeat = self.now.add_ms(self.cfg.heartbeat_ms);
        let mut heard_at = BTreeMap::new();
        for m in &self.cfg.members {
            heard_at.insert(*m, self.now);
        }
        self.role = Role::Leader(Box::new(LeaderState {
            ballot,
            slot_next: first,
            proposals: BTreeMap::new(),
            reproposed: 0,
            queue: VecDeque::new(),
            deadline_heartbeat: heartbeat,
            heard_at,
            hb_seq: 0,
            hb_acked: BTreeMap::new(),
            reads: VecDeque::new(),
            recovery_goal: amnesiac.then_some((Slot(slot_next.0 - 1), floor.0, floor.1)),
        }));
        self.leader = Some(self.cfg.id);
        self.leader_seen_at = Some(self.now);
        self.report_role();
        let mut s = first;
        while s < slot_next {
            let value = match highest.remove(&s) {
                Some((_, v)) => v,
                None => Value::Noop,
            };
            if let Some(known) = self.log.get(&s) {
                assert_eq!(
                    *known, value,
                    "slot {s} known chosen as {known:?} but phase 1 at {ballot} found {value:?}"
                );
            }
            self.propose_value(value);
            s = s.next();
        }
        if let Role::Leader(l) = &mut self.role {
            l.reproposed = l.proposals.len();
        }
        if floor.0 > self.applied || (amnesiac && floor.0 > self.slot_snapshot()) {
            let from = floor.1;
            self.slot_chosen_heard = self.slot_chosen_heard.max(floor.0);
            self.request_catchup(from);
        }
        self.broadcast_heartbeat();
        self.fill_window();
        self.check_recovered();
    }

    /// An amnesiac leader becomes an ordinary voter once every value it may have accepted
    /// before the loss is durably accepted again at its ballot (or under its durable snapshot).
    /// The `recovered` persist is ordered after those persists (see docs/protocol.md).
    pub(super) fn check_recovered(&mut self) {
        if !self.amnesiac {
            return;
        }
        let (applied, snap) = (self.applied, self.slot_snapshot());
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let Some((top, snap_min, _)) = l.recovery_goal else {
            return;
        };
        // Our own accept of each re-proposal was persisted in the step that proposed it; a
        // re-proposal is chosen (or overtaken by catch-up) only in a later step, so the
        // `recovered` persist below is ordered after all of them.
        let reproposals_open = l.proposals.range(..=top).next().is_some();
        if !reproposals_open && applied >= top && snap >= snap_min {
            l.recovery_goal = None;
            self.amnesiac = false;
            self.persist(None, Vec::new(), None, true);
        }
    }

    /// Proposes `value` in the next slot at our ballot.
    fn propose_value(&mut self, value: Value<C>) {
        let chosen = self.applied;
        let Role::Leader(l) = &mut self.role else {
            unreachable!("propose_value outside leadership")
        };
        let slot = l.slot_next;
        l.slot_next = slot.next();
        let ballot = l.ballot;
        l.proposals.insert(
            slot,
            Proposal {
                value: value.clone(),
                votes: Votes::new(),
                sent_at: self.now,
            },
        );
        let msg = Message::Accept {
            ballot,
            slot,
            value,
            slot_chosen: chosen,
            incarnation: self.incarnation,
        };
        self.broadcast(&msg);
        self.send(self.cfg.id, msg);
    }

    /// Moves queued commands into slots while the window has room.
    pub(super) fn fill_window(&mut self) {
        loop {
            let Role::Leader(l) = &mut self.role else {
                return;
            };
            if l.proposals.len() >= self.cfg.window_slots || l.queue.is_empty() {
                return;
            }
            let n = l.queue.len().min(self.cfg.batch_commands_max);
            let mut commands: Vec<C> = l.queue.drain(..n).collect();
            if let Some(head) = self.batch_head.as_ref().and_then(|head| head(&commands)) {
                commands.insert(0, head);
            }
            let value = Value::Batch {
                stamp: self.now,
                commands,
            };
            self.propose_value(value);
        }
    }

    pub(super) fn on_accepted(&mut self, from: NodeId, ballot: Ballot, slot: Slot) {
        let quorum = self.quorum();
        let now = self.now;
        let Role::Leader(l) = &mut self.role else {
            self.counters.dropped_stale += 1;
            return;
        };
        if l.ballot != ballot {
            self.counters.dropped_stale += 1;
            return;
        }
        l.heard_at.insert(from, now);
        let Some(p) = l.proposals.get_mut(&slot) else {
            self.counters.dropped_stale += 1;
            return;
        };
        p.votes.insert(from);
        if !p.votes.reached(quorum) {
            return;
        }
        let p = l.proposals.remove(&slot).expect("present");
        let drained = l.proposals.is_empty();
        self.on_chosen(slot, p.value);
        self.check_recovered();
        self.fill_window();
        if drained {
            // Nothing left to piggyback the commit point on: tell followers now.
            if let Role::Leader(l) = &self.role {
                if l.proposals.is_empty() {
                    self.broadcast_heartbeat();
                }
            }
        }
    }

    pub(super) fn on_nack(&mut self, from: NodeId, ballot: Ballot, promised: Ballot) {
        if promised <= ballot {
            self.counters.dropped_malformed += 1;
            return;
        }
        let mine = match &self.role {
            Role::Candidate { ballot, .. } => Some(*ballot),
            Role::Leader(l) => Some(l.ballot),
            _ => None,
        };
        if mine != Some(ballot) {
            self.counters.dropped_stale += 1;
            return;
        }
        let _ = from;
        self.observe_ballot(promised);
    }

    pub(super) fn broadcast_heartbeat(&mut self) {
        let chosen = self.applied;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let msg = Message::Heartbeat {
            ballot: l.ballot,
            slot_chosen: chosen,
            seq: l.hb_seq,
            incarnation: self.incarnation,
        };
        self.broadcast(&msg);
    }

    /// Leader tick: step down without a quorum heard within the maximum election timeout;
    /// otherwise heartbeat.
    pub(super) fn on_leader_timeout(&mut self) {
        let now = self.now;
        let window = self.cfg.election_timeout_ms_max;
        let quorum = self.quorum();
        let id = self.cfg.id;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if now < l.deadline_heartbeat {
            return;
        }
        let live = l
            .heard_at
            .iter()
            .filter(|(n, t)| **n == id || now.ms_since(**t) <= window)
            .count();
        if live < quorum {
            self.become_follower(None);
            return;
        }
        l.deadline_heartbeat = now.add_ms(self.cfg.heartbeat_ms);
        self.broadcast_heartbeat();
        self.resend_unchosen();
    }

    /// Re-sends the `Accept` of every slot still in flight to the members that have not
    /// answered it (messages may be lost; acceptors treat a duplicate as a no-op).
    fn resend_unchosen(&mut self) {
        let chosen = self.applied;
        let (now, interval) = (self.now, self.cfg.heartbeat_ms);
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let mut out = Vec::new();
        for (slot, p) in l.proposals.iter_mut() {
            if now.ms_since(p.sent_at) < interval {
                continue;
            }
            p.sent_at = now;
            for m in &self.cfg.members {
                if *m != self.cfg.id && !p.votes.contains(*m) {
                    let msg = Message::Accept {
                        ballot: l.ballot,
                        slot: *slot,
                        value: p.value.clone(),
                        slot_chosen: chosen,
                        incarnation: self.incarnation,
                    };
                    out.push((*m, msg));
                }
            }
        }
        for (to, msg) in out {
            self.send(to, msg);
        }
    }

    /// Leaves any proposer role: fails pending reads, drops queued commands.
    pub(super) fn become_follower(&mut self, leader: Option<NodeId>) {
        self.fail_leader_work();
        self.role = Role::Follower;
        self.leader = leader;
        self.deadline_election = self.now.add_ms(self.election_timeout_ms_random());
        self.report_role();
    }

    fn fail_leader_work(&mut self) {
        if let Role::Leader(l) = &mut self.role {
            let reads: Vec<_> = l.reads.drain(..).collect();
            for r in reads {
                self.actions
                    .push_back(super::io::Action::ReadFailed { id: r.id });
            }
        }
    }

    /// Whether this replica believes a leader is alive (leader stickiness for pre-votes).
    pub(super) fn leader_is_live(&self) -> bool {
        if self.role() == RoleKind::Leader {
            return true;
        }
        self.leader.is_some()
            && self
                .leader_seen_at
                .is_some_and(|t| self.now.ms_since(t) < self.cfg.election_timeout_ms_min)
    }
}
