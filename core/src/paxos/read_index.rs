//! Linearizable reads by read-index: a read arriving at the leader waits for a heartbeat round
//! started after it to be acknowledged by a quorum (so no higher ballot had taken over when the
//! read arrived), and for the state machine to apply every slot proposed before it arrived.

use std::fmt::Debug;

use super::ballot::{Ballot, NodeId, Slot};
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
        let slot_min = Slot(l.slot_next.0 - 1);
        l.reads.push_back(PendingRead {
            id,
            seq: l.hb_seq,
            slot_min,
            confirmed: false,
        });
        self.broadcast_heartbeat();
        Ok(id)
    }

    pub(super) fn on_heartbeat_ack(&mut self, from: NodeId, ballot: Ballot, seq: u64) {
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
        self.release_reads();
    }

    /// Emits `ReadReady` for every read confirmed by a quorum and covered by `applied`.
    pub(super) fn release_reads(&mut self) {
        let quorum = self.quorum();
        let applied = self.applied;
        let id_self = self.cfg.id;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        // The quorum-th highest acknowledged round, counting our own as the latest.
        let mut acked: Vec<u64> = self
            .cfg
            .members
            .iter()
            .map(|m| {
                if *m == id_self {
                    u64::MAX
                } else {
                    l.hb_acked.get(m).copied().unwrap_or(0)
                }
            })
            .collect();
        acked.sort_unstable_by(|a, b| b.cmp(a));
        let seq_confirmed = acked[quorum - 1];
        for r in l.reads.iter_mut() {
            if r.seq <= seq_confirmed {
                r.confirmed = true;
            }
        }
        while l
            .reads
            .front()
            .is_some_and(|r| r.confirmed && r.slot_min <= applied)
        {
            let r = l.reads.pop_front().expect("front checked");
            self.actions.push_back(Action::ReadReady {
                id: r.id,
                slot_applied_min: r.slot_min,
            });
        }
    }
}
