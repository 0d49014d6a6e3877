use std::path::Path;

use picket_core::locks::{Command, Identity};
use picket_core::node::{NodeCommand, NodeDurable, NodePersist, ProposalId};
use picket_core::paxos::{Ballot, NodeId, Slot, Value};
use picket_core::time::Instant;
use picket_storage::{CrashMode, DiskFile, LogConfig, SimDisk, StorageConfig};

use super::*;

fn config() -> StorageConfig {
    StorageConfig {
        log: LogConfig {
            preallocate_bytes: 0,
            ..LogConfig::default()
        },
        ..StorageConfig::default()
    }
}

fn ballot(round: u64) -> Ballot {
    Ballot {
        round,
        node: NodeId(1),
    }
}

fn value(n: u64) -> Value<NodeCommand> {
    Value::Batch {
        stamp: Instant::from_millis(n),
        commands: vec![NodeCommand {
            origin: NodeId(1),
            boot: 1,
            proposal: ProposalId(n),
            command: Command::CreateSession {
                secret_hash: None,
                ttl_ms: Some(5_000),
                identity: Identity {
                    name: format!("svc-{n}"),
                    ..Identity::default()
                },
            },
        }],
    }
}

fn op(id: u64, promised: Option<u64>, accepted: &[(u64, u64)]) -> NodePersist {
    NodePersist {
        id,
        promised: promised.map(ballot),
        accepted: accepted
            .iter()
            .map(|&(slot, round)| (Slot(slot), ballot(round), value(slot * 10 + round)))
            .collect(),
        snapshot: None,
        schedule: None,
        snapshot_local: false,
        incarnation: None,
        recovered: false,
    }
}

fn reference(ops: &[NodePersist]) -> NodeDurable {
    let mut durable = NodeDurable::default();
    for op in ops {
        durable.apply_persist(op);
    }
    durable
}

const DATA: &str = "/data";

#[test]
fn many_persists_are_one_log_sync() {
    let disk = SimDisk::new(1);
    let (mut store, recovered) =
        DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(recovered.boot, 1);
    assert!(recovered.lost_reason.is_none());
    let ops: Vec<NodePersist> = (1..=20).map(|i| op(i, None, &[(i, 1)])).collect();
    let syncs_before = disk.sync_data_count();
    store.persist(&ops).unwrap();
    assert_eq!(
        disk.sync_data_count() - syncs_before,
        1,
        "one fdatasync for 20 persists"
    );
    assert_eq!(store.counters().log_syncs, 1);
    assert_eq!(store.counters().records_appended, 20);
}

#[test]
fn recovery_rebuilds_what_was_acknowledged_and_latest_ballot_wins() {
    let disk = SimDisk::new(2);
    let ops = vec![
        op(1, Some(1), &[(1, 1), (2, 1)]),
        op(2, Some(3), &[]),
        op(3, None, &[(2, 3), (3, 3)]),
        NodePersist {
            incarnation: Some((NodeId(2), 4)),
            ..op(4, None, &[])
        },
    ];
    {
        let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        store.persist(&ops[..2]).unwrap();
        store.persist(&ops[2..]).unwrap();
    }
    disk.crash();
    let (_, recovered) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(recovered.boot, 2);
    assert_eq!(recovered.durable, reference(&ops));
    assert_eq!(recovered.durable.accepted[&Slot(2)].0, ballot(3));
}

#[test]
fn unsynced_writes_are_not_recovered_and_boot_still_rises() {
    let disk = SimDisk::new(3);
    {
        let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        store.persist(&[op(1, Some(1), &[(1, 1)])]).unwrap();
    }
    disk.crash_with(CrashMode::DropUnsynced);
    let (_, first) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    let (_, second) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(first.durable.accepted.len(), 1);
    assert_eq!(second.boot, first.boot + 1);
}

#[test]
fn snapshots_cover_the_log_and_recovery_skips_covered_slots() {
    let disk = SimDisk::new(4);
    let sm = picket_core::locks::LockStateMachine::new(picket_core::locks::LockConfig::default());
    let snap = NodePersist {
        snapshot: Some((Slot(2), sm.snapshot().into())),
        ..op(2, None, &[])
    };
    let ops = vec![op(1, Some(1), &[(1, 1), (2, 1), (3, 1)]), snap];
    {
        let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        store.persist(&ops).unwrap();
        assert_eq!(store.counters().snapshots_saved, 1);
    }
    disk.crash();
    let (_, recovered) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(recovered.durable, reference(&ops));
    assert_eq!(
        recovered
            .durable
            .accepted
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![Slot(3)]
    );
}

#[test]
fn corruption_starts_the_replica_with_its_durable_state_lost() {
    let disk = SimDisk::new(5);
    let root;
    {
        let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        store.persist(&[op(1, Some(1), &[(1, 1)])]).unwrap();
        store.persist(&[op(2, None, &[(2, 1)])]).unwrap();
        root = store.root().to_path_buf();
    }
    let segment = disk
        .paths()
        .into_iter()
        .find(|p| p.starts_with(&root) && p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    // Damage the first record (the second stays whole): corruption, not a torn tail.
    let first_record = picket_storage::format::SEGMENT_HEADER_LEN_V2 as u64;
    disk.corrupt(&segment, first_record + 8 + 2).unwrap();
    let (mut store, recovered) =
        DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert!(
        recovered.lost_reason.is_some(),
        "corruption must be reported"
    );
    assert_eq!(recovered.outcome, RecoveryOutcome::DurableStateLost);
    assert_eq!(recovered.damaged_dir.as_deref(), Some(root.as_path()));
    assert!(recovered.durable.lost);
    assert!(recovered.durable.accepted.is_empty());
    assert_ne!(store.root(), root.as_path(), "a new generation directory");
    // Lost stays set across restarts until the core says it recovered.
    store.persist(&[op(1, Some(5), &[])]).unwrap();
    drop(store);
    let (mut store, again) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert!(again.durable.lost);
    assert!(again.lost_reason.is_none());
    assert_eq!(again.durable.promised, ballot(5));
    store
        .persist(&[NodePersist {
            recovered: true,
            ..op(2, None, &[])
        }])
        .unwrap();
    drop(store);
    let (_, healed) = DurableStore::open(disk, Path::new(DATA), config()).unwrap();
    assert!(!healed.durable.lost);
}

/// An empty data directory: refused (nothing created) unless the caller says it is a new
/// replica (`Init`: empty state) or one that lost its disk (`Rejoin`: durable state lost). With
/// state present, the choice plays no part.
#[test]
fn an_empty_data_directory_is_refused_unless_init_or_rejoin() {
    let open = |disk: &SimDisk, empty| {
        DurableStore::open_with(disk.clone(), Path::new(DATA), config(), empty)
    };
    let disk = SimDisk::new(11);
    match open(&disk, EmptyDataDir::Refuse) {
        Err(StoreError::Uninitialized { dir }) => assert_eq!(dir, Path::new(DATA)),
        other => panic!("expected Uninitialized, got {:?}", other.map(|(_, r)| r)),
    }
    assert!(
        disk.paths().is_empty(),
        "a refused open created {:?}",
        disk.paths()
    );

    let (_, rejoined) = open(&disk.fork(), EmptyDataDir::Rejoin).unwrap();
    assert!(rejoined.durable.lost && rejoined.was_empty);
    assert!(
        rejoined
            .lost_reason
            .as_deref()
            .is_some_and(|r| r.contains("--rejoin")),
        "{:?}",
        rejoined.lost_reason
    );

    {
        let (mut store, fresh) = open(&disk, EmptyDataDir::Init).unwrap();
        assert!(!fresh.durable.lost && fresh.was_empty && fresh.lost_reason.is_none());
        store.persist(&[op(1, Some(2), &[(1, 2)])]).unwrap();
    }
    for empty in [
        EmptyDataDir::Refuse,
        EmptyDataDir::Init,
        EmptyDataDir::Rejoin,
    ] {
        let (_, again) = open(&disk, empty).unwrap();
        assert!(!again.was_empty && !again.durable.lost, "{empty:?}");
        assert_eq!(again.durable.promised, ballot(2), "{empty:?}");
        assert_eq!(again.durable.accepted.len(), 1, "{empty:?}");
    }
}

/// Issue 17: the last record, synced and then damaged while the replica was down, after a power
/// loss (unsynced writes gone): the replica starts with its durable state lost, never as an
/// ordinary acceptor without its acknowledged acceptance of that slot.
#[test]
fn a_damaged_last_synced_record_is_durable_state_lost_not_a_torn_tail() {
    for seed in 0..16 {
        let disk = SimDisk::new(seed);
        let root;
        {
            let (mut store, _) =
                DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
            store.persist(&[op(1, Some(1), &[(1, 1)])]).unwrap();
            store.persist(&[op(2, None, &[(2, 1), (3, 1)])]).unwrap();
            root = store.root().to_path_buf();
        }
        disk.crash();
        disk.damage_synced_record(&root.join("log")).unwrap();
        let (_, recovered) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        assert_eq!(
            recovered.outcome,
            RecoveryOutcome::DurableStateLost,
            "seed {seed}"
        );
        assert!(recovered.durable.lost);
        assert_eq!(recovered.damaged_dir.as_deref(), Some(root.as_path()));
        let condition = StorageCondition::after(&recovered, Path::new("/gen"));
        assert_eq!(condition.recovery, "durable_state_lost");
        assert!(condition.durable_state_lost);
        assert!(condition.damaged_dir.is_some());
    }
}

/// A torn, never-synced tail is cut and the replica starts as an ordinary acceptor, reported as
/// `torn_tail_cut`; an undamaged restart is `clean`.
#[test]
fn torn_tail_and_clean_outcomes() {
    let disk = SimDisk::new(9);
    let root;
    {
        let (mut store, recovered) =
            DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        assert_eq!(recovered.outcome, RecoveryOutcome::Clean);
        store.persist(&[op(1, Some(1), &[(1, 1)])]).unwrap();
        root = store.root().to_path_buf();
    }
    let (_, recovered) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(recovered.outcome, RecoveryOutcome::Clean);
    assert_eq!(recovered.torn_tail_bytes, 0);
    // Half a record after the synced data, as a crash mid-append leaves it.
    let segment = disk
        .paths()
        .into_iter()
        .find(|p| p.starts_with(&root) && p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let bytes = disk.read_file(&segment).unwrap();
    let mut end = picket_storage::format::SEGMENT_HEADER_LEN_V2;
    while let Ok(frame) = picket_storage::format::check_frame(&bytes, end, u32::MAX - 64, 2) {
        end = frame.end();
    }
    let mut f = disk.open(&segment).unwrap();
    f.write_all_at(&[7, 0, 0, 0, 1, 2, 3], end as u64).unwrap();
    f.sync_data().unwrap();
    let (_, recovered) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(recovered.outcome, RecoveryOutcome::TornTailCut);
    assert!(recovered.torn_tail_bytes > 0);
    assert!(!recovered.durable.lost);
    assert_eq!(recovered.durable.accepted.len(), 1);
}

/// Background saves held here until the test runs them (`DurableStore::set_save_runner`).
#[derive(Clone, Default)]
struct HeldSaves(std::sync::Arc<std::sync::Mutex<Vec<SaveJob>>>);

impl HeldSaves {
    fn install(&self, store: &mut DurableStore<SimDisk>) {
        let jobs = self.clone();
        store.set_save_runner(std::sync::Arc::new(move |job| {
            jobs.0.lock().unwrap().push(job)
        }));
    }

    fn held(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Runs every held save, oldest first.
    fn run(&self) {
        let jobs: Vec<_> = std::mem::take(&mut *self.0.lock().unwrap());
        for job in jobs {
            job();
        }
    }
}

fn local_snapshot(id: u64, slot: u64) -> NodePersist {
    let sm = picket_core::locks::LockStateMachine::new(picket_core::locks::LockConfig::default());
    NodePersist {
        snapshot: Some((Slot(slot), sm.snapshot().into())),
        snapshot_local: true,
        ..op(id, None, &[])
    }
}

fn installed_snapshot(id: u64, slot: u64) -> NodePersist {
    NodePersist {
        snapshot_local: false,
        ..local_snapshot(id, slot)
    }
}

/// What recovery must give back when the local snapshots among `ops` were not (all) made
/// durable: the same ops with those snapshots left out (the log still covers them).
fn reference_without_local(ops: &[NodePersist]) -> NodeDurable {
    let kept: Vec<NodePersist> = ops
        .iter()
        .map(|o| NodePersist {
            snapshot: o.snapshot.clone().filter(|_| !o.snapshot_local),
            snapshot_local: false,
            ..o.clone()
        })
        .collect();
    reference(&kept)
}

fn reopen(disk: &SimDisk) -> Recovered {
    DurableStore::open(disk.clone(), Path::new(DATA), config())
        .unwrap()
        .1
}

/// Issue 17: a local compaction's snapshot is acknowledged at once and saved off the driver's
/// turn. A crash before the save loses nothing: recovery takes the log, which is kept until the
/// snapshot (and its directory entry) is durable; after the save, recovery takes the snapshot.
#[test]
fn a_local_snapshot_is_saved_in_the_background_and_the_log_covers_it_until_then() {
    let disk = SimDisk::new(21);
    let saves = HeldSaves::default();
    let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    saves.install(&mut store);
    let ops = vec![
        op(1, Some(1), &[(1, 1), (2, 1), (3, 1)]),
        local_snapshot(2, 2),
    ];
    store.persist(&ops).unwrap();
    assert_eq!(store.counters().snapshots_saved, 0, "nothing written yet");
    assert_eq!(store.counters().snapshots_background, 1);
    assert_eq!(saves.held(), 1);
    assert!(store.save_in_flight());
    assert!(
        store.poll_saved().unwrap().is_none(),
        "the save has not run"
    );

    let before = disk.fork();
    before.crash();
    let recovered = reopen(&before);
    assert_eq!(recovered.durable, reference_without_local(&ops));
    assert_eq!(
        recovered.durable.accepted.len(),
        3,
        "the log covers the snapshot"
    );
    assert!(recovered.durable.snapshot.is_none());

    saves.run();
    // Durable already, before the driver polls: the save fsyncs the file and the directory.
    let after = disk.fork();
    after.crash();
    assert_eq!(reopen(&after).durable, reference(&ops));

    match store.poll_saved().unwrap() {
        Some(SaveOutcome::Saved { slot, .. }) => assert_eq!(slot, Slot(2)),
        other => panic!("expected Saved, got {other:?}"),
    }
    assert!(!store.save_in_flight());
    assert_eq!(store.counters().snapshots_saved, 1);
    assert!(store.counters().compaction_last.is_some());
    drop(store);
    disk.crash();
    assert_eq!(reopen(&disk).durable, reference(&ops));
}

/// Issue 17: the replica and the store share one snapshot value, and a state the replica let go
/// of is freed by the next background save's job, never inside the driver's turn (the persist
/// call): the store keeps the newest saved snapshot until then.
#[test]
fn an_old_snapshot_is_freed_by_the_next_save_not_by_the_driver() {
    let disk = SimDisk::new(23);
    let saves = HeldSaves::default();
    let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    saves.install(&mut store);
    let first = local_snapshot(2, 2);
    let (_, state) = first.snapshot.clone().expect("a snapshot");
    let first_state = std::sync::Arc::downgrade(&state);
    drop(state);
    store
        .persist_owned(vec![op(1, Some(1), &[(1, 1), (2, 1), (3, 1)]), first])
        .unwrap();
    saves.run();
    assert!(matches!(
        store.poll_saved().unwrap(),
        Some(SaveOutcome::Saved { .. })
    ));
    assert!(
        first_state.upgrade().is_some(),
        "the store keeps the newest saved snapshot"
    );

    store
        .persist_owned(vec![op(3, None, &[(4, 1), (5, 1)]), local_snapshot(4, 4)])
        .unwrap();
    assert!(
        first_state.upgrade().is_some(),
        "the persist call (the driver's turn) did not free the old state"
    );
    saves.run();
    assert!(
        first_state.upgrade().is_none(),
        "the next save's job freed it"
    );
    assert!(matches!(
        store.poll_saved().unwrap(),
        Some(SaveOutcome::Saved { .. })
    ));
}

/// A crash while a background save is half-written (its file's fsync failed, then the machine
/// went down with a random prefix of the unsynced bytes): recovery removes the temporary file
/// and starts from the log, losing nothing. The failed save is counted, leaves the log as it
/// was, and the next compaction point saves a newer snapshot.
#[test]
fn a_crash_during_a_half_written_background_save_recovers_from_the_log() {
    for seed in 0..16 {
        let disk = SimDisk::new(100 + seed);
        let saves = HeldSaves::default();
        let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        saves.install(&mut store);
        let mut ops = vec![
            op(1, Some(1), &[(1, 1), (2, 1), (3, 1)]),
            local_snapshot(2, 2),
        ];
        store.persist(&ops).unwrap();
        disk.fail_next_syncs(1);
        saves.run();
        match store.poll_saved().unwrap() {
            Some(SaveOutcome::Failed { slot, .. }) => assert_eq!(slot, Slot(2), "seed {seed}"),
            other => panic!("seed {seed}: expected Failed, got {other:?}"),
        }
        assert_eq!(store.counters().snapshot_save_failures, 1);
        assert_eq!(store.counters().snapshots_saved, 0);

        let crashed = disk.fork();
        crashed.crash();
        let recovered = reopen(&crashed);
        assert_eq!(
            recovered.durable,
            reference_without_local(&ops),
            "seed {seed}"
        );
        assert!(!recovered.durable.lost, "seed {seed}");
        assert!(
            !crashed
                .paths()
                .iter()
                .any(|p| p.to_string_lossy().ends_with(".tmp")),
            "seed {seed}: the half-written file is removed at open"
        );

        // Retried at the next compaction point.
        let more = vec![op(3, None, &[(4, 1)]), local_snapshot(4, 3)];
        store.persist(&more).unwrap();
        saves.run();
        assert!(matches!(
            store.poll_saved().unwrap(),
            Some(SaveOutcome::Saved { slot: Slot(3), .. })
        ));
        ops.extend(more);
        drop(store);
        disk.crash();
        assert_eq!(reopen(&disk).durable, reference(&ops), "seed {seed}");
    }
}

/// The directory entry must be durable too: a save whose directory fsync failed is a failure,
/// the log is not compacted for it, and whatever a crash then keeps of the rename, recovery
/// gives back everything acknowledged.
#[test]
fn a_background_save_whose_directory_fsync_failed_compacts_nothing() {
    for seed in 0..8 {
        let disk = SimDisk::new(200 + seed);
        let saves = HeldSaves::default();
        let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
        saves.install(&mut store);
        let ops = vec![op(1, Some(1), &[(1, 1), (2, 1)]), local_snapshot(2, 1)];
        store.persist(&ops).unwrap();
        disk.fail_next_dir_syncs(1);
        saves.run();
        assert!(matches!(
            store.poll_saved().unwrap(),
            Some(SaveOutcome::Failed { .. })
        ));
        assert_eq!(store.counters().segments_dropped, 0);
        drop(store);
        disk.crash();
        let recovered = reopen(&disk).durable;
        assert!(
            recovered == reference(&ops) || recovered == reference_without_local(&ops),
            "seed {seed}: {recovered:?}"
        );
    }
}

/// Log segments are dropped only once the snapshot that covers them is durable (and, as
/// before, one snapshot late, so a damaged newest snapshot has the log after the one before).
#[test]
fn the_log_is_dropped_only_after_the_background_snapshot_is_durable() {
    let disk = SimDisk::new(31);
    let small = StorageConfig {
        log: LogConfig {
            segment_size_bytes: 256,
            preallocate_bytes: 0,
            ..LogConfig::default()
        },
        ..StorageConfig::default()
    };
    let saves = HeldSaves::default();
    let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), small.clone()).unwrap();
    saves.install(&mut store);
    let mut ops = Vec::new();
    let mut id = 0;
    let next = |ops: &mut Vec<NodePersist>, store: &mut DurableStore<SimDisk>, op: NodePersist| {
        ops.push(op.clone());
        store.persist(&[op]).unwrap();
    };
    for slot in 1..=20 {
        id += 1;
        next(&mut ops, &mut store, op(id, Some(1), &[(slot, 1)]));
    }
    id += 1;
    next(&mut ops, &mut store, local_snapshot(id, 10));
    saves.run();
    assert!(store.poll_saved().unwrap().is_some());
    for slot in 21..=40 {
        id += 1;
        next(&mut ops, &mut store, op(id, None, &[(slot, 1)]));
    }
    id += 1;
    next(&mut ops, &mut store, local_snapshot(id, 30));
    let dropped = store.counters().segments_dropped;
    assert!(store.poll_saved().unwrap().is_none());
    assert_eq!(
        store.counters().segments_dropped,
        dropped,
        "nothing dropped before the snapshot at 30 is durable"
    );
    saves.run();
    assert!(matches!(
        store.poll_saved().unwrap(),
        Some(SaveOutcome::Saved { slot: Slot(30), .. })
    ));
    assert!(
        store.counters().segments_dropped > dropped,
        "the log below what the snapshot at 10 needed goes once the one at 30 is durable"
    );
    drop(store);
    disk.crash();
    let (_, recovered) = DurableStore::open(disk.clone(), Path::new(DATA), small).unwrap();
    assert_eq!(recovered.durable, reference(&ops));
}

/// At most one background save: a local snapshot that comes while one runs is not saved (the
/// log covers it); one installed from a peer is saved synchronously, and the older background
/// save that runs after it has nothing to do (superseded, not a failure).
#[test]
fn one_background_save_at_a_time_and_installed_snapshots_stay_synchronous() {
    let disk = SimDisk::new(41);
    let saves = HeldSaves::default();
    let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    saves.install(&mut store);
    let mut ops = vec![op(1, Some(1), &[(1, 1), (2, 1), (3, 1), (4, 1)])];
    ops.push(local_snapshot(2, 1));
    ops.push(local_snapshot(3, 2));
    store.persist(&ops[..2]).unwrap();
    store.persist(&ops[2..]).unwrap();
    assert_eq!(saves.held(), 1, "one save in flight");
    assert_eq!(store.counters().snapshots_skipped, 1);

    let installed = installed_snapshot(4, 3);
    store.persist(std::slice::from_ref(&installed)).unwrap();
    ops.push(installed);
    assert_eq!(
        store.counters().snapshots_saved,
        1,
        "saved before it returned"
    );
    let crashed = disk.fork();
    crashed.crash();
    assert_eq!(reopen(&crashed).durable, reference(&ops));

    saves.run();
    assert!(matches!(
        store.poll_saved().unwrap(),
        Some(SaveOutcome::Superseded { slot: Slot(1) })
    ));
    assert_eq!(store.counters().snapshot_save_failures, 0);
    drop(store);
    disk.crash();
    assert_eq!(reopen(&disk).durable, reference(&ops));
}

/// A save that had not started when the store was dropped (shutdown) writes nothing.
#[test]
fn a_save_not_started_at_shutdown_is_abandoned() {
    let disk = SimDisk::new(51);
    let saves = HeldSaves::default();
    let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    saves.install(&mut store);
    let ops = vec![op(1, Some(1), &[(1, 1), (2, 1)]), local_snapshot(2, 1)];
    store.persist(&ops).unwrap();
    drop(store);
    saves.run();
    assert!(
        !disk
            .paths()
            .iter()
            .any(|p| p.to_string_lossy().contains(".snap")),
        "{:?}",
        disk.paths()
    );
    disk.crash();
    assert_eq!(reopen(&disk).durable, reference_without_local(&ops));
}

/// The default runner (an OS thread here): the save finishes off the caller's thread and the
/// driver's next poll sees it.
#[test]
fn the_default_runner_saves_on_another_thread() {
    let disk = SimDisk::new(61);
    let (mut store, _) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    let ops = vec![op(1, Some(1), &[(1, 1), (2, 1)]), local_snapshot(2, 1)];
    store.persist(&ops).unwrap();
    let outcome = loop {
        if let Some(outcome) = store.poll_saved().unwrap() {
            break outcome;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert!(matches!(outcome, SaveOutcome::Saved { slot: Slot(1), .. }));
    drop(store);
    disk.crash();
    assert_eq!(reopen(&disk).durable, reference(&ops));
}

fn addressed(ids: &[u64]) -> picket_core::paxos::Membership {
    let mut m = picket_core::paxos::Membership::voters(ids.iter().copied().map(NodeId).collect());
    m.addresses = ids
        .iter()
        .map(|i| picket_core::paxos::MemberAddress {
            id: NodeId(*i),
            peer: format!("10.0.0.{i}:7000"),
            client: format!("10.0.0.{i}:7001"),
            http: String::new(),
        })
        .collect();
    m
}

/// Issue 34: `--init` records the first membership with its addresses in the hard state, and a
/// joining replica records the one it learned (`Persist::schedule` without a snapshot); both
/// come back at restart as the schedule, until a snapshot's schedule takes over.
#[test]
fn the_first_membership_recorded_or_learned_comes_back_at_restart() {
    let disk = SimDisk::new(21);
    let first = addressed(&[1, 2, 3]);
    {
        let (mut store, mut recovered) =
            DurableStore::open_with(disk.clone(), Path::new(DATA), config(), EmptyDataDir::Init)
                .unwrap();
        assert_eq!(recovered.durable.schedule, None);
        store
            .record_membership_first(first.clone(), &mut recovered.durable)
            .unwrap();
        assert_eq!(
            recovered.durable.schedule,
            Some(Schedule::new(first.clone()))
        );
        store.persist(&[op(1, Some(2), &[(1, 2)])]).unwrap();
    }
    let (_, again) = DurableStore::open(disk.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(again.durable.schedule, Some(Schedule::new(first.clone())));

    // A joiner learns it: the persist carries the schedule and no snapshot.
    let joiner = SimDisk::new(22);
    {
        let (mut store, fresh) =
            DurableStore::open(joiner.clone(), Path::new(DATA), config()).unwrap();
        assert_eq!(fresh.durable.schedule, None);
        let mut learned = op(1, None, &[]);
        learned.schedule = Some(Schedule::new(first.clone()));
        store.persist(&[learned.clone()]).unwrap();
        assert_eq!(
            reference(&[learned]).schedule,
            Some(Schedule::new(first.clone()))
        );
    }
    let (mut store, again) = DurableStore::open(joiner.clone(), Path::new(DATA), config()).unwrap();
    assert_eq!(again.durable.schedule, Some(Schedule::new(first.clone())));

    // A snapshot's schedule counts once there is one.
    let later = Schedule::from_entries(vec![
        (Slot(1), first.clone()),
        (Slot(70), addressed(&[1, 2, 4])),
    ])
    .unwrap();
    let sm = picket_core::locks::LockStateMachine::new(picket_core::locks::LockConfig::default());
    store
        .persist(&[NodePersist {
            id: 2,
            snapshot: Some((Slot(80), sm.snapshot().into())),
            schedule: Some(later.clone()),
            ..op(2, None, &[])
        }])
        .unwrap();
    drop(store);
    let (_, again) = DurableStore::open(joiner, Path::new(DATA), config()).unwrap();
    assert_eq!(again.durable.schedule, Some(later));
}
