//! Format version 2 tells "never fully written" from "written, synced, then damaged"; version 1
//! segments still read, with version 1's rule.

use std::path::Path;

use picket_core::faults::Faults;
use picket_storage::format::{self, SEGMENT_HEADER_LEN, SEGMENT_VERSION_2};
use picket_storage::{
    CorruptionKind, CrashMode, Disk, DiskFile, Error, Log, LogConfig, SimDisk, WriteMode,
};

const DIR: &str = "/n/log";

fn config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 1 << 16,
        preallocate_bytes: 512,
        ..LogConfig::default()
    }
}

fn rec(i: u64) -> Vec<u8> {
    format!("record {i} {}", "x".repeat((i % 13) as usize)).into_bytes()
}

fn all(log: &Log<SimDisk>) -> Vec<Vec<u8>> {
    log.read(log.first_index()..log.next_index(), u64::MAX)
        .expect("read")
}

fn is_corruption(result: &Result<(Log<SimDisk>, picket_storage::RecoveryReport), Error>) -> bool {
    matches!(result, Err(Error::Corruption { .. }))
}

/// The simulator's "damage a synced record" fault, after either crash mode, on many seeds: a
/// damaged last record is always reported (it has a commit record after it, and the marker may
/// cover it), never cut as a torn tail. Half the seeds write their group commits with
/// `append_sync` and `RWF_DSYNC` (whose marker is not synced by the next commit).
#[test]
fn sim_disk_damage_of_the_last_synced_record_is_always_corruption() {
    for seed in 0..128u64 {
        let disk = SimDisk::new(seed);
        let dsync = seed % 4 >= 2;
        let config = || LogConfig {
            write_mode: if dsync {
                WriteMode::Dsync
            } else {
                WriteMode::Fdatasync
            },
            ..config()
        };
        let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("open");
        let batches = 1 + seed % 5;
        for b in 0..batches {
            let first = log.next_index();
            let batch: Vec<Vec<u8>> = (first..first + 1 + b % 3).map(rec).collect();
            if dsync {
                log.append_sync(first, &batch).expect("append_sync");
            } else {
                log.append(first, &batch).expect("append");
                log.sync().expect("sync");
            }
        }
        // An unsynced append that the crash may tear or drop.
        let next = log.next_index();
        log.append(next, &[rec(next)]).expect("append");
        drop(log);
        let mode = if seed % 2 == 0 {
            CrashMode::TornPrefix
        } else {
            CrashMode::DropUnsynced
        };
        disk.crash_with(mode);
        let (path, offset) = disk
            .damage_synced_record(Path::new(DIR))
            .expect("a synced record to damage");
        let before = disk.read_file(&path);
        let result = Log::open(disk.clone(), Path::new(DIR), config());
        assert!(
            is_corruption(&result),
            "seed {seed}: damage at {offset} of {} recovered as {:?}",
            path.display(),
            result.map(|(log, report)| (log.next_index(), report))
        );
        assert_eq!(disk.read_file(&path), before, "seed {seed}: file modified");
    }
}

/// The planted bug `Faults::old_tail_rule` (the simulation's `--break cut-synced`) brings back
/// the version 1 rule: the same damaged synced record is cut as a torn tail, and a synced record
/// is lost without a word.
#[test]
fn the_planted_old_tail_rule_cuts_a_damaged_synced_record() {
    let planted = LogConfig {
        faults: Faults {
            old_tail_rule: true,
            ..Faults::NONE
        },
        ..config()
    };
    let disk = SimDisk::new(7);
    let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("open");
    for i in 1..=4 {
        log.append(i, &[rec(i)]).expect("append");
        log.sync().expect("sync");
    }
    drop(log);
    disk.crash_with(CrashMode::DropUnsynced);
    disk.damage_synced_record(Path::new(DIR))
        .expect("a synced record to damage");
    assert!(is_corruption(&Log::open(
        disk.clone(),
        Path::new(DIR),
        config()
    )));
    let (log, report) =
        Log::open(disk.clone(), Path::new(DIR), planted).expect("the old rule recovers");
    assert!(report.torn_tail.is_some(), "cut as a torn tail: {report:?}");
    assert!(log.next_index() <= 4, "a synced record was cut");
}

/// A crash that tears the last (unsynced) group commit in any way is a torn tail, never
/// corruption: the two are told apart, not merged into "refuse".
#[test]
fn torn_unsynced_group_commits_are_never_corruption() {
    for seed in 0..128u64 {
        let disk = SimDisk::new(seed);
        let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("open");
        let mut synced = Vec::new();
        for b in 0..3 {
            let first = log.next_index();
            let batch: Vec<Vec<u8>> = (first..first + 2 + b).map(rec).collect();
            log.append(first, &batch).expect("append");
            log.sync().expect("sync");
            synced.extend(batch);
        }
        let first = log.next_index();
        let batch: Vec<Vec<u8>> = (first..first + 4).map(rec).collect();
        log.append(first, &batch).expect("append");
        drop(log);
        disk.crash();
        let (log, _) = Log::open(disk.clone(), Path::new(DIR), config())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got = all(&log);
        assert!(got.starts_with(&synced), "seed {seed}: synced records lost");
        assert!(
            batch.starts_with(&got[synced.len()..]),
            "seed {seed}: not a prefix of the torn batch"
        );
    }
}

/// Writes a version 1 log by hand: one full segment and a last one with `last` records.
fn v1_log(disk: &SimDisk, last: usize) -> Vec<Vec<u8>> {
    disk.create_dir_all(Path::new(DIR)).expect("mkdir");
    let mut records = Vec::new();
    let write = |first: u64, count: u64, records: &mut Vec<Vec<u8>>| {
        let mut bytes = format::encode_segment_header(first).to_vec();
        for i in first..first + count {
            format::encode_record(&mut bytes, &rec(i));
            records.push(rec(i));
        }
        let path = Path::new(DIR).join(format!("{first:020}.seg"));
        let mut f = disk.create(&path).expect("create");
        f.write_all_at(&bytes, 0).expect("write");
        f.sync_data().expect("sync");
    };
    write(1, 5, &mut records);
    write(6, last as u64, &mut records);
    disk.sync_dir(Path::new(DIR)).expect("sync dir");
    records
}

fn segment_version(disk: &SimDisk, first: u64) -> u32 {
    let bytes = disk
        .read_file(&Path::new(DIR).join(format!("{first:020}.seg")))
        .expect("segment");
    format::decode_segment_header_any(&bytes)
        .expect("header")
        .version
}

#[test]
fn version_1_segments_still_read_and_new_records_go_to_a_version_2_segment() {
    let disk = SimDisk::new(1);
    let records = v1_log(&disk, 3);
    let (mut log, report) = Log::open(disk.clone(), Path::new(DIR), config()).expect("open");
    assert_eq!(report.torn_tail, None);
    assert_eq!(all(&log), records);
    // The version 1 last segment was closed; a version 2 one follows it.
    assert_eq!(log.segment_count(), 3);
    assert_eq!(segment_version(&disk, 6), 1);
    assert_eq!(segment_version(&disk, 9), SEGMENT_VERSION_2);
    log.append(9, &[rec(9)]).expect("append");
    log.sync().expect("sync");
    drop(log);
    disk.crash();
    let (log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("reopen");
    let mut expected = records;
    expected.push(rec(9));
    assert_eq!(all(&log), expected);
}

#[test]
fn an_empty_version_1_last_segment_is_rewritten_as_version_2() {
    let disk = SimDisk::new(2);
    let records = v1_log(&disk, 0);
    let (log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("open");
    assert_eq!(all(&log), records);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(segment_version(&disk, 6), SEGMENT_VERSION_2);
}

/// Version 1 has no synced end and no commit records: a damaged last record of its last segment
/// is cut as a torn tail (the old rule, kept for old segments), damage before it is corruption.
#[test]
fn version_1_last_segment_keeps_the_old_rule() {
    let disk = SimDisk::new(3);
    let records = v1_log(&disk, 3);
    let last = Path::new(DIR).join(format!("{:020}.seg", 6));
    let bytes = disk.read_file(&last).expect("last");
    let last_record = bytes.len() - 8 - rec(8).len();
    let d = disk.fork();
    d.corrupt(&last, last_record as u64 + 9).expect("flip");
    let (log, report) = Log::open(d.clone(), Path::new(DIR), config()).expect("old rule");
    assert_eq!(all(&log), records[..records.len() - 1]);
    assert_eq!(report.torn_tail.expect("torn").offset, last_record as u64);

    let d = disk.fork();
    d.corrupt(&last, SEGMENT_HEADER_LEN as u64 + 9)
        .expect("flip");
    match Log::open(d.clone(), Path::new(DIR), config()) {
        Err(Error::Corruption {
            kind: CorruptionKind::BadRecordBeforeValid { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

/// `truncate_suffix` lowers the synced-end marker (durably) before it cuts, so the cut is not
/// taken for damage afterwards, and the records written after it are covered again.
#[test]
fn truncate_suffix_then_crash_is_not_synced_damage() {
    for mode in [CrashMode::TornPrefix, CrashMode::DropUnsynced] {
        let disk = SimDisk::new(4);
        let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("open");
        log.append(1, &(1..9).map(rec).collect::<Vec<_>>())
            .expect("append");
        log.sync().expect("sync");
        log.truncate_suffix(4).expect("truncate");
        drop(log);
        disk.crash_with(mode);
        let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("reopen");
        assert_eq!(all(&log), (1..5).map(rec).collect::<Vec<_>>());
        log.append(5, &[b"five again".as_slice()]).expect("append");
        log.sync().expect("sync");
        drop(log);
        disk.crash_with(mode);
        let (log, _) = Log::open(disk.clone(), Path::new(DIR), config()).expect("reopen");
        assert_eq!(log.next_index(), 6);
        // And the record written after the truncation is covered: damaging it is reported.
        drop(log);
        disk.damage_synced_record(Path::new(DIR)).expect("damage");
        assert!(is_corruption(&Log::open(
            disk.clone(),
            Path::new(DIR),
            config()
        )));
    }
}
