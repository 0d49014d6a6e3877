//! Linearizable reads, by read-index or by a read lease.
//!
//! Read-index: a read arriving at the leader waits for a heartbeat round started after it to be
//! acknowledged by a quorum (so no higher ballot had taken over when the read arrived), and for
//! the state machine to apply every slot proposed before it arrived.
//!
//! Read lease (`Config::read_lease_ms` > 0): each heartbeat asks its receivers for a lease, a
//! promise to raise their promise to no other proposer's ballot for `lease_ms` from when they
//! receive it (`Replica::lease_refuses`). While a quorum of the one membership governing every
//! slot after `applied` has granted one for a round sent at `t`, and now is before `t +
//! lease_ms - margin` (`config::lease_margin_ms`: the clocks' rates differ by at most
//! `clock_drift_ppm`), no higher ballot can have finished a phase 1: the read is confirmed on
//! arrival, with no round of its own. It still waits for `applied` to reach every slot proposed
//! or known chosen before it arrived. docs/protocol.md, "Read leases", has the argument.

use std::fmt::Debug;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::io::{Action, ProposeError, ReadId};
use super::replica::{Replica, Role};
use crate::time::Instant;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PendingRead {
    pub(super) id: ReadId,
    /// The heartbeat round that must be acknowledged by a quorum.
    pub(super) seq: u64,
    /// Every slot proposed before the read arrived; applied must reach it.
    pub(super) slot_min: Slot,
    pub(super) confirmed: bool,
}

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    /// Starts a linearizable read. `Action::ReadReady { id, .. }` follows once it may be served
    /// from the local state machine (at once, in this call's actions, if a read lease holds and
    /// everything is applied), or `ReadFailed` if leadership is lost first.
    pub fn read_index(&mut self, now: Instant) -> Result<ReadId, ProposeError> {
        self.now = self.now.max(now);
        let max = self.cfg.pending_max;
        let leader_hint = self.leader;
        let id = ReadId(self.next_read_id);
        let leased = self.lease_holds();
        let lease_mode = self.cfg.read_lease_ms > 0;
        let Role::Leader(l) = &mut self.role else {
            return Err(ProposeError::NotLeader { leader_hint });
        };
        if l.reads.len() >= max {
            return Err(ProposeError::Busy {
                pending: l.reads.len(),
                max,
            });
        }
        self.next_read_id += 1;
        // With leases, `broadcast_heartbeat` numbers each round itself.
        if !leased && !lease_mode {
            l.hb_seq += 1;
        }
        let seq = if leased || !lease_mode {
            l.hb_seq
        } else {
            l.hb_seq + 1
        };
        // Every slot proposed before the read arrived, every slot phase 1 found (some may be
        // chosen and not proposed again yet: the leader proposes only up to `applied + α`),
        // and every slot heard chosen.
        let slot_min = Slot(l.slot_next.0 - 1)
            .max(l.slot_top)
            .max(self.slot_chosen_heard);
        l.reads.push_back(PendingRead {
            id,
            seq,
            slot_min,
            confirmed: leased,
        });
        if leased {
            self.counters.reads_by_lease += 1;
            self.release_reads();
        } else {
            self.broadcast_heartbeat();
        }
        Ok(id)
    }

    /// Whether this leader's read lease holds now: exactly one membership governs every slot
    /// after `applied` (no change in effect soon, none in flight: a lease does not span a
    /// change), phase 1 covered it, and a quorum of its voters (counting ourselves) granted
    /// leases that have not ended on our clock.
    pub(super) fn lease_holds(&self) -> bool {
        if self.cfg.read_lease_ms == 0 {
            return false;
        }
        let Role::Leader(l) = &self.role else {
            return false;
        };
        let memberships = self.memberships_governing();
        let [m] = memberships.as_slice() else {
            return false;
        };
        if !self.phase1_covers() {
            return false;
        }
        let now = self.now;
        let granted = m
            .voters
            .iter()
            .filter(|v| **v == self.cfg.id || l.lease_end.get(v).is_some_and(|e| now < *e))
            .count();
        granted >= m.quorum()
    }

    /// Every membership that governs a slot after `applied` as far as we know it, and every
    /// change we have in flight.
    fn memberships_governing(&self) -> Vec<super::membership::Membership> {
        let mut memberships = self.memberships_after(self.applied);
        let Role::Leader(l) = &self.role else {
            return memberships;
        };
        let in_flight = l
            .reconfig
            .iter()
            .chain(l.proposals.values().filter_map(|p| match &p.value {
                Value::Reconfig(m) => Some(m),
                _ => None,
            }))
            .chain(l.backlog.values().filter_map(|(_, v)| match v {
                Value::Reconfig(m) => Some(m),
                _ => None,
            }));
        memberships.extend(in_flight.cloned());
        memberships
    }

    /// Phase 1 covered every membership that governs a slot we may not know yet (its
    /// findings, up to `slot_top`, applied too): a value chosen before we took over, in a
    /// membership our first promisers were not in, shows up only in a later promise.
    fn phase1_covers(&self) -> bool {
        let Role::Leader(l) = &self.role else {
            return false;
        };
        let alpha = self.cfg.reconfig_delay_slots as u64;
        let applied = self.applied;
        self.schedule
            .over(applied.next(), Slot(applied.0 + alpha))
            .all(|m| {
                m.voters
                    .iter()
                    .filter(|v| l.promised_by.contains(**v))
                    .count()
                    >= m.quorum()
            })
    }

    pub(super) fn on_heartbeat_ack(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        seq: u64,
        applied: Slot,
        lease_ms: u64,
    ) {
        let now = self.now;
        let ppm = self.cfg.clock_drift_ppm;
        let Role::Leader(l) = &mut self.role else {
            self.counters.dropped_stale += 1;
            return;
        };
        if l.ballot != ballot || seq > l.hb_seq {
            self.counters.dropped_stale += 1;
            return;
        }
        l.heard_at.insert(from, now);
        // A lease counts from when we sent the round (the grantor received it later), for
        // what it granted less the drift margin. Not more than we asked.
        let lease_ms = lease_ms.min(self.cfg.read_lease_ms);
        if lease_ms > 0 {
            if let Some(sent) = l.hb_sent.get(&seq) {
                let margin = super::config::lease_margin_ms(lease_ms, ppm);
                let end = sent.add_ms(lease_ms.saturating_sub(margin));
                let e = l.lease_end.entry(from).or_insert(end);
                *e = (*e).max(end);
            }
        }
        let e = l.hb_acked.entry(from).or_insert(0);
        *e = (*e).max(seq);
        let a = l.applied_by.entry(from).or_insert(Slot(0));
        *a = (*a).max(applied);
        self.release_reads();
    }

    /// Emits `ReadReady` for every read confirmed by a quorum and covered by `applied`.
    ///
    /// Across a membership change, "a quorum" is a quorum of every membership that governs a
    /// slot after `applied` as far as we know it, and of every change we have in flight: a
    /// higher ballot could only have chosen a value after `applied` with promises from a quorum
    /// of one of them (docs/protocol.md, "Membership changes").
    pub(super) fn release_reads(&mut self) {
        if !matches!(&self.role, Role::Leader(l) if !l.reads.is_empty()) {
            return;
        }
        let applied = self.applied;
        let id_self = self.cfg.id;
        let memberships = self.memberships_governing();
        let covered = self.phase1_covers();
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        // Per membership, the quorum-th highest acknowledged round, counting our own as the
        // latest; the lowest of those is confirmed.
        let seq_confirmed = memberships
            .iter()
            .map(|m| {
                let mut acked: Vec<u64> = m
                    .voters
                    .iter()
                    .map(|v| {
                        if *v == id_self {
                            u64::MAX
                        } else {
                            l.hb_acked.get(v).copied().unwrap_or(0)
                        }
                    })
                    .collect();
                acked.sort_unstable_by(|a, b| b.cmp(a));
                acked[m.quorum() - 1]
            })
            .min()
            .unwrap_or(0);
        for r in l.reads.iter_mut() {
            if r.seq <= seq_confirmed {
                r.confirmed = true;
            }
        }
        let found = l.slot_top;
        while l
            .reads
            .front()
            .is_some_and(|r| r.confirmed && covered && r.slot_min.max(found) <= applied)
        {
            let r = l.reads.pop_front().expect("front checked");
            self.actions.push_back(Action::ReadReady {
                id: r.id,
                slot_applied_min: r.slot_min.max(found),
            });
        }
    }
}
