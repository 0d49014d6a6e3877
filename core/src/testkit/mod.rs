//! A deterministic in-memory cluster for tests, fuzzing and benchmarks.
//!
//! N replicas, a network that can drop, delay (and so reorder), duplicate and partition, storage
//! that acknowledges persists after a delay and loses unacknowledged ones at a crash, crash and
//! restart from the persisted state only, disk loss; all driven by one seed. A checker watches
//! every durable acceptance and every `Apply` and panics (with the seed in the message) when
//! two values are chosen at one slot or applied prefixes disagree.

mod checker;
pub mod lock_model;
mod machine;
pub mod script;
mod trace;

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Debug;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use checker::Checker;
pub use machine::{History, Machine};

use crate::faults::Faults;
use crate::paxos::{
    Action, Ballot, Config, Durable, Input, Membership, Message, NodeId, Persist, ProposeError,
    ReadId, ReconfigError, Replica, RoleKind, Schedule, Slot, Value,
};
use crate::time::Instant;

/// Knobs of a simulated cluster. Probabilities are per mille.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Machines: nodes 1..=`members` form the first membership; the others start as replicas
    /// joining it (they vote on nothing until a membership change names them).
    pub nodes: usize,
    /// The first membership's voters (3 or 5).
    pub members: usize,
    /// α of the membership rule (`Config::reconfig_delay_slots`).
    pub reconfig_delay_slots: usize,
    pub seed: u64,
    pub drop_per_mille: u64,
    pub duplicate_per_mille: u64,
    pub delay_ms_max: u64,
    pub persist_delay_ms_max: u64,
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub heartbeat_ms: u64,
    pub window_slots: usize,
    pub batch_commands_max: usize,
    pub pending_max: usize,
    /// Every replica's planted bugs ([`Faults`]; none by default).
    pub faults: Faults,
    /// `Config::read_lease_ms` of every replica (0: read-index).
    pub read_lease_ms: u64,
}

impl ClusterConfig {
    /// A perfect network and disk: no loss, no delay.
    pub fn reliable(nodes: usize, seed: u64) -> Self {
        ClusterConfig {
            nodes,
            members: nodes,
            reconfig_delay_slots: 8,
            seed,
            drop_per_mille: 0,
            duplicate_per_mille: 0,
            delay_ms_max: 0,
            persist_delay_ms_max: 0,
            election_timeout_ms_min: 150,
            election_timeout_ms_max: 300,
            heartbeat_ms: 50,
            window_slots: 8,
            batch_commands_max: 4,
            pending_max: 1000,
            faults: Faults::NONE,
            read_lease_ms: 0,
        }
    }

    /// The first membership.
    pub fn first_members(&self) -> Vec<NodeId> {
        (1..=self.members as u64).map(NodeId).collect()
    }

    fn replica_config(&self, id: NodeId) -> Config {
        Config {
            id,
            members: self.first_members(),
            joining: id.0 > self.members as u64,
            reconfig_delay_slots: self.reconfig_delay_slots,
            election_timeout_ms_min: self.election_timeout_ms_min,
            election_timeout_ms_max: self.election_timeout_ms_max,
            heartbeat_ms: self.heartbeat_ms,
            window_slots: self.window_slots,
            batch_commands_max: self.batch_commands_max,
            pending_max: self.pending_max,
            read_lease_ms: self.read_lease_ms,
            clock_drift_ppm: crate::paxos::CLOCK_DRIFT_PPM_DEFAULT,
            seed: self.seed,
            faults: self.faults,
        }
    }
}

struct PendingPersist<C, S> {
    due: Instant,
    persist: Persist<C, S>,
}

/// One simulated machine: replica, disk and state machine.
pub struct SimNode<C, M: Machine<C>> {
    pub replica: Option<Replica<C, M::Snapshot>>,
    /// What storage acknowledged: survives crashes (not disk loss).
    pub durable: Durable<C, M::Snapshot>,
    unacked: VecDeque<PendingPersist<C, M::Snapshot>>,
    pub machine: M,
    /// Last slot the state machine applied (or installed by snapshot).
    pub applied: Slot,
    pub reads_ready: Vec<ReadId>,
    pub reads_failed: Vec<ReadId>,
    /// Per pending read: the highest slot applied anywhere when the read started. A read must
    /// see every write completed before it started (linearizability).
    reads_started: Vec<(ReadId, Slot)>,
}

struct Envelope<C, S> {
    deliver_at: Instant,
    seq: u64,
    from: NodeId,
    to: NodeId,
    msg: Message<C, S>,
}

/// The simulated cluster.
pub struct Cluster<C, M: Machine<C>> {
    pub now: Instant,
    pub cfg: ClusterConfig,
    rng: ChaCha8Rng,
    pub nodes: Vec<SimNode<C, M>>,
    net: Vec<Envelope<C, M::Snapshot>>,
    seq: u64,
    /// Directed links that drop everything (a partition).
    blocked: BTreeSet<(NodeId, NodeId)>,
    pub checker: Checker<C>,
    /// When `Some`, every action is rendered here (scripted tests).
    pub trace: Option<Vec<String>>,
}

/// Events processed in one settle before the cluster is declared livelocked.
const SETTLE_STEPS_MAX: usize = 2_000_000;

impl<C, M> Cluster<C, M>
where
    C: Clone + Debug + Eq,
    M: Machine<C>,
{
    pub fn new(cfg: ClusterConfig) -> Self {
        assert!(cfg.members == 3 || cfg.members == 5, "3 or 5 first members");
        assert!(cfg.nodes >= cfg.members, "fewer nodes than members");
        let mut c = Cluster {
            now: Instant::ZERO,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            nodes: Vec::new(),
            net: Vec::new(),
            seq: 0,
            blocked: BTreeSet::new(),
            checker: Checker::new(
                Schedule::new(Membership::voters(cfg.first_members())),
                cfg.reconfig_delay_slots,
                cfg.seed,
            ),
            trace: None,
            cfg,
        };
        for i in 0..c.cfg.nodes {
            let id = NodeId(i as u64 + 1);
            let replica = Replica::new(c.cfg.replica_config(id), Durable::default(), Instant::ZERO)
                .expect("valid config");
            c.nodes.push(SimNode {
                replica: Some(replica),
                durable: Durable::default(),
                unacked: VecDeque::new(),
                machine: M::empty(),
                applied: Slot::ZERO,
                reads_ready: Vec::new(),
                reads_failed: Vec::new(),
                reads_started: Vec::new(),
            });
        }
        c
    }

    pub fn ids(&self) -> Vec<NodeId> {
        (1..=self.nodes.len() as u64).map(NodeId).collect()
    }

    fn idx(id: NodeId) -> usize {
        id.0 as usize - 1
    }

    pub fn node(&self, id: NodeId) -> &SimNode<C, M> {
        &self.nodes[Self::idx(id)]
    }

    pub fn replica(&self, id: NodeId) -> Option<&Replica<C, M::Snapshot>> {
        self.nodes[Self::idx(id)].replica.as_ref()
    }

    /// Whether some replica lost its disk and has not recovered yet (a test loses one disk at
    /// a time: recovery needs the others' answers).
    pub fn any_disk_lost(&self) -> bool {
        self.ids().iter().any(|id| {
            self.node(*id).durable.lost || self.replica(*id).is_some_and(|r| r.is_amnesiac())
        })
    }

    pub fn is_up(&self, id: NodeId) -> bool {
        self.replica(id).is_some()
    }

    /// The live leader with the highest ballot, if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.ids()
            .into_iter()
            .filter_map(|id| self.replica(id).map(|r| (id, r)))
            .filter(|(_, r)| r.role() == RoleKind::Leader)
            .max_by_key(|(_, r)| r.ballot_promised())
            .map(|(id, _)| id)
    }

    fn random(&mut self, below: u64) -> u64 {
        if below == 0 {
            0
        } else {
            self.rng.next_u64() % below
        }
    }

    // ---- driver inputs ----

    pub fn propose(&mut self, id: NodeId, commands: Vec<C>) -> Result<(), ProposeError> {
        let now = self.now;
        let r = self.nodes[Self::idx(id)]
            .replica
            .as_mut()
            .ok_or(ProposeError::NotLeader { leader_hint: None })?;
        let res = r.propose_many(now, commands);
        self.drain(id);
        res
    }

    /// Asks `id` (the leader) to change the membership.
    pub fn propose_membership(
        &mut self,
        id: NodeId,
        membership: Membership,
        force: bool,
    ) -> Result<(), ReconfigError> {
        let now = self.now;
        let r = self.nodes[Self::idx(id)]
            .replica
            .as_mut()
            .ok_or(ReconfigError::NotLeader { leader_hint: None })?;
        let res = r.propose_membership(now, membership, force);
        self.drain(id);
        res
    }

    pub fn read_index(&mut self, id: NodeId) -> Result<ReadId, ProposeError> {
        let now = self.now;
        let r = self.nodes[Self::idx(id)]
            .replica
            .as_mut()
            .ok_or(ProposeError::NotLeader { leader_hint: None })?;
        let res = r.read_index(now);
        if let Ok(rid) = res {
            let applied_anywhere = self
                .nodes
                .iter()
                .map(|n| n.applied)
                .max()
                .unwrap_or_default();
            self.nodes[Self::idx(id)]
                .reads_started
                .push((rid, applied_anywhere));
        }
        self.drain(id);
        res
    }

    /// Compacts `id`'s log at what its state machine applied.
    pub fn compact(&mut self, id: NodeId) -> bool {
        let n = &mut self.nodes[Self::idx(id)];
        let Some(r) = n.replica.as_mut() else {
            return false;
        };
        let ok = r.compact(n.applied, n.machine.snapshot()).is_ok();
        self.drain(id);
        ok
    }

    /// Stops `id`; unacknowledged persists are lost, the durable state stays.
    /// A random prefix of the persists not yet acknowledged reached the disk anyway (written,
    /// but the crash came before the acknowledgement); the rest is lost.
    pub fn crash(&mut self, id: NodeId) {
        let pending = self.nodes[Self::idx(id)].unacked.len() as u64;
        let reached = self.random(pending + 1) as usize;
        let n = &mut self.nodes[Self::idx(id)];
        n.replica = None;
        let written: Vec<_> = n.unacked.drain(..).take(reached).collect();
        n.reads_started.clear();
        for p in written {
            n.durable.apply_persist(&p.persist);
            for (slot, ballot, value) in &p.persist.accepted {
                self.checker.on_durable_accept(id, *slot, *ballot, value);
            }
        }
        self.log(format!("{id}: crash"));
    }

    /// Crashes `id` and loses its disk.
    pub fn crash_losing_disk(&mut self, id: NodeId) {
        self.crash(id);
        let n = &mut self.nodes[Self::idx(id)];
        n.durable = Durable {
            lost: true,
            ..Durable::default()
        };
        self.log(format!("{id}: disk lost"));
    }

    /// Restarts `id` from its durable state.
    pub fn restart(&mut self, id: NodeId) {
        let cfg = self.cfg.replica_config(id);
        let n = &mut self.nodes[Self::idx(id)];
        if n.replica.is_some() {
            return;
        }
        n.machine = M::empty();
        n.applied = Slot::ZERO;
        // Started at the cluster's time when leases are on: a restarted replica refuses
        // promises for a lease from its start (`Config::read_lease_ms`). Without them, at
        // zero, as the recorded scripts were (its first election deadline is then past).
        let start = if cfg.read_lease_ms > 0 {
            self.now
        } else {
            Instant::ZERO
        };
        n.replica = Some(Replica::new(cfg, n.durable.clone(), start).expect("valid config"));
        self.log(format!("{id}: restart"));
        self.drain(id);
    }

    /// Cuts `a` and `b` apart (both directions).
    pub fn cut(&mut self, a: NodeId, b: NodeId) {
        self.blocked.insert((a, b));
        self.blocked.insert((b, a));
    }

    /// Loses every message from `from` to `to` (the other direction still works).
    pub fn cut_one_way(&mut self, from: NodeId, to: NodeId) {
        if from != to {
            self.blocked.insert((from, to));
        }
    }

    /// Isolates the `group` from everybody else.
    pub fn partition(&mut self, group: &[NodeId]) {
        for a in self.ids() {
            for b in self.ids() {
                if group.contains(&a) != group.contains(&b) {
                    self.blocked.insert((a, b));
                }
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Heals, then isolates the replicas whose bit is set in `mask` (bit 0: node 1) from the
    /// others.
    pub fn partition_mask(&mut self, mask: u8) {
        let group: Vec<NodeId> = self
            .ids()
            .into_iter()
            .filter(|id| id.0 <= 8 && mask & (1 << (id.0 - 1)) != 0)
            .collect();
        self.heal();
        self.partition(&group);
    }

    /// Crashes `id` losing its disk and restarts it, unless a disk is lost already
    /// ([`Cluster::any_disk_lost`]: one at a time): whether it did.
    pub fn lose_one_disk(&mut self, id: NodeId) -> bool {
        if self.any_disk_lost() {
            return false;
        }
        self.crash_losing_disk(id);
        self.restart(id);
        true
    }

    /// The end of a schedule of faults: heals every cut, restarts every replica, and no message
    /// is lost or duplicated from now on.
    pub fn heal_everything(&mut self) {
        self.heal();
        for id in self.ids() {
            self.restart(id);
        }
        self.cfg.drop_per_mille = 0;
        self.cfg.duplicate_per_mille = 0;
    }

    /// Runs, 100 ms at a time and `ms_max` at the most, until no replica is amnesiac (lost its
    /// disk and has not rejoined): whether none is.
    pub fn until_no_amnesiac(&mut self, ms_max: u64) -> bool {
        let mut waited = 0;
        while self
            .ids()
            .iter()
            .any(|id| self.replica(*id).is_some_and(|r| r.is_amnesiac()))
        {
            if waited >= ms_max {
                return false;
            }
            self.run_for(100);
            waited += 100;
        }
        true
    }

    /// Drops every message in flight from `from` to `to`.
    pub fn drop_in_flight(&mut self, from: NodeId, to: NodeId) -> usize {
        let before = self.net.len();
        self.net.retain(|e| !(e.from == from && e.to == to));
        before - self.net.len()
    }

    pub fn in_flight(&self) -> usize {
        self.net.len()
    }

    // ---- the event loop ----

    /// Processes everything due at `now` until nothing more happens.
    pub fn settle(&mut self) {
        for step in 0.. {
            assert!(
                step < SETTLE_STEPS_MAX,
                "seed {}: livelock at {}",
                self.cfg.seed,
                self.now
            );
            if !self.step_once() {
                break;
            }
        }
    }

    /// Advances time by `ms`, processing every event on the way.
    pub fn run_for(&mut self, ms: u64) {
        let end = self.now.add_ms(ms);
        loop {
            self.settle();
            match self.next_event() {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => break,
            }
        }
        self.now = end;
        self.settle();
    }

    fn next_event(&self) -> Option<Instant> {
        let net = self.net.iter().map(|e| e.deliver_at).min();
        let disks = self
            .nodes
            .iter()
            .filter_map(|n| n.unacked.front().map(|p| p.due))
            .min();
        let timers = self
            .nodes
            .iter()
            .filter_map(|n| n.replica.as_ref().and_then(|r| r.poll_timeout()))
            .min();
        [net, disks, timers].into_iter().flatten().min()
    }

    /// One event due now, if any: a message, a disk acknowledgement or a timeout.
    fn step_once(&mut self) -> bool {
        let now = self.now;
        if let Some(i) = self
            .net
            .iter()
            .enumerate()
            .filter(|(_, e)| e.deliver_at <= now)
            .min_by_key(|(_, e)| (e.deliver_at, e.seq))
            .map(|(i, _)| i)
        {
            let e = self.net.remove(i);
            self.deliver(e);
            return true;
        }
        for id in self.ids() {
            let n = &mut self.nodes[Self::idx(id)];
            if n.unacked.front().is_some_and(|p| p.due <= now) {
                self.ack_persists(id);
                return true;
            }
        }
        for id in self.ids() {
            let n = &mut self.nodes[Self::idx(id)];
            let Some(r) = n.replica.as_mut() else {
                continue;
            };
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.step(now, Input::Timeout).expect("timeout");
                self.drain(id);
                return true;
            }
        }
        false
    }

    fn deliver(&mut self, e: Envelope<C, M::Snapshot>) {
        if self.blocked.contains(&(e.from, e.to)) {
            return;
        }
        let now = self.now;
        let Some(r) = self.nodes[Self::idx(e.to)].replica.as_mut() else {
            return;
        };
        r.step(
            now,
            Input::Message {
                from: e.from,
                msg: e.msg,
            },
        )
        .expect("message");
        self.drain(e.to);
    }

    /// Makes every due persist of `id` durable and acknowledges the last one.
    fn ack_persists(&mut self, id: NodeId) {
        let now = self.now;
        let n = &mut self.nodes[Self::idx(id)];
        let mut last = None;
        while n.unacked.front().is_some_and(|p| p.due <= now) {
            let p = n.unacked.pop_front().expect("front");
            n.durable.apply_persist(&p.persist);
            for (slot, ballot, value) in &p.persist.accepted {
                self.checker.on_durable_accept(id, *slot, *ballot, value);
            }
            last = Some(p.persist.id);
        }
        if let (Some(id_last), Some(r)) = (last, n.replica.as_mut()) {
            r.step(now, Input::Persisted { id: id_last })
                .expect("persisted");
            self.drain(id);
        }
    }

    /// Takes every action out of `id`'s replica.
    fn drain(&mut self, id: NodeId) {
        loop {
            let i = Self::idx(id);
            let Some(action) = self.nodes[i].replica.as_mut().and_then(|r| r.poll_action()) else {
                // The replica wants a snapshot now (recovery from disk loss, a membership
                // change in effect): take it, as a node's driver does.
                let wanted = self.nodes[i]
                    .replica
                    .as_ref()
                    .is_some_and(|r| r.snapshot_wanted());
                if wanted && self.compact(id) {
                    continue;
                }
                return;
            };
            if self.trace.is_some() {
                let line = trace::render(id, &action);
                self.log(line);
            }
            self.handle(id, action);
        }
    }

    fn handle(&mut self, id: NodeId, action: Action<C, M::Snapshot>) {
        let i = Self::idx(id);
        match action {
            Action::Persist(persist) => {
                let delay = self.random(self.cfg.persist_delay_ms_max + 1);
                let due = self.now.add_ms(delay);
                let due = self.nodes[i].unacked.back().map_or(due, |p| p.due.max(due));
                self.nodes[i]
                    .unacked
                    .push_back(PendingPersist { due, persist });
            }
            Action::Send { to, msg } => {
                self.check_durable_before_reply(id, &msg);
                self.send(id, to, msg);
            }
            Action::Apply { slot, value } => {
                let n = &mut self.nodes[i];
                assert_eq!(
                    slot,
                    n.applied.next(),
                    "seed {}: {id} applied {slot} after {}",
                    self.cfg.seed,
                    n.applied
                );
                n.machine.apply(slot, &value);
                n.applied = slot;
                self.checker.on_apply(id, slot, &value);
            }
            Action::InstallSnapshot { slot, snapshot } => {
                let n = &mut self.nodes[i];
                n.machine = M::restore(&snapshot);
                n.applied = slot;
                self.checker.on_snapshot(id, slot, n.machine.values());
            }
            Action::ReadReady {
                id: rid,
                slot_applied_min,
            } => {
                let n = &mut self.nodes[i];
                assert!(
                    n.applied >= slot_applied_min,
                    "read ready before applied reached {slot_applied_min}"
                );
                if let Some(k) = n.reads_started.iter().position(|(r, _)| *r == rid) {
                    let (_, must_see) = n.reads_started.remove(k);
                    assert!(
                        n.applied >= must_see,
                        "seed {}: {id} read {rid:?} at applied {} misses slot {must_see} applied \
                         elsewhere before the read started",
                        self.cfg.seed,
                        n.applied
                    );
                }
                n.reads_ready.push(rid);
            }
            Action::ReadFailed { id: rid } => self.nodes[i].reads_failed.push(rid),
            Action::RoleChanged { .. } => {}
        }
    }

    /// Persist before reply: a `Promise` or `Accepted` may only leave once storage holds
    /// what it reports.
    fn check_durable_before_reply(&self, id: NodeId, msg: &Message<C, M::Snapshot>) {
        let d = &self.nodes[Self::idx(id)].durable;
        match msg {
            Message::Promise { ballot, .. } => assert!(
                d.promised >= *ballot,
                "seed {}: {id} sent a promise of {ballot} with {} durable",
                self.cfg.seed,
                d.promised
            ),
            Message::Accepted { ballot, slot } => {
                let covered = d.snapshot.as_ref().is_some_and(|(s, _)| s >= slot);
                let accepted = d.accepted.get(slot).is_some_and(|(b, _)| b >= ballot);
                assert!(
                    covered || accepted,
                    "seed {}: {id} sent accepted {ballot} at {slot} before persisting it",
                    self.cfg.seed
                );
            }
            _ => {}
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: Message<C, M::Snapshot>) {
        if self.blocked.contains(&(from, to)) {
            return;
        }
        if self.random(1000) < self.cfg.drop_per_mille {
            return;
        }
        let copies = if self.random(1000) < self.cfg.duplicate_per_mille {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.random(self.cfg.delay_ms_max + 1);
            self.seq += 1;
            self.net.push(Envelope {
                deliver_at: self.now.add_ms(delay),
                seq: self.seq,
                from,
                to,
                msg: msg.clone(),
            });
        }
    }

    fn log(&mut self, line: String) {
        if let Some(t) = self.trace.as_mut() {
            t.push(line);
        }
    }

    // ---- checks ----

    /// Panics unless every live replica's state machine holds the same prefix.
    pub fn check_prefixes_agree(&self) {
        for n in &self.nodes {
            let values = n.machine.values();
            self.checker.check_prefix(&values);
        }
    }

    /// Runs up to `ms_max` of simulated time, proposing `command` at whichever replica leads,
    /// until every live replica applied it. Returns the time it took.
    pub fn commit_within(&mut self, command: C, ms_max: u64) -> Option<u64> {
        let start = self.now;
        let mut proposed_at: Option<(NodeId, Ballot)> = None;
        while self.now.ms_since(start) <= ms_max {
            if let Some(l) = self.leader() {
                let ballot = self.replica(l).map(|r| r.ballot_promised());
                if proposed_at.map(|(n, b)| (n, Some(b))) != Some((l, ballot))
                    && self.propose(l, vec![command.clone()]).is_ok()
                {
                    proposed_at = ballot.map(|b| (l, b));
                }
            }
            self.run_for(10);
            // Every live member of the newest membership the leader knows (a replica outside
            // it, e.g. one not added yet or removed, need not follow).
            let members = self
                .leader()
                .and_then(|l| self.replica(l))
                .map(|r| r.membership_latest().0.clone());
            let done = members.is_some_and(|m| {
                self.ids().into_iter().all(|id| {
                    let n = self.node(id);
                    n.replica.is_none() || !m.is_member(id) || n.machine.contains(&command)
                })
            });
            if done {
                return Some(self.now.ms_since(start));
            }
        }
        None
    }

    /// The values chosen so far (by durable quorum), in slot order, for scripts.
    pub fn chosen(&self, slot: Slot) -> Option<&Value<C>> {
        self.checker.chosen(slot)
    }
}
