//! The replica: one object, one entry (`step`, `propose`, `read_index`, `compact`), one exit
//! (`poll_action`, `poll_timeout`). The handlers live in the role modules; this file holds the
//! state, the dispatch, the persist-before-reply machinery and the invariants.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::config::{Config, ConfigError};
use super::io::{
    Action, CompactError, Durable, Input, Persist, PersistId, ProposeError, ReconfigError,
    RoleKind, StepError,
};
use super::leader::LeaderState;
use super::learner::Retired;
use super::membership::{Membership, Schedule};
use super::message::{AcceptedEntry, Message};
use super::quorum::Votes;
use crate::time::Instant;

/// Counters of dropped input, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Peer messages that arrived too late to matter (old ballot, finished round, ...).
    pub dropped_stale: u64,
    /// Peer messages that broke the protocol's shape (unknown sender, bad ranges, ...).
    pub dropped_malformed: u64,
    /// Votes (prepare, accept, heartbeat) ignored because this replica is amnesiac.
    pub dropped_amnesiac: u64,
    pub nacks_sent: u64,
    pub elections_started: u64,
    pub catchups_requested: u64,
    /// Prepares refused, and campaigns put off, because a read lease we granted still runs.
    pub lease_refusals: u64,
    /// Linearizable reads confirmed by the leader's read lease (no heartbeat round of their own).
    pub reads_by_lease: u64,
}

/// What one promiser reported: ((slot applied, slot snapshot), accepted entries).
pub(super) type PromiseReport<C> = ((Slot, Slot), Vec<AcceptedEntry<C>>);

/// The role-specific state. Transitions are the `become_*` functions.
#[derive(Debug)]
pub(super) enum Role<C> {
    Follower,
    PreCandidate {
        round: u64,
        granted: Votes,
    },
    Candidate {
        ballot: Ballot,
        /// Per promiser: ((slot applied, slot snapshot), accepted entries).
        promises: BTreeMap<NodeId, PromiseReport<C>>,
    },
    Leader(Box<LeaderState<C>>),
    Recovering {
        nonce: u64,
        /// Round 2 (fence) once true; round 1 (which incarnation) before.
        fencing: bool,
        /// Round 1: incarnation known per peer; round 2: promised round per peer.
        replies: BTreeMap<NodeId, u64>,
        /// Round 1: whom this attempt asked (more are asked as our snapshot rises and the
        /// memberships after it name them).
        asked: Votes,
    },
}

/// A Multi-Paxos replica over commands `C` and state-machine snapshots `S`.
pub struct Replica<C, S> {
    pub(super) cfg: Config,
    /// Which membership governs which slots; complete up to `applied + α` (every change
    /// chosen at or below `applied` is in it).
    pub(super) schedule: Schedule,
    /// The first membership in `schedule` is a guess from `Config::members` (the contacts of a
    /// `joining` replica that has recorded no membership yet): not to be acted on. While it is, the
    /// replica neither campaigns nor recovers; it asks its contacts to catch it up, and the
    /// first answer that carries the membership (a snapshot's schedule, or the schedule of a
    /// replica that holds the log from slot 1) replaces the guess.
    pub(super) membership_guessed: bool,
    /// The first membership in `schedule` is not known: this replica recorded none, and it
    /// stands in from `Config::members` (a `joining` replica's contacts, or the configured
    /// members of a replica that lost its disk and came back with `--rejoin`). The voters may
    /// be right, but the cluster version the log starts at (`Membership::cluster_version`)
    /// and the addresses are not known. Until a peer's catch-up says them (as for
    /// `membership_guessed`), slot 1 is not applied (applied at the wrong cluster version,
    /// the log would give another state: simulation seed 1017) and the guess is not passed on
    /// in a catch-up reply.
    pub(super) first_membership_unknown: bool,
    /// A member told us a membership from this slot on leaves us out (`Input::Removed`), and
    /// we knew of none so new: we were removed. Never campaigns while set.
    pub(super) removed: Option<Slot>,
    /// A membership this replica knew of named it (since it started): with none that governs
    /// a slot from the next one to apply on naming it any more, it was removed.
    pub(super) was_member: bool,
    /// Everyone but us in a membership that governs a slot in `applied + 1 ..= applied + α`:
    /// whom broadcasts go to (kept by `refresh_peers`).
    pub(super) peers: Vec<NodeId>,
    pub(super) rng: ChaCha8Rng,
    pub(super) now: Instant,

    // Acceptor (in memory; storage lags until `Persisted`).
    /// Never decreases (checked after every step).
    pub(super) promised: Ballot,
    /// Accepted (ballot, value) per slot above the snapshot; a slot's ballot never decreases.
    pub(super) accepted: BTreeMap<Slot, (Ballot, Value<C>)>,
    /// Highest ballot in `accepted`; never above `promised`.
    pub(super) accepted_ballot_max: Ballot,
    /// Durable state was lost: no promise, accept or heartbeat ack until recovered.
    pub(super) amnesiac: bool,
    /// Our incarnation (raised by each recovery from disk loss); never decreases.
    pub(super) incarnation: u64,
    /// Lowest incarnation of each peer whose ballot-bearing messages we still take.
    pub(super) peer_incarnations: BTreeMap<NodeId, u64>,
    /// While amnesiac: a slot a peer applied (so chosen), and that peer, which our durable
    /// snapshot must reach before recovery fences (`recovery.rs`). Kept across recovery
    /// attempts; gone once reached.
    pub(super) recovery_target: Option<(Slot, NodeId)>,

    // Persist-before-reply.
    pub(super) persist_issued: PersistId,
    pub(super) persist_acked: PersistId,
    /// Messages waiting for the persist they depend on, in persist order.
    pub(super) held: VecDeque<(PersistId, NodeId, Message<C, S>)>,

    // Learner.
    /// Chosen values above the snapshot (applied or waiting for a gap to fill).
    pub(super) log: BTreeMap<Slot, Value<C>>,
    /// Every slot <= applied was emitted as `Apply` (or is covered by the snapshot).
    pub(super) applied: Slot,
    pub(super) snapshot: Option<(Slot, S)>,
    /// What the last compaction cut, until the driver takes it (`take_retired`); at most one
    /// (an untaken one is freed by the next compaction).
    pub(super) retired: Option<Retired<C>>,
    /// Highest commit point any leader told us about.
    pub(super) slot_chosen_heard: Slot,
    /// No new catch-up request before this instant (one outstanding at a time).
    pub(super) catchup_deadline: Option<Instant>,
    /// Whom to ask again if the last catch-up request got no answer.
    pub(super) catchup_source: Option<NodeId>,
    /// The replica last known to be ahead of us (it told us of a commit point or snapshot
    /// beyond our applied slot): a catch-up source to come back to, member or not.
    pub(super) catchup_ahead: Option<NodeId>,

    // Roles and elections.
    pub(super) role: Role<C>,
    pub(super) leader: Option<NodeId>,
    pub(super) leader_seen_at: Option<Instant>,
    pub(super) round_seen_max: u64,
    pub(super) deadline_election: Instant,
    /// The read lease we granted last (`read_index.rs`): until the instant, we promise no
    /// ballot of a proposer other than the node named (`None`: of anyone, ourselves included;
    /// so after a start, for a lease the previous run may have granted).
    pub(super) lease_granted: Option<(Option<NodeId>, Instant)>,
    /// No lease granted before this instant: we refused a proposer because of one.
    pub(super) lease_withheld_until: Instant,
    /// The proposer we refused because of a lease, until we answer it (then leases may be
    /// granted again at once).
    pub(super) lease_withheld_for: Option<NodeId>,
    pub(super) role_reported: (RoleKind, Option<NodeId>),
    pub(super) next_read_id: u64,

    pub(super) actions: VecDeque<Action<C, S>>,
    pub(super) inbox: VecDeque<Message<C, S>>,
    pub(super) counters: Counters,
    checked_promised: Ballot,
    checked_applied: Slot,
}

impl<C, S> Replica<C, S>
where
    C: Clone + Debug + Eq,
    S: Clone + Debug + Eq,
{
    /// Builds a replica from its configuration and what storage restored, at the driver's time
    /// `now`: its first election timeout is counted from `now`, so a replica that has just
    /// started first listens for a leader (a deadline drawn from any other origin, e.g. zero
    /// while the server's clock counts from the Unix epoch, would be long past, and every
    /// replica of a new cluster would campaign at once and duel). If a snapshot was restored,
    /// the first action is `InstallSnapshot` for it.
    pub fn new(cfg: Config, restored: Durable<C, S>, now: Instant) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ cfg.id.0.rotate_left(32));
        let Durable {
            promised,
            accepted,
            snapshot,
            schedule,
            incarnations,
            lost,
        } = restored;
        // Without a recorded membership, `Config::members` stands in for the first one: the
        // truth when it is the first membership (a new cluster's, or data of a version before
        // it was recorded), a guess when it is only a contact list (`joining`: a replica that
        // joins, or one that lost its disk and came back with a short list).
        let first_membership_unknown = schedule.is_none() && (cfg.joining || lost);
        let membership_guessed = schedule.is_none() && cfg.joining;
        let schedule =
            schedule.unwrap_or_else(|| Schedule::new(Membership::voters(cfg.members.clone())));
        // Lost state is not trusted, except the incarnations: storage that lost or damaged its
        // state starts them empty, so any recorded since were persisted by a recovery attempt
        // after the loss, and a restart mid-recovery must not reuse a lower incarnation.
        // A replica restarted in the middle of a recovery may have promised its own ballots
        // since the loss: its next ones must be above them, or storage would see the promise go
        // backwards (found by the membership property once it drew disk loss).
        let round_restored = promised.round;
        let (promised, mut accepted) = if lost {
            (Ballot::ZERO, BTreeMap::new())
        } else {
            (promised, accepted)
        };
        let mut incarnations = incarnations;
        let incarnation = incarnations.remove(&cfg.id).unwrap_or(0);
        let slot_snapshot = snapshot.as_ref().map_or(Slot::ZERO, |(s, _)| *s);
        accepted = accepted.split_off(&slot_snapshot.next());
        let accepted_ballot_max = accepted
            .values()
            .map(|(b, _)| *b)
            .max()
            .unwrap_or(Ballot::ZERO);
        assert!(
            accepted_ballot_max <= promised,
            "restored accepted ballot {accepted_ballot_max} above restored promise {promised}"
        );
        let mut r = Replica {
            cfg,
            schedule,
            membership_guessed,
            first_membership_unknown,
            removed: None,
            was_member: false,
            peers: Vec::new(),
            rng,
            now,
            promised,
            accepted,
            accepted_ballot_max,
            amnesiac: lost,
            incarnation,
            peer_incarnations: incarnations,
            recovery_target: None,
            persist_issued: 0,
            persist_acked: 0,
            held: VecDeque::new(),
            log: BTreeMap::new(),
            applied: slot_snapshot,
            snapshot: None,
            retired: None,
            slot_chosen_heard: slot_snapshot,
            catchup_deadline: None,
            catchup_source: None,
            catchup_ahead: None,
            role: Role::Follower,
            leader: None,
            leader_seen_at: None,
            round_seen_max: round_restored,
            deadline_election: Instant::ZERO,
            lease_granted: None,
            lease_withheld_until: Instant::ZERO,
            lease_withheld_for: None,
            role_reported: (RoleKind::Follower, None),
            next_read_id: 1,
            actions: VecDeque::new(),
            inbox: VecDeque::new(),
            counters: Counters::default(),
            checked_promised: promised,
            checked_applied: slot_snapshot,
        };
        if lost {
            r.role_reported = (RoleKind::Recovering, None);
        }
        if let Some((slot, snap)) = snapshot {
            r.actions.push_back(Action::InstallSnapshot {
                slot,
                snapshot: snap.clone(),
            });
            r.snapshot = Some((slot, snap));
        }
        r.deadline_election = r.now.add_ms(r.election_timeout_ms_random());
        if r.cfg.read_lease_ms > 0 {
            r.lease_granted = Some((None, r.now.add_ms(r.cfg.read_lease_ms)));
        }
        r.refresh_peers();
        r.check_invariants();
        Ok(r)
    }

    /// Feeds one input. `now` never goes backwards (an earlier `now` is treated as the latest).
    /// One door for every input (the harnesses feed a mixed stream); a caller that knows what it
    /// holds calls [`Replica::receive`], [`Replica::tick`], [`Replica::removed`] (none can fail)
    /// or [`Replica::persisted`] (the only input a caller can get wrong).
    pub fn step(&mut self, now: Instant, input: Input<C, S>) -> Result<(), StepError> {
        match input {
            Input::Message { from, msg } => self.receive(now, from, msg),
            Input::Timeout => self.tick(now),
            Input::Removed { from_slot, leader } => self.removed(now, from_slot, leader),
            Input::Persisted { id } => return self.persisted(now, id),
        }
        Ok(())
    }

    /// A peer's message. One from itself or from a node it does not know is counted and dropped.
    pub fn receive(&mut self, now: Instant, from: NodeId, msg: Message<C, S>) {
        self.now = self.now.max(now);
        if from == self.cfg.id || !self.knows(from) {
            self.counters.dropped_malformed += 1;
        } else {
            self.on_message(from, msg);
        }
        self.after_input();
    }

    /// "Your next deadline passed" (`poll_timeout` says when).
    pub fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.on_timeout();
        self.after_input();
    }

    /// A member told this replica it was removed from `from_slot` on (see `Input::Removed`).
    pub fn removed(&mut self, now: Instant, from_slot: Slot, leader: Option<NodeId>) {
        self.now = self.now.max(now);
        self.on_removed(from_slot, leader);
        self.after_input();
    }

    /// The `Persist` with this id (and every one before it) is durable. Refused, changing
    /// nothing, for an id never issued.
    pub fn persisted(&mut self, now: Instant, id: PersistId) -> Result<(), StepError> {
        self.now = self.now.max(now);
        if id > self.persist_issued {
            return Err(StepError::PersistedUnknown {
                id,
                issued: self.persist_issued,
            });
        }
        self.on_persisted(id);
        self.after_input();
        Ok(())
    }

    fn after_input(&mut self) {
        self.drain_inbox();
        self.check_invariants();
    }

    /// Queues `command` for the next slot the leader proposes.
    pub fn propose(&mut self, now: Instant, command: C) -> Result<(), ProposeError> {
        self.propose_many(now, vec![command])
    }

    /// How many more commands the pending queue takes now (`propose_many` of at most this many
    /// succeeds); `NotLeader` off the leader.
    pub fn proposal_room(&self) -> Result<usize, ProposeError> {
        match &self.role {
            Role::Leader(l) => Ok(self.cfg.pending_max.saturating_sub(l.queue.len())),
            _ => Err(ProposeError::NotLeader {
                leader_hint: self.leader,
            }),
        }
    }

    /// Queues several commands at once so they can share slots (batching). All or nothing:
    /// `Busy` if they do not all fit in the pending queue.
    pub fn propose_many(&mut self, now: Instant, commands: Vec<C>) -> Result<(), ProposeError> {
        self.now = self.now.max(now);
        let max = self.cfg.pending_max;
        let leader_hint = self.leader;
        let Role::Leader(l) = &mut self.role else {
            return Err(ProposeError::NotLeader { leader_hint });
        };
        if l.queue.len() + commands.len() > max {
            return Err(ProposeError::Busy {
                pending: l.queue.len(),
                max,
            });
        }
        l.queue.extend(commands);
        self.fill_window();
        self.drain_inbox();
        self.check_invariants();
        Ok(())
    }

    /// Leader: proposes a change to `membership` (voters and learners). It is chosen like any
    /// value and governs the log from its slot plus `Config::reconfig_delay_slots` on; the
    /// leader fills the slots in between with no-ops if nothing else comes. One change at a
    /// time: refused while another is not in effect yet. Unless `force`, refused when fewer
    /// of the new voters than its quorum answered this leader within the maximum election
    /// timeout. A leader that the new membership leaves out steps down once it is in effect.
    pub fn propose_membership(
        &mut self,
        now: Instant,
        membership: Membership,
        force: bool,
    ) -> Result<(), ReconfigError> {
        let res = self.queue_membership(now, membership, force);
        self.drain_inbox();
        self.check_invariants();
        res
    }

    /// Replaces the log up to `slot` (applied) with the state machine's `snapshot` as of `slot`.
    pub fn compact(&mut self, slot: Slot, snapshot: S) -> Result<(), CompactError> {
        if slot > self.applied {
            return Err(CompactError::NotApplied {
                slot,
                applied: self.applied,
            });
        }
        let snap_slot = self.slot_snapshot();
        if slot <= snap_slot {
            return Err(CompactError::Stale {
                slot,
                snapshot: snap_slot,
            });
        }
        // While amnesiac, recovery's end may rest on this snapshot (`check_recovered`): it must
        // be durable before the acknowledgement, like an installed one.
        let local = !self.amnesiac;
        self.take_snapshot(slot, snapshot, false, local);
        self.check_invariants();
        Ok(())
    }

    /// What the last compaction (or installed snapshot) cut from the log, for the caller to
    /// free where the time it takes does not matter (a driver: another thread). Whoever does not
    /// take it loses nothing: the next compaction frees it.
    pub fn take_retired(&mut self) -> Option<Retired<C>> {
        self.retired.take()
    }

    /// The next output, in order.
    pub fn poll_action(&mut self) -> Option<Action<C, S>> {
        self.actions.pop_front()
    }

    /// When the driver must step `Input::Timeout` next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.role {
            Role::Leader(l) => Some(l.deadline_heartbeat),
            _ => Some(self.deadline_election),
        }
    }

    // ---- inspection ----

    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Which membership governs which slots, as far as this replica knows.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The membership that governs the next slot to apply.
    pub fn membership(&self) -> &Membership {
        self.schedule.at(self.applied.next())
    }

    /// Leader: the last slot `peer` said it had applied, in its latest heartbeat
    /// acknowledgement of this term (`None`: not a leader, or not heard from this term).
    pub fn peer_applied(&self, peer: NodeId) -> Option<Slot> {
        match &self.role {
            Role::Leader(l) => l.applied_by.get(&peer).copied(),
            _ => None,
        }
    }

    /// The newest membership this replica knows of, and the slot it governs from (it is in
    /// effect once that slot is reached).
    pub fn membership_latest(&self) -> (&Membership, Slot) {
        (self.schedule.last(), self.schedule.last_from())
    }

    pub fn role(&self) -> RoleKind {
        if !matches!(self.role, Role::Leader(_)) && self.is_removed() {
            return RoleKind::Removed;
        }
        match &self.role {
            Role::Follower if self.amnesiac => RoleKind::Recovering,
            Role::Follower => RoleKind::Follower,
            Role::PreCandidate { .. } => RoleKind::PreCandidate,
            Role::Candidate { .. } => RoleKind::Candidate,
            Role::Leader(_) => RoleKind::Leader,
            Role::Recovering { .. } => RoleKind::Recovering,
        }
    }

    /// The highest ballot promised (in memory; storage may lag until `Persisted`).
    pub fn ballot_promised(&self) -> Ballot {
        self.promised
    }

    /// The leader this replica follows (itself when leading), if known.
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    pub fn slot_applied(&self) -> Slot {
        self.applied
    }

    /// Highest commit point heard (or reached, on the leader).
    pub fn slot_chosen(&self) -> Slot {
        self.slot_chosen_heard.max(self.applied)
    }

    pub fn slot_snapshot(&self) -> Slot {
        self.snapshot.as_ref().map_or(Slot::ZERO, |(s, _)| *s)
    }

    pub fn is_amnesiac(&self) -> bool {
        self.amnesiac
    }

    /// Whether the first membership is still a guess from `Config::members` (see
    /// `membership_guessed`): the transport then also talks to the configured contacts.
    pub fn membership_guessed(&self) -> bool {
        self.membership_guessed
    }

    /// Whether the first membership (and so the cluster version the log starts at) is still
    /// unknown (see `first_membership_unknown`): slot 1 waits for a peer to say it.
    pub fn first_membership_unknown(&self) -> bool {
        self.first_membership_unknown
    }

    /// The first slot of the membership that a member said leaves us out, if we were removed.
    pub fn removed_from(&self) -> Option<Slot> {
        self.removed
    }

    /// Removed: a member told us so (`Input::Removed`), or our own log did: we were a member
    /// of a membership we know, and none that governs a slot from the next one to apply on
    /// names us. (A learner catching up to its addition is in none of the memberships it has
    /// applied yet, but it never was in one either.)
    pub fn is_removed(&self) -> bool {
        if self.removed.is_some() {
            return true;
        }
        if self.membership_guessed || !self.was_member {
            return false;
        }
        let me = self.cfg.id;
        !self
            .schedule
            .over(self.applied.next(), Slot(u64::MAX))
            .any(|m| m.is_member(me))
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The accepted (ballot, value) at `slot`, if any.
    pub fn accepted_at(&self, slot: Slot) -> Option<&(Ballot, Value<C>)> {
        self.accepted.get(&slot)
    }

    // ---- dispatch ----

    fn on_message(&mut self, from: NodeId, msg: Message<C, S>) {
        match msg {
            Message::PreVote { round } => self.on_pre_vote(from, round),
            Message::PreVoteReply { round, granted } => {
                self.on_pre_vote_reply(from, round, granted)
            }
            Message::Prepare {
                ballot,
                slot_from,
                incarnation,
            } => {
                if self.fenced(from, incarnation) {
                    self.on_prepare(from, ballot, slot_from);
                }
            }
            Message::Promise {
                ballot,
                slot_applied,
                slot_snapshot,
                accepted,
            } => self.on_promise(from, ballot, (slot_applied, slot_snapshot), accepted),
            Message::Accept {
                ballot,
                slot,
                value,
                slot_chosen,
                incarnation,
            } => {
                if self.fenced(from, incarnation) {
                    self.on_accept(from, ballot, slot, value, slot_chosen);
                }
            }
            Message::Accepted { ballot, slot } => self.on_accepted(from, ballot, slot),
            Message::Nack { ballot, promised } => self.on_nack(from, ballot, promised),
            Message::Heartbeat {
                ballot,
                slot_chosen,
                seq,
                incarnation,
                lease_ms,
            } => {
                if self.fenced(from, incarnation) {
                    self.on_heartbeat(from, ballot, slot_chosen, seq, lease_ms);
                }
            }
            Message::HeartbeatAck {
                ballot,
                seq,
                applied,
                lease_ms,
            } => self.on_heartbeat_ack(from, ballot, seq, applied, lease_ms),
            Message::CatchupRequest { slot_from } => self.on_catchup_request(from, slot_from),
            Message::CatchupReply {
                snapshot,
                schedule,
                entries,
            } => self.on_catchup_reply(from, snapshot, schedule, entries),
            Message::RecoverQuery { nonce } => self.on_recover_query(from, nonce),
            Message::RecoverReply {
                nonce,
                incarnation,
                slot_applied,
            } => self.on_recover_reply(from, nonce, incarnation, slot_applied),
            Message::Fence { nonce, incarnation } => self.on_fence(from, nonce, incarnation),
            Message::FenceAck { nonce, promised } => self.on_fence_ack(from, nonce, promised),
        }
    }

    /// True if `from`'s ballot-bearing message comes from an incarnation we still accept
    /// (a newer one than we knew fences the older ones first: [`Self::fence_older`]); counts
    /// it as stale otherwise (an old incarnation's message delivered late).
    fn fenced(&mut self, from: NodeId, incarnation: u64) -> bool {
        let min = if from == self.cfg.id {
            self.incarnation
        } else {
            self.peer_incarnations.get(&from).copied().unwrap_or(0)
        };
        if incarnation < min {
            self.counters.dropped_stale += 1;
            return false;
        }
        if incarnation > min {
            self.fence_older(from, incarnation);
        }
        true
    }

    /// A ballot-bearing message (or a `Fence`) from a newer incarnation of `from` fences its
    /// older ones, durably before our answer leaves: a recovering replica's candidacy reaches
    /// voters of memberships it learned of only after its fence round.
    ///
    /// If our promise is a ballot of `from`, an older incarnation made it (we did not know the
    /// newer one), and the newer one, which forgot it, may pick that very ballot again: two
    /// values at one ballot. So the promise first rises above that round (to the reserved
    /// node 0, below every real ballot of the next round), and the newer incarnation's ballots
    /// must go higher. It is persisted before the incarnation, so a crash cannot keep the
    /// fence without it.
    pub(super) fn fence_older(&mut self, from: NodeId, incarnation: u64) {
        if from == self.cfg.id || self.amnesiac {
            return;
        }
        let known = self.peer_incarnations.get(&from).copied().unwrap_or(0);
        if incarnation > known {
            if self.promised.node == from {
                self.raise_promise(Ballot::new(self.promised.round + 1, NodeId(0)));
            }
            self.peer_incarnations.insert(from, incarnation);
            self.persist_incarnation(from, incarnation);
        }
    }

    /// Messages a replica sends itself (its own prepare/accept and the replies) go through the
    /// same handlers, after the same persists, but never through the driver.
    fn drain_inbox(&mut self) {
        while let Some(msg) = self.inbox.pop_front() {
            self.on_message(self.cfg.id, msg);
        }
    }

    fn on_persisted(&mut self, id: PersistId) {
        if id <= self.persist_acked {
            return;
        }
        self.persist_acked = id;
        while self.held.front().is_some_and(|(dep, _, _)| *dep <= id) {
            let (_, to, msg) = self.held.pop_front().expect("front checked");
            self.send(to, msg);
        }
    }

    // ---- output helpers ----

    pub(super) fn send(&mut self, to: NodeId, msg: Message<C, S>) {
        if to == self.cfg.id {
            self.inbox.push_back(msg);
        } else {
            self.actions.push_back(Action::Send { to, msg });
        }
    }

    /// Sends `msg` once everything persisted so far is durable (persist before reply).
    pub(super) fn send_after_persist(&mut self, to: NodeId, msg: Message<C, S>) {
        let dep = self.persist_issued;
        if dep <= self.persist_acked {
            self.send(to, msg);
        } else {
            self.held.push_back((dep, to, msg));
        }
    }

    /// Sends `msg` to every other member (voter or learner) of a membership that governs a
    /// slot in `applied + 1 ..= applied + α` (from the snapshot on while amnesiac).
    pub(super) fn broadcast(&mut self, msg: &Message<C, S>) {
        for i in 0..self.peers.len() {
            let to = self.peers[i];
            self.actions.push_back(Action::Send {
                to,
                msg: msg.clone(),
            });
        }
    }

    /// The last slot a leader may propose in now, and the last whose membership is known:
    /// `applied + α`.
    pub(super) fn slot_known_max(&self) -> Slot {
        Slot(self.applied.0 + self.cfg.reconfig_delay_slots as u64)
    }

    /// The memberships that govern the slots after `base`, as far as `base + α`.
    pub(super) fn memberships_after(&self, base: Slot) -> Vec<Membership> {
        let hi = Slot(base.0 + self.cfg.reconfig_delay_slots as u64);
        self.schedule.over(base.next(), hi).cloned().collect()
    }

    /// Recomputes `peers` (after `applied`, the schedule or amnesia moved). An amnesiac
    /// replica proposes again from its snapshot on: the memberships of those slots count too.
    pub(super) fn refresh_peers(&mut self) {
        if !self.membership_guessed && self.schedule.knows(self.cfg.id) {
            self.was_member = true;
        }
        let (lo, hi) = (self.phase1_base().next(), self.slot_known_max());
        let mut peers: Vec<NodeId> = self
            .schedule
            .over(lo, hi)
            .flat_map(|m| m.members())
            .filter(|n| *n != self.cfg.id)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        self.peers = peers;
    }

    /// Whether we take messages from `from`: anyone but the reserved id 0. A replica that
    /// missed a membership change hears from members it does not know of yet (a leader added
    /// since); it must follow them to learn the change. Who may connect at all is the
    /// transport's rule, and the protocol is safe whoever proposes.
    pub(super) fn knows(&self, from: NodeId) -> bool {
        from.0 != 0
    }

    /// Whether we vote in the membership that governs the next slot to apply.
    pub(super) fn is_voter(&self) -> bool {
        self.membership().is_voter(self.cfg.id)
    }

    pub(super) fn persist(
        &mut self,
        promised: Option<Ballot>,
        accepted: Vec<AcceptedEntry<C>>,
        snapshot: Option<(Slot, S)>,
        recovered: bool,
    ) -> PersistId {
        self.persist_issued += 1;
        self.actions.push_back(Action::Persist(Persist {
            id: self.persist_issued,
            promised,
            accepted,
            snapshot,
            schedule: None,
            snapshot_local: false,
            incarnation: None,
            recovered,
        }));
        self.persist_issued
    }

    /// Persists the snapshot at `slot`; `local`: a compaction storage may write in the
    /// background (`Persist::snapshot_local`).
    pub(super) fn persist_snapshot(&mut self, slot: Slot, snapshot: S, local: bool) {
        self.persist_issued += 1;
        self.actions.push_back(Action::Persist(Persist {
            id: self.persist_issued,
            promised: None,
            accepted: Vec::new(),
            snapshot: Some((slot, snapshot)),
            schedule: Some(self.schedule.clone()),
            snapshot_local: local,
            incarnation: None,
            recovered: false,
        }));
    }

    /// Persists that `node` is at `incarnation` (our own, or a peer's fence).
    pub(super) fn persist_incarnation(&mut self, node: NodeId, incarnation: u64) {
        self.persist_issued += 1;
        self.actions.push_back(Action::Persist(Persist {
            id: self.persist_issued,
            promised: None,
            accepted: Vec::new(),
            snapshot: None,
            schedule: None,
            snapshot_local: false,
            incarnation: Some((node, incarnation)),
            recovered: false,
        }));
    }

    /// Raises the promise to `ballot` and persists it.
    pub(super) fn raise_promise(&mut self, ballot: Ballot) {
        assert!(
            ballot > self.promised,
            "promise must rise: {ballot} <= {}",
            self.promised
        );
        self.promised = ballot;
        self.round_seen_max = self.round_seen_max.max(ballot.round);
        self.persist(Some(ballot), Vec::new(), None, false);
    }

    pub(super) fn election_timeout_ms_random(&mut self) -> u64 {
        let span = self.cfg.election_timeout_ms_max - self.cfg.election_timeout_ms_min + 1;
        self.cfg.election_timeout_ms_min + self.rng.next_u64() % span
    }

    /// Emits `RoleChanged` when the role kind or the known leader changed.
    pub(super) fn report_role(&mut self) {
        let now = (self.role(), self.leader);
        if now != self.role_reported {
            self.role_reported = now;
            let ballot = match &self.role {
                Role::Candidate { ballot, .. } => *ballot,
                Role::Leader(l) => l.ballot,
                _ => self.promised,
            };
            self.actions.push_back(Action::RoleChanged {
                role: now.0,
                ballot,
                leader: now.1,
            });
        }
    }

    /// Votes needed in the membership that governs the next slot to apply.
    pub(super) fn quorum(&self) -> usize {
        self.membership().quorum()
    }

    // ---- invariants ----

    /// Checked after every input. Cheap checks are `assert!` (on in release); O(n) ones are
    /// `debug_assert!`.
    fn check_invariants(&mut self) {
        assert!(
            self.promised >= self.checked_promised,
            "promised went backwards: {} < {}",
            self.promised,
            self.checked_promised
        );
        self.checked_promised = self.promised;
        assert!(
            self.applied >= self.checked_applied,
            "applied went backwards: {} < {}",
            self.applied,
            self.checked_applied
        );
        self.checked_applied = self.applied;
        assert!(
            self.accepted_ballot_max <= self.promised,
            "accepted ballot {} above promise {}",
            self.accepted_ballot_max,
            self.promised
        );
        let snap = self.slot_snapshot();
        assert!(
            snap <= self.applied,
            "snapshot {snap} above applied {}",
            self.applied
        );
        if let Some((s, _)) = self.log.first_key_value() {
            assert!(*s > snap, "log slot {s} not above snapshot {snap}");
        }
        if let Some((s, _)) = self.accepted.first_key_value() {
            assert!(*s > snap, "accepted slot {s} not above snapshot {snap}");
        }
        assert!(self.persist_acked <= self.persist_issued);
        if let Some((dep, _, _)) = self.held.front() {
            assert!(
                *dep > self.persist_acked,
                "held message on persist {dep} not released though {} is durable",
                self.persist_acked
            );
        }
        assert!(self.inbox.is_empty(), "inbox not drained");
        if let Role::Leader(l) = &self.role {
            if self.amnesiac {
                assert!(
                    l.recovery_goal.is_some(),
                    "amnesiac leader without recovery goal"
                );
            }
        }
        match &self.role {
            Role::Leader(l) => {
                assert_eq!(l.ballot, self.promised, "leader ballot is not the promise");
                assert_eq!(l.ballot.node, self.cfg.id, "leader ballot not own");
                assert_eq!(
                    self.leader,
                    Some(self.cfg.id),
                    "leader does not know itself"
                );
                assert!(l.queue.len() <= self.cfg.pending_max, "queue over bound");
                assert!(l.reads.len() <= self.cfg.pending_max, "reads over bound");
                if let Some((s, _)) = l.proposals.first_key_value() {
                    assert!(*s > snap, "proposal {s} at or below snapshot {snap}");
                }
                if let Some((s, _)) = l.proposals.last_key_value() {
                    assert!(
                        *s < l.slot_next,
                        "proposal {s} not below next {}",
                        l.slot_next
                    );
                }
                // Phase 1's re-proposals are bounded by `applied + α` (below); new values by the
                // window.
                let fresh = l.proposals.range(l.slot_top.next()..).count();
                assert!(
                    fresh <= self.cfg.window_slots,
                    "window overrun: {fresh} new values in flight"
                );
                if let Some((s, _)) = l.proposals.last_key_value() {
                    assert!(
                        *s <= self.slot_known_max(),
                        "proposal {s} above applied {} + α",
                        self.applied
                    );
                }
            }
            Role::Candidate { ballot, .. } => {
                assert_eq!(
                    *ballot, self.promised,
                    "candidate ballot is not the promise"
                );
            }
            _ => {}
        }
        debug_assert!(
            (snap.0 + 1..=self.applied.0).all(|s| self.log.contains_key(&Slot(s))),
            "log has a hole below applied"
        );
    }
}
