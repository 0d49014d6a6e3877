//! What the durable store tells the rest of the replica: why it failed, how recovery ended, its
//! counters, and how a background snapshot save ended.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use picket_core::node::NodeDurable;
use picket_core::paxos::Slot;
use picket_storage::Error as StorageError;
use thiserror::Error;

/// Why the durable state could not be opened or written. The replica stops: after a failed
/// write or fsync the state of the files is unknown (storage poisons itself).
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("boot record at {path} is malformed ({len} bytes, expected 16)")]
    BadBootRecord { path: PathBuf, len: usize },
    #[error(
        "data directory {dir} holds no replica state, and an empty directory is either a new \
         replica or one whose disk was replaced: only the operator knows which. For a replica of \
         a new cluster, start it once with --init. For a replica that ran before and lost its \
         disk, start it with --rejoin: it re-learns its state from the other replicas before it \
         votes (all of them must be up). Never --init a replica that ran before: with its \
         promises forgotten it could help choose a second value for a slot"
    )]
    Uninitialized { dir: PathBuf },
}

/// What [`DurableStore::open`] does with a data directory that holds no state of the replica
/// (no boot record and no log): `picketd run` refuses it unless told which case it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmptyDataDir {
    /// Refuse to start (`StoreError::Uninitialized`); nothing is created.
    Refuse,
    /// A replica of a new cluster: start with empty durable state (`picketd run --init`, the
    /// dev cluster, tests).
    Init,
    /// A replica that ran before and lost its disk: start in *durable state lost* mode, not
    /// voting or accepting until it has re-learned its state (`picketd run --rejoin`).
    Rejoin,
}

/// What recovery found.
#[derive(Debug)]
pub struct Recovered {
    pub durable: NodeDurable,
    /// This start's boot number (1 for the first start of a data directory); unique per start.
    pub boot: u64,
    /// Set when the replica starts with its durable state lost, saying why.
    pub lost_reason: Option<String>,
    /// The data directory held no state of the replica (a first start, or `--rejoin`).
    pub was_empty: bool,
    /// How recovery ended (`picket_storage_recoveries_total{outcome}`).
    pub outcome: RecoveryOutcome,
    /// Bytes of a torn log tail that recovery cut (0: none).
    pub torn_tail_bytes: u64,
    /// The damaged generation directory left behind for inspection, when corruption moved the
    /// replica to a new one (docs/runbooks/replace-disk.md).
    pub damaged_dir: Option<PathBuf>,
    /// Wall time of opening and replaying the storage.
    pub duration: std::time::Duration,
}

/// A replica's storage condition, as `/healthz` shows it (`storage`): how this start's
/// recovery ended and whether the durable state is still being re-learned.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StorageCondition {
    /// `clean`, `torn_tail_cut` or `durable_state_lost` (empty before recovery).
    pub recovery: String,
    /// Wall milliseconds of opening and replaying the storage.
    pub recovery_ms: u64,
    /// Bytes of a torn tail cut (never synced, so never acknowledged).
    pub torn_tail_bytes: u64,
    /// Why the durable state was lost, when it was.
    pub lost_reason: Option<String>,
    /// The durable state is lost *now*: the replica neither votes nor accepts until it has
    /// re-learned its state from the other replicas.
    pub durable_state_lost: bool,
    /// The storage generation directory in use.
    pub generation_dir: String,
    /// A damaged generation directory recovery left behind (docs/runbooks/replace-disk.md).
    pub damaged_dir: Option<String>,
}

impl StorageCondition {
    /// The condition right after recovery, with the store it produced.
    pub fn after(recovered: &Recovered, generation_dir: &Path) -> StorageCondition {
        StorageCondition {
            recovery: recovered.outcome.name().to_owned(),
            recovery_ms: u64::try_from(recovered.duration.as_millis()).unwrap_or(u64::MAX),
            torn_tail_bytes: recovered.torn_tail_bytes,
            lost_reason: recovered.lost_reason.clone(),
            durable_state_lost: recovered.durable.lost,
            generation_dir: generation_dir.display().to_string(),
            damaged_dir: recovered
                .damaged_dir
                .as_ref()
                .map(|d| d.display().to_string()),
        }
    }
}

/// How a start's recovery ended (docs/storage.md, "The decision table").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// Nothing to repair.
    Clean,
    /// A torn tail (never synced, so never acknowledged) was cut, or a torn segment creation
    /// rewritten.
    TornTailCut,
    /// The durable state is gone (corruption, a vanished generation, `--rejoin`): the replica
    /// re-learns it from the others before it votes or accepts.
    DurableStateLost,
}

impl RecoveryOutcome {
    pub const ALL: [RecoveryOutcome; 3] = [
        RecoveryOutcome::Clean,
        RecoveryOutcome::TornTailCut,
        RecoveryOutcome::DurableStateLost,
    ];

    /// The `outcome` label value and the status's `recovery` field.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryOutcome::Clean => "clean",
            RecoveryOutcome::TornTailCut => "torn_tail_cut",
            RecoveryOutcome::DurableStateLost => "durable_state_lost",
        }
    }
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Group commits: calls of [`DurableStore::persist`] that wrote anything.
    pub commits: u64,
    /// Log fdatasyncs.
    pub log_syncs: u64,
    /// Hard state replacements (each an atomic write with its own fsyncs).
    pub hard_state_saves: u64,
    pub snapshots_saved: u64,
    pub records_appended: u64,
    pub segments_dropped: u64,
    /// Wall time of the last snapshot save and log compaction (encode, write, fsyncs, drop);
    /// for a background save, from its start to the compaction after it.
    pub compaction_last: Option<std::time::Duration>,
    /// Local snapshots handed to a background save.
    pub snapshots_background: u64,
    /// Local snapshots not saved because a background save was still running (the log covers
    /// them; the next compaction point saves a newer one).
    pub snapshots_skipped: u64,
    /// Background saves that failed (logged; the log was left as it was).
    pub snapshot_save_failures: u64,
}

/// Runs one background snapshot save. The default runs it on an OS thread (under `cfg(madsim)`:
/// as a simulation task, so the run stays deterministic); tests substitute one that holds the
/// job, to run it (or not) where they choose.
pub type SaveRunner = Arc<dyn Fn(SaveJob) + Send + Sync>;

/// One background snapshot save, as a [`SaveRunner`] gets it.
pub type SaveJob = Box<dyn FnOnce() + Send>;

/// How a background snapshot save ended, as [`DurableStore::poll_saved`] reports it.
#[derive(Debug)]
pub enum SaveOutcome {
    /// The snapshot at `slot` (and its directory entry) is durable and the log was compacted
    /// for it; `took` runs from the save's start to the end of the compaction.
    Saved {
        slot: Slot,
        took: std::time::Duration,
    },
    /// The save failed: the log and the older snapshots are as they were, and a later
    /// compaction point saves a newer snapshot.
    Failed { slot: Slot, error: StoreError },
    /// A newer snapshot (one installed from a peer) was saved first; nothing to do.
    Superseded { slot: Slot },
}
