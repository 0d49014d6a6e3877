//! The simulation's entry points (only under `--cfg madsim`; `scripts/sim` drives them):
//!
//! - `seed_run`: one seed (`PICKET_SIM_SEED`, default 1) of `PICKET_SIM_SCENARIO` (default
//!   `mixed`) with `PICKET_SIM_REPLICAS` replicas (3, default, or 5), optionally broken
//!   (`PICKET_SIM_BREAK`), its replicas persisting inline or, with `PICKET_SIM_PERSIST=thread`,
//!   on the persist thread, with linearizable reads in the workload (`PICKET_SIM_READS`:
//!   `read-index` or `lease`, the replicas' read mode); prints one `SIM ...` summary line and fails with the replay command
//!   if a checker found a violation;
//! - `regression_seeds`: the committed seeds of `sim/regression-seeds.txt`;
//! - `checkers_bite`: each broken build is caught within a bounded number of seeds.
#![cfg(madsim)]

use madsim::runtime::Runtime;
use madsim::Config;
use picket_sim::checkers::stale_writes_over_reads;
use picket_sim::cluster::{restored_grants, run, Break, RunConfig, RunReport};
use picket_sim::history::{Access, AckedOp, Ask, Checker, Mode, Outcome};
use picket_sim::plan::{Fault, Plan, PlanConfig, Reads, Scenario};

fn run_seed_on(seed: u64, scenario: Scenario, broken: Option<Break>) -> RunReport {
    run_seed_with(seed, scenario, broken, plan_config())
}

fn run_seed_with(
    seed: u64,
    scenario: Scenario,
    broken: Option<Break>,
    plan: PlanConfig,
) -> RunReport {
    let runtime = Runtime::with_seed_and_config(seed, Config::default());
    runtime.block_on(run(RunConfig {
        seed,
        scenario,
        broken,
        plan,
    }))
}

fn plan_config() -> PlanConfig {
    PlanConfig {
        replicas: env_replicas(),
        persist_thread: env_persist_thread(),
        reads: env_reads(),
        ..PlanConfig::default()
    }
}

/// `PICKET_SIM_READS`: `off` (default), `read-index` or `lease` (`Reads`).
fn env_reads() -> Reads {
    match std::env::var("PICKET_SIM_READS").ok().as_deref() {
        None | Some("") | Some("off") => Reads::Off,
        Some("read-index") => Reads::ReadIndex,
        Some("lease") => Reads::Lease,
        Some(other) => {
            panic!("PICKET_SIM_READS must be off, read-index or lease, got `{other}`")
        }
    }
}

/// `PICKET_SIM_PERSIST`: `inline` (default) or `thread` (`[storage] persist = "thread"`).
fn env_persist_thread() -> bool {
    match std::env::var("PICKET_SIM_PERSIST").ok().as_deref() {
        None | Some("") | Some("inline") => false,
        Some("thread") => true,
        Some(other) => panic!("PICKET_SIM_PERSIST must be inline or thread, got `{other}`"),
    }
}

fn summary(seed: u64, report: &RunReport) -> String {
    let h = &report.history;
    let count = |pred: &dyn Fn(&picket_sim::history::Attempt) -> bool| {
        h.attempts.iter().filter(|a| pred(a)).count()
    };
    let shared = h
        .acked
        .iter()
        .filter(|op| {
            matches!(
                op,
                AckedOp::Grant {
                    mode: Mode::Shared,
                    ..
                }
            )
        })
        .count();
    let permits = h
        .acked
        .iter()
        .filter(|op| {
            matches!(
                op,
                AckedOp::Grant {
                    mode: Mode::Permit { .. },
                    ..
                }
            )
        })
        .count();
    let slot_writes = h.accepted.iter().filter(|a| a.slot.is_some()).count();
    // After the last restore: grants acknowledged to sessions the restored cluster opened, and
    // accesses the resource accepted with its tokens (checker 8's evidence).
    let restored_grants = restored_grants(h);
    let restored_accesses = h.restores.last().map_or(0, |r| {
        h.accepted[r.accepted_before..]
            .iter()
            .filter(|a| a.token > r.floor)
            .count()
    });
    let mix: Vec<String> = report
        .plan
        .mix()
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    format!(
        "SIM seed={seed} scenario={} replicas={} persist={} read_mode={} sim_ms={} trace={:016x} lines={} grants={} seen={} shared={} permits={} semaphores={} waits={} timed_out={} dropped={} cancels={} digests={} keepalives={} gone={} forced={} writes={} slot_writes={} slot_refused={} reads={} over_reads={} lin_reads={} finals={} rejoined={} replaced={} restored={} restored_grants={} restored_accesses={} slow_fsyncs={} faults=[{}] violations={}",
        report.plan.scenario.name(),
        report.plan.replicas,
        if report.plan.persist_thread {
            "thread"
        } else {
            "inline"
        },
        report.plan.reads.name(),
        report.sim_ms,
        report.trace_hash,
        report.trace_lines,
        report.history.acked.len(),
        report.history.grants.len(),
        shared,
        permits,
        h.semaphores.len(),
        count(&|a| a.ask != Ask::Try),
        count(&|a| a.outcome == Outcome::TimedOut),
        count(&|a| a.outcome == Outcome::Dropped),
        count(&|a| a.cancel.is_some()),
        report.history.digests.len(),
        report.history.keepalives.len(),
        report.history.sessions_gone.len(),
        report
            .history
            .acked
            .iter()
            .filter(|op| matches!(op, AckedOp::ForceRelease { .. }))
            .count(),
        h.accepted
            .iter()
            .filter(|a| a.access == Access::Write)
            .count(),
        slot_writes,
        report
            .counters
            .get("slot-writes-refused")
            .copied()
            .unwrap_or(0),
        h.accepted.iter().filter(|a| a.access == Access::Read).count(),
        stale_writes_over_reads(h),
        h.reads.len(),
        report.history.final_replicas.len(),
        report.counters.get("rejoined").copied().unwrap_or(0),
        report
            .counters
            .get("member-replaced")
            .copied()
            .unwrap_or(0),
        h.restores.len(),
        restored_grants,
        restored_accesses,
        report.counters.get("slow-fsync").copied().unwrap_or(0),
        mix.join(","),
        report.violations.len()
    )
}

/// `PICKET_SIM_REPLICAS`: 3 (default) or 5.
fn env_replicas() -> usize {
    match std::env::var("PICKET_SIM_REPLICAS")
        .ok()
        .filter(|r| !r.is_empty())
    {
        None => 3,
        Some(r) => match r.parse() {
            Ok(n @ (3 | 5)) => n,
            _ => panic!("PICKET_SIM_REPLICAS must be 3 or 5, got `{r}`"),
        },
    }
}

fn env_scenario() -> Scenario {
    let name = std::env::var("PICKET_SIM_SCENARIO").unwrap_or_else(|_| "mixed".to_string());
    Scenario::parse(&name).unwrap_or_else(|| panic!("unknown scenario `{name}`"))
}

#[test]
fn seed_run() {
    let seed: u64 = std::env::var("PICKET_SIM_SEED")
        .ok()
        .map_or(1, |s| s.parse().expect("PICKET_SIM_SEED is a number"));
    let scenario = env_scenario();
    let broken = std::env::var("PICKET_SIM_BREAK")
        .ok()
        .filter(|b| !b.is_empty())
        .map(|b| Break::parse(&b).unwrap_or_else(|| panic!("unknown break `{b}`")));
    let report = run_seed_on(seed, scenario, broken);
    println!("{}", summary(seed, &report));
    for v in &report.violations {
        println!("VIOLATION {v}");
    }
    assert!(
        report.violations.is_empty(),
        "seed {seed} broke {} rule(s); replay with: scripts/sim --seeds 1 --from {seed} --scenario {} --replicas {}{} --trace",
        report.violations.len(),
        scenario.name(),
        report.plan.replicas,
        if report.plan.persist_thread {
            " --persist thread"
        } else {
            ""
        }
    );
    // The run did something: grants acknowledged, writes accepted, the probe granted.
    assert!(
        !report.history.acked.is_empty(),
        "seed {seed}: no grant acknowledged"
    );
    assert!(
        report.history.probe_granted_at_ms.is_some(),
        "seed {seed}: probe not granted"
    );
}

#[test]
fn regression_seeds() {
    let list = include_str!("../regression-seeds.txt");
    for line in list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let mut parts = line.split_whitespace();
        let seed: u64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad line `{line}`"));
        let scenario = parts
            .next()
            .and_then(Scenario::parse)
            .unwrap_or(Scenario::Mixed);
        // Options after the scenario: `replicas=5`, `reads=read-index|lease`.
        let mut plan = plan_config();
        for option in parts {
            match option.split_once('=') {
                Some(("replicas", n)) => {
                    plan.replicas = n.parse().unwrap_or_else(|_| panic!("bad line `{line}`"))
                }
                Some(("reads", "read-index")) => plan.reads = Reads::ReadIndex,
                Some(("reads", "lease")) => plan.reads = Reads::Lease,
                _ => panic!("bad option `{option}` in `{line}`"),
            }
        }
        let report = run_seed_with(seed, scenario, None, plan);
        println!("{}", summary(seed, &report));
        assert!(
            report.violations.is_empty(),
            "regression seed {seed} ({}): {:?}",
            scenario.name(),
            report.violations
        );
    }
}

/// Each broken build makes its checker fail within `SEEDS_MAX` seeds.
#[test]
fn checkers_bite() {
    const SEEDS_MAX: u64 = 4;
    let cases = [
        (Break::TokenReuse, Checker::TokensRise),
        (Break::GateBypass, Checker::Fencing),
        (Break::DigestMutation, Checker::AppliedPrefix),
        (Break::AckBeforeSync, Checker::NoAckedLoss),
        (Break::FastClock, Checker::SessionKept),
        (Break::NoHeal, Checker::Liveness),
        (Break::CutSynced, Checker::NoAckedLoss),
        (Break::ReadBypass, Checker::Fencing),
        (Break::RequeueCancelled, Checker::WaitsEnd),
        (Break::LateExpiry, Checker::WaitsEnd),
        (Break::SlotBypass, Checker::Fencing),
        (Break::PeersFromFile, Checker::Liveness),
        (Break::RestoreNoBump, Checker::NoRewind),
        (Break::StaleRead, Checker::ReadsLinearizable),
    ];
    for (broken, checker) in cases {
        // Peers from the file again needs a membership change with a short contact list.
        let scenario = match broken {
            Break::PeersFromFile => Scenario::Membership,
            _ => Scenario::Mixed,
        };
        // It bites only when the new replica's drawn contact list leaves the leader out.
        let seeds_max = match broken {
            Break::PeersFromFile => 2 * SEEDS_MAX,
            _ => SEEDS_MAX,
        };
        // A restore without the bump bites only in a run that loses the cluster: the first
        // seeds whose plan draws a restore.
        let seeds: Vec<u64> = match broken {
            Break::RestoreNoBump => (1..1_000)
                .filter(|seed| {
                    Plan::draw(*seed, scenario, plan_config())
                        .steps
                        .iter()
                        .any(|s| s.fault == Fault::LoseClusterRestore)
                })
                .take(seeds_max as usize)
                .collect(),
            _ => (1..=seeds_max).collect(),
        };
        let caught = seeds.into_iter().find(|seed| {
            // Reads are checked only in runs with reads.
            let plan = match broken {
                Break::StaleRead => PlanConfig {
                    reads: Reads::ReadIndex,
                    ..plan_config()
                },
                _ => plan_config(),
            };
            let report = run_seed_with(*seed, scenario, Some(broken), plan);
            println!("{} break={}", summary(*seed, &report), broken.name());
            report.violations.iter().any(|v| v.checker == checker)
        });
        assert!(
            caught.is_some(),
            "{} was not caught by {} within {seeds_max} seeds (of those that can show it)",
            broken.name(),
            checker.name()
        );
    }
}
