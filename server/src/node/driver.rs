//! The node driver: one task owns the core [`Node`] and performs its IO.
//!
//! Each turn of the loop takes every input that is ready (client requests, peer messages, a
//! timeout), then drains the node's actions in FIFO order:
//!
//! - `Persist` actions are collected, **all** of them are written, made durable with one log
//!   fdatasync ([`DurableStore::persist_owned`]: group commit), and `Persisted { id of the last }`
//!   is stepped; the actions this releases (held promises and acceptances, replies) are drained
//!   in the same way until none is left. A local compaction's snapshot is saved by a background
//!   save meanwhile (the log covers it until then); each turn takes its result, if it finished;
//!   with `[storage] persist = "thread"` the group commit goes to a [`PersistThread`] instead
//!   and the driver goes on; its acknowledgement arrives as an input, and whatever the node
//!   persists meanwhile is sent too and joins the thread's next group commit;
//! - `Send` actions go to the per-peer outbound queues (batched on long-lived streams by
//!   [`crate::node::peer`]);
//! - replies go back to the waiting gRPC handlers through oneshot channels.
//!
//! `Acquire` with a wait: the node itself holds the proposal until the wait ends (granted,
//! cancelled, expired, the session ended) or `wait_ms` passes (then `Queued`), and answers it
//! with one `Reply`; the driver passes that on like any other reply.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use picket_core::locks::{
    Command, LostHold, Outcome, Revision, SessionId, SessionProof, WatchError, WatchFilter,
    WatchPage,
};
use picket_core::node::{Action, Answer, KeepAliveError, Node, ProposalId, Query};
use picket_core::paxos::{
    self, Input, MemberAddress, Membership, NodeId, ReadId, ReconfigError, RoleKind, Schedule,
};
use picket_core::time::Instant;
use picket_net::status::{
    busy_status, node_propose_error_status, not_leader_status, propose_error_status, LeaderHint,
};
use picket_storage::Disk;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tonic::Status;

use crate::config::PersistMode;
use crate::metrics::{namespace_stats, MembershipStats, Metrics, PaxosStats};
use crate::node::clock::Clock;
use crate::node::durable::{
    is_fsync_error, DurableStore, SaveOutcome, StorageCondition, StoreCounters, StoreError,
};
use crate::node::members::{
    next_membership, reconfig_status, ChangeRequest, Known, MemberChange, MembershipChanged, Next,
};
use crate::node::peer::MemberSet;
use crate::node::persist::{PersistEvent, PersistThread};

/// A Paxos message of the node.
pub use picket_core::node::NodeMessage;

/// Inputs taken from a channel in one turn at most (the rest wait for the next turn).
const INPUTS_PER_TURN_MAX: usize = 4_096;
/// Digests queued for a subscriber of [`DriverHandle::subscribe_digests`] at most.
const DIGESTS_QUEUED_MAX: usize = 1_024;
/// How often the namespace series (longest hold, holds, waiters) and the session count are
/// recomputed from the applied state.
const STATS_EVERY_MS: u64 = 1_000;

/// Bounds of the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverLimits {
    /// Client requests queued for the driver at most (beyond: `busy`). (The bound of waiting
    /// `Acquire` calls is the node's: `NodeConfig::waits_pending_max`.)
    pub requests_queued_max: usize,
    /// Peer messages queued for the driver at most (beyond: dropped and counted).
    pub peer_inbound_max: usize,
}

impl Default for DriverLimits {
    fn default() -> Self {
        DriverLimits {
            requests_queued_max: 10_000,
            peer_inbound_max: 16_384,
        }
    }
}

/// What a proposal came to: the state machine's outcome and the revision after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    pub outcome: Outcome,
    pub revision: Revision,
}

type Reply1<T> = oneshot::Sender<Result<T, Status>>;

/// A request from a gRPC handler.
#[derive(Debug)]
pub enum Request {
    /// Propose `command`. For an `Acquire` with `wait_ms > 0`, a `Queued` answer is held up to
    /// `wait_ms` for the grant.
    Propose {
        command: Command,
        wait_ms: u64,
        reply: Reply1<Answered>,
    },
    /// A keepalive of a caller that presented `proof` (checked against the applied state):
    /// answers the TTL and the holds the session lost to force-release (for its client).
    KeepAlive {
        session: SessionId,
        proof: SessionProof,
        reply: oneshot::Sender<Result<(u64, Vec<LostHold>), KeepAliveError>>,
    },
    /// A read: linearizable (read-index on the leader) unless `stale`.
    Read {
        query: Query,
        stale: bool,
        reply: Reply1<(Revision, Answer)>,
    },
    /// A page of the watch log (served from this replica's applied state).
    Watch {
        from: Revision,
        filter: WatchFilter,
        limit: usize,
        reply: oneshot::Sender<Result<WatchPage, WatchError>>,
    },
    Status {
        reply: oneshot::Sender<NodeStatus>,
    },
    /// A membership change (leader only), answered once the log chose it.
    ChangeMembership {
        request: ChangeRequest,
        reply: Reply1<MembershipChanged>,
    },
}

/// How the driver reaches the members: a queue into a new outbound connection to an address,
/// the client endpoint of one (`server.rs`: the peer transport), and the config file's
/// `[[members]]`, a contact list (the addresses of members whose membership in the log carries
/// none, as one written before addresses were recorded for every member).
pub trait PeerDialer: Send {
    fn dial(&mut self, address: &MemberAddress) -> mpsc::Sender<NodeMessage>;
    fn endpoint(&self, address: &MemberAddress) -> String;
    /// The HTTP base URL of one (`None`: it has no HTTP address).
    fn http_endpoint(&self, address: &MemberAddress) -> Option<String>;
    /// The config file's members (this replica aside), with their addresses.
    fn contacts(&self) -> &BTreeMap<NodeId, MemberAddress>;
}

/// `http://host:port` of each member's HTTP listener, by node id: the config file's
/// (`Config::http_endpoints`) and, kept in step by the driver, those of the members the log
/// added ([`DriverHandle::http_endpoints`]).
/// Shared: every clone sees the driver's updates.
#[derive(Clone, Debug, Default)]
pub struct HttpEndpoints(Arc<RwLock<BTreeMap<u64, String>>>);

impl HttpEndpoints {
    pub fn new(endpoints: BTreeMap<u64, String>) -> HttpEndpoints {
        HttpEndpoints(Arc::new(RwLock::new(endpoints)))
    }

    /// The HTTP base URL of `node`, if it has one.
    pub fn get(&self, node: u64) -> Option<String> {
        self.0
            .read()
            .expect("HTTP endpoints poisoned")
            .get(&node)
            .cloned()
    }

    /// Every member's HTTP base URL known now, by node id.
    pub fn all(&self) -> BTreeMap<u64, String> {
        self.0.read().expect("HTTP endpoints poisoned").clone()
    }

    fn insert(&self, node: u64, endpoint: String) {
        self.0
            .write()
            .expect("HTTP endpoints poisoned")
            .insert(node, endpoint);
    }
}

/// A snapshot of the node's condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: NodeId,
    pub role: RoleKind,
    pub leader: Option<NodeId>,
    pub ready_leader: bool,
    pub revision: Revision,
    /// The last slot applied to the state machine.
    pub slot_applied: u64,
    pub boot: u64,
    pub counters: DriverCounters,
    /// How recovery ended and whether the durable state is still lost.
    pub storage: StorageCondition,
    /// The newest membership the log scheduled, and the first slot it governs (the
    /// configuration's revision).
    pub membership: Membership,
    pub membership_from: u64,
    /// Leader: the last slot each member said it applied (learner lag).
    pub members_applied: BTreeMap<NodeId, u64>,
}

impl NodeStatus {
    /// Every member of the newest membership with its client endpoint (as `endpoint_of`
    /// knows it), voter flag and, on the leader, the last slot it said it applied.
    pub fn members(&self, endpoint_of: impl Fn(NodeId) -> Option<String>) -> Vec<MemberView> {
        self.membership
            .members()
            .map(|id| MemberView {
                id,
                client_endpoint: endpoint_of(id).unwrap_or_default(),
                voter: self.membership.is_voter(id),
                // Answered by the leader only (admin.proto, `Member.slot_applied`): a
                // follower knows no other member's progress, and fills in none, its own neither.
                slot_applied: match (self.role, id == self.id) {
                    (RoleKind::Leader, true) => Some(self.slot_applied),
                    (RoleKind::Leader, false) => self.members_applied.get(&id).copied(),
                    (_, _) => None,
                },
            })
            .collect()
    }
}

/// One member as status pages show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    pub client_endpoint: String,
    pub voter: bool,
    pub slot_applied: Option<u64>,
}

impl NodeStatus {
    /// Why this replica does not serve, in words; `None`: it serves (`GET /healthz` 200, and
    /// `ready` in `Admin.GetReplicaStatus`).
    pub fn not_serving_because(&self) -> Option<&'static str> {
        match (self.role, self.leader) {
            (RoleKind::Recovering, _) => {
                Some("recovering: re-learning its state from the other replicas")
            }
            (RoleKind::Removed, _) => {
                Some("removed: not a member of the cluster's newest membership (stop this replica)")
            }
            (_, None) => Some("no leader known"),
            _ => None,
        }
    }
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    pub turns: u64,
    pub persist_ops: u64,
    pub group_commits: u64,
    pub messages_sent: u64,
    /// Outbound messages dropped because a peer's queue was full.
    pub messages_dropped_out: u64,
    pub proposals: u64,
    /// Slots of log that compactions cut and the driver freed off its turn (`free_retired`).
    pub retired_slots_freed: u64,
}

/// A peer message for the driver.
#[derive(Debug)]
pub struct PeerInput {
    pub from: NodeId,
    pub msg: NodeMessage,
}

/// How the gRPC side reaches the driver. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DriverHandle {
    requests: mpsc::Sender<Request>,
    peer_in: mpsc::Sender<PeerInput>,
    applied: watch::Receiver<Revision>,
    /// `(revision, state digest)` after applies, computed only while someone subscribes.
    digests: broadcast::Sender<(Revision, u64)>,
    endpoints: Arc<RwLock<BTreeMap<NodeId, String>>>,
    http_endpoints: HttpEndpoints,
    pub id: NodeId,
    pub cluster_id: Arc<str>,
}

impl DriverHandle {
    /// Hands a request to the driver; `busy` when its queue is full, `unavailable` when it stopped.
    pub fn submit(&self, request: Request) -> Result<(), Status> {
        self.requests.try_send(request).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => busy_status("the node's request queue is full"),
            mpsc::error::TrySendError::Closed(_) => Status::unavailable("the node is stopping"),
        })
    }

    /// Sends a request built around a fresh oneshot and awaits its answer.
    pub async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, Status> {
        let (tx, rx) = oneshot::channel();
        self.submit(make(tx))?;
        rx.await
            .map_err(|_| Status::unavailable("the node stopped before answering"))
    }

    /// Hands a peer message to the driver; `false` if it was dropped (queue full or stopped).
    pub fn peer_message(&self, input: PeerInput) -> bool {
        self.peer_in.try_send(input).is_ok()
    }

    /// The applied revision, updated by the driver (watchers wait on it).
    pub fn applied(&self) -> watch::Receiver<Revision> {
        self.applied.clone()
    }

    /// `(revision, LockStateMachine::digest)` after every apply while subscribed (the digest
    /// costs O(state), so nothing is computed without a subscriber): replicas at the same
    /// revision must agree. A slow subscriber misses values (`Lagged`), never slows the driver.
    pub fn subscribe_digests(&self) -> broadcast::Receiver<(Revision, u64)> {
        self.digests.subscribe()
    }

    /// The client endpoint of every member known (this replica included: its config file's
    /// and those the log added), by id.
    pub fn endpoints(&self) -> BTreeMap<NodeId, String> {
        self.endpoints.read().expect("endpoints poisoned").clone()
    }

    /// The HTTP base URL of every member known (the config file's and those the log added),
    /// by node id, shared: the HTTP forwarding and the console read it as it changes.
    pub fn http_endpoints(&self) -> HttpEndpoints {
        self.http_endpoints.clone()
    }

    /// The client endpoint of a member.
    pub fn endpoint_of(&self, node: NodeId) -> Option<String> {
        self.endpoints
            .read()
            .expect("endpoints poisoned")
            .get(&node)
            .cloned()
    }

    /// The `not_leader` answer for a leader hint.
    pub fn not_leader(&self, leader: Option<NodeId>) -> Status {
        not_leader_status(&LeaderHint::for_node(leader, |n| self.endpoint_of(n)))
    }
}

/// Transport tests: a handle with no driver behind it, whose peer messages come out of the
/// receiver (requests are refused: their queue is closed).
#[cfg(test)]
pub(crate) fn detached_handle(
    id: NodeId,
    cluster_id: &str,
) -> (DriverHandle, mpsc::Receiver<PeerInput>) {
    let (peer_in, peer_rx) = mpsc::channel(DriverLimits::default().peer_inbound_max);
    let handle = DriverHandle {
        requests: mpsc::channel(1).0,
        peer_in,
        applied: watch::channel(Revision(0)).1,
        digests: broadcast::channel(1).0,
        endpoints: Arc::default(),
        http_endpoints: HttpEndpoints::default(),
        id,
        cluster_id: cluster_id.into(),
    };
    (handle, peer_rx)
}

struct PendingProposal {
    reply: Reply1<Answered>,
    /// How long the node holds a waiting `Acquire` before answering `Queued`.
    hold_ms: Option<u64>,
}

/// Where the driver's group commits are written.
enum Persister<D: Disk + Clone + 'static> {
    /// In the driver's turn.
    Inline(Box<DurableStore<D>>),
    /// On the persist thread (never in the simulation).
    #[cfg_attr(madsim, allow(dead_code))]
    Thread(PersistThread),
}

impl<D: Disk + Clone + 'static> Persister<D> {
    fn new(store: DurableStore<D>, mode: PersistMode) -> Persister<D> {
        match mode {
            PersistMode::Inline => Persister::Inline(Box::new(store)),
            #[cfg(madsim)]
            PersistMode::Thread => Persister::Inline(Box::new(store)),
            #[cfg(not(madsim))]
            PersistMode::Thread => match PersistThread::spawn(store) {
                Ok(thread) => {
                    tracing::info!(
                        "group commits are written by the persist thread ([storage] persist = \"thread\")"
                    );
                    Persister::Thread(thread)
                }
                // `spawn` failed before the store moved to a thread: it cannot be had back,
                // and a replica without its store cannot go on.
                Err(error) => panic!("cannot start the persist thread: {error}"),
            },
        }
    }
}

/// The next event of the persist thread; never, when persisting inline.
async fn persist_event<D: Disk + Clone + 'static>(
    persister: &mut Persister<D>,
) -> Option<PersistEvent> {
    match persister {
        Persister::Inline(_) => std::future::pending().await,
        Persister::Thread(thread) => thread.recv().await,
    }
}

/// The driver task's state.
pub struct Driver<D: Disk + Clone + 'static, C: Clock> {
    node: Node,
    persister: Persister<D>,
    clock: Arc<C>,
    boot: u64,
    handle: DriverHandle,
    requests: mpsc::Receiver<Request>,
    peer_in: mpsc::Receiver<PeerInput>,
    applied_tx: watch::Sender<Revision>,
    peers_out: BTreeMap<NodeId, mpsc::Sender<NodeMessage>>,
    proposals: BTreeMap<ProposalId, PendingProposal>,
    /// Commands taken this turn, proposed together at its end (they share slots).
    to_propose: Vec<(Command, PendingProposal)>,
    reads: BTreeMap<ReadId, Reply1<(Revision, Answer)>>,
    counters: DriverCounters,
    metrics: Arc<Metrics>,
    /// When the namespace series are recomputed next.
    stats_next: Instant,
    /// Simulation only: a group commit written whose fsync the buggify point made slow; `run`
    /// waits this long before it acknowledges the persist (`crate::node::buggify::slow_fsync`).
    #[cfg(madsim)]
    slow_fsync: Option<(paxos::PersistId, Duration)>,
    /// How this start's recovery ended; `durable_state_lost` follows the core.
    storage: StorageCondition,
    /// When the driver was built (the durable-state-lost time runs from it).
    started: std::time::Instant,
    /// Time spent with the durable state lost, fixed once it is re-learned.
    lost_for: Option<std::time::Duration>,
    /// The membership change this leader proposed and the caller waiting for it to be chosen.
    membership_wait: Option<(Membership, Reply1<MembershipChanged>)>,
    /// What the transport follows (`sync_members`): the schedule, whether its first membership
    /// is a guess, and the first slot of the membership that governs the next slot to apply.
    schedule_seen: Option<(Schedule, bool, paxos::Slot)>,
    /// A member told us we were removed (`Input::Removed`): logged once.
    removed_logged: bool,
    dialer: Option<Box<dyn PeerDialer>>,
    member_set: Option<MemberSet>,
    /// The members of this replica's config file (always talked to).
    configured: BTreeSet<NodeId>,
}

/// Why the driver stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("durable storage failed: {0}")]
    Store(#[from] StoreError),
    #[error("the core refused a persist acknowledgement: {0}")]
    Step(#[from] paxos::StepError),
    #[error("the persist thread stopped: {0}")]
    PersistThread(String),
    /// The driver task panicked (a broken invariant); the message is the panic's.
    #[error("the node driver panicked: {0}")]
    Panicked(String),
}

/// Everything needed to build a driver.
pub struct DriverParts<D: Disk + Clone + 'static, C: Clock> {
    pub node: Node,
    pub store: DurableStore<D>,
    /// Where group commits are written (`[storage] persist`).
    pub persist: PersistMode,
    pub clock: Arc<C>,
    pub limits: DriverLimits,
    pub boot: u64,
    pub cluster_id: String,
    /// Client endpoint of every member (for leader hints).
    pub endpoints: BTreeMap<NodeId, String>,
    /// HTTP base URL of every member that has one (inspection forwarding, the console).
    pub http_endpoints: BTreeMap<u64, String>,
    /// Outbound queue of every other member.
    pub peers_out: BTreeMap<NodeId, mpsc::Sender<NodeMessage>>,
    /// Connects to the members the log adds (`None`: only the configured ones are reached).
    pub dialer: Option<Box<dyn PeerDialer>>,
    /// The inbound side's set of members, kept in step with the log.
    pub member_set: Option<MemberSet>,
    /// Where the driver reports fsync latency, Paxos state and lock statistics.
    pub metrics: Arc<Metrics>,
}

impl<D: Disk + Clone + 'static, C: Clock> Driver<D, C> {
    pub fn new(parts: DriverParts<D, C>) -> Driver<D, C> {
        let (req_tx, requests) = mpsc::channel(parts.limits.requests_queued_max.max(1));
        let (peer_tx, peer_in) = mpsc::channel(parts.limits.peer_inbound_max.max(1));
        let revision = parts.node.state().revision();
        let (applied_tx, applied) = watch::channel(revision);
        let handle = DriverHandle {
            requests: req_tx,
            peer_in: peer_tx,
            applied,
            digests: broadcast::channel(DIGESTS_QUEUED_MAX).0,
            endpoints: Arc::new(RwLock::new(parts.endpoints)),
            http_endpoints: HttpEndpoints::new(parts.http_endpoints),
            id: parts.node.replica().id(),
            cluster_id: parts.cluster_id.into(),
        };
        let configured = parts
            .peers_out
            .keys()
            .copied()
            .chain([parts.node.replica().id()])
            .collect();
        Driver {
            node: parts.node,
            persister: Persister::new(parts.store, parts.persist),
            clock: parts.clock,
            boot: parts.boot,
            handle,
            requests,
            peer_in,
            applied_tx,
            peers_out: parts.peers_out,
            proposals: BTreeMap::new(),
            to_propose: Vec::new(),
            reads: BTreeMap::new(),
            counters: DriverCounters::default(),
            metrics: parts.metrics,
            stats_next: Instant::ZERO,
            #[cfg(madsim)]
            slow_fsync: None,
            storage: StorageCondition::default(),
            started: std::time::Instant::now(),
            lost_for: None,
            membership_wait: None,
            schedule_seen: None,
            removed_logged: false,
            dialer: parts.dialer,
            member_set: parts.member_set,
            configured,
        }
    }

    /// Sets the storage condition recovery produced (`/healthz`'s `storage`, the storage
    /// metrics); the lost flag then follows the core.
    pub fn with_storage(mut self, storage: StorageCondition) -> Driver<D, C> {
        self.storage = storage;
        self.report_storage();
        self
    }

    /// The durable-state-lost gauge and time: lost while the core is amnesiac.
    fn report_storage(&mut self) {
        let lost = self.node.replica().is_amnesiac();
        if self.storage.durable_state_lost && !lost && self.lost_for.is_none() {
            self.lost_for = Some(self.started.elapsed());
            tracing::info!(node = %self.handle.id, "durable state re-learned from the other replicas");
        }
        self.storage.durable_state_lost = lost;
        let lost_for = self.lost_for.unwrap_or_else(|| {
            if lost {
                self.started.elapsed()
            } else {
                std::time::Duration::ZERO
            }
        });
        self.metrics.set_durable_state_lost(lost, lost_for);
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn handle(&self) -> DriverHandle {
        self.handle.clone()
    }

    pub fn counters(&self) -> &DriverCounters {
        &self.counters
    }

    /// The store's counters (with a persist thread: as of its last commit or save).
    pub fn store_counters(&self) -> StoreCounters {
        match &self.persister {
            Persister::Inline(store) => store.counters().clone(),
            Persister::Thread(thread) => thread.counters(),
        }
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Runs until `shutdown` turns true (or its sender is dropped) or storage fails.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), DriverError> {
        // The members a restart's log knows of beyond the config file (added by a change).
        self.sync_members();
        loop {
            self.process_actions()?;
            #[cfg(madsim)]
            if let Some((last, stall)) = self.slow_fsync.take() {
                // Blocked in the fsync, as the real driver thread would be; then acknowledged.
                tokio::time::sleep(stall).await;
                self.node
                    .step(self.clock.now(), Input::Persisted { id: last })?;
                continue;
            }
            if *shutdown.borrow() {
                return Ok(());
            }
            let now = self.clock.now();
            let sleep_ms = self.next_wakeup().map(|at| at.ms_since(now));
            let sleep = tokio::time::sleep(Duration::from_millis(sleep_ms.unwrap_or(3_600_000)));
            tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                event = persist_event(&mut self.persister) => self.on_persisted(event)?,
                Some(input) = self.peer_in.recv() => self.on_peer(input),
                Some(request) = self.requests.recv() => self.on_request(request),
                () = sleep => {}
            }
            self.take_persisted()?;
            // Take everything else that is ready too (both channels, so neither starves the
            // other), so that one group commit covers all of it.
            for _ in 0..INPUTS_PER_TURN_MAX {
                let Ok(input) = self.peer_in.try_recv() else {
                    break;
                };
                self.on_peer(input);
            }
            for _ in 0..INPUTS_PER_TURN_MAX {
                let Ok(request) = self.requests.try_recv() else {
                    break;
                };
                self.on_request(request);
            }
            self.propose_taken();
            self.on_time();
        }
    }

    /// One synchronous turn (tests): the inputs, timeouts, then the actions. With a persist
    /// thread it waits for every batch it sent, so that a turn ends where an inline one does.
    pub fn turn(&mut self) -> Result<(), DriverError> {
        self.take_persisted()?;
        while let Ok(request) = self.requests.try_recv() {
            self.on_request(request);
        }
        while let Ok(input) = self.peer_in.try_recv() {
            self.on_peer(input);
        }
        self.propose_taken();
        self.on_time();
        self.process_actions()?;
        while let Persister::Thread(thread) = &mut self.persister {
            if !thread.in_flight() {
                break;
            }
            let event = thread.blocking_recv();
            self.on_persisted(event)?;
            self.process_actions()?;
        }
        Ok(())
    }

    /// Takes every event of the persist thread that is ready.
    fn take_persisted(&mut self) -> Result<(), DriverError> {
        while let Persister::Thread(thread) = &mut self.persister {
            let Some(event) = thread.try_recv() else {
                break;
            };
            self.on_persisted(Some(event))?;
        }
        Ok(())
    }

    /// An event of the persist thread: an acknowledgement is stepped, a save reported, a
    /// failure (or the thread's end) stops the driver.
    fn on_persisted(&mut self, event: Option<PersistEvent>) -> Result<(), DriverError> {
        match event {
            Some(PersistEvent::Persisted {
                last,
                took,
                sync_snapshot,
            }) => {
                self.metrics.observe_fsync(took);
                if sync_snapshot {
                    if let Some(took) = self.store_counters().compaction_last {
                        self.metrics.set_compaction(took);
                    }
                }
                self.node
                    .step(self.clock.now(), Input::Persisted { id: last })?;
                Ok(())
            }
            Some(PersistEvent::Saved(outcome)) => {
                self.report_save(outcome);
                Ok(())
            }
            Some(PersistEvent::Failed(error)) => {
                if is_fsync_error(&error) {
                    self.metrics.inc_fsync_errors();
                }
                Err(error.into())
            }
            None => Err(self.thread_failure()),
        }
    }

    /// Why the persist thread is gone: the write failure it reported (still queued when a
    /// send found the thread gone, or taken before), else its panic.
    fn thread_failure(&mut self) -> DriverError {
        let message = match &mut self.persister {
            Persister::Thread(thread) => {
                while let Some(event) = thread.try_recv() {
                    if let PersistEvent::Failed(error) = event {
                        if is_fsync_error(&error) {
                            self.metrics.inc_fsync_errors();
                        }
                        return error.into();
                    }
                }
                thread.end_reason()
            }
            Persister::Inline(_) => None,
        };
        DriverError::PersistThread(
            message.unwrap_or_else(|| "it ended without reporting why".into()),
        )
    }

    fn next_wakeup(&self) -> Option<Instant> {
        let next = self.node.poll_timeout();
        Some(next.map_or(self.stats_next, |at| at.min(self.stats_next)))
    }

    /// Reports the Paxos role, ballot and slots.
    fn report_paxos(&self) {
        let replica = self.node.replica();
        let ballot = replica.ballot_promised();
        self.metrics.set_paxos(PaxosStats {
            role: self.node.role(),
            ballot_round: ballot.round,
            ballot_node_id: ballot.node.0,
            slot_chosen: replica.slot_chosen().0,
            slot_applied: replica.slot_applied().0,
        });
    }

    /// Reports the membership and, on the leader, each member's lag. Not on every apply (it
    /// rebuilds a labelled family): with the statistics and on a role change.
    fn report_membership(&self) {
        let replica = self.node.replica();
        let (membership, from) = replica.membership_latest();
        let applied = replica.slot_applied().0;
        let lag = membership
            .members()
            .filter(|m| *m != self.handle.id)
            .filter_map(|m| {
                let theirs = replica.peer_applied(m)?;
                Some((m.0, applied.saturating_sub(theirs.0)))
            })
            .collect();
        self.metrics.set_membership(&MembershipStats {
            voters: membership.voters.len(),
            learners: membership.learners.len(),
            config_revision: from.0,
            lag,
        });
    }

    /// Recomputes the namespace series and the session count (every [`STATS_EVERY_MS`]).
    fn report_stats(&mut self, now: Instant) {
        if now < self.stats_next {
            return;
        }
        self.stats_next = now.add_ms(STATS_EVERY_MS);
        let state = self.node.state();
        self.metrics
            .set_namespace_stats(&namespace_stats(state, now));
        self.metrics.set_sessions(state.session_count());
        self.report_paxos();
        self.report_membership();
        self.report_storage();
    }

    fn on_time(&mut self) {
        self.counters.turns += 1;
        let now = self.clock.now();
        if self.node.poll_timeout().is_some_and(|at| at <= now) {
            // A timeout cannot acknowledge a persist, so the only StepError is impossible here.
            let stepped = self.node.step(now, Input::Timeout);
            assert!(stepped.is_ok(), "timeout step failed: {stepped:?}");
        }
        self.take_membership_notice();
        self.sync_members();
        self.report_stats(now);
    }

    fn on_peer(&mut self, input: PeerInput) {
        let now = self.clock.now();
        let stepped = self.node.step(
            now,
            Input::Message {
                from: input.from,
                msg: input.msg,
            },
        );
        assert!(stepped.is_ok(), "message step failed: {stepped:?}");
    }

    fn on_request(&mut self, request: Request) {
        let now = self.clock.now();
        match request {
            Request::Propose {
                command,
                wait_ms,
                reply,
            } => self.on_propose(command, wait_ms, reply),
            Request::KeepAlive {
                session,
                proof,
                reply,
            } => {
                let answer = self.node.keepalive(now, session, &proof);
                let answer = answer.map(|ttl| (ttl, self.node.state().holds_lost(session)));
                let _ = reply.send(answer);
            }
            Request::Read {
                query,
                stale: true,
                reply,
            } => {
                let answer = self.node.read_local(now, &query);
                let _ = reply.send(Ok((self.node.state().revision(), answer)));
            }
            Request::Read {
                query,
                stale: false,
                reply,
            } => match self.node.read(now, query) {
                Ok(read) => {
                    self.reads.insert(read, reply);
                }
                Err(error) => {
                    let _ = reply.send(Err(self.propose_error(&error)));
                }
            },
            Request::Watch {
                from,
                filter,
                limit,
                reply,
            } => {
                let _ = reply.send(self.node.state().watch(from, &filter, limit));
            }
            Request::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Request::ChangeMembership { request, reply } => {
                self.on_change_membership(now, request, reply)
            }
        }
    }

    fn on_change_membership(
        &mut self,
        now: Instant,
        request: ChangeRequest,
        reply: Reply1<MembershipChanged>,
    ) {
        if self.membership_wait.is_some() {
            let pending = ReconfigError::NotChosen("the change asked before".to_owned());
            let _ = reply.send(Err(self.reconfig_error(&pending)));
            return;
        }
        if self.node.role() != RoleKind::Leader {
            let not_leader = ReconfigError::NotLeader {
                leader_hint: self.node.leader(),
            };
            let _ = reply.send(Err(self.reconfig_error(&not_leader)));
            return;
        }
        let replica = self.node.replica();
        let about = match &request.change {
            MemberChange::Add(a) => a.id,
            MemberChange::Promote(id) | MemberChange::Remove(id) => *id,
        };
        let known = Known {
            latest: replica.membership_latest().0,
            applied: replica.slot_applied(),
            member_applied: replica.peer_applied(about),
        };
        let next = match next_membership(&known, &request) {
            Ok(Next::Propose(next)) => *next,
            Ok(Next::AlreadySo) => {
                let (membership, from_slot) = replica.membership_latest();
                tracing::info!(node = %self.handle.id, change = ?request.change,
                    actor = %request.actor, %membership,
                    "membership change asked again: already so, nothing proposed");
                let _ = reply.send(Ok(MembershipChanged {
                    membership: membership.clone(),
                    from_slot,
                }));
                return;
            }
            Err(status) => {
                let _ = reply.send(Err(status));
                return;
            }
        };
        // The stamp gives the change its time in the audit trail (and a revision of its own).
        let next = Membership {
            stamp: Some(now),
            ..next
        };
        tracing::info!(node = %self.handle.id, change = ?request.change, actor = %request.actor,
            reason = %request.reason, force = request.force, to = %next,
            "membership change proposed");
        match self
            .node
            .change_membership(now, next.clone(), request.force)
        {
            Ok(()) => self.membership_wait = Some((next, reply)),
            Err(error) => {
                let _ = reply.send(Err(self.reconfig_error(&error)));
            }
        }
    }

    fn reconfig_error(&self, error: &ReconfigError) -> Status {
        reconfig_status(error, |n| self.handle.endpoint_of(n))
    }

    /// After applies: answers the change the log chose and keeps the transport and the leader
    /// hints in step with every membership the log scheduled.
    fn sync_members(&mut self) {
        let schedule = self.node.replica().schedule();
        if let Some((target, _)) = &self.membership_wait {
            let chosen = schedule.entries().iter().find(|(_, m)| m == target);
            if let Some((from_slot, membership)) = chosen.cloned() {
                let (_, reply) = self.membership_wait.take().expect("just seen");
                tracing::info!(node = %self.handle.id, %membership, from_slot = from_slot.0,
                    "membership change chosen");
                let _ = reply.send(Ok(MembershipChanged {
                    membership,
                    from_slot,
                }));
            } else if self.node.role() != RoleKind::Leader {
                let (_, reply) = self.membership_wait.take().expect("just seen");
                let _ = reply.send(Err(Status::unavailable(
                    "this replica stopped leading before the change was chosen; a later leader \
                     may still choose it: see `picketctl cluster members` before asking again",
                )));
            }
        }
        let replica = self.node.replica();
        let guessed = replica.membership_guessed();
        let applied = replica.slot_applied();
        let governing_from = schedule
            .entries()
            .iter()
            .rev()
            .find(|(from, _)| *from <= applied.next())
            .map_or(paxos::Slot(1), |(from, _)| *from);
        if self
            .schedule_seen
            .as_ref()
            .is_some_and(|(s, g, f)| s == schedule && *g == guessed && *f == governing_from)
        {
            return;
        }
        let schedule = schedule.clone();
        let me = self.handle.id;
        let was_guessed = self.schedule_seen.as_ref().is_some_and(|(_, g, _)| *g);
        if was_guessed && !guessed {
            tracing::info!(node = %me, membership = %schedule.entries()[0].1,
                newest = %schedule.last(), from_slot = schedule.last_from().0,
                "learned the cluster's membership from a peer (the config file's members were \
                 only whom to contact)");
        }
        let Some(dialer) = &mut self.dialer else {
            // Tests without a transport: the members are whom `peers_out` reaches.
            let mut known: BTreeSet<NodeId> = self.configured.clone();
            for (_, m) in schedule.entries() {
                known.extend(m.members());
            }
            if let Some(set) = &self.member_set {
                set.replace(known);
            }
            self.schedule_seen = Some((schedule, guessed, governing_from));
            return;
        };
        // Exactly the members of the memberships that govern the slots from the next one to
        // apply on; while the first membership is a guess, the contacts too (whom to learn from).
        let mut known: BTreeSet<NodeId> = BTreeSet::from([me]);
        #[cfg(madsim)]
        let planted = crate::node::buggify::peers_from_file();
        #[cfg(not(madsim))]
        let planted = false;
        if planted {
            // The planted bug (the code before issue 34): every id of the log and the file
            // is accepted, but only the file's members and those a change added are dialed.
            known.extend(dialer.contacts().keys().copied());
            for (_, m) in schedule.entries() {
                known.extend(m.members());
            }
        }
        for (from, m) in schedule.entries() {
            if planted {
                break;
            }
            let governs_later = schedule
                .entries()
                .iter()
                .find(|(f, _)| f > from)
                .is_none_or(|(next, _)| *next > applied.next());
            if governs_later {
                known.extend(m.members());
            }
        }
        if guessed {
            known.extend(dialer.contacts().keys().copied());
        }
        for &id in &known {
            if id == me {
                continue;
            }
            let added = schedule.entries().iter().any(|(_, m)| m.is_learner(id))
                || !schedule.entries()[0].1.is_voter(id);
            if planted && !dialer.contacts().contains_key(&id) && !added {
                continue;
            }
            // The newest address the log gives; else the config file's (a membership written
            // before every member's address was recorded).
            let address = schedule
                .entries()
                .iter()
                .rev()
                .find_map(|(_, m)| m.address_of(id).cloned())
                .or_else(|| dialer.contacts().get(&id).cloned());
            let Some(address) = address else {
                tracing::warn!(node = %me, peer = %id,
                    "no address known for a member (not in the log, not in the config file): \
                     it is not dialed");
                continue;
            };
            if let std::collections::btree_map::Entry::Vacant(queue) = self.peers_out.entry(id) {
                tracing::info!(node = %me, peer = %id, address = %address.peer,
                    "connecting to a member");
                queue.insert(dialer.dial(&address));
            }
            let endpoint = dialer.endpoint(&address);
            self.handle
                .endpoints
                .write()
                .expect("endpoints poisoned")
                .insert(id, endpoint);
            if let Some(http) = dialer.http_endpoint(&address) {
                self.handle.http_endpoints.insert(id.0, http);
            }
        }
        // Members no membership in effect names any more: their connections end when their
        // queues are dropped.
        self.peers_out.retain(|id, _| {
            let keep = known.contains(id);
            if !keep {
                tracing::info!(node = %me, peer = %id, "no longer a member: disconnecting");
            }
            keep
        });
        if let Some(set) = &self.member_set {
            set.replace(known);
        }
        self.schedule_seen = Some((schedule, guessed, governing_from));
        self.update_view();
    }

    /// Once per start: this replica was removed from the membership (its log or a member said so).
    fn log_removed(&mut self) {
        if self.removed_logged || self.node.role() != RoleKind::Removed {
            return;
        }
        self.removed_logged = true;
        let (membership, from) = self.node.replica().membership_latest();
        tracing::warn!(node = %self.handle.id, newest = %membership, from_slot = from.0,
            leader = ?self.node.leader().map(|l| l.0),
            "REMOVED: this replica is not a member of the cluster's membership any more; it \
             never campaigns and points clients at the leader. Stop it \
             (docs/runbooks/replace-machine.md)");
    }

    /// What this replica's refusals tell a dialer that is not a member (`MemberSet::view`).
    fn update_view(&self) {
        let Some(set) = &self.member_set else {
            return;
        };
        let replica = self.node.replica();
        if replica.membership_guessed() || replica.removed_from().is_some() {
            set.set_view(None);
            return;
        }
        let (membership, from) = replica.membership_latest();
        set.set_view(Some(crate::node::peer::MembershipNotice {
            membership: membership.clone(),
            from_slot: from,
            leader: self.node.leader(),
        }));
    }

    /// A peer refused us as a non-member and told what it knows: if its newest membership is
    /// newer than ours and leaves us out, we were removed (`Input::Removed`).
    fn take_membership_notice(&mut self) {
        let Some((from, told)) = self
            .member_set
            .as_ref()
            .and_then(crate::node::peer::MemberSet::take_notice)
        else {
            return;
        };
        let me = self.handle.id;
        if told.membership.is_member(me) {
            return;
        }
        let before = self.node.replica().removed_from();
        let stepped = self.node.step(
            self.clock.now(),
            Input::Removed {
                from_slot: told.from_slot,
                leader: told.leader,
            },
        );
        assert!(stepped.is_ok(), "removed step failed: {stepped:?}");
        if !self.node.replica().is_removed() {
            return;
        }
        // Reach the leader it named: client hints point there.
        if let Some(dialer) = &self.dialer {
            for address in &told.membership.addresses {
                let endpoint = dialer.endpoint(address);
                self.handle
                    .endpoints
                    .write()
                    .expect("endpoints poisoned")
                    .insert(address.id, endpoint);
            }
        }
        if let (None, Some(from_slot)) = (before, self.node.replica().removed_from()) {
            tracing::info!(node = %me, told_by = %from, membership = %told.membership,
                from_slot = from_slot.0,
                "a member says a newer membership leaves this replica out");
        }
        self.log_removed();
        self.update_view();
    }

    fn on_propose(&mut self, command: Command, wait_ms: u64, reply: Reply1<Answered>) {
        let waits = matches!(command, Command::Acquire { wait: true, .. });
        let hold_ms = (waits && wait_ms > 0).then_some(wait_ms);
        self.to_propose
            .push((command, PendingProposal { reply, hold_ms }));
    }

    /// Proposes the commands taken this turn in one batch (see [`Node::propose_batch`]).
    fn propose_taken(&mut self) {
        if self.to_propose.is_empty() {
            return;
        }
        let (commands, pending): (Vec<(Command, Option<u64>)>, Vec<PendingProposal>) =
            std::mem::take(&mut self.to_propose)
                .into_iter()
                .map(|(command, pending)| ((command, pending.hold_ms), pending))
                .unzip();
        let results = self.node.propose_batch_held(self.clock.now(), commands);
        for (result, pending) in results.into_iter().zip(pending) {
            match result {
                Ok(proposal) => {
                    self.counters.proposals += 1;
                    self.proposals.insert(proposal, pending);
                }
                Err(picket_core::node::NodeProposeError::Replica(error)) => {
                    let _ = pending.reply.send(Err(self.propose_error(&error)));
                }
                Err(error @ picket_core::node::NodeProposeError::LeaderOnlyCommand) => {
                    let status = picket_net::status::node_propose_error_status(&error, |_| None);
                    let _ = pending.reply.send(Err(status));
                }
                Err(
                    error @ (picket_core::node::NodeProposeError::NotYours { .. }
                    | picket_core::node::NodeProposeError::TooManyWaits { .. }),
                ) => {
                    let status = node_propose_error_status(&error, |n| self.handle.endpoint_of(n));
                    let _ = pending.reply.send(Err(status));
                }
            }
        }
    }

    fn propose_error(&self, error: &paxos::ProposeError) -> Status {
        propose_error_status(error, |n| self.handle.endpoint_of(n))
    }

    fn status(&self) -> NodeStatus {
        let replica = self.node.replica();
        let (latest, from) = replica.membership_latest();
        NodeStatus {
            id: self.node.replica().id(),
            role: self.node.role(),
            leader: self.node.leader(),
            ready_leader: self.node.is_ready_leader(),
            revision: self.node.state().revision(),
            slot_applied: self.node.replica().slot_applied().0,
            boot: self.boot,
            counters: self.counters.clone(),
            storage: self.storage.clone(),
            membership: latest.clone(),
            membership_from: from.0,
            members_applied: latest
                .members()
                .filter_map(|id| replica.peer_applied(id).map(|s| (id, s.0)))
                .collect(),
        }
    }

    /// Drains the node's actions; persists are group-committed and acknowledged, which may
    /// release more actions, drained in turn.
    fn process_actions(&mut self) -> Result<(), DriverError> {
        self.poll_snapshot_save()?;
        loop {
            self.free_retired();
            let mut persists = Vec::new();
            while let Some(action) = self.node.poll_action() {
                match action {
                    Action::Persist(persist) => persists.push(persist),
                    Action::Send { to, msg } => self.send(to, msg),
                    Action::Reply {
                        proposal,
                        revision,
                        outcome,
                    } => self.on_reply(proposal, revision, outcome),
                    Action::ProposalFailed {
                        proposal,
                        leader_hint,
                    } => {
                        if let Some(pending) = self.proposals.remove(&proposal) {
                            let _ = pending.reply.send(Err(self.handle.not_leader(leader_hint)));
                        }
                    }
                    Action::ReadReply {
                        read,
                        revision,
                        answer,
                    } => {
                        if let Some(reply) = self.reads.remove(&read) {
                            let _ = reply.send(Ok((revision, answer)));
                        }
                    }
                    Action::ReadFailed { read, leader_hint } => {
                        if let Some(reply) = self.reads.remove(&read) {
                            let _ = reply.send(Err(self.handle.not_leader(leader_hint)));
                        }
                    }
                    Action::RoleChanged { role, leader } => {
                        tracing::info!(node = %self.handle.id, ?role, leader = ?leader.map(|l| l.0),
                            "role changed");
                        if role == RoleKind::Removed {
                            self.log_removed();
                        }
                        self.update_view();
                        self.report_paxos();
                        self.report_membership();
                        self.report_storage();
                    }
                    Action::Applied { revision } => self.on_applied(revision),
                }
            }
            let Some(last) = persists.last().map(|p| p.id) else {
                return Ok(());
            };
            self.counters.persist_ops += persists.len() as u64;
            self.counters.group_commits += 1;
            let started = std::time::Instant::now();
            let sync_snapshot = persists
                .iter()
                .any(|p| p.snapshot.is_some() && !p.snapshot_local);
            let store = match &mut self.persister {
                Persister::Inline(store) => store,
                Persister::Thread(thread) => {
                    // The thread acknowledges it later (`on_persisted`); what the node does
                    // meanwhile forms the next batch.
                    if thread.send(persists, sync_snapshot) {
                        return Ok(());
                    }
                    return Err(self.thread_failure());
                }
            };
            if let Err(error) = store.persist_owned(persists) {
                if is_fsync_error(&error) {
                    self.metrics.inc_fsync_errors();
                }
                return Err(error.into());
            }
            self.metrics.observe_fsync(started.elapsed());
            if sync_snapshot {
                if let Some(took) = store.counters().compaction_last {
                    self.metrics.set_compaction(took);
                }
            }
            #[cfg(madsim)]
            if let Some(stall) = crate::node::buggify::slow_fsync() {
                self.slow_fsync = Some((last, stall));
                return Ok(());
            }
            self.node
                .step(self.clock.now(), Input::Persisted { id: last })?;
        }
    }

    /// Frees the log a compaction cut (`Node::take_retired`) on a thread of its own: ~10^4
    /// slots of commands took 20-110 ms to free in the turn, a stall of every client (issue
    /// 17). If the thread cannot start, it is freed here. (Under madsim: here, since an OS
    /// thread is outside the simulation's schedule.)
    fn free_retired(&mut self) {
        let Some(retired) = self.node.take_retired() else {
            return;
        };
        self.counters.retired_slots_freed += retired.slots() as u64;
        #[cfg(not(madsim))]
        if let Err(error) = std::thread::Builder::new()
            .name("picket-free".into())
            .spawn(move || drop(retired))
        {
            tracing::warn!(%error, "could not start a thread to free the compacted log; \
                freed it in the driver's turn");
        }
        #[cfg(madsim)]
        drop(retired);
    }

    /// Takes the result of a background snapshot save that finished (the store compacts the
    /// log for it) and reports it. A failed save is counted and the replica goes on: its log is
    /// intact and the next compaction point saves a newer snapshot.
    /// (With a persist thread, the thread polls the save and reports it.)
    fn poll_snapshot_save(&mut self) -> Result<(), DriverError> {
        if let Persister::Inline(store) = &mut self.persister {
            if let Some(outcome) = store.poll_saved()? {
                self.report_save(outcome);
            }
        }
        Ok(())
    }

    fn report_save(&self, outcome: SaveOutcome) {
        match outcome {
            SaveOutcome::Saved { took, .. } => self.metrics.set_compaction(took),
            SaveOutcome::Failed { .. } => self.metrics.inc_snapshot_save_failures(),
            SaveOutcome::Superseded { .. } => {}
        }
    }

    fn send(&mut self, to: NodeId, msg: NodeMessage) {
        let Some(queue) = self.peers_out.get(&to) else {
            return;
        };
        match queue.try_send(msg) {
            Ok(()) => self.counters.messages_sent += 1,
            Err(_) => self.counters.messages_dropped_out += 1,
        }
    }

    /// Answers a proposal at the revision the Node stamped on it when it was applied.
    fn on_reply(&mut self, proposal: ProposalId, revision: Revision, outcome: Outcome) {
        let Some(pending) = self.proposals.remove(&proposal) else {
            return;
        };
        let _ = pending.reply.send(Ok(Answered { outcome, revision }));
    }

    fn on_applied(&mut self, revision: Revision) {
        self.sync_members();
        self.applied_tx.send_replace(revision);
        if self.handle.digests.receiver_count() > 0 {
            let state = self.node.state();
            let _ = self.handle.digests.send((state.revision(), state.digest()));
        }
        self.report_paxos();
    }
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
