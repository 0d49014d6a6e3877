//! The node's waiting `Acquire` proposals: applied as `Queued`, answered once when the wait
//! ends (the state machine reports each ended wait: [`LockStateMachine::wait_ends`]) or when
//! their hold time passes. Only the leader has any (its proposals fail when it steps down).

use std::collections::{BTreeMap, BTreeSet};

use crate::locks::{
    AcquireReply, Command, LockError, LockStateMachine, Outcome, ReleaseCause, Reply, Revision,
    SessionId, WaitEnd, WaitEndKind, CLUSTER_VERSION_HAND_OFF_EXPIRY,
};
use crate::time::Instant;

use super::{Action, Node, NodeCommand, ProposalId};

/// What the node keeps of a pending proposal until it is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PendingAnswer {
    /// How long the answer of an `Acquire` that is queued waits for the grant before it is
    /// answered `Queued` (`None`: until the wait ends): [`super::Proposal::answer_within_ms`].
    pub within_ms: Option<u64>,
    /// An `Acquire` with a wait (counted against the bound of pending waits).
    pub waits: bool,
}

/// (session, namespace, key) of a wait.
pub(super) type WaitKey = (SessionId, String, String);

/// What a waiting proposal waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Waited {
    pub key: WaitKey,
    /// The `Acquire`'s `Wait::timeout_ms` (for the `WaitExpired` answer).
    pub timeout_ms: Option<u64>,
}

/// The session and key an `Acquire` with a wait is for.
pub(super) fn waited_key(command: &Command) -> Option<Waited> {
    match command {
        Command::Acquire {
            session,
            namespace,
            key,
            wait: Some(wait),
            ..
        } => Some(Waited {
            key: (*session, namespace.clone(), key.clone()),
            timeout_ms: wait.timeout_ms,
        }),
        _ => None,
    }
}

#[derive(Debug, Default)]
pub(super) struct PendingWaits {
    by_proposal: BTreeMap<ProposalId, (Waited, Option<Instant>)>,
    /// Several proposals may wait for one key (a client retried with the same request id).
    by_key: BTreeMap<WaitKey, BTreeSet<ProposalId>>,
    hold_ends: BTreeSet<(Instant, ProposalId)>,
}

impl PendingWaits {
    pub fn len(&self) -> usize {
        self.by_proposal.len()
    }

    pub fn insert(&mut self, proposal: ProposalId, waited: Waited, hold_end: Option<Instant>) {
        let inserted = self
            .by_key
            .entry(waited.key.clone())
            .or_default()
            .insert(proposal);
        assert!(inserted, "proposal {proposal:?} waits twice");
        if let Some(at) = hold_end {
            self.hold_ends.insert((at, proposal));
        }
        let old = self.by_proposal.insert(proposal, (waited, hold_end));
        assert!(old.is_none(), "proposal {proposal:?} waits twice");
    }

    fn remove(&mut self, proposal: ProposalId) -> Option<Waited> {
        let (waited, hold_end) = self.by_proposal.remove(&proposal)?;
        if let Some(at) = hold_end {
            assert!(
                self.hold_ends.remove(&(at, proposal)),
                "hold end not indexed"
            );
        }
        let proposals = self.by_key.get_mut(&waited.key).expect("indexed by key");
        assert!(proposals.remove(&proposal), "proposal not indexed by key");
        if proposals.is_empty() {
            self.by_key.remove(&waited.key);
        }
        Some(waited)
    }

    /// Removes every proposal waiting for `key`.
    fn take_key(&mut self, key: &WaitKey) -> Vec<(ProposalId, Waited)> {
        let proposals = self.by_key.get(key).cloned().unwrap_or_default();
        proposals
            .into_iter()
            .map(|p| (p, self.remove(p).expect("indexed")))
            .collect()
    }

    pub fn hold_end_next(&self) -> Option<Instant> {
        self.hold_ends.first().map(|(at, _)| *at)
    }

    pub fn proposals(&self) -> impl Iterator<Item = ProposalId> + '_ {
        self.by_proposal.keys().copied()
    }

    pub fn into_proposals(self) -> impl Iterator<Item = ProposalId> {
        self.by_proposal.into_keys()
    }

    /// Checks the indexes mirror each other (O(n): tests and debug builds).
    fn check(&self) {
        let by_key: usize = self.by_key.values().map(BTreeSet::len).sum();
        assert_eq!(
            by_key,
            self.by_proposal.len(),
            "waits by key vs by proposal"
        );
        let holds = self
            .by_proposal
            .values()
            .filter(|(_, h)| h.is_some())
            .count();
        assert_eq!(holds, self.hold_ends.len(), "hold ends vs held waits");
    }
}

/// The answer to a wait that `end` ended.
fn ended_answer(end: &WaitEnd, waited: &Waited) -> Outcome {
    let (session, namespace, key) = (end.session, end.namespace.to_string(), end.key.to_string());
    match end.kind {
        WaitEndKind::Granted { token, permit } => {
            Ok(Reply::Acquire(AcquireReply::Granted { token, permit }))
        }
        WaitEndKind::Removed {
            cause: ReleaseCause::WaitExpired,
        } => Err(LockError::WaitExpired {
            session,
            namespace,
            key,
            timeout_ms: waited.timeout_ms.unwrap_or(0),
        }),
        WaitEndKind::Removed {
            cause: ReleaseCause::WaitCancelled,
        } => Err(LockError::WaitCancelled {
            session,
            namespace,
            key,
        }),
        // The session was closed, expired or revoked.
        WaitEndKind::Removed { .. } => Err(LockError::UnknownSession { session }),
    }
}

/// What is true now of a wait: granted (its token), still queued, or ended.
fn answer_now(sm: &LockStateMachine, key: &WaitKey) -> Option<Outcome> {
    let (session, namespace, k) = key;
    if let Some((token, permit)) = sm.holder_grant(*session, namespace, k) {
        return Some(Ok(Reply::Acquire(AcquireReply::Granted { token, permit })));
    }
    if sm.wait_position(*session, namespace, k).is_some() {
        return None;
    }
    if sm.session(*session).is_none() {
        return Some(Err(LockError::UnknownSession { session: *session }));
    }
    Some(Err(LockError::WaitEnded {
        session: *session,
        namespace: namespace.clone(),
        key: k.clone(),
    }))
}

/// The revision a wait's answer carries: a grant's is the revision that granted it (its token,
/// maybe inside a snapshot installed since); any other answer's is the state's it was read from.
fn answer_revision(sm: &LockStateMachine, outcome: &Outcome) -> Revision {
    match outcome {
        Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) => Revision(token.0),
        _ => sm.revision(),
    }
}

impl Node {
    /// Answers the waiting proposals whose wait the last applied command ended.
    pub(super) fn answer_ended_waits(&mut self) {
        if self.waits.len() == 0 {
            return;
        }
        for end in self.sm.wait_ends() {
            let key = (end.session, end.namespace.to_string(), end.key.to_string());
            for (proposal, waited) in self.waits.take_key(&key) {
                let outcome = ended_answer(end, &waited);
                if outcome.is_ok() {
                    self.counters.waits_granted += 1;
                }
                let revision = answer_revision(&self.sm, &outcome);
                self.actions.push_back(Action::Reply {
                    proposal,
                    revision,
                    outcome,
                });
            }
        }
    }

    /// Answers `Queued` (at the current position) to the waiting proposals whose hold time
    /// passed; their waits go on.
    pub(super) fn answer_held_waits(&mut self) {
        while let Some(at) = self.waits.hold_end_next() {
            if at > self.now {
                break;
            }
            let (_, proposal) = *self.waits.hold_ends.first().expect("not empty");
            let waited = self.waits.remove(proposal).expect("indexed");
            let (session, namespace, key) = &waited.key;
            let outcome = match self.sm.wait_position(*session, namespace, key) {
                Some(position) => Ok(Reply::Acquire(AcquireReply::Queued { position })),
                None => answer_now(&self.sm, &waited.key).expect("not waiting"),
            };
            self.counters.waits_answered_queued += 1;
            let revision = answer_revision(&self.sm, &outcome);
            self.actions.push_back(Action::Reply {
                proposal,
                revision,
                outcome,
            });
        }
        if cfg!(debug_assertions) {
            self.waits.check();
        }
    }

    /// After a snapshot replaced the state, answers the waits that ended inside it.
    pub(super) fn recheck_waits(&mut self) {
        let proposals: Vec<(ProposalId, WaitKey)> = self
            .waits
            .by_proposal
            .iter()
            .map(|(p, (w, _))| (*p, w.key.clone()))
            .collect();
        for (proposal, key) in proposals {
            if let Some(outcome) = answer_now(&self.sm, &key) {
                self.waits.remove(proposal);
                let revision = answer_revision(&self.sm, &outcome);
                self.actions.push_back(Action::Reply {
                    proposal,
                    revision,
                    outcome,
                });
            }
        }
    }

    /// When the leader proposes `ExpireWaits` on its own: at the earliest wait deadline (late
    /// under the planted bug `Faults::late_wait_expiry`).
    pub(super) fn wait_expiry_due(&self) -> Option<Instant> {
        let late_ms = self.replica.config().faults.wait_expiry_late_ms();
        self.sm.wait_deadline_next().map(|at| at.add_ms(late_ms))
    }

    /// Leader: proposes `ExpireWaits` once the earliest wait deadline passed.
    pub(super) fn propose_wait_expiries(&mut self) {
        if !self.ready || self.wait_expiry_retry_at.is_some_and(|t| t > self.now) {
            return;
        }
        if self.wait_expiry_due().is_none_or(|at| at > self.now) {
            self.wait_expiry_retry_at = None;
            return;
        }
        let entry = self.expire_waits_entry();
        let cfg = self.replica.config();
        let (heartbeat_ms, election_ms) = (cfg.heartbeat_ms, cfg.election_timeout_ms_max);
        match self.replica.propose(self.now, entry) {
            Ok(()) => {
                self.counters.wait_expiry_proposals += 1;
                // Not again until it is applied (or, if it was lost, after this).
                self.wait_expiry_retry_at = Some(self.now.add_ms(election_ms));
            }
            Err(_) => self.wait_expiry_retry_at = Some(self.now.add_ms(heartbeat_ms)),
        }
    }
}

/// Wait expiry and the hand-offs in the log (docs/locks.md, "Waits that end").
///
/// - **Cluster version 2 on**: the state machine keeps the rule itself: a hand-off first removes
///   the due waits at the head of its queue, at its own log time
///   (`LockStateMachine::hand_off_expires_waits`), so the log needs nothing before a hand-off.
///   The leader's own `ExpireWaits` ([`Node::propose_wait_expiries`]) still comes at each
///   deadline, so that an expired waiter is answered (and its wait removed) on time when no
///   hand-off comes.
/// - **Cluster version 1** (a cluster that still runs, or may run, release 0.1, whose replicas
///   apply the log as written): the state machine grants the head of a queue whatever its
///   deadline, so the log must carry an `ExpireWaits` before a hand-off, as release 0.1's leader
///   wrote it. The leader puts one first among the commands of a proposal that holds a command
///   that may hand a key over ([`Command::may_hand_over`]), while a wait with a deadline may be
///   in the state it applies to ([`Node::expire_waits_first`]). One `propose_many` lands its
///   commands together at the tail of the replica's queue, and a batch takes up to
///   `batch_commands_max` commands from the head of the queue when it takes a slot, which fixes
///   its log time; so the `ExpireWaits` and the hand-offs after it share one log time unless a
///   batch boundary falls between them (the queue holds more than a batch: a full pipeline
///   window). Then the hand-off lands in the next batch, at a later log time, and a wait whose
///   deadline falls between the two log times can be granted: the window that remains at
///   cluster version 1 (release 0.1's batch head, formed as the batch took its slot, had none;
///   it lasts until the cluster version steps to 2).
impl Node {
    /// The leader's own `ExpireWaits` entry (answered to nobody).
    pub(super) fn expire_waits_entry(&self) -> NodeCommand {
        NodeCommand {
            origin: self.replica.id(),
            boot: self.cfg.boot,
            proposal: ProposalId(0),
            command: Command::ExpireWaits,
        }
    }

    /// Cluster version 1 only: whether a proposal holding a hand-off must put an `ExpireWaits`
    /// first (see above). `waits_new`: waiting `Acquire`s of the same proposal taken so far.
    /// Conservative: true while a wait with a deadline may be in the state the hand-off applies
    /// to (one is applied, this leader proposed one not applied yet, or it is not ready: its
    /// predecessors' slots may hold waits it has not applied), so that while no client waits
    /// with a deadline, revisions and tokens are as they were.
    pub(super) fn expire_waits_first(&self, waits_new: usize) -> bool {
        if self.sm.cluster_version() >= CLUSTER_VERSION_HAND_OFF_EXPIRY {
            return false;
        }
        if self.replica.config().faults.late_wait_expiry {
            return false;
        }
        !self.ready
            || self.pending_waiting + waits_new > 0
            || self.sm.wait_deadline_next().is_some()
    }
}
