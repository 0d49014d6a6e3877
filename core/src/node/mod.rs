//! The `Node`: one Picket replica = the Multi-Paxos [`Replica`] + the [`LockStateMachine`] it
//! applies + leader-local session deadlines, behind one sans-IO interface.
//!
//! - inputs: [`Node::step`] (peer messages, timeouts, "persisted up to X"), [`Node::propose`]
//!   (client commands), [`Node::keepalive`] (leader-local, answered at once, never logged),
//!   [`Node::read`] (linearizable read-index queries) and [`Node::read_local`] (stale reads);
//! - outputs: one FIFO, [`Node::poll_action`], and [`Node::poll_timeout`].
//!
//! Sessions: only the leader keeps deadlines. A keepalive extends the deadline to `now + ttl`; a
//! passed deadline makes the leader propose `ExpireSessions`. A new leader gives every session a
//! full TTL from its takeover plus the time a deposed leader may go on acknowledging keepalives
//! before it notices (`election_timeout_ms_max + heartbeat_ms`), and before answering "unknown session" to a keepalive or
//! proposing any expiry it waits until it has applied everything chosen before its takeover (a
//! read-index barrier), so a lagging new leader never denies a live session.
//!
//! The driver loop (the server does the same with real disks, sockets and clients):
//!
//! ```
//! use picket_core::locks::LockConfig;
//! use picket_core::node::{Action, Node, NodeConfig, NodeDurable};
//! use picket_core::paxos::{self, Input, NodeId};
//! use picket_core::time::Instant;
//!
//! let members = vec![NodeId(1), NodeId(2), NodeId(3)];
//! let cfg = NodeConfig {
//!     replica: paxos::Config::new(NodeId(1), members, 7),
//!     locks: LockConfig::default(),
//!     boot: 1,
//!     compact_every_slots: 10_000,
//!     waits_pending_max: 10_000,
//! };
//! let mut node = Node::new(cfg, NodeDurable::default(), Instant::ZERO).unwrap();
//! let mut durable = NodeDurable::default();
//! let mut now = Instant::ZERO;
//! for _ in 0..10 {
//!     if let Some(deadline) = node.poll_timeout() {
//!         now = now.max(deadline);
//!         node.step(now, Input::Timeout).unwrap();
//!     }
//!     while let Some(action) = node.poll_action() {
//!         match action {
//!             Action::Persist(persist) => {
//!                 // write + fsync, then acknowledge
//!                 durable.apply_persist(&persist);
//!                 node.step(now, Input::Persisted { id: persist.id }).unwrap();
//!             }
//!             Action::Send { .. } => { /* hand to the transport */ }
//!             Action::Reply { .. } | Action::ProposalFailed { .. } => { /* answer the client */ }
//!             Action::ReadReply { .. } | Action::ReadFailed { .. } => { /* answer the reader */ }
//!             Action::RoleChanged { .. } | Action::Applied { .. } => { /* metrics, watchers */ }
//!         }
//!     }
//! }
//! // Alone, it cannot lead: keepalives are refused with a hint (none yet).
//! let proof = picket_core::locks::SessionProof::new(picket_core::locks::SecretHash([7; 32]), "svc");
//! assert!(node.keepalive(now, picket_core::locks::SessionId(1), &proof).is_err());
//! ```

mod leases;
mod query;
mod waits;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use thiserror::Error;

use crate::locks::{
    AcquireReply, Command, LockConfig, LockError, LockSnapshot, LockStateMachine, NotYours,
    Outcome, Reply, Revision, SessionId, SessionProof,
};
use crate::paxos::{
    self, ConfigError, Durable, NodeId, ProposeError, ReadId, Replica, Retired, RoleKind, Slot,
    StepError, Value,
};
use crate::time::Instant;

use leases::Leases;
pub use query::{Answer, Query, OVERDUE_HOLDS_MAX, OVERDUE_HOLDS_PER_NAMESPACE_MAX};
use waits::{waited_key, PendingAnswer, PendingWaits};

/// Expired sessions proposed in one command at most.
const EXPIRE_BATCH_MAX: usize = 1_000;
/// Waiting `Acquire` proposals a node keeps pending by default (see [`NodeConfig::waits_pending_max`]).
pub const WAITS_PENDING_MAX_DEFAULT: usize = 10_000;

/// Identifies a client proposal on this node (unique per `boot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId(pub u64);

/// What the log carries: a lock command and who proposed it, so the proposing node can answer
/// its client when the command is applied. `proposal: ProposalId(0)` is the node's own command
/// (session expiry), answered to nobody.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCommand {
    pub origin: NodeId,
    /// Distinguishes the proposing process's starts, so a command proposed before a restart is
    /// never taken for a new proposal with the same id.
    pub boot: u64,
    pub proposal: ProposalId,
    pub command: Command,
}

/// The state machine's snapshot as the replica keeps, persists and sends it: shared, so the copy
/// the replica keeps for catch-up and the one storage saves in the background cost no clone of
/// the state inside the driver's turn.
pub type NodeSnapshot = Arc<LockSnapshot>;

/// The replica type inside a node.
pub type NodeReplica = Replica<NodeCommand, NodeSnapshot>;
/// Inputs from peers, timers and storage.
pub type NodeInput = paxos::Input<NodeCommand, NodeSnapshot>;
/// What storage restores.
pub type NodeDurable = Durable<NodeCommand, NodeSnapshot>;
/// What storage makes durable ([`Action::Persist`]).
pub type NodePersist = paxos::Persist<NodeCommand, NodeSnapshot>;
/// A message between replicas ([`Action::Send`]).
pub type NodeMessage = paxos::Message<NodeCommand, NodeSnapshot>;

/// Configuration of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub replica: paxos::Config,
    pub locks: LockConfig,
    /// Unique per process start (e.g. a counter kept on disk, or the wall clock at start).
    pub boot: u64,
    /// Compact the log every this many applied slots (0: never). The replicas of a cluster
    /// compact at slots shifted by their rank among the members (`Node::compaction_due`).
    pub compact_every_slots: u64,
    /// Queued `Acquire` proposals this node keeps pending (answered when the wait ends) at
    /// most; beyond it, a waiting `Acquire` is refused with [`NodeProposeError::TooManyWaits`].
    pub waits_pending_max: usize,
}

/// An output, from one FIFO.
// The replica's own actions are large (a Persist carries values); boxing them would add an
// allocation per message on the hot path, and the FIFO is drained at once.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Make durable, then step `Input::Persisted` (the replica's `Persist`, unchanged: storage
    /// takes it as it is).
    Persist(NodePersist),
    /// Hand to the transport.
    Send { to: NodeId, msg: NodeMessage },
    /// The proposal was applied with this outcome, at `revision`: stamped when the answer was
    /// made (the command's own revision; for a wait, the revision that granted it, or that its
    /// position was read at), not when the driver drains the actions, by which time later
    /// commands may have applied.
    Reply {
        proposal: ProposalId,
        revision: Revision,
        outcome: Outcome,
    },
    /// Leadership was lost before the proposal was applied; the client retries (idempotently,
    /// with the same request id) at the leader.
    ProposalFailed {
        proposal: ProposalId,
        leader_hint: Option<NodeId>,
    },
    /// A linearizable read is answered.
    ReadReply {
        read: ReadId,
        revision: Revision,
        answer: Answer,
    },
    ReadFailed {
        read: ReadId,
        leader_hint: Option<NodeId>,
    },
    RoleChanged {
        role: RoleKind,
        leader: Option<NodeId>,
    },
    /// Commands were applied up to this revision (watchers can read new events).
    Applied { revision: Revision },
}

/// Why a proposal was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum NodeProposeError {
    #[error(transparent)]
    Replica(#[from] ProposeError),
    #[error("ExpireSessions, ExpireWaits and SetClusterVersion are proposed by the leader itself, never by a client")]
    LeaderOnlyCommand,
    /// The command is one a later cluster version added, and the cluster is not there yet
    /// (docs/upgrades.md): a replica of an older release could not read it.
    #[error("this command needs cluster version {needs}; the cluster is at {current} (it steps up once every member runs a release that supports {needs}: docs/upgrades.md)")]
    ClusterVersionTooLow { needs: u32, current: u32 },
    #[error("{max} waiting acquires are pending on this node, at most {max}: retry later")]
    TooManyWaits { max: usize },
    /// The command's proof does not own its session, by the applied state: refused before it
    /// reaches the log (a session's secret and principal never change, so the log would refuse
    /// it too). The revision does not move.
    #[error("session {session} is not yours: {why}")]
    NotYours { session: SessionId, why: NotYours },
}

/// Why a keepalive was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum KeepAliveError {
    #[error("not the leader (leader hint: {leader_hint:?}): send keepalives to the leader")]
    NotLeader { leader_hint: Option<NodeId> },
    #[error("new leader still catching up: retry shortly")]
    NotReady,
    #[error(
        "session {session} is unknown (closed, expired or revoked): the client's locks are lost"
    )]
    UnknownSession { session: SessionId },
    #[error(
        "session {session} missed its deadline and is being expired: the client's locks are lost"
    )]
    Expiring { session: SessionId },
    /// The caller did not prove it owns the session (`LockError::SessionNotYours`); nothing
    /// changed, the session's deadline included.
    #[error("session {session} is not yours: {why}")]
    NotYours { session: SessionId, why: NotYours },
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    pub snapshots_installed: u64,
    pub compactions: u64,
    /// `ExpireSessions` commands proposed (each for up to 1,000 sessions).
    pub expiry_proposals: u64,
    pub keepalives_accepted: u64,
    pub proposals_failed: u64,
    /// `ExpireWaits` commands proposed on their own (a deadline passed); not the ones at the
    /// head of a batch that hands keys over.
    pub wait_expiry_proposals: u64,
    /// Waiting proposals answered with a grant.
    pub waits_granted: u64,
    /// Waiting proposals answered `Queued` because their hold time passed (the wait goes on).
    pub waits_answered_queued: u64,
}

/// One Picket replica.
pub struct Node {
    counters: NodeCounters,
    cfg: NodeConfig,
    replica: NodeReplica,
    sm: LockStateMachine,
    slot_applied: Slot,
    role: RoleKind,
    leader: Option<NodeId>,
    /// Leader only: session deadlines.
    leases: Leases,
    /// Leader only: applied everything chosen before the takeover (the barrier read returned).
    ready: bool,
    barrier: Option<ReadId>,
    /// Leader only: when to try proposing expiries again after the replica was busy.
    expiry_retry_at: Option<Instant>,
    /// Our clients' proposals not yet applied, with how long a waiting `Acquire` is held.
    pending: BTreeMap<ProposalId, PendingAnswer>,
    /// Leader only: our clients' `Acquire` proposals applied as `Queued`, answered when the
    /// wait ends (granted, cancelled, expired, session ended) or their hold time passes.
    waits: PendingWaits,
    /// How many of `pending` are waiting `Acquire`s (counted against `waits_pending_max`).
    pending_waiting: usize,
    /// Leader only: when to propose `ExpireWaits` again if the last one was not applied.
    wait_expiry_retry_at: Option<Instant>,
    proposal_next: u64,
    /// The revision at the last invariant check (it never goes back).
    checked_revision: Revision,
    reads: BTreeMap<ReadId, Query>,
    actions: VecDeque<Action>,
    now: Instant,
}

/// What a driver hands the node to propose: the command, and for an `Acquire` that waits how
/// long its answer may wait for the grant before it is answered `Queued` (the wait goes on in
/// the state machine; a retry with the same request id waits again). `None`: until the wait
/// ends. Ignored for every other command. A bare [`Command`] is a proposal with `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub command: Command,
    pub answer_within_ms: Option<u64>,
}

impl From<Command> for Proposal {
    fn from(command: Command) -> Proposal {
        Proposal {
            command,
            answer_within_ms: None,
        }
    }
}

impl Node {
    /// Builds a node from its configuration and what storage restored (a restored snapshot is
    /// installed at once), at the driver's time `now` (see [`Replica::new`]: the first election
    /// timeout runs from it).
    pub fn new(cfg: NodeConfig, durable: NodeDurable, now: Instant) -> Result<Node, ConfigError> {
        let replica = Replica::new(cfg.replica.clone(), durable, now)?;
        // The cluster version an empty log starts at (its first membership's), so that a node
        // that applied nothing yet reports it; set again when slot 1 is applied (the first
        // membership may have been a guess until then).
        let mut sm = LockStateMachine::new(cfg.locks.clone());
        sm.set_faults(cfg.replica.faults);
        sm.begin_cluster_version(replica.schedule().entries()[0].1.cluster_version);
        let mut node = Node {
            counters: NodeCounters::default(),
            sm,
            replica,
            slot_applied: Slot::ZERO,
            role: RoleKind::Follower,
            leader: None,
            leases: Leases::default(),
            ready: false,
            barrier: None,
            expiry_retry_at: None,
            pending: BTreeMap::new(),
            waits: PendingWaits::default(),
            pending_waiting: 0,
            wait_expiry_retry_at: None,
            proposal_next: 1,
            checked_revision: Revision(0),
            reads: BTreeMap::new(),
            actions: VecDeque::new(),
            now,
            cfg,
        };
        node.after_input();
        Ok(node)
    }

    /// Feeds a peer message, a timeout or a persist acknowledgement: one door for a mixed stream
    /// of inputs (the harnesses). A caller that knows what it holds calls [`Node::receive`],
    /// [`Node::tick`], [`Node::removed`] (none can fail) or [`Node::persisted`] (the only input a
    /// caller can get wrong).
    pub fn step(&mut self, now: Instant, input: NodeInput) -> Result<(), StepError> {
        match input {
            paxos::Input::Message { from, msg } => self.receive(now, from, msg),
            paxos::Input::Timeout => self.tick(now),
            paxos::Input::Removed { from_slot, leader } => self.removed(now, from_slot, leader),
            paxos::Input::Persisted { id } => return self.persisted(now, id),
        }
        Ok(())
    }

    /// A peer's Paxos message.
    pub fn receive(&mut self, now: Instant, from: NodeId, msg: NodeMessage) {
        self.now = self.now.max(now);
        self.replica.receive(self.now, from, msg);
        self.after_input();
    }

    /// "Your next deadline passed" ([`Node::poll_timeout`] says when).
    pub fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.replica.tick(self.now);
        self.after_input();
    }

    /// A member told this replica it was removed from `from_slot` on.
    pub fn removed(&mut self, now: Instant, from_slot: paxos::Slot, leader: Option<NodeId>) {
        self.now = self.now.max(now);
        self.replica.removed(self.now, from_slot, leader);
        self.after_input();
    }

    /// The `Persist` with this id (and every one before it) is durable; refused, changing
    /// nothing, for an id never issued.
    pub fn persisted(&mut self, now: Instant, id: paxos::PersistId) -> Result<(), StepError> {
        self.now = self.now.max(now);
        let result = self.replica.persisted(self.now, id);
        self.after_input();
        result
    }

    /// Leader: proposes a change to `membership` ([`paxos::Replica::propose_membership`]: one
    /// change at a time, refused unless a quorum of the new voters answered lately or `force`).
    /// It is in the log once `replica().membership_latest()` shows it; its audit record is
    /// written when it is applied.
    pub fn change_membership(
        &mut self,
        now: Instant,
        membership: paxos::Membership,
        force: bool,
    ) -> Result<(), paxos::ReconfigError> {
        self.now = self.now.max(now);
        let result = self.replica.propose_membership(self.now, membership, force);
        self.after_input();
        result
    }

    /// Proposes a client command (a [`Command`], or a [`Proposal`] that says how long a waiting
    /// `Acquire`'s answer may wait for the grant); its outcome comes back as `Action::Reply`
    /// once applied.
    pub fn propose(
        &mut self,
        now: Instant,
        proposal: impl Into<Proposal>,
    ) -> Result<ProposalId, NodeProposeError> {
        self.propose_batch(now, vec![proposal.into()])
            .pop()
            .expect("one result per command")
    }

    /// Proposes `proposals` in order, letting them share slots: all are queued before the
    /// replica fills its window, so the requests a driver took in one turn become one batch
    /// (one slot, one log record per replica) instead of one slot each. One result per
    /// proposal, in order. A refused proposal changes nothing; when the pending queue has room
    /// for only some, the first ones are taken and the rest refused as `Busy`. The reply of a
    /// waiting `Acquire` is one `Action::Reply` (granted; queued, when its
    /// [`Proposal::answer_within_ms`] passed first; or the error that ended the wait) or one
    /// `Action::ProposalFailed`.
    pub fn propose_batch<P: Into<Proposal>>(
        &mut self,
        now: Instant,
        proposals: Vec<P>,
    ) -> Vec<Result<ProposalId, NodeProposeError>> {
        self.now = self.now.max(now);
        let room = self.replica.proposal_room();
        let max = self.cfg.replica.pending_max;
        let mut results = Vec::with_capacity(proposals.len());
        let mut entries = Vec::new();
        let mut waits_new = 0;
        // Cluster version 1: an `ExpireWaits` goes first (`waits`, "Wait expiry and the
        // hand-offs in the log"); it takes room in the queue like the commands.
        let mut expiry_first = false;
        for proposal in proposals {
            let Proposal {
                command,
                answer_within_ms,
            } = proposal.into();
            if matches!(
                command,
                Command::ExpireSessions { .. }
                    | Command::ExpireWaits
                    | Command::SetClusterVersion { .. }
            ) {
                results.push(Err(NodeProposeError::LeaderOnlyCommand));
                continue;
            }
            let needs = command.cluster_version_needed();
            let current = self.sm.cluster_version();
            if needs > current {
                results.push(Err(NodeProposeError::ClusterVersionTooLow {
                    needs,
                    current,
                }));
                continue;
            }
            let expiry_needed =
                !expiry_first && command.may_hand_over() && self.expire_waits_first(waits_new);
            let used = entries.len() + usize::from(expiry_first) + usize::from(expiry_needed);
            let refused = match &room {
                Err(error) => Some(error.clone()),
                Ok(room) if used >= *room => Some(ProposeError::Busy {
                    pending: max - room + entries.len() + usize::from(expiry_first),
                    max,
                }),
                Ok(_) => None,
            };
            if let Some(error) = refused {
                results.push(Err(error.into()));
                continue;
            }
            // After the leader check: a follower answers `not_leader` whatever the proof, so a
            // client always learns where to go first (the leader then checks the proof again
            // at apply time, against the state as it is then).
            if let Err(refused) = self.check_proof(&command) {
                results.push(Err(refused));
                continue;
            }
            let waits = matches!(command, Command::Acquire { wait: Some(_), .. });
            let waits_max = self.cfg.waits_pending_max;
            if waits && self.waits.len() + self.pending_waiting + waits_new >= waits_max {
                let max = waits_max;
                results.push(Err(NodeProposeError::TooManyWaits { max }));
                continue;
            }
            let proposal = ProposalId(self.proposal_next);
            self.proposal_next += 1;
            waits_new += usize::from(waits);
            expiry_first |= expiry_needed;
            let answer = PendingAnswer {
                within_ms: answer_within_ms,
                waits,
            };
            self.pending.insert(proposal, answer);
            entries.push(NodeCommand {
                origin: self.replica.id(),
                boot: self.cfg.boot,
                proposal,
                command,
            });
            results.push(Ok(proposal));
        }
        self.pending_waiting += waits_new;
        if expiry_first {
            entries.insert(0, self.expire_waits_entry());
        }
        if !entries.is_empty() {
            let queued = self.replica.propose_many(self.now, entries);
            assert!(
                queued.is_ok(),
                "a batch within the room was refused: {queued:?}"
            );
        }
        self.after_input();
        results
    }

    /// A keepalive (leader only, not logged): if `proof` may act on the session (its secret,
    /// and its principal if it has one: the same check as the state machine's), extends the
    /// session's deadline to `now + ttl` and answers the TTL.
    pub fn keepalive(
        &mut self,
        now: Instant,
        session: SessionId,
        proof: &SessionProof,
    ) -> Result<u64, KeepAliveError> {
        self.now = self.now.max(now);
        if self.role != RoleKind::Leader {
            return Err(KeepAliveError::NotLeader {
                leader_hint: self.leader,
            });
        }
        if self.leases.is_expiring(session) {
            return Err(KeepAliveError::Expiring { session });
        }
        let Some(info) = self.sm.session(session) else {
            return Err(if self.ready {
                KeepAliveError::UnknownSession { session }
            } else {
                KeepAliveError::NotReady
            });
        };
        match self.sm.check_session_proof(session, proof) {
            Ok(()) => {}
            Err(LockError::SessionNotYours { session, why }) => {
                return Err(KeepAliveError::NotYours { session, why })
            }
            Err(other) => panic!("a live session's proof check answered {other:?}"),
        }
        self.leases.extend(session, self.now.add_ms(info.ttl_ms));
        self.counters.keepalives_accepted += 1;
        Ok(info.ttl_ms)
    }

    /// Refuses a command whose proof does not own its (applied, live) session. A session not
    /// applied yet, or gone, is left to the log to answer.
    fn check_proof(&self, command: &Command) -> Result<(), NodeProposeError> {
        let (session, proof) = match command {
            Command::CloseSession { session, proof }
            | Command::Acquire { session, proof, .. }
            | Command::CancelWait { session, proof, .. }
            | Command::Release { session, proof, .. } => (*session, proof),
            _ => return Ok(()),
        };
        match self.sm.check_session_proof(session, proof) {
            Err(LockError::SessionNotYours { session, why }) => {
                Err(NodeProposeError::NotYours { session, why })
            }
            Ok(()) | Err(_) => Ok(()),
        }
    }

    /// Starts a linearizable read; the answer comes back as `Action::ReadReply`.
    pub fn read(&mut self, now: Instant, query: Query) -> Result<ReadId, ProposeError> {
        self.now = self.now.max(now);
        let result = self.replica.read_index(self.now);
        if let Ok(read) = result {
            self.reads.insert(read, query);
        }
        self.after_input();
        result
    }

    /// Answers from this replica's state as applied so far (may be stale on a follower).
    pub fn read_local(&self, now: Instant, query: &Query) -> Answer {
        query::answer(&self.sm, &self.leases, now, query)
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The log the last compaction cut (`Replica::take_retired`): ~10^4 slots of commands whose
    /// free would stall the turn by tens of ms. A driver frees it on another thread; if nobody
    /// takes it, the next compaction frees it.
    pub fn take_retired(&mut self) -> Option<Retired<NodeCommand>> {
        self.replica.take_retired()
    }

    /// When to step `Input::Timeout` next: the replica's timers, and on a ready leader the
    /// next session or wait deadline (or a retry of a refused expiry), and the end of the
    /// earliest held wait's hold time. Changes after every input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = self.replica.poll_timeout();
        let earliest = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.role == RoleKind::Leader && self.ready {
            let expiry = match self.expiry_retry_at {
                Some(retry) => Some(retry),
                None => self.leases.next_deadline(),
            };
            let wait_expiry = match self.wait_expiry_retry_at {
                Some(retry) => Some(retry),
                None => self.wait_expiry_due(),
            };
            next = earliest(earliest(next, expiry), wait_expiry);
        }
        earliest(next, self.waits.hold_end_next())
    }

    /// Waiting `Acquire` proposals this node holds (answered when their wait ends).
    pub fn waits_pending(&self) -> usize {
        self.waits.len()
    }

    pub fn counters(&self) -> &NodeCounters {
        &self.counters
    }

    pub fn state(&self) -> &LockStateMachine {
        &self.sm
    }

    pub fn replica(&self) -> &NodeReplica {
        &self.replica
    }

    pub fn role(&self) -> RoleKind {
        self.role
    }

    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    /// Leader and caught up: keepalives and expiries are served.
    pub fn is_ready_leader(&self) -> bool {
        self.role == RoleKind::Leader && self.ready
    }

    /// Sessions whose deadline this node keeps (0 unless leader).
    pub fn sessions_tracked(&self) -> usize {
        self.leases.len()
    }

    /// The session's remaining TTL as this node (the leader) sees it.
    pub fn session_remaining_ms(&self, now: Instant, session: SessionId) -> Option<u64> {
        self.leases.remaining_ms(session, now)
    }

    // ---- internals ----

    /// Drains the replica, then does the leader's housekeeping.
    fn after_input(&mut self) {
        self.drain_replica();
        if self.role == RoleKind::Leader {
            self.start_barrier();
            self.propose_expiries();
            self.propose_wait_expiries();
        }
        self.answer_held_waits();
        self.compact_if_due();
        self.drain_replica();
        self.check_invariants();
    }

    /// Checked after every input, as the replica checks its own. Cheap checks are `assert!`
    /// (on in release builds); O(n) ones are `debug_assert!`.
    fn check_invariants(&mut self) {
        assert_eq!(
            self.slot_applied,
            self.replica.slot_applied(),
            "the node applied another slot than its replica"
        );
        let revision = self.sm.revision();
        assert!(
            revision >= self.checked_revision,
            "revision went backwards: {revision} < {}",
            self.checked_revision
        );
        self.checked_revision = revision;
        assert!(
            self.waits.len() + self.pending_waiting <= self.cfg.waits_pending_max,
            "{} held and {} pending waits over the bound {}",
            self.waits.len(),
            self.pending_waiting,
            self.cfg.waits_pending_max
        );
        assert!(
            self.pending_waiting <= self.pending.len(),
            "{} waiting of {} pending proposals",
            self.pending_waiting,
            self.pending.len()
        );
        if let Some((last, _)) = self.pending.last_key_value() {
            assert!(
                last.0 < self.proposal_next,
                "pending proposal {last:?} was never issued (next {})",
                self.proposal_next
            );
        }
        if self.role == RoleKind::Leader {
            assert!(
                !(self.ready && self.barrier.is_some()),
                "a ready leader still waits for its barrier"
            );
        } else {
            // Only a leader proposes, keeps deadlines and holds waits: stepping down fails
            // its proposals and waits and forgets its leases.
            let role = self.role;
            assert!(self.pending.is_empty(), "a {role:?} has pending proposals");
            assert_eq!(self.waits.len(), 0, "a {role:?} holds waiting proposals");
            assert_eq!(self.pending_waiting, 0, "a {role:?} has waiting proposals");
            assert_eq!(self.leases.len(), 0, "a {role:?} keeps session deadlines");
            assert!(
                !self.ready && self.barrier.is_none(),
                "a {role:?} is ready or waits for a barrier"
            );
            assert!(
                self.expiry_retry_at.is_none() && self.wait_expiry_retry_at.is_none(),
                "a {role:?} plans to propose expiries"
            );
        }
        debug_assert_eq!(
            self.pending.values().filter(|h| h.waits).count(),
            self.pending_waiting,
            "waiting proposals miscounted"
        );
        debug_assert!(
            self.waits
                .proposals()
                .all(|p| p.0 < self.proposal_next && !self.pending.contains_key(&p)),
            "a held wait is unknown or still pending"
        );
    }

    fn drain_replica(&mut self) {
        while let Some(action) = self.replica.poll_action() {
            match action {
                paxos::Action::Persist(persist) => self.actions.push_back(Action::Persist(persist)),
                paxos::Action::Send { to, msg } => self.actions.push_back(Action::Send { to, msg }),
                paxos::Action::Apply { slot, value } => self.on_apply(slot, value),
                paxos::Action::InstallSnapshot { slot, snapshot } => {
                    self.on_install_snapshot(slot, snapshot)
                }
                paxos::Action::ReadReady { id, .. } => self.on_read_ready(id),
                paxos::Action::ReadFailed { id } => self.on_read_failed(id),
                paxos::Action::RoleChanged { role, leader, .. } => {
                    self.on_role_changed(role, leader)
                }
            }
        }
    }

    fn on_apply(&mut self, slot: Slot, value: Value<NodeCommand>) {
        assert_eq!(slot, self.slot_applied.next(), "apply out of order");
        if slot == Slot(1) {
            // The log's first slot: the cluster version it starts at is its first
            // membership's (the same on every replica: the first membership is in the log).
            let first = &self.replica.schedule().entries()[0].1;
            self.sm.begin_cluster_version(first.cluster_version);
        }
        self.slot_applied = slot;
        let (stamp, commands) = match value {
            Value::Batch { stamp, commands } => (stamp, commands),
            Value::Reconfig(m) => {
                // The audit shows the members (Display leaves addresses, actor and reason out)
                // and what the change did.
                let roles = m
                    .actor_roles
                    .iter()
                    .filter_map(|r| crate::locks::Role::from_name(r))
                    .collect();
                let membership = if m.change.is_empty() {
                    m.to_string()
                } else {
                    format!("{m} ({})", m.change)
                };
                self.sm
                    .record_membership_change(m.stamp, &m.actor, roles, &m.reason, membership);
                self.actions.push_back(Action::Applied {
                    revision: self.sm.revision(),
                });
                return;
            }
            Value::Noop => return,
        };
        let id = self.replica.id();
        // A planted bug may apply at the local clock (`Faults::apply_with_local_clock`).
        let stamp = self
            .replica
            .config()
            .faults
            .apply_stamp(id, stamp, self.now);
        for entry in commands {
            let ended = ended_session(&entry.command);
            let waited = waited_key(&entry.command);
            let expires_waits = matches!(entry.command, Command::ExpireWaits);
            let outcome = self.sm.apply(stamp, entry.command);
            if expires_waits && self.wait_expiry_retry_at.is_some() {
                self.wait_expiry_retry_at = match outcome {
                    // Deadlines may remain passed (a full batch): propose again at once.
                    Ok(Reply::WaitsExpired { removed }) if removed > 0 => None,
                    // Nothing was due at its log time: look again after a heartbeat, not only
                    // after the guard's election timeout.
                    _ => Some(self.now.add_ms(self.replica.config().heartbeat_ms)),
                };
            }
            if self.role == RoleKind::Leader {
                self.track_sessions(ended, &outcome);
            }
            self.answer_ended_waits();
            let ours = entry.origin == id && entry.boot == self.cfg.boot;
            let Some(answer) = ours.then(|| self.pending.remove(&entry.proposal)).flatten() else {
                continue;
            };
            self.pending_waiting -= usize::from(answer.waits);
            let queued = matches!(outcome, Ok(Reply::Acquire(AcquireReply::Queued { .. })));
            match waited {
                Some(key) if queued => {
                    let hold_end = answer.within_ms.map(|ms| self.now.add_ms(ms));
                    self.waits.insert(entry.proposal, key, hold_end);
                }
                _ => self.actions.push_back(Action::Reply {
                    proposal: entry.proposal,
                    revision: self.sm.revision(),
                    outcome,
                }),
            }
        }
        self.actions.push_back(Action::Applied {
            revision: self.sm.revision(),
        });
    }

    /// Keeps the leader's deadlines in step with the sessions the log creates and ends.
    fn track_sessions(&mut self, closed: Option<SessionId>, outcome: &Outcome) {
        match outcome {
            Ok(Reply::SessionCreated { session, ttl_ms }) => {
                self.leases.extend(*session, self.now.add_ms(*ttl_ms));
            }
            Ok(Reply::SessionClosed { .. }) => {
                if let Some(session) = closed {
                    self.leases.remove(session);
                }
            }
            Ok(Reply::SessionsExpired { expired }) => {
                expired.iter().for_each(|s| self.leases.remove(*s));
            }
            Ok(Reply::ForceReleaseApproved {
                session_revoked: Some(session),
                ..
            }) => self.leases.remove(*session),
            _ => {}
        }
    }

    fn on_install_snapshot(&mut self, slot: Slot, snapshot: NodeSnapshot) {
        // Snapshots are made by `LockStateMachine::snapshot` on a peer: one that does not
        // restore means the replicas diverged, which must stop this node, not be papered over.
        self.sm = match LockStateMachine::restore(Arc::unwrap_or_clone(snapshot)) {
            Ok(sm) => sm,
            Err(error) => panic!("snapshot at slot {slot} does not restore: {error}"),
        };
        self.sm.set_faults(self.replica.config().faults);
        self.slot_applied = slot;
        self.counters.snapshots_installed += 1;
        self.recheck_waits();
        if self.role == RoleKind::Leader {
            self.grant_grace_to_untracked();
        }
        self.actions.push_back(Action::Applied {
            revision: self.sm.revision(),
        });
    }

    fn on_read_ready(&mut self, read: ReadId) {
        if self.barrier == Some(read) {
            self.barrier = None;
            self.ready = true;
            self.grant_grace_to_untracked();
            return;
        }
        if let Some(query) = self.reads.remove(&read) {
            let answer = query::answer(&self.sm, &self.leases, self.now, &query);
            self.actions.push_back(Action::ReadReply {
                read,
                revision: self.sm.revision(),
                answer,
            });
        }
    }

    fn on_read_failed(&mut self, read: ReadId) {
        if self.barrier == Some(read) {
            self.barrier = None;
            return;
        }
        if self.reads.remove(&read).is_some() {
            self.actions.push_back(Action::ReadFailed {
                read,
                leader_hint: self.leader,
            });
        }
    }

    fn on_role_changed(&mut self, role: RoleKind, leader: Option<NodeId>) {
        let was_leader = self.role == RoleKind::Leader;
        self.role = role;
        self.leader = leader;
        self.actions.push_back(Action::RoleChanged { role, leader });
        if role == RoleKind::Leader && !was_leader {
            self.become_leader();
        } else if role != RoleKind::Leader && was_leader {
            self.stop_leading();
        }
    }

    /// Takeover: every session known gets a full TTL from now; expiries wait for the barrier.
    fn become_leader(&mut self) {
        self.leases.clear();
        self.ready = false;
        self.barrier = None;
        self.expiry_retry_at = None;
        self.grant_grace_to_untracked();
    }

    fn stop_leading(&mut self) {
        self.leases.clear();
        self.ready = false;
        self.barrier = None;
        self.expiry_retry_at = None;
        self.wait_expiry_retry_at = None;
        let leader_hint = self.leader;
        // A deposed leader no longer learns of grants in time: its held waits fail like its
        // pending proposals, and the client's retry (same request id) at the new leader answers
        // the wait's state there.
        let waits = std::mem::take(&mut self.waits).into_proposals();
        self.pending_waiting = 0;
        let pending = std::mem::take(&mut self.pending).into_keys();
        for proposal in pending.chain(waits) {
            self.counters.proposals_failed += 1;
            self.actions.push_back(Action::ProposalFailed {
                proposal,
                leader_hint,
            });
        }
    }

    /// How long after our takeover a deposed leader may still acknowledge keepalives: it
    /// steps down once it has not heard a quorum for `election_timeout_ms_max`, checked at
    /// every heartbeat tick, and the quorum that elected us stopped answering it before we
    /// took over. A keepalive it acknowledged was sent before `takeover + this`, and the client
    /// counts its lease from the send, so the takeover grace adds this to the TTL.
    fn deposed_leader_ack_ms(&self) -> u64 {
        let cfg = self.replica.config();
        cfg.election_timeout_ms_max + cfg.heartbeat_ms
    }

    /// Gives every live session without a deadline a full TTL from now, plus the time a
    /// deposed leader may still have acknowledged its keepalives
    /// ([`Self::deposed_leader_ack_ms`]).
    fn grant_grace_to_untracked(&mut self) {
        let now = self.now.add_ms(self.deposed_leader_ack_ms());
        let untracked: Vec<(SessionId, u64)> = self
            .sm
            .sessions()
            .filter(|s| !self.leases.has(s.id) && !self.leases.is_expiring(s.id))
            .map(|s| (s.id, s.ttl_ms))
            .collect();
        for (session, ttl_ms) in untracked {
            self.leases.extend(session, now.add_ms(ttl_ms));
        }
    }

    fn start_barrier(&mut self) {
        if self.ready || self.barrier.is_some() {
            return;
        }
        if let Ok(read) = self.replica.read_index(self.now) {
            self.barrier = Some(read);
        }
    }

    /// Proposes stepping the cluster version up to `version` (the driver, once every member
    /// told it that it supports `version`; docs/upgrades.md). Only a ready leader proposes it,
    /// and only a version above the applied one and supported here: otherwise, or when the
    /// replica has no room, it is refused (the driver tries again later). The outcome is not
    /// answered: the driver sees the applied state's version rise.
    pub fn propose_cluster_version(
        &mut self,
        now: Instant,
        version: u32,
        reason: String,
    ) -> Result<(), ProposeError> {
        self.now = self.now.max(now);
        let current = self.sm.cluster_version();
        if self.role != RoleKind::Leader || !self.ready || version <= current {
            return Err(ProposeError::NotLeader {
                leader_hint: self.replica.leader(),
            });
        }
        assert!(
            version <= crate::locks::CLUSTER_VERSION,
            "cluster version {version} proposed by a release that supports up to {}",
            crate::locks::CLUSTER_VERSION
        );
        let entries = vec![NodeCommand {
            origin: self.replica.id(),
            boot: self.cfg.boot,
            proposal: ProposalId(0),
            command: Command::SetClusterVersion { version, reason },
        }];
        self.replica.propose_many(self.now, entries)?;
        self.drain_replica();
        Ok(())
    }

    fn propose_expiries(&mut self) {
        if !self.ready || self.expiry_retry_at.is_some_and(|t| t > self.now) {
            return;
        }
        self.expiry_retry_at = None;
        let due = self.leases.due(self.now, EXPIRE_BATCH_MAX);
        if due.is_empty() {
            return;
        }
        let entry = |command| NodeCommand {
            origin: self.replica.id(),
            boot: self.cfg.boot,
            proposal: ProposalId(0),
            command,
        };
        // Ending the sessions hands their keys to the next waiters: at cluster version 1 an
        // `ExpireWaits` goes first (`waits`, "Wait expiry and the hand-offs in the log"); from 2
        // on, the state machine removes the due waits as it hands each key over.
        let mut entries = vec![entry(Command::ExpireSessions {
            sessions: due.clone(),
        })];
        if self.expire_waits_first(0) {
            entries.insert(0, self.expire_waits_entry());
        }
        match self.replica.propose_many(self.now, entries) {
            Ok(()) => {
                self.counters.expiry_proposals += 1;
                self.leases.mark_expiring(&due);
            }
            Err(_) => {
                self.expiry_retry_at = Some(self.now.add_ms(self.cfg.replica.heartbeat_ms));
            }
        }
    }

    fn compaction_due(&self) -> bool {
        let members = &self.cfg.replica.members;
        let id = self.cfg.replica.id;
        let rank = members.iter().filter(|m| **m < id).count();
        compaction_due(
            self.cfg.compact_every_slots,
            (rank, members.len()),
            self.replica.slot_snapshot(),
            self.slot_applied,
        )
    }

    /// Compacts on the grid (`compaction_due`), or when the replica wants a snapshot now
    /// (`Replica::snapshot_wanted`: recovery from disk loss, a membership change in effect).
    fn compact_if_due(&mut self) {
        if !self.compaction_due() && !self.replica.snapshot_wanted() {
            return;
        }
        let compacted = self
            .replica
            .compact(self.slot_applied, Arc::new(self.sm.snapshot()));
        assert!(
            compacted.is_ok(),
            "compaction at applied slot: {compacted:?}"
        );
        self.counters.compactions += 1;
    }
}

/// Whether a replica whose last snapshot is at `snapshot` compacts at `applied`: when the applied
/// slot crosses a line of a grid with a step of `every` slots (0: never), shifted by `rank /
/// members` of a step (rank: how many members have a lower id), and at least half a step after
/// the last snapshot. The replicas apply the same slots at about the same moment: without the
/// shift all of them would stop for their compaction together, the leader and both followers of
/// a quorum.
fn compaction_due(
    every: u64,
    (rank, members): (usize, usize),
    snapshot: Slot,
    applied: Slot,
) -> bool {
    if every == 0 {
        return false;
    }
    let shift = every / members.max(1) as u64 * rank as u64;
    let line = |slot: Slot| slot.0.saturating_add(shift) / every;
    applied.0 >= snapshot.0.saturating_add(every / 2) && line(applied) > line(snapshot)
}

/// The session a command ends, if it is a close.
fn ended_session(command: &Command) -> Option<SessionId> {
    match command {
        Command::CloseSession { session, .. } => Some(*session),
        _ => None,
    }
}

#[cfg(test)]
mod compaction_tests {
    use super::*;

    /// The slots at which a replica of `rank` compacts while the applied slot moves by `step`.
    fn compactions(every: u64, rank: usize, step: u64, until: u64) -> Vec<u64> {
        let mut snapshot = Slot::ZERO;
        let mut out = Vec::new();
        let mut applied = 0;
        while applied < until {
            applied += step;
            if compaction_due(every, (rank, 3), snapshot, Slot(applied)) {
                snapshot = Slot(applied);
                out.push(applied);
            }
        }
        out
    }

    #[test]
    fn the_replicas_of_a_cluster_compact_at_different_slots_every_step() {
        assert_eq!(compactions(300, 0, 1, 1_000), [300, 600, 900]);
        assert_eq!(compactions(300, 1, 1, 1_000), [200, 500, 800]);
        assert_eq!(compactions(300, 2, 1, 1_000), [150, 400, 700, 1_000]);
        // Applied in jumps (a batch of slots at once): still one compaction per step.
        assert_eq!(compactions(300, 1, 7, 1_000), [203, 504, 805]);
    }

    #[test]
    fn a_snapshot_just_below_a_line_is_not_followed_by_a_compaction_at_once() {
        // A snapshot installed from a peer at 299: the line at 300 is crossed half a step later.
        assert!(!compaction_due(300, (0, 3), Slot(299), Slot(300)));
        assert!(compaction_due(300, (0, 3), Slot(299), Slot(449)));
        assert!(!compaction_due(0, (0, 3), Slot(0), Slot(1_000_000)));
    }
}

#[cfg(test)]
mod invariant_tests {
    use super::*;

    fn follower() -> Node {
        let members = vec![NodeId(1), NodeId(2), NodeId(3)];
        let cfg = NodeConfig {
            replica: paxos::Config::new(NodeId(1), members, 7),
            locks: LockConfig::default(),
            boot: 1,
            compact_every_slots: 0,
            waits_pending_max: 4,
        };
        Node::new(cfg, NodeDurable::default(), Instant::ZERO).expect("a valid configuration")
    }

    #[test]
    fn a_fresh_node_holds_its_invariants() {
        follower().check_invariants();
    }

    #[test]
    #[should_panic(expected = "keeps session deadlines")]
    fn a_follower_with_a_lease_is_caught() {
        let mut node = follower();
        node.leases
            .extend(SessionId(3), Instant::ZERO.add_ms(1_000));
        node.check_invariants();
    }

    #[test]
    #[should_panic(expected = "over the bound")]
    fn waits_over_the_bound_are_caught() {
        let mut node = follower();
        node.pending_waiting = 5;
        node.check_invariants();
    }

    #[test]
    #[should_panic(expected = "was never issued")]
    fn a_pending_proposal_never_issued_is_caught() {
        let mut node = follower();
        let answer = PendingAnswer {
            within_ms: None,
            waits: false,
        };
        node.pending.insert(ProposalId(node.proposal_next), answer);
        node.check_invariants();
    }

    #[test]
    #[should_panic(expected = "revision went backwards")]
    fn a_revision_going_back_is_caught() {
        let mut node = follower();
        node.checked_revision = Revision(9);
        node.check_invariants();
    }
}
