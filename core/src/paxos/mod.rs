//! A hand-written Multi-Paxos replica, sans IO.
//!
//! [`Replica`] is one replica of a static 3- or 5-member cluster, generic over the command type
//! `C` and the state machine's snapshot type `S`. It reads no clock, does no IO and draws no
//! unseeded randomness: every input comes through [`Replica::step`], [`Replica::propose`],
//! [`Replica::read_index`] and [`Replica::compact`]; every output leaves through one FIFO,
//! [`Replica::poll_action`], plus [`Replica::poll_timeout`].
//!
//! The driver loop (what `server` does with real disks and sockets):
//!
//! ```
//! use picket_core::paxos::{Action, Config, Durable, Input, NodeId, Persist, Replica};
//! use picket_core::time::Instant;
//!
//! let members = vec![NodeId(1), NodeId(2), NodeId(3)];
//! let mut replica: Replica<String, Vec<String>> =
//!     Replica::new(Config::new(NodeId(1), members, 42), Durable::default(), Instant::ZERO).unwrap();
//! let mut now = Instant::ZERO;
//! let mut state_machine: Vec<String> = Vec::new();
//! for _ in 0..10 {
//!     // 1. Feed inputs: due timeouts (and, in a real driver, peer messages and fsync acks).
//!     if let Some(deadline) = replica.poll_timeout() {
//!         now = now.max(deadline);
//!         replica.step(now, Input::Timeout).unwrap();
//!     }
//!     // 2. Drain the outputs in order.
//!     while let Some(action) = replica.poll_action() {
//!         match action {
//!             Action::Persist(Persist { id, .. }) => {
//!                 // write + fsync, then acknowledge (here: at once)
//!                 replica.step(now, Input::Persisted { id }).unwrap();
//!             }
//!             Action::Send { to, msg } => { let _ = (to, msg); /* hand to the transport */ }
//!             Action::Apply { value, .. } => state_machine.push(format!("{value}")),
//!             Action::InstallSnapshot { snapshot, .. } => state_machine = snapshot,
//!             Action::ReadReady { .. } | Action::ReadFailed { .. } => {}
//!             Action::RoleChanged { .. } => {}
//!         }
//!     }
//! }
//! // Alone, the replica asked for pre-votes but could not become leader.
//! assert!(replica.counters().elections_started == 0);
//! assert!(state_machine.is_empty());
//! ```
//!
//! Ordering rules live here, not in the driver: a `Promise` or `Accepted` is only emitted after
//! the `Persist` it depends on was acknowledged, so every `Send` may go out at once.
//!
//! # API in one screen
//!
//! - [`Replica::new`]`(Config, Durable<C, S>) -> Result<Replica, ConfigError>`; a restored snapshot
//!   comes out first as `Action::InstallSnapshot`. `Durable { promised, accepted, snapshot,
//!   incarnations, lost }`; storage applies `Persist` actions with [`Durable::apply_persist`]
//!   semantics.
//! - [`Replica::step`]`(now, Input) -> Result<(), StepError>` with `Input::Message { from, msg }`,
//!   `Input::Timeout` (when `now >= poll_timeout()`), `Input::Persisted { id }` (that persist and
//!   every earlier one are durable).
//! - [`Replica::propose`]`(now, C)` / [`Replica::propose_many`]`(now, Vec<C>)` ->
//!   `Result<(), ProposeError>` (`NotLeader { leader_hint }`, `Busy { pending, max }`); commands
//!   come back as `Action::Apply` of a `Value::Batch { stamp, commands }` once chosen.
//! - [`Replica::read_index`]`(now) -> Result<ReadId, ProposeError>`; then `Action::ReadReady { id,
//!   slot_applied_min }` (already applied: serve it now) or `Action::ReadFailed { id }`.
//! - [`Replica::compact`]`(slot, S) -> Result<(), CompactError>`: the state machine's snapshot
//!   as of applied `slot`; [`Replica::take_retired`] then hands over the log it cut, to be
//!   freed off the caller's hot path.
//! - [`Replica::poll_action`] -> `Action::{Persist { id, promised, accepted, snapshot,
//!   snapshot_local, incarnation, recovered }, Send { to, msg }, Apply { slot, value }, InstallSnapshot { slot,
//!   snapshot }, ReadReady, ReadFailed, RoleChanged { role, ballot, leader }}`;
//!   [`Replica::poll_timeout`] -> `Option<Instant>`.
//! - Inspection: `role()`, `leader()`, `ballot_promised()`, `slot_applied()`, `slot_chosen()`,
//!   `slot_snapshot()`, `is_amnesiac()`, `counters()`, `accepted_at(slot)`.
//!
//! The state machine applies `Value::Batch` commands in order and ignores `Value::Noop`; log time
//! is `max(previous, stamp)`. When leadership is lost (`RoleChanged` to a non-leader role) queued
//! commands are dropped and in-flight ones may or may not be chosen: clients retry idempotently.
//!
//! Protocol and invariants: `docs/protocol.md`. Words: `docs/glossary.md`.

mod acceptor;
mod ballot;
mod config;
mod election;
mod io;
mod leader;
mod learner;
mod membership;
mod message;
mod quorum;
mod read_index;
mod recovery;
mod replica;

#[cfg(test)]
mod tests;

pub use ballot::{Ballot, NodeId, Slot, Value};
pub use config::{
    lease_margin_ms, Config, ConfigError, CLOCK_DRIFT_PPM_DEFAULT, RECONFIG_DELAY_SLOTS_DEFAULT,
};
pub use io::{
    Action, CompactError, Durable, Input, Persist, PersistId, ProposeError, ReadId, ReconfigError,
    RoleKind, StepError,
};
pub use learner::{Retired, CATCHUP_ENTRIES_MAX};
pub use membership::{
    MemberAddress, Membership, MembershipError, Schedule, ACTOR_MAX, ADDRESS_MAX, MEMBERS_MAX,
    REASON_MAX,
};
pub use message::{AcceptedEntry, Message};
pub use quorum::Votes;
pub use replica::{Counters, Replica};
