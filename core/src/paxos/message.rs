//! Peer messages. Plain Rust types: `proto` (picket-proto) encodes them; `core` never sees bytes.

use super::ballot::{Ballot, Slot, Value};
use super::membership::Schedule;

/// One accepted value as reported in a `Promise` or persisted: (slot, ballot, value).
pub type AcceptedEntry<C> = (Slot, Ballot, Value<C>);

/// A message between replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message<C, S> {
    /// "Would you vote for me at `round`?" Changes no state (pre-vote): a rejoining replica
    /// cannot depose a healthy leader by merely asking.
    PreVote { round: u64 },
    /// Answer to `PreVote`; granted only when the voter has not heard from a live leader.
    PreVoteReply { round: u64, granted: bool },
    /// Phase 1a over every slot >= `slot_from` (a range prepare). `incarnation` (here and in
    /// `Accept`/`Heartbeat`) is the sender's incarnation: a receiver drops ballot-bearing
    /// messages from an incarnation older than the one the sender fenced (see `Fence`).
    Prepare {
        ballot: Ballot,
        slot_from: Slot,
        incarnation: u64,
    },
    /// Phase 1b: the acceptor promised `ballot`; every slot <= `slot_applied` is chosen and
    /// known to it; slots <= `slot_snapshot` are covered by its durable snapshot; `accepted`
    /// lists its accepted values at slots >= `slot_from` above the snapshot.
    /// Sent only after the promise (and everything persisted before it) is durable.
    Promise {
        ballot: Ballot,
        slot_applied: Slot,
        slot_snapshot: Slot,
        accepted: Vec<AcceptedEntry<C>>,
    },
    /// Phase 2a. `slot_chosen` is the leader's applied prefix (piggybacked commit point).
    Accept {
        ballot: Ballot,
        slot: Slot,
        value: Value<C>,
        slot_chosen: Slot,
        incarnation: u64,
    },
    /// Phase 2b, sent only after the acceptance is durable.
    Accepted { ballot: Ballot, slot: Slot },
    /// "Your `ballot` is below what I promised."
    Nack { ballot: Ballot, promised: Ballot },
    /// Leader liveness, commit point and read-index confirmation round `seq`. `lease_ms`
    /// (0: none; 0 from a replica of a version before read leases) asks the receiver to promise
    /// no ballot of another proposer for that long from when it receives this (a read lease,
    /// `read_index.rs`).
    Heartbeat {
        ballot: Ballot,
        slot_chosen: Slot,
        seq: u64,
        incarnation: u64,
        lease_ms: u64,
    },
    /// "At the time I received heartbeat `seq` I had promised nothing above `ballot`."
    /// `applied`: the last slot the sender had applied (0 from a replica of a version that did
    /// not say): how far behind a learner is, for its promotion.
    /// `lease_ms`: the lease granted (0: none; at most the one asked), counted by the sender
    /// from when it received heartbeat `seq`.
    HeartbeatAck {
        ballot: Ballot,
        seq: u64,
        applied: Slot,
        lease_ms: u64,
    },
    /// "Send me the chosen values from `slot_from` on (or a snapshot)."
    CatchupRequest { slot_from: Slot },
    /// Chosen values, consecutive, starting right after the snapshot if there is one. With a
    /// snapshot, `schedule` is the membership schedule as of it (`None` from a replica of a
    /// version without membership changes: the first membership). Without one, entries from
    /// slot 1 (possibly none) come with the sender's whole schedule, the cluster's first
    /// membership included, when it knows it (`None` otherwise, and from older versions).
    CatchupReply {
        snapshot: Option<(Slot, S)>,
        schedule: Option<Schedule>,
        entries: Vec<(Slot, Value<C>)>,
    },
    /// Recovery round 1: an amnesiac replica asks which incarnation of it the peer knows.
    RecoverQuery { nonce: u64 },
    /// Answer to `RecoverQuery`, with the highest slot the peer applied (chosen): the asker
    /// catches up to it and holds it under a durable snapshot before it goes on, so that
    /// recovery runs over the memberships of the slots after it, not over older ones (whose
    /// members may be gone). 0 from a replica of a version before this field.
    RecoverReply {
        nonce: u64,
        incarnation: u64,
        slot_applied: Slot,
    },
    /// Recovery round 2: "from now on drop my messages from incarnations below `incarnation`".
    Fence { nonce: u64, incarnation: u64 },
    /// Answer to `Fence`, sent once the fence is durable: the highest ballot promised.
    FenceAck { nonce: u64, promised: Ballot },
}

impl<C, S> Message<C, S> {
    /// Short name for traces and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::PreVote { .. } => "pre-vote",
            Message::PreVoteReply { .. } => "pre-vote-reply",
            Message::Prepare { .. } => "prepare",
            Message::Promise { .. } => "promise",
            Message::Accept { .. } => "accept",
            Message::Accepted { .. } => "accepted",
            Message::Nack { .. } => "nack",
            Message::Heartbeat { .. } => "heartbeat",
            Message::HeartbeatAck { .. } => "heartbeat-ack",
            Message::CatchupRequest { .. } => "catchup-request",
            Message::CatchupReply { .. } => "catchup-reply",
            Message::RecoverQuery { .. } => "recover-query",
            Message::RecoverReply { .. } => "recover-reply",
            Message::Fence { .. } => "fence",
            Message::FenceAck { .. } => "fence-ack",
        }
    }
}
