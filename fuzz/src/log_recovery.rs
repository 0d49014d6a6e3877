//! `log_recovery`: segment files made of arbitrary bytes (or a real log, then damaged: cut,
//! flipped, overwritten, extended) are put on a [`SimDisk`] and the log is opened.
//!
//! Checked:
//! - Recovery never panics and never returns anything but `Ok` or `Error::Corruption`.
//! - On corruption, no file was modified.
//! - On success, the log holds exactly the records an independent reader of the files finds
//!   (per segment, in name order: records that check out from the header to the first bad one),
//!   with contiguous indexes starting at the first segment's name. It never invents a record.
//! - The recovered log re-opens (after a crash of the disk: recovery made its repairs durable)
//!   with the same records and nothing left to repair, and accepts an append after that.
//! - Stronger, where the damage allows a precise answer: an undamaged log recovers whole; a log
//!   whose last segment was only cut recovers a prefix (or reports the cut as damage below the
//!   synced end, or, for the documented embedded-frame limitation, corruption in the tail); one
//!   flipped byte in a segment before the last is corruption; so is one flipped byte in the
//!   records of the last segment (format version 2: synced and closed by commit records), never
//!   a torn tail that loses a record.
//!
//! Raw files come in both segment format versions (1: header and records; 2: header, marker
//! slots, records and commit records); real logs are written in version 2.

use std::collections::BTreeMap;
use std::path::Path;

use arbitrary::{Arbitrary, Result, Unstructured};
use picket_storage::format::{
    encode_commit, encode_marker, encode_record, encode_segment_header, encode_segment_header_v2,
    Marker, SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN_V2,
};
use picket_storage::{CorruptionKind, Disk, DiskFile, Error, Log, LogConfig, SimDisk};

const DIR: &str = "/log";

/// Damage applied to one file of a real log.
#[derive(Arbitrary, Debug, Clone)]
enum Damage {
    Cut {
        file: u8,
        offset: u16,
    },
    Flip {
        file: u8,
        offset: u16,
        mask: u8,
    },
    Overwrite {
        file: u8,
        offset: u16,
        bytes: Vec<u8>,
    },
    Extend {
        file: u8,
        bytes: Vec<u8>,
    },
    ZeroFrom {
        file: u8,
        offset: u16,
    },
}

/// Contents of one file of a raw log directory.
#[derive(Arbitrary, Debug, Clone)]
enum RawContent {
    /// Bytes as given.
    Bytes(Vec<u8>),
    /// A valid header for the file's name, then bytes as given.
    Header(Vec<u8>),
    /// A valid header, well-framed records, then bytes as given.
    Records(Vec<Vec<u8>>, Vec<u8>),
    /// A version 2 header, groups of records each closed by a commit record, a synced-end
    /// marker in slot `seq % 2` at `synced_end` bytes of data (possibly wrong), then bytes.
    RecordsV2 {
        groups: Vec<Vec<Vec<u8>>>,
        seq: u8,
        synced_end: u16,
        tail: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug, Clone)]
enum RawName {
    /// `<20 digits>.seg` of a small first index.
    Small(u8),
    /// `<20 digits>.seg` of any first index.
    Any(u64),
    /// A name that is not a segment's, or a malformed segment name.
    Odd(u8),
}

fn config(u: &mut Unstructured) -> Result<LogConfig> {
    Ok(LogConfig {
        segment_size_bytes: u.int_in_range(120..=1024)?,
        record_size_max: u.int_in_range(0..=300)?,
        preallocate_bytes: u.int_in_range(0..=96)?,
        ..LogConfig::default()
    })
}

fn segment_name(first_index: u64) -> String {
    format!("{first_index:020}.seg")
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let _ = reaches(data);
}

/// What an input exercised of format version 2 (the seed corpus picks inputs that reach each).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    /// A raw file built as a version 2 segment (commit records, a marker).
    pub raw_v2: bool,
    /// A real log with one flipped byte in the records of its last segment.
    pub flip_in_synced: bool,
}

/// Runs one input (as [`run`]) and says what it reached.
pub fn reaches(data: &[u8]) -> Reached {
    let mut u = Unstructured::new(data);
    let mut reached = Reached::default();
    let _ = run_inner(&mut u, &mut reached);
    reached
}

fn run_inner(u: &mut Unstructured, reached: &mut Reached) -> Result<()> {
    let config = config(u)?;
    let disk = SimDisk::new(u.arbitrary()?);
    let dir = Path::new(DIR);
    let expect = if u.arbitrary()? {
        real_log_damaged(u, &disk, dir, &config, reached)?
    } else {
        raw_files(u, &disk, dir, reached)?;
        Expect::Any
    };
    check_recovery(&disk, dir, &config, &expect);
    Ok(())
}

/// What the damage done lets us predict beyond the general rules.
#[derive(Debug)]
enum Expect {
    Any,
    /// Nothing damaged: recovery returns these records.
    Whole(Vec<Vec<u8>>),
    /// Only the last segment was cut: a prefix of these, or corruption in the tail.
    PrefixOf(Vec<Vec<u8>>),
    /// One byte of a segment before the last, or of the records of the last, was changed.
    Corrupt,
}

fn real_log_damaged(
    u: &mut Unstructured,
    disk: &SimDisk,
    dir: &Path,
    config: &LogConfig,
    reached: &mut Reached,
) -> Result<Expect> {
    let records: Vec<Vec<u8>> = u.arbitrary_iter()?.take(40).collect::<Result<_>>()?;
    let records: Vec<Vec<u8>> = records
        .into_iter()
        .map(|mut r| {
            r.truncate(config.record_size_max as usize);
            r
        })
        .collect();
    {
        let (mut log, _) = Log::open(disk.clone(), dir, config.clone()).expect("empty log opens");
        let mut next = log.next_index();
        for batch in records.chunks(3) {
            log.append(next, batch).expect("append within limits");
            next += batch.len() as u64;
            log.sync().expect("sync on a healthy disk");
        }
    }
    let damage: Vec<Damage> = u.arbitrary_iter()?.take(4).collect::<Result<_>>()?;
    let mut files = read_files(disk, dir);
    let names: Vec<String> = files.keys().cloned().collect();
    let last = names.len() - 1;
    let mut only_last_cut = true;
    let mut flips_before_last = 0;
    let mut flips_in_last_records = 0;
    let last_data_end = data_end(&files[&names[last]]);
    for d in &damage {
        let file = |f: u8| f as usize % names.len();
        match d {
            Damage::Cut { file: f, offset } => {
                let bytes = files.get_mut(&names[file(*f)]).expect("listed");
                bytes.truncate(*offset as usize);
                only_last_cut &= file(*f) == last;
            }
            Damage::Flip {
                file: f,
                offset,
                mask,
            } => {
                let bytes = files.get_mut(&names[file(*f)]).expect("listed");
                // Inside the file whatever the offset (a flip past the end did nothing).
                let at = *offset as usize % bytes.len().max(1);
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= mask;
                    if *mask != 0 {
                        only_last_cut = false;
                        // A flip in a marker slot is tolerated by design (docs/storage.md: a
                        // damaged slot is ignored, the other holds an older true synced end):
                        // no prediction beyond the reference reader's.
                        let in_marker_slots =
                            (SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN_V2).contains(&at);
                        if in_marker_slots {
                            // Nothing to count.
                        } else if file(*f) != last {
                            flips_before_last += 1;
                        } else if (SEGMENT_HEADER_LEN_V2..last_data_end).contains(&at) {
                            flips_in_last_records += 1;
                        }
                    }
                }
            }
            Damage::Overwrite {
                file: f,
                offset,
                bytes: new,
            } => {
                let bytes = files.get_mut(&names[file(*f)]).expect("listed");
                let at = (*offset as usize).min(bytes.len());
                let end = (at + new.len()).min(bytes.len());
                bytes[at..end].copy_from_slice(&new[..end - at]);
                only_last_cut &= end == at;
            }
            Damage::Extend {
                file: f,
                bytes: new,
            } => {
                files
                    .get_mut(&names[file(*f)])
                    .expect("listed")
                    .extend_from_slice(new);
                only_last_cut &= new.is_empty();
            }
            Damage::ZeroFrom { file: f, offset } => {
                let bytes = files.get_mut(&names[file(*f)]).expect("listed");
                let at = (*offset as usize).min(bytes.len());
                only_last_cut &= bytes[at..].iter().all(|b| *b == 0);
                bytes[at..].fill(0);
            }
        }
    }
    write_files(disk, dir, &files);
    Ok(if damage.is_empty() {
        Expect::Whole(records)
    } else if only_last_cut {
        Expect::PrefixOf(records)
    } else if damage.len() == 1 && (flips_before_last == 1 || flips_in_last_records == 1) {
        reached.flip_in_synced |= flips_in_last_records == 1;
        Expect::Corrupt
    } else {
        Expect::Any
    })
}

fn raw_files(
    u: &mut Unstructured,
    disk: &SimDisk,
    dir: &Path,
    reached: &mut Reached,
) -> Result<()> {
    let mut files = BTreeMap::new();
    let count = u.int_in_range(0..=4)?;
    for _ in 0..count {
        let name: RawName = u.arbitrary()?;
        let first_index = match name {
            RawName::Small(i) => Some(u64::from(i)),
            // Below 2^63: recovery refuses a segment whose indexes would pass u64::MAX
            // (tests/findings.rs `segment_whose_indexes_overflow_is_refused`), but the target's
            // append after a successful open could still reach the overflow assert of a log
            // that really is at u64::MAX, which no real log reaches.
            RawName::Any(i) => Some(i >> 1),
            RawName::Odd(_) => None,
        };
        let name = match (name, first_index) {
            (RawName::Odd(k), _) => match k % 4 {
                0 => "notes.txt".to_owned(),
                1 => "1.seg".to_owned(),
                2 => "0000000000000000000x.seg".to_owned(),
                _ => "99999999999999999999.seg".to_owned(),
            },
            (_, Some(i)) => segment_name(i),
            (_, None) => unreachable!("Small and Any carry an index"),
        };
        let content: RawContent = u.arbitrary()?;
        reached.raw_v2 |= matches!(content, RawContent::RecordsV2 { .. });
        let header = encode_segment_header(first_index.unwrap_or(1));
        let bytes = match content {
            RawContent::RecordsV2 {
                groups,
                seq,
                synced_end,
                tail,
            } => {
                let first = first_index.unwrap_or(1);
                let mut out = encode_segment_header_v2(first).to_vec();
                let mut next = first;
                for group in &groups {
                    for r in group {
                        encode_record(&mut out, r);
                    }
                    next = next.wrapping_add(group.len() as u64);
                    encode_commit(&mut out, next);
                }
                if seq > 0 {
                    let marker = Marker {
                        seq: u64::from(seq),
                        synced_end: SEGMENT_HEADER_LEN_V2 as u64 + u64::from(synced_end),
                    };
                    let at = SEGMENT_HEADER_LEN + 32 * usize::from(seq % 2);
                    out[at..at + 32].copy_from_slice(&encode_marker(marker));
                }
                out.extend_from_slice(&tail);
                out
            }
            RawContent::Bytes(b) => b,
            RawContent::Header(tail) => [&header[..], &tail].concat(),
            RawContent::Records(records, tail) => {
                let mut out = header.to_vec();
                for r in &records {
                    encode_record(&mut out, r);
                }
                out.extend_from_slice(&tail);
                out
            }
        };
        files.insert(name, bytes);
    }
    write_files(disk, dir, &files);
    Ok(())
}

fn read_files(disk: &SimDisk, dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for name in disk.list_files(dir).expect("log dir exists") {
        let bytes = disk
            .read_file(&dir.join(&name))
            .expect("listed file exists");
        files.insert(name, bytes);
    }
    files
}

fn write_files(disk: &SimDisk, dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    disk.create_dir_all(dir).expect("mkdir");
    for name in disk.list_files(dir).expect("log dir exists") {
        disk.remove_file(&dir.join(name)).expect("remove");
    }
    for (name, bytes) in files {
        let mut f = disk.create(&dir.join(name)).expect("create");
        f.write_all_at(bytes, 0).expect("write");
        f.sync_data().expect("sync");
    }
    disk.sync_dir(dir).expect("sync dir");
}

fn all_records(log: &Log<SimDisk>) -> Vec<Vec<u8>> {
    if log.is_empty() {
        return Vec::new();
    }
    log.read(log.first_index()..log.next_index(), u64::MAX)
        .expect("a recovered log reads back")
}

fn check_recovery(disk: &SimDisk, dir: &Path, config: &LogConfig, expect: &Expect) {
    let before = read_files(disk, dir);
    let (log, _report) = match Log::open(disk.clone(), dir, config.clone()) {
        Err(Error::Corruption { kind, .. }) => {
            assert_eq!(
                read_files(disk, dir),
                before,
                "recovery reporting corruption ({kind}) modified a file"
            );
            match expect {
                Expect::Whole(_) => panic!("an undamaged log reported corruption: {kind}"),
                Expect::PrefixOf(_) => assert!(
                    matches!(
                        kind,
                        CorruptionKind::BadRecordBeforeValid { .. }
                            | CorruptionKind::TailUnverified { .. }
                            | CorruptionKind::SyncedRecordDamaged { .. }
                    ),
                    "a log whose last segment was only cut reported {kind:?}"
                ),
                Expect::Any | Expect::Corrupt => {}
            }
            return;
        }
        Err(other) => panic!("recovery failed with a non-corruption error: {other}"),
        Ok(opened) => opened,
    };
    let records = all_records(&log);
    let (first_expected, found) = reference_reader(&before, config.record_size_max);
    assert_eq!(
        records, found,
        "recovery disagrees with the reference reader"
    );
    assert_eq!(
        log.first_index(),
        first_expected.unwrap_or(1),
        "first index"
    );
    assert_eq!(
        log.next_index(),
        log.first_index() + records.len() as u64,
        "next index"
    );
    match expect {
        Expect::Whole(all) => assert_eq!(&records, all, "an undamaged log lost records"),
        Expect::PrefixOf(all) => assert!(
            all.starts_with(&records),
            "a cut log is not a prefix of what was written"
        ),
        Expect::Corrupt => panic!("a flipped byte in synced records went unnoticed"),
        Expect::Any => {}
    }
    let first = log.first_index();
    drop(log);
    // Everything recovery repaired must be durable: a crash now keeps it.
    disk.crash();
    let (mut log, report) =
        Log::open(disk.clone(), dir, config.clone()).expect("a recovered log re-opens");
    assert_eq!(report.torn_tail, None, "second recovery repaired again");
    assert_eq!(log.first_index(), first);
    assert_eq!(all_records(&log), records, "records changed on re-open");
    let next = log.next_index();
    let after = &b"after"[..5.min(config.record_size_max as usize)];
    log.append(next, &[after]).expect("append after recovery");
    log.sync().expect("sync after recovery");
    drop(log);
    disk.crash();
    let (log, _) = Log::open(disk.clone(), dir, config.clone()).expect("re-opens after append");
    let mut expected = records;
    expected.push(after.to_vec());
    assert_eq!(all_records(&log), expected, "append after recovery");
}

/// Reads `files` independently of `picket-storage`: segments in name order, each from its header
/// to its first bad record. Returns the first segment's index and the records.
pub fn reference_reader(
    files: &BTreeMap<String, Vec<u8>>,
    record_len_max: u32,
) -> (Option<u64>, Vec<Vec<u8>>) {
    let mut first = None;
    let mut out = Vec::new();
    for (name, bytes) in files {
        let Some(index) = name
            .strip_suffix(".seg")
            .filter(|d| d.len() == 20)
            .and_then(|d| d.parse::<u64>().ok())
        else {
            continue;
        };
        first.get_or_insert(index);
        let Some(version) = header_version(bytes, index) else {
            continue;
        };
        let mut off = if version == 1 { 32 } else { 96 };
        while let Some((payload, end)) = frame_at(bytes, off, record_len_max, version) {
            if let Some(payload) = payload {
                out.push(payload.to_vec());
            }
            off = end;
        }
    }
    (first, out)
}

fn u32_le(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4 bytes"))
}

/// The segment's format version if its header is good (version 2 needs its marker slots).
fn header_version(bytes: &[u8], index: u64) -> Option<u32> {
    let fixed = bytes.len() >= 32
        && &bytes[0..8] == b"PICKTLOG"
        && bytes[12..20] == index.to_le_bytes()
        && bytes[20..28] == [0; 8]
        && crc32fast::hash(&bytes[0..28]) == u32_le(&bytes[28..32]);
    match u32_le(bytes.get(8..12)?) {
        1 if fixed => Some(1),
        2 if fixed && bytes.len() >= 96 => Some(2),
        _ => None,
    }
}

/// The frame at `off`: `Some(payload)` for a data record, `None` for a commit record
/// (`u32::MAX | crc | 8 bytes`, version 2 only).
fn frame_at(
    bytes: &[u8],
    off: usize,
    len_max: u32,
    version: u32,
) -> Option<(Option<&[u8]>, usize)> {
    let header = bytes.get(off..off + 8)?;
    if version == 2 && u32_le(&header[0..4]) == u32::MAX {
        let body = bytes.get(off + 8..off + 16)?;
        let mut h = crc32fast::Hasher::new();
        h.update(&header[0..4]);
        h.update(body);
        return (h.finalize() == u32_le(&header[4..8])).then_some((None, off + 16));
    }
    let (payload, end) = record_at(bytes, off, len_max)?;
    Some((Some(payload), end))
}

/// Where the frames of a real (version 2) segment end: its synced data.
fn data_end(bytes: &[u8]) -> usize {
    let mut off = SEGMENT_HEADER_LEN_V2;
    while let Some((_, end)) = frame_at(bytes, off, u32::MAX - 64, 2) {
        off = end;
    }
    off
}

fn record_at(bytes: &[u8], off: usize, len_max: u32) -> Option<(&[u8], usize)> {
    let header = bytes.get(off..off + 8)?;
    let len = u32_le(&header[0..4]);
    if len > len_max {
        return None;
    }
    let payload = bytes.get(off + 8..off + 8 + len as usize)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&header[0..4]);
    h.update(payload);
    (h.finalize() == u32_le(&header[4..8])).then_some((payload, off + 8 + len as usize))
}
