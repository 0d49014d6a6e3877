//! The replica's durable state on a [`Disk`]: the core's `Persist` actions written through
//! `picket-storage` with group commit, and recovery into a [`NodeDurable`] at start.
//!
//! Layout under the data directory:
//!
//! ```text
//! <data>/boot/hardstate            boot counter and storage generation (atomic replace)
//! <data>/replica-<generation>/     the replica's storage (picket-storage layout):
//!     log/*.seg                    one `LogEntry` record per accepted (slot, ballot, value)
//!     hardstate                    `HardState`: promised ballot, lost flag, incarnations
//!     snapshots/<slot>.snap        `SnapshotRecord`s, named by their slot
//! ```
//!
//! Recovery replays the log in record order: the latest record of a slot wins (a slot's accepted
//! ballot never decreases, so the latest is also the highest). When storage reports
//! **corruption**, the replica does not refuse to start forever: it moves to a new, empty
//! generation directory (the damaged one is left for inspection) and starts in *durable state
//! lost* mode, in which the core neither votes nor accepts until it has re-learned its state
//! from the other replicas (docs/protocol.md §7). The same happens when the generation directory
//! of a replica that started before has disappeared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use picket_core::locks::LockSnapshot;
use picket_core::node::{NodeCommand, NodeDurable};
use picket_core::paxos::{AcceptedEntry, Ballot, NodeId, PersistId, Slot};
use picket_net::convert::records::{
    decode_hard_state, decode_log_entry, decode_snapshot_record, log_entry_to_wire,
    snapshot_to_wire, HardState,
};
use picket_net::DecodeError;
use picket_storage::{Disk, Error as StorageError, HardStateFile, Storage, StorageConfig};
use prost::Message as _;
use thiserror::Error;

/// Log bytes read per call during recovery.
const RECOVERY_READ_BYTES: u64 = 16 << 20;

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

/// One `Persist` action of the core, as the store takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistOp {
    pub id: PersistId,
    pub promised: Option<Ballot>,
    pub accepted: Vec<AcceptedEntry<NodeCommand>>,
    pub snapshot: Option<(Slot, LockSnapshot)>,
    pub incarnation: Option<(NodeId, u64)>,
    pub recovered: bool,
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
    /// Wall time of the last snapshot save and log compaction (encode, write, fsyncs, drop).
    pub compaction_last: Option<std::time::Duration>,
}

/// The replica's storage, written only by the driver task.
#[derive(Debug)]
pub struct DurableStore<D: Disk + Clone> {
    storage: Storage<D>,
    root: PathBuf,
    hard: HardState,
    /// The latest log record index of each slot not covered by the snapshot.
    slot_records: BTreeMap<Slot, u64>,
    /// Records below this index were only needed by slots at or below the previous snapshot:
    /// the log is compacted below it when the next snapshot is saved (so a damaged newest
    /// snapshot still has the log records after the one before it).
    compact_next: u64,
    counters: StoreCounters,
}

impl<D: Disk + Clone> DurableStore<D> {
    /// Opens (creating if needed) the data directory and recovers the replica's durable state.
    /// The boot counter is advanced and saved before this returns.
    /// A data directory without any state is started fresh (tests; see [`Self::open_with`]).
    pub fn open(
        disk: D,
        data_dir: &Path,
        config: StorageConfig,
    ) -> Result<(DurableStore<D>, Recovered), StoreError> {
        Self::open_with(disk, data_dir, config, EmptyDataDir::Init)
    }

    /// Like [`Self::open`], with `empty` deciding what a data directory without any state of
    /// the replica means. With state present, `empty` plays no part.
    pub fn open_with(
        disk: D,
        data_dir: &Path,
        config: StorageConfig,
        empty: EmptyDataDir,
    ) -> Result<(DurableStore<D>, Recovered), StoreError> {
        let started = std::time::Instant::now();
        let boot_record = data_dir
            .join("boot")
            .join(picket_storage::blob::HARD_STATE_FILE);
        let is_empty = !disk
            .file_exists(&boot_record)
            .map_err(|source| StorageError::Io {
                op: "stat",
                path: boot_record.clone(),
                source,
            })?
            && !disk
                .list_files(&generation_dir(data_dir, 1).join("log"))
                .is_ok_and(|files| !files.is_empty());
        if is_empty && empty == EmptyDataDir::Refuse {
            return Err(StoreError::Uninitialized {
                dir: data_dir.to_path_buf(),
            });
        }
        let mut boot_file = HardStateFile::open(disk.clone(), &data_dir.join("boot"), 64)?;
        let (previous_boot, mut generation) = match boot_file.load()? {
            None => (0, 1),
            Some(bytes) => decode_boot(&bytes, data_dir)?,
        };
        let boot = previous_boot + 1;
        let mut root = generation_dir(data_dir, generation);
        let mut lost_reason = None;
        let existed = disk
            .list_files(&root.join("log"))
            .is_ok_and(|files| !files.is_empty());
        if previous_boot > 0 && !existed {
            lost_reason = Some(format!(
                "the replica started before (boot {previous_boot}) but {} has no log",
                root.display()
            ));
        }
        if is_empty && empty == EmptyDataDir::Rejoin {
            lost_reason = Some(format!(
                "started with --rejoin on the empty data directory {}: this replica ran before \
                 and its disk was replaced or wiped",
                data_dir.display()
            ));
        }
        let mut torn_tail_bytes = 0;
        let opened = if lost_reason.is_none() {
            match Self::try_open(disk.clone(), &root, config.clone()) {
                Ok((store, durable, torn)) => {
                    torn_tail_bytes = torn;
                    Some((store, durable))
                }
                Err(Recovery::Corrupt(why)) => {
                    lost_reason = Some(why);
                    None
                }
                Err(Recovery::Fatal(error)) => return Err(error),
            }
        } else {
            None
        };
        let mut damaged_dir = None;
        let (store, durable) = match opened {
            Some(opened) => opened,
            None => {
                if existed {
                    damaged_dir = Some(root.clone());
                    generation += 1;
                    root = generation_dir(data_dir, generation);
                }
                let (storage, _) = Storage::open(disk.clone(), &root, config)?;
                let mut store = DurableStore::new(storage, root, HardState::default());
                store.hard.lost = true;
                store.save_hard_state()?;
                let durable = NodeDurable {
                    lost: true,
                    ..NodeDurable::default()
                };
                (store, durable)
            }
        };
        boot_file.save(&encode_boot(boot, generation))?;
        let outcome = if durable.lost {
            RecoveryOutcome::DurableStateLost
        } else if torn_tail_bytes > 0 {
            RecoveryOutcome::TornTailCut
        } else {
            RecoveryOutcome::Clean
        };
        Ok((
            store,
            Recovered {
                durable,
                boot,
                lost_reason,
                was_empty: is_empty,
                outcome,
                torn_tail_bytes,
                damaged_dir,
                duration: started.elapsed(),
            },
        ))
    }

    fn new(storage: Storage<D>, root: PathBuf, hard: HardState) -> DurableStore<D> {
        let compact_next = storage.log.first_index();
        DurableStore {
            storage,
            root,
            hard,
            slot_records: BTreeMap::new(),
            compact_next,
            counters: StoreCounters::default(),
        }
    }

    fn try_open(
        disk: D,
        root: &Path,
        config: StorageConfig,
    ) -> Result<(DurableStore<D>, NodeDurable, u64), Recovery> {
        let (storage, report) = Storage::open(disk, root, config)?;
        if let Some(torn) = &report.torn_tail {
            tracing::warn!(file = %torn.file.display(), offset = torn.offset, bytes = torn.bytes,
                "recovery cut a torn log tail (past the synced end: a crash mid-write; nothing \
                 acknowledged was lost)");
        }
        // A torn segment creation is reported at offset 0 with the bytes it replaced (possibly
        // none); count it as a cut of at least one byte so the outcome says a repair happened.
        let torn_tail_bytes = report.torn_tail.as_ref().map_or(0, |t| t.bytes.max(1));
        let hard = match storage.hard_state.load()? {
            Some(bytes) => decode_hard_state(&bytes).map_err(|e| decoded("hard state", &e))?,
            None => HardState::default(),
        };
        let loaded = storage.snapshots.load_latest()?;
        for damaged in &loaded.damaged {
            tracing::error!(file = %damaged.file.display(), reason = %damaged.reason,
                "skipped a damaged snapshot; recovering from the one before it");
        }
        let snapshot = match loaded.latest {
            Some((_, bytes)) => Some(
                decode_snapshot_record::<LockSnapshot>(&bytes)
                    .map_err(|e| decoded("snapshot", &e))?,
            ),
            None => None,
        };
        let mut store = DurableStore::new(storage, root.to_path_buf(), hard);
        let slot_snapshot = snapshot.as_ref().map_or(Slot::ZERO, |(s, _)| *s);
        let mut accepted = BTreeMap::new();
        let mut index = store.storage.log.first_index();
        let end = store.storage.log.next_index();
        while index < end {
            let records = store.storage.log.read(index..end, RECOVERY_READ_BYTES)?;
            for bytes in records {
                let (slot, ballot, value) = decode_log_entry::<NodeCommand>(&bytes)
                    .map_err(|e| decoded(&format!("log record {index}"), &e))?;
                if slot > slot_snapshot {
                    accepted.insert(slot, (ballot, value));
                    store.slot_records.insert(slot, index);
                }
                index += 1;
            }
        }
        // An acceptor that accepted a ballot promised it (it persisted both in one group
        // commit); if a crash kept the log and not the hard state, take the promise back.
        let promised_min = accepted.values().map(|(b, _)| *b).max();
        if let Some(b) = promised_min.filter(|b| *b > store.hard.promised) {
            store.hard.promised = b;
        }
        let durable = NodeDurable {
            promised: store.hard.promised,
            accepted,
            snapshot,
            incarnations: store.hard.incarnations.clone(),
            lost: store.hard.lost,
        };
        Ok((store, durable, torn_tail_bytes))
    }

    /// Writes every op (in order) and makes all of them durable with one log fdatasync (group
    /// commit), plus one atomic hard-state replacement if the promise, an incarnation or the
    /// lost flag changed and one snapshot file if a snapshot came. When this returns `Ok`, the
    /// driver may step `Persisted { id }` with the last op's id.
    pub fn persist(&mut self, ops: &[PersistOp]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut hard = self.hard.clone();
        let mut records = Vec::new();
        let mut snapshot: Option<&(Slot, LockSnapshot)> = None;
        for op in ops {
            if let Some(p) = op.promised {
                assert!(
                    p >= hard.promised,
                    "promised ballot went backwards: {p} < {}",
                    hard.promised
                );
                hard.promised = p;
            }
            if let Some((node, inc)) = op.incarnation {
                let old = hard.incarnations.get(&node).copied().unwrap_or(0);
                assert!(
                    inc >= old,
                    "incarnation of {node} went backwards: {inc} < {old}"
                );
                hard.incarnations.insert(node, inc);
            }
            if op.recovered {
                hard.lost = false;
            }
            for entry in &op.accepted {
                records.push((entry.0, log_entry_to_wire(entry.clone()).encode_to_vec()));
            }
            if let Some(s) = &op.snapshot {
                if snapshot.is_none_or(|old| old.0 < s.0) {
                    snapshot = Some(s);
                }
            }
        }
        // The hard state first: a crash after it and before the log sync leaves a promise at
        // least as high as every acceptance (recovery also restores that rule itself).
        if hard != self.hard {
            self.hard = hard;
            self.save_hard_state()?;
        }
        let compaction_started = snapshot.map(|_| std::time::Instant::now());
        if let Some((slot, state)) = snapshot {
            let bytes = snapshot_to_wire((*slot, state.clone())).encode_to_vec();
            self.storage.snapshots.save(slot.0, &bytes)?;
            self.counters.snapshots_saved += 1;
        }
        if !records.is_empty() {
            self.append(&records)?;
            self.storage.log.sync()?;
            self.counters.log_syncs += 1;
        }
        if let Some((slot, _)) = snapshot {
            self.compact(*slot)?;
        }
        if let Some(started) = compaction_started {
            self.counters.compaction_last = Some(started.elapsed());
        }
        self.counters.commits += 1;
        Ok(())
    }

    fn append(&mut self, records: &[(Slot, Vec<u8>)]) -> Result<(), StoreError> {
        let batch_max = self.storage.log.config().batch_records_max;
        let bytes_max = self.storage.log.config().batch_bytes_max;
        let mut start = 0;
        while start < records.len() {
            let mut end = start;
            let mut bytes = 0u64;
            while end < records.len()
                && end - start < batch_max
                && (end == start || bytes + records[end].1.len() as u64 <= bytes_max)
            {
                bytes += records[end].1.len() as u64;
                end += 1;
            }
            let first = self.storage.log.next_index();
            let chunk: Vec<&[u8]> = records[start..end].iter().map(|r| &r.1[..]).collect();
            self.storage.log.append(first, &chunk)?;
            for (offset, (slot, _)) in records[start..end].iter().enumerate() {
                self.slot_records.insert(*slot, first + offset as u64);
            }
            self.counters.records_appended += (end - start) as u64;
            start = end;
        }
        Ok(())
    }

    /// After a snapshot at `slot`: drop the log below what the previous snapshot needed, and
    /// remember what this one needs.
    fn compact(&mut self, slot: Slot) -> Result<(), StoreError> {
        self.slot_records = self.slot_records.split_off(&slot.next());
        let needed = self
            .slot_records
            .values()
            .copied()
            .min()
            .unwrap_or(self.storage.log.next_index());
        let below = self.compact_next.min(needed);
        self.counters.segments_dropped += self.storage.log.drop_below(below)? as u64;
        self.compact_next = needed;
        Ok(())
    }

    fn save_hard_state(&mut self) -> Result<(), StoreError> {
        let bytes = picket_net::proto::HardState::from(self.hard.clone()).encode_to_vec();
        self.storage.hard_state.save(&bytes)?;
        self.counters.hard_state_saves += 1;
        Ok(())
    }

    pub fn counters(&self) -> &StoreCounters {
        &self.counters
    }

    /// The storage root of the current generation.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Whether a store error is a failed fsync (of a file or a directory): the
/// `picket_storage_fsync_errors_total` counter.
pub fn is_fsync_error(error: &StoreError) -> bool {
    matches!(error, StoreError::Storage(StorageError::Io { op, .. }) if op.contains("sync"))
}

enum Recovery {
    /// The data is damaged: start with the durable state lost.
    Corrupt(String),
    /// Anything else (an IO error, a bad configuration): refuse to start.
    Fatal(StoreError),
}

impl From<StorageError> for Recovery {
    fn from(error: StorageError) -> Recovery {
        match error {
            StorageError::Corruption { .. } => Recovery::Corrupt(error.to_string()),
            other => Recovery::Fatal(other.into()),
        }
    }
}

fn decoded(what: &str, error: &DecodeError) -> Recovery {
    Recovery::Corrupt(format!("{what} does not decode: {error}"))
}

fn generation_dir(data_dir: &Path, generation: u64) -> PathBuf {
    data_dir.join(format!("replica-{generation}"))
}

fn encode_boot(boot: u64, generation: u64) -> Vec<u8> {
    let mut out = boot.to_le_bytes().to_vec();
    out.extend_from_slice(&generation.to_le_bytes());
    out
}

fn decode_boot(bytes: &[u8], data_dir: &Path) -> Result<(u64, u64), StoreError> {
    let bad = || StoreError::BadBootRecord {
        path: data_dir.join("boot"),
        len: bytes.len(),
    };
    let boot = bytes.get(0..8).ok_or_else(bad)?;
    let generation = bytes.get(8..16).ok_or_else(bad)?;
    if bytes.len() != 16 {
        return Err(bad());
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Ok((word(boot), word(generation).max(1)))
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
