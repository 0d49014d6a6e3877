//! The cluster version step (docs/upgrades.md): the leader proposes it only once every member
//! has an open connection whose hello says it supports the next version.

use super::*;
use crate::node::peer::{MemberSet, PeerVersion};

fn supports(max: u32) -> PeerVersion {
    PeerVersion {
        release: if max >= 2 {
            "0.2.0".into()
        } else {
            String::new()
        },
        cluster_version_max: max,
        protocol: 1,
    }
}

fn versions(h: &Harness) -> Vec<u32> {
    h.drivers
        .iter()
        .map(|d| d.node().state().cluster_version())
        .collect()
}

#[test]
fn the_leader_steps_the_cluster_version_once_every_member_supports_it() {
    let mut h = harness(64, PersistMode::Inline);
    let sets: Vec<MemberSet> = (0..3)
        .map(|_| MemberSet::new((1..=3).map(NodeId)))
        .collect();
    for (driver, set) in h.drivers.iter_mut().zip(&sets) {
        driver.member_set = Some(set.clone());
    }
    let leader = h.leader();
    let me = NodeId(leader as u64 + 1);
    let peers: Vec<NodeId> = (1..=3).map(NodeId).filter(|n| *n != me).collect();
    // A log whose first membership states no cluster version (release 0.1's) is at 1.
    h.session(leader);
    h.settle(1_500);
    assert_eq!(versions(&h), [1, 1, 1], "nobody said anything yet");
    // One member runs release 0.1 (its hello names no cluster version): no step.
    sets[leader].set_version(peers[0], supports(2));
    sets[leader].set_version(peers[1], supports(1));
    h.settle(1_500);
    assert_eq!(versions(&h), [1, 1, 1], "a member of 0.1 holds the step");
    // That member is stopped to be swapped: not connected, so unknown, so still no step.
    sets[leader].clear_version(peers[1]);
    h.settle(1_500);
    assert_eq!(
        versions(&h),
        [1, 1, 1],
        "a member without a connection holds it"
    );
    // It comes back on the new release: the leader steps up, every replica applies it.
    sets[leader].set_version(peers[1], supports(2));
    h.settle(1_500);
    assert_eq!(versions(&h), [2, 2, 2]);
    for driver in &h.drivers {
        let audit = driver.node().state().snapshot().audit;
        let steps: Vec<_> = audit
            .iter()
            .filter(|r| r.action == picket_core::locks::AuditAction::ClusterVersionSet)
            .collect();
        assert_eq!(steps.len(), 1, "stepped once");
        assert!(
            steps[0].reason.contains(&format!("{} 0.2.0", peers[1])),
            "{}",
            steps[0].reason
        );
    }
    assert_eq!(h.drivers[leader].status().cluster_version, 2);
}

#[test]
fn a_replica_at_a_cluster_version_it_does_not_support_stops_with_exit_status_65() {
    let error = DriverError::ClusterVersionUnsupported {
        version: picket_core::locks::CLUSTER_VERSION + 1,
    };
    let text = error.to_string();
    assert!(
        text.contains("the log is at cluster version 3")
            && text.contains("supports cluster versions up to 2"),
        "{text}"
    );
    assert_eq!(
        crate::exit_status::ExitStatus::of_driver(&error).code(),
        65,
        "the data directory needs the operator: no restart loop"
    );
}
