//! What a simulation records: the history the checkers judge. Plain data, filled by the harness
//! (replica observers, clients, the fenced resource, the nemesis) and read by [`crate::checkers`].
//!
//! Times are **simulated** milliseconds since the start of the run, as the harness (not a node's
//! drifting clock) sees them: the checkers judge against true time.

use std::collections::BTreeMap;
use std::fmt;

/// A grant as a replica applied it (read from its watch log after each apply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantSeen {
    pub node: u64,
    /// The replica's boot (start) number: grants are seen again after a restart.
    pub boot: u64,
    pub revision: u64,
    /// `namespace/key`.
    pub key: String,
    pub token: u64,
    pub session: u64,
    /// A semaphore permit's slot (the watch event's `slot`); `None` for a lock.
    pub slot: Option<u32>,
}

/// A replica's state digest after applying through `revision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestSeen {
    pub node: u64,
    pub boot: u64,
    pub revision: u64,
    pub digest: u64,
}

/// The mode a key was granted in: a lock's (exclusive or shared) or a semaphore permit, with
/// the slot the client's guard reports (`LockGuard::slot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Exclusive,
    Shared,
    Permit { slot: u32 },
}

/// The mode an acquire asked for (a permit's slot is known only once it is granted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    Exclusive,
    Shared,
    Permit,
}

/// How a holder used the fenced resource: an exclusive holder writes (`FencingGate::check`), a
/// permit holder writes in its slot (`FencingGate::check_slot`), a shared holder reads
/// (`FencingGate::check_read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Write,
    Read,
}

/// An access the fenced resource accepted, in acceptance order (reads and writes in one list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub key: String,
    pub token: u64,
    pub client: u64,
    pub at_ms: u64,
    pub access: Access,
    /// A permit holder's write: its slot (the gate fenced it per slot).
    pub slot: Option<u32>,
}

/// An access the fenced resource refused, with where it fell in the acceptance order (checker
/// 8: the gate must accept the restored cluster's accesses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub key: String,
    pub token: u64,
    pub client: u64,
    pub at_ms: u64,
    pub access: Access,
    pub slot: Option<u32>,
    /// How many accesses the resource had accepted before it (`History::accepted`'s length).
    pub accepted_before: usize,
}

/// The loss of the whole cluster and its restore from an older backup
/// (`Fault::LoseClusterRestore`): what checker 8 needs to tell the old cluster's grants from
/// the new one's, and what the other checkers need to know a restore drops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreSeen {
    /// The backup's revision (its state's) and the restored revision F (every new token is
    /// above it).
    pub backup_revision: u64,
    pub floor: u64,
    /// When every replica was killed and its disk destroyed.
    pub lost_at_ms: u64,
    /// When the restored replicas started (nothing runs in between; every answer of the old
    /// cluster arrived before it).
    pub restarted_at_ms: u64,
    /// Each replica's last boot of the old cluster: the watchers' grants of a node at a boot at
    /// or below it are the old cluster's; later boots (and nodes not listed) are the new one's.
    pub boots_before: BTreeMap<u64, u64>,
    /// `History::acked`'s length when the restored replicas started: releases and
    /// force-releases before it were acknowledged by the old cluster (they are recorded as their
    /// answer arrives; a grant is told apart by its session, `History::sessions_opened`).
    pub acked_before: usize,
    /// `History::accepted`'s length when the restored replicas started.
    pub accepted_before: usize,
}

impl RestoreSeen {
    /// A watcher's grant of `node` at `boot` came from the cluster after this restore.
    pub fn after_by_boot(&self, node: u64, boot: u64) -> bool {
        boot > self.boots_before.get(&node).copied().unwrap_or(0)
    }

    /// A session opened at `opened_at_ms` belongs to the cluster after this restore.
    pub fn after_by_time(&self, opened_at_ms: u64) -> bool {
        opened_at_ms >= self.restarted_at_ms
    }
}

/// An operation whose success a client was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckedOp {
    Grant {
        key: String,
        token: u64,
        session: u64,
        mode: Mode,
    },
    Release {
        key: String,
        token: u64,
    },
    ForceRelease {
        key: String,
        token: u64,
    },
}

/// An event of a replica's lock log about a session's wait or hold (the watchers record every
/// one, per replica boot, in log order): the evidence of checker 7.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEvent {
    pub node: u64,
    pub boot: u64,
    pub revision: u64,
    /// The log time of the revision (the leader's stamp, as the state machine keeps it).
    pub time_ms: u64,
    /// `namespace/key`.
    pub key: String,
    pub session: u64,
    pub kind: LogKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    Queued,
    Granted {
        token: u64,
    },
    /// The wait ended without a grant.
    WaitRemoved {
        cause: WaitCause,
    },
    /// The session's hold ended (released, its session's end, force-released).
    HoldEnded {
        token: u64,
    },
}

/// Why a wait was removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitCause {
    Cancelled,
    Expired,
    /// Its session ended (closed, expired, revoked).
    SessionEnded,
}

/// How a workload client asked for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// `try_lock` / `try_lock_shared` / `try_acquire_permit`: no wait.
    Try,
    /// A waiting call (`lock_within` with the session's deadline for the key, or `lock`)
    /// awaited until it answers (a call without a deadline is dropped after `ms`).
    Wait { ms: u64 },
    /// A waiting call dropped after `ms` (the library cancels the wait in the background).
    DropAfter { ms: u64 },
    /// A waiting call, and after `ms` an explicit `cancel_wait` while it is pending.
    CancelAfter { ms: u64 },
}

/// What the waiting (or trying) call answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted {
        token: u64,
    },
    /// `Held`: the key was taken (a try).
    Busy,
    /// `WaitTimedOut`: the server removed the wait at its deadline.
    TimedOut,
    /// Dropped by the client before it answered.
    Dropped,
    /// Any other error (the wait cancelled, the session lost, the cluster unavailable).
    Failed,
}

/// The answer to an explicit `cancel_wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CancelSeen {
    pub removed: bool,
    pub held_token: Option<u64>,
    /// The revision that answered.
    pub revision: u64,
}

/// One acquire a workload client made, and what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub client: u64,
    pub session: u64,
    /// `namespace/key`.
    pub key: String,
    pub mode: Asked,
    pub ask: Ask,
    /// The server-side wait deadline asked (`lock_within`), if any.
    pub timeout_ms: Option<u64>,
    pub outcome: Outcome,
    /// The explicit cancel's answer (`Ask::CancelAfter`, when it was sent).
    pub cancel: Option<CancelSeen>,
}

/// A grant a client was told of, and when (simulated ms since the run's start, read after the
/// call returned: never before the answer arrived). A grant's token is its revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantAcked {
    pub at_ms: u64,
    pub token: u64,
}

/// A linearizable read (`Inspect` without `allow_stale`) a client was answered: when it was
/// asked (read before the call), and the revision of the state it answered from (checker 9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadSeen {
    pub client: u64,
    /// `namespace/key`.
    pub key: String,
    pub started_ms: u64,
    pub answered_ms: u64,
    pub revision: u64,
}

/// A keepalive the leader acknowledged; `sent_at_ms` is when the client sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepAliveAcked {
    pub session: u64,
    pub sent_at_ms: u64,
    pub ttl_ms: u64,
}

/// A replica seen taking over as leader. The takeover happened within `observed_within_ms`
/// before `at_ms` (the server driver polls the role; the sim-local driver sees it at once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderSeen {
    pub node: u64,
    pub at_ms: u64,
    pub observed_within_ms: u64,
}

/// A session that disappeared from a replica's state without its client closing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionGone {
    pub session: u64,
    pub at_ms: u64,
    pub node: u64,
}

/// What happened to a key, as a replica recorded it after the final restart of every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FinalKind {
    Granted,
    Released,
    ForceReleased,
}

/// A replica after the final restart of every node, once it has caught up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinalReplica {
    pub node: u64,
    pub revision: u64,
    /// Events the replica holds are complete from this revision on (older ones were compacted).
    pub events_from: u64,
    pub events: Vec<(u64, String, FinalKind, u64)>,
}

/// Everything one run recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub grants: Vec<GrantSeen>,
    pub digests: Vec<DigestSeen>,
    /// The fenced resource's accepted writes and reads, in acceptance order.
    pub accepted: Vec<Accepted>,
    pub acked: Vec<AckedOp>,
    /// When each grant of `acked` was acknowledged (checker 9's evidence of what a read must see).
    pub grants_acked: Vec<GrantAcked>,
    /// The linearizable reads the clients were answered (runs with reads only, checker 9).
    pub reads: Vec<ReadSeen>,
    /// Every wait and hold event of every replica boot's lock log (checker 7).
    pub log: Vec<LogEvent>,
    /// Every acquire of the workload's clients (checker 7; mode and deadline evidence).
    pub attempts: Vec<Attempt>,
    /// The semaphores declared at the start of the run (`namespace/key` -> N permits), as
    /// their `SetSemaphore` was acknowledged: checker 2 judges every permit's slot below N.
    pub semaphores: BTreeMap<String, u32>,
    pub keepalives: Vec<KeepAliveAcked>,
    pub sessions_gone: Vec<SessionGone>,
    pub leaders: Vec<LeaderSeen>,
    /// Sessions their clients closed (not expiries).
    pub sessions_closed: Vec<u64>,
    pub final_replicas: Vec<FinalReplica>,
    /// When the nemesis healed the last fault.
    pub healed_at_ms: Option<u64>,
    /// When the probe acquire after the heal was granted.
    pub probe_granted_at_ms: Option<u64>,
    /// The clocks' drift bound the run promised (parts per million).
    pub drift_bound_ppm: u64,
    /// Liveness bound: the probe must be granted this long after the heal at most.
    pub liveness_bound_ms: u64,
    /// Real-driver runs: a synced log record of `node` was damaged while it was down, before
    /// its start number `boot`.
    pub synced_damage: Vec<SyncedDamage>,
    /// Real-driver runs: how each start's storage recovery ended (`/healthz`'s
    /// `storage.recovery`: `clean`, `torn_tail_cut`, `durable_state_lost`).
    pub recoveries: Vec<RecoverySeen>,
    /// Accesses the fenced resource refused (checker 8).
    pub refused: Vec<Refused>,
    /// Every session a client or probe opened, with when its creation was answered.
    pub sessions_opened: BTreeMap<u64, u64>,
    /// Losses of the whole cluster and restores from an older backup (at most one per run).
    pub restores: Vec<RestoreSeen>,
    /// Membership changes that did not complete within their bound after the faults healed,
    /// and members not ready within their bound after the full restart (checker 6), in words.
    pub membership_failures: Vec<String>,
}

/// A synced record damaged on a replica's disk while it was down (the nemesis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncedDamage {
    pub node: u64,
    /// The start that recovers from the damage.
    pub boot: u64,
}

/// How one start of a replica recovered its storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoverySeen {
    pub node: u64,
    pub boot: u64,
    pub outcome: String,
}

/// A broken rule, named by its checker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub checker: Checker,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.checker.name(), self.detail)
    }
}

/// The eight checkers (docs/simulation.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Checker {
    TokensRise,
    Fencing,
    AppliedPrefix,
    NoAckedLoss,
    SessionKept,
    Liveness,
    WaitsEnd,
    NoRewind,
    ReadsLinearizable,
}

impl Checker {
    pub const ALL: [Checker; 9] = [
        Checker::TokensRise,
        Checker::Fencing,
        Checker::AppliedPrefix,
        Checker::NoAckedLoss,
        Checker::SessionKept,
        Checker::Liveness,
        Checker::WaitsEnd,
        Checker::NoRewind,
        Checker::ReadsLinearizable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Checker::TokensRise => "tokens-rise",
            Checker::Fencing => "fencing",
            Checker::AppliedPrefix => "applied-prefix",
            Checker::NoAckedLoss => "no-acked-loss",
            Checker::SessionKept => "session-kept",
            Checker::Liveness => "liveness",
            Checker::WaitsEnd => "waits-end",
            Checker::NoRewind => "no-rewind",
            Checker::ReadsLinearizable => "reads-linearizable",
        }
    }
}

/// FNV-1a, 64 bits: a stable hash for digests and the event trace (std's hasher is not
/// promised stable across releases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn of(bytes: &[u8]) -> u64 {
        let mut h = Fnv::default();
        h.write(bytes);
        h.0
    }
}
