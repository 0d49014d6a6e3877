//! The byte layout of segment headers, records and blob files (hard state, snapshots).
//!
//! All integers are little-endian. Checksums are CRC-32 (IEEE, `crc32fast`). See
//! `docs/storage.md` for the same layout as tables.

/// Size of a segment header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Magic bytes opening every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"PICKTLOG";
/// Magic bytes opening the hard state file.
pub const HARD_STATE_MAGIC: [u8; 8] = *b"PICKTHST";
/// Magic bytes opening a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"PICKTSNP";
/// The format version of hard state and snapshot files (blobs), written and read.
pub const FORMAT_VERSION: u32 = 1;
/// Segment format version 1: header and data records only (still read, never written).
pub const SEGMENT_VERSION_1: u32 = 1;
/// Segment format version 2, the one written: version 1's header followed by two synced-end
/// marker slots, and a commit record closing every group commit.
pub const SEGMENT_VERSION_2: u32 = 2;
/// Where the records of a version 2 segment start: the header, then the two marker slots.
pub const SEGMENT_HEADER_LEN_V2: usize = SEGMENT_HEADER_LEN + 2 * MARKER_SLOT_LEN;
/// Size of one synced-end marker slot of a version 2 segment.
pub const MARKER_SLOT_LEN: usize = 32;
/// The `len` field of a commit record (no data record is this long: `record_size_max` is
/// below it).
pub const COMMIT_LEN_FIELD: u32 = u32::MAX;
/// Size of a commit record's body: the index just after the last record it closes.
pub const COMMIT_BODY_LEN: usize = 8;
/// Size of a whole commit record frame.
pub const COMMIT_FRAME_LEN: usize = RECORD_HEADER_LEN + COMMIT_BODY_LEN;
/// Size of a record's frame header (`len | crc32`).
pub const RECORD_HEADER_LEN: usize = 8;
/// Size of a blob file header.
pub const BLOB_HEADER_LEN: usize = 32;

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Encodes a version 1 segment header for a segment whose first record has index
/// `first_index` (tests and the fuzzer build old logs with it; the log writes version 2).
pub fn encode_segment_header(first_index: u64) -> [u8; SEGMENT_HEADER_LEN] {
    encode_segment_header_version(first_index, SEGMENT_VERSION_1)
}

/// Encodes the version 2 header of a new segment: the fixed header and two empty marker slots.
pub fn encode_segment_header_v2(first_index: u64) -> [u8; SEGMENT_HEADER_LEN_V2] {
    let mut h = [0u8; SEGMENT_HEADER_LEN_V2];
    h[..SEGMENT_HEADER_LEN].copy_from_slice(&encode_segment_header_version(
        first_index,
        SEGMENT_VERSION_2,
    ));
    h
}

fn encode_segment_header_version(first_index: u64, version: u32) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..20].copy_from_slice(&first_index.to_le_bytes());
    // 20..28 reserved, zero.
    let crc = crc32fast::hash(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Index of the segment's first record.
    pub first_index: u64,
    /// [`SEGMENT_VERSION_1`] or [`SEGMENT_VERSION_2`].
    pub version: u32,
    /// Where the segment's records start.
    pub data_start: usize,
    /// Version 2: the newest valid synced-end marker (`None`: no slot written yet, or both
    /// damaged). Version 1: always `None`.
    pub marker: Option<Marker>,
}

/// A synced-end marker: every byte of the segment below `synced_end` was durable (whole records
/// ending exactly there) when it was written. Written after each group commit's fdatasync, it
/// becomes durable with the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Grows by one per marker written; the slot written is `seq % 2`.
    pub seq: u64,
    /// The synced end of the segment's data.
    pub synced_end: u64,
}

/// Encodes one marker slot (its position in the file is [`marker_slot_offset`]).
pub fn encode_marker(marker: Marker) -> [u8; MARKER_SLOT_LEN] {
    let mut m = [0u8; MARKER_SLOT_LEN];
    m[0..8].copy_from_slice(&marker.seq.to_le_bytes());
    m[8..16].copy_from_slice(&marker.synced_end.to_le_bytes());
    // 16..28 reserved, zero.
    let crc = crc32fast::hash(&m[0..28]);
    m[28..32].copy_from_slice(&crc.to_le_bytes());
    m
}

/// Decodes one marker slot: `None` when it is empty (all zero), torn or damaged.
pub fn decode_marker(slot: &[u8]) -> Option<Marker> {
    let seq = u64_at(slot, 0);
    if seq == 0 || slot[16..28] != [0u8; 12] || crc32fast::hash(&slot[0..28]) != u32_at(slot, 28) {
        return None;
    }
    Some(Marker {
        seq,
        synced_end: u64_at(slot, 8),
    })
}

/// Byte offset of the slot a marker with sequence number `seq` is written to.
pub fn marker_slot_offset(seq: u64) -> u64 {
    (SEGMENT_HEADER_LEN + MARKER_SLOT_LEN * (seq % 2) as usize) as u64
}

/// Decodes a segment header of either version, or says what is wrong with it.
pub fn decode_segment_header_any(buf: &[u8]) -> Result<SegmentHeader, &'static str> {
    let first_index = decode_fixed_header(buf)?;
    match u32_at(buf, 8) {
        SEGMENT_VERSION_1 => Ok(SegmentHeader {
            first_index,
            version: SEGMENT_VERSION_1,
            data_start: SEGMENT_HEADER_LEN,
            marker: None,
        }),
        SEGMENT_VERSION_2 => {
            if buf.len() < SEGMENT_HEADER_LEN_V2 {
                return Err("file shorter than a version 2 segment header");
            }
            let slots = [SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN + MARKER_SLOT_LEN];
            let marker = slots
                .iter()
                .filter_map(|&at| decode_marker(&buf[at..at + MARKER_SLOT_LEN]))
                .max_by_key(|m| m.seq);
            Ok(SegmentHeader {
                first_index,
                version: SEGMENT_VERSION_2,
                data_start: SEGMENT_HEADER_LEN_V2,
                marker,
            })
        }
        _ => Err("unknown format version"),
    }
}

/// Whether a last segment whose header does not decode is one whose creation was torn: shorter
/// than a header, all zero, or a valid version 2 fixed header cut before the end of its marker
/// slots. Its header is rewritten; any other bad header is corruption.
pub fn is_torn_segment_header(buf: &[u8]) -> bool {
    buf.len() < SEGMENT_HEADER_LEN
        || buf.iter().all(|&b| b == 0)
        || (buf.len() < SEGMENT_HEADER_LEN_V2
            && decode_fixed_header(buf).is_ok()
            && u32_at(buf, 8) == SEGMENT_VERSION_2)
}

/// Decodes a version 1 segment header, returning its first index, or what is wrong with it.
pub fn decode_segment_header(buf: &[u8]) -> Result<u64, &'static str> {
    let first_index = decode_fixed_header(buf)?;
    if u32_at(buf, 8) != SEGMENT_VERSION_1 {
        return Err("unknown format version");
    }
    Ok(first_index)
}

fn decode_fixed_header(buf: &[u8]) -> Result<u64, &'static str> {
    if buf.len() < SEGMENT_HEADER_LEN {
        return Err("file shorter than a segment header");
    }
    if buf[0..8] != SEGMENT_MAGIC {
        return Err("wrong magic");
    }
    if crc32fast::hash(&buf[0..28]) != u32_at(buf, 28) {
        return Err("header checksum mismatch");
    }
    if buf[20..28] != [0u8; 8] {
        return Err("reserved bytes not zero");
    }
    Ok(u64_at(buf, 12))
}

/// The checksum of a record: CRC-32 of its length field followed by its payload.
pub fn record_crc(len_field: [u8; 4], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len_field);
    h.update(payload);
    h.finalize()
}

/// Appends the frame of one record (`len | crc32 | payload`) to `out`.
pub fn encode_record(out: &mut Vec<u8>, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("record length checked against the maximum");
    let len_field = len.to_le_bytes();
    out.extend_from_slice(&len_field);
    out.extend_from_slice(&record_crc(len_field, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Appends a commit record closing a group commit: `COMMIT_LEN_FIELD | crc32 | next_index`,
/// where `next_index` is the index just after the last record written before it.
pub fn encode_commit(out: &mut Vec<u8>, next_index: u64) {
    let len_field = COMMIT_LEN_FIELD.to_le_bytes();
    let body = next_index.to_le_bytes();
    out.extend_from_slice(&len_field);
    out.extend_from_slice(&record_crc(len_field, &body).to_le_bytes());
    out.extend_from_slice(&body);
}

/// A frame that checks out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A data record ending at this offset.
    Record {
        /// Offset just past the record.
        end: usize,
    },
    /// A commit record (version 2 only) ending at `end`, closing the records before it.
    Commit {
        /// Offset just past the commit record.
        end: usize,
        /// The index just after the last record it closes.
        next_index: u64,
    },
}

impl Frame {
    /// Offset just past the frame.
    pub fn end(self) -> usize {
        match self {
            Frame::Record { end } | Frame::Commit { end, .. } => end,
        }
    }
}

/// Checks the frame at `buf[off..]` of a segment of `version`: a data record (as
/// [`check_record`]) or, in version 2, a commit record.
pub fn check_frame(
    buf: &[u8],
    off: usize,
    max_len: u32,
    version: u32,
) -> Result<Frame, &'static str> {
    if version >= SEGMENT_VERSION_2
        && buf.len() - off >= 4
        && buf[off..off + 4] == COMMIT_LEN_FIELD.to_le_bytes()
    {
        let end = off + COMMIT_FRAME_LEN;
        if end > buf.len() {
            return Err("commit record extends past the end of the file");
        }
        let body = &buf[off + RECORD_HEADER_LEN..end];
        if record_crc(COMMIT_LEN_FIELD.to_le_bytes(), body) != u32_at(buf, off + 4) {
            return Err("commit record checksum mismatch");
        }
        return Ok(Frame::Commit {
            end,
            next_index: u64_at(body, 0),
        });
    }
    check_record(buf, off, max_len).map(|end| Frame::Record { end })
}

/// Checks the record framed at `buf[off..]`; returns the offset just past it, or why it is bad.
///
/// A record is good when its header is complete, its length is at most `max_len`, its payload
/// lies inside `buf`, and the checksum matches.
pub fn check_record(buf: &[u8], off: usize, max_len: u32) -> Result<usize, &'static str> {
    if buf.len() - off < RECORD_HEADER_LEN {
        return Err("incomplete record header");
    }
    let len_field: [u8; 4] = buf[off..off + 4].try_into().expect("4 bytes");
    let len = u32::from_le_bytes(len_field);
    if len > max_len {
        return Err("length above the maximum record size");
    }
    let start = off + RECORD_HEADER_LEN;
    let end = start + len as usize;
    if end > buf.len() {
        return Err("record extends past the end of the file");
    }
    if record_crc(len_field, &buf[start..end]) != u32_at(buf, off + 4) {
        return Err("record checksum mismatch");
    }
    Ok(end)
}

/// What [`scan_for_valid_record`] found after a bad record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanAhead {
    /// A record that passes [`check_record`] starts at this offset.
    Valid(usize),
    /// No later offset starts a good record.
    NoneFound,
    /// The hashing budget ran out first: neither could be established.
    BudgetExhausted,
}

/// Looks for an offset in `(from, buf.len())` that starts a record passing [`check_record`].
///
/// Used to tell a torn tail (nothing valid after the bad record) from corruption (a valid record
/// follows). Eight zero bytes can never start a good record (the checksum of a zero length is
/// not zero), so runs of zeros, the usual shape of a torn tail, are skipped cheaply.
///
/// Each candidate with a plausible length costs a checksum of that length, so adversarial bytes
/// could make the scan quadratic; the bytes hashed are bounded by `16 * (buf.len() - from)` plus
/// 256 MiB, after which the answer is [`ScanAhead::BudgetExhausted`] (the caller reports
/// corruption: it must not cut records it could not prove torn).
pub fn scan_for_valid_record(buf: &[u8], from: usize, max_len: u32, version: u32) -> ScanAhead {
    let mut budget = 16 * (buf.len() - from) as u64 + (256 << 20);
    let mut p = from + 1;
    while p + RECORD_HEADER_LEN <= buf.len() {
        if buf[p..p + RECORD_HEADER_LEN] != [0u8; RECORD_HEADER_LEN] {
            if version >= SEGMENT_VERSION_2 && buf[p..p + 4] == COMMIT_LEN_FIELD.to_le_bytes() {
                // A commit record is valid data after the bad record too (8 bytes hashed).
                if check_frame(buf, p, max_len, version).is_ok() {
                    return ScanAhead::Valid(p);
                }
                p += 1;
                continue;
            }
            let len = u64::from(u32::from_le_bytes(
                buf[p..p + 4].try_into().expect("4 bytes"),
            ));
            let plausible = len <= u64::from(max_len)
                && p as u64 + RECORD_HEADER_LEN as u64 + len <= buf.len() as u64;
            if plausible {
                let cost = len + 4;
                if cost > budget {
                    return ScanAhead::BudgetExhausted;
                }
                budget -= cost;
                if check_record(buf, p, max_len).is_ok() {
                    return ScanAhead::Valid(p);
                }
            }
        }
        p += 1;
    }
    ScanAhead::NoneFound
}

/// The decoded header of a hard state or snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobHeader {
    /// Snapshot index (0 for the hard state).
    pub index: u64,
    /// Payload length.
    pub len: u64,
}

/// Encodes a whole blob file: header and payload.
pub fn encode_blob(magic: [u8; 8], index: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOB_HEADER_LEN + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out[0..28]);
    h.update(payload);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Decodes a whole blob file, checking magic, version, length and checksum.
pub fn decode_blob(magic: [u8; 8], buf: &[u8]) -> Result<(BlobHeader, &[u8]), &'static str> {
    if buf.len() < BLOB_HEADER_LEN {
        return Err("file shorter than its header");
    }
    if buf[0..8] != magic {
        return Err("wrong magic");
    }
    if u32_at(buf, 8) != FORMAT_VERSION {
        return Err("unknown format version");
    }
    let header = BlobHeader {
        index: u64_at(buf, 12),
        len: u64_at(buf, 20),
    };
    if header.len != (buf.len() - BLOB_HEADER_LEN) as u64 {
        return Err("length field differs from the file length");
    }
    let payload = &buf[BLOB_HEADER_LEN..];
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[0..28]);
    h.update(payload);
    if h.finalize() != u32_at(buf, 28) {
        return Err("checksum mismatch");
    }
    Ok((header, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_rejects_flips() {
        let h = encode_segment_header(42);
        assert_eq!(decode_segment_header(&h), Ok(42));
        for i in 0..SEGMENT_HEADER_LEN {
            let mut bad = h;
            bad[i] ^= 0x10;
            assert!(decode_segment_header(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(decode_segment_header(&h[..31]).is_err());
    }

    #[test]
    fn record_round_trips_and_zeros_are_never_a_record() {
        let mut buf = Vec::new();
        encode_record(&mut buf, b"hello");
        encode_record(&mut buf, b"");
        assert_eq!(check_record(&buf, 0, 64), Ok(13));
        assert_eq!(check_record(&buf, 13, 64), Ok(21));
        assert_eq!(
            check_record(&buf, 0, 4),
            Err("length above the maximum record size")
        );
        assert!(check_record(&[0u8; 8], 0, 64).is_err());
        assert_eq!(
            scan_for_valid_record(&buf, 0, 64, SEGMENT_VERSION_1),
            ScanAhead::Valid(13)
        );
        assert_eq!(
            scan_for_valid_record(&buf, 13, 64, SEGMENT_VERSION_1),
            ScanAhead::NoneFound
        );
    }

    #[test]
    fn scan_ahead_gives_up_on_adversarial_bytes_instead_of_going_quadratic() {
        // Every offset offers a plausible length that reaches near the end of the buffer.
        let n = 1 << 22;
        let mut buf = vec![0u8; n];
        for (i, chunk) in buf.chunks_mut(4).enumerate() {
            let len = (n - 4 * i).saturating_sub(64) as u32;
            chunk.copy_from_slice(&len.to_le_bytes());
        }
        assert_eq!(
            scan_for_valid_record(&buf, 0, u32::MAX, SEGMENT_VERSION_2),
            ScanAhead::BudgetExhausted
        );
    }

    #[test]
    fn blob_round_trips_and_rejects_damage() {
        let blob = encode_blob(SNAPSHOT_MAGIC, 7, b"state");
        let (h, p) = decode_blob(SNAPSHOT_MAGIC, &blob).expect("valid");
        assert_eq!((h.index, h.len, p), (7, 5, &b"state"[..]));
        assert!(decode_blob(HARD_STATE_MAGIC, &blob).is_err());
        for i in 0..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 1;
            assert!(
                decode_blob(SNAPSHOT_MAGIC, &bad).is_err(),
                "flip at {i} accepted"
            );
        }
        assert!(decode_blob(SNAPSHOT_MAGIC, &blob[..blob.len() - 1]).is_err());
    }
}
