//! Randomized schedules over the in-memory cluster (3 and 5 replicas): message loss, delay,
//! reordering, duplication, partitions, crashes with lost unacknowledged persists, disk loss and
//! compaction. The harness's checker asserts on every event that at most one value is chosen per
//! slot, that only chosen values are applied, that applied prefixes agree and that the chosen
//! prefix never shrinks; at the end every fault heals and a proposal must be chosen in bounded
//! time.

use picket_core::paxos::{NodeId, RoleKind};
use picket_core::testkit::{Cluster, ClusterConfig, History, Paxos};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

type Sim = Cluster<Paxos<u64, History<u64>>>;

#[derive(Clone, Debug)]
enum Op {
    Run(u64),
    Propose(u64, u64),
    Read(u64),
    Crash(u64),
    Restart(u64),
    Partition(u8),
    /// Messages from the first node to the second are lost (one way only).
    CutOneWay(u64, u64),
    Heal,
    Compact(u64),
    LoseDisk(u64),
}

fn op(disk_loss: bool) -> impl Strategy<Value = Op> {
    op_weighted(disk_loss, 1)
}

/// `reads`: the weight of reads (1 of 21 by default).
fn op_weighted(disk_loss: bool, reads: u32) -> impl Strategy<Value = Op> {
    let loss = if disk_loss { 1 } else { 0 };
    prop_oneof![
        6 => (1u64..400).prop_map(Op::Run),
        5 => (0u64..5, 1u64..6).prop_map(|(n, k)| Op::Propose(n, k)),
        reads => (0u64..5).prop_map(Op::Read),
        2 => (0u64..5).prop_map(Op::Crash),
        2 => (0u64..5).prop_map(Op::Restart),
        1 => any::<u8>().prop_map(Op::Partition),
        1 => (0u64..5, 0u64..5).prop_map(|(a, b)| Op::CutOneWay(a, b)),
        1 => Just(Op::Heal),
        1 => (0u64..5).prop_map(Op::Compact),
        loss => (0u64..5).prop_map(Op::LoseDisk),
    ]
}

fn config(nodes: usize, seed: u64, drop: u64, dup: u64, delay: u64, disk: u64) -> ClusterConfig {
    let mut c = ClusterConfig::reliable(nodes, seed);
    // Window and batch vary with the seed (kept out of the shrunk inputs for stable regressions).
    c.window_slots = 1 + (seed % 16) as usize;
    c.batch_commands_max = 1 + (seed / 16 % 8) as usize;
    c.drop_per_mille = drop;
    c.duplicate_per_mille = dup;
    c.delay_ms_max = delay;
    c.persist_delay_ms_max = disk;
    c
}

/// `config` with read leases of `lease_ms`.
fn config_lease(
    nodes: usize,
    seed: u64,
    faults: (u64, u64, u64, u64),
    lease_ms: u64,
) -> ClusterConfig {
    let (drop, dup, delay, disk) = faults;
    let mut c = config(nodes, seed, drop, dup, delay, disk);
    c.read_lease_ms = lease_ms;
    c
}

fn run(cfg: ClusterConfig, ops: Vec<Op>) {
    let mut c = Sim::new(cfg);
    let tracing = std::env::var_os("PAXOS_TRACE").is_some();
    if tracing {
        c.trace = Some(Vec::new());
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| schedule(&mut c, ops)));
    if let Err(e) = r {
        if tracing {
            dump(&c);
        }
        std::panic::resume_unwind(e);
    }
}

fn schedule(c: &mut Sim, ops: Vec<Op>) {
    let n = c.cfg.nodes as u64;
    let tracing = c.trace.is_some();
    let mut next_cmd = 1u64;
    let pick = |i: u64| NodeId(i % n + 1);
    for op in ops {
        match op {
            Op::Run(ms) => c.run_for(ms),
            Op::Propose(i, k) => {
                let cmds: Vec<u64> = (next_cmd..next_cmd + k).collect();
                next_cmd += k;
                // Mostly at the leader (so commands get chosen), sometimes anywhere.
                let to = match c.leader() {
                    Some(l) if i < 4 => l,
                    _ => pick(i),
                };
                let _ = c.propose(to, cmds);
            }
            Op::Read(3) if c.cfg.read_lease_ms > 0 => {
                // With leases: at every replica that thinks it leads, a deposed one included
                // (it may serve only while its lease holds, and then no other may have led).
                for id in c.ids() {
                    if c.replica(id).is_some_and(|r| r.role() == RoleKind::Leader) {
                        let _ = c.read_index(id);
                    }
                }
            }
            Op::Read(i) => {
                let to = match c.leader() {
                    Some(l) if i < 4 => l,
                    _ => pick(i),
                };
                let _ = c.read_index(to);
            }
            Op::Crash(i) => c.crash(pick(i)),
            Op::Restart(i) => c.restart(pick(i)),
            Op::Partition(mask) => c.partition_mask(mask),
            Op::CutOneWay(a, b) => c.cut_one_way(pick(a), pick(b)),
            Op::Heal => c.heal(),
            Op::Compact(i) => {
                c.compact(pick(i));
            }
            Op::LoseDisk(i) => {
                // One lost disk at a time: recovery needs every other replica's answer.
                c.lose_one_disk(pick(i));
            }
        }
    }
    // Heal everything; a proposal must then be chosen within bounded time.
    c.heal_everything();
    let took = c.commit_within(u64::MAX, 20_000);
    if tracing && took.is_none() {
        dump(c);
    }
    assert!(
        took.is_some(),
        "seed {}: no commit within 20 s after healing",
        c.cfg.seed
    );
    c.run_for(500);
    c.check_prefixes_agree();
    // A replica that lost its disk rejoins the voters once every other replica is reachable.
    let recovered = c.until_no_amnesiac(20_000);
    if !recovered && tracing {
        dump(c);
    }
    assert!(
        recovered,
        "seed {}: amnesiac replica never recovered",
        c.cfg.seed
    );
    assert!(
        c.commit_within(u64::MAX - 1, 20_000).is_some(),
        "no commit after recovery"
    );
    if std::env::var_os("PAXOS_STATS").is_some() {
        let reads: usize = c.ids().iter().map(|id| c.node(*id).reads_ready.len()).sum();
        eprintln!(
            "stats: now={} applied={} reads={reads}",
            c.now,
            c.checker().slots_applied()
        );
    }
    for id in c.ids() {
        assert!(
            c.node(id).machine_contains_final(),
            "{id} missed the final command"
        );
    }
}

/// Prints the end of the trace and each replica's state (debugging aid, `PAXOS_TRACE=1`).
fn dump(c: &Sim) {
    let t = c.trace.as_ref().expect("tracing");
    for l in t.iter().skip(t.len().saturating_sub(
        if std::env::var_os("PAXOS_TRACE_ALL").is_some() {
            usize::MAX
        } else {
            60
        },
    )) {
        println!("{l}");
    }
    for id in c.ids() {
        if let Some(r) = c.replica(id) {
            println!(
                "{id} {:?} amnesiac={} snap={} promised={} leader={:?} applied={} chosen={} {:?}",
                r.role(),
                r.is_amnesiac(),
                r.slot_snapshot(),
                r.ballot_promised(),
                r.leader(),
                r.slot_applied(),
                r.slot_chosen(),
                r.counters()
            );
        }
    }
}

trait Final {
    fn machine_contains_final(&self) -> bool;
}

impl Final for picket_core::testkit::SimNode<u64, History<u64>> {
    fn machine_contains_final(&self) -> bool {
        use picket_core::testkit::Machine;
        self.machine.contains(&u64::MAX)
    }
}

proptest! {
    // Default config (PROPTEST_CASES applies); failures are kept in a committed file.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/paxos_props.txt",
        ))),
        // Each case is a few milliseconds: run 4x PROPTEST_CASES (4,096 cases over the four
        // properties at the CI default of 256) to search more schedules in bounded time.
        cases: 4 * ProptestConfig::default().cases,
        ..ProptestConfig::default()
    })]

    #[test]
    fn three_nodes_safe_and_live(
        seed in any::<u64>(),
        drop in 0u64..150, dup in 0u64..100, delay in 0u64..30, disk in 0u64..20,
        ops in prop::collection::vec(op(false), 1..60),
    ) {
        run(config(3, seed, drop, dup, delay, disk), ops);
    }

    #[test]
    fn five_nodes_safe_and_live(
        seed in any::<u64>(),
        drop in 0u64..150, dup in 0u64..100, delay in 0u64..30, disk in 0u64..20,
        ops in prop::collection::vec(op(false), 1..60),
    ) {
        run(config(5, seed, drop, dup, delay, disk), ops);
    }

    #[test]
    fn three_nodes_with_disk_loss(
        seed in any::<u64>(),
        drop in 0u64..100, dup in 0u64..50, delay in 0u64..20, disk in 0u64..20,
        ops in prop::collection::vec(op(true), 1..60),
    ) {
        run(config(3, seed, drop, dup, delay, disk), ops);
    }

    #[test]
    fn five_nodes_with_disk_loss(
        seed in any::<u64>(),
        drop in 0u64..100, dup in 0u64..50, delay in 0u64..20, disk in 0u64..20,
        ops in prop::collection::vec(op(true), 1..60),
    ) {
        run(config(5, seed, drop, dup, delay, disk), ops);
    }

    // Read leases: the same properties, reads five times as often; every read served must
    // see every slot applied anywhere before it started (the harness checks it), crashes and
    // disk loss included (a restarted replica remembers no lease it granted).
    #[test]
    fn three_nodes_lease_reads(
        seed in any::<u64>(),
        drop in 0u64..150, dup in 0u64..100, delay in 0u64..30, disk in 0u64..20,
        ops in prop::collection::vec(op_weighted(true, 5), 1..60),
    ) {
        // Longer than the longest election timeout: a follower that stopped hearing the
        // leader may campaign while the lease runs; only the grantors' refusal keeps it out.
        run(config_lease(3, seed, (drop, dup, delay, disk), 300), ops);
    }

    #[test]
    fn five_nodes_lease_reads(
        seed in any::<u64>(),
        drop in 0u64..150, dup in 0u64..100, delay in 0u64..30, disk in 0u64..20,
        ops in prop::collection::vec(op_weighted(true, 5), 1..60),
    ) {
        // As picketd sets it: the shortest election timeout.
        run(config_lease(5, seed, (drop, dup, delay, disk), 150), ops);
    }
}
