//! The proposer: phase 1 once per leadership (a range prepare), then pipelined, batched phase 2.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::io::{ReconfigError, RoleKind};
use super::membership::Membership;
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
    /// Phase 1's findings not proposed yet: the highest-ballot value reported per slot, up to
    /// `slot_top` (slots in between without a report get a no-op).
    pub(super) backlog: BTreeMap<Slot, (Ballot, Value<C>)>,
    /// The highest slot phase 1 reported (or the floor): every slot up to it is proposed again.
    pub(super) slot_top: Slot,
    /// Who promised `ballot` (phase 1 must cover a quorum of every slot's voters before the
    /// leader proposes there).
    pub(super) promised_by: Votes,
    /// Whom a `Prepare` of `ballot` went to.
    pub(super) prepared: Votes,
    /// A membership change waiting for a slot.
    pub(super) reconfig: Option<Membership>,
    /// Commands waiting for a slot; bounded by `pending_max`.
    pub(super) queue: VecDeque<C>,
    pub(super) deadline_heartbeat: Instant,
    /// Last time each peer answered at `ballot` (for stepping down without a quorum).
    pub(super) heard_at: BTreeMap<NodeId, Instant>,
    /// Heartbeat round counter (read-index confirmations).
    pub(super) hb_seq: u64,
    /// Highest heartbeat round each peer acknowledged at `ballot`.
    pub(super) hb_acked: BTreeMap<NodeId, u64>,
    /// The last slot each peer said it had applied, in its latest heartbeat acknowledgement.
    pub(super) applied_by: BTreeMap<NodeId, Slot>,
    pub(super) reads: VecDeque<PendingRead>,
    /// With read leases: when each heartbeat round still able to give a lease was sent.
    pub(super) hb_sent: BTreeMap<u64, Instant>,
    /// With read leases: until when each peer's grant lets us count it (its lease, counted from
    /// when we sent the round it acknowledged, less the drift margin, on our clock).
    pub(super) lease_end: BTreeMap<NodeId, Instant>,
    /// While amnesiac: our durable snapshot must reach this slot (besides every slot up to
    /// `slot_top` chosen again at our ballot) to end recovery; the second element is whom to
    /// fetch that snapshot from.
    pub(super) recovery_goal: Option<(Slot, NodeId)>,
}

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    /// Starts phase 1 at a fresh ballot above every round seen. The ballot is durably promised
    /// before any `Prepare` leaves, so a restarted replica never reuses it.
    pub(super) fn become_candidate(&mut self) {
        if self.lease_refuses(self.cfg.id) {
            // Reached from a pre-vote or a recovery that began before we granted a lease.
            self.put_off_campaign();
            return;
        }
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
        let slot_from = self.phase1_base().next();
        // The voters of every membership that governs a slot we may propose in before we
        // apply more (phase 1 needs a quorum of each).
        let mut targets: Vec<NodeId> = self
            .memberships_after(self.phase1_base())
            .iter()
            .flat_map(|m| m.voters.iter().copied())
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for to in targets {
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
        if let Role::Leader(l) = &self.role {
            if l.ballot == ballot {
                self.on_late_promise(from, floors, accepted);
                return;
            }
        }
        let needed = self.memberships_after(self.phase1_base());
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
        let covered = needed
            .iter()
            .all(|m| m.quorum_among(|v| promises.contains_key(&v)));
        if covered {
            self.become_leader();
        }
    }

    /// Phase 1 covers the slots after this one: what we applied, or (amnesiac) our durable
    /// snapshot.
    pub(super) fn phase1_base(&self) -> Slot {
        if self.amnesiac {
            self.slot_snapshot()
        } else {
            self.applied
        }
    }

    /// A promise of our ballot from a voter of a membership that came into view after we took
    /// over: its findings above what we proposed join the backlog.
    fn on_late_promise(
        &mut self,
        from: NodeId,
        floors: (Slot, Slot),
        accepted: Vec<AcceptedEntry<C>>,
    ) {
        let (_, slot_snapshot) = floors;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if !l.promised_by.insert(from) {
            self.counters.dropped_stale += 1;
            return;
        }
        for (s, b, v) in accepted {
            if s < l.slot_next {
                continue;
            }
            l.slot_top = l.slot_top.max(s);
            if l.backlog.get(&s).is_none_or(|(hb, _)| *hb < b) {
                l.backlog.insert(s, (b, v));
            }
        }
        // Its snapshot covers chosen slots it reports nothing for: they are not proposed (a
        // no-op there could differ from what was chosen), they come by catch-up.
        if slot_snapshot >= l.slot_next {
            l.slot_next = slot_snapshot.next();
            l.slot_top = l.slot_top.max(slot_snapshot);
            l.backlog = l.backlog.split_off(&l.slot_next);
        }
        if slot_snapshot > self.applied {
            self.slot_chosen_heard = self.slot_chosen_heard.max(slot_snapshot);
            self.request_catchup(from);
        }
        self.fill_window();
        self.check_recovered();
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
        let base = self.phase1_base();
        let mut highest: BTreeMap<Slot, (Ballot, Value<C>)> = BTreeMap::new();
        let mut floor = (base, self.cfg.id);
        let mut promised_by = Votes::new();
        for (node, ((_, slot_snapshot), entries)) in promises {
            promised_by.insert(node);
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
        for m in self.peers.iter().chain([&self.cfg.id]) {
            heard_at.insert(*m, self.now);
        }
        let prepared = promised_by.clone();
        let backlog = highest.split_off(&first);
        self.role = Role::Leader(Box::new(LeaderState {
            ballot,
            slot_next: first,
            proposals: BTreeMap::new(),
            backlog,
            slot_top: Slot(slot_next.0 - 1),
            promised_by,
            prepared,
            reconfig: None,
            queue: VecDeque::new(),
            deadline_heartbeat: heartbeat,
            heard_at,
            hb_seq: 0,
            hb_acked: BTreeMap::new(),
            applied_by: BTreeMap::new(),
            reads: VecDeque::new(),
            hb_sent: BTreeMap::new(),
            lease_end: BTreeMap::new(),
            recovery_goal: amnesiac.then_some(floor),
        }));
        self.leader = Some(self.cfg.id);
        self.leader_seen_at = Some(self.now);
        self.report_role();
        // Phase 1's findings go out first (as far as `applied + α` and the promises reach).
        self.fill_window();
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
        // Before the loss we may have accepted in any slot up to the chosen prefix + α. Once
        // we applied past the highest slot reported, every such slot is at most
        // `applied + α`: the others' promises (ours never counts while amnesiac) must cover a
        // quorum of each membership up to there, or a value we alone carried with a voter
        // not yet asked could be chosen and forgotten (docs/protocol.md, "Amnesia").
        let (lo, hi) = (self.phase1_base().next(), self.slot_known_max());
        let Role::Leader(l) = &self.role else {
            return;
        };
        let covered = self
            .schedule
            .over(lo, hi)
            .all(|m| m.quorum_among(|v| l.promised_by.contains(v)));
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let Some((snap_min, _)) = l.recovery_goal else {
            return;
        };
        // Late promises may raise the highest slot reported: every slot up to it is proposed
        // again too.
        let top = l.slot_top;
        // Our own accept of each re-proposal was persisted in the step that proposed it; a
        // re-proposal is chosen (or overtaken by catch-up) only in a later step, so the
        // `recovered` persist below is ordered after all of them.
        let reproposals_open = l.proposals.range(..=top).next().is_some() || l.slot_next <= top;
        if covered && !reproposals_open && applied >= top && snap >= snap_min {
            l.recovery_goal = None;
            self.amnesiac = false;
            self.persist(None, Vec::new(), None, true);
            self.refresh_peers();
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

    /// Proposes in the next slots while it may: phase 1's findings first (re-proposed, or a
    /// no-op in a gap), then a membership change waiting, then queued commands while the
    /// window has room, then no-ops up to the first slot a scheduled change governs (so that
    /// it takes effect without waiting for traffic).
    ///
    /// It stops at a slot whose membership it does not know yet (above `applied + α`), whose
    /// voters have not given phase 1 a quorum at our ballot (it asks them: `Prepare`), or that
    /// does not count us as a voter (we were removed: we step down once that is in effect).
    pub(super) fn fill_window(&mut self) {
        loop {
            let known_max = self.slot_known_max();
            let Role::Leader(l) = &mut self.role else {
                return;
            };
            let slot = l.slot_next;
            if slot > known_max {
                return;
            }
            let m = self.schedule.at(slot);
            // (An amnesiac leader proposes again slots it applied, whoever voted on them.)
            if !m.is_voter(self.cfg.id) && slot > self.applied {
                return;
            }
            if !m.quorum_among(|v| l.promised_by.contains(v)) {
                self.prepare_missing(slot);
                return;
            }
            let value = if slot <= l.slot_top {
                let found = l.backlog.remove(&slot).map(|(_, v)| v);
                match (self.log.get(&slot), found) {
                    (Some(known), Some(value)) => {
                        assert_eq!(
                            *known, value,
                            "slot {slot} known chosen as {known:?} but phase 1 at {} found \
                             {value:?}",
                            l.ballot
                        );
                        value
                    }
                    // Chosen, and learned by catch-up after phase 1 (an amnesiac leader
                    // proposes it again all the same).
                    (Some(known), None) => known.clone(),
                    (None, found) => found.unwrap_or(Value::Noop),
                }
            } else if l.proposals.len() >= self.cfg.window_slots {
                return;
            } else if let Some(m) = l.reconfig.take() {
                Value::Reconfig(m)
            } else if !l.queue.is_empty() {
                let n = l.queue.len().min(self.cfg.batch_commands_max);
                let commands: Vec<C> = l.queue.drain(..n).collect();
                Value::Batch {
                    stamp: self.now,
                    commands,
                }
            } else if self
                .schedule
                .last_change_from()
                .is_some_and(|from| from >= slot)
            {
                // Up to and including the first slot the newest membership governs: the change
                // is in effect (`slot_applied` reached `membership_from`, every replica's snapshot
                // taken) without waiting for traffic. A leader the change removes stops one
                // short (it is no voter there), and the next leader fills that slot.
                Value::Noop
            } else {
                return;
            };
            self.propose_value(value);
        }
    }

    /// Asks the voters of `slot`'s membership that have not promised our ballot to: phase 1
    /// from `slot` on (once per voter; again at each heartbeat while unanswered).
    fn prepare_missing(&mut self, slot: Slot) {
        let incarnation = self.incarnation;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let ballot = l.ballot;
        let mut out = Vec::new();
        for v in &self.schedule.at(slot).voters {
            if !l.promised_by.contains(*v) && l.prepared.insert(*v) {
                out.push(*v);
            }
        }
        for to in out {
            let msg = Message::Prepare {
                ballot,
                slot_from: slot,
                incarnation,
            };
            self.send(to, msg);
        }
    }

    /// Queues a change to `membership` (one at a time; see [`Replica::propose_membership`]). Unless `force`, a quorum of its voters
    /// must have answered us within the maximum election timeout: a change that leaves the
    /// new voters without a quorum stops the cluster.
    pub(super) fn queue_membership(
        &mut self,
        now: crate::time::Instant,
        membership: Membership,
        force: bool,
    ) -> Result<(), ReconfigError> {
        self.now = self.now.max(now);
        let membership = membership.sorted();
        membership.validate()?;
        let leader_hint = self.leader;
        let (pending, pending_from) = (self.schedule.last().clone(), self.schedule.last_from());
        let applied_next = self.applied.next();
        let (id, now, window) = (self.cfg.id, self.now, self.cfg.election_timeout_ms_max);
        let Role::Leader(l) = &mut self.role else {
            return Err(ReconfigError::NotLeader { leader_hint });
        };
        let in_flight = l.reconfig.clone().or_else(|| {
            l.proposals
                .values()
                .map(|p| &p.value)
                .chain(l.backlog.values().map(|(_, v)| v))
                .find_map(|v| match v {
                    Value::Reconfig(m) => Some(m.clone()),
                    _ => None,
                })
        });
        if let Some(m) = in_flight {
            return Err(ReconfigError::NotChosen(m.to_string()));
        }
        if pending_from > applied_next {
            return Err(ReconfigError::NotInEffect {
                pending: pending.to_string(),
                from: pending_from,
            });
        }
        if membership.same_members(&pending) {
            return Err(ReconfigError::Unchanged(membership.to_string()));
        }
        let reachable = membership
            .voters
            .iter()
            .filter(|v| {
                **v == id
                    || l.heard_at
                        .get(v)
                        .is_some_and(|t| now.ms_since(*t) <= window)
            })
            .count();
        if !force && reachable < membership.quorum() {
            return Err(ReconfigError::Unreachable {
                reachable,
                quorum: membership.quorum(),
            });
        }
        l.reconfig = Some(membership);
        self.fill_window();
        Ok(())
    }

    pub(super) fn on_accepted(&mut self, from: NodeId, ballot: Ballot, slot: Slot) {
        let now = self.now;
        let membership = self.schedule.at(slot);
        let (voter, quorum) = (membership.is_voter(from), membership.quorum());
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
        if !voter {
            // A learner's acceptance: it follows the log, it does not choose.
            return;
        }
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
            // A refused pre-vote at our round: the next asks above `promised`.
            Role::PreCandidate { round, .. } => Some(Ballot::new(*round, NodeId(0))),
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
        let (now, lease_ms) = (self.now, self.cfg.read_lease_ms);
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if lease_ms > 0 {
            // Each round its own number, so an acknowledgement names the send time a lease
            // counts from. Rounds sent a lease ago can give none any more.
            l.hb_seq += 1;
            l.hb_sent.insert(l.hb_seq, now);
            while l
                .hb_sent
                .first_key_value()
                .is_some_and(|(_, t)| now.ms_since(*t) >= lease_ms)
            {
                l.hb_sent.pop_first();
            }
        }
        let msg = Message::Heartbeat {
            ballot: l.ballot,
            slot_chosen: chosen,
            seq: l.hb_seq,
            incarnation: self.incarnation,
            lease_ms,
        };
        self.broadcast(&msg);
    }

    /// Leader tick: step down without a quorum heard within the maximum election timeout;
    /// otherwise heartbeat.
    pub(super) fn on_leader_timeout(&mut self) {
        let now = self.now;
        let window = self.cfg.election_timeout_ms_max;
        let id = self.cfg.id;
        let membership = self.schedule.at(self.applied.next());
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if now < l.deadline_heartbeat {
            return;
        }
        let live = membership
            .voters
            .iter()
            .filter(|n| {
                **n == id
                    || l.heard_at
                        .get(n)
                        .is_some_and(|t| now.ms_since(*t) <= window)
            })
            .count();
        if live < membership.quorum() || !membership.is_voter(id) {
            self.become_follower(None);
            return;
        }
        l.deadline_heartbeat = now.add_ms(self.cfg.heartbeat_ms);
        // Prepares still unanswered go again.
        let unanswered: Vec<NodeId> = l
            .prepared
            .iter()
            .filter(|v| !l.promised_by.contains(*v))
            .collect();
        for v in unanswered {
            if let Role::Leader(l) = &mut self.role {
                l.prepared.remove(v);
            }
        }
        self.broadcast_heartbeat();
        self.resend_unchosen();
        self.fill_window();
    }

    /// A leader that the membership in effect no longer counts as a voter steps down (a voter
    /// of the new membership takes over at its election timeout).
    pub(super) fn step_down_if_removed(&mut self) {
        if matches!(self.role, Role::Leader(_)) && !self.is_voter() && !self.amnesiac {
            // The commit point first: the new voters learn from it that they are voters now.
            self.broadcast_heartbeat();
            self.become_follower(None);
        }
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
            for m in &self.peers {
                if !p.votes.contains(*m) {
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
