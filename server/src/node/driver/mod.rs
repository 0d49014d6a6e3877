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
    LostHold, Outcome, Revision, SessionId, SessionProof, WatchError, WatchFilter, WatchPage,
};
use picket_core::node::{Action, Answer, KeepAliveError, Node, Proposal, ProposalId, Query};
use picket_core::paxos::{
    self, MemberAddress, Membership, NodeId, ReadId, ReconfigError, RoleKind, Schedule,
};
use picket_core::time::Instant;
use picket_proto::status::LeaderHint;
use picket_storage::Disk;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::config::PersistMode;
use crate::metrics::{namespace_stats, MembershipStats, Metrics, PaxosStats};
use crate::node::clock::Clock;
use crate::node::durable::{
    is_fsync_error, DurableStore, SaveOutcome, StorageCondition, StoreCounters, StoreError,
};
use crate::node::members::{
    next_membership, ChangeRequest, Known, MemberChange, MembershipChanged, Next,
};
use crate::node::peer::MemberSet;
use crate::node::persist::{PersistEvent, PersistSpawner, PersistThread};
use crate::node::refusal::Refusal;

/// A Paxos message of the node.
pub use picket_core::node::NodeMessage;

mod handle;
mod membership;
mod persister;
mod report;
mod upgrade;

use persister::{persist_event, Persister};

#[cfg(test)]
pub(crate) use handle::detached_handle;
pub use handle::*;

/// Inputs taken from a channel in one turn at most (the rest wait for the next turn).
const INPUTS_PER_TURN_MAX: usize = 4_096;
/// Digests queued for a subscriber of [`DriverHandle::subscribe_digests`] at most.
const DIGESTS_QUEUED_MAX: usize = 1_024;
/// How often the namespace series (longest hold, holds, waiters) and the session count are
/// recomputed from the applied state.
const STATS_EVERY_MS: u64 = 1_000;
/// How long a slow fsync of the simulation's buggify point takes (a disk busy with something
/// else, a RAID controller flushing): `Driver::slow_fsync`.
pub const SLOW_FSYNC: Duration = Duration::from_millis(50);

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
    /// Whom to answer for each proposal the Node took (the Node keeps the rest).
    proposals: BTreeMap<ProposalId, Responder<Answered>>,
    /// Proposals taken this turn, proposed together at its end (they share slots).
    to_propose: Vec<(Proposal, Responder<Answered>)>,
    reads: BTreeMap<ReadId, Responder<(Revision, Answer)>>,
    counters: DriverCounters,
    metrics: Arc<Metrics>,
    /// When the namespace series are recomputed next.
    stats_next: Instant,
    /// Simulation only: a group commit written whose fsync the buggify point made slow; `run`
    /// waits this long before it acknowledges the persist (`Driver::slow_fsync`).
    #[cfg(madsim)]
    slow_fsync: Option<(paxos::PersistId, Duration)>,
    /// How this start's recovery ended; `durable_state_lost` follows the core.
    storage: StorageCondition,
    /// When the driver was built (the durable-state-lost time runs from it).
    started: std::time::Instant,
    /// Time spent with the durable state lost, fixed once it is re-learned.
    lost_for: Option<std::time::Duration>,
    /// The membership change this leader proposed and the caller waiting for it to be chosen.
    membership_wait: Option<(Membership, Responder<MembershipChanged>)>,
    /// What the transport follows (`sync_members`): the schedule, whether its first membership
    /// is a guess, and the first slot of the membership that governs the next slot to apply.
    schedule_seen: Option<(Schedule, bool, paxos::Slot)>,
    /// A member told us we were removed (`Node::removed`): logged once.
    removed_logged: bool,
    dialer: Option<Box<dyn PeerDialer>>,
    member_set: Option<MemberSet>,
    /// The members of this replica's config file (always talked to).
    configured: BTreeSet<NodeId>,
    /// Leader: not before this time does it propose a cluster version step again.
    cluster_version_retry_at: Option<Instant>,
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
    /// The applied log is at a cluster version above the highest this release supports: a
    /// newer release stepped it, and this one cannot know what the log means.
    #[error("the log is at cluster version {version}, and this release ({}) supports cluster versions up to {}: install a release that supports it (docs/upgrades.md); the data directory is kept as it is", crate::version::VERSION, picket_core::locks::CLUSTER_VERSION)]
    ClusterVersionUnsupported { version: u32 },
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
            cluster_version_retry_at: None,
        }
    }

    /// Sets the storage condition recovery produced (`/healthz`'s `storage`, the storage
    /// metrics); the lost flag then follows the core.
    pub fn with_storage(mut self, storage: StorageCondition) -> Driver<D, C> {
        self.storage = storage;
        self.report_storage();
        self
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
        // One shutdown future for the whole loop: a `changed()` made every turn would register
        // and unregister a waiter (two locks) each time.
        let stop = crate::shutdown::stopped(&mut shutdown);
        tokio::pin!(stop);
        loop {
            self.process_actions()?;
            #[cfg(madsim)]
            if let Some((last, stall)) = self.slow_fsync.take() {
                // Blocked in the fsync, as the real driver thread would be; then acknowledged.
                tokio::time::sleep(stall).await;
                self.node.persisted(self.clock.now(), last)?;
                continue;
            }
            let now = self.clock.now();
            let sleep_ms = self.next_wakeup().map(|at| at.ms_since(now));
            let sleep = tokio::time::sleep(Duration::from_millis(sleep_ms.unwrap_or(3_600_000)));
            tokio::select! {
                biased;
                () = &mut stop => return Ok(()),
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
                self.node.persisted(self.clock.now(), last)?;
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

    fn on_time(&mut self) {
        self.counters.turns += 1;
        let now = self.clock.now();
        if self.node.poll_timeout().is_some_and(|at| at <= now) {
            self.node.tick(now);
        }
        self.take_membership_notice();
        self.sync_members();
        if let Some(set) = &self.member_set {
            set.set_cluster_version(self.node.state().cluster_version());
        }
        self.step_cluster_version(now);
        self.report_stats(now);
    }

    fn on_peer(&mut self, input: PeerInput) {
        let now = self.clock.now();
        self.node.receive(now, input.from, input.msg);
    }

    fn on_request(&mut self, request: Request) {
        let now = self.clock.now();
        match request {
            Request::Propose { proposal, reply } => self.to_propose.push((proposal, reply)),
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
                stale,
                reply,
            } => {
                // The planted bug `Faults::reads_local` (picketd never sets it): every read is
                // answered from this replica's own state.
                if stale || self.node.replica().config().faults.reads_local {
                    let answer = self.node.read_local(now, &query);
                    let _ = reply.send(Ok((self.node.state().revision(), answer)));
                } else {
                    match self.node.read(now, query) {
                        Ok(read) => {
                            self.reads.insert(read, reply);
                        }
                        Err(error) => {
                            let _ = reply.send(Err(self.propose_error(&error)));
                        }
                    }
                }
            }
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

    /// Proposes the commands taken this turn in one batch (see [`Node::propose_batch`]).
    fn propose_taken(&mut self) {
        if self.to_propose.is_empty() {
            return;
        }
        let (proposals, replies): (Vec<Proposal>, Vec<Responder<Answered>>) =
            std::mem::take(&mut self.to_propose).into_iter().unzip();
        let results = self.node.propose_batch(self.clock.now(), proposals);
        for (result, reply) in results.into_iter().zip(replies) {
            match result {
                Ok(proposal) => {
                    self.counters.proposals += 1;
                    self.proposals.insert(proposal, reply);
                }
                Err(error) => {
                    let refusal = Refusal::propose(error, |n| self.handle.endpoint_of(n));
                    let _ = reply.send(Err(refusal));
                }
            }
        }
    }

    fn propose_error(&self, error: &paxos::ProposeError) -> Refusal {
        let error = picket_core::node::NodeProposeError::Replica(error.clone());
        Refusal::propose(error, |n| self.handle.endpoint_of(n))
    }

    /// Drains the node's actions; persists are group-committed and acknowledged, which may
    /// release more actions, drained in turn.
    fn process_actions(&mut self) -> Result<(), DriverError> {
        self.check_cluster_version()?;
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
                        if let Some(reply) = self.proposals.remove(&proposal) {
                            let _ = reply.send(Err(self.handle.not_leader(leader_hint)));
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
            if let Some(stall) = self.slow_fsync() {
                self.slow_fsync = Some((last, stall));
                return Ok(());
            }
            self.node.persisted(self.clock.now(), last)?;
        }
    }

    /// Simulation only, the buggify point of the persist path: while the replica's
    /// `Faults::buggify` switch is on, 5% of group commits take a slow fsync of [`SLOW_FSYNC`]
    /// (the driver is stalled that long, as a blocking fsync stalls it, before it acknowledges
    /// the persist). Drawn from the simulator's seeded RNG; counted in `slow_fsyncs`.
    #[cfg(madsim)]
    fn slow_fsync(&mut self) -> Option<Duration> {
        use madsim::rand::Rng;
        let slow = self.node.replica().config().faults.buggify
            && madsim::rand::thread_rng().gen_bool(0.05);
        if slow {
            self.counters.slow_fsyncs += 1;
        }
        slow.then_some(SLOW_FSYNC)
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
        let Some(reply) = self.proposals.remove(&proposal) else {
            return;
        };
        let _ = reply.send(Ok(Answered { outcome, revision }));
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
mod tests;
