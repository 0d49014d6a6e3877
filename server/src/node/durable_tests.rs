use std::path::Path;

use picket_core::locks::{Command, Identity};
use picket_core::node::{NodeCommand, NodeDurable, NodePersist, ProposalId};
use picket_core::paxos::{Ballot, NodeId, Slot, Value};
use picket_core::time::Instant;
use picket_storage::{CrashMode, DiskFile, LogConfig, SimDisk, StorageConfig};

use super::*;

pub(super) fn config() -> StorageConfig {
    StorageConfig {
        log: LogConfig {
            preallocate_bytes: 0,
            ..LogConfig::default()
        },
        ..StorageConfig::default()
    }
}

pub(super) fn ballot(round: u64) -> Ballot {
    Ballot {
        round,
        node: NodeId(1),
    }
}

pub(super) fn value(n: u64) -> Value<NodeCommand> {
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

pub(super) fn op(id: u64, promised: Option<u64>, accepted: &[(u64, u64)]) -> NodePersist {
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

pub(super) fn reference(ops: &[NodePersist]) -> NodeDurable {
    let mut durable = NodeDurable::default();
    for op in ops {
        durable.apply_persist(op);
    }
    durable
}

pub(super) const DATA: &str = "/data";

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
