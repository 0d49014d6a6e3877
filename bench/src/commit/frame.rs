//! The probe's wire frames: `[u32 payload length, little-endian][u64 tag, little-endian][payload]`.
//!
//! One shape for all four messages, each sent as one `write` of one buffer:
//! - request (client -> leader): tag = request id, payload = filler, ~200 bytes in all;
//! - reply (leader -> client): tag = request id, no payload;
//! - append (leader -> follower): tag = batch number, payload = the batch's entries;
//! - ack (follower -> leader): tag = batch number, no payload.

use std::io::{self, Read};

/// Bytes before the payload: its length and the tag.
pub const HEADER_BYTES: usize = 12;

/// The header of a frame whose payload is `payload_len` bytes (for a payload built in place
/// after room left for its header).
pub fn header(tag: u64, payload_len: usize) -> [u8; HEADER_BYTES] {
    let len = u32::try_from(payload_len).expect("a frame payload fits in u32");
    let mut header = [0u8; HEADER_BYTES];
    header[0..4].copy_from_slice(&len.to_le_bytes());
    header[4..12].copy_from_slice(&tag.to_le_bytes());
    header
}

/// Appends one frame to `buffer`.
pub fn encode_into(buffer: &mut Vec<u8>, tag: u64, payload: &[u8]) {
    buffer.extend_from_slice(&header(tag, payload.len()));
    buffer.extend_from_slice(payload);
}

/// One frame in a fresh buffer.
pub fn encode(tag: u64, payload: &[u8]) -> Vec<u8> {
    let mut buffer = Vec::with_capacity(HEADER_BYTES + payload.len());
    encode_into(&mut buffer, tag, payload);
    buffer
}

/// The tag and payload length of a header; a payload above `payload_bytes_max` is refused
/// (the reader would otherwise allocate what a broken peer claims).
pub fn decode_header(
    header: &[u8; HEADER_BYTES],
    payload_bytes_max: usize,
) -> io::Result<(u64, usize)> {
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let tag = u64::from_le_bytes(header[4..12].try_into().expect("8 bytes"));
    if len > payload_bytes_max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame payload of {len} bytes, above the bound of {payload_bytes_max}"),
        ));
    }
    Ok((tag, len))
}

/// Reads one frame: its tag, its payload into `payload` (resized). `Ok(None)` when the stream
/// ended cleanly before a header (the peer closed); a stream that ends inside a frame is an error.
pub fn read(
    stream: &mut impl Read,
    payload: &mut Vec<u8>,
    payload_bytes_max: usize,
) -> io::Result<Option<u64>> {
    let mut header = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        match stream.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let (tag, len) = decode_header(&header, payload_bytes_max)?;
    payload.resize(len, 0);
    stream.read_exact(payload)?;
    Ok(Some(tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_as_written() {
        let bytes = encode(0x0102_0304_0506_0708, b"hello");
        assert_eq!(bytes.len(), HEADER_BYTES + 5);
        assert_eq!(&bytes[0..4], &[5, 0, 0, 0]);
        assert_eq!(&bytes[4..12], &[8, 7, 6, 5, 4, 3, 2, 1]);
        let mut payload = Vec::new();
        let tag = read(&mut &bytes[..], &mut payload, 100).unwrap();
        assert_eq!(tag, Some(0x0102_0304_0506_0708));
        assert_eq!(payload, b"hello");
    }

    #[test]
    fn a_header_written_in_place_matches_an_encoded_frame() {
        let mut in_place = vec![0u8; HEADER_BYTES];
        in_place.extend_from_slice(&[3; 10]);
        in_place[..HEADER_BYTES].copy_from_slice(&header(42, 10));
        assert_eq!(in_place, encode(42, &[3; 10]));
    }

    #[test]
    fn frames_back_to_back_read_one_at_a_time() {
        let mut bytes = Vec::new();
        encode_into(&mut bytes, 1, &[]);
        encode_into(&mut bytes, 2, &[9; 300]);
        encode_into(&mut bytes, 3, b"x");
        let mut stream = &bytes[..];
        let mut payload = Vec::new();
        assert_eq!(read(&mut stream, &mut payload, 1000).unwrap(), Some(1));
        assert!(payload.is_empty());
        assert_eq!(read(&mut stream, &mut payload, 1000).unwrap(), Some(2));
        assert_eq!(payload, vec![9; 300]);
        assert_eq!(read(&mut stream, &mut payload, 1000).unwrap(), Some(3));
        assert_eq!(payload, b"x");
        assert_eq!(
            read(&mut stream, &mut payload, 1000).unwrap(),
            None,
            "clean end"
        );
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_an_error() {
        let bytes = encode(7, &[1; 50]);
        let mut payload = Vec::new();
        let in_header = read(&mut &bytes[..5], &mut payload, 100).unwrap_err();
        assert_eq!(in_header.kind(), io::ErrorKind::UnexpectedEof);
        let in_payload = read(&mut &bytes[..20], &mut payload, 100).unwrap_err();
        assert_eq!(in_payload.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_payload_above_the_bound_is_refused_before_reading_it() {
        let bytes = encode(7, &[1; 101]);
        let mut payload = Vec::new();
        let e = read(&mut &bytes[..], &mut payload, 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("101 bytes"), "{e}");
        assert!(
            payload.is_empty(),
            "nothing allocated for the refused payload"
        );
    }
}
