//! A deterministic in-memory cluster for tests, fuzzing and benchmarks: the generic fixture
//! ([`Cluster`], `cluster.rs`) and its Paxos host ([`Paxos`], here).
//!
//! N replicas, a network that can drop, delay (and so reorder), duplicate and partition, storage
//! that acknowledges persists after a delay and loses unacknowledged ones at a crash, crash and
//! restart from the persisted state only, disk loss; all driven by one seed. A checker watches
//! every durable acceptance and every `Apply` and panics (with the seed in the message) when
//! two values are chosen at one slot or applied prefixes disagree.

mod checker;
mod cluster;
pub mod lock_model;
mod machine;
pub mod script;
mod trace;

use std::fmt::Debug;
use std::marker::PhantomData;

pub use checker::Checker;
pub use cluster::{Cluster, Event, Host, Routed, Seat, Weather};
pub use machine::{History, Machine};

use crate::faults::Faults;
use crate::paxos::{
    Action, Ballot, Config, Durable, Membership, Message, NodeId, PersistId, ProposeError, ReadId,
    ReconfigError, Replica, RoleKind, Schedule, Slot, Value,
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

/// What a test keeps beside each replica: the state machine it applies to, and its reads.
pub struct SimNode<C, M: Machine<C>> {
    pub machine: M,
    /// Last slot the state machine applied (or installed by snapshot).
    pub applied: Slot,
    pub reads_ready: Vec<ReadId>,
    pub reads_failed: Vec<ReadId>,
    /// Per pending read: the highest slot applied anywhere when the read started. A read must
    /// see every write completed before it started (linearizability).
    reads_started: Vec<(ReadId, Slot)>,
    _command: PhantomData<C>,
}

impl<C, M: Machine<C>> SimNode<C, M> {
    fn empty() -> Self {
        SimNode {
            machine: M::empty(),
            applied: Slot::ZERO,
            reads_ready: Vec::new(),
            reads_failed: Vec::new(),
            reads_started: Vec::new(),
            _command: PhantomData,
        }
    }
}

/// The [`Host`] of a cluster of Paxos [`Replica`]s applying to a [`Machine`], checked by the
/// [`Checker`].
pub struct Paxos<C, M>(PhantomData<(C, M)>);

impl<C, M> Host for Paxos<C, M>
where
    C: Clone + Debug + Eq,
    M: Machine<C>,
{
    type Command = C;
    type Snapshot = M::Snapshot;
    type Stepped = Replica<C, M::Snapshot>;
    type Action = Action<C, M::Snapshot>;
    type Local = SimNode<C, M>;
    type Watch = Checker<C>;
    type Config = ClusterConfig;

    fn weather(cfg: &ClusterConfig) -> Weather {
        Weather {
            seed: cfg.seed,
            drop_per_mille: cfg.drop_per_mille,
            duplicate_per_mille: cfg.duplicate_per_mille,
            delay_ms_max: cfg.delay_ms_max,
            persist_delay_ms_max: cfg.persist_delay_ms_max,
            held: false,
        }
    }

    fn receive(r: &mut Self::Stepped, now: Instant, from: NodeId, msg: Message<C, M::Snapshot>) {
        r.receive(now, from, msg);
    }

    fn tick(r: &mut Self::Stepped, now: Instant) {
        r.tick(now);
    }

    fn persisted(r: &mut Self::Stepped, now: Instant, id: PersistId) {
        r.persisted(now, id).expect("persisted");
    }

    fn poll_action(r: &mut Self::Stepped) -> Option<Self::Action> {
        r.poll_action()
    }

    fn poll_timeout(r: &Self::Stepped) -> Option<Instant> {
        r.poll_timeout()
    }

    fn route(action: Self::Action) -> Routed<Self> {
        match action {
            Action::Persist(persist) => Routed::Persist(persist),
            Action::Send { to, msg } => Routed::Send { to, msg },
            other => Routed::Local(other),
        }
    }

    fn handle(c: &mut Cluster<Self>, id: NodeId, action: Self::Action) {
        let seed = c.cfg.seed;
        let n = &mut c.seat_mut(id).local;
        match action {
            Action::Persist(_) | Action::Send { .. } => unreachable!("routed to disk and network"),
            Action::Apply { slot, value } => {
                assert_eq!(
                    slot,
                    n.applied.next(),
                    "seed {seed}: {id} applied {slot} after {}",
                    n.applied
                );
                n.machine.apply(slot, &value);
                n.applied = slot;
                c.watch.on_apply(id, slot, &value);
            }
            Action::InstallSnapshot { slot, snapshot } => {
                n.machine = M::restore(&snapshot);
                n.applied = slot;
                let values = n.machine.values();
                c.watch.on_snapshot(id, slot, values);
            }
            Action::ReadReady {
                id: rid,
                slot_applied_min,
            } => {
                assert!(
                    n.applied >= slot_applied_min,
                    "read ready before applied reached {slot_applied_min}"
                );
                if let Some(k) = n.reads_started.iter().position(|(r, _)| *r == rid) {
                    let (_, must_see) = n.reads_started.remove(k);
                    assert!(
                        n.applied >= must_see,
                        "seed {seed}: {id} read {rid:?} at applied {} misses slot {must_see} \
                         applied elsewhere before the read started",
                        n.applied
                    );
                }
                n.reads_ready.push(rid);
            }
            Action::ReadFailed { id: rid } => n.reads_failed.push(rid),
            Action::RoleChanged { .. } => {}
        }
    }

    fn observe(c: &mut Cluster<Self>, event: Event<'_, Self>) {
        match event {
            Event::Action { id, action } => {
                if c.trace.is_some() {
                    let line = trace::render(id, action);
                    c.log(line);
                }
            }
            Event::Sent { from, msg, .. } => c.check_durable_before_reply(from, msg),
            Event::Durable { id, persist } => {
                for (slot, ballot, value) in &persist.accepted {
                    c.watch.on_durable_accept(id, *slot, *ballot, value);
                }
            }
            Event::Delivered { .. } => {}
        }
    }

    /// The replica wants a snapshot now (recovery from disk loss, a membership change in
    /// effect): take it, as a node's driver does.
    fn idle(c: &mut Cluster<Self>, id: NodeId) -> bool {
        let wanted = c.replica(id).is_some_and(|r| r.snapshot_wanted());
        wanted && c.compact(id)
    }
}

impl<C, M> Cluster<Paxos<C, M>>
where
    C: Clone + Debug + Eq,
    M: Machine<C>,
{
    pub fn new(cfg: ClusterConfig) -> Self {
        assert!(cfg.members == 3 || cfg.members == 5, "3 or 5 first members");
        assert!(cfg.nodes >= cfg.members, "fewer nodes than members");
        let checker = Checker::new(
            Schedule::new(Membership::voters(cfg.first_members())),
            cfg.reconfig_delay_slots,
            cfg.seed,
        );
        let mut c = Self::empty(cfg, checker);
        for i in 0..c.cfg.nodes {
            let id = NodeId(i as u64 + 1);
            let replica = Replica::new(c.cfg.replica_config(id), Durable::default(), Instant::ZERO)
                .expect("valid config");
            c.seat(Some(replica), Durable::default(), SimNode::empty());
        }
        c
    }

    /// The checker of every durable acceptance and every applied value.
    pub fn checker(&self) -> &Checker<C> {
        &self.watch
    }

    /// What the test keeps beside replica `id`.
    pub fn node(&self, id: NodeId) -> &SimNode<C, M> {
        &self.seat_of(id).local
    }

    pub fn replica(&self, id: NodeId) -> Option<&Replica<C, M::Snapshot>> {
        self.up(id)
    }

    /// Whether some replica lost its disk and has not recovered yet (a test loses one disk at
    /// a time: recovery needs the others' answers).
    pub fn any_disk_lost(&self) -> bool {
        self.ids().iter().any(|id| {
            self.seat_of(*id).durable.lost || self.replica(*id).is_some_and(|r| r.is_amnesiac())
        })
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

    // ---- driver inputs ----

    pub fn propose(&mut self, id: NodeId, commands: Vec<C>) -> Result<(), ProposeError> {
        let now = self.now;
        let r = self
            .up_mut(id)
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
        let r = self
            .up_mut(id)
            .ok_or(ReconfigError::NotLeader { leader_hint: None })?;
        let res = r.propose_membership(now, membership, force);
        self.drain(id);
        res
    }

    pub fn read_index(&mut self, id: NodeId) -> Result<ReadId, ProposeError> {
        let now = self.now;
        let r = self
            .up_mut(id)
            .ok_or(ProposeError::NotLeader { leader_hint: None })?;
        let res = r.read_index(now);
        if let Ok(rid) = res {
            let applied_anywhere = self
                .nodes
                .iter()
                .map(|n| n.local.applied)
                .max()
                .unwrap_or_default();
            self.seat_mut(id)
                .local
                .reads_started
                .push((rid, applied_anywhere));
        }
        self.drain(id);
        res
    }

    /// Compacts `id`'s log at what its state machine applied.
    pub fn compact(&mut self, id: NodeId) -> bool {
        let seat = self.seat_mut(id);
        let Some(r) = seat.up.as_mut() else {
            return false;
        };
        let ok = r
            .compact(seat.local.applied, seat.local.machine.snapshot())
            .is_ok();
        self.drain(id);
        ok
    }

    /// Stops `id`; unacknowledged persists are lost (but a random prefix of them), the durable
    /// state stays ([`Cluster::take_down`]).
    pub fn crash(&mut self, id: NodeId) {
        self.seat_mut(id).local.reads_started.clear();
        self.take_down(id);
        self.log(format!("{id}: crash"));
    }

    /// Crashes `id` and loses its disk.
    pub fn crash_losing_disk(&mut self, id: NodeId) {
        self.crash(id);
        self.seat_mut(id).durable = Durable {
            lost: true,
            ..Durable::default()
        };
        self.log(format!("{id}: disk lost"));
    }

    /// Restarts `id` from its durable state.
    pub fn restart(&mut self, id: NodeId) {
        if self.is_up(id) {
            return;
        }
        let cfg = self.cfg.replica_config(id);
        // Started at the cluster's time when leases are on: a restarted replica refuses
        // promises for a lease from its start (`Config::read_lease_ms`). Without them, at
        // zero, as the recorded scripts were (its first election deadline is then past).
        let start = if cfg.read_lease_ms > 0 {
            self.now
        } else {
            Instant::ZERO
        };
        let seat = self.seat_mut(id);
        seat.local.machine = M::empty();
        seat.local.applied = Slot::ZERO;
        let replica = Replica::new(cfg, seat.durable.clone(), start).expect("valid config");
        self.put_up(id, replica);
        self.log(format!("{id}: restart"));
        self.drain(id);
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

    /// Persist before reply: a `Promise` or `Accepted` may only leave once storage holds
    /// what it reports.
    fn check_durable_before_reply(&self, id: NodeId, msg: &Message<C, M::Snapshot>) {
        let d = &self.seat_of(id).durable;
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

    // ---- checks ----

    /// Panics unless every live replica's state machine holds the same prefix.
    pub fn check_prefixes_agree(&self) {
        for n in &self.nodes {
            let values = n.local.machine.values();
            self.watch.check_prefix(&values);
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
                    !self.is_up(id) || !m.is_member(id) || self.node(id).machine.contains(&command)
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
        self.watch.chosen(slot)
    }
}
