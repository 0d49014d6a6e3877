//! The durable store's background snapshot saves: the log covers a snapshot until its save is
//! durable, one save at a time, a crash or a failed fsync mid-save, abandoned saves.

use std::path::Path;

use picket_core::node::{NodeDurable, NodePersist};
use picket_core::paxos::Slot;
use picket_storage::{LogConfig, SimDisk};

use super::tests::{config, op, reference, DATA};
use super::*;

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
