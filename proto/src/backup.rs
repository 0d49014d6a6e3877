//! Backup files: the whole replicated lock state at one revision, with a header and a checksum
//! (docs/storage.md, "Backup files"). Written by `picketctl snapshot save`, read by `picketctl
//! snapshot status` and `picketd restore`, through [`write_file_atomically`] (whole or not at
//! all, mode 0600: it holds session-secret hashes and the audit trail) and [`read_backup_file`].
//!
//! ```text
//! offset  size  field
//! 0       8     magic "PKTBACKU"
//! 8       4     format version, u32 little-endian (BACKUP_FORMAT_VERSION)
//! 12      4     header length H, u32 little-endian (at most BACKUP_HEADER_LEN_MAX)
//! 16      H     picket.v1.BackupHeader (protobuf)
//! 16+H    8     state length S, u64 little-endian
//! 24+H    S     picket.v1.LockSnapshot (protobuf, as in SnapshotRecord.state)
//! 24+H+S  32    SHA-256 of every byte before it
//! ```
//!
//! A file is read only whole: every rule is checked (in the order of [`BackupError`]'s variants)
//! before anything of it is used, so a bad file changes nothing.
//!
//! ```
//! use picket_core::locks::{LockConfig, LockStateMachine};
//! use picket_proto::backup::{decode_backup, encode_backup, BackupError};
//! use picket_proto::proto;
//!
//! let state = LockStateMachine::new(LockConfig::default()).snapshot();
//! let header = proto::BackupHeader { cluster_id: "prod".into(), ..Default::default() };
//! let bytes = encode_backup(&header, state.clone());
//! let backup = decode_backup(&bytes).unwrap();
//! assert_eq!(backup.state, state);
//! assert_eq!(backup.header.cluster_id, "prod");
//! let mut flipped = bytes.clone();
//! flipped[30] ^= 1;
//! assert_eq!(decode_backup(&flipped).unwrap_err().rule(), "backup_checksum");
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};

use picket_core::locks::LockSnapshot;
use prost::Message as _;
use thiserror::Error;

use crate::convert::decode_lock_snapshot;
use crate::proto;

/// The first 8 bytes of every backup file.
pub const BACKUP_MAGIC: &[u8; 8] = b"PKTBACKU";
/// The format this build writes and the only one it reads.
pub const BACKUP_FORMAT_VERSION: u32 = 1;
/// The longest header (far above a 9-member header).
pub const BACKUP_HEADER_LEN_MAX: u32 = 1 << 20;
const PREFIX_LEN: usize = 16;
const CHECKSUM_LEN: usize = 32;

/// A backup file, read and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Backup {
    pub version: u32,
    pub header: proto::BackupHeader,
    pub state: LockSnapshot,
    /// SHA-256 of the file (before the checksum), hex: names the backup in logs and audits.
    pub checksum_hex: String,
}

/// Why bytes are not a backup file this build reads; each names its rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BackupError {
    #[error("backup_empty: the file is empty (a save that never wrote, or the wrong file)")]
    Empty,
    #[error(
        "backup_magic: the file does not start with {BACKUP_MAGIC:?}: not a Picket backup file"
    )]
    Magic,
    #[error("backup_truncated: the file ends at byte {len}, before its end at byte {expected} (cut short: copy it again)")]
    Truncated { len: u64, expected: u64 },
    #[error("backup_format_version: format version {found}; this build reads version {BACKUP_FORMAT_VERSION} only (use the picketd/picketctl release that wrote it)")]
    Version { found: u32 },
    #[error("backup_header_too_long: a header of {len} bytes, at most {BACKUP_HEADER_LEN_MAX}")]
    HeaderTooLong { len: u32 },
    #[error("backup_trailing_bytes: {extra} bytes after the checksum: the file is not one backup")]
    Trailing { extra: u64 },
    #[error(
        "backup_checksum: the SHA-256 of the file does not match its checksum: the file is damaged"
    )]
    Checksum,
    #[error("backup_header: the header does not decode: {0}")]
    Header(String),
    #[error("backup_state: the state does not decode: {0}")]
    State(String),
    #[error("backup_revision_mismatch: the header says revision {header}, the state is at revision {state}")]
    RevisionMismatch { header: u64, state: u64 },
}

impl BackupError {
    /// The stable rule name (the message's first word).
    pub fn rule(&self) -> &'static str {
        match self {
            BackupError::Empty => "backup_empty",
            BackupError::Magic => "backup_magic",
            BackupError::Truncated { .. } => "backup_truncated",
            BackupError::Version { .. } => "backup_format_version",
            BackupError::HeaderTooLong { .. } => "backup_header_too_long",
            BackupError::Trailing { .. } => "backup_trailing_bytes",
            BackupError::Checksum => "backup_checksum",
            BackupError::Header(_) => "backup_header",
            BackupError::State(_) => "backup_state",
            BackupError::RevisionMismatch { .. } => "backup_revision_mismatch",
        }
    }
}

/// The bytes of a backup file of `state` (the header's `revision` and `time_ms` are set from it).
pub fn encode_backup(header: &proto::BackupHeader, state: LockSnapshot) -> Vec<u8> {
    let header = proto::BackupHeader {
        revision: state.revision.0,
        time_ms: state.time.as_millis(),
        ..header.clone()
    };
    let header = header.encode_to_vec();
    let state = proto::LockSnapshot::from(state).encode_to_vec();
    let header_len = u32::try_from(header.len()).expect("a header under 4 GiB");
    assert!(
        header_len <= BACKUP_HEADER_LEN_MAX,
        "header of {header_len} bytes"
    );
    let mut out = Vec::with_capacity(PREFIX_LEN + header.len() + 8 + state.len() + CHECKSUM_LEN);
    out.extend_from_slice(BACKUP_MAGIC);
    out.extend_from_slice(&BACKUP_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(&state);
    let digest = ring::digest::digest(&ring::digest::SHA256, &out);
    out.extend_from_slice(digest.as_ref());
    out
}

/// Reads and checks a whole backup file.
pub fn decode_backup(bytes: &[u8]) -> Result<Backup, BackupError> {
    let len = bytes.len() as u64;
    if bytes.is_empty() {
        return Err(BackupError::Empty);
    }
    let truncated = |expected: u64| BackupError::Truncated { len, expected };
    let magic = bytes.get(..8).ok_or(truncated(PREFIX_LEN as u64))?;
    if magic != BACKUP_MAGIC {
        return Err(BackupError::Magic);
    }
    let word = |at: usize| -> Result<u32, BackupError> {
        let b = bytes.get(at..at + 4).ok_or(truncated(PREFIX_LEN as u64))?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    let version = word(8)?;
    if version != BACKUP_FORMAT_VERSION {
        return Err(BackupError::Version { found: version });
    }
    let header_len = word(12)?;
    if header_len > BACKUP_HEADER_LEN_MAX {
        return Err(BackupError::HeaderTooLong { len: header_len });
    }
    let header_end = PREFIX_LEN + header_len as usize;
    let state_len_at = bytes
        .get(header_end..header_end + 8)
        .ok_or(truncated(header_end as u64 + 8))?;
    let state_len = u64::from_le_bytes(state_len_at.try_into().expect("8 bytes"));
    let expected = (header_end as u64 + 8)
        .saturating_add(state_len)
        .saturating_add(CHECKSUM_LEN as u64);
    if len < expected {
        return Err(truncated(expected));
    }
    if len > expected {
        return Err(BackupError::Trailing {
            extra: len - expected,
        });
    }
    let body_end = bytes.len() - CHECKSUM_LEN;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes[..body_end]);
    if digest.as_ref() != &bytes[body_end..] {
        return Err(BackupError::Checksum);
    }
    let header = proto::BackupHeader::decode(&bytes[PREFIX_LEN..header_end])
        .map_err(|e| BackupError::Header(e.to_string()))?;
    let state = decode_lock_snapshot(&bytes[header_end + 8..body_end])
        .map_err(|e| BackupError::State(e.to_string()))?;
    if header.revision != state.revision.0 {
        return Err(BackupError::RevisionMismatch {
            header: header.revision,
            state: state.revision.0,
        });
    }
    Ok(Backup {
        version,
        header,
        state,
        checksum_hex: hex(digest.as_ref()),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `path` whole or not at all: a temp file beside it (mode 0600), fsync,
/// rename over `path`, fsync of the directory. An existing `path` is replaced only at the
/// rename; a failure before it leaves `path` as it was and removes the temp file.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let written = (|| -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Reads and checks a whole backup file; the error names the file and the rule.
pub fn read_backup_file(path: &Path) -> Result<Backup, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decode_backup(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_core::locks::{Command, Identity, LockConfig, LockStateMachine, SecretHash};
    use picket_core::time::Instant;

    fn sample() -> (proto::BackupHeader, LockSnapshot, Vec<u8>) {
        let mut sm = LockStateMachine::new(LockConfig::default());
        let create = Command::CreateSession {
            ttl_ms: None,
            identity: Identity {
                name: "svc".into(),
                host: "h".into(),
                pid: 1,
                principal: "svc".into(),
            },
            secret_hash: Some(SecretHash([3; 32])),
        };
        sm.apply(Instant::from_millis(5), create).unwrap();
        let header = proto::BackupHeader {
            cluster_id: "prod".into(),
            taken_at_unix_ms: 1_700_000_000_000,
            taken_by_node_id: 2,
            members: vec![proto::BackupMember {
                node_id: 1,
                voter: true,
                client_endpoint: "http://127.0.0.1:1".into(),
            }],
            ..Default::default()
        };
        let state = sm.snapshot();
        let bytes = encode_backup(&header, state.clone());
        (header, state, bytes)
    }

    #[test]
    fn a_backup_reads_back_as_written() {
        let (header, state, bytes) = sample();
        let backup = decode_backup(&bytes).unwrap();
        assert_eq!(backup.state, state);
        assert_eq!(backup.version, BACKUP_FORMAT_VERSION);
        assert_eq!(backup.header.revision, 1);
        assert_eq!(backup.header.time_ms, 5);
        assert_eq!(backup.header.members, header.members);
        assert_eq!(backup.checksum_hex.len(), 64);
    }

    #[test]
    fn every_truncation_is_refused() {
        let (_, _, bytes) = sample();
        for cut in 0..bytes.len() {
            let error = decode_backup(&bytes[..cut]).unwrap_err();
            let expected = if cut == 0 {
                "backup_empty"
            } else {
                "backup_truncated"
            };
            assert_eq!(error.rule(), expected, "cut at {cut}: {error}");
        }
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let (_, _, bytes) = sample();
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert!(decode_backup(&flipped).is_err(), "flip at {at} was read");
        }
    }

    #[test]
    fn another_format_version_is_refused_by_name() {
        let (_, _, mut bytes) = sample();
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        let error = decode_backup(&bytes).unwrap_err();
        assert_eq!(error, BackupError::Version { found: 2 });
        assert!(error.to_string().starts_with("backup_format_version: "));
    }

    #[test]
    fn trailing_bytes_and_foreign_files_are_refused() {
        let (_, _, mut bytes) = sample();
        bytes.push(0);
        assert_eq!(
            decode_backup(&bytes).unwrap_err().rule(),
            "backup_trailing_bytes"
        );
        assert_eq!(
            decode_backup(b"{\"not\": \"a backup\"}")
                .unwrap_err()
                .rule(),
            "backup_magic"
        );
    }
}
