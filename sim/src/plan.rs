//! The nemesis plan, drawn from the seed before the run starts: which faults, when, for how
//! long, and each node's clock drift. Plain data so that it can be printed, counted (the fault
//! mix) and unit-tested outside the simulator.

use std::collections::BTreeMap;
use std::fmt;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A named mix of faults (`scripts/sim --scenario NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Every kind of fault.
    Mixed,
    /// Network faults only.
    Partitions,
    /// Kills and restarts (with disk crash semantics) only.
    Crashes,
    /// No fault: the workload alone.
    Calm,
    /// The `mixed` faults (damaged disks too), and one replica replaced by a new one (a
    /// membership change: add a learner, promote it, remove the old member), sometimes with
    /// the leader cut off in the middle of it.
    Membership,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::Mixed,
        Scenario::Partitions,
        Scenario::Crashes,
        Scenario::Calm,
        Scenario::Membership,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Mixed => "mixed",
            Scenario::Partitions => "partitions",
            Scenario::Crashes => "crashes",
            Scenario::Calm => "calm",
            Scenario::Membership => "membership",
        }
    }

    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Which nodes a fault hits: replicas are `0..replicas`, clients after them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Both directions cut between `side` and the other replicas (a majority/minority split).
    Split { side: Vec<usize> },
    /// Only messages from `from` to `to` are held back (one-way).
    OneWay { from: usize, to: usize },
    /// Every message out of the current leader is held back (asymmetric: it still hears).
    MuteLeader,
    /// The current leader is cut off both ways.
    IsolateLeader,
    /// Kill a replica (its disk crashes: unsynced writes lost, the last write torn), restart it
    /// when the fault heals. `corrupt`: a byte of its disk is damaged while it is down.
    KillReplica { replica: usize, corrupt: bool },
    /// Kill a client (it loses its session; a new one starts at heal).
    KillClient { client: usize },
    /// Pause a replica or a client for the fault's duration (longer than a session TTL).
    Pause { node: usize },
    /// The replica's next fsync fails (its store stops; the harness restarts it at heal).
    FailSync { replica: usize },
    /// The replica's disk is replaced by an empty one: it is killed and every file removed; its
    /// restart without `--rejoin` must be refused; at heal it restarts with `--rejoin`.
    WipeDisk { replica: usize },
    /// Replace a replica by a new one at a new address, through the log: a new replica starts
    /// with `join = true`, an operator adds it (a learner), promotes it and removes the old
    /// member, which is then stopped for good. With `disturb`, the leader is cut off for the
    /// step's duration, `disturb_after_ms` into the change (which goes on across the election).
    ReplaceMember {
        replica: usize,
        disturb: bool,
        disturb_after_ms: u64,
    },
    /// The whole cluster is lost and restored from an older backup (docs/simulation.md,
    /// `restore`): a backup is saved through `Admin.SaveSnapshot`, the workload goes on for the
    /// step's duration (more grants), then every replica's disk is destroyed, each is restored
    /// from that backup as `picketd restore` does (a new cluster id, the default revision
    /// bump), and every replica restarts on the restored data. At most one per run.
    LoseClusterRestore,
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Split { .. } => "split",
            Fault::OneWay { .. } => "one-way",
            Fault::MuteLeader => "mute-leader",
            Fault::IsolateLeader => "isolate-leader",
            Fault::KillReplica { corrupt: false, .. } => "kill-replica",
            Fault::KillReplica { corrupt: true, .. } => "kill-corrupt",
            Fault::KillClient { .. } => "kill-client",
            Fault::Pause { .. } => "pause",
            Fault::FailSync { .. } => "fail-sync",
            Fault::WipeDisk { .. } => "wipe-disk",
            Fault::ReplaceMember { .. } => "replace-member",
            Fault::LoseClusterRestore => "restore",
        }
    }
}

/// One fault: applied `gap_ms` after the previous one healed, healed `duration_ms` later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub gap_ms: u64,
    pub duration_ms: u64,
    pub fault: Fault,
}

/// The whole plan of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub scenario: Scenario,
    pub replicas: usize,
    pub clients: usize,
    pub session_ttl_ms: u64,
    /// Each replica's and client's clock rate offset, in parts per million, within the bound.
    pub drift_ppm: Vec<i64>,
    pub drift_bound_ppm: u64,
    pub steps: Vec<Step>,
    /// madsim's buggify points are enabled in this run.
    pub buggify: bool,
    /// The replicas write their group commits on the persist thread (`[storage] persist =
    /// "thread"`, a simulation task here), not in the driver's turn. Not drawn: the plan's
    /// option ([`PlanConfig::persist_thread`]).
    pub persist_thread: bool,
    /// Linearizable reads in the workload, and how the replicas answer them. Not drawn: the
    /// plan's option ([`PlanConfig::reads`]).
    pub reads: Reads,
}

/// Linearizable reads in the workload (`Inspect` without `allow_stale`, checked by checker 9),
/// and how the replicas answer them (`scripts/sim --reads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reads {
    /// No reads: every seed replays as it did before reads existed.
    #[default]
    Off,
    /// Reads confirmed by a heartbeat round (`[timing] read_mode = "read_index"`, the default).
    ReadIndex,
    /// Reads answered on the leader's read lease (`[timing] read_mode = "lease"`).
    Lease,
}

impl Reads {
    pub fn name(self) -> &'static str {
        match self {
            Reads::Off => "off",
            Reads::ReadIndex => "read-index",
            Reads::Lease => "lease",
        }
    }
}

/// Knobs of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanConfig {
    pub replicas: usize,
    pub clients: usize,
    pub session_ttl_ms: u64,
    pub drift_bound_ppm: u64,
    pub steps: usize,
    /// Every replica runs with `[storage] persist = "thread"` (`scripts/sim --persist thread`).
    /// Draws nothing: a seed's faults are the same either way.
    pub persist_thread: bool,
    /// Reads in the workload, and the replicas' read mode (`scripts/sim --reads`). Draws nothing
    /// from the plan; with reads on, the clients' reads change the run's later draws.
    pub reads: Reads,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            replicas: 3,
            clients: 3,
            session_ttl_ms: 2_000,
            drift_bound_ppm: 10_000,
            steps: 6,
            persist_thread: false,
            reads: Reads::Off,
        }
    }
}

fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

/// Seeds the stream the wiped disks are drawn from (apart from the rest of the plan).
const WIPE_STREAM: u64 = 0x5749_5045;
/// Seeds the stream the membership changes are drawn from (apart from the rest of the plan).
const MEMBERSHIP_STREAM: u64 = 0x4d45_4d42;
/// Seeds the stream the lost-cluster restores are drawn from (apart from the rest of the plan).
const RESTORE_STREAM: u64 = 0x5245_5354;

impl Plan {
    /// Draws the plan of `seed` (the same seed, the same plan).
    pub fn draw(seed: u64, scenario: Scenario, config: PlanConfig) -> Plan {
        let mut plan = Self::draw_without_restore(seed, scenario, config);
        plan.draw_restore(seed);
        plan
    }

    /// The plan as drawn before lost-cluster restores existed.
    fn draw_without_restore(seed: u64, scenario: Scenario, config: PlanConfig) -> Plan {
        let mut plan = Self::draw_without_wipe(seed, scenario, config);
        plan.draw_wipe(seed);
        plan.draw_membership(seed);
        plan
    }

    /// The plan as drawn before wiped disks existed (every step but a wipe is this one's).
    fn draw_without_wipe(seed: u64, scenario: Scenario, config: PlanConfig) -> Plan {
        assert!(
            config.replicas >= 3,
            "a cluster needs 3 replicas, got {}",
            config.replicas
        );
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5049_434b_4554_u64);
        let nodes = config.replicas + config.clients;
        let bound = config.drift_bound_ppm as i64;
        let drift_ppm = (0..nodes)
            .map(|_| below(&mut rng, 2 * config.drift_bound_ppm + 1) as i64 - bound)
            .collect();
        let steps = match scenario {
            Scenario::Calm => Vec::new(),
            _ => (0..config.steps)
                .map(|_| Self::draw_step(&mut rng, scenario, config))
                .collect(),
        };
        let mut plan = Plan {
            scenario,
            replicas: config.replicas,
            clients: config.clients,
            session_ttl_ms: config.session_ttl_ms,
            drift_ppm,
            drift_bound_ppm: config.drift_bound_ppm,
            steps,
            buggify: matches!(scenario, Scenario::Mixed | Scenario::Membership)
                && below(&mut rng, 2) == 0,
            persist_thread: config.persist_thread,
            reads: config.reads,
        };
        plan.keep_one_corruption();
        plan
    }

    fn draw_step(rng: &mut ChaCha8Rng, scenario: Scenario, config: PlanConfig) -> Step {
        let r = config.replicas as u64;
        let ttl = config.session_ttl_ms;
        let network = |rng: &mut ChaCha8Rng| match below(rng, 4) {
            0 => {
                // A minority side (1 of 3, 1..=2 of 5): the other side keeps a quorum.
                let size = 1 + below(rng, (r - 1) / 2) as usize;
                let first = below(rng, r) as usize;
                Fault::Split {
                    side: (0..size).map(|i| (first + i) % config.replicas).collect(),
                }
            }
            1 => {
                let from = below(rng, r) as usize;
                let to = (from + 1 + below(rng, r - 1) as usize) % config.replicas;
                Fault::OneWay { from, to }
            }
            2 => Fault::MuteLeader,
            _ => Fault::IsolateLeader,
        };
        let crash = |rng: &mut ChaCha8Rng| match below(rng, 4) {
            0 if config.clients > 0 => Fault::KillClient {
                client: below(rng, config.clients as u64) as usize,
            },
            _ => Fault::KillReplica {
                replica: below(rng, r) as usize,
                corrupt: below(rng, 4) == 0,
            },
        };
        let fault = match scenario {
            Scenario::Partitions => network(rng),
            Scenario::Crashes => crash(rng),
            Scenario::Mixed | Scenario::Membership | Scenario::Calm => match below(rng, 8) {
                0..=2 => network(rng),
                3..=4 => crash(rng),
                5 => Fault::Pause {
                    node: below(rng, r + config.clients as u64) as usize,
                },
                6 => Fault::FailSync {
                    replica: below(rng, r) as usize,
                },
                _ => Fault::KillReplica {
                    replica: below(rng, r) as usize,
                    corrupt: false,
                },
            },
        };
        let duration_ms = match fault {
            // Longer than a session TTL, so the paused holder's lock moves on.
            Fault::Pause { .. } => ttl * 2 + below(rng, ttl),
            _ => 500 + below(rng, 3 * ttl),
        };
        Step {
            gap_ms: 300 + below(rng, ttl),
            duration_ms,
            fault,
        }
    }

    /// A third of the `mixed` and `crashes` plans without a corrupted disk have one of their
    /// steps, at random, replaced by a wiped disk. Drawn from a stream of its own, so the
    /// steps before it are the ones the seed drew before wipes existed (and so are the runs,
    /// up to the wipe).
    fn draw_wipe(&mut self, seed: u64) {
        let damaged = self
            .steps
            .iter()
            .any(|s| matches!(s.fault, Fault::KillReplica { corrupt: true, .. }));
        if damaged
            || !matches!(
                self.scenario,
                Scenario::Mixed | Scenario::Crashes | Scenario::Membership
            )
        {
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ WIPE_STREAM);
        if self.steps.is_empty() || below(&mut rng, 3) != 0 {
            return;
        }
        let at = below(&mut rng, self.steps.len() as u64) as usize;
        self.steps[at].fault = Fault::WipeDisk {
            replica: below(&mut rng, self.replicas as u64) as usize,
        };
    }

    /// A third of the `mixed` plans, and every `membership` plan, have one step, at random,
    /// replaced by a membership change ([`Fault::ReplaceMember`]), at most one per run (the
    /// clients know the first members' addresses and find the others through leader hints).
    /// Drawn from a stream of its own, like the wipes.
    ///
    /// Damaged disks stay in those plans: a replica that lost its durable state after the
    /// change recovers from the members of the membership after the slot it catches up to,
    /// not from its config file's (which names the replaced member; seeds 104 and 109 of
    /// `membership` were stuck that way before recovery caught up first).
    fn draw_membership(&mut self, seed: u64) {
        if self.steps.is_empty() {
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ MEMBERSHIP_STREAM);
        let drawn = match self.scenario {
            Scenario::Membership => true,
            Scenario::Mixed => below(&mut rng, 3) == 0,
            _ => false,
        };
        if !drawn {
            return;
        }
        let at = below(&mut rng, self.steps.len() as u64) as usize;
        self.steps[at].fault = Fault::ReplaceMember {
            replica: below(&mut rng, self.replicas as u64) as usize,
            disturb: below(&mut rng, 2) == 0,
            disturb_after_ms: 100 + below(&mut rng, 1_500),
        };
        self.steps[at].duration_ms = 1_000 + below(&mut rng, 2_000);
    }

    /// A fifth of the `mixed` plans have one step, at random (never a membership change), replaced
    /// by the loss of the whole cluster and a restore from a backup saved in that step
    /// ([`Fault::LoseClusterRestore`]), at most one per run: rare, because a restore ends every
    /// session and hold, and the other faults need runs that keep them. Drawn from a stream of its
    /// own, like the wipes, so every other step is what the seed drew before.
    fn draw_restore(&mut self, seed: u64) {
        if self.steps.is_empty() || self.scenario != Scenario::Mixed {
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ RESTORE_STREAM);
        if below(&mut rng, 5) != 0 {
            return;
        }
        let candidates: Vec<usize> = (0..self.steps.len())
            .filter(|i| !matches!(self.steps[*i].fault, Fault::ReplaceMember { .. }))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let at = candidates[below(&mut rng, candidates.len() as u64) as usize];
        self.steps[at].fault = Fault::LoseClusterRestore;
        // How long the workload runs between the backup and the loss (more grants).
        self.steps[at].duration_ms = 1_000 + below(&mut rng, 2_000);
    }

    /// Damage is on a minority only: at most one corrupted disk per run (and no wiped one with
    /// it, [`Self::draw_wipe`]), so a quorum always keeps the acknowledged state.
    fn keep_one_corruption(&mut self) {
        let mut seen = false;
        for step in &mut self.steps {
            if let Fault::KillReplica { corrupt, .. } = &mut step.fault {
                if *corrupt && seen {
                    *corrupt = false;
                }
                seen |= *corrupt;
            }
        }
    }

    /// How many faults of each kind (the fault mix).
    pub fn mix(&self) -> BTreeMap<&'static str, usize> {
        let mut mix = BTreeMap::new();
        for step in &self.steps {
            *mix.entry(step.fault.kind()).or_insert(0) += 1;
        }
        if self.buggify {
            mix.insert("buggify", 1);
        }
        mix
    }

    /// Simulated time the faults take (gaps and durations).
    pub fn span_ms(&self) -> u64 {
        self.steps.iter().map(|s| s.gap_ms + s.duration_ms).sum()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mix: Vec<String> = self.mix().iter().map(|(k, n)| format!("{k}={n}")).collect();
        write!(
            f,
            "scenario={} faults=[{}]",
            self.scenario.name(),
            mix.join(",")
        )?;
        // Only when set: the traces of inline runs are as before the option existed.
        if self.persist_thread {
            write!(f, " persist=thread")?;
        }
        if self.reads != Reads::Off {
            write!(f, " reads={}", self.reads.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_plan() {
        let config = PlanConfig::default();
        assert_eq!(
            Plan::draw(7, Scenario::Mixed, config),
            Plan::draw(7, Scenario::Mixed, config)
        );
        let differ = (0..20)
            .filter(|s| {
                Plan::draw(*s, Scenario::Mixed, config) != Plan::draw(7, Scenario::Mixed, config)
            })
            .count();
        assert!(differ >= 19, "plans do not depend on the seed: {differ}");
    }

    #[test]
    fn plans_respect_their_bounds() {
        let config = PlanConfig::default();
        for seed in 0..200 {
            let plan = Plan::draw(seed, Scenario::Mixed, config);
            assert!(plan
                .drift_ppm
                .iter()
                .all(|d| d.unsigned_abs() <= config.drift_bound_ppm));
            let damaged = plan
                .steps
                .iter()
                .filter(|s| {
                    matches!(
                        s.fault,
                        Fault::KillReplica { corrupt: true, .. } | Fault::WipeDisk { .. }
                    )
                })
                .count();
            assert!(
                damaged <= 1,
                "seed {seed}: {damaged} corrupted or wiped disks"
            );
            for step in &plan.steps {
                if let Fault::Split { side } = &step.fault {
                    assert!(side.len() * 2 < config.replicas, "seed {seed}: {side:?}");
                }
                if let Fault::Pause { .. } = step.fault {
                    assert!(step.duration_ms > config.session_ttl_ms);
                }
                if let Fault::OneWay { from, to } = step.fault {
                    assert_ne!(from, to);
                }
            }
        }
        assert!(Plan::draw(1, Scenario::Calm, config).steps.is_empty());
        assert!(Plan::draw(1, Scenario::Partitions, config)
            .steps
            .iter()
            .all(|s| matches!(
                s.fault,
                Fault::Split { .. }
                    | Fault::OneWay { .. }
                    | Fault::MuteLeader
                    | Fault::IsolateLeader
            )));
    }

    #[test]
    fn over_many_seeds_every_fault_kind_is_drawn() {
        let mut kinds = BTreeMap::new();
        for seed in 0..200 {
            for (k, n) in Plan::draw(seed, Scenario::Mixed, PlanConfig::default()).mix() {
                *kinds.entry(k).or_insert(0) += n;
            }
        }
        for kind in [
            "split",
            "one-way",
            "mute-leader",
            "isolate-leader",
            "kill-replica",
            "kill-corrupt",
            "kill-client",
            "pause",
            "fail-sync",
            "wipe-disk",
            "replace-member",
            "restore",
            "buggify",
        ] {
            assert!(
                kinds.get(kind).copied().unwrap_or(0) > 0,
                "{kind} never drawn: {kinds:?}"
            );
        }
    }

    /// A wiped disk takes the place of one step; every other step is what the seed drew before
    /// wipes existed (so old seeds replay as before up to the wipe).
    #[test]
    fn a_wipe_replaces_one_step_and_leaves_the_others() {
        let config = PlanConfig::default();
        let mut wiped = 0;
        for seed in 0..300 {
            for scenario in Scenario::ALL {
                let mut plan = Plan::draw_without_wipe(seed, scenario, config);
                plan.draw_wipe(seed);
                let before = Plan::draw_without_wipe(seed, scenario, config);
                assert_eq!(plan.steps.len(), before.steps.len());
                let changed: Vec<usize> = (0..plan.steps.len())
                    .filter(|i| plan.steps[*i] != before.steps[*i])
                    .collect();
                match changed[..] {
                    [] => {}
                    [i] => {
                        assert!(
                            matches!(plan.steps[i].fault, Fault::WipeDisk { replica } if replica < config.replicas)
                        );
                        assert_eq!(plan.steps[i].gap_ms, before.steps[i].gap_ms);
                        assert!(matches!(
                            scenario,
                            Scenario::Mixed | Scenario::Crashes | Scenario::Membership
                        ));
                        wiped += 1;
                    }
                    _ => panic!("seed {seed}: steps {changed:?} changed"),
                }
            }
        }
        assert!(
            wiped > 50,
            "only {wiped} wiped disks in 600 mixed and crashes plans"
        );
    }

    /// A membership change takes the place of one step of a third of the `mixed` plans (every
    /// other step stays as drawn), and of one step of every `membership` plan; some of those
    /// also damage a disk.
    #[test]
    fn a_membership_change_replaces_one_step_and_leaves_the_others() {
        let config = PlanConfig::default();
        let mut changes_seen = BTreeMap::new();
        for seed in 0..300 {
            for scenario in Scenario::ALL {
                let plan = Plan::draw_without_restore(seed, scenario, config);
                if scenario == Scenario::Membership {
                    let changes = plan
                        .steps
                        .iter()
                        .filter(|s| matches!(s.fault, Fault::ReplaceMember { .. }))
                        .count();
                    assert_eq!(changes, 1, "seed {seed}: {plan:?}");
                    *changes_seen.entry(scenario.name()).or_insert(0) += 1;
                    if damaged(&plan) {
                        *changes_seen.entry("membership+damage").or_insert(0) += 1;
                    }
                    continue;
                }
                let mut before = Plan::draw_without_wipe(seed, scenario, config);
                before.draw_wipe(seed);
                let changed: Vec<usize> = (0..plan.steps.len())
                    .filter(|i| plan.steps[*i] != before.steps[*i])
                    .collect();
                match changed[..] {
                    [] => {}
                    [i] => {
                        assert!(
                            matches!(plan.steps[i].fault, Fault::ReplaceMember { replica, .. } if replica < config.replicas)
                        );
                        assert_eq!(plan.steps[i].gap_ms, before.steps[i].gap_ms);
                        *changes_seen.entry(scenario.name()).or_insert(0) += 1;
                        if damaged(&plan) {
                            *changes_seen.entry("mixed+damage").or_insert(0) += 1;
                        }
                    }
                    _ => panic!("seed {seed}: steps {changed:?} changed"),
                }
            }
        }
        let mixed = changes_seen.get("mixed").copied().unwrap_or(0);
        assert!((50..150).contains(&mixed), "{changes_seen:?}");
        assert_eq!(
            changes_seen.get("membership"),
            Some(&300),
            "{changes_seen:?}"
        );
        // Membership changes meet damaged disks in both scenarios.
        for with_damage in ["mixed+damage", "membership+damage"] {
            let n = changes_seen.get(with_damage).copied().unwrap_or(0);
            assert!(n >= 20, "{with_damage}: {n}: {changes_seen:?}");
        }
        assert_eq!(changes_seen.len(), 4, "{changes_seen:?}");
    }

    /// A lost-cluster restore takes the place of one step (never a membership change) of about a
    /// fifth of the `mixed` plans and of no other scenario's; every other step stays as drawn.
    #[test]
    fn a_restore_replaces_one_step_and_leaves_the_others() {
        let config = PlanConfig::default();
        let mut restores = 0;
        for seed in 0..300 {
            for scenario in Scenario::ALL {
                let plan = Plan::draw(seed, scenario, config);
                let before = Plan::draw_without_restore(seed, scenario, config);
                let changed: Vec<usize> = (0..plan.steps.len())
                    .filter(|i| plan.steps[*i] != before.steps[*i])
                    .collect();
                match changed[..] {
                    [] => {}
                    [i] => {
                        assert_eq!(plan.steps[i].fault, Fault::LoseClusterRestore);
                        assert!(!matches!(
                            before.steps[i].fault,
                            Fault::ReplaceMember { .. }
                        ));
                        assert_eq!(plan.steps[i].gap_ms, before.steps[i].gap_ms);
                        assert_eq!(scenario, Scenario::Mixed);
                        restores += 1;
                    }
                    _ => panic!("seed {seed}: steps {changed:?} changed"),
                }
            }
        }
        assert!(
            (30..100).contains(&restores),
            "{restores} restores in 300 mixed plans"
        );
    }

    fn damaged(plan: &Plan) -> bool {
        plan.steps.iter().any(|s| {
            matches!(
                s.fault,
                Fault::WipeDisk { .. } | Fault::KillReplica { corrupt: true, .. }
            )
        })
    }

    #[test]
    fn scenario_names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::parse("nope"), None);
    }
}
