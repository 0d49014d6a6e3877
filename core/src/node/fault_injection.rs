//! **Fault injection for the simulation only** (`--cfg madsim`; compiled out of every other
//! build): deliberately broken behaviour of the real core, switched on by the simulation
//! harness to show that its checkers catch real bugs (`docs/simulation.md`, "The checkers
//! bite"). Nothing here is reachable from picketd.
//!
//! The switches live in a thread-local (the simulator runs every node on one thread); the
//! harness sets them at the start of each run (a run that sets none clears the last run's).

use std::cell::Cell;

use crate::locks::{Revision, Token};
use crate::paxos::NodeId;
use crate::time::Instant;

/// Tokens wrap at this many revisions under [`Faults::token_wrap`].
pub const TOKEN_WRAP_REVISIONS: u64 = 64;

/// The deliberately broken behaviours, all off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// This replica applies each batch at its **own** clock instead of the leader's stamp: a
    /// non-deterministic apply, so its state (log time, session and hold times) diverges from
    /// the other replicas' at the same revision.
    pub apply_with_local_clock: Option<NodeId>,
    /// Fresh grants take a token that wraps every [`TOKEN_WRAP_REVISIONS`] revisions (a token
    /// truncated to a narrow counter): a key's tokens stop rising, i.e. tokens are reused.
    pub token_wrap: bool,
    /// Waits expire late: a hand-off no longer removes the expired waits at the head of its
    /// queue (`LockStateMachine::hand_off_expires_waits`, cluster version 2), the leader writes
    /// no `ExpireWaits` before a hand-off at cluster version 1 (`node::waits`), and it proposes
    /// its own `ExpireWaits` [`LATE_WAIT_EXPIRY_MS`] after a deadline passed, so a hand-off in
    /// between grants a wait whose deadline passed.
    pub late_wait_expiry: bool,
}

/// How late the leader proposes `ExpireWaits` under [`Faults::late_wait_expiry`].
pub const LATE_WAIT_EXPIRY_MS: u64 = 1_000;

thread_local! {
    static FAULTS: Cell<Faults> = const { Cell::new(Faults { apply_with_local_clock: None, token_wrap: false, late_wait_expiry: false }) };
}

/// Switches the faults for the run that starts now (replaces the previous run's).
pub fn set(faults: Faults) {
    FAULTS.with(|f| f.set(faults));
}

/// The faults switched on.
pub fn get() -> Faults {
    FAULTS.with(Cell::get)
}

/// The stamp `node` applies a batch at: the leader's `stamp`, or its own `now` under
/// [`Faults::apply_with_local_clock`].
pub(crate) fn apply_stamp(node: NodeId, stamp: Instant, now: Instant) -> Instant {
    if get().apply_with_local_clock == Some(node) {
        now
    } else {
        stamp
    }
}

/// The token of a grant at `revision`: `Token::at(revision)`, or a wrapped one under
/// [`Faults::token_wrap`] (never above the revision).
pub(crate) fn grant_token(revision: Revision) -> Token {
    if get().token_wrap && revision.0 > 0 {
        Token((revision.0 - 1) % TOKEN_WRAP_REVISIONS + 1)
    } else {
        Token::at(revision)
    }
}
