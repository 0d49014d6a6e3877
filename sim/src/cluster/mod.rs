//! The simulated cluster (only under `--cfg madsim`): replicas running the real server node,
//! clients on the real client library, the fenced resource and the nemesis, run from one seed;
//! at the end the [`History`] goes through the checkers.
//!
//! Timeline of a run: start everything; let a leader emerge; apply the plan's faults one after
//! another (each healed before the next); heal; probe liveness; stop the clients (their
//! sessions expire); crash and restart **every** replica at once; probe again and let every
//! replica catch up; check.

mod addr;
mod lying_disk;
mod real;
mod resource;
mod shared;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use madsim::net::NetSim;
use madsim::runtime::{Handle, NodeHandle};
use picket_core::faults::Faults;
use picket_core::paxos::NodeId;
use picket_server::node::durable::EmptyDataDir;
use picket_storage::{Disk, SimDisk};

pub use shared::Break;

use crate::checkers::check_all;
use crate::clock::DriftClock;
use crate::history::{AckedOp, FinalReplica, History, RestoreSeen, Violation};
use crate::plan::{Fault, Plan, PlanConfig, Scenario, Step};
use addr::{
    backup_ip, client_ip, operator_ip, probe_ip, reconfig_ip, replica_ip, resource_ip, watcher_ip,
};
use real::{ClientCtx, ReplicaCtx};
use shared::{lock, Shared, SharedRef};

/// How long after the heal the probe must be granted (checker 6).
pub const LIVENESS_BOUND_MS: u64 = 20_000;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    pub seed: u64,
    pub scenario: Scenario,
    pub broken: Option<Break>,
    pub plan: PlanConfig,
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
    probes: u8,
    /// Replicas whose disk was wiped in this run: each must rejoin (checked at the end), unless
    /// a membership change replaced it.
    wiped: BTreeSet<NodeId>,
    seed: u64,
    /// The id the next replica a membership change adds takes.
    next_id: u64,
    /// The members before the last membership change (a stale contact list).
    members_before: Vec<NodeId>,
}

/// How long a membership change ([`Fault::ReplaceMember`]) may take, faults healed, before the
/// run counts it as a liveness failure.
pub const MEMBERSHIP_CHANGE_BOUND_MS: u64 = 30_000;

/// Runs one seed inside the current madsim runtime.
pub async fn run(config: RunConfig) -> RunReport {
    let plan = Plan::draw(config.seed, config.scenario, config.plan);
    let shared = Shared::new(
        config.broken,
        faults(config.broken, plan.buggify),
        plan.persist_thread,
    );
    lock(&shared).semaphores = workload::draw_semaphores(config.seed);
    lock(&shared).reads = plan.reads;
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
    // The library closes a session whose last handle is dropped; crashed clients do not.
    for client in &cluster.clients {
        cluster.handle.kill(client.id());
    }
    tokio::time::sleep(Duration::from_millis(3 * plan.session_ttl_ms)).await;

    // Every replica crashes at once (unsynced writes lost) and restarts; on the real driver
    // the leader's last synced log record is damaged while it is down.
    lock(&shared).trace("final restart");
    let damaged = cluster.leader_index();
    for index in 0..cluster.replicas.len() {
        cluster.kill_replica(index, false);
        if index == damaged {
            cluster.damage_synced_record(index);
        }
    }
    for index in 0..cluster.replicas.len() {
        cluster.handle.restart(cluster.replicas[index].id());
    }
    cluster.collect_final().await;

    let mut s = lock(&shared);
    let slow_fsyncs = s.slow_fsyncs.values().sum();
    s.counters.insert("slow-fsync", slow_fsyncs);
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

/// The faults every replica of a run starts with: the planted bug of `broken`, if it lives in
/// the real code (core, storage, the server's peer transport), and the real server's buggify
/// points (lossy, duplicating, reordering links; slow fsyncs) when the plan turns them on.
fn faults(broken: Option<Break>, buggify: bool) -> Faults {
    Faults {
        apply_with_local_clock: (broken == Some(Break::DigestMutation)).then_some(NodeId(1)),
        token_wrap: broken == Some(Break::TokenReuse),
        late_wait_expiry: broken == Some(Break::LateExpiry),
        old_tail_rule: broken == Some(Break::CutSynced),
        peers_from_file: broken == Some(Break::PeersFromFile),
        reads_local: broken == Some(Break::StaleRead),
        buggify,
        ..Faults::NONE
    }
}

impl Cluster {
    fn start(config: RunConfig, plan: Plan, shared: SharedRef) -> Cluster {
        let (seed, broken) = (config.seed, config.broken);
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
                disk: disks[index].clone(),
                clock: DriftClock { ppm },
                shared: shared.clone(),
                join: false,
            };
            let node = handle
                .create_node()
                .name(format!("replica-{}", id.0))
                .ip(replica_ip(*id))
                .init(move || real::real_replica_main(ctx.clone(), ttl_ms))
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
        for index in 0..plan.clients {
            let ctx = ClientCtx {
                id: index as u64 + 1,
                replicas: members.clone(),
                ttl_ms: plan.session_ttl_ms,
                shared: shared.clone(),
            };
            let node = handle
                .create_node()
                .name(format!("client-{}", index + 1))
                .ip(client_ip(index))
                .init(move || real::real_client_main(ctx.clone()))
                .build();
            clients.push(node);
        }
        let (operator_members, operator_shared) = (members.clone(), shared.clone());
        handle
            .create_node()
            .name("operator")
            .ip(operator_ip())
            .init(move || real::operator_main(operator_members.clone(), operator_shared.clone()))
            .build();
        for id in &members {
            let (id, shared) = (*id, shared.clone());
            handle
                .create_node()
                .name(format!("watcher-{}", id.0))
                .ip(watcher_ip(id))
                .init(move || real::watcher_main(id, shared.clone()))
                .build();
        }
        let next_id = plan_replicas_next(&members);
        let members_start = members.clone();
        Cluster {
            handle,
            net,
            shared,
            plan,
            replicas,
            members,
            disks,
            clients,
            probes: 0,
            wiped: BTreeSet::new(),
            seed,
            next_id,
            members_before: members_start,
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
        if corrupt {
            self.contacts_reachable(index);
        }
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
    /// A replica whose disk is lost rejoins through its file's contacts: if its file (a
    /// contact list) names no member that runs today, the operator points it at one, as
    /// docs/runbooks/replace-machine.md says ("as long as one member it lists runs today").
    fn contacts_reachable(&mut self, index: usize) {
        let id = self.members[index];
        let mut s = lock(&self.shared);
        let Some(contacts) = s.contacts.get(&id) else {
            return;
        };
        if contacts
            .iter()
            .any(|c| *c != id && self.members.contains(c))
        {
            return;
        }
        let Some(other) = self.members.iter().copied().find(|m| *m != id) else {
            return;
        };
        s.trace(&format!(
            "the operator points replica {}'s contact list at replica {} (it named none that runs)",
            id.0, other.0
        ));
        s.contacts.insert(id, vec![id, other]);
    }

    fn damage_synced_record(&mut self, index: usize) {
        self.contacts_reachable(index);
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
        if let Fault::ReplaceMember {
            replica,
            disturb,
            disturb_after_ms,
        } = step.fault
        {
            let disturb = disturb.then_some((disturb_after_ms, step.duration_ms));
            self.replace_member(replica, disturb).await;
            self.heal_all();
            self.trace("heal");
            return;
        }
        if step.fault == Fault::LoseClusterRestore {
            self.lose_cluster_restore(step.duration_ms).await;
            self.heal_all();
            self.trace("heal");
            return;
        }
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
            Fault::WipeDisk { replica } => self.wipe_replica(*replica),
            Fault::ReplaceMember { .. } | Fault::LoseClusterRestore => {
                unreachable!("handled above")
            }
        }
        tokio::time::sleep(Duration::from_millis(step.duration_ms)).await;
        match &step.fault {
            Fault::KillReplica { replica, .. } => self.handle.restart(replica_ids[*replica]),
            Fault::KillClient { client } => self.handle.restart(self.clients[*client].id()),
            Fault::Pause { node } => self.handle.resume(self.node_id(*node)),
            Fault::WipeDisk { replica } => self.rejoin_replica(*replica),
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

    /// Replaces replica `index`'s disk by an empty one: killed (its disk crashes), every file
    /// removed for good, then restarted as a supervisor restarts `picketd run`, without
    /// `--rejoin`: the start must refuse the empty data directory and create nothing
    /// ([`Cluster::rejoin_replica`] asserts it at the heal).
    fn wipe_replica(&mut self, index: usize) {
        self.kill_replica(index, false);
        self.contacts_reachable(index);
        let files = self.destroy_disk(index);
        let id = self.members[index];
        self.trace(&format!(
            "wiped the disk of replica {} ({files} files)",
            id.0
        ));
        self.wiped.insert(id);
        lock(&self.shared).start_as.insert(id, EmptyDataDir::Refuse);
        self.handle.restart(self.replicas[index].id());
    }

    /// The heal of a wiped disk: the start without `--rejoin` was refused and wrote nothing;
    /// the replica restarts with `--rejoin` (it starts with its durable state lost and
    /// re-learns it from the others before it votes).
    fn rejoin_replica(&mut self, index: usize) {
        let id = self.members[index];
        let (boot, refused) = {
            let s = lock(&self.shared);
            (s.boots.get(&id).copied(), s.refused.get(&id).copied())
        };
        assert!(
            boot.is_some() && refused == boot,
            "replica {} restarted on a wiped disk without --rejoin was not refused (boot \
             {boot:?}, last refused boot {refused:?})",
            id.0
        );
        let left = self.disks[index].paths();
        assert!(
            left.is_empty(),
            "the refused start of replica {} wrote {left:?}",
            id.0
        );
        // Half the time its file is a one-member contact list (`join = true`, itself and one
        // other member, drawn from the seed), as an operator writes one after a disk loss.
        let draw = mix(self.seed, id.0 ^ 0x5eed);
        let others: Vec<NodeId> = self.members.iter().copied().filter(|m| *m != id).collect();
        if draw % 2 == 1 && !others.is_empty() {
            let contact = others[(draw / 2) as usize % others.len()];
            self.trace(&format!(
                "replica {} rejoins with one contact, replica {}",
                id.0, contact.0
            ));
            lock(&self.shared).contacts.insert(id, vec![id, contact]);
            lock(&self.shared).count("rejoined-one-contact");
        }
        self.trace(&format!("replica {} rejoins", id.0));
        lock(&self.shared).count("rejoined");
        self.handle.kill(self.replicas[index].id());
        lock(&self.shared).start_as.insert(id, EmptyDataDir::Rejoin);
        self.handle.restart(self.replicas[index].id());
    }

    /// Replaces replica `index` through the log, as an operator replaces a machine
    /// (docs/runbooks/replace-machine.md): a new replica (the next id, at its own address, on an
    /// empty disk) starts with `join = true`; an operator node adds it, promotes it and removes
    /// the old member over the real admin API, retrying what a change in progress or an
    /// election refuses; then the old replica is stopped for good and the new one takes its
    /// place in the harness (later faults hit it, the final restart and checks include it).
    /// `disturb`: (after, for) ms, the leader is cut off meanwhile.
    async fn replace_member(&mut self, index: usize, disturb: Option<(u64, u64)>) {
        let old = self.members[index];
        let new = NodeId(self.next_id);
        self.next_id += 1;
        self.trace(&format!("replace replica {} by replica {}", old.0, new.0));
        let disk = SimDisk::new(self.seed ^ (new.0 * 0x9e37_79b9));
        let mut contacts = self.draw_contacts(old, new);
        self.trace(&format!(
            "replica {} contacts {:?}",
            new.0,
            contacts.iter().map(|c| c.0).collect::<Vec<_>>()
        ));
        contacts.push(new);
        // Its file, for every start (`Shared::contacts`).
        lock(&self.shared).contacts.insert(new, contacts.clone());
        let ctx = ReplicaCtx {
            id: new,
            members: contacts,
            disk: disk.clone(),
            clock: DriftClock {
                ppm: self.plan.drift_ppm[index],
            },
            shared: self.shared.clone(),
            join: true,
        };
        let ttl_ms = self.plan.session_ttl_ms;
        let node = self
            .handle
            .create_node()
            .name(format!("replica-{}", new.0))
            .ip(replica_ip(new))
            .init(move || real::real_replica_main(ctx.clone(), ttl_ms))
            .build();
        let watcher_shared = self.shared.clone();
        self.handle
            .create_node()
            .name(format!("watcher-{}", new.0))
            .ip(watcher_ip(new))
            .init(move || real::watcher_main(new, watcher_shared.clone()))
            .build();
        let operator = self
            .handle
            .create_node()
            .name(format!("reconfig-{}", new.0))
            .ip(reconfig_ip(new))
            .build();
        let change = operator.spawn(real::replace_member(
            self.members.clone(),
            old,
            new,
            self.shared.clone(),
        ));
        if let Some((after_ms, for_ms)) = disturb {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            let leader = self.replicas[self.leader_index()].id();
            self.trace("membership change: the leader is cut off");
            self.net.clog_node(leader);
            tokio::time::sleep(Duration::from_millis(for_ms)).await;
            self.heal_all();
        }
        let bound = Duration::from_millis(MEMBERSHIP_CHANGE_BOUND_MS);
        let done = matches!(tokio::time::timeout(bound, change).await, Ok(Ok(true)));
        if !done {
            self.handle.kill(operator.id());
            let mut s = lock(&self.shared);
            s.trace(&format!(
                "membership change: replica {} did not replace replica {} within {} ms",
                new.0, old.0, MEMBERSHIP_CHANGE_BOUND_MS
            ));
            s.history.membership_failures.push(format!(
                "replica {} did not replace replica {} within {} ms of the change (faults healed)",
                new.0, old.0, MEMBERSHIP_CHANGE_BOUND_MS
            ));
            // The harness keeps the old replica: the cluster may still count on it.
            return;
        }
        // The runbook's step 5: stop the old replica only once the change is in effect on every
        // remaining replica that runs. Stopped before, with the change not yet in effect, the
        // old membership still governs the slots up to it, and with another voter recovering
        // from disk loss its quorum is gone for good (`membership` seed 42 with `--reads lease`).
        if !self.change_in_effect_without(old, new).await {
            let mut s = lock(&self.shared);
            s.trace(&format!(
                "membership change: the removal of replica {} not in effect within {} ms",
                old.0, MEMBERSHIP_CHANGE_BOUND_MS
            ));
            s.history.membership_failures.push(format!(
                "the removal of replica {} was not in effect on the other replicas within {} ms \
                 of its answer (faults healed)",
                old.0, MEMBERSHIP_CHANGE_BOUND_MS
            ));
            return;
        }
        self.kill_replica(index, false);
        self.members_before = self.members.clone();
        self.replicas[index] = node;
        self.members[index] = new;
        self.disks[index] = disk;
        // A replica stopped for good has nothing left to rejoin (its disk may have been wiped).
        self.wiped.remove(&old);
        let mut s = lock(&self.shared);
        s.count("member-replaced");
        s.trace(&format!(
            "replica {} replaced replica {} (stopped for good)",
            new.0, old.0
        ));
    }

    /// Waits (at most [`MEMBERSHIP_CHANGE_BOUND_MS`]) until every replica but `old` that
    /// reported its status in the last second has a newest membership without `old` in effect
    /// (its applied slot reached the slot that membership governs from): what
    /// docs/runbooks/replace-machine.md, step 5, has an operator read from each remaining
    /// replica's `/metrics` before stopping the old one. A replica down now is not waited for.
    async fn change_in_effect_without(&self, old: NodeId, new: NodeId) -> bool {
        let start = lock(&self.shared).now_ms();
        let remaining: Vec<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|m| *m != old)
            .chain([new])
            .collect();
        loop {
            let (now, ok) = {
                let s = lock(&self.shared);
                let now = s.now_ms();
                let ok = remaining.iter().all(|id| match s.membership_seen.get(id) {
                    Some(seen) if now.saturating_sub(seen.at_ms) <= 1_000 => {
                        seen.in_effect_without(old)
                    }
                    _ => true,
                });
                (now, ok)
            };
            if ok {
                lock(&self.shared).trace(&format!(
                    "membership change: the removal of replica {} is in effect",
                    old.0
                ));
                return true;
            }
            if now.saturating_sub(start) > MEMBERSHIP_CHANGE_BOUND_MS {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The whole cluster lost and restored from an older backup, as
    /// docs/runbooks/restore-from-backup.md tells an operator: a backup is saved through the real
    /// `Admin.SaveSnapshot` ([`real::save_backup`]); the workload goes on for `after_ms`, and at
    /// least until a grant above the backup's revision was acknowledged (so the old cluster
    /// granted tokens the backup does not know); then every replica is killed and its disk
    /// destroyed; each is restored from the backup by the code of `picketd restore`
    /// (`picket_server::backup::restore_floor` with the default bump, `restore_store` on its
    /// disk) into a new cluster (`picket-r<F>`, the current members); after a second of
    /// downtime every replica starts on its restored data. Clients find their sessions gone
    /// and open new ones.
    async fn lose_cluster_restore(&mut self, after_ms: u64) {
        use picket_server::backup::{restore_floor, restore_store, BUMP_REVISION_DEFAULT};
        let node = self
            .handle
            .create_node()
            .name("backup")
            .ip(backup_ip())
            .build();
        let save = node.spawn(real::save_backup(self.members.clone(), self.shared.clone()));
        let bound = Duration::from_millis(BACKUP_BOUND_MS);
        let Ok(Ok(backup)) = tokio::time::timeout(bound, save).await else {
            self.handle.kill(node.id());
            let mut s = lock(&self.shared);
            let failure = format!("no backup saved within {BACKUP_BOUND_MS} ms (faults healed)");
            s.trace(&failure);
            s.history.membership_failures.push(failure);
            return;
        };
        self.handle.kill(node.id());
        let backup_revision = backup.state.revision.0;
        self.trace(&format!(
            "backup saved at revision {backup_revision} ({})",
            backup.checksum_hex
        ));
        lock(&self.shared).count("backup-saved");
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        for _ in 0..100 {
            let granted_after =
                lock(&self.shared).history.acked.iter().any(
                    |op| matches!(op, AckedOp::Grant { token, .. } if *token > backup_revision),
                );
            if granted_after {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Every replica and every disk is lost at once.
        let lost_at_ms = lock(&self.shared).now_ms();
        for index in 0..self.replicas.len() {
            self.kill_replica(index, false);
            self.destroy_disk(index);
        }
        let boots_before: BTreeMap<u64, u64> = lock(&self.shared)
            .boots
            .iter()
            .map(|(node, boot)| (node.0, *boot))
            .collect();

        let bump = if lock(&self.shared).broken == Some(Break::RestoreNoBump) {
            1
        } else {
            BUMP_REVISION_DEFAULT
        };
        let floor = restore_floor(&backup, &[], bump).expect("the backup's revision plus the bump");
        let cluster_id = format!("picket-r{}", floor.revision.0);
        let restored_cluster = shared::RestoredCluster {
            cluster_id: cluster_id.clone(),
            members: self.members.clone(),
        };
        let mut digests = BTreeSet::new();
        for (index, id) in self.members.iter().enumerate() {
            let ctx = ReplicaCtx {
                id: *id,
                members: self.members.clone(),
                disk: self.disks[index].clone(),
                clock: DriftClock { ppm: 0 },
                shared: self.shared.clone(),
                join: false,
            };
            let text = real::config_text(&ctx, self.plan.session_ttl_ms, Some(&cluster_id));
            let config = picket_server::config::Config::parse(&text)
                .expect("the restored replica's configuration is valid");
            let restored =
                restore_store(self.disks[index].clone(), &config, &backup, floor.revision)
                    .unwrap_or_else(|e| panic!("restore of replica {} refused: {e}", id.0));
            digests.insert(restored.digest);
            self.trace(&format!(
                "restored replica {} into cluster {cluster_id} at revision {} (digest {:016x}; \
                 ended {} sessions, {} holds, {} waiters)",
                id.0,
                restored.revision.0,
                restored.digest,
                restored.sessions_ended,
                restored.holds_ended,
                restored.waiters_dropped
            ));
        }
        assert_eq!(
            digests.len(),
            1,
            "replicas restored from one backup with one floor differ: {digests:?}"
        );
        {
            let mut s = lock(&self.shared);
            s.restored = Some(restored_cluster);
            s.contacts.clear();
            s.start_as.clear();
            s.count("restored");
        }
        // A wiped replica has nothing left to rejoin: its disk was restored.
        self.wiped.clear();

        // Downtime: every answer the old cluster sent has arrived before the new one starts.
        tokio::time::sleep(Duration::from_millis(RESTORE_DOWNTIME_MS)).await;
        {
            let mut s = lock(&self.shared);
            let restarted_at_ms = s.now_ms();
            let (acked_before, accepted_before) = (s.history.acked.len(), s.history.accepted.len());
            s.history.restores.push(RestoreSeen {
                backup_revision,
                floor: floor.revision.0,
                lost_at_ms,
                restarted_at_ms,
                boots_before,
                acked_before,
                accepted_before,
            });
            s.trace(&format!("the restored cluster {cluster_id} starts"));
        }
        for index in 0..self.replicas.len() {
            self.handle.restart(self.replicas[index].id());
        }
        // The clients find their sessions gone and open new ones: the step ends once one of
        // them was granted something by the restored cluster (checker 8 asks for it).
        for _ in 0..(RESTORE_CARRY_ON_MS / 100) {
            if restored_grants(&lock(&self.shared).history) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Removes every file of replica `index`'s disk for good (the replica is down); answers how
    /// many there were.
    fn destroy_disk(&mut self, index: usize) -> usize {
        let disk = &self.disks[index];
        let files = disk.paths();
        let dirs: BTreeSet<PathBuf> = files
            .iter()
            .filter_map(|f| f.parent().map(PathBuf::from))
            .collect();
        for file in &files {
            disk.remove_file(file)
                .expect("a listed file can be removed");
        }
        for dir in &dirs {
            disk.sync_dir(dir).expect("syncs do not fail after a kill");
        }
        disk.crash();
        assert!(
            disk.paths().is_empty(),
            "the destroyed disk still has files"
        );
        files.len()
    }

    /// The contact list of a new replica, the way operators write one (issue 34), drawn from
    /// the seed: one running member, the list from before the last change (stale: it may name
    /// a member removed since), or only the member being replaced.
    fn draw_contacts(&mut self, old: NodeId, new: NodeId) -> Vec<NodeId> {
        let draw = mix(self.seed, new.0);
        let (kind, contacts) = match draw % 3 {
            0 => {
                let one = self.members[(draw / 3) as usize % self.members.len()];
                ("contacts-single", vec![one])
            }
            1 => ("contacts-stale", self.members_before.clone()),
            _ => ("contacts-replaced", vec![old]),
        };
        lock(&self.shared).count(kind);
        contacts
    }

    /// Runs a probe acquire on a fresh node; `Some((token, granted_at_ms))` if granted in time.
    async fn probe(&mut self, within_ms: u64) -> Option<(u64, u64)> {
        self.probes += 1;
        let ctx = ClientCtx {
            id: 100 + u64::from(self.probes),
            replicas: self.members.clone(),
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
        let task = node.spawn(real::real_probe(ctx, key));
        let token = tokio::time::timeout(within, task).await.ok()?.ok()?;
        let at = lock(&self.shared).now_ms();
        self.trace(&format!("probe granted token {token}"));
        Some((token, at))
    }

    /// After the final restart: a probe shows a leader applied everything chosen before; then
    /// every replica that catches up to the probe's grant reports what it holds (checker 4).
    async fn collect_final(&mut self) {
        let restarted_at = lock(&self.shared).now_ms();
        let Some((token, _)) = self.probe(60_000).await else {
            self.trace("final probe not granted");
            return;
        };
        self.every_member_ready(restarted_at).await;
        for _ in 0..200 {
            let all_caught_up = {
                let s = lock(&self.shared);
                self.members.iter().all(|m| caught_up(&s, m, token))
            };
            if all_caught_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut s = lock(&self.shared);
        let mut finals = Vec::new();
        for m in &self.members {
            if let (true, Some(be)) = (caught_up(&s, m, token), s.boot_events.get(m)) {
                finals.push(FinalReplica {
                    node: m.0,
                    revision: s.applied[m],
                    events_from: be.events_from,
                    events: be.events.clone(),
                });
            }
        }
        s.history.final_replicas = finals;
        for id in &self.wiped {
            assert!(
                caught_up(&s, id, token),
                "replica {} rejoined after its disk was wiped but did not catch up after the \
                 final restart",
                id.0
            );
        }
    }
}

impl Cluster {
    /// The liveness checker's second half: after the full restart every member serves (its
    /// status is ready: it is the leader or knows one, and is neither recovering nor removed)
    /// within [`RESTART_READY_BOUND_MS`]; a member that does not is a liveness violation.
    async fn every_member_ready(&mut self, restarted_at: u64) {
        let deadline = restarted_at + RESTART_READY_BOUND_MS;
        loop {
            let (now, waiting): (u64, Vec<u64>) = {
                let s = lock(&self.shared);
                let waiting = self
                    .members
                    .iter()
                    .filter(|m| !s.ready.get(*m).copied().unwrap_or(false))
                    .map(|m| m.0)
                    .collect();
                (s.now_ms(), waiting)
            };
            if waiting.is_empty() {
                self.trace("every member ready after the full restart");
                return;
            }
            if now >= deadline {
                let mut s = lock(&self.shared);
                let failure = format!(
                    "replicas {waiting:?} not ready {RESTART_READY_BOUND_MS} ms after every \
                     member restarted"
                );
                s.trace(&failure);
                s.history.membership_failures.push(failure);
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// How long a backup may take to save, faults healed, before the run counts it as a liveness
/// failure.
pub const BACKUP_BOUND_MS: u64 = 30_000;

/// How long the cluster is down between the loss of every replica and the restored start.
const RESTORE_DOWNTIME_MS: u64 = 1_000;

/// How long a restore step waits, at most, for a client to be granted something by the
/// restored cluster.
const RESTORE_CARRY_ON_MS: u64 = 15_000;

/// Grants acknowledged to sessions opened on the cluster the last restore made.
pub fn restored_grants(history: &History) -> usize {
    let Some(restore) = history.restores.last() else {
        return 0;
    };
    history
        .acked
        .iter()
        .filter(|op| match op {
            AckedOp::Grant { session, .. } => history
                .sessions_opened
                .get(session)
                .is_some_and(|at| restore.after_by_time(*at)),
            _ => false,
        })
        .count()
}

/// How long after a full restart every member must serve (the liveness checker).
pub const RESTART_READY_BOUND_MS: u64 = 30_000;

/// A number drawn from the seed for `what` (deterministic, independent of the simulator's RNG).
fn mix(seed: u64, what: u64) -> u64 {
    let mut x = seed ^ what.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x
}

/// Replica `m` applied the probe's grant `token` and its watcher read past it.
fn caught_up(s: &Shared, m: &NodeId, token: u64) -> bool {
    s.applied.get(m).is_some_and(|r| *r >= token) && s.watched.get(m).is_some_and(|r| *r > token)
}

/// The first id after the starting members (the replicas membership changes add take the next
/// ones).
fn plan_replicas_next(members: &[NodeId]) -> u64 {
    members.iter().map(|m| m.0).max().unwrap_or(0) + 1
}
