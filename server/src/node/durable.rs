//! The replica's durable state on a [`Disk`]: the core's `Persist` actions written through
//! `picket-storage` with group commit, and recovery into a [`NodeDurable`] at start.
//!
//! Layout under the data directory:
//!
//! ```text
//! <data>/boot/hardstate            boot counter and storage generation (atomic replace)
//! <data>/replica-<generation>/     the replica's storage (picket-storage layout):
//!     log/*.seg                    one `LogEntry` record per accepted (slot, ballot, value)
//!     hardstate                    `HardState`: promised ballot, lost flag, incarnations, first membership
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
//!
//! **Compaction off the driver's turn.** A snapshot the core marks `snapshot_local` (its own
//! compaction) is converted, encoded, written and fsynced by a background save while the driver
//! keeps stepping: the core is acknowledged at once, because the log and the previous snapshot,
//! both kept until the save is durable, already cover it. The log is compacted for it only when
//! the driver sees the save finished ([`DurableStore::poll_saved`]). At most one save runs; a
//! local snapshot that comes while one runs is not saved (the next one is). A failed save is
//! logged and counted and leaves the log as it was. A snapshot installed from a peer is saved
//! synchronously, before the acknowledgement (nothing else on disk covers it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};

use picket_core::node::{NodeCommand, NodeDurable, NodePersist, NodeSnapshot};
use picket_core::paxos::{Membership, Schedule, Slot};
use picket_proto::convert::records::{
    decode_hard_state, decode_log_entry, decode_snapshot_record, log_entry_to_wire,
    snapshot_to_wire, HardState,
};
use picket_storage::{
    Disk, Error as StorageError, HardStateFile, Log, SnapshotStore, Storage, StorageConfig,
};
use prost::Message as _;

mod condition;
mod recovery;
pub use condition::{
    EmptyDataDir, Recovered, RecoveryOutcome, SaveJob, SaveOutcome, SaveRunner, StorageCondition,
    StoreCounters, StoreError,
};
use recovery::{decode_boot, decoded, encode_boot, generation_dir, Recovery};

/// Log bytes read per call during recovery.
const RECOVERY_READ_BYTES: u64 = 16 << 20;

/// What a background save sends back.
#[derive(Debug)]
enum SaveDone {
    Saved,
    Failed(StorageError),
    /// The store was dropped before the save started.
    Abandoned,
}

/// The one background save in flight.
#[derive(Debug)]
struct SaveInFlight {
    slot: Slot,
    started: std::time::Instant,
    done: mpsc::Receiver<SaveDone>,
}

/// The snapshot directory, shared by the driver and the background save: whoever writes holds
/// the lock for the whole save, so saves never interleave.
#[derive(Debug)]
struct SharedSnapshots<D: Disk> {
    store: Mutex<SnapshotStore<D>>,
    /// Set when the [`DurableStore`] is dropped: a save that has not started yet does nothing.
    abandoned: AtomicBool,
}

impl<D: Disk> SharedSnapshots<D> {
    fn lock(&self) -> MutexGuard<'_, SnapshotStore<D>> {
        self.store
            .lock()
            .expect("the snapshot store's lock was poisoned by a panic in a save")
    }
}

/// The replica's storage, written only by the driver task (and, for local snapshots, by one
/// background save at a time).
pub struct DurableStore<D: Disk + Clone + 'static> {
    log: Log<D>,
    hard_state: HardStateFile<D>,
    snapshots: Arc<SharedSnapshots<D>>,
    root: PathBuf,
    hard: HardState,
    /// The latest log record index of each slot not covered by the snapshot the log was last
    /// compacted for.
    slot_records: BTreeMap<Slot, u64>,
    /// Records below this index were only needed by slots at or below the previous snapshot:
    /// the log is compacted below it when the next snapshot is saved (so a damaged newest
    /// snapshot still has the log records after the one before it).
    compact_next: u64,
    /// The slot of the newest snapshot known durable (the log was compacted for it). A
    /// background save at or below it has nothing left to do.
    slot_durable: Slot,
    save_in_flight: Option<SaveInFlight>,
    /// The snapshot of the newest background save. The replica lets go of it when it compacts
    /// again, before the next save starts; that save's job frees it, so a whole state is never
    /// freed inside the driver's turn.
    kept: Option<NodeSnapshot>,
    runner: SaveRunner,
    counters: StoreCounters,
}

impl<D: Disk + Clone + 'static> std::fmt::Debug for DurableStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableStore")
            .field("root", &self.root)
            .field("hard", &self.hard)
            .field("compact_next", &self.compact_next)
            .field("slot_durable", &self.slot_durable)
            .field("save_in_flight", &self.save_in_flight)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<D: Disk + Clone + 'static> Drop for DurableStore<D> {
    /// On shutdown the background save in flight is either finished (one that started: the
    /// lock waits for it) or abandoned before it writes anything (one that had not). Either
    /// way the files are a state recovery takes: the log still covers the snapshot.
    fn drop(&mut self) {
        self.snapshots.abandoned.store(true, Ordering::SeqCst);
        drop(self.snapshots.lock());
    }
}

/// The default [`SaveRunner`]: an OS thread (a simulation task under `cfg(madsim)`, where the
/// save then runs whole at one point of the simulated schedule).
fn default_runner() -> SaveRunner {
    Arc::new(|job: SaveJob| {
        #[cfg(not(madsim))]
        {
            // A failed spawn drops the closure it was given: keep the job where this thread can
            // still run it (safe, just not off the driver's turn).
            let job = Arc::new(Mutex::new(Some(job)));
            let for_thread = Arc::clone(&job);
            let spawned = std::thread::Builder::new()
                .name("picket-snapshot".into())
                .spawn(move || run_once(&for_thread));
            if let Err(error) = spawned {
                tracing::warn!(%error, "could not start the snapshot thread; saving inline");
                run_once(&job);
            }
        }
        #[cfg(madsim)]
        {
            drop(tokio::spawn(async move { job() }));
        }
    })
}

#[cfg(not(madsim))]
fn run_once(job: &Mutex<Option<SaveJob>>) {
    let taken = job.lock().map(|mut j| j.take()).unwrap_or(None);
    if let Some(job) = taken {
        job();
    }
}

impl<D: Disk + Clone + 'static> DurableStore<D> {
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
                op: picket_storage::IoOp::Stat,
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
        let Storage {
            log,
            hard_state,
            snapshots,
        } = storage;
        let compact_next = log.first_index();
        DurableStore {
            log,
            hard_state,
            snapshots: Arc::new(SharedSnapshots {
                store: Mutex::new(snapshots),
                abandoned: AtomicBool::new(false),
            }),
            root,
            hard,
            slot_records: BTreeMap::new(),
            compact_next,
            slot_durable: Slot::ZERO,
            save_in_flight: None,
            kept: None,
            runner: default_runner(),
            counters: StoreCounters::default(),
        }
    }

    /// Replaces how background saves run (tests: run them by hand).
    #[cfg(test)]
    pub(crate) fn set_save_runner(&mut self, runner: SaveRunner) {
        self.runner = runner;
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
        for slot in &report.cleared_marker_slots {
            tracing::warn!(file = %slot.file.display(), offset = slot.offset,
                "recovery zeroed a damaged synced-end marker slot (ignored, as the format says)");
        }
        // A torn segment creation is reported at offset 0 with the bytes it replaced (possibly
        // none); count it as a cut of at least one byte so the outcome says a repair happened.
        let torn_tail_bytes = report.torn_tail.as_ref().map_or(0, |t| t.bytes.max(1));
        let hard = match storage.hard_state.load()? {
            Some(bytes) => decode_hard_state(&bytes).map_err(|e| decoded("hard state", &e))?,
            None => HardState::default(),
        };
        // A `.tmp` file of a snapshot save a crash interrupted (a background one, say) was
        // removed when the snapshot directory was opened: it is as if the save never began.
        let loaded = storage.snapshots.load_latest()?;
        for damaged in &loaded.damaged {
            tracing::error!(file = %damaged.file.display(), reason = %damaged.reason,
                "skipped a damaged snapshot; recovering from the one before it");
        }
        let snapshot = match loaded.latest {
            Some((_, bytes)) => Some(
                decode_snapshot_record::<NodeSnapshot>(&bytes)
                    .map_err(|e| decoded("snapshot", &e))?,
            ),
            None => None,
        };
        let mut store = DurableStore::new(storage, root.to_path_buf(), hard);
        let slot_snapshot = snapshot.as_ref().map_or(Slot::ZERO, |(s, _, _)| *s);
        store.slot_durable = slot_snapshot;
        let mut accepted = BTreeMap::new();
        let mut index = store.log.first_index();
        let end = store.log.next_index();
        while index < end {
            let records = store.log.read(index..end, RECOVERY_READ_BYTES)?;
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
        // Without a snapshot, the first membership the hard state recorded (if any).
        let (snapshot, schedule) = match snapshot {
            Some((slot, state, schedule)) => (Some((slot, state)), schedule),
            None => (None, store.hard.membership_first.clone().map(Schedule::new)),
        };
        let durable = NodeDurable {
            promised: store.hard.promised,
            accepted,
            snapshot,
            schedule,
            incarnations: store.hard.incarnations.clone(),
            lost: store.hard.lost,
        };
        Ok((store, durable, torn_tail_bytes))
    }

    /// Like [`Self::persist_owned`], for ops the caller keeps (tests): the snapshot is copied.
    pub fn persist(&mut self, ops: &[NodePersist]) -> Result<(), StoreError> {
        self.persist_owned(ops.to_vec())
    }

    /// Writes every op (in order) and makes all of them durable with one log fdatasync (group
    /// commit), plus one atomic hard-state replacement if the promise, an incarnation or the
    /// lost flag changed. The newest snapshot of the ops is saved synchronously (one file) if
    /// any snapshot of them came from a peer; if all are local compactions it goes to a
    /// background save instead (or is skipped while one runs). When this returns `Ok`, the
    /// driver may step `Persisted { id }` with the last op's id.
    pub fn persist_owned(&mut self, mut ops: Vec<NodePersist>) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut hard = self.hard.clone();
        let mut records = Vec::new();
        let mut snapshot: Option<(Slot, NodeSnapshot, Option<Schedule>)> = None;
        let mut snapshot_sync = false;
        for op in &mut ops {
            assert!(
                op.snapshot.is_some() || !op.snapshot_local,
                "persist {} is marked snapshot_local without a snapshot",
                op.id
            );
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
            if op.snapshot.is_none() {
                if let Some(first) = op.schedule.take() {
                    // The first membership, learned (`Persist::schedule` without a snapshot).
                    hard.membership_first = Some(first.entries()[0].1.clone());
                }
            }
            if let Some((slot, state)) = op.snapshot.take() {
                snapshot_sync |= !op.snapshot_local;
                if snapshot.as_ref().is_none_or(|old| old.0 < slot) {
                    snapshot = Some((slot, state, op.schedule.take()));
                }
            }
        }
        // The hard state first: a crash after it and before the log sync leaves a promise at
        // least as high as every acceptance (recovery also restores that rule itself).
        if hard != self.hard {
            self.hard = hard;
            self.save_hard_state()?;
        }
        let (sync, background) = match snapshot {
            Some(s) if snapshot_sync => (Some(s), None),
            other => (None, other),
        };
        let compaction_started = sync.as_ref().map(|_| std::time::Instant::now());
        if let Some((slot, state, schedule)) = &sync {
            let bytes = snapshot_to_wire((*slot, state.clone()), schedule.as_ref()).encode_to_vec();
            // Waits for a background save that is writing (the two never interleave).
            self.snapshots.lock().save(slot.0, &bytes)?;
            self.counters.snapshots_saved += 1;
        }
        if !records.is_empty() {
            // One group commit: the records and their commit record in one write (the last
            // chunk's), made durable by it (`[storage] write_mode`).
            self.append_sync(&records)?;
            self.counters.log_syncs += 1;
        }
        if let Some((slot, _, _)) = &sync {
            self.compact(*slot)?;
            self.slot_durable = *slot;
        }
        if let Some(started) = compaction_started {
            self.counters.compaction_last = Some(started.elapsed());
        }
        if let Some((slot, state, schedule)) = background {
            self.start_save(slot, state, schedule);
        }
        self.counters.commits += 1;
        Ok(())
    }

    /// Hands the local snapshot at `slot` to a background save, unless one is running.
    fn start_save(&mut self, slot: Slot, state: NodeSnapshot, schedule: Option<Schedule>) {
        if slot <= self.slot_durable {
            return;
        }
        if self.save_in_flight.is_some() {
            self.counters.snapshots_skipped += 1;
            return;
        }
        let (done_tx, done) = mpsc::channel();
        let shared = Arc::clone(&self.snapshots);
        let retired = self.kept.replace(Arc::clone(&state));
        let job = move || {
            let outcome = save_snapshot(&shared, slot, state, schedule);
            drop(retired);
            let _ = done_tx.send(outcome);
        };
        self.save_in_flight = Some(SaveInFlight {
            slot,
            started: std::time::Instant::now(),
            done,
        });
        self.counters.snapshots_background += 1;
        (self.runner)(Box::new(job));
    }

    /// Takes the result of the background save if it finished: once its snapshot is durable,
    /// compacts the log for it. `Ok(None)`: no save, or it is still running. An `Err` is a
    /// failure of the log itself (the compaction), which stops the replica like any other.
    pub fn poll_saved(&mut self) -> Result<Option<SaveOutcome>, StoreError> {
        let Some(flight) = &self.save_in_flight else {
            return Ok(None);
        };
        let done = match flight.done.try_recv() {
            Ok(done) => done,
            Err(mpsc::TryRecvError::Empty) => return Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => SaveDone::Failed(StorageError::Io {
                op: picket_storage::IoOp::SnapshotSave,
                path: self.root.join("snapshots"),
                source: std::io::Error::other("the background save ended without a result"),
            }),
        };
        let SaveInFlight { slot, started, .. } = self
            .save_in_flight
            .take()
            .expect("a save in flight was just polled");
        match done {
            SaveDone::Saved => {
                self.counters.snapshots_saved += 1;
                if slot > self.slot_durable {
                    self.compact(slot)?;
                    self.slot_durable = slot;
                }
                let took = started.elapsed();
                self.counters.compaction_last = Some(took);
                Ok(Some(SaveOutcome::Saved { slot, took }))
            }
            // A snapshot installed from a peer was saved first (the save refused to go back).
            SaveDone::Failed(StorageError::SnapshotNotNewer { .. })
                if slot <= self.slot_durable =>
            {
                Ok(Some(SaveOutcome::Superseded { slot }))
            }
            SaveDone::Failed(error) => {
                self.counters.snapshot_save_failures += 1;
                tracing::error!(%slot, %error, "background snapshot save failed; the log is kept \
                    and the next compaction point saves a newer snapshot");
                Ok(Some(SaveOutcome::Failed {
                    slot,
                    error: error.into(),
                }))
            }
            SaveDone::Abandoned => Ok(Some(SaveOutcome::Superseded { slot })),
        }
    }

    /// Whether a background save is running (or finished and not yet polled).
    pub fn save_in_flight(&self) -> bool {
        self.save_in_flight.is_some()
    }

    /// Appends `records` in chunks within the log's batch limits and makes them all durable:
    /// the last chunk goes with `Log::append_sync`, which syncs the earlier ones too.
    fn append_sync(&mut self, records: &[(Slot, Vec<u8>)]) -> Result<(), StoreError> {
        let batch_max = self.log.config().batch_records_max;
        let bytes_max = self.log.config().batch_bytes_max;
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
            let first = self.log.next_index();
            let chunk: Vec<&[u8]> = records[start..end].iter().map(|r| &r.1[..]).collect();
            if end == records.len() {
                self.log.append_sync(first, &chunk)?;
            } else {
                self.log.append(first, &chunk)?;
            }
            for (offset, (slot, _)) in records[start..end].iter().enumerate() {
                self.slot_records.insert(*slot, first + offset as u64);
            }
            self.counters.records_appended += (end - start) as u64;
            start = end;
        }
        Ok(())
    }

    /// After a snapshot at `slot` is durable: drop the log below what the previous snapshot
    /// needed, and remember what this one needs.
    fn compact(&mut self, slot: Slot) -> Result<(), StoreError> {
        self.slot_records = self.slot_records.split_off(&slot.next());
        let needed = self
            .slot_records
            .values()
            .copied()
            .min()
            .unwrap_or(self.log.next_index());
        let below = self.compact_next.min(needed);
        self.counters.segments_dropped += self.log.drop_below(below)? as u64;
        self.compact_next = needed;
        Ok(())
    }

    /// Records the cluster's first membership (`picketd run --init` on an empty data
    /// directory: the config file's members with their addresses), durably, before the
    /// replica starts; `durable.schedule` is set to it.
    pub fn record_membership_first(
        &mut self,
        membership: Membership,
        durable: &mut NodeDurable,
    ) -> Result<(), StoreError> {
        assert!(
            durable.snapshot.is_none() && durable.schedule.is_none(),
            "the first membership recorded over a recorded one"
        );
        self.hard.membership_first = Some(membership.clone());
        self.save_hard_state()?;
        durable.schedule = Some(Schedule::new(membership));
        Ok(())
    }

    fn save_hard_state(&mut self) -> Result<(), StoreError> {
        let bytes = picket_proto::proto::HardState::from(self.hard.clone()).encode_to_vec();
        self.hard_state.save(&bytes)?;
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
    matches!(error, StoreError::Storage(StorageError::Io { op, .. }) if op.is_sync())
}

/// The background save's work: convert, encode, write and fsync the snapshot file and its
/// directory entry, holding the snapshot directory's lock throughout.
fn save_snapshot<D: Disk>(
    shared: &SharedSnapshots<D>,
    slot: Slot,
    state: NodeSnapshot,
    schedule: Option<Schedule>,
) -> SaveDone {
    if shared.abandoned.load(Ordering::SeqCst) {
        return SaveDone::Abandoned;
    }
    let bytes = snapshot_to_wire((slot, state), schedule.as_ref()).encode_to_vec();
    let mut store = shared.lock();
    // Checked again under the lock: the store's drop takes the lock after setting the flag.
    if shared.abandoned.load(Ordering::SeqCst) {
        return SaveDone::Abandoned;
    }
    match store.save(slot.0, &bytes) {
        Ok(()) => SaveDone::Saved,
        Err(error) => SaveDone::Failed(error),
    }
}

#[cfg(test)]
#[path = "durable_save_tests.rs"]
mod save_tests;
#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
