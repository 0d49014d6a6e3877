//! Crashes the fuzzers found in the crates under test, as readable regression tests (the raw
//! inputs are also kept in `corpus/<target>/crash-*`). See `docs/fuzzing.md`, "Findings".

use std::path::Path;

use picket_storage::{CorruptionKind, Disk, DiskFile, Error, Log, LogConfig, SimDisk};

fn disk_with(files: &[(&str, Vec<u8>)]) -> SimDisk {
    let disk = SimDisk::new(1);
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
