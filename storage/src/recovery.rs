//! Recovery of the log at open: what a crash may leave is repaired, anything else is reported.
//!
//! Rules (the reasons are in `docs/storage.md`):
//! - Segments must be named `<20 digits>.seg`, carry a valid header naming the same first index,
//!   and follow each other without a gap. Otherwise: corruption.
//! - Every record of a segment that is not the last must check out, and must end exactly at the
//!   end of the file (segments before the last are fully synced before the next is created).
//! - In the last segment, zeros from the first bad record to the end of the file are
//!   preallocated space (or a zero-filled torn write, which looks the same): the log ends there,
//!   the zeros are kept for the next appends, and their extent is reported as `zero_tail`. Otherwise that bad record
//!   starts a *torn tail* if no valid record starts at any later offset of the file: the tail is
//!   cut off (durably) and reported. If a valid record does follow, the damage cannot be a torn
//!   append: corruption.
//! - A last segment shorter than a header, or all zeros, is a segment whose creation was torn:
//!   its header is rewritten from its name and the repair reported.

use std::path::{Path, PathBuf};

use crate::disk::{Disk, DiskFile};
use crate::error::{CorruptionKind, Error, IoOp, Result};
use crate::format::{self, Frame, ScanAhead};
use crate::log::{LogConfig, Segment};

/// What recovery repaired. Everything it did not repair was an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The torn tail cut from the last segment, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Zeros after the last valid record of the last segment: preallocated space, or a torn
    /// write whose data never reached the disk (the two look the same on disk). The log ends at
    /// `offset`; the zeros are kept as preallocation and the next append overwrites them.
    /// Reported so an operator can see where the log ended, never an error.
    pub zero_tail: Option<TornTail>,
    /// Damaged synced-end marker slots of the last segment (not empty, not a valid marker),
    /// cleared by recovery: zeroed and synced before the log writes a marker there again.
    pub cleared_marker_slots: Vec<ClearedSlot>,
}

/// A damaged synced-end marker slot that recovery zeroed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClearedSlot {
    /// The segment file.
    pub file: PathBuf,
    /// Offset of the slot (32 or 64).
    pub offset: u64,
}

/// A torn tail cut off the last segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub file: PathBuf,
    /// Offset of the first byte removed (the file's new length, or 0 for a torn header, which
    /// was then rewritten).
    pub offset: u64,
    /// How many bytes were removed.
    pub bytes: u64,
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Index 0 is never a record's (logs start at 1, `reset(0)` is refused): such a name is not a
    // segment's, and accepting it made `last_index()` underflow on an empty log.
    digits.parse().ok().filter(|index| *index != 0)
}

/// Scans `dir`, returning its segments (possibly none) with the last one's torn tail removed.
pub(crate) fn recover<D: Disk>(
    disk: &D,
    dir: &Path,
    config: &LogConfig,
) -> Result<(Vec<Segment<D::File>>, RecoveryReport)> {
    let mut names = Vec::new();
    for name in disk.list_files(dir).map_err(Error::io(IoOp::List, dir))? {
        if !name.ends_with(".seg") {
            continue; // not ours (an editor's backup, ...): left alone
        }
        match parse_segment_name(&name) {
            Some(index) => names.push((index, dir.join(&name))),
            None => {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    CorruptionKind::BadFileName,
                ))
            }
        }
    }
    names.sort();
    let mut report = RecoveryReport::default();
    let mut segments: Vec<Segment<D::File>> = Vec::with_capacity(names.len());
    let mut buf = Vec::new();
    let count = names.len();
    for (i, (name_index, path)) in names.into_iter().enumerate() {
        let is_last = i + 1 == count;
        // Checked on the name, before the segment is scanned: the last segment's scan may repair
        // it, and a file reported as corrupt must be left as it was.
        if let Some(prev) = segments.last() {
            let expected = prev.first_index + prev.offsets.len() as u64;
            if name_index != expected {
                return Err(Error::corruption(
                    &path,
                    0,
                    CorruptionKind::Gap {
                        expected,
                        found: name_index,
                    },
                ));
            }
        }
        let seg = scan_segment(
            disk,
            &path,
            name_index,
            is_last,
            config,
            &mut buf,
            &mut report,
        )?;
        assert_eq!(
            seg.first_index, name_index,
            "scan_segment checks the header"
        );
        segments.push(seg);
    }
    Ok((segments, report))
}

fn scan_segment<D: Disk>(
    disk: &D,
    path: &Path,
    name_index: u64,
    is_last: bool,
    config: &LogConfig,
    buf: &mut Vec<u8>,
    report: &mut RecoveryReport,
) -> Result<Segment<D::File>> {
    let mut file = disk.open(path).map_err(Error::io(IoOp::Open, path))?;
    let len = file.len().map_err(Error::io(IoOp::Stat, path))?;
    if len > config.segment_len_max() {
        return Err(Error::corruption(
            path,
            config.segment_len_max(),
            CorruptionKind::BadRecord("segment longer than any segment this log writes"),
        ));
    }
    // `resize` only zero-fills growth: the buffer is reused across segments, so recovering a
    // long log does not memset every segment before reading over it.
    buf.resize(len as usize, 0);
    file.read_exact_at(buf, 0)
        .map_err(Error::io(IoOp::Read, path))?;

    let header = match format::decode_segment_header_any(buf) {
        Ok(header) => header,
        Err(_) if is_last && format::is_torn_segment_header(buf) => {
            return repair_torn_header(disk, path, name_index, len, report);
        }
        Err(why) => return Err(Error::corruption(path, 0, CorruptionKind::BadHeader(why))),
    };
    if header.first_index != name_index {
        return Err(Error::corruption(
            path,
            0,
            CorruptionKind::NameMismatch {
                header: header.first_index,
                name: name_index,
            },
        ));
    }
    let version = header.version;
    let data_start = header.data_start;
    // Below the synced end every byte was durable once: damage there is never a torn write.
    // (The planted bug `Faults::old_tail_rule`, the simulation's `--break cut-synced`,
    // restores the version 1 rule: no synced end, and commit records do not count as valid
    // data after a bad record.)
    let old_rule = config.faults.old_tail_rule;
    let marker = header.marker.filter(|_| !old_rule);
    let synced_end = marker.map_or(data_start as u64, |m| m.synced_end);
    let scan_version = if old_rule {
        format::SEGMENT_VERSION_1
    } else {
        version
    };
    if synced_end < data_start as u64 || synced_end > len {
        let reason = if synced_end > len {
            "the file ends before its synced end"
        } else {
            "synced end inside the header"
        };
        return Err(Error::corruption(
            path,
            synced_end.min(len),
            CorruptionKind::SyncedRecordDamaged { reason, synced_end },
        ));
    }
    let synced_end = synced_end as usize;

    let mut offsets = Vec::new();
    let mut off = data_start;
    let mut file_len = len;
    let mut uncommitted = false;
    while off < buf.len() {
        match format::check_frame(buf, off, config.record_size_max, version) {
            Ok(frame) => {
                if off < synced_end && frame.end() > synced_end {
                    return Err(Error::corruption(
                        path,
                        off as u64,
                        CorruptionKind::SyncedRecordDamaged {
                            reason: "a record crosses the synced end",
                            synced_end: synced_end as u64,
                        },
                    ));
                }
                match frame {
                    Frame::Record { .. } => {
                        // The record's index is `first_index + offsets.len()`; a segment whose
                        // records would pass u64::MAX cannot have been written by this log.
                        if header
                            .first_index
                            .checked_add(offsets.len() as u64 + 1)
                            .is_none()
                        {
                            return Err(Error::corruption(
                                path,
                                off as u64,
                                CorruptionKind::BadRecord("record index past u64::MAX"),
                            ));
                        }
                        offsets.push(u32::try_from(off).expect("segment length bounded by u32"));
                        uncommitted = true;
                    }
                    Frame::Commit { next_index, .. } => {
                        // Every segment this log writes starts its data with a record (a commit
                        // closes records appended to the segment). A segment of commit records
                        // alone could not roll on append (its next index is its name) and would
                        // grow past the longest segment recovery accepts.
                        if offsets.is_empty() {
                            return Err(Error::corruption(
                                path,
                                off as u64,
                                CorruptionKind::BadRecord(
                                    "commit record before the segment's first record",
                                ),
                            ));
                        }
                        if next_index != header.first_index + offsets.len() as u64 {
                            return Err(Error::corruption(
                                path,
                                off as u64,
                                CorruptionKind::BadRecord(
                                    "commit record names another index than the records before it",
                                ),
                            ));
                        }
                        uncommitted = false;
                    }
                }
                off = frame.end();
            }
            Err(reason) if off < synced_end => {
                return Err(Error::corruption(
                    path,
                    off as u64,
                    CorruptionKind::SyncedRecordDamaged {
                        reason,
                        synced_end: synced_end as u64,
                    },
                ));
            }
            Err(why) if !is_last => {
                return Err(Error::corruption(
                    path,
                    off as u64,
                    CorruptionKind::BadRecord(why),
                ));
            }
            Err(_) if buf[off..].iter().all(|&b| b == 0) => {
                // Zeros to the end: preallocated space (or a tail whose data never reached the
                // disk, which looks the same). Appends continue here, overwriting them.
                report.zero_tail = Some(TornTail {
                    file: path.to_path_buf(),
                    offset: off as u64,
                    bytes: len - off as u64,
                });
                break;
            }
            Err(why) => {
                let scan =
                    format::scan_for_valid_record(buf, off, config.record_size_max, scan_version);
                let kind = match scan {
                    ScanAhead::NoneFound => None,
                    ScanAhead::Valid(valid_at) => Some(CorruptionKind::BadRecordBeforeValid {
                        reason: why,
                        valid_at: valid_at as u64,
                    }),
                    ScanAhead::BudgetExhausted => {
                        Some(CorruptionKind::TailUnverified { reason: why })
                    }
                };
                if let Some(kind) = kind {
                    return Err(Error::corruption(path, off as u64, kind));
                }
                file.set_len(off as u64)
                    .map_err(Error::io(IoOp::SetLen, path))?;
                file.sync_data().map_err(Error::io(IoOp::Fdatasync, path))?;
                file_len = off as u64;
                report.torn_tail = Some(TornTail {
                    file: path.to_path_buf(),
                    offset: off as u64,
                    bytes: len - off as u64,
                });
                break;
            }
        }
    }
    if is_last && version >= format::SEGMENT_VERSION_2 {
        clear_damaged_marker_slots(&mut file, path, buf, report)?;
    }
    Ok(Segment {
        first_index: header.first_index,
        path: path.to_path_buf(),
        file,
        version,
        data_start: data_start as u64,
        marker: marker.unwrap_or(format::Marker {
            seq: 0,
            synced_end: data_start as u64,
        }),
        uncommitted: uncommitted && version >= format::SEGMENT_VERSION_2,
        offsets,
        end: off as u64,
        len: file_len,
    })
}

/// Zeroes, durably, each marker slot of the last segment that is neither empty nor a valid marker.
///
/// Recovery ignores such a slot, but the log writes its markers without a sync of their own: a
/// crash that tears the next marker written there keeps a prefix of the new bytes over the old
/// ones, and that mix can be the marker the damage came from (one byte flipped back), claiming a
/// synced end this recovery may just have cut away. Found by the `log_recovery` fuzz target.
fn clear_damaged_marker_slots<F: DiskFile>(
    file: &mut F,
    path: &Path,
    buf: &[u8],
    report: &mut RecoveryReport,
) -> Result<()> {
    for seq in 0..2 {
        let offset = format::marker_slot_offset(seq);
        let at = offset as usize;
        let slot = &buf[at..at + format::MARKER_SLOT_LEN];
        if format::decode_marker(slot).is_none() && slot.iter().any(|&b| b != 0) {
            file.write_all_at(&[0; format::MARKER_SLOT_LEN], offset)
                .map_err(Error::io(IoOp::Write, path))?;
            file.sync_data().map_err(Error::io(IoOp::Fdatasync, path))?;
            report.cleared_marker_slots.push(ClearedSlot {
                file: path.to_path_buf(),
                offset,
            });
        }
    }
    Ok(())
}

/// The last segment's creation was torn (short or zero header): rewrite the header from the
/// file name (in the current format), durably, and report it.
fn repair_torn_header<D: Disk>(
    disk: &D,
    path: &Path,
    name_index: u64,
    len: u64,
    report: &mut RecoveryReport,
) -> Result<Segment<D::File>> {
    let mut file = disk.open(path).map_err(Error::io(IoOp::Open, path))?;
    file.set_len(0).map_err(Error::io(IoOp::SetLen, path))?;
    file.write_all_at(&format::encode_segment_header_v2(name_index), 0)
        .map_err(Error::io(IoOp::Write, path))?;
    file.sync_data().map_err(Error::io(IoOp::Fdatasync, path))?;
    report.torn_tail = Some(TornTail {
        file: path.to_path_buf(),
        offset: 0,
        bytes: len,
    });
    Ok(Segment::empty_v2(name_index, path.to_path_buf(), file))
}
