//! The cluster version (docs/upgrades.md, "The cluster version"): a number in the replicated
//! state that says which release's log commands and rules the log may use. A release supports
//! every cluster version up to [`CLUSTER_VERSION`]; the leader steps the cluster version up with
//! `SetClusterVersion` once every member told it that it supports the new one, so that while a
//! cluster runs two releases, everything in the log means the same to both.
//!
//! What each version added:
//! - **1**: the log of release 0.1 (and of every log without a cluster version).
//! - **2** (release 0.2): a membership change the leader stamped takes a revision of its own;
//!   a force-release request's checklist is binding for an advisory class (the advisory rule);
//!   `RecordSnapshotSave`; `SetClusterVersion` itself; a hand-off first removes the due waits at
//!   the head of its queue ([`CLUSTER_VERSION_HAND_OFF_EXPIRY`]).

use super::audit::{AuditAction, AuditRecord};
use super::command::Reply;
use super::error::LockError;
use super::LockStateMachine;

/// The highest cluster version this release supports (and the one a cluster it initializes
/// starts at).
pub const CLUSTER_VERSION: u32 = 2;

/// The cluster version of a log that never stated one: release 0.1's.
pub const CLUSTER_VERSION_FIRST: u32 = 1;

/// The cluster version from which a hand-off (a release, a session's end, a cancel, an
/// approved force-release, more semaphore permits, `ExpireWaits` itself) first removes, at its
/// own revision, the waits at the head of its queue whose deadline is at or before its log time,
/// so that no hand-off grants an expired wait whatever the log holds before it
/// (`LockStateMachine::hand_off_expires_waits`). Below it, the log itself carries an
/// `ExpireWaits` before every hand-off (release 0.1's batch head; a 0.2 leader writes it too
/// while the cluster is at 1: `node::waits`).
pub const CLUSTER_VERSION_HAND_OFF_EXPIRY: u32 = 2;

/// The principal recorded as the actor of a cluster version step (nobody asked: the leader
/// proposed it).
pub const CLUSTER_VERSION_ACTOR: &str = "picketd";

/// Longest reason a `SetClusterVersion` carries, in bytes.
pub const CLUSTER_VERSION_REASON_MAX: usize = 1_024;

impl LockStateMachine {
    /// The cluster version the applied log is at.
    pub fn cluster_version(&self) -> u32 {
        self.cluster_version
    }

    /// Sets the cluster version the log starts at, before its first slot is applied: the
    /// cluster's first membership says it (`Membership::cluster_version`; 0, unstated: 1).
    pub fn begin_cluster_version(&mut self, version: u32) {
        assert_eq!(
            self.revision.0, 0,
            "the cluster version the log starts at is set before anything is applied"
        );
        self.cluster_version = version.max(CLUSTER_VERSION_FIRST);
    }

    /// Whether the log may use what `version` added.
    pub(crate) fn at_cluster_version(&self, version: u32) -> bool {
        self.cluster_version >= version
    }

    /// `SetClusterVersion`: the cluster version only rises. A version above [`CLUSTER_VERSION`]
    /// is recorded all the same (every replica must apply the log alike); the replica's driver
    /// stops a replica whose state is at a version it does not support.
    pub(crate) fn apply_set_cluster_version(
        &mut self,
        version: u32,
        reason: String,
    ) -> Result<Reply, LockError> {
        let previous = self.cluster_version;
        if version <= previous {
            return Err(LockError::ClusterVersionNotAbove {
                current: previous,
                asked: version,
            });
        }
        let mut reason = format!("cluster version {previous} -> {version}: {reason}");
        if reason.len() > CLUSTER_VERSION_REASON_MAX {
            let mut end = CLUSTER_VERSION_REASON_MAX;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        self.cluster_version = version;
        self.audit.push(AuditRecord {
            reason,
            ..AuditRecord::new(
                self.revision,
                self.time,
                CLUSTER_VERSION_ACTOR.to_owned(),
                AuditAction::ClusterVersionSet,
                String::new(),
                String::new(),
            )
        });
        Ok(Reply::ClusterVersionSet { previous })
    }
}
