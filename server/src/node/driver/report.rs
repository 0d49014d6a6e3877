//! What the driver reports: its status (`Request::Status`), and the storage, Paxos,
//! membership and lock figures it puts on `/metrics`.

use super::*;

impl<D: Disk + Clone + 'static, C: Clock> Driver<D, C> {
    /// The durable-state-lost gauge and time: lost while the core is amnesiac.
    pub(super) fn report_storage(&mut self) {
        let lost = self.node.replica().is_amnesiac();
        if self.storage.durable_state_lost && !lost && self.lost_for.is_none() {
            self.lost_for = Some(self.started.elapsed());
            tracing::info!(node = %self.handle.id, "durable state re-learned from the other replicas");
        }
        self.storage.durable_state_lost = lost;
        let lost_for = self.lost_for.unwrap_or_else(|| {
            if lost {
                self.started.elapsed()
            } else {
                std::time::Duration::ZERO
            }
        });
        self.metrics.set_durable_state_lost(lost, lost_for);
    }

    /// Reports the Paxos role, ballot and slots.
    pub(super) fn report_paxos(&self) {
        let replica = self.node.replica();
        let ballot = replica.ballot_promised();
        self.metrics.set_paxos(PaxosStats {
            role: self.node.role(),
            ballot_round: ballot.round,
            ballot_node_id: ballot.node.0,
            slot_chosen: replica.slot_chosen().0,
            slot_applied: replica.slot_applied().0,
        });
    }

    /// Reports the membership and, on the leader, each member's lag. Not on every apply (it
    /// rebuilds a labelled family): with the statistics and on a role change.
    pub(super) fn report_membership(&self) {
        let replica = self.node.replica();
        let (membership, from) = replica.membership_latest();
        let applied = replica.slot_applied().0;
        let lag = membership
            .members()
            .filter(|m| *m != self.handle.id)
            .filter_map(|m| {
                let theirs = replica.peer_applied(m)?;
                Some((m.0, applied.saturating_sub(theirs.0)))
            })
            .collect();
        self.metrics.set_membership(&MembershipStats {
            voters: membership.voters.len(),
            learners: membership.learners.len(),
            config_revision: from.0,
            lag,
        });
    }

    /// Recomputes the namespace series and the session count (every [`STATS_EVERY_MS`]).
    pub(super) fn report_stats(&mut self, now: Instant) {
        if now < self.stats_next {
            return;
        }
        self.stats_next = now.add_ms(STATS_EVERY_MS);
        let state = self.node.state();
        self.metrics
            .set_namespace_stats(&namespace_stats(state, now));
        self.metrics.set_sessions(state.session_count());
        self.report_paxos();
        self.report_membership();
        self.report_storage();
    }

    pub(super) fn status(&self) -> NodeStatus {
        let replica = self.node.replica();
        let (latest, from) = replica.membership_latest();
        NodeStatus {
            id: self.node.replica().id(),
            role: self.node.role(),
            leader: self.node.leader(),
            ready_leader: self.node.is_ready_leader(),
            revision: self.node.state().revision(),
            slot_applied: self.node.replica().slot_applied().0,
            boot: self.boot,
            counters: self.counters.clone(),
            storage: self.storage.clone(),
            membership: latest.clone(),
            membership_from: from.0,
            members_applied: latest
                .members()
                .filter_map(|id| replica.peer_applied(id).map(|s| (id, s.0)))
                .collect(),
            cluster_version: self.node.state().cluster_version(),
        }
    }

    pub(super) fn report_save(&self, outcome: SaveOutcome) {
        match outcome {
            SaveOutcome::Saved { took, .. } => self.metrics.set_compaction(took),
            SaveOutcome::Failed { .. } => self.metrics.inc_snapshot_save_failures(),
            SaveOutcome::Superseded { .. } => {}
        }
    }
}
