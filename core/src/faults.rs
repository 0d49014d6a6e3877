//! The fault switchboard: every planted bug and every injected fault of Picket, as one plain
//! value, [`Faults`], carried in the configurations of the code it breaks — the replica's
//! (`paxos::Config::faults`, which the node and its state machine read too), the log's
//! (`picket_storage::LogConfig::faults`) and the server's (`picket_server::config::Config::faults`,
//! which the driver and the peer transport read). Like FoundationDB's `BUGGIFY`, the faults sit
//! in the production code paths themselves, so a test breaks the very code that ships.
//!
//! Every switch is off by default ([`Faults::NONE`]). No file, flag or environment variable sets
//! one: picketd never runs with a fault. Tests set them in the configuration they build (the
//! in-memory cluster of `testkit`, the fuzz targets, the simulation's `--break NAME` and its
//! `buggify` plan), one value per replica, so two runs in one process never share a switch.
//!
//! Two kinds of switches:
//!
//! - **planted bugs**: a deliberately broken rule, switched on to show that a checker catches
//!   it (`docs/simulation.md`, "The checkers bite"; `core/tests/paxos_reconfig.rs`);
//! - **injected faults** ([`Faults::buggify`]): the server's buggify points, faults a correct
//!   replica must shrug off (lossy, duplicating, reordering peer links; slow fsyncs). They draw
//!   from the simulator's seeded RNG, so they act only in the simulation (`--cfg madsim`);
//!   elsewhere the switch is read and ignored.

use crate::locks::{Revision, Token};
use crate::paxos::NodeId;
use crate::time::Instant;

/// Tokens wrap at this many revisions under [`Faults::token_wrap`].
pub const TOKEN_WRAP_REVISIONS: u64 = 64;

/// How late the leader proposes `ExpireWaits` under [`Faults::late_wait_expiry`].
pub const LATE_WAIT_EXPIRY_MS: u64 = 1_000;

/// The switches, all off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Planted bug (`--break digest-mutation`): this replica applies each batch at its **own**
    /// clock instead of the leader's stamp: a non-deterministic apply, so its state (log time,
    /// session and hold times) diverges from the other replicas' at the same revision.
    pub apply_with_local_clock: Option<NodeId>,
    /// Planted bug (`--break token-reuse`): fresh grants take a token that wraps every
    /// [`TOKEN_WRAP_REVISIONS`] revisions (a token truncated to a narrow counter): a key's
    /// tokens stop rising, i.e. tokens are reused.
    pub token_wrap: bool,
    /// Planted bug (`--break late-expiry`): waits expire late: batches that hand keys over no
    /// longer begin with `ExpireWaits`, and the leader proposes its own `ExpireWaits`
    /// [`LATE_WAIT_EXPIRY_MS`] after a deadline passed, so a hand-off in between grants a wait
    /// whose deadline passed.
    pub late_wait_expiry: bool,
    /// Planted bug (`core/tests/paxos_reconfig.rs`): a membership change governs the log from
    /// the slot right after its own instead of α slots later, while the leader still has slots
    /// in flight that it sent to the old membership.
    pub reconfig_at_once: bool,
    /// Planted bug (`--break cut-synced`): log recovery forgets what was synced (no synced-end
    /// marker, commit records not counted as valid data after a bad record) and cuts a damaged
    /// last record as a torn tail, the rule before segment format version 2.
    pub old_tail_rule: bool,
    /// Planted bug (`--break peers-from-file`): the peer transport takes its peers from the
    /// config file again, as before issue 34 (the first membership's members are dialed and
    /// accepted only if the file names them; only members added by a change are reached at the
    /// log's addresses), so a replica that joined with a short contact list never reaches the
    /// members its file leaves out.
    pub peers_from_file: bool,
    /// Planted bug (`--break stale-read`): a replica answers every linearizable read from its
    /// own state, leader or not, as if `allow_stale` were set (no read index, no lease): a
    /// replica cut off from the leader, or a leader deposed without knowing it yet, answers from
    /// a state that misses grants the cluster acknowledged: checker 9 (reads-linearizable).
    pub reads_local: bool,
    /// Injected faults, simulation only: the server's buggify points are on (the peer
    /// transport's frame-fault layer drops, duplicates, delays and swaps received frames; 5% of
    /// group commits take a slow fsync). Drawn from the simulator's seeded RNG; ignored outside
    /// `--cfg madsim`.
    pub buggify: bool,
}

impl Faults {
    /// No fault: what every shipped build runs with.
    pub const NONE: Faults = Faults {
        apply_with_local_clock: None,
        token_wrap: false,
        late_wait_expiry: false,
        reconfig_at_once: false,
        old_tail_rule: false,
        peers_from_file: false,
        reads_local: false,
        buggify: false,
    };

    /// The stamp `node` applies a batch at: the leader's `stamp`, or its own `now` under
    /// [`Faults::apply_with_local_clock`].
    pub fn apply_stamp(&self, node: NodeId, stamp: Instant, now: Instant) -> Instant {
        if self.apply_with_local_clock == Some(node) {
            now
        } else {
            stamp
        }
    }

    /// The token of a fresh grant at `revision`: `Token::at(revision)`, or a wrapped one under
    /// [`Faults::token_wrap`] (never above the revision).
    pub fn grant_token(&self, revision: Revision) -> Token {
        if self.token_wrap && revision.0 > 0 {
            Token((revision.0 - 1) % TOKEN_WRAP_REVISIONS + 1)
        } else {
            Token::at(revision)
        }
    }

    /// How long after the earliest wait deadline the leader proposes `ExpireWaits`: 0, or
    /// [`LATE_WAIT_EXPIRY_MS`] under [`Faults::late_wait_expiry`].
    pub fn wait_expiry_late_ms(&self) -> u64 {
        if self.late_wait_expiry {
            LATE_WAIT_EXPIRY_MS
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_the_default_and_breaks_nothing() {
        let none = Faults::default();
        assert_eq!(none, Faults::NONE);
        let (stamp, now) = (Instant::from_millis(10), Instant::from_millis(99));
        assert_eq!(none.apply_stamp(NodeId(1), stamp, now), stamp);
        assert_eq!(none.grant_token(Revision(65)), Token::at(Revision(65)));
        assert_eq!(none.wait_expiry_late_ms(), 0);
    }

    #[test]
    fn each_planted_bug_changes_what_it_names() {
        let local = Faults {
            apply_with_local_clock: Some(NodeId(2)),
            ..Faults::NONE
        };
        let (stamp, now) = (Instant::from_millis(10), Instant::from_millis(99));
        assert_eq!(local.apply_stamp(NodeId(2), stamp, now), now);
        assert_eq!(local.apply_stamp(NodeId(1), stamp, now), stamp);
        let wrap = Faults {
            token_wrap: true,
            ..Faults::NONE
        };
        assert_eq!(wrap.grant_token(Revision(64)), Token(64));
        assert_eq!(wrap.grant_token(Revision(65)), Token(1));
        let late = Faults {
            late_wait_expiry: true,
            ..Faults::NONE
        };
        assert_eq!(late.wait_expiry_late_ms(), LATE_WAIT_EXPIRY_MS);
    }
}
