//! The segmented append-only log of opaque records.
//!
//! Records have contiguous `u64` indexes. The log is a sequence of segment files, each named by
//! the index of its first record (`<20 digits>.seg`) and opened by a header; only the last
//! segment is ever written. Appends go to the page cache; one [`Log::sync`] makes all of them
//! durable with one `fdatasync` (group commit). Opening a log recovers it (see [`crate::recovery`]).

use std::ops::Range;
use std::path::{Path, PathBuf};

use picket_core::faults::Faults;

use crate::disk::{Disk, DiskFile};
use crate::error::{CorruptionKind, Error, IoOp, Result};
use crate::format::{
    self, Marker, COMMIT_FRAME_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN_V2, SEGMENT_VERSION_2,
};
use crate::recovery::{self, RecoveryReport};

/// Limits and sizes of a [`Log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment is rolled over once the next record would take it past this many bytes (a single
    /// record larger than this gets a segment of its own). Default 64 MiB; at most `u32::MAX`.
    pub segment_size_bytes: u64,
    /// Largest record payload accepted. Also bounds what recovery will believe of a length field.
    /// Default 64 MiB.
    pub record_size_max: u32,
    /// Most records in one `append` call. Default 65 536.
    pub batch_records_max: usize,
    /// Most payload bytes in one `append` call. Default 256 MiB.
    pub batch_bytes_max: u64,
    /// Zero-fill the last segment this far ahead of its data (capped at the segment size), so
    /// that most appends overwrite allocated blocks inside the file: their `fdatasync` then needs
    /// no block allocation or size change in the file system journal. Default 4 MiB; 0 disables.
    pub preallocate_bytes: u64,
    /// Planted bugs ([`Faults`]; none but in the simulation): recovery reads
    /// [`Faults::old_tail_rule`].
    pub faults: Faults,
    /// How [`Log::append_sync`] makes its one write of a group commit durable. Default
    /// [`WriteMode::Fdatasync`].
    pub write_mode: WriteMode,
}

/// How a group commit written by [`Log::append_sync`] (its records and commit record, in one
/// write) is made durable. docs/PERFORMANCE.md has the A/B that chose the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// The records in one `pwrite`, the commit record in another, then the `fdatasync`: what
    /// `append` then `sync` do (every group commit before issue 39), kept for the A/B.
    Separate,
    /// One `pwrite`, then one `fdatasync` of the segment.
    #[default]
    Fdatasync,
    /// One `pwritev2` with `RWF_DSYNC`: durable when it returns, with the file size, and no
    /// `fdatasync`. It does not sync the segment's other unsynced writes (the synced-end marker
    /// of the commit before, a zero-fill): those become durable at the next `fdatasync` (a
    /// zero-fill step, a roll-over, a truncation) or by the kernel's writeback, so after a
    /// power loss the marker may lag more than one group commit (docs/storage.md).
    Dsync,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size_bytes: 64 << 20,
            record_size_max: 64 << 20,
            batch_records_max: 1 << 16,
            batch_bytes_max: 256 << 20,
            preallocate_bytes: 4 << 20,
            faults: Faults::NONE,
            write_mode: WriteMode::Fdatasync,
        }
    }
}

impl LogConfig {
    /// Checks the configuration, naming the first value out of range.
    pub fn validate(&self) -> Result<()> {
        let min = (SEGMENT_HEADER_LEN_V2 + RECORD_HEADER_LEN + COMMIT_FRAME_LEN) as u64;
        if self.segment_size_bytes < min || self.segment_size_bytes > u64::from(u32::MAX) {
            return Err(Error::Config(format!(
                "segment_size_bytes {} must be in [{min}, {}]",
                self.segment_size_bytes,
                u32::MAX
            )));
        }
        // A segment holding one maximal record must still have u32 offsets.
        let longest = min + u64::from(self.record_size_max);
        if longest > u64::from(u32::MAX) {
            return Err(Error::Config(format!(
                "record_size_max {} too large for u32 segment offsets",
                self.record_size_max
            )));
        }
        if self.batch_records_max == 0 || self.batch_bytes_max == 0 {
            return Err(Error::Config("batch limits must be positive".into()));
        }
        Ok(())
    }

    /// The longest segment file this configuration can produce: a full segment, or a header and
    /// one maximal record. Recovery rejects longer files as corruption rather than reading them.
    pub fn segment_len_max(&self) -> u64 {
        let one_record = (SEGMENT_HEADER_LEN_V2 + RECORD_HEADER_LEN + COMMIT_FRAME_LEN) as u64
            + u64::from(self.record_size_max);
        self.segment_size_bytes.max(one_record)
    }
}

/// One segment file as the log tracks it.
#[derive(Debug)]
pub(crate) struct Segment<F> {
    /// Index of the segment's first record (also in its name and header).
    pub first_index: u64,
    pub path: PathBuf,
    pub file: F,
    /// The segment's format version: 2 for every segment this code creates; a version 1
    /// segment is only ever last again after `truncate_suffix` removed the segments after it.
    pub version: u32,
    /// Where the records start (after the header and, in version 2, the marker slots).
    pub data_start: u64,
    /// Version 2: the synced-end marker last written to the header (`seq` 0: none yet, and
    /// `synced_end` is `data_start`). Never above `end`.
    pub marker: Marker,
    /// Version 2: records were written after the last commit record (the next sync closes
    /// them with one).
    pub uncommitted: bool,
    /// Byte offset of each record's frame: `offsets[i]` holds index `first_index + i`.
    /// Strictly increasing, all `>= data_start` and `< end`.
    pub offsets: Vec<u32>,
    /// Bytes of the segment in use (header and whole records); the next record goes here.
    pub end: u64,
    /// Length of the file: `end` plus zero-filled preallocated space (only in the last segment;
    /// a segment is cut back to `end` when the log rolls over to the next one).
    pub len: u64,
}

impl<F> Segment<F> {
    fn next_index(&self) -> u64 {
        self.first_index + self.offsets.len() as u64
    }

    /// Where the frames after record `i` start: record `i + 1`, or the end. In version 2 a
    /// commit record may lie between the two.
    fn frame_end(&self, i: usize) -> u64 {
        self.offsets.get(i + 1).map_or(self.end, |&o| u64::from(o))
    }

    /// A new, empty version 2 segment whose header is on disk.
    pub(crate) fn empty_v2(first_index: u64, path: PathBuf, file: F) -> Segment<F> {
        let data_start = SEGMENT_HEADER_LEN_V2 as u64;
        Segment {
            first_index,
            path,
            file,
            version: SEGMENT_VERSION_2,
            data_start,
            marker: Marker {
                seq: 0,
                synced_end: data_start,
            },
            uncommitted: false,
            offsets: Vec::new(),
            end: data_start,
            len: data_start,
        }
    }
}

/// Name of the segment file whose first record has index `first_index`.
pub fn segment_file_name(first_index: u64) -> String {
    format!("{first_index:020}.seg")
}

/// The append-only log. See the module docs.
#[derive(Debug)]
pub struct Log<D: Disk> {
    disk: D,
    dir: PathBuf,
    config: LogConfig,
    /// Ordered by first index, contiguous, never empty; only the last one is written.
    segments: Vec<Segment<D::File>>,
    /// The last segment has writes not yet made durable. Earlier segments never do: a roll-over
    /// syncs the segment it leaves before creating the next one.
    dirty: bool,
    /// Every record up to this index is durable. Never above `last_index()`.
    synced_index: u64,
    /// A write or fsync failed: the files are in an unknown state until reopened.
    poisoned: bool,
    /// Reused encoding buffer.
    buf: Vec<u8>,
}

impl<D: Disk> Log<D> {
    /// Opens the log in `dir` (creating it, with an empty log starting at index 1, if needed) and
    /// recovers it: a torn tail of the last segment is cut off and reported; anything else that is
    /// wrong is [`Error::Corruption`].
    pub fn open(disk: D, dir: &Path, config: LogConfig) -> Result<(Log<D>, RecoveryReport)> {
        config.validate()?;
        disk.create_dir_all(dir)
            .map_err(Error::io(IoOp::CreateDirAll, dir))?;
        let (mut segments, report) = recovery::recover(&disk, dir, &config)?;
        if segments.is_empty() {
            segments.push(create_segment(&disk, dir, 1, &config)?);
        }
        upgrade_last_segment(&disk, dir, &config, &mut segments)?;
        let mut log = Log {
            disk,
            dir: dir.to_path_buf(),
            config,
            segments,
            dirty: true,
            synced_index: 0,
            poisoned: false,
            buf: Vec::new(),
        };
        // What recovery read may still sit only in the page cache (after a process crash).
        log.sync()?;
        log.check_invariants();
        Ok((log, report))
    }

    /// The log's configuration.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Index of the first record held (or, if the log is empty, of the next one appended).
    pub fn first_index(&self) -> u64 {
        self.segments[0].first_index
    }

    /// Index the next appended record must have.
    pub fn next_index(&self) -> u64 {
        self.last_segment().next_index()
    }

    /// Index of the last record, `first_index() - 1` if the log is empty.
    pub fn last_index(&self) -> u64 {
        self.next_index() - 1
    }

    /// Whether the log holds no records.
    pub fn is_empty(&self) -> bool {
        self.next_index() == self.first_index()
    }

    /// Every record up to this index is durable.
    pub fn synced_index(&self) -> u64 {
        self.synced_index
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn last_segment(&self) -> &Segment<D::File> {
        self.segments.last().expect("a log always has a segment")
    }

    fn check_open(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Appends `records` with indexes `first_index, first_index + 1, ...`; `first_index` must be
    /// [`Log::next_index`]. The records are readable at once and durable after the next
    /// [`Log::sync`]. Bad input (wrong index, record or batch too large) changes nothing.
    pub fn append<R: AsRef<[u8]>>(&mut self, first_index: u64, records: &[R]) -> Result<()> {
        self.checked_write(first_index, records, Self::append_unchecked)
    }

    /// The one guard of every write of a batch: a closed or poisoned log and bad input
    /// (`check_batch`) change nothing; a write that fails poisons the log.
    fn checked_write<R: AsRef<[u8]>>(
        &mut self,
        first_index: u64,
        records: &[R],
        write: fn(&mut Self, &[R]) -> Result<()>,
    ) -> Result<()> {
        self.check_open()?;
        self.check_batch(first_index, records)?;
        let result = write(self, records);
        if result.is_err() {
            self.poisoned = true;
        }
        self.check_invariants();
        result
    }

    fn check_batch<R: AsRef<[u8]>>(&self, first_index: u64, records: &[R]) -> Result<()> {
        let expected = self.next_index();
        if first_index != expected {
            return Err(Error::WrongIndex {
                expected,
                got: first_index,
            });
        }
        let mut bytes = 0u64;
        for r in records {
            let len = r.as_ref().len();
            if len > self.config.record_size_max as usize {
                return Err(Error::RecordTooLarge {
                    len,
                    max: self.config.record_size_max,
                });
            }
            bytes += len as u64;
        }
        if records.len() > self.config.batch_records_max || bytes > self.config.batch_bytes_max {
            return Err(Error::BatchTooLarge {
                records: records.len(),
                bytes,
                max_records: self.config.batch_records_max,
                max_bytes: self.config.batch_bytes_max,
            });
        }
        assert!(
            expected.checked_add(records.len() as u64).is_some(),
            "log index overflow: next {expected} + {} records",
            records.len()
        );
        Ok(())
    }

    /// Appends `records` as [`Log::append`] does and makes every record appended so far
    /// durable as [`Log::sync`] does, in one group commit whose records and commit record go to
    /// the segment in **one** write: a `pwrite` and an `fdatasync`, or, with
    /// [`WriteMode::Dsync`], one `pwritev2(RWF_DSYNC)` and nothing else (then the synced-end
    /// marker, not itself synced, as after every sync). A batch that rolls the segment over,
    /// or earlier appends not yet synced, take the two-step path of `append` + `sync`.
    pub fn append_sync<R: AsRef<[u8]>>(&mut self, first_index: u64, records: &[R]) -> Result<()> {
        self.checked_write(first_index, records, Self::append_sync_unchecked)
    }

    fn append_sync_unchecked<R: AsRef<[u8]>>(&mut self, records: &[R]) -> Result<()> {
        if self.config.write_mode == WriteMode::Separate {
            self.append_unchecked(records)?;
            return self.sync_inner();
        }
        let mut buf = std::mem::take(&mut self.buf);
        let mut pending = Vec::with_capacity(records.len());
        let mut result = self.encode_batch(records, &mut buf, &mut pending);
        if result.is_ok() {
            result = self.write_committed(&mut buf, &mut pending);
        }
        self.buf = buf;
        result
    }

    /// The one write of [`Log::append_sync`]: `buf` (frames at `pending` offsets) and the
    /// commit record closing them, at the end of the last segment, made durable.
    fn write_committed(&mut self, buf: &mut Vec<u8>, pending: &mut Vec<u32>) -> Result<()> {
        // Unsynced records from before (appended, not synced) are not in this write's range.
        let dsync = self.config.write_mode == WriteMode::Dsync && !self.dirty;
        let next_index = self.next_index() + pending.len() as u64;
        let seg = self.last_segment();
        let commit = seg.version >= SEGMENT_VERSION_2 && (seg.uncommitted || !pending.is_empty());
        if commit {
            format::encode_commit(buf, next_index);
        }
        if buf.is_empty() {
            return self.sync_inner();
        }
        let prealloc = self.preallocate_to(seg.end + buf.len() as u64);
        let seg = self
            .segments
            .last_mut()
            .expect("a log always has a segment");
        if dsync {
            seg.file
                .write_all_at_dsync(buf, seg.end)
                .map_err(Error::io(IoOp::WriteDsync, &seg.path))?;
        } else {
            seg.file
                .write_all_at(buf, seg.end)
                .map_err(Error::io(IoOp::Write, &seg.path))?;
            self.dirty = true;
        }
        seg.end += buf.len() as u64;
        seg.len = seg.len.max(seg.end);
        seg.offsets.append(pending);
        seg.uncommitted = false;
        if prealloc > seg.len {
            // Zeros after the data: a crash that keeps them is a clean end, not a torn tail.
            // After a dsync write they are unsynced until the next fdatasync, which the next
            // group commit then does (so the zeros' blocks reach the disk early, as before).
            write_zeros(&mut seg.file, &seg.path, seg.len, prealloc)?;
            seg.len = prealloc;
            self.dirty = true;
        }
        if !dsync {
            let seg = self.last_segment_mut();
            seg.file
                .sync_data()
                .map_err(Error::io(IoOp::Fdatasync, &seg.path))?;
            self.dirty = false;
        }
        self.synced_index = self.last_index();
        let end = self.last_segment().end;
        self.write_marker(end)
    }

    fn append_unchecked<R: AsRef<[u8]>>(&mut self, records: &[R]) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let mut pending = Vec::with_capacity(records.len());
        let mut result = self.encode_batch(records, &mut buf, &mut pending);
        if result.is_ok() {
            result = self.write_pending(&buf, &mut pending);
        }
        self.buf = buf;
        result
    }

    /// Encodes `records` into `buf` (cleared first), their offsets into `pending`, for the end
    /// of the last segment; what does not fit in it is written, committed and synced there and
    /// the segment rolled over first, so `buf` holds what goes into the last segment.
    fn encode_batch<R: AsRef<[u8]>>(
        &mut self,
        records: &[R],
        buf: &mut Vec<u8>,
        pending: &mut Vec<u32>,
    ) -> Result<()> {
        buf.clear();
        for r in records {
            let payload = r.as_ref();
            let frame = (RECORD_HEADER_LEN + payload.len()) as u64;
            let seg = self.last_segment();
            let at = seg.end + buf.len() as u64;
            let has_records = !seg.offsets.is_empty() || !pending.is_empty();
            // Room for the frame and the commit record that will close it.
            let needed = frame + COMMIT_FRAME_LEN as u64;
            if has_records && at + needed > self.config.segment_size_bytes {
                self.flush_and_roll(buf, pending)?;
                buf.clear();
                continue_into(buf, pending, self.last_segment().end, payload);
                continue;
            }
            continue_into(buf, pending, seg.end, payload);
        }
        Ok(())
    }

    fn last_segment_mut(&mut self) -> &mut Segment<D::File> {
        self.segments
            .last_mut()
            .expect("a log always has a segment")
    }

    /// Writes `buf` (frames at `pending` offsets) at the end of the last segment.
    fn write_pending(&mut self, buf: &[u8], pending: &mut Vec<u32>) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let prealloc = self.preallocate_to(self.last_segment().end + buf.len() as u64);
        let seg = self
            .segments
            .last_mut()
            .expect("a log always has a segment");
        seg.file
            .write_all_at(buf, seg.end)
            .map_err(Error::io(IoOp::Write, &seg.path))?;
        seg.end += buf.len() as u64;
        seg.len = seg.len.max(seg.end);
        let wrote_records = !pending.is_empty();
        seg.offsets.append(pending);
        seg.uncommitted |= wrote_records && seg.version >= SEGMENT_VERSION_2;
        self.dirty = true;
        if prealloc > seg.len {
            // Zeros after the data: a crash that keeps them is a clean end, not a torn tail.
            write_zeros(&mut seg.file, &seg.path, seg.len, prealloc)?;
            seg.len = prealloc;
        }
        Ok(())
    }

    /// How far the last segment should be zero-filled once its data reaches `data_end` (0:
    /// nothing to do). The zeros are kept between `preallocate_bytes - step` and
    /// `preallocate_bytes` ahead of the data (capped at the segment size), where `step` is
    /// `preallocate_bytes / PREALLOCATE_STEPS`: each extension writes about one step of zeros.
    /// Small steps keep the zero-fill out of the latency tail: the `fdatasync` after an
    /// extension flushes one step (256 KiB by default), not the whole 4 MiB at once.
    fn preallocate_to(&self, data_end: u64) -> u64 {
        let seg = self.last_segment();
        let ahead = self.config.preallocate_bytes;
        if ahead == 0 {
            return 0;
        }
        let step = (ahead / PREALLOCATE_STEPS).max(1);
        if seg.len.saturating_sub(data_end) >= ahead.saturating_sub(step).max(1) {
            return 0;
        }
        let to = (data_end + ahead).min(self.config.segment_size_bytes);
        if to <= seg.len {
            0
        } else {
            to
        }
    }

    /// Finishes the last segment (write, commit record, fdatasync) and starts a new one after it.
    fn flush_and_roll(&mut self, buf: &[u8], pending: &mut Vec<u32>) -> Result<()> {
        self.write_pending(buf, pending)?;
        self.write_commit()?;
        // Segments before the last end exactly at their last record (recovery checks it).
        let seg = self
            .segments
            .last_mut()
            .expect("a log always has a segment");
        if seg.len > seg.end {
            seg.file
                .set_len(seg.end)
                .map_err(Error::io(IoOp::SetLen, &seg.path))?;
            seg.len = seg.end;
            self.dirty = true;
        }
        self.sync_inner()?;
        let next = self.next_index();
        let seg = create_segment(&self.disk, &self.dir, next, &self.config)?;
        self.segments.push(seg);
        Ok(())
    }

    /// Makes every record appended so far durable: one `fdatasync` of the last segment (the
    /// others were synced when it was created). After a failure the log is poisoned.
    pub fn sync(&mut self) -> Result<()> {
        self.check_open()?;
        let result = self.sync_inner();
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Closes the records written since the last commit record with one (version 2): a damaged
    /// last record then has a valid frame after it, and recovery knows it was written whole.
    fn write_commit(&mut self) -> Result<()> {
        let next_index = self.next_index();
        let seg = self.last_segment();
        if !seg.uncommitted {
            return Ok(());
        }
        let mut frame = Vec::with_capacity(COMMIT_FRAME_LEN);
        format::encode_commit(&mut frame, next_index);
        let prealloc = self.preallocate_to(seg.end + frame.len() as u64);
        let seg = self
            .segments
            .last_mut()
            .expect("a log always has a segment");
        seg.file
            .write_all_at(&frame, seg.end)
            .map_err(Error::io(IoOp::Write, &seg.path))?;
        seg.end += frame.len() as u64;
        seg.len = seg.len.max(seg.end);
        seg.uncommitted = false;
        self.dirty = true;
        if prealloc > seg.len {
            write_zeros(&mut seg.file, &seg.path, seg.len, prealloc)?;
            seg.len = prealloc;
        }
        Ok(())
    }

    /// Writes the synced-end marker of the last segment (version 2) into its next slot, after an
    /// fdatasync made everything below `end` durable. The write itself is not synced: the next
    /// group commit's fdatasync (or the kernel's writeback) makes it durable, and until then the
    /// previous slot still holds an older, true synced end.
    fn write_marker(&mut self, synced_end: u64) -> Result<()> {
        let seg = self
            .segments
            .last_mut()
            .expect("a log always has a segment");
        if seg.version < SEGMENT_VERSION_2 || seg.marker.synced_end == synced_end {
            return Ok(());
        }
        let marker = Marker {
            seq: seg.marker.seq + 1,
            synced_end,
        };
        seg.file
            .write_all_at(
                &format::encode_marker(marker),
                format::marker_slot_offset(marker.seq),
            )
            .map_err(Error::io(IoOp::Write, &seg.path))?;
        seg.marker = marker;
        Ok(())
    }

    fn sync_inner(&mut self) -> Result<()> {
        self.write_commit()?;
        if self.dirty {
            let seg = self
                .segments
                .last_mut()
                .expect("a log always has a segment");
            seg.file
                .sync_data()
                .map_err(Error::io(IoOp::Fdatasync, &seg.path))?;
            self.dirty = false;
        }
        self.synced_index = self.last_index();
        let end = self.last_segment().end;
        self.write_marker(end)
    }

    fn check_range(&self, index: u64) -> Result<()> {
        if index < self.first_index() || index > self.next_index() {
            return Err(Error::OutOfRange {
                index,
                first: self.first_index(),
                last_plus_one: self.next_index(),
            });
        }
        Ok(())
    }

    /// Reads the records with indexes in `range`, stopping early once more than `bytes_max` of
    /// payload would be returned (at least one record is returned if the range is not empty).
    /// Checksums are verified; a mismatch is [`Error::Corruption`].
    pub fn read(&self, range: Range<u64>, bytes_max: u64) -> Result<Vec<Vec<u8>>> {
        self.check_open()?;
        self.check_range(range.start)?;
        self.check_range(range.end)?;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        let mut index = range.start;
        while index < range.end {
            let s = self.segments.partition_point(|s| s.first_index <= index) - 1;
            let seg = &self.segments[s];
            let lo = (index - seg.first_index) as usize;
            let hi_max = ((range.end - seg.first_index) as usize).min(seg.offsets.len());
            let start = u64::from(seg.offsets[lo]);
            // Read only as far as `bytes_max` allows (the first record always).
            let budget = bytes_max.saturating_sub(bytes);
            let mut hi = lo + 1;
            while hi < hi_max {
                let frames = seg.frame_end(hi) - start;
                let payload = frames - (RECORD_HEADER_LEN * (hi + 1 - lo)) as u64;
                if payload > budget {
                    break;
                }
                hi += 1;
            }
            let end = seg.frame_end(hi - 1);
            let mut chunk = vec![0u8; (end - start) as usize];
            seg.file
                .read_exact_at(&mut chunk, start)
                .map_err(Error::io(IoOp::Read, &seg.path))?;
            for i in lo..hi {
                let off = (u64::from(seg.offsets[i]) - start) as usize;
                let frame_end = (seg.frame_end(i) - start) as usize;
                let bad = || {
                    Error::corruption(
                        &seg.path,
                        u64::from(seg.offsets[i]),
                        CorruptionKind::Checksum,
                    )
                };
                // In version 2 a commit record may follow the record before `frame_end`.
                let record_end = match format::check_record(
                    &chunk[..frame_end],
                    off,
                    self.config.record_size_max,
                ) {
                    Ok(e) if e == frame_end => e,
                    Ok(e) if seg.version >= SEGMENT_VERSION_2 => e,
                    _ => return Err(bad()),
                };
                let payload = &chunk[off + RECORD_HEADER_LEN..record_end];
                if !out.is_empty() && bytes + payload.len() as u64 > bytes_max {
                    return Ok(out);
                }
                bytes += payload.len() as u64;
                out.push(payload.to_vec());
                index += 1;
            }
        }
        Ok(out)
    }

    /// Removes every record with an index above `after` (an acceptor overwriting its suffix).
    /// Durable when it returns. `after` must be in `[first_index() - 1, last_index()]`.
    pub fn truncate_suffix(&mut self, after: u64) -> Result<()> {
        self.check_open()?;
        if after == u64::MAX {
            return Err(Error::OutOfRange {
                index: after,
                first: self.first_index(),
                last_plus_one: self.next_index(),
            });
        }
        self.check_range(after + 1)?;
        if after == self.last_index() {
            return Ok(());
        }
        let result = self.truncate_inner(after);
        if result.is_err() {
            self.poisoned = true;
        }
        self.check_invariants();
        result
    }

    fn truncate_inner(&mut self, after: u64) -> Result<()> {
        // Whole segments go first, newest first, each removal made durable before the next, so
        // that a crash at any point leaves a log that is a prefix of the old one.
        while self.segments.len() > 1 && self.last_segment().first_index > after {
            let seg = self.segments.pop().expect("len > 1");
            drop(seg.file);
            self.remove_durably(&seg.path)?;
            self.dirty = false;
        }
        let seg = self
            .segments
            .last_mut()
            .expect("a log always has a segment");
        let keep = (after + 1 - seg.first_index) as usize;
        if keep < seg.offsets.len() {
            let new_end = u64::from(seg.offsets[keep]);
            if seg.marker.synced_end > new_end {
                // The marker must never claim bytes the file no longer has: lowered durably
                // before the cut, so a crash in between leaves records above a true marker.
                let marker = Marker {
                    seq: seg.marker.seq + 1,
                    synced_end: new_end,
                };
                seg.file
                    .write_all_at(
                        &format::encode_marker(marker),
                        format::marker_slot_offset(marker.seq),
                    )
                    .map_err(Error::io(IoOp::Write, &seg.path))?;
                seg.file
                    .sync_data()
                    .map_err(Error::io(IoOp::Fdatasync, &seg.path))?;
                seg.marker = marker;
            }
            seg.uncommitted = keep > 0 && seg.version >= SEGMENT_VERSION_2;
            seg.offsets.truncate(keep);
            seg.end = new_end;
            seg.len = new_end;
            seg.file
                .set_len(new_end)
                .map_err(Error::io(IoOp::SetLen, &seg.path))?;
            self.dirty = true;
        }
        self.sync_inner()
    }

    /// Removes whole segments all of whose records are below `index` (compaction after a
    /// snapshot). The last segment is never removed, so [`Log::first_index`] may stay below
    /// `index`. Returns how many segments were removed.
    pub fn drop_below(&mut self, index: u64) -> Result<usize> {
        self.check_open()?;
        if index > self.next_index() {
            return Err(Error::OutOfRange {
                index,
                first: self.first_index(),
                last_plus_one: self.next_index(),
            });
        }
        let mut removed = 0;
        // Oldest first, one durable removal at a time: a crash leaves a suffix of the log.
        while self.segments.len() > 1 && self.segments[1].first_index <= index {
            let seg = self.segments.remove(0);
            drop(seg.file);
            if let Err(e) = self.remove_durably(&seg.path) {
                self.poisoned = true;
                return Err(e);
            }
            removed += 1;
        }
        self.check_invariants();
        Ok(removed)
    }

    /// Throws the whole log away and starts an empty one whose next index is `next_index` (a
    /// replica installing a snapshot from a peer). A crash part-way leaves a prefix of the old
    /// log or an empty log at index 1; the caller, who saved the snapshot first, repeats the reset.
    pub fn reset(&mut self, next_index: u64) -> Result<()> {
        self.check_open()?;
        if next_index == 0 {
            return Err(Error::OutOfRange {
                index: 0,
                first: 1,
                last_plus_one: u64::MAX,
            });
        }
        let result = self.reset_inner(next_index);
        if result.is_err() {
            self.poisoned = true;
        }
        self.check_invariants();
        result
    }

    fn reset_inner(&mut self, next_index: u64) -> Result<()> {
        while let Some(seg) = self.segments.pop() {
            drop(seg.file);
            self.remove_durably(&seg.path)?;
        }
        self.dirty = false;
        self.segments.push(create_segment(
            &self.disk,
            &self.dir,
            next_index,
            &self.config,
        )?);
        self.synced_index = next_index - 1;
        Ok(())
    }

    fn remove_durably(&self, path: &Path) -> Result<()> {
        self.disk
            .remove_file(path)
            .map_err(Error::io(IoOp::RemoveFile, path))?;
        self.disk
            .sync_dir(&self.dir)
            .map_err(Error::io(IoOp::FsyncDir, &self.dir))
    }

    fn check_invariants(&self) {
        if self.poisoned {
            return;
        }
        assert!(!self.segments.is_empty(), "log without segments");
        for pair in self.segments.windows(2) {
            assert_eq!(
                pair[0].next_index(),
                pair[1].first_index,
                "segments not contiguous: {} then {}",
                pair[0].path.display(),
                pair[1].path.display()
            );
        }
        let last = self.last_segment();
        assert!(
            last.len >= last.end,
            "segment file length {} below its data end {}",
            last.len,
            last.end
        );
        for seg in &self.segments[..self.segments.len() - 1] {
            assert_eq!(
                seg.len,
                seg.end,
                "{} keeps preallocated space",
                seg.path.display()
            );
        }
        assert!(
            last.end >= last.data_start,
            "segment end {} inside its header (data starts at {})",
            last.end,
            last.data_start
        );
        assert!(
            last.marker.synced_end <= last.end,
            "synced-end marker {} past the segment end {}",
            last.marker.synced_end,
            last.end
        );
        if let Some(&o) = last.offsets.last() {
            assert!(
                u64::from(o) < last.end,
                "record offset {o} at or past end {}",
                last.end
            );
        }
        assert!(
            self.synced_index <= self.last_index() || self.is_empty(),
            "synced index {} above last index {}",
            self.synced_index,
            self.last_index()
        );
    }
}

/// Appends one record's frame to `buf`, noting its offset in the segment.
fn continue_into(buf: &mut Vec<u8>, pending: &mut Vec<u32>, seg_end: u64, payload: &[u8]) {
    let at = seg_end + buf.len() as u64;
    pending.push(u32::try_from(at).expect("segment offsets fit in u32 (checked by LogConfig)"));
    format::encode_record(buf, payload);
}

/// Creates a segment file with its header, durably: fdatasync the file, then the directory.
pub(crate) fn create_segment<D: Disk>(
    disk: &D,
    dir: &Path,
    first_index: u64,
    config: &LogConfig,
) -> Result<Segment<D::File>> {
    let path = dir.join(segment_file_name(first_index));
    let mut file = disk.create(&path).map_err(Error::io(IoOp::Create, &path))?;
    file.write_all_at(&format::encode_segment_header_v2(first_index), 0)
        .map_err(Error::io(IoOp::Write, &path))?;
    let header_len = SEGMENT_HEADER_LEN_V2 as u64;
    let len = (header_len + config.preallocate_bytes)
        .min(config.segment_size_bytes)
        .max(header_len);
    write_zeros(&mut file, &path, header_len, len)?;
    file.sync_data()
        .map_err(Error::io(IoOp::Fdatasync, &path))?;
    disk.sync_dir(dir).map_err(Error::io(IoOp::FsyncDir, dir))?;
    let mut seg = Segment::empty_v2(first_index, path, file);
    seg.len = len;
    Ok(seg)
}

/// After recovery: a last segment in format version 1 is closed (cut to its last record and
/// synced) and a version 2 segment started after it, so that every new record is covered by
/// commit records and a synced-end marker. An empty version 1 last segment is rewritten in
/// place as version 2 (a crash part-way leaves a torn header, which recovery rewrites).
fn upgrade_last_segment<D: Disk>(
    disk: &D,
    dir: &Path,
    config: &LogConfig,
    segments: &mut Vec<Segment<D::File>>,
) -> Result<()> {
    let seg = segments.last_mut().expect("a log always has a segment");
    if seg.version >= SEGMENT_VERSION_2 {
        return Ok(());
    }
    if seg.offsets.is_empty() {
        let first_index = seg.first_index;
        seg.file
            .set_len(0)
            .map_err(Error::io(IoOp::SetLen, &seg.path))?;
        let path = seg.path.clone();
        let old = segments.pop().expect("checked above");
        drop(old.file);
        let mut file = disk.open(&path).map_err(Error::io(IoOp::Open, &path))?;
        file.write_all_at(&format::encode_segment_header_v2(first_index), 0)
            .map_err(Error::io(IoOp::Write, &path))?;
        file.sync_data()
            .map_err(Error::io(IoOp::Fdatasync, &path))?;
        segments.push(Segment::empty_v2(first_index, path, file));
        return Ok(());
    }
    if seg.len > seg.end {
        seg.file
            .set_len(seg.end)
            .map_err(Error::io(IoOp::SetLen, &seg.path))?;
        seg.len = seg.end;
    }
    seg.file
        .sync_data()
        .map_err(Error::io(IoOp::Fdatasync, &seg.path))?;
    let next = seg.next_index();
    segments.push(create_segment(disk, dir, next, config)?);
    Ok(())
}

/// Zero-filled space ahead of the data is topped up in steps of `preallocate_bytes / this`.
const PREALLOCATE_STEPS: u64 = 16;

/// Writes zeros over `[from, to)` of a file, in chunks of at most 1 MiB.
fn write_zeros<F: DiskFile>(file: &mut F, path: &Path, from: u64, to: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(to.saturating_sub(from)) as usize];
    let mut at = from;
    while at < to {
        let n = CHUNK.min(to - at) as usize;
        file.write_all_at(&zeros[..n], at)
            .map_err(Error::io(IoOp::Write, path))?;
        at += n as u64;
    }
    Ok(())
}
