//! `core_steps`: arbitrary schedules of inputs into a 3-replica cluster of the core's testkit
//! (`picket_core::testkit::Cluster`): proposals, reads, time, crashes (losing a random prefix of
//! the unacknowledged persists), restarts, disk loss, partitions, one-way cuts, compaction, over
//! a network whose loss, duplication and delays come from the input.
//!
//! Checked after every step: the replicas' own invariants (asserted by `Replica` after every
//! input) and the testkit checker's (at most one value chosen per slot, only chosen values
//! applied, every `Promise`/`Accepted` backed by storage), and that applied prefixes agree. At
//! the end every fault heals: a proposal must be chosen within 20 simulated seconds and an
//! amnesiac replica must rejoin within 20 more (liveness, as `core/tests/paxos_props.rs`).
//!
//! `PICKET_FUZZ_TRACE=1` prints every op and every replica action when an input panics.

use arbitrary::{Arbitrary, Result, Unstructured};
use picket_core::paxos::NodeId;
use picket_core::testkit::{Cluster, ClusterConfig, History, Paxos};

type Sim = Cluster<Paxos<u64, History<u64>>>;

const NODES: u64 = 3;
/// Steps per input, so one input stays well under a second.
const STEPS_MAX: usize = 64;

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Run(u16),
    Propose(u8, u8),
    Read(u8),
    Crash(u8),
    Restart(u8),
    Partition(u8),
    CutOneWay(u8, u8),
    Heal,
    Compact(u8),
    LoseDisk(u8),
    DropInFlight(u8, u8),
}

fn config(u: &mut Unstructured) -> Result<ClusterConfig> {
    let mut c = ClusterConfig::reliable(NODES as usize, u.arbitrary()?);
    c.drop_per_mille = u.int_in_range(0..=300)?;
    c.duplicate_per_mille = u.int_in_range(0..=200)?;
    c.delay_ms_max = u.int_in_range(0..=100)?;
    c.persist_delay_ms_max = u.int_in_range(0..=50)?;
    c.window_slots = u.int_in_range(1..=16)?;
    c.batch_commands_max = u.int_in_range(1..=8)?;
    Ok(c)
}

fn pick(i: u8) -> NodeId {
    NodeId(u64::from(i) % NODES + 1)
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(cfg) = config(&mut u) else {
        return;
    };
    let mut c = Sim::new(cfg);
    if std::env::var_os("PICKET_FUZZ_TRACE").is_none() {
        return run_steps(&mut c, &mut u);
    }
    // Replaying a finding: print every op and action before the panic goes on.
    c.trace = Some(Vec::new());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_steps(&mut c, &mut u);
    }));
    if let Err(panic) = outcome {
        for line in c.trace.take().unwrap_or_default() {
            eprintln!("{line}");
        }
        std::panic::resume_unwind(panic);
    }
}

fn run_steps(c: &mut Sim, u: &mut Unstructured) {
    let mut next_cmd = 1u64;
    for _ in 0..STEPS_MAX {
        let Ok(op) = u.arbitrary::<Op>() else {
            break;
        };
        if let Some(trace) = c.trace.as_mut() {
            trace.push(format!("---- op {op:?}"));
        }
        step(c, op, &mut next_cmd);
        c.check_prefixes_agree();
    }
    heal_and_check_liveness(c);
}

fn step(c: &mut Sim, op: Op, next_cmd: &mut u64) {
    match op {
        Op::Run(ms) => c.run_for(u64::from(ms % 1000)),
        Op::Propose(i, k) => {
            let k = u64::from(k % 5) + 1;
            let cmds: Vec<u64> = (*next_cmd..*next_cmd + k).collect();
            *next_cmd += k;
            let to = match c.leader() {
                Some(l) if i % 8 < 6 => l,
                _ => pick(i),
            };
            let _ = c.propose(to, cmds);
        }
        Op::Read(i) => {
            let to = match c.leader() {
                Some(l) if i % 8 < 6 => l,
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
            // One lost disk at a time: with 3 replicas, two lost disks lose a quorum's memory.
            c.lose_one_disk(pick(i));
        }
        Op::DropInFlight(a, b) => {
            c.drop_in_flight(pick(a), pick(b));
        }
    }
}

fn heal_and_check_liveness(c: &mut Sim) {
    c.heal_everything();
    assert!(
        c.commit_within(u64::MAX, 20_000).is_some(),
        "seed {}: no commit within 20 s after healing",
        c.cfg.seed
    );
    c.run_for(500);
    c.check_prefixes_agree();
    assert!(
        c.until_no_amnesiac(20_000),
        "seed {}: amnesiac replica never recovered",
        c.cfg.seed
    );
    assert!(
        c.commit_within(u64::MAX - 1, 20_000).is_some(),
        "seed {}: no commit after recovery",
        c.cfg.seed
    );
}
