//! Crashes the fuzzers found in the crates under test, as readable regression tests (the raw
//! inputs are also kept in `corpus/<target>/crash-*`). See `docs/fuzzing.md`, "Findings".

use std::path::Path;

use picket_storage::{
    ClearedSlot, CorruptionKind, CrashMode, Disk, DiskFile, Error, Log, LogConfig, SimDisk,
};

fn disk_with(files: &[(&str, Vec<u8>)]) -> SimDisk {
    disk_with_seed(1, files)
}

fn disk_with_seed(seed: u64, files: &[(&str, Vec<u8>)]) -> SimDisk {
    let disk = SimDisk::new(seed);
    let dir = Path::new("/log");
    disk.create_dir_all(dir).unwrap();
    for (name, bytes) in files {
        let mut f = disk.create(&dir.join(name)).unwrap();
        f.write_all_at(bytes, 0).unwrap();
        f.sync_data().unwrap();
    }
    disk.sync_dir(dir).unwrap();
    disk
}

fn open(disk: &SimDisk) -> picket_storage::Result<Log<SimDisk>> {
    Log::open(disk.clone(), Path::new("/log"), LogConfig::default()).map(|(log, _)| log)
}

/// log_recovery: a segment named `00000000000000000000.seg` with a torn (short) header was
/// accepted as an empty log starting at index 0, whose `last_index()` (`next_index() - 1`)
/// underflowed inside `Log::open` (storage/src/log.rs `last_index`, called by `sync`).
/// Index 0 is no record's: the name is now refused as corruption.
#[test]
fn segment_named_index_zero_is_corruption() {
    let disk = disk_with(&[("00000000000000000000.seg", vec![0; 7])]);
    match open(&disk) {
        Err(Error::Corruption { kind, .. }) => assert_eq!(kind, CorruptionKind::BadFileName),
        other => panic!(
            "expected corruption, got {:?}",
            other.map(|l| l.next_index())
        ),
    }
}

/// Found while looking into the index-0 finding: a segment whose first index is so high that
/// its records' indexes pass `u64::MAX` must be refused as corruption (`Log::open` used to
/// overflow in `Segment::next_index`, a panic in debug builds and a wrapped index in release).
#[test]
fn segment_whose_indexes_overflow_is_refused() {
    use picket_storage::format::{encode_record, encode_segment_header};
    let first = u64::MAX;
    let mut bytes = encode_segment_header(first).to_vec();
    encode_record(&mut bytes, b"one");
    encode_record(&mut bytes, b"two");
    let disk = disk_with(&[(&format!("{first:020}.seg"), bytes)]);
    let result =
        std::panic::catch_unwind(|| open(&disk).map(|l| (l.first_index(), l.next_index())));
    match result {
        Ok(Err(Error::Corruption { .. })) => {}
        Ok(other) => panic!("expected corruption, got {other:?}"),
        Err(_) => panic!("Log::open panicked on a segment whose indexes overflow u64"),
    }
}

/// log_recovery (finding 9): a version-2 segment whose data is a commit record and no record
/// was accepted; an append could not roll (the next index was the segment's name), the file grew
/// past `segment_len_max`, and the next open refused the log. Such a segment is not one this log
/// writes: recovery refuses it and leaves the file as it was.
#[test]
fn commit_record_before_any_record_is_corruption() {
    use picket_storage::format::{encode_commit, encode_segment_header_v2};
    let first = 48;
    let mut bytes = encode_segment_header_v2(first).to_vec();
    encode_commit(&mut bytes, first);
    let name = format!("{first:020}.seg");
    let disk = disk_with(&[(&name, bytes.clone())]);
    match open(&disk) {
        Err(Error::Corruption { kind, offset, .. }) => {
            assert_eq!(
                kind,
                CorruptionKind::BadRecord("commit record before the segment's first record")
            );
            assert_eq!(offset, bytes.len() as u64 - 16, "at the commit record");
        }
        other => panic!(
            "expected corruption, got {:?}",
            other.map(|l| l.next_index())
        ),
    }
    assert_eq!(
        disk.read_file(&Path::new("/log").join(name)).unwrap(),
        bytes,
        "recovery that refuses a log changes nothing"
    );
}

/// log_recovery (finding 12): the last segment's marker slot 1 held a marker with one byte
/// flipped, so recovery ignored it, took the start of the data as the synced end and cut a torn
/// record. The log then wrote its own marker (seq 1) into that slot, unsynced as every marker; a
/// crash that tore that write kept a prefix of the new bytes over the damaged ones, which was the
/// marker before the flip, claiming a synced end over the bytes recovery had cut: the log that
/// had just recovered was refused as corruption. Recovery now zeroes the damaged slot, durably.
#[test]
fn a_damaged_marker_slot_is_cleared_before_it_is_written_again() {
    use picket_storage::format::{encode_marker, encode_record, encode_segment_header_v2, Marker};
    let name = "00000000000000000001.seg";
    let path = Path::new("/log").join(name);
    let mut bytes = encode_segment_header_v2(1).to_vec();
    encode_record(&mut bytes, &[7; 69]);
    let torn_at = bytes.len() as u64;
    encode_record(&mut bytes, &[9; 21]);
    let last = bytes.len() - 1;
    bytes[last] ^= 1; // the second record's checksum fails: a torn write, nothing valid after it
    let marker = encode_marker(Marker {
        seq: 1,
        synced_end: bytes.len() as u64,
    });
    bytes[64..96].copy_from_slice(&marker);
    bytes[67] ^= 0x83; // slot 1 damaged: the marker it held, one byte flipped
    let mut torn_markers = 0;
    for seed in 0..64 {
        let disk = disk_with_seed(seed, &[(name, bytes.clone())]);
        let (log, report) = Log::open(disk.clone(), Path::new("/log"), LogConfig::default())
            .expect("the damaged slot is ignored and the torn record cut");
        assert_eq!(log.next_index(), 2, "the one whole record is kept");
        assert_eq!(report.torn_tail.map(|t| t.offset), Some(torn_at));
        assert_eq!(
            report.cleared_marker_slots,
            vec![ClearedSlot {
                file: path.clone(),
                offset: 64
            }]
        );
        drop(log);
        // The zeroing is durable: a crash that keeps nothing unsynced finds the slot empty.
        let durable = disk.fork();
        durable.crash_with(CrashMode::DropUnsynced);
        let on_disk = durable.read_file(&path).unwrap();
        assert_eq!(
            on_disk[64..96],
            [0; 32],
            "seed {seed}: the slot was not cleared"
        );
        // And a crash that tears the marker written after recovery leaves a log that opens.
        let written = disk.read_file(&path).unwrap();
        disk.crash();
        torn_markers += usize::from(disk.read_file(&path).unwrap()[64..96] != written[64..96]);
        let log = open(&disk).unwrap_or_else(|e| panic!("seed {seed}: refused after a crash: {e}"));
        assert_eq!(log.next_index(), 2, "seed {seed}");
    }
    assert!(torn_markers > 0, "no seed lost or tore the marker write");
}
