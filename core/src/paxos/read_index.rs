//! Linearizable reads by read-index: a read arriving at the leader waits for a heartbeat round
//! started after it to be acknowledged by a quorum (so no higher ballot had taken over when the
//! read arrived), and for the state machine to apply every slot proposed before it arrived.

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
    /// from the local state machine, or `ReadFailed` if leadership is lost first.
    pub fn read_index(&mut self, now: Instant) -> Result<ReadId, ProposeError> {
        self.now = self.now.max(now);
        let max = self.cfg.pending_max;
        let leader_hint = self.leader;
        let id = ReadId(self.next_read_id);
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
        l.hb_seq += 1;
        // Every slot proposed before the read arrived, every slot phase 1 found (some may be
        // chosen and not proposed again yet: the leader proposes only up to `applied + α`),
        // and every slot heard chosen.
        let slot_min = Slot(l.slot_next.0 - 1)
            .max(l.slot_top)
            .max(self.slot_chosen_heard);
        l.reads.push_back(PendingRead {
            id,
            seq: l.hb_seq,
            slot_min,
            confirmed: false,
        });
        self.broadcast_heartbeat();
        Ok(id)
    }

    pub(super) fn on_heartbeat_ack(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        seq: u64,
        applied: Slot,
    ) {
        let now = self.now;
        let Role::Leader(l) = &mut self.role else {
            self.counters.dropped_stale += 1;
            return;
        };
        if l.ballot != ballot || seq > l.hb_seq {
            self.counters.dropped_stale += 1;
            return;
        }
        l.heard_at.insert(from, now);
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
        let alpha = self.cfg.reconfig_delay_slots as u64;
        let mut memberships = self.memberships_after(applied);
        let Role::Leader(l) = &mut self.role else {
            return;
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
        // Phase 1 must cover every membership that governs a slot we may not know yet (its
        // findings, up to `slot_top`, applied too): a value chosen before we took over, in a
        // membership our first promisers were not in, shows up only in a later promise.
        let covered = self
            .schedule
            .over(applied.next(), Slot(applied.0 + alpha))
            .all(|m| {
                m.voters
                    .iter()
                    .filter(|v| l.promised_by.contains(**v))
                    .count()
                    >= m.quorum()
            });
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
