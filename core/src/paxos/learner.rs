//! Learning: which slots are chosen, applying them in order, catching up by fetching chosen
//! values or a snapshot, and compaction.

use std::collections::BTreeMap;
use std::fmt::Debug;

use rand_chacha::rand_core::RngCore;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::io::Action;
use super::membership::{Membership, Schedule};
use super::message::Message;
use super::replica::{Replica, Role};

/// Chosen values sent in one catch-up reply at most.
pub const CATCHUP_ENTRIES_MAX: usize = 512;

/// What the last compaction cut from the in-memory log: the chosen and accepted values at or
/// below its slot. Nothing reads it again; it exists so that the driver can free it where a
/// long free does not stall the replica ([`Replica::take_retired`]). Dropping it is all there
/// is to do with it.
pub struct Retired<C> {
    log: BTreeMap<Slot, Value<C>>,
    accepted: BTreeMap<Slot, (Ballot, Value<C>)>,
}

impl<C> Retired<C> {
    /// How many slots it holds (chosen plus accepted).
    pub fn slots(&self) -> usize {
        self.log.len() + self.accepted.len()
    }
}

impl<C> Debug for Retired<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retired")
            .field("log", &self.log.len())
            .field("accepted", &self.accepted.len())
            .finish()
    }
}

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    /// The proposer of `ballot` declares every slot <= `slot_chosen` chosen. Our accepted value
    /// at slot s is the chosen one when we accepted it at exactly `ballot` (a proposer proposes
    /// one value per slot per ballot, and it proposed the chosen one). Other slots are fetched.
    pub(super) fn learn_commit(&mut self, from: NodeId, ballot: Ballot, slot_chosen: Slot) {
        if from == self.cfg.id {
            return;
        }
        if slot_chosen > self.slot_chosen_heard {
            self.slot_chosen_heard = slot_chosen;
        }
        let mut s = self.applied.next();
        while s <= slot_chosen {
            if !self.log.contains_key(&s) {
                match self.accepted.get(&s) {
                    Some((b, v)) if *b == ballot => {
                        let v = v.clone();
                        self.log.insert(s, v);
                    }
                    _ => break,
                }
            }
            s = s.next();
        }
        self.apply_ready();
        if self.applied < slot_chosen {
            self.request_catchup(from);
        }
    }

    /// `slot` is chosen with `value` (we lead and a quorum accepted it).
    pub(super) fn on_chosen(&mut self, slot: Slot, value: Value<C>) {
        if slot <= self.slot_snapshot() {
            return;
        }
        if let Some(known) = self.log.get(&slot) {
            assert_eq!(*known, value, "two values chosen at slot {slot}");
            return;
        }
        self.log.insert(slot, value);
        self.apply_ready();
    }

    /// Emits `Apply` for every consecutive known-chosen slot after `applied`.
    pub(super) fn apply_ready(&mut self) {
        let before = self.applied;
        let alpha = self.cfg.reconfig_delay_slots as u64;
        while let Some(v) = self.log.get(&self.applied.next()) {
            let slot = self.applied.next();
            if slot == Slot(1) && self.first_membership_unknown {
                // Its cluster version is the first membership's, not known yet.
                break;
            }
            if let Value::Reconfig(m) = v {
                // The planted bug `Faults::reconfig_at_once` governs from the next slot.
                let alpha = if self.cfg.faults.reconfig_at_once {
                    1
                } else {
                    alpha
                };
                self.schedule.schedule(Slot(slot.0 + alpha), m.clone());
            }
            let value = v.clone();
            self.actions.push_back(Action::Apply { slot, value });
            self.applied = slot;
        }
        if self.applied > before {
            self.slot_chosen_heard = self.slot_chosen_heard.max(self.applied);
            if let Some(from) = self.removed {
                // A membership at least as new as the one we were told of names us again.
                let me = self.cfg.id;
                let back = self
                    .schedule
                    .entries()
                    .iter()
                    .any(|(s, m)| *s >= from && m.is_member(me));
                if back {
                    self.removed = None;
                    self.report_role();
                }
            }
            self.refresh_peers();
            self.step_down_if_removed();
            self.retire_proposals();
            self.release_reads();
            self.check_recovered();
        }
    }

    /// A leader that learned slots chosen by other means (catch-up) stops proposing them.
    fn retire_proposals(&mut self) {
        let applied = self.applied;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        // A proposal overtaken this way can only differ from the chosen value if a higher
        // ballot chose it, i.e. we are deposed and about to hear so; its commands are dropped
        // like any queued command of a deposed leader.
        l.proposals = l.proposals.split_off(&applied.next());
        // An amnesiac leader still proposes (so accepts, durably, at its ballot) every slot up
        // to what phase 1 found, even those catch-up brought: recovery ends only once it holds
        // again every value it may have accepted before the loss (protocol.md section 7).
        if l.slot_next <= applied && l.recovery_goal.is_none() {
            l.slot_next = applied.next();
        }
    }

    /// Asks `from` (which we know to be ahead of us) for chosen values after `applied`, unless
    /// a request is outstanding.
    pub(super) fn request_catchup(&mut self, from: NodeId) {
        if from == self.cfg.id {
            return;
        }
        self.catchup_ahead = Some(from);
        self.send_catchup_request(from);
    }

    /// Asks someone else than `not`: a peer, or the replica last known to be ahead of us (it
    /// may be in no membership we know of), drawn from the seeded RNG.
    fn request_catchup_elsewhere(&mut self, not: Option<NodeId>) {
        let mut candidates: Vec<NodeId> = self.peers.clone();
        if let Some(a) = self.catchup_ahead {
            if !candidates.contains(&a) && a != self.cfg.id {
                candidates.push(a);
            }
        }
        let others: Vec<NodeId> = candidates
            .iter()
            .copied()
            .filter(|p| Some(*p) != not)
            .collect();
        let pick = if others.is_empty() {
            not.or_else(|| candidates.first().copied())
        } else {
            let i = (self.rng.next_u64() % others.len() as u64) as usize;
            Some(others[i])
        };
        if let Some(from) = pick {
            self.send_catchup_request(from);
        }
    }

    fn send_catchup_request(&mut self, from: NodeId) {
        if from == self.cfg.id {
            return;
        }
        self.catchup_source = Some(from);
        if self.catchup_deadline.is_some_and(|t| self.now < t) {
            return;
        }
        self.catchup_deadline = Some(self.now.add_ms(self.cfg.heartbeat_ms * 2));
        self.counters.catchups_requested += 1;
        let slot_from = if self.wants_snapshot() {
            self.slot_snapshot().next()
        } else {
            self.applied.next()
        };
        self.send(from, Message::CatchupRequest { slot_from });
    }

    /// A recovering leader needs a durable snapshot, not only the values: from whom.
    fn snapshot_source(&self) -> Option<NodeId> {
        match &self.role {
            Role::Leader(l) => match l.recovery_goal {
                Some((snap_min, from)) if snap_min > self.slot_snapshot() => Some(from),
                _ => None,
            },
            _ => None,
        }
    }

    fn wants_snapshot(&self) -> bool {
        self.snapshot_source().is_some()
    }

    /// On a timeout: if still behind what we know is chosen, ask again.
    pub(super) fn retry_catchup_if_due(&mut self) {
        if self.catchup_deadline.is_some_and(|t| self.now < t) {
            return;
        }
        self.catchup_deadline = None;
        if let Some(from) = self.snapshot_source() {
            self.request_catchup(from);
        } else if self.applied < self.slot_chosen_heard {
            // The last request went unanswered (whom we asked may not have what we miss, or
            // be down): ask another peer.
            self.request_catchup_elsewhere(self.catchup_source);
        }
    }

    pub(super) fn on_catchup_request(&mut self, from: NodeId, slot_from: Slot) {
        if slot_from == Slot::ZERO {
            self.counters.dropped_malformed += 1;
            return;
        }
        if slot_from > self.applied.next() && !self.amnesiac {
            // It applied more than we did (a replica asks from what it has not applied): we
            // are the one behind, e.g. after missing a membership change. Ask it.
            self.request_catchup(from);
        }
        let (snapshot, start) = match &self.snapshot {
            Some((s, snap)) if slot_from <= *s => (Some((*s, snap.clone())), s.next()),
            _ => (None, slot_from),
        };
        let mut entries = Vec::new();
        let mut s = start;
        while s <= self.applied && entries.len() < CATCHUP_ENTRIES_MAX {
            match self.log.get(&s) {
                Some(v) => entries.push((s, v.clone())),
                None => break,
            }
            s = s.next();
        }
        // With a snapshot, the schedule as of it. Without one, from slot 1, our whole schedule
        // (the cluster's first membership included) if we know it: the asker may have only
        // guessed its first membership (a joining or rejoining replica).
        let from_start = snapshot.is_none() && start == Slot(1) && self.snapshot.is_none();
        let schedule = (snapshot.is_some() || (from_start && !self.first_membership_unknown))
            .then(|| self.schedule.clone());
        if snapshot.is_none() && entries.is_empty() && schedule.is_none() {
            self.counters.dropped_stale += 1;
            return;
        }
        self.send(
            from,
            Message::CatchupReply {
                snapshot,
                schedule,
                entries,
            },
        );
    }

    pub(super) fn on_catchup_reply(
        &mut self,
        from: NodeId,
        snapshot: Option<(Slot, S)>,
        schedule: Option<Schedule>,
        entries: Vec<(Slot, Value<C>)>,
    ) {
        let consecutive = entries.windows(2).all(|w| w[1].0 == w[0].0.next());
        let starts_right = match (&snapshot, entries.first()) {
            (Some((s, _)), Some((e, _))) => *e == s.next(),
            (None, Some((e, _))) => *e > Slot::ZERO,
            _ => true,
        };
        if !consecutive || !starts_right {
            self.counters.dropped_malformed += 1;
            return;
        }
        let entries_len = entries.len();
        let installs = snapshot
            .as_ref()
            .is_some_and(|(slot, _)| *slot > self.applied);
        if snapshot.is_none() {
            if let Some(schedule) = &schedule {
                self.learn_membership_first(schedule);
            }
        }
        if let Some((slot, snap)) = snapshot {
            if installs {
                if schedule.is_some() {
                    self.membership_guessed = false;
                    self.first_membership_unknown = false;
                }
                self.schedule = schedule
                    .unwrap_or_else(|| Schedule::new(Membership::voters(self.cfg.members.clone())));
                self.take_snapshot(slot, snap, true, false);
            } else if slot > self.slot_snapshot() {
                // Same state as ours at `slot` (applied prefixes agree): keep it as our own.
                self.take_snapshot(slot, snap, false, false);
            }
        }
        for (slot, value) in entries {
            if slot <= self.slot_snapshot() {
                continue;
            }
            if let Some(known) = self.log.get(&slot) {
                assert_eq!(
                    *known, value,
                    "catch-up from {from} disagrees at slot {slot}"
                );
                continue;
            }
            self.log.insert(slot, value);
        }
        let full = entries_len == CATCHUP_ENTRIES_MAX;
        let before = self.applied;
        self.apply_ready();
        let progress = self.applied > before || installs;
        if progress || self.applied >= self.slot_chosen_heard {
            // The request is answered: the next one may go at once.
            self.catchup_deadline = None;
        }
        if full && self.applied > before && self.applied >= self.slot_chosen_heard {
            // A full reply: it may well have more than it said.
            self.request_catchup(from);
        } else if self.applied < self.slot_chosen_heard {
            // More from the same peer while it helps. A reply that brought nothing leaves the
            // request's deadline standing: `retry_catchup_if_due` asks another peer when it
            // passes. Asking at once would spin (fuzz finding `crash-catchup-spin`: peers
            // that answer with only the schedule, at zero network delay, forever).
            if self.applied > before {
                self.request_catchup(from);
            } else {
                self.catchup_source = Some(from);
            }
        } else if let Some(source) = self.snapshot_source() {
            if source != from {
                self.request_catchup(source);
            }
        }
        self.fill_window();
    }

    /// A replica that guessed its first membership takes the one a peer that holds the log
    /// from slot 1 sent, and records it (`Persist::schedule` without a snapshot). The guess
    /// governed nothing this replica acted on: it neither campaigned nor recovered with it.
    fn learn_membership_first(&mut self, schedule: &Schedule) {
        let (first_from, first) = &schedule.entries()[0];
        if !self.first_membership_unknown || self.snapshot.is_some() || *first_from != Slot(1) {
            return;
        }
        if first.validate().is_err() {
            self.counters.dropped_malformed += 1;
            return;
        }
        self.schedule.replace_first(first.clone());
        self.membership_guessed = false;
        self.first_membership_unknown = false;
        self.refresh_peers();
        self.persist_issued += 1;
        self.actions.push_back(Action::Persist(super::io::Persist {
            id: self.persist_issued,
            promised: None,
            accepted: Vec::new(),
            snapshot: None,
            schedule: Some(Schedule::new(first.clone())),
            snapshot_local: false,
            incarnation: None,
            recovered: false,
        }));
        // A recovery that waited for it goes on.
        self.continue_recovery();
    }

    /// Whether the driver should compact now (`Replica::compact` at what its state machine
    /// applied), off its usual grid:
    /// - recovery from disk loss caught up to its target and waits for a durable snapshot of it
    ///   (`recovery.rs`);
    /// - a membership change came into effect after our snapshot. The schedule is durable with
    ///   snapshots only, so a restart from the older one would forget the change until it
    ///   re-learned those slots as chosen, which needs a quorum of the membership before it (a
    ///   removed member included: the simulation found a cluster restarted whole, with its
    ///   removed member gone and one disk damaged, that could elect no leader).
    pub fn snapshot_wanted(&self) -> bool {
        let snap = self.slot_snapshot();
        let recovery = self.amnesiac
            && self
                .recovery_target
                .is_some_and(|(target, _)| self.applied >= target && snap < target);
        let change = self.schedule.entries()[1..]
            .iter()
            .any(|(from, _)| *from > snap && *from <= self.applied);
        recovery || change
    }

    /// Installs a snapshot at `slot`: the log, accepted values and proposals at or below it go.
    /// `install` tells the state machine to replace its state (catch-up); `compact` does not.
    /// `local`: a local compaction, which storage may make durable in the background.
    pub(super) fn take_snapshot(&mut self, slot: Slot, snapshot: S, install: bool, local: bool) {
        assert!(
            !(install && local),
            "an installed snapshot at {slot} marked local"
        );
        assert!(
            slot > self.slot_snapshot(),
            "snapshot {slot} not above current"
        );
        if install {
            assert!(
                slot > self.applied,
                "installing snapshot {slot} at or below applied"
            );
            self.applied = slot;
            self.slot_chosen_heard = self.slot_chosen_heard.max(slot);
            self.actions.push_back(Action::InstallSnapshot {
                slot,
                snapshot: snapshot.clone(),
            });
        }
        // What is cut is kept aside for the driver to free off its turn (`take_retired`):
        // a compaction cuts ~10^4 slots of commands, and freeing them here took tens of ms.
        let log = self.log.split_off(&slot.next());
        let accepted = self.accepted.split_off(&slot.next());
        self.retired = Some(Retired {
            log: std::mem::replace(&mut self.log, log),
            accepted: std::mem::replace(&mut self.accepted, accepted),
        });
        if let Role::Leader(l) = &mut self.role {
            l.proposals = l.proposals.split_off(&slot.next());
            if l.slot_next <= slot {
                l.slot_next = slot.next();
            }
        }
        self.snapshot = Some((slot, snapshot.clone()));
        self.schedule.forget_below(slot.next());
        self.refresh_peers();
        self.persist_snapshot(slot, snapshot, local);
        if install {
            self.apply_ready();
            self.release_reads();
        }
        self.check_recovered();
        self.continue_recovery();
    }
}
