//! The cluster version step (docs/upgrades.md, "The cluster version"): the leader proposes
//! `SetClusterVersion` once every member of the memberships in play has an open connection from
//! it whose hello says it supports the next version; and a replica whose applied log is at a
//! cluster version this release does not support stops (it cannot know what the log means).

use picket_core::locks::CLUSTER_VERSION;
use picket_core::paxos::NodeId;
use picket_core::time::Instant;
use picket_storage::Disk;

use super::{Driver, DriverError};
use crate::node::clock::Clock;

/// How long the leader waits before it proposes a step again (one that was refused, or whose
/// slot is still being chosen).
pub(super) const CLUSTER_VERSION_RETRY_MS: u64 = 1_000;

impl<D: Disk + Clone + 'static, C: Clock> Driver<D, C> {
    /// Leader: steps the cluster version up when every member supports a higher one. A member
    /// this leader has no connection to counts as unknown (it may be down being replaced, and
    /// come back as the older release): no step until it answers.
    pub(super) fn step_cluster_version(&mut self, now: Instant) {
        let current = self.node.state().cluster_version();
        if current >= CLUSTER_VERSION || !self.node.is_ready_leader() {
            return;
        }
        if self.cluster_version_retry_at.is_some_and(|at| at > now) {
            return;
        }
        let Some(set) = &self.member_set else {
            return;
        };
        let versions = set.versions();
        let me = self.handle.id;
        let replica = self.node.replica();
        let members: std::collections::BTreeSet<NodeId> = replica
            .membership()
            .members()
            .chain(replica.membership_latest().0.members())
            .collect();
        let mut target = CLUSTER_VERSION;
        let mut releases = Vec::new();
        for id in members {
            if id == me {
                releases.push(format!("{id} {}", crate::version::VERSION));
                continue;
            }
            let Some(version) = versions.get(&id) else {
                return;
            };
            target = target.min(version.cluster_version_max);
            releases.push(format!("{id} {}", version.release_text()));
        }
        if target <= current {
            return;
        }
        self.cluster_version_retry_at = Some(now.add_ms(CLUSTER_VERSION_RETRY_MS));
        let reason = format!("every member supports it: {}", releases.join(", "));
        match self
            .node
            .propose_cluster_version(now, target, reason.clone())
        {
            Ok(()) => tracing::info!(node = %me, from = current, to = target, %reason,
                "proposed a cluster version step"),
            Err(error) => tracing::debug!(node = %me, to = target, %error,
                "cluster version step not proposed (tried again later)"),
        }
    }

    /// Stops a replica whose applied log is at a cluster version this release does not support.
    pub(super) fn check_cluster_version(&self) -> Result<(), DriverError> {
        let version = self.node.state().cluster_version();
        if version > CLUSTER_VERSION {
            return Err(DriverError::ClusterVersionUnsupported { version });
        }
        Ok(())
    }
}
