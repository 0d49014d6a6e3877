//! State the harness shares with every simulated node (one process, madsim's single-threaded
//! scheduler: a plain mutex, never held across an await). It holds the [`History`] the checkers
//! judge, the event trace hash, and what the nemesis needs to know (the leader, wedged replicas).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use picket_core::faults::Faults;
use picket_core::paxos::NodeId;
use picket_server::node::durable::EmptyDataDir;

use crate::history::{FinalKind, Fnv, History};
use crate::plan::Reads;

/// A deliberately broken build, to show that each checker bites (`docs/simulation.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// Fresh grants take a token that wraps every 64 revisions (core fault `token_wrap`): a
    /// key's tokens stop rising, checker 1.
    TokenReuse,
    /// The resource's gate is bypassed and clients ignore the lost-lock signal (they write again
    /// with their old token after release): checker 2.
    GateBypass,
    /// Replica 1 applies each batch at its own clock instead of the leader's stamp (core fault
    /// `apply_with_local_clock`): its state digest diverges, checker 3.
    DigestMutation,
    /// The replicas' disk answers fsync without making anything durable (`NoSyncDisk`), so
    /// the driver acknowledges what a crash loses: checker 4.
    AckBeforeSync,
    /// Replica clocks run 50% fast, beyond the drift bound: checker 5.
    FastClock,
    /// The nemesis leaves a majority cut off at the end: checker 6.
    NoHeal,
    /// Log recovery forgets what was synced and cuts a damaged last record as a torn tail (the
    /// rule before segment format version 2): checker 4. Real-driver runs only.
    CutSynced,
    /// The resource skips `check_read` for shared holders' reads, and readers ignore the
    /// lost-lock signal (they read again with their old token after release): checker 2.
    ReadBypass,
    /// A client keeps a wait it cancelled: after its `cancel_wait` was answered `removed`, it
    /// asks again for the key in the same call (a library that re-queues the wait under a new
    /// request id) and takes the grant as the cancelled wait's: checker 7.
    RequeueCancelled,
    /// Waits expire late (core fault `late_wait_expiry`): a hand-off no longer removes the
    /// expired waits at the head of its queue (nor is an `ExpireWaits` written before it at
    /// cluster version 1), and the leader's own `ExpireWaits` comes 1 s after a deadline, so a
    /// release in between hands the key to a wait whose deadline passed: checker 7.
    LateExpiry,
    /// The resource skips `check_slot` for semaphore permit holders' writes, and permit holders
    /// ignore the lost-lock signal (they write again in their slot with their old token after
    /// release): checker 2, per slot.
    SlotBypass,
    /// The transport takes its peers from the config file again, as before issue 34
    /// (the planted bug `Faults::peers_from_file`): a replica that joined with a
    /// contact list not naming the leader is never promoted, one that leads never reaches the
    /// voters its file leaves out: checker 6 (liveness). Membership scenario.
    PeersFromFile,
    /// A restore with `--bump-revision 1` instead of the default 2^40 (`restore_floor` with the
    /// smallest bump it takes): the restored cluster's tokens start just above the backup's
    /// revision, at or below tokens the old cluster granted after the backup: checker 8.
    RestoreNoBump,
    /// Every replica answers linearizable reads from its own state, leader or not (the planted
    /// bug `Faults::reads_local`): a replica cut off from the leader answers reads from a state
    /// that misses grants the cluster acknowledged: checker 9. Bites only in runs with reads
    /// (`--reads read-index` or `lease`).
    StaleRead,
}

impl Break {
    pub const ALL: [Break; 14] = [
        Break::TokenReuse,
        Break::GateBypass,
        Break::DigestMutation,
        Break::AckBeforeSync,
        Break::FastClock,
        Break::NoHeal,
        Break::CutSynced,
        Break::ReadBypass,
        Break::RequeueCancelled,
        Break::LateExpiry,
        Break::SlotBypass,
        Break::PeersFromFile,
        Break::RestoreNoBump,
        Break::StaleRead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Break::TokenReuse => "token-reuse",
            Break::GateBypass => "gate-bypass",
            Break::DigestMutation => "digest-mutation",
            Break::AckBeforeSync => "ack-before-sync",
            Break::FastClock => "fast-clock",
            Break::NoHeal => "no-heal",
            Break::CutSynced => "cut-synced",
            Break::ReadBypass => "read-bypass",
            Break::RequeueCancelled => "requeue-cancelled",
            Break::LateExpiry => "late-expiry",
            Break::SlotBypass => "slot-bypass",
            Break::PeersFromFile => "peers-from-file",
            Break::RestoreNoBump => "restore-no-bump",
            Break::StaleRead => "stale-read",
        }
    }

    pub fn parse(name: &str) -> Option<Break> {
        Break::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// A replica's newest membership, from its status (the sim's reading of the runbook's
/// `picket_paxos_slot_applied` and `picket_cluster_config_revision`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipSeen {
    /// When the status was read (simulated ms since the run's start).
    pub at_ms: u64,
    /// The members of the newest membership its log scheduled.
    pub members: Vec<NodeId>,
    /// The first slot that membership governs, and the last slot applied here.
    pub from_slot: u64,
    pub slot_applied: u64,
}

impl MembershipSeen {
    /// The newest membership leaves `old` out and is in effect here.
    pub fn in_effect_without(&self, old: NodeId) -> bool {
        !self.members.contains(&old) && self.slot_applied >= self.from_slot
    }
}

/// Events a replica's current boot has seen, for the final check.
#[derive(Clone, Debug, Default)]
pub struct BootEvents {
    pub events_from: u64,
    pub events: Vec<(u64, String, FinalKind, u64)>,
}

pub struct Shared {
    pub history: History,
    pub trace: Fnv,
    pub trace_lines: u64,
    pub start: tokio::time::Instant,
    pub broken: Option<Break>,
    /// The faults every replica of the run starts with (`picket_server::config::Config::faults`):
    /// the planted bug of `broken`, if it lives in the real code, and the plan's buggify switch.
    pub faults: Faults,
    /// Every replica runs with `[storage] persist = "thread"` (`Plan::persist_thread`).
    pub persist_thread: bool,
    /// Reads in the workload and the replicas' read mode (`Plan::reads`).
    pub reads: Reads,
    /// Each boot's slow fsyncs (`DriverCounters::slow_fsyncs`), as of its last status read.
    pub slow_fsyncs: BTreeMap<(NodeId, u64), u64>,
    /// The last replica that reported itself leader.
    pub leader: Option<NodeId>,
    /// Replicas whose store failed; restarted by the nemesis.
    pub wedged: BTreeSet<NodeId>,
    /// Applied revision per replica.
    pub applied: BTreeMap<NodeId, u64>,
    /// Each replica's last status read: when, and its newest membership as the runbook's check
    /// reads it (docs/runbooks/replace-machine.md, step 5).
    pub membership_seen: BTreeMap<NodeId, MembershipSeen>,
    pub boot_events: BTreeMap<NodeId, BootEvents>,
    /// Starts per replica, and how far each replica's watcher has read.
    pub boots: BTreeMap<NodeId, u64>,
    pub watched: BTreeMap<NodeId, u64>,
    /// What the next start of a replica does with an empty data directory (set by the nemesis
    /// for a wiped disk; taken by the start). Absent: `--init` at the first start, refuse after.
    pub start_as: BTreeMap<NodeId, EmptyDataDir>,
    /// The boot of each replica whose start refused an empty data directory (the last one).
    pub refused: BTreeMap<NodeId, u64>,
    /// Clients stop their workload (and abandon their sessions).
    pub clients_stop: bool,
    /// A replica's contact list (itself included) for its next starts: it starts with
    /// `join = true` and these members only (set for a wiped disk that rejoins with one).
    pub contacts: BTreeMap<NodeId, Vec<NodeId>>,
    /// Whether each replica served at its last status poll (`/healthz` ready).
    pub ready: BTreeMap<NodeId, bool>,
    /// The cluster a restore made (`Fault::LoseClusterRestore`): every later start of a replica
    /// uses its cluster id, and its members unless a contact list was set since.
    pub restored: Option<RestoredCluster>,
    /// Counters for the summary.
    pub counters: BTreeMap<&'static str, u64>,
    /// The run's semaphores (key in [`super::real::NAMESPACE`], N permits), drawn from the
    /// seed; declared by the operator node, asked for by the clients.
    pub semaphores: Vec<(String, u32)>,
}

/// What a restored replica's configuration says (the new cluster's, as `picketd restore` needs).
#[derive(Clone, Debug)]
pub struct RestoredCluster {
    pub cluster_id: String,
    pub members: Vec<NodeId>,
}

pub type SharedRef = Arc<Mutex<Shared>>;

impl Shared {
    pub fn new(broken: Option<Break>, faults: Faults, persist_thread: bool) -> SharedRef {
        Arc::new(Mutex::new(Shared {
            history: History::default(),
            trace: Fnv::default(),
            trace_lines: 0,
            start: tokio::time::Instant::now(),
            broken,
            faults,
            persist_thread,
            reads: Reads::Off,
            slow_fsyncs: BTreeMap::new(),
            leader: None,
            wedged: BTreeSet::new(),
            applied: BTreeMap::new(),
            membership_seen: BTreeMap::new(),
            boot_events: BTreeMap::new(),
            boots: BTreeMap::new(),
            watched: BTreeMap::new(),
            start_as: BTreeMap::new(),
            refused: BTreeMap::new(),
            clients_stop: false,
            contacts: BTreeMap::new(),
            restored: None,
            ready: BTreeMap::new(),
            counters: BTreeMap::new(),
            semaphores: Vec::new(),
        }))
    }

    /// Simulated milliseconds since the run started.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Adds a line to the event trace (its hash is the run's fingerprint).
    pub fn trace(&mut self, line: &str) {
        let stamp = self.now_ms().to_le_bytes();
        self.trace.write(&stamp);
        self.trace.write(line.as_bytes());
        self.trace.write(b"\n");
        self.trace_lines += 1;
        if std::env::var_os("PICKET_SIM_TRACE").is_some() {
            println!("{:>8} {line}", self.now_ms());
        }
    }

    pub fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_insert(0) += 1;
    }
}

pub fn lock(shared: &SharedRef) -> MutexGuard<'_, Shared> {
    // A poisoned lock means a node task panicked; the run is failing anyway.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}
