//! What goes in and out of a replica: inputs, actions, durable state and errors.

use std::collections::BTreeMap;

use thiserror::Error;

use super::ballot::{Ballot, NodeId, Slot, Value};
use super::membership::{MembershipError, Schedule};
use super::message::{AcceptedEntry, Message};

/// Identifies a `Persist` action; ids increase by one from 1.
pub type PersistId = u64;

/// Identifies a linearizable read started with `Replica::read_index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadId(pub u64);

/// An input from the driver (besides `propose`/`read_index`).
// A message is most inputs; boxing it would add an allocation per message for the rare others.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input<C, S> {
    /// A message from peer `from`.
    Message { from: NodeId, msg: Message<C, S> },
    /// `now` reached (or passed) the instant `poll_timeout` returned.
    Timeout,
    /// The `Persist` action `id` and every earlier one are durable.
    Persisted { id: PersistId },
    /// A member told us (the peer transport's refusal, `peer_not_a_member`) that the
    /// membership it follows, which governs from `from_slot`, does not name us, and who it
    /// knows as leader. Taken only if `from_slot` is beyond the newest membership we know: we
    /// were removed and missed it. We then never campaign again (the role is `Removed`) and
    /// point clients at `leader`. Hearsay is enough: campaigning is a matter of liveness only.
    Removed {
        from_slot: Slot,
        leader: Option<NodeId>,
    },
}

/// The replica's role, as reported by `Action::RoleChanged`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RoleKind {
    Follower,
    /// Asking for pre-votes; holds no ballot yet.
    PreCandidate,
    /// Running phase 1 at its ballot.
    Candidate,
    /// Phase 1 done; proposes.
    Leader,
    /// Durable state was lost: neither promises nor accepts until re-learned from the others.
    Recovering,
    /// A member said a membership newer than ours leaves us out (`Input::Removed`): never
    /// campaigns again.
    Removed,
}

/// A `Persist` action: make this durable, then step `Input::Persisted { id }`. Storage applies it as: set the
/// promised ballot if `Some`, upsert each accepted entry, replace the snapshot if `Some`
/// (dropping accepted entries at or below its slot), record the incarnation if `Some`, clear
/// the "lost" flag if `recovered`. Apply them in id order; `Durable::apply_persist` is the
/// reference.
///
/// One exception to "durable before the acknowledgement": a snapshot with `snapshot_local`
/// may become durable later (storage writes it off the driver's turn), provided storage keeps
/// the accepted entries and the snapshot it replaces until it is. The replica loses nothing
/// it acknowledged if a crash comes first: it restarts from the older snapshot and the
/// accepted entries, the state of a replica that had not compacted yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persist<C, S> {
    pub id: PersistId,
    pub promised: Option<Ballot>,
    pub accepted: Vec<AcceptedEntry<C>>,
    pub snapshot: Option<(Slot, S)>,
    /// With `snapshot`: the membership schedule as of its slot (`None`: the first
    /// membership, `Config::members`, governs everything after it). Without a snapshot: the
    /// cluster's first membership (one entry, from slot 1), learned by a replica that only
    /// guessed it (a joining or rejoining one): storage keeps it beside the promise and gives
    /// it back as `Durable::schedule` while it holds no snapshot.
    pub schedule: Option<Schedule>,
    /// The snapshot is a local compaction (`Replica::compact`, taken while not amnesiac):
    /// of values this replica applied, so what storage already holds covers it. `false`
    /// without a snapshot, and for a snapshot installed from a peer (catch-up) or taken while
    /// amnesiac: recovery relies on those being durable (the log does not cover them).
    pub snapshot_local: bool,
    /// Record the incarnation of a replica (ourselves or a peer that recovered).
    pub incarnation: Option<(NodeId, u64)>,
    pub recovered: bool,
}

/// An output for the driver, taken from one FIFO with `poll_action`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<C, S> {
    /// Make this durable, then step `Input::Persisted { id }` ([`Persist`]).
    Persist(Persist<C, S>),
    /// Send `msg` to `to` (any time, in any order: ordering rules are kept by the replica).
    Send { to: NodeId, msg: Message<C, S> },
    /// Apply the chosen `value` of `slot`: strictly in slot order, exactly once per slot.
    Apply { slot: Slot, value: Value<C> },
    /// Replace the state machine with `snapshot` (state as of `slot`); `Apply` goes on at slot+1.
    InstallSnapshot { slot: Slot, snapshot: S },
    /// Read `id` is linearizable now: leadership was confirmed by a quorum after it arrived
    /// and the state machine has applied at least `slot_applied_min`.
    ReadReady { id: ReadId, slot_applied_min: Slot },
    /// Read `id` cannot be served here (leadership lost); the client retries elsewhere.
    ReadFailed { id: ReadId },
    /// The role or the known leader changed. Commands queued but not yet in a slot are dropped
    /// when leadership is lost; clients retry (idempotently).
    RoleChanged {
        role: RoleKind,
        ballot: Ballot,
        leader: Option<NodeId>,
    },
}

/// What storage gave back at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durable<C, S> {
    pub promised: Ballot,
    pub accepted: BTreeMap<Slot, (Ballot, Value<C>)>,
    pub snapshot: Option<(Slot, S)>,
    /// The membership schedule recorded with `snapshot`; without a snapshot, the cluster's
    /// first membership as recorded (`picketd run --init` writes it, a joining replica records
    /// it once learned). `None`: not recorded (data of a version before it, or a replica that
    /// joins or lost its state): `Config::members` stands in for it.
    pub schedule: Option<Schedule>,
    /// Incarnation per replica (own and peers'); 0 when absent. Never decreases.
    pub incarnations: BTreeMap<NodeId, u64>,
    /// Storage lost or found damaged acknowledged state: the replica must not vote until it
    /// has re-learned from the other replicas.
    pub lost: bool,
}

impl<C, S> Default for Durable<C, S> {
    fn default() -> Self {
        Durable {
            promised: Ballot::ZERO,
            accepted: BTreeMap::new(),
            snapshot: None,
            schedule: None,
            incarnations: BTreeMap::new(),
            lost: false,
        }
    }
}

impl<C: Clone, S: Clone> Durable<C, S> {
    /// Applies a `Persist` action the way storage must, asserting that nothing goes backwards:
    /// the promised ballot never decreases and a slot's accepted ballot never decreases.
    pub fn apply_persist(&mut self, persist: &Persist<C, S>) {
        let Persist {
            promised,
            accepted,
            snapshot,
            schedule,
            incarnation,
            recovered,
            ..
        } = persist;
        let (promised, snapshot, incarnation, recovered) =
            (*promised, snapshot.as_ref(), *incarnation, *recovered);
        if let Some((node, inc)) = incarnation {
            let old = self.incarnations.get(&node).copied().unwrap_or(0);
            assert!(
                inc >= old,
                "incarnation of {node} went backwards: {inc} < {old}"
            );
            self.incarnations.insert(node, inc);
        }
        if let Some(p) = promised {
            assert!(
                p >= self.promised,
                "promised ballot went backwards: {p} < {}",
                self.promised
            );
            self.promised = p;
        }
        for (slot, ballot, value) in accepted {
            if let Some((old, _)) = self.accepted.get(slot) {
                assert!(
                    ballot >= old,
                    "accepted ballot at slot {slot} went backwards: {ballot} < {old}"
                );
            }
            self.accepted.insert(*slot, (*ballot, value.clone()));
        }
        if let Some((slot, snap)) = snapshot {
            if self.snapshot.as_ref().is_none_or(|(s, _)| s < slot) {
                self.snapshot = Some((*slot, snap.clone()));
                self.schedule = schedule.clone();
                self.accepted = self.accepted.split_off(&slot.next());
            }
        } else if schedule.is_some() && self.snapshot.is_none() {
            // The first membership, learned.
            self.schedule = schedule.clone();
        }
        if recovered {
            self.lost = false;
        }
    }
}

/// A proposal or read the replica refuses; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProposeError {
    #[error("not the leader (leader hint: {leader_hint:?})")]
    NotLeader { leader_hint: Option<NodeId> },
    #[error("busy: {pending} pending, at most {max}")]
    Busy { pending: usize, max: usize },
}

/// A membership change the leader refuses; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReconfigError {
    #[error("not the leader (leader hint: {leader_hint:?})")]
    NotLeader { leader_hint: Option<NodeId> },
    #[error("{0}")]
    Invalid(#[from] MembershipError),
    #[error("one membership change at a time: the change to {0} is not chosen yet")]
    NotChosen(String),
    #[error(
        "one membership change at a time: the change to {pending} is chosen but not in effect \
         yet (it governs the log from slot {from})"
    )]
    NotInEffect { pending: String, from: Slot },
    #[error("the membership is already {0}")]
    Unchanged(String),
    #[error(
        "only {reachable} of the new voters answered within the election timeout and {quorum} \
         are needed for a quorum of the new membership (force to change it anyway)"
    )]
    Unreachable { reachable: usize, quorum: usize },
}

/// A driver mistake in `step`; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum StepError {
    #[error("Persisted {{ id: {id} }} acknowledges a persist never issued (last issued {issued})")]
    PersistedUnknown { id: PersistId, issued: PersistId },
}

/// A caller mistake in `compact`; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompactError {
    #[error("cannot compact at slot {slot}: only slots <= applied {applied} may be compacted")]
    NotApplied { slot: Slot, applied: Slot },
    #[error("cannot compact at slot {slot}: already compacted at {snapshot}")]
    Stale { slot: Slot, snapshot: Slot },
}
