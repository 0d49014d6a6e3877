//! Read leases through the testkit cluster: a leader cut off from the others serves reads
//! from its lease only while no other replica can lead. The harness checks every read served
//! against every slot applied anywhere before the read started.

use picket_core::paxos::{NodeId, RoleKind};
use picket_core::testkit::{Cluster, ClusterConfig, History, Paxos};

type Sim = Cluster<Paxos<u64, History<u64>>>;

fn leading(c: &Sim, id: NodeId) -> bool {
    c.replica(id).is_some_and(|r| r.role() == RoleKind::Leader)
}

/// The deposed-leader case, over many seeds: the leader `old` is partitioned away; every 5 ms
/// it is asked for a read (it may still think it leads) and whoever else leads is given a
/// write. With a lease longer than the election timeouts (300 ms against 150..300 ms), the
/// others stop hearing `old` and campaign while its lease runs: only the grantors' refusal to
/// promise keeps them out until it has ended, so no read `old` serves misses a write.
#[test]
fn a_partitioned_leader_serves_from_its_lease_only_while_nobody_else_leads() {
    let mut served_by_lease = 0;
    let mut new_leader_after_ms = Vec::new();
    for seed in 0..40 {
        let mut cfg = ClusterConfig::reliable(3, seed);
        cfg.read_lease_ms = 300;
        cfg.delay_ms_max = 3;
        let mut c = Sim::new(cfg);
        c.run_for(1000);
        let old = c.leader().expect("a leader");
        c.propose(old, vec![1]).expect("leader");
        c.run_for(50);
        let before = c.replica(old).expect("up").counters().reads_by_lease;
        let others: Vec<NodeId> = c.ids().into_iter().filter(|i| *i != old).collect();
        c.partition(&[old]);
        let start = c.now;
        let mut cmd = 2;
        let mut new_leader = None;
        while c.now.ms_since(start) < 1000 {
            c.run_for(5);
            if let Some(l) = others.iter().copied().find(|o| leading(&c, *o)) {
                new_leader.get_or_insert(c.now.ms_since(start));
                let _ = c.propose(l, vec![cmd]);
                cmd += 1;
            }
            if leading(&c, old) {
                let _ = c.read_index(old);
            }
        }
        let after = c.replica(old).expect("up").counters().reads_by_lease;
        served_by_lease += after - before;
        let took = new_leader.unwrap_or_else(|| panic!("seed {seed}: nobody else led"));
        // The lease (300 ms from the last round granted, less the drift margin) ended first.
        assert!(
            took >= 293,
            "seed {seed}: a new leader {took} ms into the lease"
        );
        new_leader_after_ms.push(took);
        c.check_prefixes_agree();
    }
    // The lease did serve reads after the partition (else this tested nothing).
    assert!(
        served_by_lease > 40 * 20,
        "{served_by_lease} reads served by lease"
    );
}
