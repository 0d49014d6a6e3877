//! Typed errors of the storage crate.
//!
//! Three kinds, kept apart on purpose:
//! - [`Error::Io`]: the operating system refused (disk full, permission, failed fsync).
//! - [`Error::Corruption`]: the bytes on disk break a rule of the format in a way a crash cannot
//!   explain; it names the file and the byte offset and is never repaired silently.
//! - everything else: a caller's mistake, rejected before anything was changed.

use std::io;
use std::path::PathBuf;

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in `picket-storage`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An IO call failed. `op` says which one.
    #[error("io error during {op} on {}: {source}", path.display())]
    Io {
        /// The operation that failed.
        op: IoOp,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The on-disk data is damaged in a way a crash cannot have caused.
    #[error("corruption in {} at byte offset {offset}: {kind}", file.display())]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset in that file where the damage starts.
        offset: u64,
        /// What rule was broken.
        kind: CorruptionKind,
    },
    /// An earlier write or fsync failed; the state of the files is unknown, so the log refuses
    /// further work until it is reopened (and recovered) from disk.
    #[error("log is poisoned by an earlier IO failure; reopen it to recover")]
    Poisoned,
    /// A record larger than the configured maximum.
    #[error("record of {len} bytes exceeds the maximum record size of {max} bytes")]
    RecordTooLarge {
        /// The record's length.
        len: usize,
        /// The configured maximum.
        max: u32,
    },
    /// A batch with more records or bytes than the configured maximum.
    #[error("batch of {records} records / {bytes} bytes exceeds the maximum of {max_records} records / {max_bytes} bytes")]
    BatchTooLarge {
        /// Records in the batch.
        records: usize,
        /// Bytes of payload in the batch.
        bytes: u64,
        /// Configured maximum number of records.
        max_records: usize,
        /// Configured maximum payload bytes.
        max_bytes: u64,
    },
    /// An append whose first index is not the log's next index (indexes are contiguous).
    #[error("append at index {got}, but the next index of the log is {expected}")]
    WrongIndex {
        /// The index the log expects next.
        expected: u64,
        /// The index the caller gave.
        got: u64,
    },
    /// A read, truncate or drop outside the indexes the log holds.
    #[error("index {index} is outside the log, which holds [{first}, {last_plus_one})")]
    OutOfRange {
        /// The offending index.
        index: u64,
        /// First index held.
        first: u64,
        /// One past the last index held.
        last_plus_one: u64,
    },
    /// A snapshot whose index is below the newest one on disk.
    #[error("snapshot at index {index} is older than the newest snapshot at index {newest}")]
    SnapshotNotNewer {
        /// The index given.
        index: u64,
        /// The newest snapshot's index.
        newest: u64,
    },
    /// A hard state or snapshot payload larger than the configured maximum.
    #[error("{what} of {len} bytes exceeds the maximum of {max} bytes")]
    BlobTooLarge {
        /// `"hard state"` or `"snapshot"`.
        what: &'static str,
        /// Its length.
        len: u64,
        /// The configured maximum.
        max: u64,
    },
    /// A configuration value out of its allowed range.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Which rule of the on-disk format was broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorruptionKind {
    /// A segment, hard state or snapshot header is malformed (magic, version, checksum).
    #[error("bad header: {0}")]
    BadHeader(&'static str),
    /// A segment's header names a different first index than its file name.
    #[error("header first index {header} differs from the file name's {name}")]
    NameMismatch {
        /// Index in the header.
        header: u64,
        /// Index in the file name.
        name: u64,
    },
    /// A file name in the log directory that is not `<20 digits>.seg`.
    #[error("unexpected file name")]
    BadFileName,
    /// A segment does not start right after the previous one ends.
    #[error("segment sequence gap: expected first index {expected}, found {found}")]
    Gap {
        /// The index that should come next.
        expected: u64,
        /// The first index of the segment found.
        found: u64,
    },
    /// A record that fails its checksum or framing in a place a torn write cannot explain
    /// (a segment that is not the last one).
    #[error("bad record: {0}")]
    BadRecord(&'static str),
    /// A bad record in the last segment with a valid record after it.
    #[error("bad record ({reason}) followed by a valid record at offset {valid_at}")]
    BadRecordBeforeValid {
        /// Why the record at the reported offset is bad.
        reason: &'static str,
        /// Offset of a later record that checks out.
        valid_at: u64,
    },
    /// A bad record in the last segment after which the scan for a valid record ran out of its
    /// work budget: it could not be proven a torn tail, so it is not cut.
    #[error("bad record ({reason}); the rest of the file could not be proven torn within the scan budget")]
    TailUnverified {
        /// Why the record at the reported offset is bad.
        reason: &'static str,
    },
    /// A bad record (or a file that ends) below the synced end of the last segment (format
    /// version 2): it was written, synced, and then damaged, so it is never cut as a torn write.
    /// The replica's acknowledged state is gone (the server starts in durable-state-lost mode).
    #[error(
        "bad record ({reason}) below the synced end {synced_end}: written, synced, then damaged"
    )]
    SyncedRecordDamaged {
        /// What is wrong.
        reason: &'static str,
        /// The segment's synced end (from its marker).
        synced_end: u64,
    },
    /// A payload whose checksum does not match (hard state, snapshot, or a record found on read).
    #[error("checksum mismatch")]
    Checksum,
}

/// The IO call behind an [`Error::Io`]: what failed, as a type (a failed sync is told apart by
/// [`IoOp::is_sync`], not by the words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    Create,
    CreateDirAll,
    Fdatasync,
    FsyncDir,
    List,
    Open,
    Read,
    RemoveFile,
    Rename,
    SetLen,
    Stat,
    Write,
    /// A write that is durable when it returns (`pwritev2` with `RWF_DSYNC`).
    WriteDsync,
    SnapshotSave,
}

impl IoOp {
    /// The operation in words (`fdatasync`, `fsync dir`, ...), as the error message says it.
    pub fn as_str(self) -> &'static str {
        match self {
            IoOp::Create => "create",
            IoOp::CreateDirAll => "create_dir_all",
            IoOp::Fdatasync => "fdatasync",
            IoOp::FsyncDir => "fsync dir",
            IoOp::List => "list",
            IoOp::Open => "open",
            IoOp::Read => "read",
            IoOp::RemoveFile => "remove_file",
            IoOp::Rename => "rename",
            IoOp::SetLen => "set_len",
            IoOp::Stat => "stat",
            IoOp::Write => "write",
            IoOp::WriteDsync => "write (RWF_DSYNC)",
            IoOp::SnapshotSave => "snapshot save",
        }
    }

    /// A file's `fdatasync` (or a write that syncs itself) or a directory's `fsync`: what `picket_storage_fsync_errors_total`
    /// counts (after one, the data on disk is unknown and the replica stops).
    pub fn is_sync(self) -> bool {
        matches!(self, IoOp::Fdatasync | IoOp::FsyncDir | IoOp::WriteDsync)
    }
}

impl std::fmt::Display for IoOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    pub(crate) fn io(op: IoOp, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    pub(crate) fn corruption(file: impl Into<PathBuf>, offset: u64, kind: CorruptionKind) -> Error {
        Error::Corruption {
            file: file.into(),
            offset,
            kind,
        }
    }
}
