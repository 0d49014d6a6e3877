//! Whole-cluster smoke tests through the testkit harness.

use picket_core::paxos::{NodeId, RoleKind};
use picket_core::testkit::{Cluster, ClusterConfig, History, Machine, Paxos};

type Sim = Cluster<Paxos<u64, History<u64>>>;

#[test]
fn three_nodes_elect_and_commit() {
    let mut c = Sim::new(ClusterConfig::reliable(3, 7));
    c.run_for(1000);
    let l = c.leader().expect("a leader");
    assert_eq!(c.replica(l).unwrap().role(), RoleKind::Leader);
    c.propose(l, (1..=20).collect()).unwrap();
    c.run_for(200);
    for id in c.ids() {
        for k in 1..=20 {
            assert!(c.node(id).machine.contains(&k), "{id} lacks {k}");
        }
    }
    c.check_prefixes_agree();
    assert!(c.commit_within(99, 1000).is_some());
}

#[test]
fn five_nodes_survive_leader_crash() {
    let mut cfg = ClusterConfig::reliable(5, 11);
    cfg.delay_ms_max = 5;
    cfg.persist_delay_ms_max = 2;
    let mut c = Sim::new(cfg);
    c.run_for(1000);
    let l = c.leader().expect("a leader");
    c.propose(l, vec![1, 2, 3]).unwrap();
    c.run_for(3);
    c.crash(l);
    assert!(c.commit_within(4, 3000).is_some());
    c.restart(l);
    assert!(c.commit_within(5, 3000).is_some());
    c.check_prefixes_agree();
    let _ = NodeId(1);
    assert!(c.node(l).machine.contains(&4));
}
