//! The safety checker: at most one value chosen per slot, only chosen values applied, and the
//! same value applied at a slot on every replica. A slot's value is chosen once a quorum of
//! the voters of the membership that governs it (by the rule, from the chosen values alone)
//! durably accepted it at one ballot.

use std::collections::BTreeMap;
use std::fmt::Debug;

use crate::paxos::{Ballot, NodeId, Schedule, Slot, Value, Votes};

/// Watches durable acceptances and applies across the whole cluster history.
#[derive(Debug)]
pub struct Checker<C> {
    /// Which membership governs which slot, from the chosen changes in slot order.
    schedule: Schedule,
    /// α of the membership rule.
    alpha: u64,
    seed: u64,
    /// Durable acceptances ever made, per slot and ballot (kept across crashes and disk loss:
    /// once chosen, always chosen).
    votes: BTreeMap<Slot, BTreeMap<Ballot, (Value<C>, Votes)>>,
    chosen: BTreeMap<Slot, Value<C>>,
    applied: BTreeMap<Slot, Value<C>>,
    /// Highest slot such that all slots up to it are chosen; never shrinks.
    pub slot_chosen_prefix: Slot,
}

impl<C: Clone + Debug + Eq> Checker<C> {
    pub fn new(schedule: Schedule, alpha: usize, seed: u64) -> Self {
        Checker {
            schedule,
            alpha: alpha as u64,
            seed,
            votes: BTreeMap::new(),
            chosen: BTreeMap::new(),
            applied: BTreeMap::new(),
            slot_chosen_prefix: Slot::ZERO,
        }
    }

    pub fn on_durable_accept(
        &mut self,
        node: NodeId,
        slot: Slot,
        ballot: Ballot,
        value: &Value<C>,
    ) {
        let seed = self.seed;
        // Whoever sent this accept knew the membership of `slot`: every slot up to `slot - α`
        // was chosen (the rule's premise; the leader applied them).
        assert!(
            slot.0 <= self.slot_chosen_prefix.0 + self.alpha,
            "seed {seed}: {node} accepted at slot {slot} while only {} was chosen: its \
             membership was not known",
            self.slot_chosen_prefix
        );
        let membership = self.schedule.at(slot).clone();
        let e = self
            .votes
            .entry(slot)
            .or_default()
            .entry(ballot)
            .or_insert_with(|| (value.clone(), Votes::new()));
        assert_eq!(
            e.0, *value,
            "seed {seed}: two values proposed at slot {slot} ballot {ballot}"
        );
        if !membership.is_voter(node) {
            return;
        }
        e.1.insert(node);
        if e.1.reached(membership.quorum()) {
            self.mark_chosen(slot, value);
        }
    }

    fn mark_chosen(&mut self, slot: Slot, value: &Value<C>) {
        if let Some(c) = self.chosen.get(&slot) {
            assert_eq!(
                c, value,
                "seed {}: two values chosen at slot {slot}",
                self.seed
            );
        } else {
            self.chosen.insert(slot, value.clone());
        }
        if let Some(a) = self.applied.get(&slot) {
            assert_eq!(
                a, value,
                "seed {}: applied value not the chosen one at {slot}",
                self.seed
            );
        }
        let before = self.slot_chosen_prefix;
        while let Some(v) = self.chosen.get(&self.slot_chosen_prefix.next()) {
            let s = self.slot_chosen_prefix.next();
            if let Value::Reconfig(m) = v {
                self.schedule.schedule(Slot(s.0 + self.alpha), m.clone());
            }
            self.slot_chosen_prefix = s;
        }
        assert!(self.slot_chosen_prefix >= before, "chosen prefix shrank");
    }

    pub fn on_apply(&mut self, node: NodeId, slot: Slot, value: &Value<C>) {
        let seed = self.seed;
        let chosen = self.chosen.get(&slot);
        assert!(
            chosen.is_some(),
            "seed {seed}: {node} applied slot {slot} which no quorum accepted"
        );
        assert_eq!(
            chosen,
            Some(value),
            "seed {seed}: {node} applied a value not chosen at {slot}"
        );
        match self.applied.get(&slot) {
            Some(a) => assert_eq!(a, value, "seed {seed}: {node} applied {slot} differently"),
            None => {
                self.applied.insert(slot, value.clone());
            }
        }
    }

    /// A replica installed a snapshot whose history is `values`.
    pub fn on_snapshot(&mut self, node: NodeId, slot: Slot, values: Vec<(Slot, Value<C>)>) {
        if let Some((last, _)) = values.last() {
            assert!(
                *last <= slot,
                "{node}: snapshot at {slot} holds slot {last}"
            );
        }
        self.check_prefix(&values);
    }

    /// Panics unless `values` agrees with what was applied elsewhere.
    pub fn check_prefix(&self, values: &[(Slot, Value<C>)]) {
        for (i, (slot, v)) in values.iter().enumerate() {
            assert_eq!(
                slot.0,
                i as u64 + 1,
                "seed {}: history has a hole",
                self.seed
            );
            if let Some(a) = self.applied.get(slot) {
                assert_eq!(a, v, "seed {}: prefixes disagree at {slot}", self.seed);
            }
        }
    }

    pub fn chosen(&self, slot: Slot) -> Option<&Value<C>> {
        self.chosen.get(&slot)
    }

    pub fn slots_applied(&self) -> usize {
        self.applied.len()
    }
}
