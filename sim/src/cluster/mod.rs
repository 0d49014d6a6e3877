//! The simulated cluster (only under `--cfg madsim`): replicas, clients, the fenced resource and
//! the nemesis, run from one seed; at the end the [`History`] goes through the checkers.
//!
//! Timeline of a run: start everything; let a leader emerge; apply the plan's faults one after
//! another (each healed before the next); heal; probe liveness; stop the clients (their
//! sessions expire); crash and restart **every** replica at once; probe again and let every
//! replica catch up; check.

mod client;
mod lying_disk;
mod real;
mod replica;
mod resource;
mod shared;
mod wire;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use madsim::net::NetSim;
use madsim::runtime::{Handle, NodeHandle};
use picket_core::paxos::NodeId;
use picket_storage::SimDisk;

pub use shared::Break;

use crate::checkers::check_all;
use crate::clock::DriftClock;
use crate::history::{FinalReplica, History, Violation};
use crate::plan::{Fault, Plan, PlanConfig, Scenario, Step};
use client::{client_main, probe, ClientCtx, CLIENT_PORT_USED};
use replica::{replica_main, ReplicaCtx};
use shared::{lock, Shared, SharedRef};
use wire::{client_ip, operator_ip, probe_ip, replica_ip, resource_ip, watcher_ip};

/// How long after the heal the probe must be granted (checker 6).
pub const LIVENESS_BOUND_MS: u64 = 20_000;

/// Which node code the replicas and clients run (docs/simulation.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// The sim-local driver and client around the real core (all six checkers observed).
    SimLocal,
    /// The real server node (driver, store, gRPC services) and the real client library.
    Server,
}

impl DriverKind {
    pub fn name(self) -> &'static str {
        match self {
            DriverKind::SimLocal => "sim",
            DriverKind::Server => "server",
        }
    }

    pub fn parse(name: &str) -> Option<DriverKind> {
        [DriverKind::SimLocal, DriverKind::Server]
            .into_iter()
            .find(|d| d.name() == name)
    }
}

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    pub seed: u64,
    pub scenario: Scenario,
    pub broken: Option<Break>,
    pub plan: PlanConfig,
    pub driver: DriverKind,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunReport {
    pub plan: Plan,
    pub history: History,
    pub violations: Vec<Violation>,
    /// Hash of the event trace: the same seed must give the same hash.
    pub trace_hash: u64,
    pub trace_lines: u64,
    pub sim_ms: u64,
    pub counters: BTreeMap<&'static str, u64>,
}

struct Cluster {
    handle: Handle,
    net: std::sync::Arc<NetSim>,
    shared: SharedRef,
    plan: Plan,
    replicas: Vec<NodeHandle>,
    members: Vec<NodeId>,
    disks: Vec<SimDisk>,
    clients: Vec<NodeHandle>,
    client_clocks: Vec<DriftClock>,
    probes: u8,
    driver: DriverKind,
}

/// Runs one seed inside the current madsim runtime.
pub async fn run(config: RunConfig) -> RunReport {
    let plan = Plan::draw(config.seed, config.scenario, config.plan);
    set_core_faults(config.broken);
    // The real server's peer buggify points (lossy, duplicating, reordering links).
    picket_server::peer::buggify::set(plan.buggify && config.driver == DriverKind::Server);
    let shared = Shared::new(config.broken);
    lock(&shared).buggify = plan.buggify;
    lock(&shared).trace(&format!("seed {} {plan}", config.seed));
    let mut cluster = Cluster::start(config, plan.clone(), shared.clone());
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    for step in plan.steps.clone() {
        cluster.apply(&step).await;
    }
    if config.broken == Some(Break::NoHeal) {
        // Leaves a majority cut off: nothing can be chosen.
        cluster.net.clog_node(cluster.replicas[0].id());
        cluster.net.clog_node(cluster.replicas[1].id());
    }
    let healed_at = lock(&shared).now_ms();
    lock(&shared).trace("healed");
    let granted = cluster.probe(LIVENESS_BOUND_MS + 5_000).await;
    {
        let mut s = lock(&shared);
        s.history.healed_at_ms = Some(healed_at);
        s.history.probe_granted_at_ms = granted.map(|(_, at)| at);
        s.history.liveness_bound_ms = LIVENESS_BOUND_MS;
        s.history.drift_bound_ppm = plan.drift_bound_ppm;
    }
    cluster.heal_all();

    // Clients stop and abandon their sessions: they expire (checker 5 watches the timing).
    lock(&shared).clients_stop = true;
    if cluster.driver == DriverKind::Server {
        // The library closes a session whose last handle is dropped; crashed clients do not.
        for client in &cluster.clients {
            cluster.handle.kill(client.id());
        }
    }
    tokio::time::sleep(Duration::from_millis(3 * plan.session_ttl_ms)).await;

    // Every replica crashes at once (unsynced writes lost) and restarts; on the real driver
    // the leader's last synced log record is damaged while it is down.
    lock(&shared).trace("final restart");
    let damaged = cluster.leader_index();
    for index in 0..cluster.replicas.len() {
        cluster.kill_replica(index, false);
        if index == damaged && cluster.driver == DriverKind::Server {
            cluster.damage_synced_record(index);
        }
    }
    for index in 0..cluster.replicas.len() {
        cluster.handle.restart(cluster.replicas[index].id());
    }
    cluster.collect_final().await;

    let mut s = lock(&shared);
    let history = s.history.clone();
    let violations = check_all(&history);
    for v in &violations {
        s.trace(&format!("violation {v}"));
    }
    RunReport {
        plan,
        history,
        violations,
        trace_hash: s.trace.0,
        trace_lines: s.trace_lines,
        sim_ms: s.now_ms(),
        counters: s.counters.clone(),
    }
}

/// The broken builds that live in the real core (`picket_core::node::fault_injection`, compiled
/// only under `--cfg madsim`): set for this run, cleared when the run breaks nothing.
fn set_core_faults(broken: Option<Break>) {
    use picket_core::node::fault_injection::{self, Faults};
    fault_injection::set(Faults {
        apply_with_local_clock: (broken == Some(Break::DigestMutation)).then_some(NodeId(1)),
        token_wrap: broken == Some(Break::TokenReuse),
    });
    picket_storage::recovery::fault_injection::set_old_tail_rule(broken == Some(Break::CutSynced));
}

impl Cluster {
    fn start(config: RunConfig, plan: Plan, shared: SharedRef) -> Cluster {
        let (seed, broken, driver) = (config.seed, config.broken, config.driver);
        let ttl_ms = plan.session_ttl_ms;
        let handle = Handle::current();
        let net = NetSim::current();
        let members: Vec<NodeId> = (1..=plan.replicas as u64).map(NodeId).collect();
        let disks: Vec<SimDisk> = members
            .iter()
            .map(|id| SimDisk::new(seed ^ (id.0 * 0x9e37_79b9)))
            .collect();
        let mut replicas = Vec::new();
        for (index, id) in members.iter().enumerate() {
            let ppm = if broken == Some(Break::FastClock) {
                500_000
            } else {
                plan.drift_ppm[index]
            };
            let ctx = ReplicaCtx {
                id: *id,
                members: members.clone(),
                seed,
                disk: disks[index].clone(),
                clock: DriftClock { ppm },
                shared: shared.clone(),
            };
            let node = handle
                .create_node()
                .name(format!("replica-{}", id.0))
                .ip(replica_ip(*id))
                .init(move || {
                    let ctx = ctx.clone();
                    async move {
                        match driver {
                            DriverKind::SimLocal => replica_main(ctx).await,
                            DriverKind::Server => real::real_replica_main(ctx, ttl_ms).await,
                        }
                    }
                })
                .build();
            replicas.push(node);
        }
        let resource_shared = shared.clone();
        handle
            .create_node()
            .name("resource")
            .ip(resource_ip())
            .init(move || resource::resource_main(resource_shared.clone()))
            .build();
        let mut clients = Vec::new();
        let mut client_clocks = Vec::new();
        for index in 0..plan.clients {
            let clock = DriftClock {
                ppm: plan.drift_ppm[plan.replicas + index],
            };
            client_clocks.push(clock);
            let ctx = ClientCtx {
                id: index as u64 + 1,
                addr: SocketAddr::new(client_ip(index), CLIENT_PORT_USED),
                replicas: members.clone(),
                clock,
                drift_bound_ppm: plan.drift_bound_ppm,
                ttl_ms: plan.session_ttl_ms,
                shared: shared.clone(),
            };
            let node = handle
                .create_node()
                .name(format!("client-{}", index + 1))
                .ip(client_ip(index))
                .init(move || {
                    let ctx = ctx.clone();
                    async move {
                        match driver {
                            DriverKind::SimLocal => client_main(ctx).await,
                            DriverKind::Server => real::real_client_main(ctx).await,
                        }
                    }
                })
                .build();
            clients.push(node);
        }
        let operator = ClientCtx {
            id: 99,
            addr: SocketAddr::new(operator_ip(), CLIENT_PORT_USED),
            replicas: members.clone(),
            clock: DriftClock { ppm: 0 },
            drift_bound_ppm: plan.drift_bound_ppm,
            ttl_ms: plan.session_ttl_ms,
            shared: shared.clone(),
        };
        handle
            .create_node()
            .name("operator")
            .ip(operator_ip())
            .init(move || {
                let ctx = operator.clone();
                async move {
                    match driver {
                        DriverKind::SimLocal => client::operator_main(ctx).await,
                        DriverKind::Server => real::operator_main(ctx.replicas, ctx.shared).await,
                    }
                }
            })
            .build();
        if driver == DriverKind::Server {
            for id in &members {
                let (id, shared) = (*id, shared.clone());
                handle
                    .create_node()
                    .name(format!("watcher-{}", id.0))
                    .ip(watcher_ip(id))
                    .init(move || real::watcher_main(id, shared.clone()))
                    .build();
            }
        }
        Cluster {
            handle,
            net,
            shared,
            plan,
            replicas,
            members,
            disks,
            clients,
            client_clocks,
            probes: 0,
            driver,
        }
    }

    fn trace(&self, line: &str) {
        lock(&self.shared).trace(line);
    }

    fn leader_index(&self) -> usize {
        let leader = lock(&self.shared).leader;
        leader
            .and_then(|l| self.members.iter().position(|m| *m == l))
            .unwrap_or(0)
    }

    /// Kills replica `index`; its disk crashes (unsynced writes lost, the last write maybe torn);
    /// `corrupt` also damages a log segment header (media damage recovery must detect).
    fn kill_replica(&mut self, index: usize, corrupt: bool) {
        self.handle.kill(self.replicas[index].id());
        let disk = &self.disks[index];
        disk.fail_next_syncs(0);
        disk.crash();
        if corrupt {
            let segments: Vec<_> = disk
                .paths()
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "seg"))
                .filter(|p| disk.read_file(p).is_some_and(|b| b.len() >= 32))
                .collect();
            if !segments.is_empty() {
                let pick = madsim::rand::random::<usize>() % segments.len();
                let offset = 8 + madsim::rand::random::<u64>() % 20;
                if disk.corrupt(&segments[pick], offset).is_ok() {
                    self.trace(&format!(
                        "corrupted {} at {offset}",
                        segments[pick].display()
                    ));
                    lock(&self.shared).count("disk-corrupted");
                }
            }
        }
        lock(&self.shared).wedged.remove(&self.members[index]);
    }

    /// Damages the last synced record of replica `index`'s log (its newest generation) while it
    /// is down, and records that the start that follows must find it (checker 4).
    fn damage_synced_record(&mut self, index: usize) {
        let disk = &self.disks[index];
        let generation = disk
            .paths()
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "seg"))
            .filter_map(|p| {
                let dir = p.parent()?.parent()?;
                let n = dir.file_name()?.to_str()?.strip_prefix("replica-")?;
                Some((n.parse::<u64>().ok()?, dir.join("log")))
            })
            .max();
        let Some((_, log_dir)) = generation else {
            return;
        };
        if let Some((file, offset)) = disk.damage_synced_record(&log_dir) {
            let node = self.members[index];
            self.trace(&format!(
                "damaged a synced record of replica {} in {} at {offset}",
                node.0,
                file.display()
            ));
            let mut s = lock(&self.shared);
            s.count("synced-record-damaged");
            let boot = s.boots.get(&node).copied().unwrap_or(0) + 1;
            s.history
                .synced_damage
                .push(crate::history::SyncedDamage { node: node.0, boot });
        }
    }

    async fn apply(&mut self, step: &Step) {
        tokio::time::sleep(Duration::from_millis(step.gap_ms)).await;
        self.trace(&format!(
            "fault {:?} for {} ms",
            step.fault, step.duration_ms
        ));
        lock(&self.shared).count(step.fault.kind());
        let replica_ids: Vec<_> = self.replicas.iter().map(|r| r.id()).collect();
        match &step.fault {
            Fault::Split { side } => {
                for a in side {
                    for b in (0..replica_ids.len()).filter(|b| !side.contains(b)) {
                        self.net.clog_link(replica_ids[*a], replica_ids[b]);
                        self.net.clog_link(replica_ids[b], replica_ids[*a]);
                    }
                }
            }
            Fault::OneWay { from, to } => self.net.clog_link(replica_ids[*from], replica_ids[*to]),
            Fault::MuteLeader => self.net.clog_node_out(replica_ids[self.leader_index()]),
            Fault::IsolateLeader => self.net.clog_node(replica_ids[self.leader_index()]),
            Fault::KillReplica { replica, corrupt } => self.kill_replica(*replica, *corrupt),
            Fault::KillClient { client } => self.handle.kill(self.clients[*client].id()),
            Fault::Pause { node } => self.handle.pause(self.node_id(*node)),
            Fault::FailSync { replica } => self.disks[*replica].fail_next_syncs(1),
        }
        tokio::time::sleep(Duration::from_millis(step.duration_ms)).await;
        match &step.fault {
            Fault::KillReplica { replica, .. } => self.handle.restart(replica_ids[*replica]),
            Fault::KillClient { client } => self.handle.restart(self.clients[*client].id()),
            Fault::Pause { node } => self.handle.resume(self.node_id(*node)),
            _ => {}
        }
        self.heal_all();
        self.trace("heal");
    }

    fn node_id(&self, node: usize) -> madsim::task::NodeId {
        if node < self.replicas.len() {
            self.replicas[node].id()
        } else {
            self.clients[node - self.replicas.len()].id()
        }
    }

    /// Unclogs every link and restarts wedged replicas (their store failed).
    fn heal_all(&mut self) {
        let ids: Vec<_> = self.replicas.iter().map(|r| r.id()).collect();
        for a in &ids {
            self.net.unclog_node(*a);
            for b in &ids {
                if a != b {
                    self.net.unclog_link(*a, *b);
                }
            }
        }
        for disk in &self.disks {
            disk.fail_next_syncs(0);
        }
        let wedged: Vec<NodeId> = lock(&self.shared).wedged.iter().copied().collect();
        for id in wedged {
            if let Some(index) = self.members.iter().position(|m| *m == id) {
                self.trace(&format!("restart wedged replica {}", id.0));
                self.kill_replica(index, false);
                self.handle.restart(self.replicas[index].id());
            }
        }
    }

    /// Runs a probe acquire on a fresh node; `Some((token, granted_at_ms))` if granted in time.
    async fn probe(&mut self, within_ms: u64) -> Option<(u64, u64)> {
        self.probes += 1;
        let ctx = ClientCtx {
            id: 100 + u64::from(self.probes),
            addr: SocketAddr::new(probe_ip(self.probes), CLIENT_PORT_USED),
            replicas: self.members.clone(),
            clock: self
                .client_clocks
                .first()
                .copied()
                .unwrap_or(DriftClock { ppm: 0 }),
            drift_bound_ppm: self.plan.drift_bound_ppm,
            ttl_ms: self.plan.session_ttl_ms,
            shared: self.shared.clone(),
        };
        let node = self
            .handle
            .create_node()
            .name(format!("probe-{}", self.probes))
            .ip(probe_ip(self.probes))
            .build();
        let key = format!("probe-{}", self.probes);
        let within = Duration::from_millis(within_ms);
        let token = match self.driver {
            DriverKind::SimLocal => {
                let task = node.spawn(probe(ctx, key));
                tokio::time::timeout(within, task).await.ok()?.ok()?
            }
            DriverKind::Server => {
                let task = node.spawn(real::real_probe(ctx, key));
                tokio::time::timeout(within, task).await.ok()?.ok()?
            }
        };
        let at = lock(&self.shared).now_ms();
        self.trace(&format!("probe granted token {token}"));
        Some((token, at))
    }

    /// After the final restart: a probe shows a leader applied everything chosen before; then
    /// every replica that catches up to the probe's grant reports what it holds (checker 4).
    async fn collect_final(&mut self) {
        let Some((token, _)) = self.probe(60_000).await else {
            self.trace("final probe not granted");
            return;
        };
        for _ in 0..200 {
            let all_caught_up = {
                let s = lock(&self.shared);
                let watched = |m: &NodeId| {
                    self.driver == DriverKind::SimLocal
                        || s.watched.get(m).is_some_and(|r| *r > token)
                };
                self.members
                    .iter()
                    .all(|m| s.applied.get(m).is_some_and(|r| *r >= token) && watched(m))
            };
            if all_caught_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut s = lock(&self.shared);
        let mut finals = Vec::new();
        for m in &self.members {
            let caught_up = s.applied.get(m).is_some_and(|r| *r >= token)
                && (self.driver == DriverKind::SimLocal
                    || s.watched.get(m).is_some_and(|r| *r > token));
            if let (true, Some(be)) = (caught_up, s.boot_events.get(m)) {
                finals.push(FinalReplica {
                    node: m.0,
                    revision: s.applied[m],
                    events_from: be.events_from,
                    events: be.events.clone(),
                });
            }
        }
        s.history.final_replicas = finals;
    }
}
