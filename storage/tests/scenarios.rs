//! Scenarios: roll-over, truncate-suffix, drop-below, reset, hard state and snapshot replacement
//! across crashes, bad input, failing fsyncs, and the same on a real disk in a temp dir.

use std::path::{Path, PathBuf};

use picket_storage::{
    CorruptionKind, CrashMode, Disk, Error, IoOp, Log, LogConfig, RealDisk, SimDisk, SnapshotStore,
    Storage, StorageConfig, WriteMode,
};

const ROOT: &str = "/node";

fn small() -> StorageConfig {
    StorageConfig {
        log: LogConfig {
            segment_size_bytes: 256,
            record_size_max: 1000,
            batch_records_max: 50,
            batch_bytes_max: 4000,
            preallocate_bytes: 100,
            write_mode: WriteMode::Fdatasync,
            ..LogConfig::default()
        },
        ..StorageConfig::default()
    }
}

fn rec(i: u64) -> Vec<u8> {
    format!("record-{i:04}-{}", "x".repeat((i % 40) as usize)).into_bytes()
}

fn recs(range: std::ops::Range<u64>) -> Vec<Vec<u8>> {
    range.map(rec).collect()
}

fn open<D: Disk + Clone>(disk: &D, root: &Path) -> Storage<D> {
    Storage::open(disk.clone(), root, small()).expect("open").0
}

fn all<D: Disk>(log: &Log<D>) -> Vec<Vec<u8>> {
    log.read(log.first_index()..log.next_index(), u64::MAX)
        .expect("read")
}

#[test]
fn roll_over_creates_segments_and_survives_reopen() {
    let disk = SimDisk::new(1);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    for i in 1..=60 {
        st.log.append(i, &[rec(i)]).expect("append");
    }
    st.log.sync().expect("sync");
    let segments = st.log.segment_count();
    assert!(segments >= 5, "only {segments} segments");
    drop(st);
    disk.crash_with(CrashMode::DropUnsynced);
    let st = open(&disk, root);
    assert_eq!(st.log.segment_count(), segments);
    assert_eq!((st.log.first_index(), st.log.last_index()), (1, 60));
    assert_eq!(all(&st.log), recs(1..61));
    // Bounded reads stop early but return at least one record.
    let some = st.log.read(1..61, 100).expect("read");
    assert!(!some.is_empty() && some.len() < 60);
    assert_eq!(some, recs(1..1 + some.len() as u64));
    assert_eq!(st.log.read(5..6, 0).expect("read"), vec![rec(5)]);
}

#[test]
fn read_verifies_checksums_and_names_the_damaged_record() {
    let disk = SimDisk::new(13);
    let mut st = open(&disk, Path::new(ROOT));
    st.log.append(1, &recs(1..4)).expect("append");
    st.log.sync().expect("sync");
    let seg = Path::new(ROOT).join("log/00000000000000000001.seg");
    let second = picket_storage::format::SEGMENT_HEADER_LEN_V2 as u64 + 8 + rec(1).len() as u64;
    disk.corrupt(&seg, second + 10).expect("flip");
    assert_eq!(
        st.log.read(1..2, u64::MAX).expect("first is fine"),
        vec![rec(1)]
    );
    match st.log.read(1..4, u64::MAX) {
        Err(Error::Corruption { file, offset, .. }) => assert_eq!((file, offset), (seg, second)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_sync_is_one_fdatasync_for_a_whole_batch() {
    let disk = SimDisk::new(2);
    let mut st = Storage::open(disk.clone(), Path::new(ROOT), StorageConfig::default())
        .expect("open")
        .0;
    let before = disk.sync_data_count();
    for round in 0..10u64 {
        let batch = recs(round * 40 + 1..round * 40 + 41);
        st.log.append(round * 40 + 1, &batch).expect("append");
        st.log.sync().expect("sync");
    }
    assert_eq!(disk.sync_data_count() - before, 10);
    assert_eq!(st.log.synced_index(), 400);
    // A sync with nothing new to sync costs no fdatasync.
    st.log.sync().expect("sync");
    assert_eq!(disk.sync_data_count() - before, 10);
}

#[test]
fn append_sync_is_one_sync_per_group_commit_in_either_write_mode_and_survives_crash() {
    for mode in [WriteMode::Separate, WriteMode::Fdatasync, WriteMode::Dsync] {
        let disk = SimDisk::new(3);
        let mut config = StorageConfig::default();
        config.log.write_mode = mode;
        let root = Path::new(ROOT);
        let mut st = Storage::open(disk.clone(), root, config.clone())
            .expect("open")
            .0;
        let before = disk.sync_data_count();
        for round in 0..10u64 {
            let batch = recs(round * 40 + 1..round * 40 + 41);
            st.log
                .append_sync(round * 40 + 1, &batch)
                .expect("append_sync");
            assert_eq!(st.log.synced_index(), round * 40 + 40, "{mode:?}");
        }
        assert_eq!(disk.sync_data_count() - before, 10, "{mode:?}");
        // Appended and not synced, then a group commit: both are durable after it.
        st.log.append(401, &recs(401..403)).expect("append");
        st.log
            .append_sync(403, &recs(403..405))
            .expect("append_sync");
        assert_eq!(st.log.synced_index(), 404, "{mode:?}");
        drop(st);
        disk.crash_with(CrashMode::DropUnsynced);
        let (st, report) = Storage::open(disk.clone(), root, config).expect("recover");
        assert_eq!(all(&st.log), recs(1..405), "{mode:?}");
        assert!(report.torn_tail.is_none(), "{mode:?}: {report:?}");
    }
}

#[test]
fn append_sync_rolls_over_and_recovers_on_a_real_disk_in_either_write_mode() {
    for mode in [WriteMode::Separate, WriteMode::Fdatasync, WriteMode::Dsync] {
        let dir = tempdir();
        let mut config = small();
        config.log.write_mode = mode;
        let mut st = Storage::open(RealDisk, dir.path(), config.clone())
            .expect("open")
            .0;
        for i in 1..41 {
            st.log.append_sync(i, &recs(i..i + 1)).expect("append_sync");
        }
        st.log.append_sync(41, &recs(41..61)).expect("append_sync");
        assert!(st.log.segment_count() > 2, "{mode:?}");
        drop(st);
        let (st, report) = Storage::open(RealDisk, dir.path(), config).expect("recover");
        assert_eq!(all(&st.log), recs(1..61), "{mode:?}");
        assert!(report.torn_tail.is_none(), "{mode:?}: {report:?}");
    }
}

#[test]
fn truncate_suffix_across_segments_then_overwrite_survives_crash() {
    let disk = SimDisk::new(3);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.log.append(1, &recs(1..41)).expect("append");
    st.log.sync().expect("sync");
    let segments = st.log.segment_count();
    st.log.truncate_suffix(7).expect("truncate");
    assert!(st.log.segment_count() < segments);
    assert_eq!(st.log.last_index(), 7);
    assert_eq!(st.log.synced_index(), 7);
    // The acceptor overwrites from 8 with different records.
    let new: Vec<Vec<u8>> = (8..13).map(|i| format!("new-{i}").into_bytes()).collect();
    st.log.append(8, &new).expect("append");
    st.log.sync().expect("sync");
    drop(st);
    disk.crash();
    let st = open(&disk, root);
    let mut expected = recs(1..8);
    expected.extend(new);
    assert_eq!(all(&st.log), expected);
}

#[test]
fn truncate_without_sync_after_crash_leaves_old_or_new_never_a_mix() {
    for seed in 0..32 {
        let disk = SimDisk::new(seed);
        let root = Path::new(ROOT);
        let mut st = open(&disk, root);
        st.log.append(1, &recs(1..31)).expect("append");
        st.log.sync().expect("sync");
        st.log.truncate_suffix(20).expect("truncate");
        st.log.append(21, &[b"fresh".to_vec()]).expect("append");
        drop(st);
        disk.crash();
        let st = open(&disk, root);
        let got = all(&st.log);
        assert!(
            got.len() == 20 || got.len() == 21,
            "seed {seed}: {} records",
            got.len()
        );
        assert_eq!(got[..20], recs(1..21)[..], "seed {seed}");
        if got.len() == 21 {
            assert_eq!(got[20], b"fresh", "seed {seed}");
        }
    }
}

#[test]
fn drop_below_removes_whole_segments_only() {
    let disk = SimDisk::new(4);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.log.append(1, &recs(1..41)).expect("append");
    st.log.sync().expect("sync");
    let removed = st.log.drop_below(25).expect("drop");
    assert!(removed > 0);
    let first = st.log.first_index();
    assert!(first > 1 && first <= 25, "first index {first}");
    assert_eq!(all(&st.log), recs(first..41));
    assert!(matches!(
        st.log.read(1..2, 10),
        Err(Error::OutOfRange { index: 1, .. })
    ));
    // Dropping everything keeps the last segment.
    st.log.drop_below(41).expect("drop");
    assert_eq!(st.log.last_index(), 40);
    assert!(st.log.segment_count() >= 1);
    let first = st.log.first_index();
    drop(st);
    disk.crash();
    let st = open(&disk, root);
    assert_eq!(st.log.first_index(), first);
    assert_eq!(all(&st.log), recs(first..41));
}

#[test]
fn reset_starts_an_empty_log_at_a_new_index() {
    let disk = SimDisk::new(5);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.log.append(1, &recs(1..21)).expect("append");
    st.log.reset(1000).expect("reset");
    assert!(st.log.is_empty());
    assert_eq!(st.log.next_index(), 1000);
    st.log.append(1000, &[rec(1000)]).expect("append");
    st.log.sync().expect("sync");
    drop(st);
    disk.crash();
    let st = open(&disk, root);
    assert_eq!((st.log.first_index(), st.log.last_index()), (1000, 1000));
    assert_eq!(all(&st.log), vec![rec(1000)]);
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let disk = SimDisk::new(6);
    let mut st = open(&disk, Path::new(ROOT));
    st.log.append(1, &recs(1..4)).expect("append");
    let before = all(&st.log);
    let check = |e: Error, log: &Log<SimDisk>, what: &str| {
        assert_eq!(all(log), before, "{what} changed the log");
        assert_eq!(log.next_index(), 4, "{what}");
        e
    };
    let e = st.log.append(7, &[b"x"]).expect_err("wrong index");
    assert!(matches!(
        check(e, &st.log, "wrong index"),
        Error::WrongIndex {
            expected: 4,
            got: 7
        }
    ));
    let e = st.log.append(4, &[vec![0u8; 1001]]).expect_err("too large");
    assert!(matches!(
        check(e, &st.log, "too large"),
        Error::RecordTooLarge {
            len: 1001,
            max: 1000
        }
    ));
    let e = st
        .log
        .append(4, &vec![b"r".to_vec(); 51])
        .expect_err("batch");
    assert!(matches!(
        check(e, &st.log, "batch"),
        Error::BatchTooLarge { records: 51, .. }
    ));
    let e = st
        .log
        .append(4, &[b"a".to_vec(), vec![0u8; 1001]])
        .expect_err("second too large");
    assert!(matches!(
        check(e, &st.log, "second too large"),
        Error::RecordTooLarge { .. }
    ));
    let e = st.log.truncate_suffix(9).expect_err("beyond end");
    assert!(matches!(
        check(e, &st.log, "truncate"),
        Error::OutOfRange { index: 10, .. }
    ));
    let e = st.log.read(2..9, 10).expect_err("read past end");
    assert!(matches!(
        check(e, &st.log, "read"),
        Error::OutOfRange { index: 9, .. }
    ));
    let e = st.log.drop_below(99).expect_err("drop past end");
    assert!(matches!(
        check(e, &st.log, "drop"),
        Error::OutOfRange { index: 99, .. }
    ));
    let msg = Error::WrongIndex {
        expected: 4,
        got: 7,
    }
    .to_string();
    assert!(msg.contains("next index of the log is 4"), "{msg}");
    let e = st
        .hard_state
        .save(&vec![0u8; 70 << 10])
        .expect_err("hard state too large");
    assert!(matches!(
        e,
        Error::BlobTooLarge {
            what: "hard state",
            ..
        }
    ));
    let bad = LogConfig {
        segment_size_bytes: 10,
        ..LogConfig::default()
    };
    assert!(matches!(
        Log::open(disk.clone(), Path::new("/other"), bad),
        Err(Error::Config(_))
    ));
}

#[test]
fn failed_fsync_poisons_the_log_until_reopened() {
    let disk = SimDisk::new(7);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.log.append(1, &recs(1..4)).expect("append");
    st.log.sync().expect("sync");
    st.log.append(4, &recs(4..6)).expect("append");
    disk.fail_next_syncs(1);
    assert!(matches!(
        st.log.sync(),
        Err(Error::Io {
            op: IoOp::Fdatasync,
            ..
        })
    ));
    assert!(matches!(st.log.sync(), Err(Error::Poisoned)));
    assert!(matches!(st.log.append(6, &[b"x"]), Err(Error::Poisoned)));
    drop(st);
    disk.crash_with(CrashMode::DropUnsynced);
    let st = open(&disk, root);
    assert_eq!(all(&st.log), recs(1..4));
}

#[test]
fn hard_state_replacement_is_atomic_across_crashes() {
    let disk = SimDisk::new(8);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    assert_eq!(st.hard_state.load().expect("load"), None);
    st.hard_state.save(b"ballot 1").expect("save");
    st.hard_state.save(b"ballot 2").expect("save");
    drop(st);
    disk.crash();
    let mut st = open(&disk, root);
    assert_eq!(
        st.hard_state.load().expect("load"),
        Some(b"ballot 2".to_vec())
    );
    // The temp file's fdatasync fails: nothing is renamed.
    disk.fail_next_syncs(1);
    assert!(matches!(
        st.hard_state.save(b"ballot 3"),
        Err(Error::Io {
            op: IoOp::Fdatasync,
            ..
        })
    ));
    drop(st);
    disk.crash();
    let mut st = open(&disk, root);
    assert_eq!(
        st.hard_state.load().expect("load"),
        Some(b"ballot 2".to_vec())
    );
    // The directory fsync fails: the rename is lost at the crash, never half a file.
    disk.fail_next_dir_syncs(1);
    assert!(matches!(
        st.hard_state.save(b"ballot 4"),
        Err(Error::Io {
            op: IoOp::FsyncDir,
            ..
        })
    ));
    assert_eq!(
        st.hard_state.load().expect("load"),
        Some(b"ballot 4".to_vec())
    );
    drop(st);
    disk.crash();
    let st = open(&disk, root);
    assert_eq!(
        st.hard_state.load().expect("load"),
        Some(b"ballot 2".to_vec())
    );
    assert!(
        !disk.file_exists(&root.join("hardstate.tmp")).expect("stat"),
        "stale temp file kept"
    );
}

#[test]
fn rename_lost_without_dir_sync_reverts_hard_state() {
    let disk = SimDisk::new(9);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.hard_state.save(b"old").expect("save");
    // Only the directory fsync fails: the data is durable in the temp file, the rename is not.
    let syncs = disk.sync_dir_count();
    drop(st);
    let path = root.join("hardstate");
    let tmp = root.join("hardstate.tmp");
    let mut f = disk.create(&tmp).expect("create");
    use picket_storage::DiskFile;
    let bytes =
        picket_storage::format::encode_blob(picket_storage::format::HARD_STATE_MAGIC, 0, b"new");
    f.write_all_at(&bytes, 0).expect("write");
    f.sync_data().expect("sync");
    disk.rename(&tmp, &path).expect("rename");
    disk.crash();
    assert_eq!(disk.sync_dir_count(), syncs);
    let st = open(&disk, root);
    assert_eq!(st.hard_state.load().expect("load"), Some(b"old".to_vec()));
}

#[test]
fn damaged_hard_state_is_corruption() {
    let disk = SimDisk::new(10);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.hard_state.save(b"promise").expect("save");
    disk.corrupt(&root.join("hardstate"), 35).expect("flip");
    match st.hard_state.load() {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, root.join("hardstate")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn snapshots_replace_keep_two_and_fall_back_past_a_damaged_one() {
    let disk = SimDisk::new(11);
    let root = Path::new(ROOT);
    let snap_dir = root.join("snapshots");
    let mut st = open(&disk, root);
    assert_eq!(st.snapshots.load_latest().expect("load").latest, None);
    for index in [10u64, 20, 30] {
        st.snapshots
            .save(index, format!("state@{index}").as_bytes())
            .expect("save");
    }
    assert_eq!(st.snapshots.indexes(), &[20, 30]);
    assert!(matches!(
        st.snapshots.save(25, b"old"),
        Err(Error::SnapshotNotNewer {
            index: 25,
            newest: 30
        })
    ));
    drop(st);
    disk.crash();
    let st = open(&disk, root);
    let load = st.snapshots.load_latest().expect("load");
    assert_eq!(load.latest, Some((30, b"state@30".to_vec())));
    assert!(load.damaged.is_empty());
    disk.corrupt(&snap_dir.join("00000000000000000030.snap"), 35)
        .expect("flip");
    let load = st.snapshots.load_latest().expect("load");
    assert_eq!(load.latest, Some((20, b"state@20".to_vec())));
    assert_eq!(load.damaged.len(), 1);
    assert_eq!(
        load.damaged[0].file,
        snap_dir.join("00000000000000000030.snap")
    );
    // Re-taking the damaged snapshot at the same index replaces it.
    let mut st = st;
    st.snapshots.save(30, b"state@30 again").expect("save");
    assert_eq!(st.snapshots.indexes(), &[20, 30]);
    let load = st.snapshots.load_latest().expect("load");
    assert_eq!(load.latest, Some((30, b"state@30 again".to_vec())));
    assert!(load.damaged.is_empty());
}

#[test]
fn snapshot_crash_before_rename_is_durable_keeps_the_previous_one() {
    let disk = SimDisk::new(12);
    let root = Path::new(ROOT);
    let mut st = open(&disk, root);
    st.snapshots.save(10, b"ten").expect("save");
    st.snapshots.save(20, b"twenty").expect("save");
    disk.fail_next_dir_syncs(1); // the rename of 30 into place never becomes durable
    assert!(st.snapshots.save(30, b"thirty").is_err());
    drop(st);
    disk.crash();
    let st = open(&disk, root);
    assert_eq!(st.snapshots.indexes(), &[10, 20]);
    assert_eq!(
        st.snapshots.load_latest().expect("load").latest,
        Some((20, b"twenty".to_vec()))
    );
    let names = disk.list_files(&root.join("snapshots")).expect("list");
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    // `kept` below 2 is raised to 2, so a damaged newest snapshot always has a fallback.
    let mut store =
        SnapshotStore::open(disk.clone(), &root.join("snapshots"), 1, 100).expect("reopen");
    store.save(40, b"forty").expect("save");
    assert_eq!(store.indexes(), &[20, 40]);
}

fn tempdir() -> tempfile::TempDir {
    // Under target/ (a real disk here), not /tmp, which may be a tmpfs elsewhere.
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tempfile::tempdir_in(base).expect("tempdir")
}

#[test]
fn real_disk_round_trip_roll_over_torn_tail_and_corruption() {
    let dir = tempdir();
    let root = dir.path();
    let mut st = open(&RealDisk, root);
    st.log.append(1, &recs(1..41)).expect("append");
    st.log.sync().expect("sync");
    st.hard_state.save(b"ballot 9").expect("save");
    st.snapshots.save(5, b"snap").expect("save");
    let segments = st.log.segment_count();
    assert!(segments > 2);
    drop(st);

    let st = open(&RealDisk, root);
    assert_eq!(all(&st.log), recs(1..41));
    assert_eq!(
        st.hard_state.load().expect("load"),
        Some(b"ballot 9".to_vec())
    );
    assert_eq!(
        st.snapshots.load_latest().expect("load").latest,
        Some((5, b"snap".to_vec()))
    );
    drop(st);

    // The data ends before the preallocated zeros (records and commit records).
    let mut names = RealDisk.list_files(&root.join("log")).expect("list");
    names.sort();
    let last = root.join("log").join(names.last().expect("segments"));
    let bytes = std::fs::read(&last).expect("read");
    let version = picket_storage::format::decode_segment_header_any(&bytes)
        .expect("header")
        .version;
    let mut data_end = picket_storage::format::SEGMENT_HEADER_LEN_V2;
    while let Ok(frame) = picket_storage::format::check_frame(&bytes, data_end, 1000, version) {
        data_end = frame.end();
    }

    // A torn append after the synced data (half a record): cut, nothing synced lost.
    let mut partial = Vec::new();
    picket_storage::format::encode_record(&mut partial, b"never synced");
    let mut torn = bytes[..data_end].to_vec();
    torn.extend_from_slice(&partial[..10]);
    std::fs::write(&last, &torn).expect("write");
    let (st, report) = Storage::open(RealDisk, root, small()).expect("recover");
    assert_eq!(all(&st.log), recs(1..41));
    let cut = report.torn_tail.expect("torn tail");
    assert_eq!(
        (cut.file.as_path(), cut.offset),
        (last.as_path(), data_end as u64)
    );
    assert_eq!(std::fs::metadata(&last).expect("stat").len(), cut.offset);
    drop(st);

    // Cut 3 bytes off the synced data (the issue 17 experiment): the synced-end marker says it
    // was durable, so this is damage, not a torn write, and the file is left as it was.
    let bytes = std::fs::read(&last).expect("read");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .and_then(|f| f.set_len(bytes.len() as u64 - 3))
        .expect("truncate");
    match Storage::open(RealDisk, root, small()) {
        Err(Error::Corruption {
            file,
            kind: CorruptionKind::SyncedRecordDamaged { .. },
            ..
        }) => assert_eq!(file, last),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::metadata(&last).expect("stat").len(),
        bytes.len() as u64 - 3
    );
    std::fs::write(&last, &bytes).expect("restore");

    // Flip a byte in the first segment: corruption, and the file is left as it was.
    let first = root.join("log").join(&names[0]);
    let mut bytes = std::fs::read(&first).expect("read");
    bytes[100] ^= 0x55; // in the first record (the header and marker slots end at 96)
    std::fs::write(&first, &bytes).expect("write");
    match Storage::open(RealDisk, root, small()) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, first);
            assert!(offset <= 100);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&first).expect("read"), bytes);
}

#[test]
fn same_seed_same_disk_after_crashes() {
    let run = |seed: u64| {
        let disk = SimDisk::new(seed);
        let root = Path::new(ROOT);
        let mut next = 1u64;
        for round in 0..6u64 {
            let mut st = open(&disk, root);
            next = st.log.next_index();
            let batch = recs(next..next + 7 + round);
            st.log.append(next, &batch).expect("append");
            if round % 2 == 0 {
                st.log.sync().expect("sync");
            }
            st.log
                .append(next + batch.len() as u64, &[rec(0)])
                .expect("append");
            st.hard_state
                .save(format!("term {round}").as_bytes())
                .expect("save");
            drop(st);
            disk.crash();
        }
        let files: Vec<(PathBuf, Vec<u8>)> = disk
            .paths()
            .into_iter()
            .map(|p| {
                let bytes = disk.read_file(&p).expect("file");
                (p, bytes)
            })
            .collect();
        (next, files)
    };
    assert_eq!(run(42), run(42));
    assert!((0..8).any(|s| run(s) != run(42)), "crashes ignore the seed");
}
