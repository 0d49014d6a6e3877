//! Recovery against damaged files: cut at every byte offset, a byte flipped at every offset, and
//! random damage. Recovery never panics; it returns a prefix of what was written or reports
//! corruption; damage to a record that has a valid record after it is always corruption, and so
//! is damage below the synced end (format version 2): a synced record is never cut as torn.

use std::path::{Path, PathBuf};

use picket_storage::format::{self, Frame, SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN_V2};
use picket_storage::{
    CorruptionKind, Disk, DiskFile, Error, Log, LogConfig, RecoveryReport, SimDisk,
};
use proptest::prelude::*;

const DIR: &str = "/n/log";

fn config(segment_size_bytes: u64) -> LogConfig {
    LogConfig {
        segment_size_bytes,
        ..LogConfig::default()
    }
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// A synced log of `lens.len()` records; returns the disk, the records and the segment paths.
fn build(seed: u64, lens: &[usize], segment_size: u64) -> (SimDisk, Vec<Vec<u8>>, Vec<PathBuf>) {
    let disk = SimDisk::new(seed);
    let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config(segment_size)).expect("open");
    let records: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| payload(i, l))
        .collect();
    // Several batches, so batch boundaries and roll-overs both occur.
    for chunk in records.chunks(3) {
        log.append(log.next_index(), chunk).expect("append");
        log.sync().expect("sync");
    }
    let segments = disk
        .paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    (disk, records, segments)
}

fn recover(disk: &SimDisk, segment_size: u64) -> Result<(Vec<Vec<u8>>, RecoveryReport), Error> {
    let (log, report) = Log::open(disk.clone(), Path::new(DIR), config(segment_size))?;
    let records = log.read(log.first_index()..log.next_index(), u64::MAX)?;
    Ok((records, report))
}

/// `(start, end, is_commit)` of the frames (records and commit records) in a segment file's
/// bytes.
fn frame_spans(bytes: &[u8]) -> Vec<(usize, usize, bool)> {
    let header = format::decode_segment_header_any(bytes).expect("well-formed test header");
    let mut spans = Vec::new();
    let mut off = header.data_start;
    // Stop at the zeros of preallocated space.
    while off < bytes.len() && bytes[off..].iter().any(|&b| b != 0) {
        let frame = format::check_frame(bytes, off, u32::MAX - 64, header.version)
            .expect("well-formed test log");
        spans.push((off, frame.end(), matches!(frame, Frame::Commit { .. })));
        off = frame.end();
    }
    spans
}

/// `(start, end)` of the data records framed in a segment file's bytes.
fn record_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    frame_spans(bytes)
        .into_iter()
        .filter(|s| !s.2)
        .map(|(o, e, _)| (o, e))
        .collect()
}

/// Where the frames of a segment end (the synced end of a test log built by [`build`]).
fn data_end(bytes: &[u8]) -> usize {
    frame_spans(bytes)
        .last()
        .map_or(SEGMENT_HEADER_LEN_V2, |s| s.1)
}

/// Zeroes both synced-end marker slots: the segment then reads like one whose markers never
/// reached the disk (only the records and commit records tell what was written whole).
fn forget_markers(disk: &SimDisk, path: &Path) {
    let mut f = disk.open(path).expect("open segment");
    f.write_all_at(
        &[0u8; SEGMENT_HEADER_LEN_V2 - SEGMENT_HEADER_LEN],
        SEGMENT_HEADER_LEN as u64,
    )
    .expect("zero markers");
    f.sync_data().expect("sync");
}

fn is_synced_damage(e: &Error) -> bool {
    matches!(
        e,
        Error::Corruption {
            kind: CorruptionKind::SyncedRecordDamaged { .. },
            ..
        }
    )
}

fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    record_spans(bytes).iter().map(|&(o, _)| o).collect()
}

fn set_len(disk: &SimDisk, path: &Path, len: u64) {
    let mut f = disk.open(path).expect("open segment");
    f.set_len(len).expect("set_len");
    f.sync_data().expect("sync");
}

const LENS: [usize; 12] = [10, 0, 70, 33, 90, 5, 64, 64, 1, 120, 48, 17];
const SEG: u64 = 300;

/// Every cut of the last segment: inside the header it is a torn segment creation (rewritten);
/// inside the synced data it is damage (never cut as torn); past it nothing is lost.
#[test]
fn cut_of_the_last_segment_at_every_offset_is_torn_only_past_the_synced_end() {
    let (disk, records, segs) = build(1, &LENS, SEG);
    assert!(
        segs.len() >= 3,
        "test wants several segments, got {}",
        segs.len()
    );
    let last = segs.last().expect("segments");
    let bytes = disk.read_file(last).expect("last segment");
    let spans = record_spans(&bytes);
    let synced_end = data_end(&bytes);
    let before_last = records.len() - spans.len();
    for cut in 0..bytes.len() {
        let d = disk.fork();
        set_len(&d, last, cut as u64);
        let result = recover(&d, SEG);
        if cut < SEGMENT_HEADER_LEN_V2 {
            let (got, report) = result.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert!(got[..] == records[..before_last], "cut at {cut}");
            assert_eq!(report.torn_tail.expect("torn creation").offset, 0);
        } else if cut < synced_end {
            let e = result.expect_err("a cut into synced records is not a torn write");
            assert!(is_synced_damage(&e), "cut at {cut}: {e}");
            assert_eq!(d.read_file(last).expect("last").len(), cut, "file modified");
            continue;
        } else {
            let (got, report) = result.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert!(got == records, "cut at {cut}");
            assert_eq!(report.torn_tail, None, "cut at {cut}");
        }
        // A second recovery finds nothing left to repair.
        let (_, report) = recover(&d, SEG).expect("second recovery");
        assert_eq!(report.torn_tail, None);
    }
}

/// Every cut of an append that was never synced (after the synced end, as a crash mid-write
/// leaves it): the synced records stay, then the whole unsynced ones before the cut, and the
/// partial one is cut and reported.
#[test]
fn cut_of_an_unsynced_append_at_every_offset_keeps_every_synced_record() {
    let (disk, records, segs) = build(9, &LENS, 1 << 20);
    let seg = &segs[0];
    let synced_end = data_end(&disk.read_file(seg).expect("segment"));
    let extra: Vec<Vec<u8>> = (0..3).map(|i| payload(100 + i, 20 + 7 * i)).collect();
    {
        let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), config(1 << 20)).expect("open");
        log.append(log.next_index(), &extra).expect("append");
        // No sync: the marker still says `synced_end`.
    }
    let bytes = disk.read_file(seg).expect("segment");
    let unsynced: Vec<(usize, usize)> = record_spans(&bytes)
        .into_iter()
        .filter(|&(o, _)| o >= synced_end)
        .collect();
    assert_eq!(unsynced.len(), extra.len());
    let appended_end = unsynced.last().expect("appended").1;
    for cut in synced_end..=appended_end {
        let d = disk.fork();
        set_len(&d, seg, cut as u64);
        let (got, report) = recover(&d, 1 << 20).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = unsynced.iter().filter(|&&(_, end)| end <= cut).count();
        let mut expected = records.clone();
        expected.extend_from_slice(&extra[..whole]);
        assert!(got == expected, "cut at {cut}");
        let whole_end = unsynced[..whole].last().map_or(synced_end, |s| s.1);
        match report.torn_tail {
            None => assert_eq!(cut, whole_end, "cut at {cut}: partial record kept"),
            Some(t) => assert_eq!((t.offset, cut > whole_end), (whole_end as u64, true)),
        }
    }
}

/// Every single-bit flip of the last records of the last segment (data and commit records),
/// with the synced-end marker on disk and with it lost (a power loss right after the last group
/// commit): recovery reports corruption or keeps every synced record, never fewer.
#[test]
fn every_bit_flip_of_the_last_records_is_never_cut_as_torn() {
    const LAST_N: usize = 5;
    for marker_lost in [false, true] {
        let (disk, records, segs) = build(10, &LENS, 1 << 20);
        let seg = &segs[0];
        if marker_lost {
            forget_markers(&disk, seg);
        }
        let bytes = disk.read_file(seg).expect("segment");
        let frames = frame_spans(&bytes);
        let from = frames[frames.len() - LAST_N].0;
        let end = data_end(&bytes);
        let mut corrupt = 0;
        for (at, &byte) in bytes.iter().enumerate().take(end).skip(from) {
            for bit in 0..8 {
                let d = disk.fork();
                let mut f = d.open(seg).expect("open");
                f.write_all_at(&[byte ^ (1 << bit)], at as u64)
                    .expect("flip");
                f.sync_data().expect("sync");
                match recover(&d, 1 << 20) {
                    Ok((got, _)) => assert!(
                        got == records,
                        "flip of bit {bit} at {at} (marker lost: {marker_lost}) lost records"
                    ),
                    Err(Error::Corruption { file, offset, .. }) => {
                        assert_eq!(&file, seg);
                        assert!(offset <= at as u64, "flip at {at} reported at {offset}");
                        corrupt += 1;
                    }
                    Err(e) => panic!("flip at {at}: {e}"),
                }
            }
        }
        // Only a flip in the very last commit record, with the marker lost, can pass as torn.
        let last_commit = end - frames.last().expect("frames").0;
        let torn_allowed = if marker_lost { 8 * last_commit } else { 0 };
        assert_eq!(
            corrupt,
            8 * (end - from) - torn_allowed,
            "marker lost: {marker_lost}"
        );
    }
}

#[test]
fn cut_of_any_earlier_segment_is_corruption() {
    let (disk, _, segs) = build(2, &LENS, SEG);
    for seg in &segs[..segs.len() - 1] {
        let len = disk.read_file(seg).expect("segment").len();
        for cut in 0..len {
            let d = disk.fork();
            set_len(&d, seg, cut as u64);
            match recover(&d, SEG) {
                Err(Error::Corruption { .. }) => {}
                other => panic!("{} cut at {cut}: {other:?}", seg.display()),
            }
        }
    }
}

#[test]
fn a_flipped_byte_anywhere_in_the_data_is_corruption() {
    let (disk, records, segs) = build(3, &LENS, SEG);
    let last = segs.last().expect("segments");
    let end = data_end(&disk.read_file(last).expect("last"));
    let markers = SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN_V2;
    for seg in &segs {
        let len = disk.read_file(seg).expect("segment").len();
        for at in 0..len {
            let d = disk.fork();
            d.corrupt(seg, at as u64).expect("flip");
            let result = recover(&d, SEG);
            if seg == last && at >= end {
                // Garbage in the preallocated zeros after the data: a torn tail, no record lost.
                let (got, report) = result.unwrap_or_else(|e| panic!("flip at {at}: {e}"));
                assert!(got == records, "flip at {at}");
                let t = report.torn_tail.expect("torn tail reported");
                assert_eq!(t.offset, end as u64);
            } else if markers.contains(&at) {
                // A damaged marker slot: the other slot (an older, true synced end) is used, or
                // none; the records themselves are whole.
                let (got, _) = result.unwrap_or_else(|e| panic!("flip at {at}: {e}"));
                assert!(got == records, "marker flip at {at}");
            } else {
                match result {
                    Err(Error::Corruption { file, offset, .. }) => {
                        assert_eq!(&file, seg, "flip at {at} blamed on the wrong file");
                        assert!(offset <= at as u64, "flip at {at} reported at {offset}");
                    }
                    other => panic!("{} flip at {at}: {other:?}", seg.display()),
                }
            }
        }
    }
}

#[test]
fn length_field_pointing_past_eof_with_valid_records_after_is_corruption() {
    let (disk, _, segs) = build(4, &LENS, 1 << 20);
    assert_eq!(segs.len(), 1);
    // Without the marker (which would make it synced damage), the commit and data records after
    // it are what tells it from a torn write.
    forget_markers(&disk, &segs[0]);
    let bytes = disk.read_file(&segs[0]).expect("segment");
    let offsets = record_offsets(&bytes);
    let victim = offsets[3];
    let mut f = disk.open(&segs[0]).expect("open");
    // A length well within the record size limit, but past the end of the file.
    f.write_all_at(&10_000_000u32.to_le_bytes(), victim as u64)
        .expect("write");
    f.sync_data().expect("sync");
    match recover(&disk, 1 << 20) {
        Err(Error::Corruption {
            offset,
            kind: CorruptionKind::BadRecordBeforeValid { valid_at, .. },
            ..
        }) => {
            assert_eq!(offset, victim as u64);
            // The commit record closing the batch of records 0..3 comes first.
            assert_eq!(valid_at, record_spans(&bytes)[3].1 as u64);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn zero_filled_and_partial_tails_are_torn_tails() {
    let (disk, records, segs) = build(5, &LENS, 1 << 20);
    let seg = &segs[0];
    let bytes = disk.read_file(seg).expect("segment");
    let data_end = data_end(&bytes) as u64;
    assert!(
        bytes.len() as u64 > data_end + 4096,
        "segment not preallocated"
    );
    // A torn append into the preallocated zeros, then zeros past the old end of the file.
    let mut f = disk.open(seg).expect("open");
    let mut partial = Vec::new();
    format::encode_record(&mut partial, &[9u8; 50]);
    f.write_all_at(&partial[..30], data_end)
        .expect("write partial record");
    let len = bytes.len() as u64 + 4096;
    f.set_len(len).expect("extend with zeros");
    f.sync_data().expect("sync");
    let (got, report) = recover(&disk, 1 << 20).expect("recover");
    assert!(got == records);
    let t = report.torn_tail.expect("torn tail");
    assert_eq!((t.offset, t.bytes), (data_end, len - data_end));
    assert_eq!(disk.read_file(seg).expect("segment").len() as u64, data_end);
}

#[test]
fn preallocated_zeros_are_a_clean_end() {
    let (disk, records, segs) = build(8, &LENS, 1 << 20);
    let len = disk.read_file(&segs[0]).expect("segment").len();
    let (got, report) = recover(&disk, 1 << 20).expect("recover");
    assert!(got == records);
    assert_eq!(report.torn_tail, None);
    let bytes = disk.read_file(&segs[0]).expect("segment");
    let data_end = data_end(&bytes) as u64;
    let zeros = report.zero_tail.expect("zero-filled tail reported");
    assert_eq!(zeros.file, segs[0]);
    assert_eq!(
        (zeros.offset, zeros.bytes),
        (data_end, len as u64 - data_end)
    );
    assert_eq!(bytes.len(), len, "preallocation cut");
}

#[test]
fn gap_and_bad_name_are_corruption() {
    let (disk, _, segs) = build(6, &LENS, SEG);
    let d = disk.fork();
    d.remove_file(&segs[1]).expect("remove");
    assert!(matches!(
        recover(&d, SEG),
        Err(Error::Corruption {
            kind: CorruptionKind::Gap { .. },
            ..
        })
    ));
    // A gap before a last segment with a torn tail: reported, and the torn file left untouched.
    let d = disk.fork();
    d.remove_file(&segs[1]).expect("remove");
    let last = segs.last().expect("segments");
    let data_end = data_end(&d.read_file(last).expect("last"));
    let mut f = d.open(last).expect("open");
    f.write_all_at(&[0xee; 5], data_end as u64)
        .expect("garbage");
    f.sync_data().expect("sync");
    let before = d.read_file(last);
    assert!(matches!(
        recover(&d, SEG),
        Err(Error::Corruption {
            kind: CorruptionKind::Gap { .. },
            ..
        })
    ));
    assert_eq!(
        d.read_file(last),
        before,
        "a file of a corrupt log was modified"
    );

    let d = disk.fork();
    let stray = Path::new(DIR).join("12.seg");
    d.create(&stray).expect("create");
    match recover(&d, SEG) {
        Err(Error::Corruption {
            file,
            kind: CorruptionKind::BadFileName,
            ..
        }) => assert_eq!(file, stray),
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn random_damage_never_panics_and_never_invents_records(
        seed in any::<u64>(),
        lens in prop::collection::vec(0usize..200, 1..24),
        segment_size in 120u64..1000,
        file_pick in any::<prop::sample::Index>(),
        flip_at in any::<prop::sample::Index>(),
        cut_at in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let (disk, records, segs) = build(seed, &lens, segment_size);
        let seg = file_pick.get(&segs);
        let bytes = disk.read_file(seg).expect("segment");
        let at = flip_at.index(bytes.len());
        disk.corrupt(seg, at as u64).expect("flip");
        if let Some(cut) = cut_at {
            set_len(&disk, seg, cut.index(bytes.len() + 1) as u64);
        }
        let is_last = seg == segs.last().expect("segments");
        // A record after the flipped byte that survives whole (the cut may have removed it).
        let len_after = cut_at.map_or(bytes.len(), |c| c.index(bytes.len() + 1));
        let followed_by_valid = frame_spans(&bytes).iter().any(|&(o, end, _)| o > at && end <= len_after);
        let synced_end = data_end(&bytes);
        let marker_hit = (SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN_V2).contains(&at);
        match recover(&disk, segment_size) {
            Ok((got, _)) => {
                prop_assert!(got.len() <= records.len());
                prop_assert!(got[..] == records[..got.len()], "recovered records are not a prefix");
                prop_assert!(is_last || marker_hit, "damage to an earlier segment went unnoticed");
                prop_assert!(!followed_by_valid || marker_hit,
                    "flip at {} with a valid record after it was taken for a torn tail", at);
                // Past the header, nothing synced is ever lost (a damaged marker slot falls back
                // to the other one, so synced records may then be cut only with a cut, too).
                let cut_in_data = cut_at.is_some_and(|c| c.index(bytes.len() + 1) < synced_end);
                if len_after >= SEGMENT_HEADER_LEN_V2 && !(marker_hit && cut_in_data) {
                    prop_assert!(got == records, "synced records lost: flip at {}", at);
                }
            }
            Err(Error::Corruption { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}

#[test]
fn zeroed_last_segment_is_a_torn_creation_but_a_zeroed_earlier_one_is_corruption() {
    let (disk, records, segs) = build(7, &LENS, SEG);
    let last = segs.last().expect("segments");
    let last_len = disk.read_file(last).expect("last").len();
    let in_last = record_offsets(&disk.read_file(last).expect("last")).len();

    let d = disk.fork();
    let mut f = d.open(last).expect("open");
    f.write_all_at(&vec![0u8; last_len], 0).expect("zero");
    f.sync_data().expect("sync");
    let (got, report) = recover(&d, SEG).expect("recover");
    assert!(got[..] == records[..records.len() - in_last]);
    let t = report.torn_tail.expect("torn tail");
    assert_eq!(
        (t.file.as_path(), t.offset, t.bytes),
        (last.as_path(), 0, last_len as u64)
    );
    // The header was rewritten from the name: appends continue at the right index.
    let (mut log, report) = Log::open(d.clone(), Path::new(DIR), config(SEG)).expect("reopen");
    assert_eq!(report.torn_tail, None);
    log.append(log.next_index(), &[b"again"]).expect("append");

    let d = disk.fork();
    let mut f = d.open(&segs[0]).expect("open");
    f.write_all_at(&[0u8; SEGMENT_HEADER_LEN], 0)
        .expect("zero header");
    f.sync_data().expect("sync");
    match recover(&d, SEG) {
        Err(Error::Corruption {
            file,
            offset: 0,
            kind: CorruptionKind::BadHeader(_),
        }) => assert_eq!(file, segs[0]),
        other => panic!("{other:?}"),
    }
}

/// The zeros ahead of the data are topped up in small steps (a sixteenth of
/// `preallocate_bytes`), so no single append has to write and flush the whole preallocation.
#[test]
fn preallocation_is_topped_up_in_steps() {
    const AHEAD: u64 = 1600;
    const STEP: u64 = AHEAD / 16;
    let disk = SimDisk::new(3);
    let mut cfg = config(1 << 20);
    cfg.preallocate_bytes = AHEAD;
    let (mut log, _) = Log::open(disk.clone(), Path::new(DIR), cfg).expect("open");
    let seg = disk
        .paths()
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a segment");
    let mut len = disk.read_file(&seg).expect("segment").len() as u64;
    let mut extensions = 0;
    for i in 0..400 {
        log.append(log.next_index(), &[payload(i, 20 + i % 30)])
            .expect("append");
        log.sync().expect("sync");
        let bytes = disk.read_file(&seg).expect("segment");
        let data_end = data_end(&bytes) as u64;
        let now = bytes.len() as u64;
        let ahead = now - data_end;
        assert!(
            (AHEAD - STEP..=AHEAD).contains(&ahead),
            "append {i}: {ahead} bytes of zeros ahead, want {}..={AHEAD}",
            AHEAD - STEP
        );
        if now > len {
            extensions += 1;
            assert!(
                now - len <= STEP + 60,
                "append {i}: one extension wrote {} bytes of zeros (step {STEP})",
                now - len
            );
        }
        len = now;
    }
    // About one extension per step of data, not one per append.
    assert!(
        extensions < 400 / 2,
        "{extensions} extensions for 400 appends"
    );
    let (got, report) = recover(&disk, 1 << 20).expect("recover");
    assert_eq!(got.len(), 400);
    assert_eq!(report.torn_tail, None);
}
